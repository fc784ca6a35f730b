//! Lazy clones (issue 14, DECISIONS D51) against `file://` remotes, through
//! real mounts: a clone fetches only the snapshot objects, `ls -R` of its
//! mount answers before any chunk is fetched, every file then reads back
//! byte-equal to the origin (fetched on first open); a remote gone after
//! the clone makes the open of a file not yet fetched fail with EIO and a
//! log line naming the remote and the chunk, while fetched files still
//! read; a daemon killed (-9) during the background prefetch leaves a
//! store whose next mount fetches the rest; fsck reports remote-only chunks
//! as such; a push from the clone sends only what it made; `--eager`
//! fetches everything before returning; reading back many small files takes
//! far fewer GETs than files, and reads during the prefetch are right (D56);
//! after the prefetch every file has a working copy before its first open
//! (D58); a reader racing the prefetch downloads each chunk once (D63);
//! the clone's record lists chunks in the order a path walk needs them
//! (D82).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}



/// An origin workspace with a tree of small files and two larger ones,
/// committed and pushed to a `file://` remote beside it. Returns the mount
/// and the remote's URL.
fn origin() -> (TestMount, String) {
    let m = TestMount::new(Backend::Store);
    let remote = m.store_dir().parent().unwrap().join("remote");
    m.sh_ok(
        "mkdir -p a/b c && for i in $(seq 1 40); do echo file $i > a/f$i; done && \
         head -c 3000000 /dev/urandom > a/b/big && head -c 1500000 /dev/urandom > c/big2 && \
         ln -s f1 a/l && echo x > c/small",
    );
    json(&["commit", mp(&m), "-m", "one"]);
    json(&["remote", "add", mp(&m), "origin", &file_url(&remote)]);
    json(&["push", mp(&m)]);
    (m, file_url(&remote))
}

/// A mount of a clone of `url` (`extra`: clone flags; `envs`: the daemon's).
fn clone_mount(url: &str, extra: &[&str], envs: &[(&str, &str)]) -> (TestMount, serde_json::Value) {
    let mut b = TestMount::builder(Backend::Store).name("clone");
    for (k, v) in envs {
        b = b.env(*k, *v);
    }
    let mut c = b.mount();
    c.unmount_checked();
    std::fs::remove_dir_all(c.store_dir()).unwrap();
    let mut a = vec!["clone", url, "--store", s(c.store_dir())];
    a.extend_from_slice(extra);
    let v = json(&a);
    c.mount_again();
    (c, v)
}

fn remote_only(m: &TestMount) -> u64 {
    json(&["remote", "status", mp(m)])["remote_only_chunks"]
        .as_u64()
        .unwrap()
}

/// The `file://` remote at `url` moved aside (unreachable) until dropped,
/// on every path out of a test.
struct RemoteAway(String);

impl RemoteAway {
    fn new(url: &str) -> RemoteAway {
        let dir = url.strip_prefix("file://").unwrap().to_string();
        std::fs::rename(&dir, format!("{dir}.away")).unwrap();
        RemoteAway(dir)
    }
}

impl Drop for RemoteAway {
    fn drop(&mut self) {
        let _ = std::fs::rename(format!("{}.away", self.0), &self.0);
    }
}

fn fsck_text(store: &Path) -> String {
    let o = ringfs(&["fsck", "--store", s(store)]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck {}: {out} {err}", store.display());
    out
}

#[test]
fn lazy_clone_lists_before_any_fetch_then_reads_byte_equal() {
    if raw_mode() {
        return;
    }
    let (m, url) = origin();
    let (mut c, v) = clone_mount(&url, &[], &[("RINGFS_TEST_NO_PREFETCH", "1")]);
    let n = v["remote_only_chunks"].as_u64().unwrap();
    assert!(
        n > 10 && v["remote_only_bytes"].as_u64().unwrap() > 4_000_000,
        "{v}"
    );
    assert!(v["bytes_fetched"].as_u64().unwrap() < 200_000, "{v}");
    // The whole tree lists (names, sizes, links) with nothing fetched.
    let ls = c.sh_ok("ls -lR . | grep -c f");
    assert!(ls.trim().parse::<u32>().unwrap() >= 40, "{ls}");
    assert_eq!(std::fs::metadata(c.p("a/b/big")).unwrap().len(), 3_000_000);
    assert_eq!(remote_only(&c), n);
    // Every byte, as the origin has it.
    assert_eq!(tree(c.path()), tree(m.path()));
    assert_eq!(remote_only(&c), 0);
    // A push from the clone sends what it made, not the chunks it fetched.
    std::fs::write(c.p("new"), "from the clone").unwrap();
    json(&["commit", mp(&c), "-m", "two"]);
    let p = json(&["push", mp(&c)]);
    assert!(p["bytes_sent"].as_u64().unwrap() < 20_000, "{p}");
    c.unmount_checked();
    assert!(fsck_text(c.store_dir()).contains("clean"));
}

#[test]
fn fsck_push_and_status_of_an_unfetched_lazy_clone() {
    if raw_mode() {
        return;
    }
    let (_m, url) = origin();
    let (mut c, v) = clone_mount(&url, &[], &[("RINGFS_TEST_NO_PREFETCH", "1")]);
    let n = v["remote_only_chunks"].as_u64().unwrap();
    std::fs::write(c.p("mine"), "only here").unwrap();
    json(&["commit", mp(&c), "-m", "mine"]);
    // Nothing remote-only is claimed or read by the push.
    let p = json(&["push", mp(&c)]);
    assert!(p["bytes_sent"].as_u64().unwrap() < 20_000, "{p}");
    assert_eq!(remote_only(&c), n);
    let st = ringfs(&["remote", "status", mp(&c)]);
    assert!(
        out_str(&st).0.contains("still only on the remote"),
        "{:?}",
        out_str(&st)
    );
    c.unmount_checked();
    let f = fsck_text(c.store_dir());
    assert!(
        f.contains("only on the remote") && f.contains("clean"),
        "{f}"
    );
    // gc leaves them.
    json(&["gc", "--store", s(c.store_dir())]);
    assert!(fsck_text(c.store_dir()).contains(&format!("{n} chunk{} (", if n == 1 { "" } else { "s" })));
    // Another remote lacks them, and this store cannot send them: refused
    // with the way out, not an I/O error about a pack.
    let other = c.store_dir().parent().unwrap().join("other");
    json(&["remote", "add", "--store", s(c.store_dir()), "other", &file_url(&other)]);
    let o = ringfs(&["push", "--store", s(c.store_dir()), "--remote", "other"]);
    let (out, err) = out_str(&o);
    assert!(!o.status.success(), "push to another remote: {out}");
    assert!(err.contains("only on the remote it was cloned from") && err.contains("--eager"), "{err}");
}

#[test]
fn remote_gone_after_a_lazy_clone_gives_eio_and_fetched_files_still_read() {
    if raw_mode() {
        return;
    }
    let (m, url) = origin();
    // Batches of 1 MiB: `a/b/big`'s neighbourhood then ends before `c/big2`.
    let (c, _) = clone_mount(&url, &[], &[("RINGFS_TEST_NO_PREFETCH", "1"), ("RINGFS_TEST_PREFETCH_BATCH_BYTES", "1048576")]);
    let want = std::fs::read(m.p("a/b/big")).unwrap();
    assert_eq!(std::fs::read(c.p("a/b/big")).unwrap(), want);
    let back = RemoteAway::new(&url);
    let t = Instant::now();
    let e = std::fs::read(c.p("c/big2")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert!(t.elapsed() < Duration::from_secs(30));
    let log = c.daemon_log();
    assert!(
        log.contains("remote origin") && log.contains("chunk"),
        "{log}"
    );
    // What was fetched still reads.
    assert_eq!(std::fs::read(c.p("a/b/big")).unwrap(), want);
    drop(back);
    // Back: the file arrives, whole.
    assert_eq!(
        std::fs::read(c.p("c/big2")).unwrap(),
        std::fs::read(m.p("c/big2")).unwrap()
    );
}

/// A lazy clone's daemon checks the remote's marker before it fetches (as
/// clone, pull and push do): a marker of another format makes the open
/// of a file not fetched yet fail with EIO and a log line naming the
/// marker; the marker back, the file reads.
#[test]
fn a_lazy_clones_daemon_refuses_a_remote_of_another_format() {
    if raw_mode() {
        return;
    }
    let (m, url) = origin();
    let (c, _) = clone_mount(&url, &[], &[("RINGFS_TEST_NO_PREFETCH", "1")]);
    let marker = Path::new(url.strip_prefix("file://").unwrap()).join("ringfs-remote.json");
    let good = std::fs::read_to_string(&marker).unwrap();
    std::fs::write(&marker, good.replace("\"ringfs-remote\"", "\"not-ringfs\"")).unwrap();
    let e = std::fs::read(c.p("a/b/big")).unwrap_err();
    std::fs::write(&marker, &good).unwrap();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let log = c.daemon_log();
    assert!(log.contains("names format \"not-ringfs\""), "{log}");
    assert_eq!(std::fs::read(c.p("a/b/big")).unwrap(), std::fs::read(m.p("a/b/big")).unwrap());
}

#[test]
fn prefetch_killed_midway_resumes_at_the_next_mount() {
    if raw_mode() {
        return;
    }
    let (m, url) = origin();
    let (mut c, v) = clone_mount(&url, &[], &[("RINGFS_TEST_PREFETCH_BATCH_BYTES", "32768")]);
    let n = v["remote_only_chunks"].as_u64().unwrap();
    // Killed once the prefetch has begun (usually mid-way: many small batches).
    let t = Instant::now();
    while remote_only(&c) == n && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    c.kill_daemon();
    c.mount_again();
    let t = Instant::now();
    while remote_only(&c) > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "prefetch did not finish ({n} chunks)"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Everything is local now: reads need no remote.
    let same = {
        let _away = RemoteAway::new(&url);
        tree(c.path()) == tree(m.path())
    };
    assert!(same);
    c.unmount_checked();
    assert!(fsck_text(c.store_dir()).contains("clean"));
    // A mount finding nothing remote-only drops the record.
    let record = c.store_dir().join("remotes/origin/remote-chunks.json");
    assert!(record.exists());
    c.mount_again();
    c.unmount_checked();
    assert!(!record.exists());
}

#[test]
fn eager_clone_fetches_everything_before_returning() {
    if raw_mode() {
        return;
    }
    let (m, url) = origin();
    let (mut c, v) = clone_mount(&url, &["--eager"], &[]);
    assert_eq!(v["remote_only_chunks"].as_u64(), Some(0), "{v}");
    assert!(v["bytes_fetched"].as_u64().unwrap() > 4_000_000, "{v}");
    assert_eq!(remote_only(&c), 0);
    let same = {
        let _away = RemoteAway::new(&url);
        tree(c.path()) == tree(m.path())
    };
    assert!(same);
    c.unmount_checked();
    assert!(fsck_text(c.store_dir()).contains("clean"));
}

#[test]
fn a_corrupted_chunk_on_the_remote_is_never_served() {
    if raw_mode() {
        return;
    }
    let (m, url) = origin();
    let (c, _) = clone_mount(&url, &[], &[("RINGFS_TEST_NO_PREFETCH", "1")]);
    let dir = Path::new(url.strip_prefix("file://").unwrap()).join("chunks");
    let mut ch: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    ch.sort_by_key(|p| std::cmp::Reverse(std::fs::metadata(p).unwrap().len()));
    let good = std::fs::read(&ch[0]).unwrap();
    let mut bad = good.clone();
    // Bytes in the middle of the bundle: some chunk of a big file (three,
    // a few apart, so that one is not in a record header).
    let k = bad.len() / 2;
    for d in [0, 300, 600] {
        bad[k + d] ^= 0x55;
    }
    std::fs::write(&ch[0], &bad).unwrap();
    let failed: Vec<&str> = ["a/b/big", "c/big2"]
        .into_iter()
        .filter(|f| match std::fs::read(c.p(f)) {
            Ok(b) => {
                assert_eq!(b, std::fs::read(m.p(f)).unwrap(), "{f} served other bytes");
                false
            }
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{f}: {e}");
                true
            }
        })
        .collect();
    std::fs::write(&ch[0], &good).unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        c.daemon_log().contains("does not match its hash"),
        "{}",
        c.daemon_log()
    );
    // Repaired on the remote: the file arrives.
    assert_eq!(tree(c.path()), tree(m.path()));
}

/// An origin of `n` small files of random bytes (3 000 each, 50 per
/// directory) and one of 2 MB, pushed to a `file://` remote beside it.
fn origin_of_small_files(n: usize) -> (TestMount, String) {
    let m = TestMount::new(Backend::Store);
    let remote = m.store_dir().parent().unwrap().join("remote");
    m.sh_ok(&format!(
        "for i in $(seq 0 {}); do d=d$((i / 50)); mkdir -p $d; head -c 3000 /dev/urandom > $d/f$i; done && \
         head -c 2000000 /dev/urandom > big",
        n - 1
    ));
    json(&["commit", mp(&m), "-m", "small"]);
    json(&["remote", "add", mp(&m), "origin", &file_url(&remote)]);
    json(&["push", mp(&m)]);
    (m, file_url(&remote))
}

/// D56: reading back N small files of a lazy clone (no prefetch: every
/// chunk comes through first opens) takes far fewer GETs than N — a first
/// open fetches the neighbourhood of its chunk — and every byte is right.
#[test]
fn reading_many_small_files_takes_far_fewer_gets_than_files() {
    if raw_mode() {
        return;
    }
    let n = 300;
    let (m, url) = origin_of_small_files(n);
    let (c, v) = clone_mount(&url, &[], &[("RINGFS_TEST_NO_PREFETCH", "1")]);
    assert!(v["remote_only_chunks"].as_u64().unwrap() >= n as u64, "{v}");
    assert_eq!(tree(c.path()), tree(m.path()));
    assert_eq!(remote_only(&c), 0);
    let st = json(&["remote", "status", mp(&c)]);
    let gets = st["lazy_fetch"]["gets"].as_u64().unwrap();
    let opens = st["lazy_fetch"]["first_opens"].as_u64().unwrap();
    assert!(gets >= 1 && gets * 10 < n as u64, "{gets} GETs for {n} files: {st}");
    assert!(opens * 10 < n as u64, "{opens} first opens fetched for {n} files: {st}");
}

/// D56: reads while the background prefetch runs (small batches, first
/// opens from two threads in an order unlike the prefetch's, so they jump
/// its queue and wait on its fetches in flight) return the origin's bytes.
#[test]
fn reads_during_the_prefetch_return_the_right_bytes() {
    if raw_mode() {
        return;
    }
    let (m, url) = origin_of_small_files(200);
    let (c, _) = clone_mount(
        &url,
        &[],
        &[
            ("RINGFS_TEST_PREFETCH_BATCH_BYTES", "16384"),
            ("RINGFS_TEST_PREFETCH_WORKERS", "2"),
        ],
    );
    let root = c.path().to_path_buf();
    let origin = m.path().to_path_buf();
    let mut names: Vec<String> = (0..200).map(|i| format!("d{}/f{i}", i / 50)).collect();
    names.push("big".into());
    names.reverse();
    let (odd, even): (Vec<_>, Vec<_>) = names.iter().cloned().enumerate().partition(|(i, _)| i % 2 == 1);
    let check = |part: Vec<(usize, String)>| {
        let (root, origin) = (root.clone(), origin.clone());
        std::thread::spawn(move || {
            for (_, f) in part {
                let got = std::fs::read(root.join(&f)).unwrap_or_else(|e| panic!("{f}: {e}"));
                assert!(got == std::fs::read(origin.join(&f)).unwrap(), "{f} differs from the origin");
            }
        })
    };
    let (a, b) = (check(odd), check(even));
    a.join().unwrap();
    b.join().unwrap();
    let t = Instant::now();
    while remote_only(&c) > 0 {
        assert!(t.elapsed() < Duration::from_secs(30), "the prefetch did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(tree(c.path()), tree(m.path()));
}

/// D58: once the prefetch has stored every chunk, every file of the clone
/// has a working copy in `STORE/wc/` before anything opened it (built in
/// the background as batches completed its chunks), no half-built one is
/// left, and every file then reads back byte-equal without a first open
/// asking the remote.
#[test]
fn after_the_prefetch_every_file_has_a_working_copy_before_any_open() {
    if raw_mode() {
        return;
    }
    let n = 200;
    let (m, url) = origin_of_small_files(n);
    let (c, _) = clone_mount(
        &url,
        &[],
        &[
            ("RINGFS_TEST_PREFETCH_BATCH_BYTES", "16384"),
            ("RINGFS_TEST_PREFETCH_WORKERS", "2"),
        ],
    );
    let files = n as u64 + 1; // and `big`
    let t = Instant::now();
    let mut st;
    loop {
        st = json(&["remote", "status", mp(&c)]);
        if st["remote_only_chunks"].as_u64() == Some(0)
            && st["lazy_fetch"]["wc_built"].as_u64() == Some(files)
        {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "working copies not built: {st}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every working copy is there, whole, under its inode number.
    let mut built = 0;
    for e in std::fs::read_dir(c.store_dir().join("wc")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        assert!(
            !name.starts_with(".restore-"),
            "a half-built working copy left: {name}"
        );
        if name.parse::<u64>().is_ok() && e.metadata().unwrap().len() > 0 {
            built += 1;
        }
    }
    assert_eq!(built, files, "working copies in wc/ before any open");
    assert_eq!(tree(c.path()), tree(m.path()));
    let after = json(&["remote", "status", mp(&c)]);
    assert_eq!(
        after["lazy_fetch"]["first_opens"].as_u64(),
        Some(0),
        "{after}"
    );
    assert_eq!(
        after["lazy_fetch"]["wc_built"].as_u64(),
        Some(files),
        "{after}"
    );
}

/// D63: a reader going through the files in the prefetch's order (so it
/// catches up with it, waits on its fetches in flight and opens files of
/// batches it is still storing) gets every byte right, every chunk is
/// downloaded once (D59 finding 4: an open fetched a chunk the prefetch was
/// storing a second time), and no `.restore-*` name is left in `wc/`
/// (working copies are restored into unnamed files and linked into place).
#[test]
fn a_reader_racing_the_prefetch_downloads_each_chunk_once() {
    if raw_mode() {
        return;
    }
    let n = 300;
    let (m, url) = origin_of_small_files(n);
    let (c, v) = clone_mount(
        &url,
        &[],
        &[
            ("RINGFS_TEST_PREFETCH_BATCH_BYTES", "16384"),
            ("RINGFS_TEST_PREFETCH_WORKERS", "2"),
        ],
    );
    let remote = v["remote_only_chunks"].as_u64().unwrap();
    let mut names: Vec<String> = (0..n).map(|i| format!("d{}/f{i}", i / 50)).collect();
    names.push("big".into());
    for f in &names {
        let got = std::fs::read(c.path().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(got == std::fs::read(m.path().join(f)).unwrap(), "{f} differs from the origin");
    }
    let t = Instant::now();
    while remote_only(&c) > 0 {
        assert!(t.elapsed() < Duration::from_secs(30), "the prefetch did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = json(&["remote", "status", mp(&c)]);
    assert_eq!(st["lazy_fetch"]["chunks"].as_u64(), Some(remote), "chunks downloaded for {remote} remote-only: {st}");
    for e in std::fs::read_dir(c.store_dir().join("wc")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        assert!(!name.starts_with(".restore-"), "a restore's temporary left: {name}");
    }
    assert_eq!(tree(c.path()), tree(m.path()));
}

/// D59: a fork (and `mount --at`) of a lazy clone whose chunks are still
/// remote-only is refused with the way out (was: "pack ffffffff.pack is in
/// the origin's chunk or object index but not its pack table (run `ringfs
/// fsck`)" while fsck was clean); once the clone fetched everything, the
/// fork reads every byte.
#[test]
fn fork_of_an_unfetched_lazy_clone_is_refused_with_the_way_out() {
    if raw_mode() {
        return;
    }
    let (m, url) = origin();
    let (mut c, _) = clone_mount(&url, &[], &[("RINGFS_TEST_NO_PREFETCH", "1")]);
    c.unmount_checked();
    let new = c.store_dir().parent().unwrap().join("fork-store");
    let o = ringfs(&["fork", "--store", s(c.store_dir()), "--new-store", s(&new), "--no-mount"]);
    let (out, err) = out_str(&o);
    assert!(!o.status.success(), "fork of an unfetched lazy clone: {out}");
    assert!(err.contains("lazy clone") && err.contains("remote status") && !err.contains("ffffffff"), "{err}");
    assert!(!new.exists() || std::fs::read_dir(&new).unwrap().next().is_none(), "nothing left at --new-store");
    // Fetched (read back), the same fork works and reads as the origin.
    c.mount_again();
    assert_eq!(tree(c.path()), tree(m.path()));
    assert_eq!(remote_only(&c), 0);
    c.unmount_checked();
    let _ = std::fs::remove_dir_all(&new);
    json(&["fork", "--store", s(c.store_dir()), "--new-store", s(&new), "--no-mount"]);
    let mut f = TestMount::builder(Backend::Store).name("fork").mount();
    f.unmount_checked();
    std::fs::remove_dir_all(f.store_dir()).unwrap();
    std::fs::rename(&new, f.store_dir()).unwrap();
    f.mount_again();
    assert_eq!(tree(f.path()), tree(m.path()));
    f.unmount_checked();
}

/// D82: a lazy clone lists its remote-only chunks in the order a walk of
/// the tree by path first needs them — not in the order of the bundles'
/// names — and the prefetch takes its batches in that order, so it runs
/// ahead of a reader walking the tree (`cat`, `tar`, `grep -r`, a build).
/// The origin is pushed as many small bundles, whose hash names sort in no
/// order of the tree; the record's chunk order is checked against the
/// BLAKE3 hashes of the files in path order, then the clone reads back.
#[test]
fn the_clone_records_chunks_in_the_order_a_path_walk_needs_them() {
    if raw_mode() {
        return;
    }
    // The daemon makes the push's bundles: small ones.
    let m = TestMount::builder(Backend::Store)
        .env("RINGFS_TEST_BUNDLE_MAX", "20000")
        .mount();
    let remote = m.store_dir().parent().unwrap().join("remote");
    m.sh_ok(
        "for d in 0 1 2 3; do mkdir -p t/d$d; for i in $(seq 10 29); do \
         head -c 2000 /dev/urandom > t/d$d/f$i; done; done",
    );
    // One chunk each (below fs-core's MIN_CHUNK). Path order: d0..d3,
    // f10..f29 (names of equal length sort as numbers).
    let mut want = Vec::new();
    for d in 0..4 {
        for i in 10..30 {
            let b = std::fs::read(m.path().join(format!("t/d{d}/f{i}"))).unwrap();
            want.push(blake3::hash(&b).to_hex().to_string());
        }
    }
    json(&["commit", mp(&m), "-m", "tree"]);
    json(&["remote", "add", mp(&m), "origin", &file_url(&remote)]);
    let pushed = json(&["push", mp(&m)]);
    assert!(pushed["bundles_sent"].as_u64().unwrap() >= 6, "{pushed}");
    let (c, _) = clone_mount(&file_url(&remote), &[], &[("RINGFS_TEST_NO_PREFETCH", "1")]);
    let rec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(c.store_dir().join("remotes/origin/remote-chunks.json")).unwrap(),
    )
    .unwrap();
    let pos: std::collections::HashMap<&str, usize> = rec["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, e)| (e[0].as_str().unwrap(), i))
        .collect();
    let at: Vec<usize> = want.iter().map(|h| pos[h.as_str()]).collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "record positions of the files in path order: {at:?}"
    );
    assert_eq!(tree(c.path()), tree(m.path()));
}
