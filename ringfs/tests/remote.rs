//! Remote sync (issue 14, DECISIONS D38) against `file://` remotes, through
//! real mounts where a mount is involved: push then clone on a fresh store
//! gives a byte-equal tree (the clone mounted), a second push sends
//! nothing, a pull fast-forwards an unmounted clone; a push killed (-9, by
//! failpoint) after some bundles resumes and resends nothing the remote
//! acknowledged, and a clone (`--eager`) killed mid-way leaves no store
//! and resumes; a corrupted bundle is reported with its key on clone and
//! pull; a second store pushing the same branch is refused with its head
//! intact (with compare-and-swap, and with a backend that ignores it, as
//! Garage 2.5 does); an unreachable remote gives a clear error while the
//! workspace keeps working, and the next push delivers.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `ringfs ARGS` with extra environment.
fn rf(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(RINGFS);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run_timeout(&mut c, Duration::from_secs(120))
}

/// `ringfs ARGS --json` with extra environment; must succeed.
fn rj(env: &[(&str, &str)], args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    let o = rf(env, &a);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "ringfs {args:?}: {out} {err}");
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("ringfs {args:?} printed no JSON ({e}): {out}"))
}

/// `ringfs ARGS` must fail with `want` on stderr.
fn refused(env: &[(&str, &str)], args: &[&str], want: &str) -> String {
    let o = rf(env, args);
    let (out, err) = out_str(&o);
    assert!(!o.status.success(), "ringfs {args:?} succeeded: {out}");
    assert!(
        err.contains(want),
        "ringfs {args:?}: wanted {want:?} in: {err}"
    );
    err
}

/// A workspace mounted with `ringfs mount --daemon`, unmounted when dropped.
struct Extra(PathBuf);

impl Extra {
    fn mount(mnt: &Path, store: &Path) -> Extra {
        std::fs::create_dir_all(mnt).unwrap();
        let o = ringfs(&["mount", s(mnt), "--store", s(store), "--daemon"]);
        assert!(
            o.status.success(),
            "mount {}: {:?}",
            mnt.display(),
            out_str(&o)
        );
        Extra(mnt.to_path_buf())
    }
    fn unmount(&self) {
        let o = run_timeout(
            Command::new(RINGFS).arg("umount").arg(&self.0),
            Duration::from_secs(30),
        );
        assert!(
            o.status.success(),
            "umount {}: {:?}",
            self.0.display(),
            out_str(&o)
        );
    }
}

impl Drop for Extra {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = run_timeout(
                Command::new(RINGFS).arg("umount").arg(&self.0),
                Duration::from_secs(30),
            );
        }
    }
}


fn fsck_clean(store: &Path) {
    let o = ringfs(&["fsck", "--store", s(store)]);
    assert!(
        o.status.success(),
        "fsck {}: {:?}",
        store.display(),
        out_str(&o)
    );
}


/// The bundles under `dir` (chunks or objects) the remote acknowledged:
/// those an index names (a bundle uploaded but not yet indexed when a push
/// was killed is not acknowledged, and is sent again).
fn acked(remote: &Path, dir: &str) -> Vec<String> {
    let mut v: Vec<String> = files_in(&remote.join("index"))
        .iter()
        .filter_map(|n| {
            let b = std::fs::read(remote.join("index").join(n)).ok()?;
            let j: serde_json::Value = serde_json::from_slice(&b).ok()?;
            let k = j["bundle"].as_str()?.strip_prefix(&format!("{dir}/"))?.to_string();
            Some(k)
        })
        .collect();
    v.sort();
    v
}

fn files_in(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn push_clone_mount_byte_equal_then_pull_fast_forwards() {
    if raw_mode() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    let base = m.store_dir().parent().unwrap().to_path_buf();
    let remote = base.join("remote");
    m.sh_ok("mkdir -p src/lib && echo one > src/a && head -c 700000 /dev/urandom > src/lib/big && ln -s a src/l && setfattr -n user.k -v v src/a && mkdir empty");
    json(&["commit", mp(&m), "-m", "one"]);
    // The URL checked before anything is written.
    refused(
        &[],
        &["remote", "add", mp(&m), "origin", "http://example.com/x"],
        "file:///ABSOLUTE/DIR or s3://BUCKET",
    );
    refused(
        &[],
        &["remote", "add", mp(&m), "bad name", &file_url(&remote)],
        "not a remote name",
    );
    assert!(!m.store_dir().join("remotes").exists());
    let a = json(&["remote", "add", mp(&m), "origin", &file_url(&remote)]);
    assert_eq!(a["heads"], "cas", "{a}");
    // The set-up probe leaves no empty directory in a file:// remote.
    assert!(!remote.join("probe").exists(), "remote add left {}/probe", remote.display());
    refused(
        &[],
        &["remote", "add", mp(&m), "origin", &file_url(&remote)],
        "exists already",
    );
    let st = json(&["remote", "status", mp(&m)]);
    let b0 = &st["remotes"][0]["branches"][0];
    assert!(
        b0["pending_chunks"].as_u64().unwrap() > 50 && b0["remote"].is_null(),
        "{st}"
    );

    let p1 = json(&["push", mp(&m)]);
    assert_eq!(p1["head_moved"], true, "{p1}");
    assert!(
        p1["chunks_sent"].as_u64().unwrap() > 50 && p1["bytes_sent"].as_u64().unwrap() > 700000,
        "{p1}"
    );
    // Nothing twice.
    let p2 = json(&["push", mp(&m)]);
    assert_eq!(
        (
            p2["objects_sent"].as_u64(),
            p2["chunks_sent"].as_u64(),
            p2["bytes_sent"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{p2}"
    );
    assert_eq!(p2["head_moved"], false, "{p2}");
    let st = json(&["remote", "status", mp(&m)]);
    let b0 = &st["remotes"][0]["branches"][0];
    assert_eq!(
        (b0["pending_bytes"].as_u64(), &b0["remote"]),
        (Some(0), &b0["local"]),
        "{st}"
    );

    // Clone on a fresh store, mounted: the same tree, byte for byte.
    let cs = base.join("clone");
    let c = json(&["clone", &file_url(&remote), "--store", s(&cs)]);
    assert_eq!(
        (c["branch"].as_str(), c["files"].as_u64()),
        (Some("main"), Some(2)),
        "{c}"
    );
    fsck_clean(&cs);
    let cm = Extra::mount(&base.join("cm"), &cs);
    assert_eq!(tree(&cm.0), tree(m.path()));
    let o = Command::new("getfattr")
        .args(["--only-values", "-n", "user.k"])
        .arg(cm.0.join("src/a"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "v");
    assert_eq!(
        json(&["diff", s(&cm.0)])["changes"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    cm.unmount();
    refused(
        &[],
        &["clone", &file_url(&remote), "--store", s(&cs)],
        "not empty",
    );

    // A second commit pushed sends only what changed; the unmounted clone
    // pulls it and its live tree follows.
    m.sh_ok("echo two > src/a && echo b > src/b && rm src/l");
    json(&["commit", mp(&m), "-m", "two"]);
    let p3 = json(&["push", mp(&m)]);
    assert!(p3["bytes_sent"].as_u64().unwrap() < 20000, "{p3}");
    let pl = json(&["pull", "--store", s(&cs)]);
    assert_eq!(
        (pl["up_to_date"].as_bool(), pl["live_updated"].as_bool()),
        (Some(false), Some(true)),
        "{pl}"
    );
    let pl = json(&["pull", "--store", s(&cs)]);
    assert_eq!((pl["up_to_date"].as_bool(), pl["ahead"].as_bool()), (Some(true), Some(false)));
    fsck_clean(&cs);
    let cm = Extra::mount(&base.join("cm"), &cs);
    assert_eq!(tree(&cm.0), tree(m.path()));
    // The clone pushes on top (a fast-forward of the remote's branch).
    std::fs::write(cm.0.join("from-clone"), "c").unwrap();
    json(&["commit", s(&cm.0), "-m", "three"]);
    let p4 = json(&["push", s(&cm.0)]);
    assert_eq!(p4["head_moved"], true, "{p4}");
    // Only commit three's own objects and chunk: what the pull fetched is
    // known held by the remote, never sent back.
    assert!(p4["objects_sent"].as_u64().unwrap() <= 3 && p4["chunks_sent"].as_u64().unwrap() <= 1, "{p4}");
    cm.unmount();
    fsck_clean(&cs);
}

/// A store with six 300 kB files committed, unmounted, with remote `r` (a
/// `file://` remote beside it) added: (the mount, its base directory, the
/// remote's directory, the store).
fn six_files_unmounted() -> (TestMount, PathBuf, PathBuf, PathBuf) {
    let mut m = TestMount::new(Backend::Store);
    let base = m.store_dir().parent().unwrap().to_path_buf();
    let remote = base.join("remote");
    m.sh_ok("for i in 1 2 3 4 5 6; do head -c 300000 /dev/urandom > f$i; done");
    json(&["commit", mp(&m)]);
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    json(&["remote", "add", "--store", s(&store), "r", &file_url(&remote)]);
    (m, base, remote, store)
}

/// The first branch's pending chunks in `remote status --store`.
fn pending_chunks(env: &[(&str, &str)], store: &Path) -> u64 {
    rj(env, &["remote", "status", "--store", s(store)])["remotes"][0]["branches"][0]["pending_chunks"]
        .as_u64()
        .unwrap()
}

/// When the remote's chunk bundle `n` was last written.
fn chunk_mtime(remote: &Path, n: &str) -> std::time::SystemTime {
    std::fs::metadata(remote.join("chunks").join(n)).unwrap().modified().unwrap()
}

#[test]
fn killed_push_resumes_and_resends_nothing_acknowledged() {
    if raw_mode() {
        return;
    }
    let (mut m, base, remote, store) = six_files_unmounted();
    let small = [("RINGFS_TEST_BUNDLE_MAX", "262144")];
    let before = rj(&small, &["remote", "status", "--store", s(&store)]);
    let total = pending_chunks(&small, &store);
    // Killed after its second chunk bundle is acknowledged.
    let o = rf(
        &[
            ("RINGFS_TEST_BUNDLE_MAX", "262144"),
            ("RINGFS_FAILPOINT", "bundle-acked"),
        ],
        &["push", "--store", s(&store)],
    );
    assert!(!o.status.success(), "{:?}", out_str(&o));
    let mid = rj(&small, &["remote", "status", "--store", s(&store)]);
    let left = pending_chunks(&small, &store);
    assert!(left < total && left > 0, "{before} {mid}");
    assert!(
        mid["remotes"][0]["branches"][0]["remote"].is_null(),
        "no head before everything is there: {mid}"
    );
    let acked_bundles = acked(&remote, "chunks");
    let mtimes: Vec<_> = acked_bundles.iter().map(|n| chunk_mtime(&remote, n)).collect();
    let p = rj(&small, &["push", "--store", s(&store)]);
    assert_eq!(
        p["chunks_sent"].as_u64(),
        Some(left),
        "only what was not acknowledged: {p}"
    );
    assert_eq!(p["head_moved"], true);
    // The bundles acknowledged before the kill were not written again.
    for (n, t) in acked_bundles.iter().zip(mtimes) {
        assert_eq!(chunk_mtime(&remote, n), t, "{n} rewritten");
    }
    // A clone killed after fetching two chunk bundles leaves no store under
    // its name; run again, it fetches only the rest.
    let cs = base.join("clone");
    let o = rf(&[("RINGFS_FAILPOINT", "bundle-fetched")], &["clone", &file_url(&remote), "--store", s(&cs), "--eager"]);
    assert!(!o.status.success(), "{:?}", out_str(&o));
    assert!(!cs.join("store.redb").exists());
    let mut full = 0u64;
    for d in ["chunks", "objects"] {
        for n in files_in(&remote.join(d)) {
            full += std::fs::metadata(remote.join(d).join(n)).unwrap().len();
        }
    }
    let c = json(&["clone", &file_url(&remote), "--store", s(&cs), "--eager"]);
    assert!(c["bytes_fetched"].as_u64().unwrap() < full, "{c} vs {full}");
    assert!(!base.join(".clone.clone-staging").exists());
    fsck_clean(&cs);
    let cm = Extra::mount(&base.join("cm"), &cs);
    m.mount_again();
    assert_eq!(tree(&cm.0), tree(m.path()));
    cm.unmount();
}

/// A push killed after a bundle's upload and before its index (the index
/// PUT failing on a full disk is the same case) packs that bundle again on
/// the next push: it is found on the remote with its size and not sent
/// again (the file keeps its inode; a second copy would need its space
/// twice), its index is written, and the clone is clean and whole.
#[test]
fn push_after_an_unacknowledged_bundle_does_not_send_it_again() {
    if raw_mode() {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let (mut m, base, remote, store) = six_files_unmounted();
    let small = [("RINGFS_TEST_BUNDLE_MAX", "262144")];
    let o = rf(&[small[0], ("RINGFS_FAILPOINT", "bundle-sent")], &["push", "--store", s(&store)]);
    assert!(!o.status.success(), "{:?}", out_str(&o));
    assert!(acked(&remote, "chunks").is_empty(), "nothing acknowledged before the kill");
    let sent: Vec<(String, u64)> =
        // (`KEY#N` is object_store's staging file of an upload the kill cut short: no object.)
        files_in(&remote.join("chunks")).into_iter().filter(|n| !n.contains('#')).map(|n| { let i = std::fs::metadata(remote.join("chunks").join(&n)).unwrap().ino(); (n, i) }).collect();
    assert!(!sent.is_empty(), "the first bundle is on the remote");
    let p = rj(&small, &["push", "--store", s(&store)]);
    assert_eq!(p["head_moved"], true, "{p}");
    assert_eq!(p["bundles_found"].as_u64(), Some(sent.len() as u64), "found, not counted as sent: {p}");
    for (n, ino) in &sent {
        assert_eq!(std::fs::metadata(remote.join("chunks").join(n)).unwrap().ino(), *ino, "{n} sent again");
        assert!(acked(&remote, "chunks").contains(n), "{n} has its index now: sent before {sent:?}, acknowledged {:?}, now {:?}", acked(&remote, "chunks"), files_in(&remote.join("chunks")));
    }
    let cs = base.join("clone");
    json(&["clone", &file_url(&remote), "--store", s(&cs), "--eager"]);
    fsck_clean(&cs);
    let cm = Extra::mount(&base.join("cm"), &cs);
    m.mount_again();
    assert_eq!(tree(&cm.0), tree(m.path()));
    cm.unmount();
}

/// Bundles sent as multipart uploads (RINGFS_TEST_MULTIPART_MIN below the
/// bundle size): a push killed (-9, by failpoint) after the first part of
/// its first upload leaves nothing acknowledged and no bundle under its
/// name (file:// keeps the unfinished upload as a staging file, which no
/// listing shows); one killed after two multipart bundles were
/// acknowledged resumes sending only the rest, without rewriting them;
/// the clone is clean and byte-equal.
#[test]
fn killed_multipart_push_resumes_and_resends_nothing_acknowledged() {
    if raw_mode() {
        return;
    }
    let (mut m, base, remote, store) = six_files_unmounted();
    let small = [
        ("RINGFS_TEST_BUNDLE_MAX", "600000"),
        ("RINGFS_TEST_MULTIPART_MIN", "262144"),
    ];
    let pending = |env: &[(&str, &str)]| pending_chunks(env, &store);
    let total = pending(&small);
    let bundles = |d: &str| -> Vec<String> {
        files_in(&remote.join(d))
            .into_iter()
            .filter(|n| n.ends_with(".bundle"))
            .collect()
    };
    // Killed once the first part of the first upload is on the remote.
    let mut env = small.to_vec();
    env.push(("RINGFS_FAILPOINT", "part-sent"));
    let o = rf(&env, &["push", "--store", s(&store)]);
    assert!(!o.status.success(), "{:?}", out_str(&o));
    assert_eq!(pending(&small), total, "nothing acknowledged after a cut upload");
    assert!(
        bundles("chunks").is_empty(),
        "a cut upload left a bundle: {:?}",
        files_in(&remote.join("chunks"))
    );
    // Killed after two multipart bundles were acknowledged.
    let mut env = small.to_vec();
    env.push(("RINGFS_FAILPOINT", "bundle-acked"));
    let o = rf(&env, &["push", "--store", s(&store)]);
    assert!(!o.status.success(), "{:?}", out_str(&o));
    let left = pending(&small);
    assert!(left < total && left > 0, "{left} of {total}");
    let acked = acked(&remote, "chunks");
    assert_eq!(acked.len(), 2, "{acked:?}");
    let mtime = |n: &str| chunk_mtime(&remote, n);
    let times: Vec<_> = acked.iter().map(|n| mtime(n)).collect();
    let p = rj(&small, &["push", "--store", s(&store)]);
    assert_eq!(
        p["chunks_sent"].as_u64(),
        Some(left),
        "only what was not acknowledged: {p}"
    );
    assert_eq!(p["head_moved"], true, "{p}");
    for (n, t) in acked.iter().zip(times) {
        assert_eq!(mtime(n), t, "{n} rewritten");
    }
    let cs = base.join("clone");
    json(&["clone", &file_url(&remote), "--store", s(&cs)]);
    fsck_clean(&cs);
    let cm = Extra::mount(&base.join("cm"), &cs);
    m.mount_again();
    assert_eq!(tree(&cm.0), tree(m.path()));
    cm.unmount();
}

#[test]
fn corrupted_remote_objects_are_reported_with_their_key() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let base = m.store_dir().parent().unwrap().to_path_buf();
    let remote = base.join("remote");
    m.sh_ok("echo one > a && head -c 200000 /dev/urandom > big");
    json(&["commit", mp(&m)]);
    json(&["remote", "add", mp(&m), "origin", &file_url(&remote)]);
    json(&["push", mp(&m)]);
    let cs = base.join("clone");
    json(&["clone", &file_url(&remote), "--store", s(&cs)]);
    m.sh_ok("echo two > a");
    json(&["commit", mp(&m)]);
    let before: Vec<String> = files_in(&remote.join("objects"));
    json(&["push", mp(&m)]);
    m.unmount_checked();
    // Flip a byte in the new object bundle: pull names it and changes nothing.
    let new: Vec<String> = files_in(&remote.join("objects"))
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert_eq!(new.len(), 1, "{new:?}");
    let p = remote.join("objects").join(&new[0]);
    let mut b = std::fs::read(&p).unwrap();
    let n = b.len();
    b[n - 3] ^= 0x55;
    std::fs::write(&p, &b).unwrap();
    let err = refused(
        &[],
        &["pull", "--store", s(&cs)],
        &format!("objects/{}", new[0]),
    );
    assert!(err.contains("corrupt"), "{err}");
    b[n - 3] ^= 0x55;
    std::fs::write(&p, &b).unwrap();
    // A chunk bundle too, on clone: nothing left under the new store's name.
    let mut ch = files_in(&remote.join("chunks"));
    ch.sort_by_key(|n| std::cmp::Reverse(std::fs::metadata(remote.join("chunks").join(n)).unwrap().len()));
    let p = remote.join("chunks").join(&ch[0]);
    let mut b = std::fs::read(&p).unwrap();
    b[100] ^= 0x55;
    std::fs::write(&p, &b).unwrap();
    b[100] ^= 0x55;
    let cs2 = base.join("clone2");
    let err = refused(
        &[],
        &["clone", &file_url(&remote), "--store", s(&cs2), "--eager"],
        &format!("chunks/{}", ch[0]),
    );
    assert!(err.contains("corrupt"), "{err}");
    assert!(!cs2.join("store.redb").exists());
    // Repaired, the clone and the pull go through.
    std::fs::write(&p, &b).unwrap();
    json(&["clone", &file_url(&remote), "--store", s(&cs2), "--eager"]);
    fsck_clean(&cs2);
    assert_eq!(json(&["pull", "--store", s(&cs)])["up_to_date"], false);
    fsck_clean(&cs);
}

/// Two stores pushing one branch: the second is refused, the head intact.
fn second_writer(env: &[(&str, &str)], want_guard: &str) {
    let mut a = TestMount::new(Backend::Store);
    let mut b = TestMount::new(Backend::Store);
    let base = a.store_dir().parent().unwrap().to_path_buf();
    let remote = base.join("remote");
    a.sh_ok("echo from-a > f");
    let ca = json(&["commit", mp(&a)])["id"]
        .as_str()
        .unwrap()
        .to_string();
    b.sh_ok("echo from-b > f");
    json(&["commit", mp(&b)]);
    a.unmount_checked();
    b.unmount_checked();
    let (sa, sb) = (a.store_dir().to_path_buf(), b.store_dir().to_path_buf());
    let g = rj(
        env,
        &["remote", "add", "--store", s(&sa), "origin", &file_url(&remote)],
    );
    assert_eq!(g["heads"], want_guard, "{g}");
    rj(env, &["push", "--store", s(&sa)]);
    // Pushed again: nothing sent, no head written (either guard).
    let again = rj(env, &["push", "--store", s(&sa)]);
    assert_eq!((again["bytes_sent"].as_u64(), again["head_moved"].as_bool()), (Some(0), Some(false)), "{again}");
    rj(
        env,
        &["remote", "add", "--store", s(&sb), "origin", &file_url(&remote)],
    );
    let err = refused(
        env,
        &["push", "--store", s(&sb)],
        "another store pushes this branch",
    );
    assert!(
        err.contains("fork") && err.contains("Nothing of theirs was changed"),
        "{err}"
    );
    let head = |st: &Path| {
        rj(env, &["remote", "status", "--store", s(st)])["remotes"][0]["branches"][0]["remote"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(head(&sa), ca);
    assert_eq!(head(&sb), ca);
    // A clone of the remote continues A's line: allowed; then A, behind, is refused.
    let cs = base.join("clone");
    rj(env, &["clone", &file_url(&remote), "--store", s(&cs)]);
    let cm = Extra::mount(&base.join("cm"), &cs);
    std::fs::write(cm.0.join("g"), "clone").unwrap();
    let cc = json(&["commit", s(&cm.0)])["id"]
        .as_str()
        .unwrap()
        .to_string();
    cm.unmount();
    rj(env, &["push", "--store", s(&cs)]);
    assert_eq!(head(&sa), cc);
    a.mount_again();
    a.sh_ok("echo again > f");
    json(&["commit", mp(&a)]);
    a.unmount_checked();
    refused(
        env,
        &["push", "--store", s(&sa)],
        "another store pushes this branch",
    );
    assert_eq!(head(&sa), cc);
    // A pulls is refused too (diverged), and nothing changes.
    refused(env, &["pull", "--store", s(&sa)], "diverged");
    // Its lag counts the one commit the remote lacks, not its whole history
    // (the remote head is not in A's history; what A pushed before is held).
    let st = rj(env, &["remote", "status", "--store", s(&sa)]);
    assert_eq!(st["remotes"][0]["branches"][0]["pending_commits"], 1, "{st}");
    assert_eq!(
        std::fs::read_dir(remote.join("heads").join("6d61696e"))
            .map(|r| r.count())
            .unwrap_or(0)
            > 0,
        want_guard == "cas"
    );
    // Restore the harness's mounts.
    a.mount_again();
    b.mount_again();
}

#[test]
fn second_writer_refused_with_compare_and_swap() {
    if raw_mode() {
        return;
    }
    second_writer(&[], "cas");
}

#[test]
fn second_writer_refused_without_compare_and_swap() {
    if raw_mode() {
        return;
    }
    second_writer(&[("RINGFS_TEST_NO_CAS", "1")], "writers");
}

#[test]
fn unreachable_remote_is_a_clear_error_and_the_workspace_keeps_working() {
    if raw_mode() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    let base = m.store_dir().parent().unwrap().to_path_buf();
    let remote = base.join("remote");
    m.sh_ok("echo one > a");
    json(&["commit", mp(&m)]);
    json(&["remote", "add", mp(&m), "origin", &file_url(&remote)]);
    json(&["push", mp(&m)]);
    let away = base.join("remote-away");
    std::fs::rename(&remote, &away).unwrap();
    m.sh_ok("echo two > a && echo new > b");
    json(&["commit", mp(&m)]);
    let err = refused(&[], &["push", mp(&m)], "is not a directory");
    assert!(err.contains(&remote.display().to_string()), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // The workspace goes on at local speed; status shows the lag and the error.
    m.sh_ok("echo three > c && cat a b c >/dev/null");
    assert_eq!(std::fs::read_to_string(m.p("a")).unwrap(), "two\n");
    let st = json(&["remote", "status", mp(&m)]);
    let r = &st["remotes"][0];
    assert_eq!(r["reachable"], false, "{st}");
    assert!(
        r["last_error"]
            .as_str()
            .unwrap()
            .contains("not a directory"),
        "{st}"
    );
    assert!(
        r["branches"][0]["pending_objects"].as_u64().unwrap() > 0,
        "{st}"
    );
    assert_ne!(
        r["branches"][0]["remote"], r["branches"][0]["local"],
        "{st}"
    );
    // Back: everything arrives.
    std::fs::rename(&away, &remote).unwrap();
    let p = json(&["push", mp(&m)]);
    assert_eq!(p["head_moved"], true);
    let st = json(&["remote", "status", mp(&m)]);
    assert!(st["remotes"][0]["last_error"].is_null(), "{st}");
    assert_eq!(
        st["remotes"][0]["branches"][0]["remote"],
        st["remotes"][0]["branches"][0]["local"]
    );
    let cs = base.join("clone");
    json(&["clone", &file_url(&remote), "--store", s(&cs)]);
    let cm = Extra::mount(&base.join("cm"), &cs);
    assert_eq!(std::fs::read_to_string(cm.0.join("b")).unwrap(), "new\n");
    cm.unmount();
}

#[test]
fn s3_remote_unreachable_is_refused_quickly_without_secrets_and_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let store = t.path().join("store");
    let mnt = t.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    // A store made by a mount and unmount (no mount needed for the rest).
    let o = ringfs(&["mount", s(&mnt), "--store", s(&store), "--daemon"]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    let o = run_timeout(Command::new(RINGFS).arg("umount").arg(&mnt), Duration::from_secs(30));
    assert!(o.status.success(), "{:?}", out_str(&o));
    let secret = "sEcReT-do-not-print-1234";
    let env = [("AWS_ENDPOINT_URL", "http://127.0.0.1:1"), ("AWS_ACCESS_KEY_ID", "GKtestkey"), ("AWS_SECRET_ACCESS_KEY", secret), ("AWS_REGION", "garage")];
    refused(&env, &["remote", "add", "--store", s(&store), "origin", "s3://user:pw@bucket/x"], "no credentials");
    let t0 = std::time::Instant::now();
    let err = refused(&env, &["remote", "add", "--store", s(&store), "origin", "s3://ringfs-test/ws"], "remote s3://ringfs-test/ws");
    assert!(!err.contains(secret), "{err}");
    // One line: object_store's INFO lines of each retry are not shown.
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(t0.elapsed() < Duration::from_secs(50), "{:?}", t0.elapsed());
    assert!(!store.join("remotes").exists());
}

/// A remote emptied and set up again under the same URL (a wiped bucket, a
/// replaced disk) is a new remote: its marker carries a new identity, so the
/// store's record of what the old one held is dropped and the next push
/// sends everything its branch needs; a clone of it is complete.
#[test]
fn a_remote_emptied_under_the_same_url_gets_everything_again() {
    if raw_mode() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    let base = m.store_dir().parent().unwrap().to_path_buf();
    let remote = base.join("remote");
    m.sh_ok("echo one > one && head -c 300000 /dev/urandom > big");
    json(&["commit", mp(&m), "-m", "one"]);
    json(&["remote", "add", mp(&m), "origin", &file_url(&remote)]);
    json(&["push", mp(&m)]);
    std::fs::remove_dir_all(&remote).unwrap();
    std::fs::create_dir(&remote).unwrap();
    m.sh_ok("echo two > two");
    json(&["commit", mp(&m), "-m", "two"]);
    let o = rf(&[], &["push", mp(&m), "--json"]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "push: {out} {err}");
    assert!(err.contains("not the remote this store pushed to before"), "{err}");
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(p["bytes_sent"].as_u64().unwrap() > 300000 && p["remote_reset"] == true, "{p}");
    let clone = base.join("clone");
    rj(&[], &["clone", &file_url(&remote), "--store", s(&clone)]);
    fsck_clean(&clone);
    // And the push after that is back to sending nothing twice.
    let p = json(&["push", mp(&m)]);
    assert_eq!(p["bytes_sent"].as_u64(), Some(0), "{p}");
}

/// A `cas` head keeps its newest 32 generations: a push prunes older ones
/// (oldest first), so reading the head lists a bounded number of keys, and
/// a clone still follows the newest.
#[test]
fn old_head_generations_are_pruned() {
    if raw_mode() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    let base = m.store_dir().parent().unwrap().to_path_buf();
    let remote = base.join("remote");
    m.sh_ok("echo one > one");
    json(&["commit", mp(&m)]);
    let g = json(&["remote", "add", mp(&m), "origin", &file_url(&remote)]);
    assert_eq!(g["heads"], "cas", "{g}");
    json(&["push", mp(&m)]);
    // Forty generations as a long history would leave them (each naming
    // the same commit, as a pushed-again head would).
    let dir = remote.join("heads").join(hex_name("main"));
    let first = std::fs::read_to_string(dir.join(format!("{:020}.json", 1))).unwrap();
    let mut rec: serde_json::Value = serde_json::from_str(&first).unwrap();
    for seq in 2..=40u64 {
        rec["seq"] = seq.into();
        std::fs::write(dir.join(format!("{seq:020}.json")), rec.to_string()).unwrap();
    }
    m.sh_ok("echo two > two");
    let c = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    let p = json(&["push", mp(&m)]);
    assert_eq!(p["head_moved"], true, "{p}");
    let mut gens: Vec<u64> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".json")?.parse().ok())
        .collect();
    gens.sort_unstable();
    assert_eq!(gens, (10..=41).collect::<Vec<u64>>(), "generations kept");
    let clone = base.join("clone");
    rj(&[], &["clone", &file_url(&remote), "--store", s(&clone)]);
    let log = json(&["log", "--store", s(&clone)]);
    assert_eq!(log["commits"][0]["id"].as_str(), Some(c.as_str()), "{log}");
}

fn hex_name(b: &str) -> String {
    b.bytes().map(|x| format!("{x:02x}")).collect()
}

/// The remote's marker is checked by every command that reads or writes a
/// remote (issue 41): another format or a newer layout version is refused
/// by clone, pull, push, remote add and remote status with one line naming
/// it, and nothing is made or changed.
#[test]
fn a_marker_of_another_format_or_version_is_refused_by_every_command() {
    if raw_mode() {
        return;
    }
    let (_m, base, remote, store) = six_files_unmounted();
    json(&["push", "--store", s(&store)]);
    let cs = base.join("clone");
    json(&["clone", &file_url(&remote), "--store", s(&cs)]);
    let marker = remote.join("ringfs-remote.json");
    let good = std::fs::read_to_string(&marker).unwrap();
    let cases = [(("\"ringfs-remote\"", "\"not-ringfs\""), "names format \"not-ringfs\""), (("\"version\": 1", "\"version\": 99"), "layout version 99 is newer")];
    for ((from, to), want) in cases {
        let bad = good.replace(from, to);
        assert_ne!(bad, good);
        std::fs::write(&marker, bad).unwrap();
        let c2 = base.join("clone2");
        refused(&[], &["clone", &file_url(&remote), "--store", s(&c2)], want);
        assert!(!c2.exists());
        refused(&[], &["pull", "--store", s(&cs)], want);
        refused(&[], &["push", "--store", s(&store)], want);
        refused(&[], &["remote", "add", "--store", s(&cs), "again", &file_url(&remote)], want);
        let st = rj(&[], &["remote", "status", "--store", s(&cs)]);
        assert!(st["remotes"][0]["error"].as_str().unwrap_or("").contains(want), "{st}");
    }
    std::fs::write(&marker, &good).unwrap();
    assert_eq!(json(&["pull", "--store", s(&cs)])["up_to_date"], true);
}

/// A head record naming no commit (an object of another kind, or no id at
/// all) is named as damaged — the remote, the branch and the record's key —
/// by clone, pull and push alike; push does not call it another store's.
#[test]
fn a_damaged_head_is_named_as_such_by_clone_pull_and_push() {
    if raw_mode() {
        return;
    }
    let (_m, base, remote, store) = six_files_unmounted();
    json(&["push", "--store", s(&store)]);
    let cs = base.join("clone");
    json(&["clone", &file_url(&remote), "--store", s(&cs)]);
    let key = remote.join("heads").join(hex_name("main")).join(format!("{:020}.json", 1));
    let good = std::fs::read_to_string(&key).unwrap();
    let rec: serde_json::Value = serde_json::from_str(&good).unwrap();
    // Another object the remote holds: the commit's tree or a file's manifest.
    let index = |n: &String| serde_json::from_slice::<serde_json::Value>(&std::fs::read(remote.join("index").join(n)).unwrap()).unwrap();
    let names = files_in(&remote.join("index"));
    let objs = names.iter().map(index).filter(|j| j["bundle"].as_str().unwrap().starts_with("objects/"));
    let other = objs.flat_map(|j| j["entries"].as_array().unwrap().clone()).map(|e| e[0].as_str().unwrap().to_string()).find(|id| *id != rec["commit"]).unwrap();
    let rel = format!("heads/{}/{:020}.json", hex_name("main"), 1);
    for (commit, why) in [(other.as_str(), "not a commit"), ("zz", "is not a commit id")] {
        let mut bad = rec.clone();
        bad["commit"] = commit.into();
        std::fs::write(&key, bad.to_string()).unwrap();
        let (url, c2) = (file_url(&remote), base.join("clone2"));
        for args in [vec!["clone", url.as_str(), "--store", s(&c2)], vec!["pull", "--store", s(&cs)], vec!["push", "--store", s(&store)]] {
            let err = refused(&[], &args, &format!("the head of branch main is damaged (record {rel})"));
            assert!(err.contains(why) && !err.contains("another store"), "{args:?}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "{err}");
        }
        assert!(!base.join("clone2").exists());
    }
    std::fs::write(&key, &good).unwrap();
    json(&["push", "--store", s(&store)]);
}

/// A clone killed after building its store and before the rename leaves
/// `.NAME.cloning-PID` beside it; the next clone into the same place
/// removes it (as a fork's leftovers are), and a live process's stays.
#[test]
fn a_killed_clones_build_directory_goes_at_the_next_clone() {
    if raw_mode() {
        return;
    }
    let (_m, base, remote, store) = six_files_unmounted();
    json(&["push", "--store", s(&store)]);
    let kc = base.join("kc");
    let o = rf(&[("RINGFS_TEST_DIE_IN_CLONE", "1")], &["clone", &file_url(&remote), "--store", s(&kc), "--eager"]);
    assert!(!o.status.success(), "{:?}", out_str(&o));
    let left = |pre: &str| files_in(&base).into_iter().filter(|n| n.starts_with(pre)).collect::<Vec<_>>();
    assert_eq!(left(".kc.cloning-").len(), 1, "{:?}", files_in(&base));
    assert!(!kc.exists());
    let live = base.join(format!(".kc.cloning-{}", std::process::id()));
    std::fs::create_dir(&live).unwrap();
    json(&["clone", &file_url(&remote), "--store", s(&kc), "--eager"]);
    assert_eq!(left(".kc.cloning-"), [live.file_name().unwrap().to_str().unwrap()]);
    fsck_clean(&kc);
}

/// `remote add` refuses a `file://` remote inside the workspace or the
/// store it is added to (through a symbolic link or `..` too: every push
/// would write into what it pushes), and `--store` of a mounted store (as
/// every other `--store` command does); nothing is made either way.
#[test]
fn remote_add_refuses_a_remote_inside_its_workspace_and_a_store_in_use() {
    if raw_mode() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    let base = m.store_dir().parent().unwrap().to_path_buf();
    let store = m.store_dir().to_path_buf();
    m.sh_ok("echo one > a && mkdir d");
    json(&["commit", mp(&m)]);
    let link = base.join("link");
    std::os::unix::fs::symlink(m.path(), &link).unwrap();
    for url in [
        file_url(&m.p("inside")),
        file_url(&m.p("d")),
        file_url(&link.join("inside")),
        format!("file://{}/elsewhere/../{}/inside", base.display(), m.path().file_name().unwrap().to_str().unwrap()),
        file_url(&store.join("r")),
    ] {
        refused(&[], &["remote", "add", mp(&m), "r", &url], "is inside the");
    }
    assert!(!m.p("inside").exists() && !store.join("r").exists() && !m.p("d/ringfs-remote.json").exists());
    let outside = base.join("remote");
    refused(&[], &["remote", "add", "--store", s(&store), "r", &file_url(&outside)], "in use by a running daemon");
    assert!(!outside.exists() && !store.join("remotes").join("r").exists());
    json(&["remote", "add", mp(&m), "r", &file_url(&outside)]);
    json(&["push", mp(&m)]);
}
