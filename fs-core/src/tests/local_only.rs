//! Tests of local-only paths: ignore patterns, the local-only tables and
//! backing directory, renames across the boundary, the local-only pool.

use super::*;

/// Local-only paths: never chunked or journaled, moved across the boundary
/// by rename (both ways, with their subtree), persisted in the local tables,
/// EXDEV for hard links across, fsck clean.
#[test]
fn local_only_paths() {
    let t = tempfile::tempdir().unwrap();
    let local_cfg = |d: &Path| {
        let mut c = cfg(StoreLocation::Dir(d.to_path_buf()));
        c.local = LocalConfig { ignore: vec!["node_modules".into(), "/dist".into(), "!keep".into()], dir: None, native_roots: false };
        c
    };
    let body: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 253) as u8).collect();
    let (nm, f, sub);
    {
        let fs = Fs::open_store(local_cfg(t.path())).unwrap();
        nm = fs.mkdir(&C, ROOT, os("node_modules"), 0o755).unwrap().ino;
        f = write_file(&fs, nm, "f", &body);
        sub = fs.mkdir(&C, nm, os("sub"), 0o755).unwrap().ino;
        write_file(&fs, sub, "g", b"g");
        fs.fsyncdir(0).unwrap();
        let s0 = fs.stats();
        assert_eq!((s0.chunks, s0.chunk_bytes), (0, 0));
        assert_eq!(fs.is_local(f), Some(true));
        assert!(t.path().join("local").join(f.to_string()).exists());
        // Hard link across: EXDEV; rename across: moves.
        assert_eq!(fs.link(&C, f, ROOT, os("hl")).unwrap_err().0, libc::EXDEV);
        fs.rename(&C, nm, os("f"), ROOT, os("f"), 0).unwrap();
        assert_eq!(fs.is_local(f), Some(false));
        assert!(t.path().join("wc").join(f.to_string()).exists());
        let fh = fs.open(&C, f, libc::O_RDONLY as u32).unwrap();
        fs.fsync(fh, false).unwrap();
        fs.release(fh).unwrap();
        fs.store_now().unwrap();
        let s1 = fs.stats();
        assert!(s1.chunks > 0 && s1.chunk_bytes == body.len() as u64, "{s1:?}");
        // A populated directory out of and back into node_modules.
        fs.rename(&C, nm, os("sub"), ROOT, os("sub"), 0).unwrap();
        assert_eq!(fs.is_local(sub), Some(false));
        fs.rename(&C, ROOT, os("sub"), nm, os("sub"), 0).unwrap();
        assert_eq!(fs.is_local(sub), Some(true));
        fs.rename(&C, ROOT, os("f"), nm, os("f2"), 0).unwrap();
        fs.fsyncdir(0).unwrap();
        let s2 = fs.stats();
        assert_eq!((s2.chunks, s2.chunk_bytes), (0, 0), "content left the store");
        // Anchored pattern.
        let d = fs.mkdir(&C, ROOT, os("dist"), 0o755).unwrap().ino;
        let d2 = fs.mkdir(&C, sub, os("dist"), 0o755).unwrap().ino;
        let a = fs.mkdir(&C, ROOT, os("a"), 0o755).unwrap().ino;
        let d3 = fs.mkdir(&C, a, os("dist"), 0o755).unwrap().ino;
        assert_eq!((fs.is_local(d), fs.is_local(d2), fs.is_local(d3)), (Some(true), Some(true), Some(false)));
        fs.shutdown().unwrap();
    }
    assert!(fsck(t.path()).unwrap().is_clean(), "{}", fsck(t.path()).unwrap());
    {
        let fs = Fs::open_store(local_cfg(t.path())).unwrap();
        let nm2 = lookup(&fs, ROOT, "node_modules").unwrap().ino;
        assert_eq!(nm2, nm);
        let f2 = lookup(&fs, nm, "f2").unwrap().ino;
        assert_eq!(read_all(&fs, f2), body);
        assert_eq!(fs.is_local(f2), Some(true));
        assert_eq!(fs.getattr(nm, None).unwrap().nlink, 3);
        fs.shutdown().unwrap();
    }
    // Without the patterns everything is synced again.
    {
        let fs = dir_fs(t.path());
        let f2 = lookup(&fs, lookup(&fs, ROOT, "node_modules").unwrap().ino, "f2").unwrap().ino;
        assert_eq!(fs.is_local(f2), Some(false));
        assert_eq!(read_all(&fs, f2), body);
        fs.shutdown().unwrap();
    }
    assert!(fsck(t.path()).unwrap().is_clean(), "{}", fsck(t.path()).unwrap());
    let db = redb::Database::open(t.path().join("store.redb")).unwrap();
    let rtx = redb::ReadableDatabase::begin_read(&db).unwrap();
    assert_eq!(rtx.open_table(crate::store::LOCAL_INODES).unwrap().iter().unwrap().count(), 0);
}

/// Local-only creates take ready backing files from their own pool (after the
/// first create finds it empty); the unused ready files stay after a clean
/// shutdown (D52) and the next open's first local-only create takes one.
#[test]
fn local_only_creates_use_a_pool() {
    let t = tempfile::tempdir().unwrap();
    let mut c = cfg(StoreLocation::Dir(t.path().to_path_buf()));
    c.local = LocalConfig { ignore: vec!["node_modules".into()], dir: None, native_roots: false };
    let fs = Fs::open_store(c).unwrap();
    let names = |d: &str| -> std::collections::BTreeSet<String> {
        let all = std::fs::read_dir(t.path().join(d)).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap());
        all.filter(|n| n.parse::<u64>().is_ok()).collect()
    };
    // A workspace without local-only files keeps no local pool.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(names("local").is_empty(), "{:?}", names("local"));
    let nm = fs.mkdir(&C, ROOT, os("node_modules"), 0o755).unwrap().ino;
    let mut files = std::collections::BTreeSet::new();
    for i in 0..300 {
        let f = write_file(&fs, nm, &format!("f{i}"), format!("{i}").as_bytes());
        assert_eq!(fs.is_local(f), Some(true));
        files.insert(f.to_string());
        if i == 0 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(names("local").len() > 1, "the pool was not filled");
        }
    }
    assert!(names("local").is_superset(&files));
    for i in (0..300).step_by(2) {
        assert_eq!(read_all(&fs, lookup(&fs, nm, &format!("f{i}")).unwrap().ino), format!("{i}").as_bytes());
    }
    fs.shutdown().unwrap();
    drop(fs);
    let left = names("local");
    assert!(left.is_superset(&files));
    let ready: std::collections::BTreeSet<String> = left.difference(&files).cloned().collect();
    assert!(!ready.is_empty(), "no ready files kept for the next mount");
    assert!(fsck(t.path()).unwrap().is_clean(), "{}", fsck(t.path()).unwrap());
    let mut c = cfg(StoreLocation::Dir(t.path().to_path_buf()));
    c.local = LocalConfig { ignore: vec!["node_modules".into()], dir: None, native_roots: false };
    let fs = Fs::open_store(c).unwrap();
    let nm = lookup(&fs, ROOT, "node_modules").unwrap().ino;
    let f = write_file(&fs, nm, "new", b"new");
    assert!(ready.contains(&f.to_string()), "inode {f} is not one of the ready files {ready:?}");
    assert_eq!(read_all(&fs, f), b"new");
    fs.shutdown().unwrap();
    drop(fs);
    assert!(fsck(t.path()).unwrap().is_clean(), "{}", fsck(t.path()).unwrap());
}
