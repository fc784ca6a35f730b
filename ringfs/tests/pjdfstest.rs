//! Runs the crates.io `pjdfstest` (installed by scripts/setup.sh) against a fresh mount,
//! on `--memory` and `--store`. Fails on any failed case not listed in
//! `tests/pjdfstest-expected-failures.txt`.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn expected_failures() -> BTreeSet<String> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pjdfstest-expected-failures.txt");
    fs::read_to_string(&p)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split('#').next().unwrap().trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

fn pjdfstest_bin() -> PathBuf {
    if let Ok(p) = std::env::var("PJDFSTEST") {
        return p.into();
    }
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo"));
    let p = home.join("bin/pjdfstest");
    if p.exists() {
        p
    } else {
        PathBuf::from("pjdfstest")
    }
}

/// The group of `nobody` (nogroup on Debian, nobody elsewhere).
fn nobody_group() -> String {
    let o = Command::new("id").args(["-gn", "nobody"]).output().expect("id -gn nobody");
    assert!(o.status.success(), "user nobody missing: run scripts/setup.sh");
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            if it.peek() == Some(&'[') {
                it.next();
                for c2 in it.by_ref() {
                    if c2.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[derive(Default, Debug)]
struct Counts {
    pass: Vec<String>,
    fail: Vec<String>,
    skip: Vec<String>,
    expected_fail: Vec<String>,
    unexpected_pass: Vec<String>,
}

fn parse(out: &str) -> Counts {
    let mut c = Counts::default();
    for line in out.lines() {
        if line.starts_with(char::is_whitespace) || !line.contains("::") {
            continue;
        }
        let line = line.trim_end();
        let Some((name, rest)) = line.split_once(char::is_whitespace) else { continue };
        let status = rest.trim();
        let name = name.to_owned();
        match status {
            "ok" => c.pass.push(name),
            "FAILED" => c.fail.push(name),
            "skipped" => c.skip.push(name),
            "failed as expected" => c.expected_fail.push(name),
            "PASSED UNEXPECTEDLY" => c.unexpected_pass.push(name),
            _ => {}
        }
    }
    c
}

/// A directory on a different file system than `of`, for the EXDEV cases.
fn secondary_fs(of: &Path, m: &TestMount) -> Option<tempfile::TempDir> {
    let dev = fs::metadata(of).ok()?.dev();
    for base in [m.host_tmp().to_path_buf(), PathBuf::from("/dev/shm"), std::env::temp_dir()] {
        if fs::metadata(&base).map(|md| md.dev() != dev).unwrap_or(false) {
            if let Ok(d) = tempfile::Builder::new().prefix("pjdfstest-2nd-").tempdir_in(&base) {
                return Some(d);
            }
        }
    }
    None
}

fn run(backend: Backend) {
    let m = TestMount::new(backend);
    run_at(&m, m.path(), backend.name());
}

fn run_at(m: &TestMount, dir: &Path, label: &str) {
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("pjdfstest.toml");
    // rename_ctime: ext4 updates ctime on rename, and so must ringfs.
    fs::write(
        &conf,
        format!(
            "[features]\nposix_fallocate = {{}}\nutime_now = {{}}\nutimensat = {{}}\nrename_ctime = {{}}\n\n\
             [settings]\nnaptime = 0.01\nallow_remount = false\n\n\
             [dummy_auth]\nentries = [[\"nobody\", \"{}\"], [\"tests\", \"tests\"]]\n",
            nobody_group()
        ),
    )
    .unwrap();
    let second = secondary_fs(dir, m);
    let mut cmd = Command::new(pjdfstest_bin());
    cmd.arg("-c").arg(&conf).arg("-p").arg(dir).env("NO_COLOR", "1").env("CLICOLOR", "0");
    if let Some(s) = &second {
        cmd.arg("-s").arg(s.path());
    }
    let o = run_timeout(&mut cmd, Duration::from_secs(900));
    let (so, se) = out_str(&o);
    let so = strip_ansi(&so);
    let c = parse(&so);
    let expected = expected_failures();
    let unexpected: Vec<&String> = c.fail.iter().filter(|n| !expected.contains(*n)).collect();
    let now_passing: Vec<&String> = c.pass.iter().filter(|n| expected.contains(*n)).collect();
    println!(
        "pjdfstest [{}]: {} passed, {} failed ({} expected, {} unexpected), {} skipped, exit {}",
        label,
        c.pass.len(),
        c.fail.len(),
        c.fail.len() - unexpected.len(),
        unexpected.len(),
        c.skip.len(),
        o.status
    );
    for n in &c.skip {
        println!("  skipped: {n}");
    }
    for n in &now_passing {
        println!("  listed as expected failure but passed (remove it): {n}");
    }
    let total = c.pass.len() + c.fail.len() + c.skip.len() + c.expected_fail.len() + c.unexpected_pass.len();
    if total < 300 || !se.trim().is_empty() && total == 0 {
        panic!("pjdfstest ran only {total} cases (exit {}):\n{so}\n--- stderr ---\n{se}", o.status);
    }
    if !unexpected.is_empty() {
        // Print the failure details pjdfstest gave for each unexpected failure.
        let mut detail = String::new();
        let lines: Vec<&str> = so.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if unexpected.iter().any(|n| l.starts_with(n.as_str()) && l.trim_end().ends_with("FAILED")) {
                detail.push_str(l);
                detail.push('\n');
                for l2 in lines[i + 1..].iter().take_while(|l2| l2.starts_with(char::is_whitespace)).take(6) {
                    detail.push_str(l2);
                    detail.push('\n');
                }
            }
        }
        panic!(
            "pjdfstest [{}]: {} unexpected failure(s):\n{detail}\n(add FUSE-inherent ones with a reason to tests/pjdfstest-expected-failures.txt)",
            label,
            unexpected.len()
        );
    }
    assert!(c.unexpected_pass.is_empty());
}

#[test]
fn pjdfstest_memory() {
    run(Backend::Memory);
}

#[test]
fn pjdfstest_store() {
    run(Backend::Store);
}

/// Inside a native root (a bind mount of the host tree: the kernel's ext4).
#[test]
fn pjdfstest_native_root() {
    if !native_roots_possible() {
        return;
    }
    let m = TestMount::builder(Backend::Store).args(["--ignore", "node_modules"]).name("pjdfstest-native-root").mount();
    let dir = make_native_root(&m, "node_modules");
    run_at(&m, &dir, "native root");
}

/// Inside a native root detached with `ringfs unroot`: the same host tree,
/// served by the daemon (as before its bind mount lands).
#[test]
fn pjdfstest_unrooted_tree() {
    if !native_roots_possible() {
        return;
    }
    let m = TestMount::builder(Backend::Memory).args(["--ignore", "node_modules"]).name("pjdfstest-unrooted").mount();
    let dir = make_unrooted_tree(&m, "node_modules");
    run_at(&m, &dir, "unrooted tree");
}

