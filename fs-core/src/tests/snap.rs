//! Snapshots in the model: after random namespace, content, attribute and
//! xattr operations (with remounts and crashes on Dir stores), the tree an
//! incremental commit writes equals the one a from-scratch build of the
//! tables gives (incremental == full), a second commit with nothing
//! changed makes none, and a restore of any earlier commit makes the live
//! tree what it was when that commit was made, byte for byte (names,
//! kinds, modes, owners, mtimes, contents, symlink targets, xattrs).

use super::model::{op, path, Harness, Op};
use super::*;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum SOp {
    Fs(Op),
    Chmod(String, u32),
    Xattr(String, Vec<u8>),
    Symlink(String),
    Commit,
    /// Restore the commit made k-th (modulo how many there are).
    Restore(usize),
}

fn sop() -> impl Strategy<Value = SOp> {
    prop_oneof![
        8 => op().prop_map(SOp::Fs),
        1 => (path(), 0u32..0o1000).prop_map(|(p, m)| SOp::Chmod(p, m)),
        1 => (path(), prop::collection::vec(any::<u8>(), 0..8)).prop_map(|(p, v)| SOp::Xattr(p, v)),
        1 => path().prop_map(SOp::Symlink),
        3 => Just(SOp::Commit),
        2 => (0usize..8).prop_map(SOp::Restore),
    ]
}

fn commit(h: &Harness) -> crate::snap::CommitReport {
    // allow_empty: every commit is made, so its tree is the incremental build.
    let r = h.fs().snapshot_commit(&crate::snap::CommitOptions { message: "m".into(), author: "t@h".into(), allow_empty: true }).unwrap();
    let (full, head) = h.fs().snapshot_full_root();
    assert_eq!(crate::snap::object::hex_id(&head), root_of(&r, h), "head after commit");
    assert_eq!(full, head, "the incremental commit's tree equals a full build ({r:?})");
    r
}

/// The root of the commit a report names.
fn root_of(r: &crate::snap::CommitReport, h: &Harness) -> String {
    {
        h.fs().snapshot_log().unwrap().iter().find(|e| e.id == r.id).map(|e| e.root.clone()).unwrap_or_default()
    }
}

/// What a path holds: mode (type included), owner, mtime, file content or
/// symlink target, xattrs.
type Tree = BTreeMap<String, (u32, u32, u32, (i64, u32), Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>)>;

/// The live tree through `Fs` (lookups taken are given back).
fn tree(fs: &Fs) -> Tree {
    fn one(fs: &Fs, ino: u64, path: String, out: &mut Tree) {
        let a = fs.getattr(ino, None).unwrap();
        let body = if crate::posix::is_reg(a.mode) {
            read_all(fs, ino)
        } else if a.mode & libc::S_IFMT == libc::S_IFLNK {
            fs.readlink(ino).unwrap()
        } else {
            Vec::new()
        };
        let mut xattrs = Vec::new();
        if let Ok(XattrValue::Data(names)) = fs.listxattr(ino, 65536) {
            for n in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
                if let Ok(XattrValue::Data(v)) = fs.getxattr(ino, OsStr::from_bytes(n), 65536) {
                    xattrs.push((n.to_vec(), v));
                }
            }
        }
        xattrs.sort();
        out.insert(path.clone(), (a.mode, a.uid, a.gid, (a.mtime, a.mtime_nsec), body, xattrs));
        if crate::posix::is_dir(a.mode) {
            for (name, _, _, _) in list(fs, ino) {
                if name == b"." || name == b".." {
                    continue;
                }
                let c = fs.lookup(&C, ino, OsStr::from_bytes(&name)).unwrap().ino;
                one(fs, c, format!("{path}/{}", String::from_utf8_lossy(&name)), out);
                fs.forget(c, 1);
            }
        }
    }
    let mut out = BTreeMap::new();
    one(fs, ROOT, String::new(), &mut out);
    out
}

fn run(ops: Vec<SOp>, loc: StoreLocation) {
    run_with(ops, loc, false)
}

/// `ignore`: paths with a component `c` are local-only (a remount or crash
/// reopens without the pattern, moving them back to the synced side).
fn run_with(ops: Vec<SOp>, loc: StoreLocation, ignore: bool) {
    let mut c = cfg(loc.clone());
    if ignore {
        c.local = LocalConfig { ignore: vec!["c".into()], dir: None, native_roots: false };
    }
    let fs = Fs::open_store(c).unwrap();
    let mut h = Harness { fs: Some(fs), loc: loc.clone(), looked: Vec::new() };
    // Each commit made and the live tree when it was made.
    let mut made: Vec<(String, Tree)> = Vec::new();
    for op in &ops {
        match op {
            SOp::Fs(Op::Remount | Op::Crash) if loc == StoreLocation::Memory => {}
            SOp::Fs(o) => {
                let _ = h.apply(o);
            }
            SOp::Chmod(p, m) => {
                if let Ok((d, n)) = h.parent(p) {
                    if let Ok(a) = h.lookup(d, &n) {
                        let _ = h.fs().setattr(&C, a.ino, &SetAttr { mode: Some(*m), ..Default::default() });
                    }
                }
                h.forget_all();
            }
            SOp::Xattr(p, v) => {
                if let Ok((d, n)) = h.parent(p) {
                    if let Ok(a) = h.lookup(d, &n) {
                        let _ = h.fs().setxattr(&C, a.ino, os("user.t"), v, 0);
                    }
                }
                h.forget_all();
            }
            SOp::Symlink(p) => {
                if let Ok((d, n)) = h.parent(p) {
                    if let Ok(a) = h.fs().symlink(&C, d, os(&n), os("target")) {
                        h.looked.push(a.ino);
                    }
                }
                h.forget_all();
            }
            SOp::Commit => {
                h.forget_all();
                let r = commit(&h);
                if !ignore {
                    made.push((r.id.clone(), tree(h.fs())));
                }
            }
            SOp::Restore(k) => {
                if made.is_empty() {
                    continue;
                }
                h.forget_all();
                let (id, want) = &made[k % made.len()];
                let r = h.fs().snapshot_restore(&id[..12], &[]).unwrap();
                assert_eq!(&tree(h.fs()), want, "after restoring {id} ({r:?})");
                assert!(h.fs().snapshot_diff(Some(id), Some("live")).unwrap().changes.is_empty());
            }
        }
    }
    let first = commit(&h);
    let again = h.fs().snapshot_commit(&crate::snap::CommitOptions { message: "m".into(), author: "t@h".into(), allow_empty: false }).unwrap();
    assert!(!again.created, "nothing changed: no commit ({again:?})");
    assert_eq!(again.id, first.id);
    let fs = h.fs.take().unwrap();
    fs.shutdown().unwrap();
    drop(fs);
    if let StoreLocation::Dir(d) = &loc {
        let r = fsck(d).unwrap();
        assert!(r.is_clean(), "{r}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn snap_incremental_equals_full_memory(ops in prop::collection::vec(sop(), 1..60)) {
        run(ops, StoreLocation::Memory);
    }

    #[test]
    fn snap_incremental_equals_full_local_only(ops in prop::collection::vec(sop(), 1..50)) {
        let t = tempfile::tempdir().unwrap();
        run_with(ops, StoreLocation::Dir(t.path().join("store")), true);
    }

    #[test]
    fn snap_incremental_equals_full_dir(ops in prop::collection::vec(sop(), 1..40)) {
        let t = tempfile::tempdir().unwrap();
        run(ops, StoreLocation::Dir(t.path().join("store")));
    }
}

#[test]
fn snap_commit_log_diff_basics() {
    let fs = mem();
    let d = fs.mkdir(&C, ROOT, os("d"), 0o755).unwrap().ino;
    let f = write_file(&fs, d, "f", b"hello");
    let opts = crate::snap::CommitOptions { message: "one".into(), author: "t@h".into(), allow_empty: false };
    let c1 = fs.snapshot_commit(&opts).unwrap();
    assert!(c1.created);
    assert_eq!((c1.added, c1.modified, c1.removed), (2, 0, 0), "{c1:?}");
    let fh = fs.open(&C, f, libc::O_RDWR as u32).unwrap();
    fs.write(fh, 5, b" world").unwrap();
    fs.release(fh).unwrap();
    write_file(&fs, ROOT, "new", b"x");
    let diff = fs.snapshot_diff(None, None).unwrap();
    let got: Vec<(String, &str)> = diff.changes.iter().map(|c| (String::from_utf8_lossy(&c.path).into_owned(), c.kind.name())).collect();
    assert_eq!(got, vec![("d/f".to_string(), "modified"), ("new".to_string(), "added")]);
    assert_eq!(diff.changes[0].old.unwrap().size, 5);
    assert_eq!(diff.changes[0].new.unwrap().size, 11);
    let c2 = fs.snapshot_commit(&crate::snap::CommitOptions { message: "two".into(), ..opts.clone() }).unwrap();
    assert_eq!((c2.added, c2.modified, c2.removed), (1, 1, 0), "{c2:?}");
    fs.unlink(&C, d, os("f")).unwrap();
    let log = fs.snapshot_log().unwrap();
    assert_eq!(log.iter().map(|e| e.message.as_str()).collect::<Vec<_>>(), vec!["two", "one"]);
    let back = fs.snapshot_diff(Some(&log[0].id[..8]), Some(&log[1].id)).unwrap();
    assert_eq!(back.changes.len(), 2, "{back:?}");
    let live = fs.snapshot_diff(Some("main"), Some("live")).unwrap();
    assert_eq!(live.changes.iter().map(|c| c.kind).collect::<Vec<_>>(), vec![crate::snap::diff::ChangeKind::Removed]);
    match fs.snapshot_diff(Some("nope"), None) {
        Err(crate::snap::SnapError::Unknown { candidates, .. }) => assert!(candidates.contains(&"main".to_string()), "{candidates:?}"),
        other => panic!("{other:?}"),
    }
    fs.shutdown().unwrap();
}

/// Local-only paths are not in snapshots: neither in a commit nor in a diff.
#[test]
fn snap_leaves_local_only_paths_out() {
    let mut c = cfg(StoreLocation::Memory);
    c.local = LocalConfig { ignore: vec!["node_modules".into()], dir: None, native_roots: false };
    let fs = Fs::open_store(c).unwrap();
    let nm = fs.mkdir(&C, ROOT, os("node_modules"), 0o755).unwrap().ino;
    write_file(&fs, nm, "dep.js", b"x");
    write_file(&fs, ROOT, "app.js", b"y");
    let r = fs.snapshot_commit(&crate::snap::CommitOptions::default()).unwrap();
    assert_eq!(r.added, 1, "only app.js: {r:?}");
    write_file(&fs, nm, "other.js", b"z");
    assert!(fs.snapshot_diff(None, None).unwrap().changes.is_empty());
    // Renamed onto the synced side, it is in the next commit.
    fs.rename(&C, ROOT, os("node_modules"), ROOT, os("vendor"), 0).unwrap();
    let d = fs.snapshot_diff(None, None).unwrap();
    let paths: Vec<String> = d.changes.iter().map(|c| String::from_utf8_lossy(&c.path).into_owned()).collect();
    assert_eq!(paths, ["vendor", "vendor/dep.js", "vendor/other.js"]);
    let (full, _) = fs.snapshot_full_root();
    let r = fs.snapshot_commit(&crate::snap::CommitOptions::default()).unwrap();
    assert_eq!(r.added, 3);
    assert_eq!(fs.snapshot_full_root(), (full, full));
    fs.shutdown().unwrap();
}

/// A schema-3 store (made here by deleting the schema-4 tables and setting
/// the version back) opens, is migrated to 4, keeps its files, and its first
/// commit builds every object; a file's manifest without a size row takes
/// the inode's size.
#[test]
fn snap_schema3_store_is_migrated_and_commits() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("store");
    let fs = dir_fs(&d);
    let sub = fs.mkdir(&C, ROOT, os("sub"), 0o755).unwrap().ino;
    write_file(&fs, sub, "f", b"schema three");
    fs.shutdown().unwrap();
    drop(fs);
    {
        let db = redb::Database::create(d.join("store.redb")).unwrap();
        let w = db.begin_write().unwrap();
        w.open_table(store::META).unwrap().insert("schema", 3).unwrap();
        w.delete_table(store::OBJECTS).unwrap();
        w.delete_table(store::REFS).unwrap();
        w.delete_table(store::SNAP_INODES).unwrap();
        w.delete_table(store::MANIFEST_SIZES).unwrap();
        w.commit().unwrap();
    }
    assert!(fsck(&d).unwrap().is_clean());
    assert!(crate::snap::log_store(&d).unwrap().is_empty(), "a schema-3 store has no commits");
    let fs = dir_fs(&d);
    assert!(d.join("store.redb.schema3").exists(), "the schema-3 database is kept until a clean unmount");
    let r = fs.snapshot_commit(&crate::snap::CommitOptions { message: "first".into(), author: "t@h".into(), allow_empty: false }).unwrap();
    assert!(r.created && r.added == 2, "{r:?}");
    let diff = fs.snapshot_diff(None, None).unwrap();
    assert!(diff.changes.is_empty(), "{diff:?}");
    let (full, head) = fs.snapshot_full_root();
    assert_eq!(full, head);
    fs.shutdown().unwrap();
    drop(fs);
    assert!(fsck(&d).unwrap().is_clean());
    assert_eq!(crate::snap::log_store(&d).unwrap().len(), 1);
    assert!(!d.join("store.redb.schema3").exists());
}

/// Restore in the model: an open handle keeps the old inode, the path
/// leads to the commit's content, counts, `--path` and name errors, and a
/// commit right after has nothing to record.
#[test]
fn snap_restore_basics() {
    use crate::snap::SnapError;
    let fs = mem();
    let d = fs.mkdir(&C, ROOT, os("d"), 0o755).unwrap().ino;
    let f = write_file(&fs, d, "f", b"committed");
    write_file(&fs, ROOT, "gone", b"will be deleted");
    let opts = crate::snap::CommitOptions { message: "one".into(), author: "t@h".into(), allow_empty: false };
    let c1 = fs.snapshot_commit(&opts).unwrap();
    let fh = fs.open(&C, f, libc::O_RDWR as u32).unwrap();
    fs.write(fh, 0, b"CHANGED!!").unwrap();
    fs.unlink(&C, ROOT, os("gone")).unwrap();
    let n = fs.mkdir(&C, ROOT, os("new"), 0o700).unwrap().ino;
    write_file(&fs, n, "x", b"x");
    fs.setattr(&C, d, &SetAttr { mode: Some(0o711), ..Default::default() }).unwrap();
    let r = fs.snapshot_restore(&c1.id[..8], &[]).unwrap();
    assert_eq!((r.added, r.removed, r.rewritten, r.changed, r.bytes), (1, 2, 1, 1, 24), "{r:?}");
    assert!(r.invalidations.contains(&crate::snap::restore::Inval::Entry { parent: d, name: b"f".to_vec() }), "{r:?}");
    // The handle reads the old inode; the name leads to the commit's file.
    assert_eq!(fs.read(fh, 0, 100).unwrap(), b"CHANGED!!");
    fs.release(fh).unwrap();
    let nf = lookup(&fs, d, "f").unwrap().ino;
    assert_ne!(nf, f);
    assert_eq!(read_all(&fs, nf), b"committed");
    assert_eq!(read_all(&fs, lookup(&fs, ROOT, "gone").unwrap().ino), b"will be deleted");
    assert_eq!(lookup(&fs, ROOT, "new").err(), Some(Errno(libc::ENOENT)));
    assert_eq!(fs.getattr(d, None).unwrap().mode & 0o7777, 0o755);
    assert!(!fs.snapshot_commit(&opts).unwrap().created, "restore then commit: nothing changed");
    // --path: a subset, and the errors.
    write_file(&fs, ROOT, "late", b"late");
    let fh = fs.open(&C, nf, libc::O_RDWR as u32).unwrap();
    fs.write(fh, 0, b"again").unwrap();
    fs.release(fh).unwrap();
    let r = fs.snapshot_restore("main", &[b"late".to_vec()]).unwrap();
    assert_eq!((r.added, r.removed, r.rewritten), (0, 1, 0), "{r:?}");
    assert_eq!(read_all(&fs, lookup(&fs, d, "f").unwrap().ino), b"againtted");
    for (p, want) in [(&b"nosuch"[..], "in neither"), (b"a/../b", "\"..\""), (b"/", "workspace root")] {
        match fs.snapshot_restore("main", &[p.to_vec()]) {
            Err(e @ SnapError::BadPath { .. }) => assert!(e.to_string().contains(want), "{e}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(fs.snapshot_restore("live", &[]), Err(SnapError::NotACommit(_))));
    assert!(matches!(fs.snapshot_restore("zzz", &[]), Err(SnapError::Unknown { .. })));
    fs.shutdown().unwrap();
}

/// Writes separated by pauses longer than the group-commit interval (so
/// background group commits and hash workers write journal records between
/// them), then a commit: its incremental tree equals a full build. Bounded
/// to a few seconds; the rounds make a lost journal record likely to show.
#[test]
fn snap_commit_after_paused_writes_misses_nothing() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("store");
    let fs = Fs::open_store(Config { commit_interval: Duration::from_millis(2), ..cfg(StoreLocation::Dir(d.clone())) }).unwrap();
    let opts = crate::snap::CommitOptions { message: "m".into(), author: "t@h".into(), allow_empty: true };
    let start = std::time::Instant::now();
    let mut round = 0u32;
    while start.elapsed() < Duration::from_secs(8) && round < 60 {
        let sub = fs.mkdir(&C, ROOT, os(&format!("r{round}")), 0o755).unwrap().ino;
        write_file(&fs, sub, "first", b"one");
        fs.snapshot_commit(&opts).unwrap();
        fs.snapshot_commit(&opts).unwrap();
        for i in 0..4 {
            write_file(&fs, sub, &format!("f{i}"), format!("round {round} file {i}").as_bytes());
            std::thread::sleep(Duration::from_millis(3 + 2 * i as u64));
        }
        fs.snapshot_commit(&opts).unwrap();
        let (full, head) = fs.snapshot_full_root();
        assert_eq!(full, head, "round {round}: the incremental commit's tree equals a full build");
        round += 1;
    }
    fs.shutdown().unwrap();
    drop(fs);
    assert!(fsck(&d).unwrap().is_clean());
}
