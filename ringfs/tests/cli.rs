//! The command line contract: error cases (one clear line, non-zero exit, no half-made
//! mount left), `--help` on every command, `status --json`, clean stop on signals,
//! `--daemon`. These drive the real binary; with RINGFS_TEST_RAW_DIR=1 they are skipped.

mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

macro_rules! skip_if_raw {
    () => {
        if raw_mode() {
            eprintln!("RINGFS_TEST_RAW_DIR=1: CLI tests need the real binary; skipped");
            return;
        }
    };
}

/// Run `ringfs mount ...` expecting it to fail fast. If it unexpectedly mounts or keeps
/// running, it is stopped and the mount removed before the assertion fires.
fn mount_expect_failure(mp: &Path, extra: &[&str]) -> (Output, String) {
    // The mount stack at mp before (non-empty for the already-a-mount case).
    let before: Vec<String> = mounts().into_iter().filter(|m| m.mount_point == mp).map(|m| m.dev).collect();
    let mut cmd = Command::new(RINGFS);
    cmd.arg("mount").arg(mp).args(extra).args(env_mount_args());
    let o = run_timeout(&mut cmd, Duration::from_secs(20));
    let (_, se) = out_str(&o);
    let after: Vec<MountEntry> = mounts().into_iter().filter(|m| m.mount_point == mp).collect();
    if after.len() > before.len() {
        // A new mount appeared on top: detach only that one (the top of the stack).
        let top = after.last().unwrap().clone();
        if let Some((_, minor)) = top.dev.split_once(':') {
            let _ = fs::write(format!("/sys/fs/fuse/connections/{minor}/abort"), "1");
        }
        let _ = Command::new("umount").arg("-l").arg(mp).status();
        panic!("ringfs mount {extra:?} on {} should have failed but mounted ({top:?}); stderr: {se}", mp.display());
    }
    assert!(!o.status.success(), "ringfs mount {extra:?} on {} should fail; stderr: {se}", mp.display());
    (o, se)
}

/// The message is one clear line (logging noise aside: the last non-empty line is the error).
fn error_line(stderr: &str) -> String {
    stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_owned()
}

#[test]
fn cli_error_missing_mountpoint() {
    skip_if_raw!();
    let t = tempfile::tempdir().unwrap();
    let mp = t.path().join("does-not-exist");
    let (_, se) = mount_expect_failure(&mp, &["--memory"]);
    let l = error_line(&se);
    assert!(l.contains("does-not-exist"), "message names the mountpoint: {se}");
    assert!(!mp.exists(), "a missing mountpoint is not created");
}

#[test]
fn cli_error_not_a_directory() {
    skip_if_raw!();
    let t = tempfile::tempdir().unwrap();
    let mp = t.path().join("file");
    fs::write(&mp, "x").unwrap();
    let (_, se) = mount_expect_failure(&mp, &["--memory"]);
    let l = error_line(&se).to_lowercase();
    assert!(l.contains("not a directory") || l.contains("directory"), "message: {se}");
}

#[test]
fn cli_error_already_a_mount() {
    skip_if_raw!();
    let m = TestMount::new(Backend::Memory);
    let (_, se) = mount_expect_failure(m.path(), &["--memory"]);
    let l = error_line(&se).to_lowercase();
    assert!(l.contains("mount"), "message says it is already a mount: {se}");
    // The first mount is untouched.
    fs::write(m.p("still"), "here").unwrap();
    assert_eq!(fs::read_to_string(m.p("still")).unwrap(), "here");
}

#[test]
fn cli_error_store_locked_names_pid() {
    skip_if_raw!();
    let m = TestMount::new(Backend::Store);
    let pid = m.daemon_pid().expect("foreground daemon pid");
    let t = tempfile::tempdir().unwrap();
    let mp2 = t.path().join("mnt2");
    fs::create_dir(&mp2).unwrap();
    let (_, se) = mount_expect_failure(&mp2, &["--store", &m.store_dir().display().to_string()]);
    assert!(se.contains(&pid.to_string()), "message names the pid {pid} of the daemon holding the lock: {se}");
    assert!(!is_mounted(&mp2));
    fs::write(m.p("ok"), "1").unwrap();
}

/// Find the redb database file(s) of a store: files that start with redb's magic.
fn redb_files(store: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let mut stack = vec![store.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if fs::read(&p).map(|b| b.starts_with(b"redb")).unwrap_or(false) {
                v.push(p);
            }
        }
    }
    v
}

fn made_store() -> (TestMount, Vec<PathBuf>) {
    let mut m = TestMount::new(Backend::Store);
    fs::write(m.p("f"), "data").unwrap();
    m.unmount_checked();
    let files = redb_files(m.store_dir());
    assert!(!files.is_empty(), "no redb file in {}", m.store_dir().display());
    (m, files)
}

#[test]
fn cli_error_corrupt_store_names_file_suggests_fsck() {
    skip_if_raw!();
    let (m, files) = made_store();
    let db = &files[0];
    let len = fs::metadata(db).unwrap().len().max(4096) as usize;
    let garbage: Vec<u8> = (0..len).map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[2]).collect();
    fs::write(db, garbage).unwrap();
    let (_, se) = mount_expect_failure(m.path(), &["--store", &m.store_dir().display().to_string()]);
    let l = error_line(&se);
    let fname = db.file_name().unwrap().to_string_lossy();
    assert!(l.contains(fname.as_ref()), "message names the file {fname}: {se}");
    assert!(l.contains("fsck"), "message suggests ringfs fsck: {se}");
    let o = ringfs(&["fsck", "--store", &m.store_dir().display().to_string()]);
    let (so, fe) = out_str(&o);
    assert!(!o.status.success(), "fsck of a corrupt store must fail: {so}{fe}");
    assert!(!(so.clone() + &fe).trim().is_empty(), "fsck reports what is wrong");
}

/// Craft a store "written by a newer schema": bump meta["schema"] with redb directly.
/// This mirrors fs-core's table `meta: TableDefinition<&str, u64>` and key "schema"
/// (fs-core/src/store.rs). If fs-core changes that layout, update this test.
#[test]
fn cli_error_newer_schema() {
    skip_if_raw!();
    let (m, files) = made_store();
    const META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    {
        let db = redb::Database::open(&files[0]).expect("open store db");
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(META).unwrap();
            t.insert("schema", 9999).unwrap();
        }
        w.commit().unwrap();
    }
    let (_, se) = mount_expect_failure(m.path(), &["--store", &m.store_dir().display().to_string()]);
    let l = error_line(&se).to_lowercase();
    assert!(l.contains("schema") || l.contains("version") || l.contains("newer"), "message: {se}");
    assert!(l.contains("9999"), "message names the version found: {se}");
}

#[test]
fn cli_help_on_every_command() {
    skip_if_raw!();
    for args in [
        vec!["--help"],
        vec!["mount", "--help"],
        vec!["umount", "--help"],
        vec!["status", "--help"],
        vec!["fsck", "--help"],
        vec!["help"],
    ] {
        let o = ringfs(&args);
        let (so, se) = out_str(&o);
        assert!(o.status.success(), "ringfs {args:?} exit {}: {se}", o.status);
        assert!(so.to_lowercase().contains("usage"), "ringfs {args:?} prints usage: {so}");
    }
    let o = ringfs(&["mount", "--help"]);
    let so = out_str(&o).0;
    for flag in ["--store", "--memory", "--daemon"] {
        assert!(so.contains(flag), "mount --help mentions {flag}");
    }
    // No subcommand or an unknown one: usage error, non-zero.
    assert!(!ringfs(&[]).status.success());
    assert!(!ringfs(&["frobnicate"]).status.success());
}

#[test]
fn cli_status_json_parses() {
    skip_if_raw!();
    for backend in [Backend::Memory, Backend::Store] {
        let m = TestMount::new(backend);
        fs::write(m.p("f"), vec![1u8; 100_000]).unwrap();
        let mp = m.path().display().to_string();
        let o = ringfs(&["status", &mp]);
        let (so, se) = out_str(&o);
        assert!(o.status.success(), "status: {se}");
        assert!(!so.trim().is_empty());
        let o = ringfs(&["status", &mp, "--json"]);
        let (so, se) = out_str(&o);
        assert!(o.status.success(), "status --json: {se}");
        let v: serde_json::Value = serde_json::from_str(&so).unwrap_or_else(|e| panic!("status --json is not JSON ({e}): {so}"));
        assert!(v.is_object(), "status --json is an object: {v}");
        if backend == Backend::Store {
            assert!(so.contains(&m.store_dir().display().to_string()), "status names the store: {so}");
        }
    }
    // status of something that is not a ringfs mount fails cleanly.
    let t = tempfile::tempdir().unwrap();
    let o = ringfs(&["status", &t.path().display().to_string()]);
    assert!(!o.status.success());
}

fn signal_stops_cleanly(sig: i32) {
    let mut m = TestMount::new(Backend::Store);
    fs::write(m.p("kept"), "across a signal stop").unwrap();
    let pid = m.daemon_pid().unwrap() as i32;
    unsafe { libc::kill(pid, sig) };
    // The guard's child handle sees the exit status in unmount_checked via Drop; check here.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while is_mounted(m.path()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!is_mounted(m.path()), "still mounted 30 s after signal {sig}");
    m.unmount_checked(); // daemon must have exited 0
    m.mount_again();
    assert_eq!(fs::read_to_string(m.p("kept")).unwrap(), "across a signal stop");
}

#[test]
fn cli_sigterm_flushes_commits_unmounts() {
    skip_if_raw!();
    signal_stops_cleanly(libc::SIGTERM);
}

#[test]
fn cli_sigint_flushes_commits_unmounts() {
    skip_if_raw!();
    signal_stops_cleanly(libc::SIGINT);
}

#[test]
fn cli_daemon_mode_and_umount() {
    skip_if_raw!();
    let t = tempfile::tempdir().unwrap();
    let mp = t.path().join("mnt");
    let store = t.path().join("store");
    fs::create_dir(&mp).unwrap();
    let o = run_timeout(
        Command::new(RINGFS)
            .arg("mount")
            .arg(&mp)
            .arg("--store")
            .arg(&store)
            .arg("--daemon")
            .args(env_mount_args())
            .stdout(Stdio::null()),
        Duration::from_secs(30),
    );
    let (_, se) = out_str(&o);
    let mounted = is_mounted(&mp);
    let cleanup = |mp: &Path| {
        if is_mounted(mp) {
            let _ = ringfs(&["umount", &mp.display().to_string()]);
        }
        if let Some(mi) = mount_at(mp) {
            if let Some((_, minor)) = mi.dev.split_once(':') {
                let _ = fs::write(format!("/sys/fs/fuse/connections/{minor}/abort"), "1");
            }
            let _ = Command::new("umount").arg("-l").arg(mp).status();
        }
    };
    if !(o.status.success() && mounted) {
        cleanup(&mp);
        panic!("--daemon: exit {} mounted={mounted}: {se}", o.status);
    }
    let r = std::panic::catch_unwind(|| {
        fs::write(mp.join("f"), "daemon").unwrap();
        let u = ringfs(&["umount", &mp.display().to_string()]);
        assert!(u.status.success(), "ringfs umount: {:?}", out_str(&u));
        assert!(!is_mounted(&mp), "unmounted after ringfs umount returns");
    });
    cleanup(&mp);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
    assert!(fsck_ok(&store), "fsck of the daemon-mode store after ringfs umount");
}

fn fsck_ok(store: &Path) -> bool {
    ringfs(&["fsck", "--store", &store.display().to_string()]).status.success()
}

#[test]
fn cli_fsck_clean_store() {
    skip_if_raw!();
    let (m, _) = made_store();
    let o = ringfs(&["fsck", "--store", &m.store_dir().display().to_string()]);
    let (so, se) = out_str(&o);
    assert!(o.status.success(), "fsck of a clean store: {so}{se}");
}

#[test]
fn cli_umount_of_non_mount_fails() {
    skip_if_raw!();
    let t = tempfile::tempdir().unwrap();
    let o = ringfs(&["umount", &t.path().display().to_string()]);
    assert!(!o.status.success(), "umount of a plain directory must fail");
    assert!(!error_line(&out_str(&o).1).is_empty());
}
