//! The import rules of the source tree, read from the source itself:
//! * `http::h1` (HTTP/1.1 on the wire) and the accept loop reach the application only
//!   through `http::service`: they import no route, file, track, access or log module;
//! * `http::service` is a leaf: it imports nothing else from the crate;
//! * no two modules of `http` import each other, directly or around a cycle;
//! * the crate's top-level modules are layered (`src/lib.rs` has the table): each imports
//!   only from its own layer or below, so the daemon's side never imports `admin` (the
//!   CLI), and no two top-level modules import each other, directly or around a cycle.
//!
//! A module's imports are the `crate::…`, `super::…` and `crate::http::…` paths its files
//! name; a file's module is its place under `src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crate's source files, each with its module path (`http::h1::conn`).
fn sources() -> Vec<(Vec<String>, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut pending = vec![root.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
        .into_iter()
        .filter(|path: &PathBuf| !path.starts_with(root.join("bin")))
        .map(|path| {
            let relative = path.strip_prefix(&root).expect("under src");
            let mut module: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if module
                .last()
                .is_some_and(|last| last == "mod" || last == "lib")
            {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).expect("read source");
            (module, text)
        })
        .collect()
}

/// The code of a file before its unit tests (tests may reach anywhere).
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |at| &text[..at])
}

/// Every module path a file's code names, as absolute paths (`["http", "file"]`), from
/// `crate::a::b`, `super::a` (relative to `module`) and grouped forms `x::{a, b}`.
fn imports(module: &[String], text: &str) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    let code: String = without_tests(text)
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    for (anchor, base) in [
        ("crate::", Vec::new()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
    ] {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(anchor) {
            let preceded_by_ident = rest[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            rest = &rest[at + anchor.len()..];
            if preceded_by_ident {
                continue;
            }
            for path in expand(rest) {
                let mut full = base.clone();
                full.extend(path);
                found.insert(full);
            }
        }
    }
    found
}

/// The paths at the start of `text` (after an anchor): `a::b::C` or `a::{b, c::d}`.
fn expand(text: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = text;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        prefix.push(rest[..end].to_string());
        rest = &rest[end..];
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => return vec![prefix],
        }
    }
    if let Some(group) = rest.strip_prefix('{') {
        let close = group.find('}').unwrap_or(group.len());
        return group[..close]
            .split(',')
            .filter_map(|item| {
                let item = item.trim();
                let name: String = item
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                (!name.is_empty() && name != "self").then(|| {
                    let mut path = prefix.clone();
                    path.push(name);
                    path
                })
            })
            .chain(std::iter::once(prefix.clone()))
            .collect();
    }
    vec![prefix]
}

/// The direct child of `parent` a path goes through, if it names one of `children`.
fn child_of<'a>(
    path: &[String],
    parent: &[&str],
    children: &'a BTreeSet<String>,
) -> Option<&'a String> {
    let inside = path.len() > parent.len() && path.iter().zip(parent).all(|(a, b)| a == b);
    inside.then(|| children.get(&path[parent.len()])).flatten()
}

#[test]
fn h1_reaches_the_application_only_through_the_service_seam_and_http_has_no_cycles() {
    let sources = sources();
    let http_children: BTreeSet<String> = sources
        .iter()
        .filter(|(module, _)| module.len() >= 2 && module[0] == "http")
        .map(|(module, _)| module[1].clone())
        .collect();
    let application = [
        "access",
        "access_log",
        "app",
        "dispatch",
        "file",
        "hot",
        "metrics",
        "ops",
        "routes",
        "track",
        "error",
    ];
    let mut violations = Vec::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in &sources {
        let found = imports(module, text);
        let name = module.join("::");
        let is = |parts: &[&str]| {
            module.len() >= parts.len() && module.iter().zip(parts).all(|(a, b)| a == b)
        };
        for path in &found {
            let target = path.join("::");
            if is(&["http", "service"]) {
                let inside = path.len() >= 2 && path[0] == "http" && path[1] == "service";
                if !inside {
                    violations.push(format!(
                        "{name} (the service seam, a leaf) imports {target}"
                    ));
                }
            }
            if is(&["http", "h1"]) || is(&["http", "accept"]) {
                if let Some(child) = child_of(path, &["http"], &http_children)
                    && application.contains(&child.as_str())
                {
                    violations.push(format!("{name} imports the application: {target}"));
                }
                let above_http = !path.is_empty()
                    && [
                        "catalog", "follow", "admin", "daemon", "server", "media", "signing",
                    ]
                    .contains(&path[0].as_str());
                if above_http && !is(&["http", "accept"]) {
                    violations.push(format!("{name} imports {target}"));
                }
            }
            if module.len() >= 2
                && module[0] == "http"
                && let Some(child) = child_of(path, &["http"], &http_children)
                && *child != module[1]
            {
                graph
                    .entry(module[1].clone())
                    .or_default()
                    .insert(child.clone());
            }
        }
    }
    // Cycles: a module that can reach itself through others.
    violations.extend(cycles(&graph, "http::"));
    violations.sort();
    violations.dedup();
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// The crate's layers, lowest first (`src/lib.rs`). Every top-level module is in one.
const LAYERS: [&[&str]; 7] = [
    &[
        "config",
        "media",
        "signing",
        "redis_link",
        "blocking_http",
        "varnish",
        "timing",
        "allocator",
        "cli",
    ],
    &["catalog"],
    &["follow"],
    &["http"],
    &["server"],
    &["daemon"],
    &["admin"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// What breaks the layering, given each top-level module's imports of the others.
fn layering_violations(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut violations = Vec::new();
    for (from, targets) in graph {
        let Some(from_layer) = layer_of(from) else {
            violations.push(format!(
                "{from} is in no layer (add it to LAYERS and lib.rs)"
            ));
            continue;
        };
        for to in targets {
            match layer_of(to) {
                Some(to_layer) if to_layer > from_layer => {
                    violations.push(format!("{from} imports {to}, a layer above it"));
                }
                Some(_) => {}
                None => violations.push(format!("{to} is in no layer (add it to LAYERS)")),
            }
        }
    }
    violations.extend(cycles(graph, ""));
    violations
}

/// Every cycle of `graph`, as `import cycle: a -> b -> a`.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>, prefix: &str) -> Vec<String> {
    let mut found = Vec::new();
    for start in graph.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, trail)) = stack.pop() {
            for next in graph.get(&at).into_iter().flatten() {
                if next == start {
                    let mut cycle = trail.clone();
                    cycle.push(start.clone());
                    let arrow = format!(" -> {prefix}");
                    found.push(format!("import cycle: {prefix}{}", cycle.join(&arrow)));
                } else if seen.insert(next.clone()) {
                    let mut longer = trail.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    found
}

/// Each top-level module's imports of the other top-level modules.
fn top_level_graph(sources: &[(Vec<String>, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in sources {
        let Some(from) = module.first() else { continue };
        let entry = graph.entry(from.clone()).or_default();
        for path in imports(module, text) {
            if let Some(to) = path.first()
                && to != from
            {
                entry.insert(to.clone());
            }
        }
    }
    graph
}

#[test]
fn the_top_level_modules_are_layered_and_nothing_below_admin_imports_it() {
    let graph = top_level_graph(&sources());
    let mut violations = layering_violations(&graph);
    for (from, targets) in &graph {
        if from != "admin" && targets.contains("admin") {
            violations.push(format!("{from} imports admin (the CLI)"));
        }
    }
    violations.sort();
    violations.dedup();
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    assert!(
        graph.contains_key("follow") && graph.contains_key("admin"),
        "the reader found the modules: {:?}",
        graph.keys()
    );
}

#[test]
fn a_planted_import_of_admin_in_the_follower_is_caught() {
    // The rule above, shown failing: the follower reaching for the CLI's code (what it
    // did before the rebuild moved to `catalog::rebuild`).
    let mut sources = sources();
    for (module, text) in &mut sources {
        if module.as_slice() == ["follow"] {
            text.insert_str(0, "use crate::admin::reindex;\n");
        }
    }
    let violations = layering_violations(&top_level_graph(&sources));
    assert!(
        violations.contains(&"follow imports admin, a layer above it".to_string()),
        "{violations:?}"
    );
    assert!(
        violations
            .iter()
            .any(|v| v.starts_with("import cycle:") && v.contains("follow")),
        "admin imports follow, so the plant also closes a cycle: {violations:?}"
    );
}

#[test]
fn the_import_reader_sees_grouped_relative_and_absolute_paths() {
    let module: Vec<String> = ["http", "h1", "conn"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let text = "use super::{framing, head::Thing};\nuse crate::http::{file::x, access_log};\n\
fn f() { crate::catalog::y(); }\n// use crate::hidden::z;\n#[cfg(test)]\nuse crate::tests_only;";
    let found: BTreeSet<String> = imports(&module, text)
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    for expected in [
        "http::h1::framing",
        "http::h1::head",
        "http::file",
        "http::access_log",
        "catalog::y",
    ] {
        assert!(found.contains(expected), "{expected} in {found:?}");
    }
    assert!(
        !found
            .iter()
            .any(|p| p.contains("hidden") || p.contains("tests_only")),
        "{found:?}"
    );
}
