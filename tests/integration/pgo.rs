//! The training run of the profile-guided build (`scripts/pgo-train.sh`, run by
//! `scripts/build-dist.sh`): what ships is optimised for the paths it drives, so a mix that
//! silently stopped reaching one (a renamed option, a changed command) would ship a build
//! tuned for less than it serves. Run here with the suite's own binaries.

use std::path::Path;

use crate::harness::{bin, repo_script, succeeded};

#[test]
fn training_drives_every_kind_of_answer_and_stops_cleanly() {
    let musicd = bin("musicd");
    let dir = musicd.parent().unwrap_or(Path::new("."));
    let output = repo_script("scripts/pgo-train.sh")
        .arg(dir)
        .env_remove("MUSICD_CONFIG")
        .env("PGO_TRAIN_SECONDS", "1")
        .output()
        .expect("scripts/pgo-train.sh");
    // It fails when a daemon does not stop by SIGTERM (no profile would be written) or
    // when a 200, 206, 304, 404 or signed 200 is missing from the access log.
    let stdout = succeeded(&output);
    assert!(stdout.contains("pgo-train: done"), "{stdout}");
}
