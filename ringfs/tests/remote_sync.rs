//! Continuous sync, `ringfs mount … --remote NAME` (issue 14, DECISIONS D44),
//! through real mounts:
//! - writes reach the remote in the background (interval), and after an
//!   fsync burst long before the interval; a clone on a fresh store is
//!   byte-equal;
//! - `ringfs umount` waits for the last push (the clone has the last write);
//!   `--no-wait` leaves it pending and says how much; a wait that runs out
//!   (`--timeout`) fails with the pending amount and the way out;
//! - the remote unreachable while working (a `file://` directory moved away;
//!   a Garage node stopped with the harness): writes go on, `remote status`
//!   shows the lag and the error, and once the remote is back everything
//!   arrives (clone elsewhere, compare bytes);
//! - a daemon killed (-9) before it pushed: the next `mount --remote`
//!   commits and pushes what the killed session wrote.
//!
//! Backoff is capped at 1 s here (RINGFS_TEST_SYNC_BACKOFF_MAX_MS) so that
//! recovery is quick; timings are never asserted.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::garage::Garage;
use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `ringfs ARGS` with extra environment, 60 s at most.
fn rf(env: &[(&str, String)], args: &[&str]) -> Output {
    let mut c = Command::new(RINGFS);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run_timeout(&mut c, Duration::from_secs(60))
}

/// `ringfs ARGS --json` with extra environment; must succeed.
fn rj(env: &[(&str, String)], args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    let o = rf(env, &a);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "ringfs {args:?}: {out} {err}");
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("ringfs {args:?} printed no JSON ({e}): {out}"))
}



const FAST_BACKOFF: (&str, &str) = ("RINGFS_TEST_SYNC_BACKOFF_MAX_MS", "1000");

/// A store mount with `--remote origin --sync-interval SECS` on remote
/// `remote_url` (added through a first plain mount), the daemon with `env`.
fn synced_mount(remote_url: &str, interval: &str, env: &[(&str, String)]) -> TestMount {
    let mut b = TestMount::builder(Backend::Store).env(FAST_BACKOFF.0, FAST_BACKOFF.1);
    for (k, v) in env {
        b = b.env(*k, v.clone());
    }
    let mut m = b.mount();
    m.sh_ok("echo first > first");
    rj(env, &["remote", "add", mp(&m), "origin", remote_url]);
    m.set_args(&["--remote", "origin", "--sync-interval", interval]);
    m.remount();
    m
}

/// The `remote status` document's remote and current branch, on the mount.
fn status(m: &TestMount) -> (serde_json::Value, serde_json::Value) {
    let v = json(&["remote", "status", mp(m)]);
    let r = v["remotes"][0].clone();
    let b = r["branches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["current"] == true)
        .cloned()
        .unwrap_or_default();
    (r, b)
}

/// Polls `f` every 200 ms for up to `secs`; panics with `what` and the last status.
fn wait_for(
    m: &TestMount,
    secs: u64,
    what: &str,
    f: impl Fn(&serde_json::Value, &serde_json::Value) -> bool,
) {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        let (r, b) = status(m);
        if f(&r, &b) {
            return;
        }
        if Instant::now() > end {
            panic!(
                "{what}: not within {secs} s; remote status: {r}\n--- daemon log ---\n{}",
                m.daemon_log()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The remote has the branch head, and the live tree equals that head.
fn in_sync(m: &TestMount) -> impl Fn(&serde_json::Value, &serde_json::Value) -> bool + '_ {
    move |_, b| {
        !b["local"].is_null()
            && b["local"] == b["remote"]
            && b["pending_commits"] == 0
            && json(&["diff", mp(m)])["changes"]
                .as_array()
                .is_some_and(|c| c.is_empty())
    }
}

/// Clones `remote_url` into a fresh store and returns its tree (the clone
/// mounted by a TestMount whose store is replaced by the clone).
fn clone_tree(remote_url: &str, env: &[(&str, String)]) -> BTreeMap<String, Vec<u8>> {
    let mut b = TestMount::builder(Backend::Store).name("clone");
    for (k, v) in env {
        b = b.env(*k, v.clone());
    }
    let mut c = b.mount();
    c.unmount_checked();
    let store = c.store_dir().to_path_buf();
    std::fs::remove_dir_all(&store).unwrap();
    let o = rf(env, &["clone", remote_url, "--store", s(&store)]);
    assert!(o.status.success(), "clone: {:?}", out_str(&o));
    c.mount_again();
    let t = tree(c.path());
    c.unmount_checked();
    t
}

#[test]
fn mount_remote_pushes_in_the_background_and_umount_waits() {
    if raw_mode() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let remote = base.path().join("remote");
    let u = file_url(&remote);
    let mut m = synced_mount(&u, "0.5", &[]);
    m.sh_ok("mkdir -p src && head -c 600000 /dev/urandom > src/big && echo hello > src/a && ln -s a src/l");
    wait_for(&m, 30, "the writes on the remote", in_sync(&m));
    let (r, b) = status(&m);
    assert!(r["sync"]["auto_commits"].as_u64().unwrap() >= 1, "{r}");
    assert!(
        b["last_push"].as_str().is_some_and(|t| t.ends_with('Z')) && b["last_push_age_s"].is_u64(),
        "{b}"
    );
    assert_eq!(clone_tree(&u, &[]), tree(m.path()));
    // A write just before umount: umount waits for its push.
    m.sh_ok("head -c 300000 /dev/urandom > last && echo tail >> src/a");
    let want = tree(m.path());
    m.unmount_checked();
    assert!(
        m.last_umount_output().contains("is on remote origin"),
        "{}",
        m.last_umount_output()
    );
    assert_eq!(clone_tree(&u, &[]), want);
    // Auto-commits are ordinary commits of the branch.
    let st = rj(&[], &["remote", "status", "--store", s(m.store_dir())]);
    assert_eq!(
        st["remotes"][0]["branches"][0]["pending_commits"], 0,
        "{st}"
    );
}

#[test]
fn an_fsync_burst_syncs_long_before_the_interval() {
    if raw_mode() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let remote = base.path().join("remote");
    let u = file_url(&remote);
    let m = synced_mount(&u, "600", &[]);
    // The first cycle (at mount) pushes what the first session committed.
    wait_for(&m, 30, "the first push", in_sync(&m));
    m.sh_ok("for i in 1 2 3; do head -c 100000 /dev/urandom | dd of=f$i bs=100000 conv=fsync status=none; done");
    wait_for(&m, 30, "the fsynced files on the remote", in_sync(&m));
    let (r, _) = status(&m);
    assert!(r["sync"]["pushes"].as_u64().unwrap() >= 2, "{r}");
    assert_eq!(clone_tree(&u, &[]), tree(m.path()));
}

#[test]
fn umount_no_wait_leaves_it_pending_and_a_timeout_says_how_much() {
    if raw_mode() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let remote = base.path().join("remote");
    let away = base.path().join("remote.away");
    let u = file_url(&remote);
    let mut m = synced_mount(&u, "600", &[]);
    wait_for(&m, 30, "the first push", in_sync(&m));
    m.sh_ok("head -c 400000 /dev/urandom > pending");
    // --no-wait: nothing pushed, the amount said; the store has it committed.
    let o = rf(&[], &["umount", "--no-wait", mp(&m)]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "{out} {err}");
    assert!(
        err.contains("left pending for remote origin (--no-wait): 1 commit,")
            && err.contains("kB")
            && err.contains("ringfs push --store"),
        "{err}"
    );
    let st = rj(&[], &["remote", "status", "--store", s(m.store_dir())]);
    let b = &st["remotes"][0]["branches"][0];
    assert!(
        b["pending_commits"] == 1 && b["pending_bytes"].as_u64().unwrap() > 400000,
        "{st}"
    );
    // The wait runs out while the remote is away: a clear error, nothing lost.
    std::fs::rename(&remote, &away).unwrap();
    // The daemon exited (0) with that umount: reap it (nothing left to kill).
    m.kill_daemon();
    m.mount_again();
    m.sh_ok("echo more > more");
    let t = Instant::now();
    let o = rf(&[], &["umount", "--timeout", "5", mp(&m)]);
    let (out, err) = out_str(&o);
    assert!(!o.status.success(), "{out} {err}");
    assert!(
        err.contains("did not finish within the 5 s of --timeout")
            && err.contains("is not a directory")
            && err.contains("2 commits")
            && err.contains("are pending"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(30));
    assert!(!is_mounted(m.path()));
    // Back: a push offline sends everything, and the clone has it all.
    std::fs::rename(&away, &remote).unwrap();
    m.kill_daemon();
    m.mount_again();
    let want = tree(m.path());
    m.unmount_checked();
    assert_eq!(clone_tree(&u, &[]), want);
}

#[test]
fn file_remote_away_while_working_then_everything_arrives() {
    if raw_mode() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let remote = base.path().join("remote");
    let away = base.path().join("remote.away");
    let u = file_url(&remote);
    let mut m = synced_mount(&u, "0.5", &[]);
    wait_for(&m, 30, "the first push", in_sync(&m));
    std::fs::rename(&remote, &away).unwrap();
    // Writes go on while pushes fail.
    for i in 0..5 {
        m.sh_ok(&format!(
            "head -c 200000 /dev/urandom > w{i} && echo {i} >> log"
        ));
        std::thread::sleep(Duration::from_millis(300));
    }
    wait_for(&m, 30, "the lag and the error in remote status", |r, b| {
        b["pending_commits"].as_u64().unwrap_or(0) >= 1
            && b["pending_bytes"].as_u64().unwrap_or(0) > 200000
            && b["oldest_pending_age_s"].is_u64()
            && b["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("not a directory"))
            && r["sync"]["failures"].as_u64().unwrap_or(0) >= 1
    });
    let o = ringfs(&["remote", "status", mp(&m)]);
    let text = out_str(&o).0;
    assert!(
        text.contains("UNREACHABLE")
            && text.contains("lag: ")
            && text.contains("failed pushes in a row"),
        "{text}"
    );
    std::fs::rename(&away, &remote).unwrap();
    wait_for(
        &m,
        30,
        "everything on the remote once it is back",
        in_sync(&m),
    );
    let want = tree(m.path());
    assert_eq!(clone_tree(&u, &[]), want);
    m.unmount_checked();
}

#[test]
fn garage_stopped_while_working_then_everything_arrives() {
    if raw_mode() {
        return;
    }
    let mut g = Garage::single();
    let env = g.env();
    let u = g.url("sync");
    let m = synced_mount(&u, "0.5", &env);
    wait_for(&m, 30, "the first push", in_sync(&m));
    g.stop_node(0);
    for i in 0..3 {
        m.sh_ok(&format!("head -c 300000 /dev/urandom > w{i}"));
    }
    wait_for(&m, 45, "the lag and the error in remote status", |r, b| {
        b["pending_commits"].as_u64().unwrap_or(0) >= 1
            && b["last_error"].is_string()
            && r["reachable"] == false
    });
    g.restart_node(0);
    wait_for(
        &m,
        45,
        "everything on the remote once Garage is back",
        in_sync(&m),
    );
    let want = tree(m.path());
    assert_eq!(clone_tree(&u, &env), want);
    drop(m);
}

#[test]
fn mount_remote_is_checked_before_anything_is_created() {
    if raw_mode() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let mnt = base.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let store = base.path().join("new-store");
    let o = ringfs(&["mount", s(&mnt), "--store", s(&store), "--remote", "origin"]);
    let err = out_str(&o).1;
    assert!(
        !o.status.success() && err.contains("holds no store yet") && err.contains("ringfs clone"),
        "{err}"
    );
    assert!(!store.exists());
    let o = ringfs(&["mount", s(&mnt), "--memory", "--remote", "origin"]);
    assert!(!o.status.success(), "{:?}", out_str(&o));
}

#[test]
fn a_daemon_killed_before_its_push_pushes_at_the_next_mount() {
    if raw_mode() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let remote = base.path().join("remote");
    let u = file_url(&remote);
    let mut m = synced_mount(&u, "600", &[]);
    wait_for(&m, 30, "the first push", in_sync(&m));
    m.sh_ok("head -c 300000 /dev/urandom > unsent && echo x > small");
    // Past the group commit (--commit-interval-ms 1000): durable locally,
    // not committed as a snapshot nor pushed (no fsync, a 600 s interval).
    std::thread::sleep(Duration::from_millis(2500));
    let (_, b) = status(&m);
    assert_eq!(b["local"], b["remote"], "nothing new pushed yet: {b}");
    let want = tree(m.path());
    m.kill_daemon();
    m.mount_again();
    wait_for(
        &m,
        30,
        "the killed session's writes on the remote",
        in_sync(&m),
    );
    assert_eq!(clone_tree(&u, &[]), want);
}

/// A push refused for good (another store's head is on the remote, not in
/// this store's history) ends the unmount's wait at once with that reason,
/// instead of retrying until --timeout.
#[test]
fn umount_stops_waiting_on_a_refused_push() {
    if raw_mode() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let remote = base.path().join("remote");
    let u = file_url(&remote);
    // Another store owns the branch on the remote.
    let other = TestMount::new(Backend::Store);
    other.sh_ok("echo theirs > theirs");
    json(&["commit", mp(&other)]);
    rj(&[], &["remote", "add", mp(&other), "origin", &u]);
    rj(&[], &["push", mp(&other)]);
    let m = synced_mount(&u, "0.5", &[]);
    m.sh_ok("echo mine > mine");
    let t = Instant::now();
    let o = rf(&[], &["umount", mp(&m)]);
    let (out, err) = out_str(&o);
    assert!(!o.status.success(), "{out} {err}");
    assert!(
        err.contains("refused the push") && err.contains("another store pushes this branch") && err.contains("waiting longer cannot help"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(60), "umount waited {:?}", t.elapsed());
    assert!(!is_mounted(m.path()));
}

/// `ringfs exec`'s receipt on a `mount --remote` says what is on the remote
/// and what is pending (issue 41 item 9), from the daemon's `remote status`
/// (the store's record: the remote is not contacted for it).
#[test]
fn exec_receipt_says_what_is_pushed_and_pending() {
    if raw_mode() {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let u = file_url(&base.path().join("remote"));
    // A long interval: nothing is pushed during the test but the first cycle.
    let m = synced_mount(&u, "600", &[]);
    wait_for(&m, 30, "the first push", in_sync(&m));
    let exec = |args: &[&str]| -> serde_json::Value {
        let mut c = Command::new(RINGFS);
        c.args(["exec", mp(&m), "--json"]).args(args);
        let o = run_timeout(&mut c, Duration::from_secs(60));
        let (out, err) = out_str(&o);
        assert!(o.status.success(), "exec {args:?}: {out} {err}");
        serde_json::from_str(&out).unwrap()
    };
    let (_, b) = status(&m);
    let v = exec(&["--", "true"]);
    let d = &v["durability"];
    assert_ne!(d["remote"], "no remote", "{d}");
    assert!(d["remote"].as_str().unwrap().starts_with("on remote origin"), "{d}");
    let s = &d["sync"];
    assert_eq!((s["remote"].as_str(), s["pending_commits"].as_u64(), s["pending_bytes"].as_u64()), (Some("origin"), Some(0), Some(0)), "{d}");
    assert_eq!(s["pushed"], b["remote"], "{d}");
    assert_eq!(s["local"], b["local"], "{d}");
    assert!(s["last_push"].as_str().is_some_and(|t| t.ends_with('Z')), "{d}");
    // A call that commits: one commit and its bytes pending until the next push.
    let v = exec(&["--commit", "--", "sh", "-c", "head -c 50000 /dev/urandom > new"]);
    let d = &v["durability"];
    let s = &d["sync"];
    assert_eq!(s["pending_commits"], 1, "{d}");
    assert!(s["pending_bytes"].as_u64().unwrap() >= 50_000, "{d}");
    assert_eq!(s["local"], v["commit"], "{d}");
    assert_ne!(s["pushed"], s["local"], "{d}");
    assert!(s["oldest_pending_age_s"].is_u64(), "{d}");
    assert!(d["remote"].as_str().unwrap().starts_with("NOT yet on remote origin: 1 commit"), "{d}");
    // Without --commit: the sync's next commit takes the call's changes.
    let v = exec(&["--", "sh", "-c", "echo more > more"]);
    assert!(v["durability"]["remote"].as_str().unwrap().contains("the sync's next commit"), "{}", v["durability"]);
}
