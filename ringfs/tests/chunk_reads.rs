//! Read-only opens served from the store's chunks (issue 14, DECISIONS
//! D67), through real mounts of lazy clones of `file://` remotes: reading
//! every file of a clone back creates no working copy (`STORE/wc/` stays
//! empty, `lazy_fetch.chunk_opens` counts the opens) and changes no size or
//! block count; a file open read-only and then opened for writing and
//! written shows the new bytes through the reader (and a truncate its new
//! size); a chunk-served file maps (shared and private) byte-equal; a
//! daemon killed (-9) with chunk-served files open leaves a store whose
//! next mount reads everything back; a restored file unlinked while open
//! from chunks reads back after `gc` dropped its only commit (D69); the
//! files the prefetch completes are read from the kernel's page cache with
//! no READ request, and a write after that is read back (D79). Run under `--passthrough off` and
//! `--transport dev` too (RINGFS_TEST_MOUNT_ARGS): with passthrough, the
//! writer's open must be served through the daemon while a chunk-served
//! open exists (the kernel refuses mixing), and later opens may use
//! passthrough again.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// An origin of `n` small files of random bytes (3 000 each, 50 per
/// directory) and one of 2 MB (`big`), pushed to a `file://` remote beside
/// it. Returns the mount and the remote's URL.
fn origin(n: usize) -> (TestMount, String) {
    let m = TestMount::new(Backend::Store);
    let remote = m.store_dir().parent().unwrap().join("remote");
    m.sh_ok(&format!(
        "for i in $(seq 0 {}); do d=d$((i / 50)); mkdir -p $d; head -c 3000 /dev/urandom > $d/f$i; done && \
         head -c 2000000 /dev/urandom > big && : > empty",
        n - 1
    ));
    json(&["commit", mp(&m), "-m", "files"]);
    json(&["remote", "add", mp(&m), "origin", &file_url(&remote)]);
    json(&["push", mp(&m)]);
    (m, file_url(&remote))
}

/// A mount of a lazy clone of `url` with no background prefetch (so no
/// working copy is built behind the test's back: every chunk comes through
/// opens).
fn clone_mount(url: &str) -> TestMount {
    let mut c = TestMount::builder(Backend::Store).name("clone").env("RINGFS_TEST_NO_PREFETCH", "1").mount();
    c.unmount_checked();
    std::fs::remove_dir_all(c.store_dir()).unwrap();
    json(&["clone", url, "--store", s(c.store_dir())]);
    c.mount_again();
    c
}

/// Working copies in `STORE/wc/`: non-empty files named by an inode number
/// (the pool's ready files are empty; every file the tests read has bytes).
fn working_copies(store: &Path) -> usize {
    std::fs::read_dir(store.join("wc"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.parse::<u64>().is_ok()) && e.metadata().unwrap().len() > 0)
        .count()
}

fn lazy_stats(m: &TestMount) -> serde_json::Value {
    json(&["remote", "status", mp(m)])["lazy_fetch"].clone()
}

/// Every file with its size and block count.
fn sizes(m: &TestMount) -> String {
    m.sh_ok("find . -type f | sort | xargs stat -c '%n %s %b'")
}

#[test]
fn reading_a_lazy_clone_back_creates_no_working_copy() {
    if raw_mode() {
        return;
    }
    let n = 120;
    let (m, url) = origin(n);
    let mut c = clone_mount(&url);
    let before = sizes(&c);
    assert_eq!(working_copies(c.store_dir()), 0);
    // Every byte, as the origin has it; twice (the second time from the
    // page cache or the local packs).
    assert_eq!(tree(c.path()), tree(m.path()));
    assert_eq!(tree(c.path()), tree(m.path()));
    assert_eq!(working_copies(c.store_dir()), 0, "read-only opens made working copies");
    let st = lazy_stats(&c);
    assert!(st["chunk_opens"].as_u64().unwrap() >= n as u64 + 1, "{st}");
    assert_eq!(json(&["remote", "status", mp(&c)])["remote_only_chunks"].as_u64(), Some(0));
    // A read changes no size nor block count.
    assert_eq!(sizes(&c), before);
    // Nothing to hash: the store is as the clone left it, and clean.
    c.unmount_checked();
    let o = ringfs(&["fsck", "--store", s(c.store_dir())]);
    assert!(o.status.success() && out_str(&o).0.contains("clean"), "{:?}", out_str(&o));
}

#[test]
fn a_write_through_another_handle_is_seen_by_a_chunk_served_reader() {
    if raw_mode() {
        return;
    }
    let (m, url) = origin(60);
    let c = clone_mount(&url);
    let orig = std::fs::read(m.p("d0/f1")).unwrap();
    let big = std::fs::read(m.p("big")).unwrap();
    // A reader served from chunks, reading the start.
    let r = std::fs::File::open(c.p("d0/f1")).unwrap();
    let mut head = vec![0u8; 100];
    r.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(head, orig[..100]);
    assert_eq!(working_copies(c.store_dir()), 0);
    // A writer opens it (its working copy built), writes at the start and
    // past the part read, and stays open.
    let mut w = std::fs::OpenOptions::new().read(true).write(true).open(c.p("d0/f1")).unwrap();
    w.write_all(b"NEW BYTES").unwrap();
    w.seek(SeekFrom::Start(2000)).unwrap();
    w.write_all(b"LATER").unwrap();
    let mut expect = orig.clone();
    expect[..9].copy_from_slice(b"NEW BYTES");
    expect[2000..2005].copy_from_slice(b"LATER");
    let mut got = vec![0u8; expect.len()];
    r.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(got, expect, "the reader does not see the writer's bytes");
    // After the writer's close, and through a new reader.
    drop(w);
    r.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(got, expect);
    assert_eq!(std::fs::read(c.p("d0/f1")).unwrap(), expect);
    // A truncate by path shows through the reader.
    std::fs::OpenOptions::new().write(true).open(c.p("d0/f1")).unwrap().set_len(500).unwrap();
    let mut all = Vec::new();
    (&r).seek(SeekFrom::Start(0)).unwrap();
    (&r).read_to_end(&mut all).unwrap();
    assert_eq!(all, expect[..500]);
    drop(r);
    // Once no chunk-served open is left, the file opens (with passthrough
    // when it is on) for reading and writing as any other.
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(c.p("d0/f1")).unwrap();
    f.seek(SeekFrom::End(0)).unwrap();
    f.write_all(b"tail").unwrap();
    drop(f);
    let mut e2 = expect[..500].to_vec();
    e2.extend_from_slice(b"tail");
    assert_eq!(std::fs::read(c.p("d0/f1")).unwrap(), e2);
    // Reader and writer of a file not yet read, writer first closing last:
    // a second reader opened while the writer is open reads its bytes.
    let r1 = std::fs::File::open(c.p("big")).unwrap();
    let w = std::fs::OpenOptions::new().write(true).open(c.p("big")).unwrap();
    w.write_all_at(b"MIDDLE", 1_000_000).unwrap();
    drop(r1);
    let r2 = std::fs::File::open(c.p("big")).unwrap();
    let mut mid = [0u8; 6];
    r2.read_exact_at(&mut mid, 1_000_000).unwrap();
    assert_eq!(&mid, b"MIDDLE");
    drop(w);
    drop(r2);
    let mut eb = big.clone();
    eb[1_000_000..1_000_006].copy_from_slice(b"MIDDLE");
    assert_eq!(std::fs::read(c.p("big")).unwrap(), eb);
    // The changes are stored like any other (a commit hashes them).
    json(&["commit", mp(&c), "-m", "edits"]);
}

#[test]
fn a_chunk_served_file_maps_byte_equal() {
    if raw_mode() {
        return;
    }
    let (m, url) = origin(10);
    let c = clone_mount(&url);
    let big = std::fs::read(m.p("big")).unwrap();
    let f = std::fs::File::open(c.p("big")).unwrap();
    let shared = unsafe { memmap2::Mmap::map(&f) }.expect("MAP_SHARED read-only map of a chunk-served file");
    assert!(shared[..] == big[..], "MAP_SHARED bytes differ");
    drop(shared);
    let private = unsafe { memmap2::MmapOptions::new().map_copy_read_only(&f) }.expect("MAP_PRIVATE map");
    assert!(private[..] == big[..], "MAP_PRIVATE bytes differ");
    drop(private);
    // A second file mapped with no read before it.
    let g = std::fs::File::open(c.p("d0/f3")).unwrap();
    let map = unsafe { memmap2::Mmap::map(&g) }.unwrap();
    assert_eq!(&map[..], &std::fs::read(m.p("d0/f3")).unwrap()[..]);
    // An empty file opens and reads empty.
    assert_eq!(std::fs::read(c.p("empty")).unwrap(), b"");
    assert_eq!(working_copies(c.store_dir()), 0);
}

#[test]
fn a_daemon_killed_with_chunk_served_opens_remounts_and_reads_back() {
    if raw_mode() {
        return;
    }
    let (m, url) = origin(60);
    let mut c = clone_mount(&url);
    let open: Vec<std::fs::File> = (0..5).map(|i| std::fs::File::open(c.p(&format!("d0/f{i}"))).unwrap()).collect();
    for f in &open {
        let mut b = [0u8; 10];
        f.read_exact_at(&mut b, 0).unwrap();
    }
    c.kill_daemon();
    drop(open);
    c.mount_again();
    assert_eq!(tree(c.path()), tree(m.path()));
    assert_eq!(working_copies(c.store_dir()), 0);
    c.unmount_checked();
    let o = ringfs(&["fsck", "--store", s(c.store_dir())]);
    assert!(o.status.success() && out_str(&o).0.contains("clean"), "{:?}", out_str(&o));
}

/// `ringfs ARGS` that must succeed.
fn ringfs_ok(args: &[&str]) {
    let out = ringfs(args);
    assert!(out.status.success(), "ringfs {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A chunk-served file (made by a restore, so it has no working copy) that
/// is unlinked while open, and whose only commit is then dropped (the
/// branch moved back, a commit made, `gc` collecting it and compacting its
/// pack), still reads back byte-equal through the open descriptor past
/// what was read before; fsck is clean after (D69).
#[test]
fn an_unlinked_chunk_served_file_reads_back_after_gc_drops_its_commit() {
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("echo one > w");
    let c1 = json(&["commit", mp(&m), "-m", "one"])["id"].as_str().unwrap().to_string();
    m.sh_ok("head -c 3000000 /dev/urandom > z");
    let want = std::fs::read(m.path().join("z")).unwrap();
    let c2 = json(&["commit", mp(&m), "-m", "z"])["id"].as_str().unwrap().to_string();
    // Away and back: z comes back with the commit's manifest and no working copy.
    ringfs_ok(&["restore", mp(&m), &c1]);
    ringfs_ok(&["restore", mp(&m), &c2]);
    let f = std::fs::File::open(m.path().join("z")).unwrap();
    let mut head = [0u8; 4096];
    f.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(head[..], want[..4096]);
    assert!(lazy_stats(&m)["chunk_opens"].as_u64().unwrap() >= 1, "{}", lazy_stats(&m));
    std::fs::remove_file(m.path().join("z")).unwrap();
    ringfs_ok(&["branch", mp(&m), "main", &c1, "--force"]);
    ringfs_ok(&["restore", mp(&m), "main"]);
    m.sh_ok("echo three > w");
    json(&["commit", mp(&m), "-m", "three"]);
    let gc = json(&["gc", mp(&m)]);
    assert!(gc["snapshots"]["commits_deleted"].as_u64().unwrap() >= 1, "{gc}");
    let mut got = Vec::new();
    (&f).read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), want.len(), "read from the descriptor's position 0 (pread left it there)");
    assert!(got == want, "bytes differ after gc");
    drop(f);
    m.unmount_checked();
    let out = ringfs(&["fsck", "--full", "--store", s(m.store_dir())]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

fn read_requests(m: &TestMount) -> u64 {
    json(&["stats", mp(m)])["requests"]["READ"]["count"].as_u64().unwrap_or(0)
}

/// D79: a lazy clone mounted, every file looked up by the kernel, then the
/// prefetch (held back until then by RINGFS_TEST_PREFETCH_GATE; no working
/// copies built after it): each small file it completes is put in the
/// page cache, so reading them all back is byte-equal to the origin with
/// no READ request; a file appended to afterwards reads back with the new
/// bytes, and so does one truncated by path.
#[test]
fn files_the_prefetch_completes_are_read_from_the_page_cache() {
    if raw_mode() {
        return;
    }
    let (o, url) = origin(60);
    let gate = o.store_dir().parent().unwrap().join("prefetch-gate");
    let mut c = TestMount::builder(Backend::Store)
        .name("clone")
        .env("RINGFS_TEST_PREFETCH_GATE", s(&gate))
        .env("RINGFS_TEST_NO_WC_BUILD", "1")
        .mount();
    c.unmount_checked();
    std::fs::remove_dir_all(c.store_dir()).unwrap();
    json(&["clone", &url, "--store", s(c.store_dir())]);
    c.mount_again();
    c.sh_ok("find . -type f -print0 | xargs -0 stat -c %s > /dev/null");
    std::fs::write(&gate, b"").unwrap();
    let t0 = std::time::Instant::now();
    loop {
        let l = lazy_stats(&c);
        // 60 files of 3 000 bytes; `big` (2 MB) is above the fill's size
        // limit and `empty` has no bytes.
        if l["page_cache_files"].as_u64() == Some(60) && json(&["remote", "status", mp(&c)])["remote_only_chunks"] == 0 {
            break;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(30), "the prefetch did not fill 60 files: {l}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let before = read_requests(&c);
    for i in 0..60 {
        let rel = format!("d{}/f{i}", i / 50);
        let got = std::fs::read(c.path().join(&rel)).unwrap();
        assert_eq!(got, std::fs::read(o.path().join(&rel)).unwrap(), "{rel}");
    }
    assert_eq!(read_requests(&c), before, "reading the filled files asked the daemon for READ");
    // The pages follow the file: an append and a truncate by path.
    let f0 = c.path().join("d0/f0");
    let mut w = std::fs::OpenOptions::new().append(true).open(&f0).unwrap();
    w.write_all(b"appended").unwrap();
    drop(w);
    let got = std::fs::read(&f0).unwrap();
    assert_eq!(got.len(), 3008);
    assert!(got.ends_with(b"appended"));
    let f1 = c.path().join("d0/f1");
    c.sh_ok("truncate -s 100 d0/f1");
    assert_eq!(std::fs::read(&f1).unwrap(), std::fs::read(o.path().join("d0/f1")).unwrap()[..100]);
    c.unmount_checked();
}
