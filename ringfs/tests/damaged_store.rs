//! Damaged stores lose nothing silently (issue 12, item 6), each case as a
//! user found it, through the real binary and real mounts: `ringfs fsck`
//! reports damage (never panics, exit 1) and works read-only, `ringfs mount`
//! refuses a damaged store before writing anything, and `ringfs salvage`
//! rebuilds a workspace that mounts, with unnamed files in lost+found.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

macro_rules! skip_if_raw {
    () => {
        if raw_mode() {
            return; // about ringfs's own store
        }
    };
}

/// Deterministic bytes of file `i`, not periodic (a stretch of them is
/// found once in the database).
fn content(i: usize) -> Vec<u8> {
    let size = 1000 + i * 37_000;
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (i as u64 + 1);
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A workspace with files under names, unmounted cleanly; returns the mount
/// (unmounted) and name → bytes.
fn populated() -> (TestMount, BTreeMap<String, Vec<u8>>) {
    let mut m = TestMount::new(Backend::Store);
    let mut want = BTreeMap::new();
    fs::create_dir(m.p("src")).unwrap();
    for i in 0..12 {
        let name = if i % 2 == 0 { format!("src/f{i}") } else { format!("top{i}") };
        fs::write(m.p(&name), content(i)).unwrap();
        want.insert(name, content(i));
    }
    std::os::unix::fs::symlink("top1", m.p("link")).unwrap();
    m.unmount_checked();
    (m, want)
}

fn run(args: &[&str]) -> Output {
    run_timeout(Command::new(RINGFS).args(args), Duration::from_secs(120))
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Every file below `dir` (relative path → size, mtime) and its bytes' hash.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, String)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                let b = fs::read(e.path()).unwrap();
                out.insert(e.path().strip_prefix(dir).unwrap().to_path_buf(), (b.len() as u64, blake3::hash(&b).to_hex().to_string()));
            }
        }
    }
    out
}

/// `ringfs mount` of `store` must fail at once with a message containing
/// every `want`, and change nothing in the store.
fn mount_refused(m: &TestMount, store: &Path, want: &[&str]) -> String {
    let before = snapshot(store);
    let lock_mtime = || fs::metadata(store.join("ringfs.lock")).ok().map(|m| m.modified().unwrap());
    let lock_before = lock_mtime();
    let o = run_timeout(Command::new(RINGFS).args(["mount", &s(m.path()), "--store", &s(store)]), Duration::from_secs(60));
    let (out, err) = out_str(&o);
    assert!(!o.status.success(), "mount of a damaged store must be refused: {out}{err}");
    assert!(!is_mounted(m.path()), "a refused mount left {} mounted", m.path().display());
    for w in want {
        assert!(err.contains(w), "`{w}` missing in: {err}");
    }
    assert!(!err.contains("run `ringfs mount"), "the fix must not be the command that printed it: {err}");
    assert_eq!(snapshot(store), before, "a refused mount changed the store");
    assert_eq!(lock_mtime(), lock_before, "a refused mount changed ringfs.lock's mtime");
    err
}

/// `ringfs fsck` of `store`: its exit code and stdout+stderr. Never a panic.
fn fsck(store: &Path, full: bool) -> (i32, String) {
    let mut args = vec!["fsck", "--store"];
    let st = s(store);
    args.push(&st);
    if full {
        args.push("--full");
    }
    let o = run(&args);
    let (out, err) = out_str(&o);
    let all = format!("{out}{err}");
    assert!(!all.contains("panicked") && !all.contains("RUST_BACKTRACE"), "fsck panicked: {all}");
    assert_ne!(o.status.code(), Some(101), "fsck panicked: {all}");
    (o.status.code().unwrap_or(-1), all)
}

/// `ringfs salvage` of `store` into a new directory beside it; the store is
/// not changed. Returns the new store, the exit code and the report.
fn salvage(store: &Path) -> (PathBuf, i32, String) {
    let to = store.with_file_name("salvaged");
    let before = snapshot(store);
    let o = run(&["salvage", "--store", &s(store), "--to", &s(&to)]);
    let (out, err) = out_str(&o);
    assert_eq!(snapshot(store), before, "salvage changed the damaged store");
    (to, o.status.code().unwrap_or(-1), format!("{out}{err}"))
}

/// Puts the salvaged store in the place of the damaged one and mounts it.
fn mount_salvaged(m: &mut TestMount, to: &Path) {
    let store = m.store_dir().to_path_buf();
    fs::rename(&store, store.with_file_name("damaged")).unwrap();
    fs::rename(to, &store).unwrap();
    m.mount_again();
}

/// Every wanted content is somewhere in the mount (by name or in lost+found).
fn all_contents_present(m: &TestMount, want: &BTreeMap<String, Vec<u8>>) {
    let have: std::collections::HashSet<String> = snapshot(m.path()).into_values().map(|(_, h)| h).collect();
    for (name, b) in want {
        assert!(have.contains(&blake3::hash(b).to_hex().to_string()), "the bytes of {name} were not recovered");
    }
}

fn scribble(p: &Path, at: u64, n: usize) {
    let mut f = fs::OpenOptions::new().write(true).open(p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    let junk: Vec<u8> = (0..n).map(|i| (i.wrapping_mul(2654435761) >> 7) as u8 ^ 0x5a).collect();
    f.write_all(&junk).unwrap();
}

#[test]
fn random_bytes_in_the_database_are_reported_refused_and_salvaged() {
    skip_if_raw!();
    let (mut m, want) = populated();
    let store = m.store_dir().to_path_buf();
    let db = store.join("store.redb");
    // 64 KiB of junk over pages of the last commit: from the page that holds
    // the directory entry `top11` on (chunk bytes live in pack files, so the
    // database is metadata only, and this is where a disk error hurts).
    let bytes = fs::read(&db).unwrap();
    let needle = b"top11";
    let at = bytes.windows(needle.len()).rposition(|w| w == needle).expect("the name top11 in store.redb") as u64;
    drop(bytes);
    scribble(&db, at & !4095, 65536);
    let (code, out) = fsck(&store, false);
    assert_eq!(code, 1, "fsck of a damaged database: exit 1 with a report: {out}");
    assert!(out.contains("store.redb") && out.contains("ringfs salvage"), "{out}");
    mount_refused(&m, &store, &["looks damaged", "ringfs salvage --store"]);
    // Refused again, and fsck says the same: nothing was made worse.
    assert_eq!(fsck(&store, false).0, 1);
    let (to, code, report) = salvage(&store);
    // The last commit is read past its damaged pages: the bytes come from the
    // working copies, under their names where those survive, else in lost+found.
    // Names survive in the directory entries that are outside the damaged
    // pages (where only inode records are lost, a directory comes back as one
    // since it has entries, a symlink since its target survives); the rest
    // is in lost+found. Which pages the junk hits depends on redb's layout.
    assert!(code == 0 || code == 1, "salvage: {report}");
    mount_salvaged(&mut m, &to);
    all_contents_present(&m, &want);
    for (name, b) in &want {
        if let Ok(got) = fs::read(m.p(name)) {
            assert_eq!(&got, b, "{name}");
        }
    }
}

#[test]
fn empty_database_beside_working_copies_is_refused_not_mounted_empty() {
    skip_if_raw!();
    let (mut m, want) = populated();
    let store = m.store_dir().to_path_buf();
    fs::write(store.join("store.redb"), b"").unwrap();
    let (code, out) = fsck(&store, false);
    assert_eq!(code, 1, "{out}");
    assert!(!out.contains("clean: no problems"), "{out}");
    assert!(out.contains("empty"), "{out}");
    mount_refused(&m, &store, &["looks damaged", "empty", "ringfs salvage"]);
    let (to, code, report) = salvage(&store);
    assert_eq!(code, 0, "{report}");
    assert!(report.contains("/lost+found/"), "{report}");
    mount_salvaged(&mut m, &to);
    all_contents_present(&m, &want);
    assert!(m.p("lost+found").is_dir());
}

#[test]
fn missing_database_beside_working_copies_is_refused() {
    skip_if_raw!();
    let (m, _) = populated();
    let store = m.store_dir().to_path_buf();
    fs::remove_file(store.join("store.redb")).unwrap();
    mount_refused(&m, &store, &["looks damaged", "missing", "ringfs salvage"]);
    assert!(!store.join("store.redb").exists(), "the refused mount created a database");
    let (code, out) = fsck(&store, false);
    assert_eq!(code, 1, "{out}");
}

#[test]
fn truncated_database_messages_point_elsewhere() {
    skip_if_raw!();
    let (m, _) = populated();
    let store = m.store_dir().to_path_buf();
    let db = store.join("store.redb");
    let len = fs::metadata(&db).unwrap().len();
    fs::OpenOptions::new().write(true).open(&db).unwrap().set_len(len / 2).unwrap();
    let err = mount_refused(&m, &store, &["ringfs salvage"]);
    assert!(!err.contains("ringfs mount"), "{err}");
    let (code, out) = fsck(&store, false);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ringfs salvage") && !out.contains("run `ringfs fsck"), "fsck must not send the user back to fsck: {out}");
}

#[test]
fn scribbled_working_copy_is_found_by_fsck() {
    skip_if_raw!();
    let (m, want) = populated();
    let store = m.store_dir().to_path_buf();
    let wc = store.join("wc");
    let mut files: Vec<(u64, PathBuf)> =
        fs::read_dir(&wc).unwrap().map(|e| e.unwrap().path()).map(|p| (fs::metadata(&p).unwrap().len(), p)).filter(|(l, _)| *l > 100_000).collect();
    files.sort();
    let (_, victim) = files.last().cloned().expect("a working copy of a large file");
    let (code, out) = fsck(&store, true);
    assert_eq!(code, 0, "a clean store: {out}");
    // Same size, other bytes: only --full sees it.
    scribble(&victim, 5000, 16);
    let (code, out) = fsck(&store, false);
    assert_eq!(code, 0, "without --full only sizes are compared: {out}");
    let name = format!("wc/{}", victim.file_name().unwrap().to_string_lossy());
    let (code, out) = fsck(&store, true);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&name) && out.contains("differ"), "{out}");
    // Another size: plain fsck sees it.
    fs::OpenOptions::new().append(true).open(&victim).unwrap().write_all(b"tail").unwrap();
    let (code, out) = fsck(&store, false);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&name) && out.contains("bytes"), "{out}");
    // After a clean shutdown the store's chunks are the truth: salvage
    // rebuilds the file from them, not from the damaged working copy.
    let (mut m, want) = (m, want);
    let (to, code, report) = salvage(&store);
    assert_eq!(code, 0, "{report}");
    assert!(report.contains("does not match the stored content"), "{report}");
    mount_salvaged(&mut m, &to);
    for (name, b) in &want {
        assert_eq!(&fs::read(m.p(name)).unwrap(), b, "{name}");
    }
}

/// A small tmpfs of our own, unmounted on drop (every path, panics too).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn new() -> Tmpfs {
        let dir = tempfile::Builder::new().prefix("ringfs-rofs-").tempdir().unwrap();
        let o = Command::new("mount").args(["-t", "tmpfs", "-o", "size=64m", "ringfs-test-rofs"]).arg(dir.path()).output().unwrap();
        assert!(o.status.success(), "mount tmpfs: {}", String::from_utf8_lossy(&o.stderr));
        Tmpfs { dir }
    }
    fn remount(&self, opt: &str) {
        let o = Command::new("mount").args(["-o", &format!("remount,{opt}")]).arg(self.dir.path()).output().unwrap();
        assert!(o.status.success(), "remount {opt}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).output();
    }
}

#[test]
fn fsck_checks_a_store_on_a_read_only_filesystem() {
    skip_if_raw!();
    let (m, _) = populated();
    let t = Tmpfs::new();
    let with_lock = t.dir.path().join("with-lock");
    let no_lock = t.dir.path().join("no-lock");
    copy_dir(m.store_dir(), &with_lock);
    copy_dir(m.store_dir(), &no_lock);
    fs::remove_file(no_lock.join("ringfs.lock")).unwrap();
    t.remount("ro");
    for store in [&with_lock, &no_lock] {
        let (code, out) = fsck(store, true);
        assert_eq!(code, 0, "fsck --full of a clean store on a read-only filesystem: {out}");
        assert!(out.contains("clean"), "{out}");
    }
    assert!(!no_lock.join("ringfs.lock").exists());
    t.remount("rw");
    // And it wrote nothing on a writable one either.
    let before = snapshot(&no_lock);
    let (code, out) = fsck(&no_lock, false);
    assert_eq!(code, 0, "{out}");
    assert_eq!(snapshot(&no_lock), before, "fsck wrote into the store");
    assert!(!no_lock.join("ringfs.lock").exists(), "fsck created ringfs.lock");
}

#[test]
fn directory_removed_while_open_at_a_crash_is_no_fsck_problem() {
    skip_if_raw!();
    let mut m = TestMount::new(Backend::Store);
    fs::create_dir_all(m.p("parent/gone")).unwrap();
    fs::write(m.p("parent/keep"), b"kept").unwrap();
    // Hold the directory open, remove it, fsync the parent; then kill -9.
    let gone = fs::File::open(m.p("parent/gone")).unwrap();
    fs::remove_dir(m.p("parent/gone")).unwrap();
    fs::File::open(m.p("parent")).unwrap().sync_all().unwrap();
    m.kill_daemon();
    drop(gone);
    let (code, out) = fsck(m.store_dir(), false);
    assert_eq!(code, 0, "a removed directory held open at a crash is an orphan the next mount frees, not damage: {out}");
    m.mount_again();
    assert_eq!(fs::read(m.p("parent/keep")).unwrap(), b"kept");
    assert!(!m.p("parent/gone").exists());
    m.unmount_checked();
    let (code, out) = fsck(m.store_dir(), false);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn salvage_of_a_store_missing_working_copies_rebuilds_from_chunks() {
    skip_if_raw!();
    let (mut m, want) = populated();
    let store = m.store_dir().to_path_buf();
    // Working copies are rebuilt from the store's chunks when absent.
    for e in fs::read_dir(store.join("wc")).unwrap() {
        let p = e.unwrap().path();
        if fs::metadata(&p).unwrap().len() % 2 == 0 {
            fs::remove_file(p).unwrap();
        }
    }
    // NEWDIR must be new or empty.
    let busy = store.with_file_name("busy");
    fs::create_dir(&busy).unwrap();
    fs::write(busy.join("x"), b"x").unwrap();
    let o = run(&["salvage", "--store", &s(&store), "--to", &s(&busy)]);
    assert_eq!(o.status.code(), Some(2), "{:?}", out_str(&o));
    assert!(out_str(&o).1.contains("not empty"));
    let (to, code, report) = salvage(&store);
    assert_eq!(code, 0, "{report}");
    assert!(report.contains("recovered with their names: 13 files, 1 directory"), "{report}");
    mount_salvaged(&mut m, &to);
    for (name, b) in &want {
        assert_eq!(&fs::read(m.p(name)).unwrap(), b, "{name}");
    }
    assert_eq!(fs::read_link(m.p("link")).unwrap(), Path::new("top1"));
    assert_eq!(fs::metadata(m.p("src")).unwrap().permissions().mode() & 0o777, 0o755);
    m.unmount_checked();
    assert_eq!(fsck(m.store_dir(), true).0, 0);
}

/// Sparse files come out of salvage sparse (D72; D71 found a 100 MiB
/// sparse file salvaged with every block allocated): from a working copy
/// only its data extents are copied, then its size set; from chunks only
/// the chunks are written (holes are in no manifest).
#[test]
fn salvage_keeps_sparse_files_sparse() {
    skip_if_raw!();
    use std::os::unix::fs::{FileExt, MetadataExt};
    let mut m = TestMount::new(Backend::Store);
    let f = fs::File::create(m.p("sparse")).unwrap();
    f.set_len(64 << 20).unwrap();
    f.write_all_at(b"middle", 32 << 20).unwrap();
    drop(f);
    fs::File::create(m.p("holes")).unwrap().set_len(8 << 20).unwrap();
    fs::write(m.p("dense"), vec![7u8; 1 << 20]).unwrap();
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    // One working copy removed: that file is rebuilt from its chunks.
    let ino = |name: &str| -> Option<PathBuf> {
        fs::read_dir(store.join("wc")).unwrap().map(|e| e.unwrap().path()).find(|p| fs::metadata(p).map(|x| x.len() == 8 << 20).unwrap_or(false)).filter(|_| name == "holes")
    };
    fs::remove_file(ino("holes").expect("the working copy of `holes`")).unwrap();
    let (to, code, report) = salvage(&store);
    assert_eq!(code, 0, "{report}");
    mount_salvaged(&mut m, &to);
    let md = fs::metadata(m.p("sparse")).unwrap();
    assert_eq!(md.len(), 64 << 20);
    assert!(md.blocks() < 1024, "a 64 MiB sparse file with 6 bytes of data salvaged with {} blocks", md.blocks());
    let f = fs::File::open(m.p("sparse")).unwrap();
    let mut b = [1u8; 6];
    f.read_exact_at(&mut b, 32 << 20).unwrap();
    assert_eq!(&b, b"middle");
    f.read_exact_at(&mut b, 1 << 20).unwrap();
    assert_eq!(b, [0u8; 6]);
    drop(f);
    let h = fs::metadata(m.p("holes")).unwrap();
    assert_eq!((h.len(), h.blocks()), (8 << 20, 0), "an all-hole file");
    assert_eq!(fs::read(m.p("dense")).unwrap(), vec![7u8; 1 << 20]);
    m.unmount_checked();
    assert_eq!(fsck(m.store_dir(), true).0, 0);
    // The salvaged store's own working copies are sparse too.
    let allocated: u64 = fs::read_dir(m.store_dir().join("wc")).unwrap().map(|e| fs::metadata(e.unwrap().path()).unwrap().blocks()).sum();
    assert!(allocated < 4096 + 1024, "working copies hold {allocated} blocks");
}

/// `args` run as the user nobody (for what root's permission override hides).
fn run_as_nobody(args: &[&str]) -> Output {
    run_timeout(Command::new("setpriv").args(["--reuid=65534", "--regid=65534", "--clear-groups", RINGFS]).args(args), Duration::from_secs(60))
}

/// A name-by-name check of the three commands on a store whose pack
/// directory or a pack file is not what it should be: each says, in one
/// line, the path, what is wrong and the fix (never a bare I/O error).
fn packs_trouble_reported(m: &TestMount, want: &[&str]) {
    let store = m.store_dir();
    let err = mount_refused(m, store, want);
    assert!(!err.contains("I/O error") && !err.contains("Input/output error"), "{err}");
    let (code, out) = fsck(store, false);
    assert_eq!(code, 1, "fsck reports it as damage: {out}");
    for w in want {
        assert!(out.contains(w), "fsck: `{w}` missing in: {out}");
    }
    assert!(!out.contains("I/O error") && !out.contains("run `ringfs fsck"), "{out}");
    let o = run(&["gc", "--store", &s(store)]);
    let (gout, gerr) = out_str(&o);
    assert_eq!(o.status.code(), Some(1), "gc --store: {gout}{gerr}");
    for w in want {
        assert!(gerr.contains(w), "gc: `{w}` missing in: {gerr}");
    }
    assert_eq!(gerr.trim().lines().count(), 1, "one line: {gerr}");
}

#[test]
fn broken_packs_directory_is_named_with_its_fix_by_mount_fsck_and_gc() {
    skip_if_raw!();
    let (mut m, want) = populated();
    let store = m.store_dir().to_path_buf();
    let packs = store.join("packs");
    let aside = store.with_file_name("packs-kept");
    // STORE/packs replaced by a file.
    fs::rename(&packs, &aside).unwrap();
    fs::write(&packs, b"not a directory").unwrap();
    packs_trouble_reported(&m, &["packs is a regular file, not a directory", "move it aside", "ringfs salvage --store"]);
    fs::remove_file(&packs).unwrap();
    fs::rename(&aside, &packs).unwrap();
    // A pack file made a directory.
    let name = fs::read_dir(&packs).unwrap().map(|e| e.unwrap().file_name()).find(|n| n.to_string_lossy().ends_with(".pack")).expect("a pack file");
    let pack = packs.join(&name);
    fs::rename(&pack, &aside).unwrap();
    fs::create_dir(&pack).unwrap();
    packs_trouble_reported(&m, &[&format!("{} is a directory, not a regular pack file", name.to_string_lossy()), "ringfs salvage --store"]);
    fs::remove_dir(&pack).unwrap();
    // A pack file the index lists, missing (D72): refused, never served
    // with its chunks silently gone.
    packs_trouble_reported(&m, &[&format!("{} is missing", pack.display()), "chunks and snapshot objects stored in it are lost", "put the file back", "ringfs salvage --store"]);
    fs::rename(&aside, &pack).unwrap();
    // Unreadable (root's permission override hides it: fsck as nobody, who
    // can list the store but not its packs).
    let mode = fs::metadata(&store).unwrap().permissions().mode();
    fs::set_permissions(&store, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&packs, fs::Permissions::from_mode(0o700)).unwrap();
    let o = run_as_nobody(&["fsck", "--store", &s(&store)]);
    let (out, err) = out_str(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(out.contains(&format!("{} cannot be read", packs.display())) && out.contains("fix its permissions"), "{out}{err}");
    fs::set_permissions(&packs, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&store, fs::Permissions::from_mode(mode)).unwrap();
    // Put back, the store is whole again.
    assert_eq!(fsck(&store, true).0, 0);
    m.mount_again();
    for (name, b) in &want {
        assert_eq!(&fs::read(m.p(name)).unwrap(), b, "{name}");
    }
}

#[test]
fn gc_without_arguments_shows_both_forms() {
    let o = run(&["gc"]);
    let (_, err) = out_str(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("ringfs gc MOUNTPOINT") && err.contains("ringfs gc --store DIR"), "{err}");
    assert!(err.contains("<MOUNTPOINT|--store <DIR>>"), "clap names both: {err}");
    let o = run(&["gc", "--help"]);
    let (out, _) = out_str(&o);
    assert!(o.status.success() && out.contains("ringfs gc --store DIR") && out.contains("--store <DIR>"), "{out}");
    let o = run(&["gc", "/nonexistent-mp", "--store", "/nonexistent-store"]);
    assert_eq!(o.status.code(), Some(2), "both forms at once: {:?}", out_str(&o));
}

/// A read-only bind mount of `src`, of our own, unmounted on drop (every path, panics too).
struct RoBind {
    dir: tempfile::TempDir,
}

impl RoBind {
    fn new(src: &Path) -> RoBind {
        let dir = tempfile::Builder::new().prefix("ringfs-robind-").tempdir().unwrap();
        let b = RoBind { dir };
        let o = Command::new("mount").arg("--bind").arg(src).arg(b.dir.path()).output().unwrap();
        assert!(o.status.success(), "mount --bind: {}", String::from_utf8_lossy(&o.stderr));
        let o = Command::new("mount").args(["-o", "remount,bind,ro"]).arg(b.dir.path()).output().unwrap();
        assert!(o.status.success(), "remount,bind,ro: {}", String::from_utf8_lossy(&o.stderr));
        b
    }
}

impl Drop for RoBind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).output();
    }
}

#[test]
fn store_on_a_read_only_filesystem_is_refused_naming_it_and_the_fix() {
    skip_if_raw!();
    let (m, _) = populated();
    let ro = RoBind::new(m.store_dir());
    let store = ro.dir.path();
    for opts in [&[][..], &["-o", "ro"][..]] {
        let mut args = vec!["mount".to_string(), s(m.path()), "--store".into(), s(store)];
        args.extend(opts.iter().map(|o| o.to_string()));
        let o = run_timeout(Command::new(RINGFS).args(&args), Duration::from_secs(60));
        let (out, err) = out_str(&o);
        assert!(!o.status.success(), "{opts:?}: {out}{err}");
        assert!(!is_mounted(m.path()), "{opts:?}: a refused mount left {} mounted", m.path().display());
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.contains("read-only filesystem") && err.contains("cp -a") && err.contains("read-write"), "{opts:?}: {err}");
        if !opts.is_empty() {
            assert!(err.contains("even a read-only mount (-o ro) writes"), "{err}");
        }
    }
    // fsck checks it where it is.
    let (code, out) = fsck(store, false);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn destroyed_database_header_salvage_reports_instead_of_sending_back() {
    skip_if_raw!();
    let (mut m, want) = populated();
    let store = m.store_dir().to_path_buf();
    scribble(&store.join("store.redb"), 0, 8192);
    let (code, out) = fsck(&store, false);
    assert_eq!(code, 1, "{out}");
    assert!(!out.contains("run `ringfs fsck"), "{out}");
    let (to, code, report) = salvage(&store);
    assert!(code == 0 || code == 1, "{report}");
    assert!(!report.contains("ringfs salvage"), "salvage must not send the user back to salvage: {report}");
    assert!(report.contains("store.redb could not be read") && report.contains("no metadata could be read") && report.contains("/lost+found/"), "{report}");
    mount_salvaged(&mut m, &to);
    all_contents_present(&m, &want);
}

#[test]
fn salvage_puts_a_file_whose_manifest_does_not_verify_in_lost_found() {
    skip_if_raw!();
    let (mut m, want) = populated();
    let store = m.store_dir().to_path_buf();
    let db = store.join("store.redb");
    // src/f0 is 1000 bytes: one chunk, whose hash is in its manifest (and the
    // chunk index). A byte of it changed in each place makes a manifest that
    // decodes and passes every plausibility check but names no chunk that
    // exists: what a scribbled page read unverified can give.
    let hash = *blake3::hash(&want["src/f0"]).as_bytes();
    let mut bytes = fs::read(&db).unwrap();
    let at: Vec<usize> = bytes.windows(32).enumerate().filter(|(_, w)| *w == hash).map(|(i, _)| i).collect();
    assert!(!at.is_empty(), "the chunk hash of src/f0 in store.redb");
    for i in &at {
        bytes[i + 7] ^= 0xa5;
    }
    fs::write(&db, &bytes).unwrap();
    // Its working copy gone: only the manifest could give its bytes.
    let wc =
        fs::read_dir(store.join("wc")).unwrap().map(|e| e.unwrap().path()).find(|p| fs::metadata(p).unwrap().len() == 1000).expect("src/f0's working copy");
    fs::remove_file(&wc).unwrap();
    let ino = wc.file_name().unwrap().to_string_lossy().into_owned();
    let (to, code, report) = salvage(&store);
    assert_eq!(code, 1, "src/f0's bytes are lost: {report}");
    assert!(report.contains(&format!("/lost+found/{ino}")) && report.contains("named /src/f0 by records that do not verify"), "{report}");
    assert!(!report.lines().any(|l| l.trim() == "/src/f0"), "not restored under its name: {report}");
    mount_salvaged(&mut m, &to);
    assert!(!m.p("src/f0").exists(), "a file whose records do not verify must not get its name back");
    assert!(m.p(&format!("lost+found/{ino}")).exists());
    for (name, b) in want.iter().filter(|(n, _)| n.as_str() != "src/f0") {
        assert_eq!(&fs::read(m.p(name)).unwrap(), b, "{name}");
    }
}

#[test]
fn gc_of_an_emptied_database_refuses_and_creates_nothing() {
    skip_if_raw!();
    let (m, _) = populated();
    let store = m.store_dir().to_path_buf();
    fs::write(store.join("store.redb"), b"").unwrap();
    let before = snapshot(&store);
    let o = run(&["gc", "--store", &s(&store)]);
    let (out, err) = out_str(&o);
    assert!(!o.status.success(), "gc of a store with an emptied database must refuse: {out}{err}");
    assert!(err.contains("empty") && err.contains("ringfs salvage"), "{err}");
    assert_eq!(fs::metadata(store.join("store.redb")).unwrap().len(), 0, "gc wrote a new database over the emptied one");
    assert_eq!(snapshot(&store), before, "a refused gc changed the store");
    mount_refused(&m, &store, &["looks damaged", "empty", "ringfs salvage"]);
    // An emptied database with nothing beside it: still nothing created.
    let bare = m.host_tmp().join("bare-store");
    fs::create_dir(&bare).unwrap();
    fs::write(bare.join("store.redb"), b"").unwrap();
    let o = run(&["gc", "--store", &s(&bare)]);
    assert!(!o.status.success(), "{:?}", out_str(&o));
    assert_eq!(fs::metadata(bare.join("store.redb")).unwrap().len(), 0, "gc wrote a database into an empty store.redb");
    assert!(!bare.join("ringfs.lock").exists(), "gc took a lock on a store it refused");
}

#[test]
fn gc_leaves_the_lock_file_as_a_clean_shutdown_does() {
    skip_if_raw!();
    let (m, _) = populated();
    let store = m.store_dir().to_path_buf();
    assert_eq!(fs::metadata(store.join("ringfs.lock")).unwrap().len(), 0, "a clean unmount empties ringfs.lock");
    let o = run(&["gc", "--store", &s(&store)]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "{out}{err}");
    assert_eq!(fs::metadata(store.join("ringfs.lock")).unwrap().len(), 0, "gc --store left its pid in ringfs.lock");
}

#[test]
fn lost_newest_commit_of_a_clean_store_is_refused() {
    skip_if_raw!();
    // The state a damaged newest commit leaves (redb reads the commit
    // before it, made while mounted) after a clean shutdown (the lock file
    // emptied): made here by a kill -9 (the database's commit says "in
    // use") and then emptying the lock file as a clean shutdown would.
    let (mut m, _) = populated();
    m.mount_again();
    fs::write(m.p("after"), b"x").unwrap();
    m.sh_ok("sync");
    m.kill_daemon();
    let store = m.store_dir().to_path_buf();
    assert!(fs::metadata(store.join("ringfs.lock")).unwrap().len() > 0, "a daemon that died leaves its pid");
    fs::write(store.join("ringfs.lock"), b"").unwrap();
    mount_refused(&m, &store, &["newest commit is lost", "ringfs salvage"]);
    let (code, out) = fsck(&store, false);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("newest commit is lost"), "{out}");
}

#[test]
fn truncated_working_copy_is_rebuilt_before_it_is_served() {
    skip_if_raw!();
    let (mut m, want) = populated();
    let store = m.store_dir().to_path_buf();
    let (name, big) = want.iter().max_by_key(|(_, b)| b.len()).map(|(n, b)| (n.clone(), b.clone())).unwrap();
    // Its working copy: the one of that size.
    let victim = fs::read_dir(store.join("wc")).unwrap().map(|e| e.unwrap().path()).find(|p| fs::metadata(p).unwrap().len() == big.len() as u64).unwrap();
    fs::OpenOptions::new().write(true).open(&victim).unwrap().set_len(1000).unwrap();
    m.mount_again();
    assert_eq!(fs::read(m.p(&name)).unwrap(), big, "{name} served from a truncated working copy");
    fs::OpenOptions::new().append(true).open(m.p(&name)).unwrap().write_all(b"tail").unwrap();
    assert!(m.daemon_log().contains("changed outside ringfs"), "the rebuild is logged: {}", m.daemon_log());
    m.unmount_checked();
    let (code, out) = fsck(&store, true);
    assert_eq!(code, 0, "{out}");
    m.mount_again();
    let mut want_now = big.clone();
    want_now.extend_from_slice(b"tail");
    assert_eq!(fs::read(m.p(&name)).unwrap(), want_now);
}

/// Unmounts (through `ringfs umount`, else lazily) a mount this test made
/// with `--daemon`, whatever path the test takes.
struct DaemonMount(PathBuf);

impl Drop for DaemonMount {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = run_timeout(Command::new(RINGFS).arg("umount").arg(&self.0), Duration::from_secs(30));
        }
        if is_mounted(&self.0) {
            let _ = run_timeout(Command::new("umount").arg("-l").arg(&self.0), Duration::from_secs(10));
        }
    }
}

/// `ringfs mount MP --store STORE --daemon` (plus `extra`): the mount on
/// success (unmounted when dropped), else the command's output.
fn mount_daemon(m: &TestMount, store: &Path, extra: &[&str]) -> Result<DaemonMount, String> {
    let log = m.host_tmp().join("damaged-mount.log");
    let mut args: Vec<String> = ["mount", &s(m.path()), "--store", &s(store), "--daemon", "--log-file", &s(&log)].iter().map(|a| a.to_string()).collect();
    args.extend(extra.iter().map(|a| a.to_string()));
    args.extend(env_mount_args());
    let o = run_timeout(Command::new(RINGFS).args(&args), Duration::from_secs(60));
    let (out, err) = out_str(&o);
    if o.status.success() {
        assert!(is_mounted(m.path()), "mount said ok but nothing is mounted: {out}{err}");
        return Ok(DaemonMount(m.path().to_path_buf()));
    }
    assert!(!is_mounted(m.path()), "a refused mount left {} mounted", m.path().display());
    let daemon = fs::read_to_string(&log).unwrap_or_default();
    let _ = fs::remove_file(&log);
    let all = format!("{out}{err}\n--- daemon log ---\n{daemon}");
    assert!(!all.contains("panicked"), "mount panicked: {all}");
    Err(all)
}

/// A store shut down cleanly is not read whole by a mount (D48): only its
/// inode tables (which the mount loads) are read, the other tables opened.
/// Damaged afterwards — disk corruption, a page at a time at places spread
/// over the database — it is refused naming the fix, or served: its files
/// read back or fail with an error, the daemon answers and unmounts, nothing
/// panics. `fsck` and `mount --check` still read every table: damage the
/// check finds is refused by `--check` and reported by fsck (exit 1).
#[test]
fn clean_store_damaged_later_is_refused_or_served_and_fsck_reports_it() {
    skip_if_raw!();
    let (m, want) = populated();
    let store = m.store_dir().to_path_buf();
    assert_eq!(fs::metadata(store.join("ringfs.lock")).unwrap().len(), 0, "a clean shutdown empties the lock");
    let pristine = m.host_tmp().join("pristine-store");
    copy_dir(&store, &pristine);
    // The pristine store mounts and serves every file (the baseline).
    {
        let _mt = mount_daemon(&m, &store, &[]).expect("the undamaged store mounts");
        for (name, b) in &want {
            assert_eq!(&fs::read(m.p(name)).unwrap(), b, "{name}");
        }
    }
    let pages = fs::metadata(pristine.join("store.redb")).unwrap().len() / 4096;
    let (mut refused, mut served, mut checked_refused) = (0, 0, 0);
    for k in 1..=6u64 {
        let page = 1 + (pages - 1) * k / 7;
        fs::remove_dir_all(&store).unwrap();
        copy_dir(&pristine, &store);
        scribble(&store.join("store.redb"), page * 4096, 4096);
        let (code, out) = fsck(&store, false);
        assert!(code == 0 || code == 1, "fsck of page {page} of {pages} damaged: {out}");
        match mount_daemon(&m, &store, &["--check"]) {
            Err(e) => {
                checked_refused += 1;
                assert!(e.contains("ringfs salvage"), "page {page}: --check refused without naming the fix: {e}");
                assert_eq!(code, 1, "page {page}: `mount --check` found damage that fsck did not report: {e}\n{out}");
            }
            // Nothing the check reads is damaged (a free page, or bytes the
            // check cannot tell from data); served like an undamaged store.
            Ok(mt) => {
                drop(mt);
                continue;
            }
        }
        // Damage the full check finds, after a clean shutdown: the default
        // mount reads less of the store.
        match mount_daemon(&m, &store, &[]) {
            Err(e) => {
                refused += 1;
                assert!(e.contains("ringfs salvage"), "page {page}: refused without naming the fix: {e}");
            }
            Ok(mt) => {
                served += 1;
                for name in want.keys() {
                    // The bytes, or an error: either way the daemon answers.
                    let _ = fs::read(m.p(name));
                }
                assert!(fs::metadata(m.path()).is_ok(), "page {page}: the daemon stopped answering");
                drop(mt);
                assert!(!is_mounted(m.path()), "page {page}: could not unmount");
            }
        }
    }
    eprintln!("6 damaged pages: --check refused {checked_refused}; of those, the default mount refused {refused}, served {served}");
}

/// `n` bytes of xorshift junk from `seed` written at `at` in `p` (random
/// bytes, as `os.urandom` gives, but the same every run).
fn scribble_random(p: &Path, at: u64, n: usize, seed: u64) {
    let mut x = seed | 1;
    let junk: Vec<u8> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect();
    let mut f = fs::OpenOptions::new().write(true).open(p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&junk).unwrap();
}

/// Issue 41 item 1, as a user found it: a store shut down cleanly with 500
/// small files and a 64 MiB one, 64 KiB of random bytes written a third of
/// the way into store.redb (pages of `live_segments`, which `fsck` reports)
/// while the store was not mounted. Appending to a few files and `ringfs commit` made redb panic
/// on the control thread and the daemon die, the mount left stale. Now the
/// store turns read-only: the daemon lives, the commit fails naming the
/// table and the fix, `status` and `stats` say so, the log has one line for
/// it and no panic, reads of the files (working copies) still work, a
/// change is refused with EROFS, `umount` unmounts and says the final
/// commit was skipped, the next mount refuses the store, and salvage
/// brings back every file with the appended bytes.
///
/// The mount's check after a clean shutdown reads the manifest tables now
/// (D89), so the store damaged while unmounted is refused at once; the
/// same damage is therefore made while the store is mounted (the daemon
/// had not read those pages: its check read them through another handle),
/// where the mount's check cannot see it.
#[test]
fn store_damaged_while_served_turns_read_only_and_the_daemon_lives() {
    skip_if_raw!();
    let mut m = TestMount::new(Backend::Store);
    let mut want = BTreeMap::new();
    fs::create_dir(m.p("small")).unwrap();
    for i in 0..500 {
        let name = format!("small/f{i}");
        let b = format!("file {i}\n").into_bytes();
        fs::write(m.p(&name), &b).unwrap();
        want.insert(name, b);
    }
    let mut big = vec![0u8; 64 << 20];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for w in big.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    fs::write(m.p("big"), &big).unwrap();
    want.insert("big".into(), big);
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    let db = store.join("store.redb");
    // A third of the way in, as the user did; redb's layout varies from run
    // to run (when the group commits fell), so the place nearest to it, in
    // 32 KiB steps, where fsck names `live_segments` as it did for them.
    let bytes = fs::read(&db).unwrap();
    let third = bytes.len() as u64 / 3 / 32768 * 32768;
    let mut places: Vec<u64> = (0..bytes.len() as u64 / 32768).map(|k| k * 32768).filter(|at| at + 65536 <= bytes.len() as u64).collect();
    places.sort_by_key(|at| at.abs_diff(third));
    let at = places
        .into_iter()
        .find(|&at| {
            scribble_random(&db, at, 65536, 41);
            let (code, out) = fsck(&store, false);
            fs::write(&db, &bytes).unwrap();
            // The first table fsck names (they come in the order the
            // daemon reads them to name damage).
            let first = out.lines().skip_while(|l| !l.contains("problem(s):")).nth(1).unwrap_or("");
            code == 1 && first.trim_start().starts_with("live_segments")
        })
        .expect("64 KiB of junk in store.redb that damages live_segments");
    drop(bytes);
    let pristine = m.host_tmp().join("pristine-store");
    copy_dir(&store, &pristine);

    // Damaged while unmounted: fsck names the table, the mount refuses it.
    scribble_random(&db, at, 65536, 41);
    let (code, out) = fsck(&store, false);
    assert_eq!(code, 1, "fsck of the damaged store: {out}");
    assert!(out.contains("live_segments"), "fsck names the table: {out}");
    // (Refused for `live_segments`, or for a table the check reads first
    // when the junk reaches one too.)
    mount_refused(&m, &store, &["looks damaged", "ringfs salvage --store"]);

    // Damaged while mounted.
    fs::remove_dir_all(&store).unwrap();
    copy_dir(&pristine, &store);
    let log = m.host_tmp().join("damaged-mount.log");
    let mut mt = Some(mount_daemon(&m, &store, &[]).expect("the pristine store mounts"));
    scribble_random(&db, at, 65536, 41);
    let mp = s(m.path());
    for i in 1..=3 {
        let name = format!("small/f{i}");
        let mut f = fs::OpenOptions::new().append(true).open(m.p(&name)).unwrap();
        f.write_all(b"appended\n").unwrap();
        want.get_mut(&name).unwrap().extend_from_slice(b"appended\n");
    }
    let o = run(&["commit", &mp, "-m", "after the damage"]);
    let (out, err) = out_str(&o);
    assert!(!o.status.success(), "commit on a damaged store succeeded: {out}{err}");
    for w in ["store damaged in live_segments", "read-only", "ringfs umount", "ringfs salvage --store"] {
        assert!(err.contains(w), "`{w}` missing in commit's message: {err}");
    }
    // The daemon lives and says why.
    for cmd in ["status", "stats"] {
        let o = run(&[cmd, &mp]);
        let (out, err) = out_str(&o);
        assert!(o.status.success(), "{cmd} after the damage: {out}{err}");
        assert!(out.contains("DAMAGED") && out.contains("store damaged in live_segments"), "{cmd}: {out}");
    }
    let v = json(&["status", &mp]);
    assert!(v["damaged"].as_str().is_some_and(|d| d.contains("live_segments")), "{v}");
    // Reads still work: every file, the big one whole.
    for (name, b) in &want {
        assert_eq!(&fs::read(m.p(name)).unwrap_or_else(|e| panic!("reading {name}: {e}")), b, "{name}");
    }
    // Changes are refused.
    let e = fs::write(m.p("small/new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "a create on a damaged store: {e}");
    let e = fs::OpenOptions::new().append(true).open(m.p("small/f9")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "an open for writing on a damaged store: {e}");
    // umount unmounts, saying the final commit was skipped and why.
    let o = run(&["umount", &mp]);
    let (out, err) = out_str(&o);
    assert!(!is_mounted(m.path()), "umount of a damaged store left it mounted: {out}{err}");
    assert!(err.contains("final commit was skipped") && err.contains("ringfs salvage"), "{out}{err}");
    drop(mt.take());
    let daemon = fs::read_to_string(&log).unwrap_or_default();
    assert!(!daemon.contains("panicked"), "the daemon printed a panic:\n{daemon}");
    assert_eq!(daemon.lines().filter(|l| l.contains("ERROR") && l.contains("store damaged in live_segments")).count(), 1, "one line names the damage:\n{daemon}");
    assert!(daemon.contains("final commit skipped"), "{daemon}");
    // The next mount reads every table (the lock file kept the pid) and refuses.
    mount_refused(&m, &store, &["looks damaged", "ringfs salvage --store"]);
    // Salvage brings back every file, the appended bytes included.
    let (to, code, report) = salvage(&store);
    assert!(code == 0 || code == 1, "salvage: {report}");
    mount_salvaged(&mut m, &to);
    all_contents_present(&m, &want);
    for (name, b) in &want {
        if let Ok(got) = fs::read(m.p(name)) {
            assert_eq!(&got, b, "{name} after salvage");
        }
    }
}
