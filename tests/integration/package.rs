//! The Debian package as `apt install` would see it: built by `scripts/package.sh`
//! (cargo-deb), checked with `dpkg-deb` and `lintian`, unpacked and run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::harness::{repo_script, succeeded, tempdir};

/// Builds the package once per test run (a no-op rebuild when `scripts/test.sh` already
/// ran `scripts/package.sh`) and returns its path.
fn package() -> &'static Path {
    static DEB: OnceLock<PathBuf> = OnceLock::new();
    DEB.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let output = repo_script("scripts/package.sh")
            .env_remove("MUSICD_CONFIG")
            // The suite's build: what ships is the `dist` profile, the same code linked
            // with LTO, which would take minutes more to build here.
            .env("BUILD_PROFILE", "release")
            .output()
            .expect("scripts/package.sh");
        let stdout = succeeded(&output);
        let deb = stdout
            .lines()
            .last()
            .expect("package.sh prints the .deb path");
        root.join(deb.trim())
    })
}

fn dpkg_deb(args: &[&str]) -> String {
    let output = Command::new("dpkg-deb")
        .args(args)
        .arg(package())
        .output()
        .expect("dpkg-deb");
    succeeded(&output)
}

/// A file of the package's control archive (`conffiles`, `postinst`, ...).
fn control_file(name: &str) -> String {
    let output = Command::new("dpkg-deb")
        .arg("--info")
        .arg(package())
        .arg(name)
        .output()
        .expect("dpkg-deb --info");
    succeeded(&output)
}

/// One control field's value (`Depends: a, b` → `a, b`).
fn control_field(control: &str, name: &str) -> String {
    control
        .lines()
        .find_map(|line| line.trim().strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no {name} in\n{control}"))
        .to_owned()
}

#[test]
fn the_package_metadata_says_what_it_is_and_needs() {
    let control = dpkg_deb(&["--field"]);
    assert_eq!(control_field(&control, "Package"), "musicd");
    assert_eq!(
        control_field(&control, "Version"),
        format!("{}-1", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(control_field(&control, "Section"), "net");
    let depends = control_field(&control, "Depends");
    // adduser for the system user, libc from the binaries' own symbols ($auto).
    assert!(depends.contains("adduser"), "{depends}");
    assert!(depends.contains("libc6"), "{depends}");
    // The configuration is a conffile: an upgrade keeps the operator's edits.
    let conffiles = control_file("conffiles");
    assert!(
        conffiles
            .lines()
            .any(|line| line == "/etc/musicd/musicd.toml"),
        "{conffiles}"
    );
}

#[test]
fn the_package_holds_binaries_units_config_manuals_and_completions() {
    let contents = dpkg_deb(&["--contents"]);
    let entry = |path: &str| {
        contents
            .lines()
            .find(|line| line.ends_with(&format!(" ./{path}")))
            .unwrap_or_else(|| panic!("{path} not in\n{contents}"))
            .to_owned()
    };
    for binary in ["usr/bin/musicd", "usr/bin/musicctl"] {
        assert!(entry(binary).starts_with("-rwxr-xr-x 0/0"), "{binary}");
    }
    // Not world-readable: it can hold the link-signing keys.
    assert!(entry("etc/musicd/musicd.toml").starts_with("-rw-r----- 0/0"));
    for path in [
        "usr/lib/systemd/system/musicd.service",
        "usr/lib/systemd/system/musicd.socket",
        "etc/logrotate.d/musicd",
        "usr/share/man/man1/musicd.1.gz",
        "usr/share/man/man1/musicd-run.1.gz",
        "usr/share/man/man1/musicctl.1.gz",
        "usr/share/man/man1/musicctl-purge.1.gz",
        "usr/share/bash-completion/completions/musicd",
        "usr/share/bash-completion/completions/musicctl",
        "usr/share/zsh/vendor-completions/_musicd",
        "usr/share/zsh/vendor-completions/_musicctl",
        "usr/share/fish/vendor_completions.d/musicd.fish",
        "usr/share/fish/vendor_completions.d/musicctl.fish",
        "usr/share/doc/musicd/copyright",
        "usr/share/doc/musicd/README.md",
        "usr/share/doc/musicd/docs/http.md",
        "usr/share/doc/musicd/docs/running.md",
        "usr/share/doc/musicd/changelog.Debian.gz",
    ] {
        assert!(entry(path).starts_with("-rw-r--r-- 0/0"), "{path}");
    }
}

#[test]
fn lintian_reports_no_errors() {
    let output = Command::new("lintian")
        .args(["--allow-root", "--no-tag-display-limit"])
        .arg(package())
        .output()
        .expect("lintian (scripts/install-deps.sh installs it)");
    let report = String::from_utf8_lossy(&output.stdout);
    let errors: Vec<&str> = report.lines().filter(|l| l.starts_with("E:")).collect();
    assert!(errors.is_empty(), "lintian errors:\n{report}");
    // lintian exits non-zero on errors only (warnings are listed in docs/running.md).
    assert!(
        output.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Unpacks the package into a temp dir, as dpkg would lay it out under `/`.
fn unpacked() -> tempfile::TempDir {
    let dir = tempdir();
    succeeded(
        &Command::new("dpkg-deb")
            .arg("--extract")
            .arg(package())
            .arg(dir.path())
            .output()
            .expect("dpkg-deb --extract"),
    );
    dir
}

#[test]
fn the_unpacked_files_work_together() {
    let root = unpacked();
    let at = |path: &str| root.path().join(path);
    let version = succeeded(
        &Command::new(at("usr/bin/musicd"))
            .arg("--version")
            .env_clear()
            .output()
            .expect("musicd"),
    );
    assert_eq!(
        version.trim(),
        format!("musicd {}", env!("CARGO_PKG_VERSION"))
    );

    // The shipped unit starts the shipped binary with the shipped configuration.
    let unit = std::fs::read_to_string(at("usr/lib/systemd/system/musicd.service")).expect("unit");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut words = exec.split_whitespace();
    let program = words.next().expect("program");
    assert!(
        at(program.trim_start_matches('/')).is_file(),
        "{program} not shipped"
    );
    let config_arg: Vec<&str> = words.collect();
    let config = config_arg
        .windows(2)
        .find(|w| w[0] == "--config")
        .map(|w| w[1])
        .expect("--config");
    let media = tempdir();
    let checked = Command::new(at(program.trim_start_matches('/')))
        .arg("--config")
        .arg(at(config.trim_start_matches('/')))
        .arg("--set")
        .arg(format!(
            "media_roots=[{:?}]",
            media.path().display().to_string()
        ))
        .arg("check-config")
        .env_clear()
        .output()
        .expect("check-config");
    succeeded(&checked);

    // The man pages are roff for the right program, one per subcommand; the completions
    // are valid shell for the right program.
    for (page, name) in [
        ("musicd.1.gz", "musicd"),
        ("musicd-start.1.gz", "musicd-start"),
        ("musicctl.1.gz", "musicctl"),
        ("musicctl-purge.1.gz", "musicctl-purge"),
    ] {
        let roff = Command::new("gzip")
            .arg("-dc")
            .arg(at(&format!("usr/share/man/man1/{page}")))
            .output()
            .expect("gzip");
        let roff = succeeded(&roff);
        assert!(roff.contains(&format!(".TH {name} 1 ")), "{roff}");
        assert!(roff.contains(".SH SYNOPSIS"), "{roff}");
    }
    for script in ["musicd", "musicctl"] {
        let path = at(&format!("usr/share/bash-completion/completions/{script}"));
        succeeded(
            &Command::new("bash")
                .arg("-n")
                .arg(&path)
                .output()
                .expect("bash"),
        );
        let text = std::fs::read_to_string(&path).expect("completion");
        assert!(text.contains(&format!("complete -F _{script}")), "{script}");
    }
}

#[test]
fn installing_creates_the_system_user_and_gives_it_the_config() {
    // postinst runs as root on the target system: here it runs with the commands that
    // would change this machine (adduser, chgrp, systemd helpers) replaced by recorders,
    // so the test sees exactly what an install does without doing it.
    let scripts = tempdir();
    std::fs::write(scripts.path().join("postinst"), control_file("postinst")).expect("write");
    let bin = scripts.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let log = scripts.path().join("calls");
    for (name, status) in [
        ("adduser", 0),
        ("chgrp", 0),
        ("getent", 2), // no such user yet
        ("deb-systemd-helper", 1),
        ("deb-systemd-invoke", 0),
        ("systemctl", 0),
    ] {
        let path = bin.join(name);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho \"{name} $*\" >> {}\nexit {status}\n",
                log.display()
            ),
        )
        .expect("recorder");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let run = Command::new("sh")
        .arg(scripts.path().join("postinst"))
        .arg("configure")
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output()
        .expect("postinst");
    succeeded(&run);
    let calls = std::fs::read_to_string(&log).expect("calls");
    let adduser = calls
        .lines()
        .find(|l| l.starts_with("adduser "))
        .unwrap_or_else(|| panic!("no adduser in\n{calls}"));
    for flag in ["--system", "--group", "musicd"] {
        assert!(adduser.split(' ').any(|w| w == flag), "{adduser}");
    }
    assert!(
        calls.contains("chgrp musicd /etc/musicd/musicd.toml"),
        "{calls}"
    );
    // Not enabled or started on install: the operator configures it first.
    assert!(!calls.contains("deb-systemd-helper enable"), "{calls}");
    assert!(!calls.contains("start"), "{calls}");
}
