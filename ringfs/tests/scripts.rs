//! The README commands: `scripts/setup.sh && scripts/test.sh` (and
//! `scripts/bench.sh`) work as root without sudo, re-run themselves through
//! sudo for another user, and say what to do when there is no sudo; .ci/run
//! runs the README's test command.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A directory readable by nobody holding `bin/` (links to a few tools, and
/// a fake `sudo` when `fake_sudo`) and `log` (what the fake sudo was given).
fn fake_bin(fake_sudo: bool) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::Builder::new().prefix("ringfs-scripts-").tempdir().unwrap();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let bin = t.path().join("bin");
    fs::create_dir(&bin).unwrap();
    for tool in ["bash", "id", "readlink", "dirname", "env", "cat"] {
        let found = ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(tool)).find(|p| p.exists()).unwrap();
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    let log = t.path().join("log");
    fs::write(&log, "").unwrap();
    fs::set_permissions(&log, fs::Permissions::from_mode(0o666)).unwrap();
    if fake_sudo {
        let sudo = bin.join("sudo");
        fs::write(&sudo, format!("#!/bin/bash\nprintf '%s\\n' \"$@\" > {}\n", log.display())).unwrap();
        fs::set_permissions(&sudo, fs::Permissions::from_mode(0o755)).unwrap();
    }
    (t, bin, log)
}

fn as_nobody(script: &str, bin: &Path, args: &[&str]) -> std::process::Output {
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].into_iter().find(|p| Path::new(p).exists()).expect("setpriv (util-linux)");
    let mut c = Command::new(setpriv);
    c.args([format!("--reuid={NOBODY_UID}"), format!("--regid={NOBODY_GID}"), "--clear-groups".into(), "--".into()])
        .arg("/bin/bash")
        .arg(repo().join("scripts").join(script))
        .args(args)
        .env_clear()
        .env("PATH", bin)
        .env("HOME", "/nonexistent")
        .env("RINGFS_TEST_MODES", "kept");
    run_timeout(&mut c, Duration::from_secs(30))
}

#[test]
fn scripts_rerun_themselves_through_sudo() {
    let (_t, bin, log) = fake_bin(true);
    for script in ["setup.sh", "test.sh", "bench.sh"] {
        let o = as_nobody(script, &bin, &["--smoke"]);
        let (so, se) = out_str(&o);
        assert!(o.status.success(), "{script} as nobody with sudo: {so}{se}");
        assert!(se.contains("re-running through sudo"), "{script} says what it does: {se}");
        let given = fs::read_to_string(&log).unwrap();
        let args: Vec<&str> = given.lines().collect();
        let abs = repo().join("scripts").join(script).canonicalize().unwrap();
        assert_eq!(args.first(), Some(&"--"), "{script}: {given}");
        assert_eq!(args.get(1), Some(&"env"), "{script}: {given}");
        assert!(args.contains(&format!("PATH={}", bin.display()).as_str()), "{script} keeps PATH: {given}");
        assert!(args.contains(&"RINGFS_TEST_MODES=kept"), "{script} keeps RINGFS_*: {given}");
        assert_eq!(&args[args.len() - 3..], ["bash", abs.to_str().unwrap(), "--smoke"], "{script} re-runs itself with its arguments: {given}");
    }
}

#[test]
fn scripts_without_root_or_sudo_say_how() {
    let (_t, bin, _) = fake_bin(false);
    for script in ["setup.sh", "test.sh", "bench.sh"] {
        let o = as_nobody(script, &bin, &[]);
        let (so, se) = out_str(&o);
        assert_eq!(o.status.code(), Some(1), "{script}: {so}{se}");
        let line = se.trim();
        assert_eq!(line.lines().count(), 1, "one line: {se}");
        assert!(line.contains("needs root") && line.contains("sudo is not installed") && line.contains("run it as root"), "{script}: {se}");
    }
}

#[test]
fn readme_commands_and_ci_agree() {
    let readme = fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(readme.contains("\nscripts/setup.sh && scripts/test.sh\n"), "README's test command");
    assert!(readme.contains("\nscripts/setup.sh && scripts/bench.sh\n"), "README's benchmark command");
    assert!(!readme.contains("sudo scripts/"), "README's commands need no sudo");
    let ci = fs::read_to_string(repo().join(".ci/run")).unwrap();
    let lines: Vec<&str> = ci.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    // The scripts it runs, in order: README's two, nothing else.
    let scripts: Vec<&str> = lines.iter().flat_map(|l| l.split_whitespace()).filter(|w| w.starts_with("scripts/")).collect();
    assert_eq!(scripts, ["scripts/setup.sh", "scripts/test.sh"], ".ci/run runs README's test command");
    // Each bare on its line, test.sh at most under a timeout (what setup left of CI's limit).
    assert!(lines.contains(&"scripts/setup.sh"), "{ci}");
    let test = lines.iter().find(|l| l.contains("scripts/test.sh")).unwrap();
    assert!(*test == "scripts/test.sh" || (test.starts_with("timeout ") && test.ends_with(" scripts/test.sh")), "{test}");
}
