//! The docs a person finds their way in: every relative link in `README.md` and `docs/`
//! leads to a file that exists (and to a heading that exists, when it names one), and
//! every repository path the docs name in backticks exists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md` and every page under `docs/`.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The anchors GitHub gives a page's headings: lowercase, punctuation dropped, spaces as
/// dashes.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        found.insert(slug);
    }
    found
}

/// Every `[text](target)` target outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            found.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    found
}

/// Every backticked repository path (`src/…`, `deploy/…`), without a trailing `:line`.
fn named_paths(text: &str) -> Vec<String> {
    const TOP: [&str; 9] = [
        "src/",
        "tests/",
        "deploy/",
        "scripts/",
        "bench/",
        "docs/",
        "fuzz/",
        "examples/",
        ".ci/",
    ];
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|quoted| quoted.split(':').next().unwrap_or_default().trim())
        .filter(|quoted| {
            TOP.iter().any(|top| quoted.starts_with(top))
                && !quoted.contains(char::is_whitespace)
                && !quoted.contains(['*', '{', '<', '$'])
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn every_link_and_path_the_docs_name_exists() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        let shown = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        let dir = page.parent().unwrap_or(Path::new("."));
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match link.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !target.exists() {
                broken.push(format!("{shown}: link to {link}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor
                && target.extension().is_some_and(|e| e == "md")
            {
                let headings = anchors(&std::fs::read_to_string(&target).expect("read target"));
                if !headings.contains(anchor) {
                    broken.push(format!("{shown}: link to {link}: no such heading"));
                }
            }
        }
        for path in named_paths(&text) {
            if !root().join(&path).exists() {
                broken.push(format!("{shown}: names `{path}`, which does not exist"));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_checker_finds_links_headings_and_paths() {
    let text =
        "# Running it\n[a](docs/x.md#the-stack) `src/lib.rs:10` `src/*.rs`\n```\n[no](nope)\n```";
    assert_eq!(links(text), ["docs/x.md#the-stack"]);
    assert!(anchors(text).contains("running-it"));
    assert_eq!(named_paths(text), ["src/lib.rs"]);
}
