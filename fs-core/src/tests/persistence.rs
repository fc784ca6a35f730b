//! Tests of the store: persistence across reopen, the store lock and its
//! errors, crash recovery, chunk deduplication and reference counts, fsck.

use super::*;
use redb::{ReadableDatabase, ReadableTable};

#[test]
fn persistence_dir_store() {
    let t = tempfile::tempdir().unwrap();
    let fs = dir_fs(t.path());
    populate(&fs);
    let before = snapshot(&fs);
    fs.shutdown().unwrap();
    fs.shutdown().unwrap(); // idempotent
    let stats = fs.stats();
    drop(fs);
    fsck_clean(t.path());
    let fs = dir_fs(t.path());
    assert_eq!(snapshot(&fs), before);
    let s2 = fs.stats();
    assert_eq!((s2.inodes, s2.chunks, s2.chunk_bytes, s2.sync_position), (stats.inodes, stats.chunks, stats.chunk_bytes, stats.sync_position));
    assert!(stats.chunks > 0);
    // New inodes keep counting up: numbers are never reused.
    let max = before.values().map(|v| v.0.ino).max().unwrap();
    let n = fs.mkdir(&C, ROOT, os("new"), 0o755).unwrap().ino;
    assert!(n > max);
    // Working copies can be rebuilt from the store.
    fs.shutdown().unwrap();
    drop(fs);
    std::fs::remove_dir_all(t.path().join("wc")).unwrap();
    let fs = dir_fs(t.path());
    let after = snapshot(&fs);
    for (k, v) in &before {
        assert_eq!(after[k].2, v.2, "{k}");
    }
    fs.shutdown().unwrap();
    drop(fs);
    fsck_clean(t.path());
}

#[test]
fn lock_and_errors() {
    let t = tempfile::tempdir().unwrap();
    let fs = dir_fs(t.path());
    match Fs::open_store(cfg(StoreLocation::Dir(t.path().to_path_buf()))) {
        Err(e @ StoreError::Locked { .. }) => {
            let StoreError::Locked { pid, .. } = &e else { unreachable!() };
            assert_eq!(*pid, Some(std::process::id()));
            eprintln!("{e}");
            assert!(e.to_string().contains(&t.path().display().to_string()) && !e.to_string().contains('\n'));
        }
        other => panic!("{:?}", other.err()),
    }
    assert!(matches!(fsck(t.path()), Err(StoreError::Locked { .. })));
    fs.shutdown().unwrap();
    drop(fs);
    // A newer schema is refused.
    {
        let db = redb::Database::create(t.path().join("store.redb")).unwrap();
        let w = db.begin_write().unwrap();
        w.open_table(store::META).unwrap().insert("schema", 99).unwrap();
        w.commit().unwrap();
    }
    let e = Fs::open_store(cfg(StoreLocation::Dir(t.path().to_path_buf()))).err().unwrap();
    assert!(matches!(e, StoreError::NewerSchema { found: 99, .. }), "{e}");
    eprintln!("{e}");
    // Garbage is reported as damage with the fix, before anything is written.
    let t2 = tempfile::tempdir().unwrap();
    std::fs::write(t2.path().join("store.redb"), vec![7u8; 10000]).unwrap();
    let e = Fs::open_store(cfg(StoreLocation::Dir(t2.path().to_path_buf()))).err().unwrap();
    assert!(matches!(e, StoreError::Damaged { .. }), "{e}");
    assert!(e.to_string().contains(&format!("ringfs salvage --store {} --to NEWDIR", t2.path().display())), "{e}");
    assert!(!t2.path().join("ringfs.lock").exists() && !t2.path().join("wc").exists(), "a refused store was written to");
    eprintln!("{e}");
}

#[test]
fn crash_keeps_fsynced_data() {
    let t = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
    let (ino, dino);
    {
        let fs = Fs::open_store(Config { commit_interval: Duration::from_secs(3600), ..cfg(StoreLocation::Dir(t.path().into())) }).unwrap();
        dino = fs.mkdir(&C, ROOT, os("d"), 0o755).unwrap().ino;
        let (a, fh) = fs.create(&C, dino, os("f"), 0o644, libc::O_RDWR as u32).unwrap();
        ino = a.ino;
        fs.write(fh, 0, &data).unwrap();
        fs.fsync(fh, false).unwrap();
        // Not fsynced: may be lost, must not corrupt.
        write_file(&fs, ROOT, "late", b"x");
        fs.simulate_crash();
    }
    // The working copy survived a process kill: re-hashed on open.
    {
        let fs = dir_fs(t.path());
        assert_eq!(lookup(&fs, ROOT, "d").unwrap().ino, dino);
        let a = lookup(&fs, dino, "f").unwrap();
        assert_eq!((a.ino, a.size), (ino, data.len() as u64));
        assert_eq!(read_all(&fs, ino), data);
        fs.shutdown().unwrap();
    }
    fsck_clean(t.path());
    // fsync stores nothing: a crash right after it keeps the bytes in the
    // working copy, and recovery stores them.
    let mut want = data.clone();
    want[..2].copy_from_slice(b"ZZ");
    {
        let fs = dir_fs(t.path());
        let chunks = fs.stats().chunk_bytes;
        let fh = fs.open(&C, ino, libc::O_RDWR as u32).unwrap();
        fs.write(fh, 0, b"ZZ").unwrap();
        fs.fsync(fh, true).unwrap();
        assert_eq!(fs.stats().chunk_bytes, chunks, "fsync does not hash");
        assert_eq!(fs.stats().unstored, 1);
        drop(fs); // drop without shutdown = crash
    }
    {
        let fs = dir_fs(t.path());
        assert_eq!(read_all(&fs, ino), want);
        fs.store_now().unwrap();
        drop(fs); // crash again, after the store caught up
    }
    // The working copy lost too (host crash): restored from chunks.
    std::fs::remove_dir_all(t.path().join("wc")).unwrap();
    {
        let fs = dir_fs(t.path());
        assert_eq!(read_all(&fs, ino), want);
        fs.shutdown().unwrap();
    }
    fsck_clean(t.path());
}

/// A file replaced (rename over it) or removed after its fsync, then a
/// crash before the next durable commit: the store still names the old
/// file, whose bytes were only in its working copy (not hashed yet) — that
/// working copy must still be there (ci6's crash test: an fsynced file came
/// back empty, D76).
#[test]
fn crash_after_replacing_an_fsynced_file_keeps_its_bytes() {
    let t = tempfile::tempdir().unwrap();
    let old: Vec<u8> = (0..285_085u32).map(|i| (i % 251) as u8).collect();
    let new: Vec<u8> = (0..89_814u32).map(|i| (i % 241) as u8).collect();
    {
        let fs = Fs::open_store(Config { commit_interval: Duration::from_secs(3600), ..cfg(StoreLocation::Dir(t.path().into())) }).unwrap();
        let put = |name: &str, data: &[u8]| {
            let (a, fh) = fs.create(&C, ROOT, os(name), 0o644, libc::O_RDWR as u32).unwrap();
            fs.write(fh, 0, data).unwrap();
            fs.fsync(fh, false).unwrap();
            fs.release(fh).unwrap();
            a.ino
        };
        let f = put("f", &old);
        let g = put("g", &old);
        put("tmp", &new);
        fs.fsyncdir(0).unwrap();
        // Not durable yet: the rename over f, the unlink of g.
        fs.rename(&C, ROOT, os("tmp"), ROOT, os("f"), 0).unwrap();
        fs.unlink(&C, ROOT, os("g")).unwrap();
        fs.forget(f, 1);
        fs.forget(g, 1);
        // Set aside, not deleted: the removal is not durable yet.
        assert!(t.path().join(format!("wc/.doomed-{g}")).exists() && !t.path().join(format!("wc/{g}")).exists());
        // One whose removal a commit made durable (the deletion after it
        // not done): recovery deletes it, nothing goes to lost+found.
        std::fs::write(t.path().join("wc/.doomed-999997"), b"gone").unwrap();
        fs.simulate_crash();
    }
    // Salvage of the crashed store takes set-aside bytes too (and leaves
    // the one whose removal was durable out of lost+found).
    {
        let to = t.path().join("salvaged");
        let rep = salvage(t.path(), &to).unwrap();
        assert!(rep.complete(), "{rep}");
        let fs = dir_fs(&to);
        for name in ["f", "g"] {
            let ino = lookup(&fs, ROOT, name).unwrap().ino;
            assert_eq!(read_all(&fs, ino), old, "salvaged {name}");
        }
        assert!(lookup(&fs, ROOT, "lost+found").map(|a| list(&fs, a.ino).len() <= 2).unwrap_or(true), "lost+found");
        fs.shutdown().unwrap();
        drop(fs);
        std::fs::remove_dir_all(&to).unwrap();
    }
    let fs = dir_fs(t.path());
    assert!(!t.path().join("wc/.doomed-999997").exists());
    assert!(std::fs::read_dir(t.path().join("lost+found")).map(|d| d.count()).unwrap_or(0) == 0, "lost+found");
    let f = lookup(&fs, ROOT, "f").unwrap();
    let got = read_all(&fs, f.ino);
    assert!(got == old || got == new, "f: {} bytes, neither version", got.len());
    // The unlink was not durable: g is back, whole.
    let g = lookup(&fs, ROOT, "g").unwrap();
    assert_eq!(read_all(&fs, g.ino), old, "g");
    fs.shutdown().unwrap();
    drop(fs);
    fsck_clean(t.path());
}

#[test]
fn crash_after_unlink_frees_orphans() {
    let t = tempfile::tempdir().unwrap();
    {
        let fs = dir_fs(t.path());
        let ino = write_file(&fs, ROOT, "gone", b"bye");
        let fh = fs.open(&C, ino, libc::O_RDWR as u32).unwrap();
        fs.unlink(&C, ROOT, os("gone")).unwrap();
        fs.fsyncdir(0).unwrap();
        fs.write(fh, 0, b"still").unwrap();
        std::fs::write(t.path().join("wc/999999"), b"stray").unwrap();
        fs.simulate_crash();
    }
    let fs = dir_fs(t.path());
    assert_eq!(fs.stats().inodes, 1);
    assert!(!t.path().join("wc/999999").exists());
    fs.shutdown().unwrap();
    drop(fs);
    fsck_clean(t.path());
}

#[test]
fn dedup_and_refcounts() {
    let t = tempfile::tempdir().unwrap();
    let fs = dir_fs(t.path());
    // Not periodic (a repeating pattern would share chunks within the file).
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..4_000_000u32)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect();
    let a = write_file(&fs, ROOT, "a", &data);
    let fh = fs.open(&C, a, libc::O_RDONLY as u32).unwrap();
    fs.fsync(fh, false).unwrap();
    fs.release(fh).unwrap();
    fs.store_now().unwrap();
    let s1 = fs.stats();
    assert!(s1.chunks >= 2, "{s1:?}");
    assert_eq!(s1.chunk_bytes, data.len() as u64);
    let b = write_file(&fs, ROOT, "b", &data);
    let fh = fs.open(&C, b, libc::O_RDONLY as u32).unwrap();
    fs.fsync(fh, false).unwrap();
    fs.release(fh).unwrap();
    fs.store_now().unwrap();
    let s2 = fs.stats();
    assert_eq!((s2.chunks, s2.chunk_bytes), (s1.chunks, s1.chunk_bytes), "identical content stores nothing new");
    // Prepend 10 bytes: little new data.
    let mut p = b"0123456789".to_vec();
    p.extend_from_slice(&data);
    let fh = fs.open(&C, b, libc::O_RDWR as u32).unwrap();
    fs.write(fh, 0, &p).unwrap();
    fs.fsync(fh, false).unwrap();
    fs.release(fh).unwrap();
    fs.store_now().unwrap();
    let s3 = fs.stats();
    assert!(s3.chunk_bytes - s2.chunk_bytes < 2 * chunk::MAX_CHUNK as u64, "{s3:?}");
    fs.unlink(&C, ROOT, os("a")).unwrap();
    fs.unlink(&C, ROOT, os("b")).unwrap();
    fs.forget(a, 1);
    fs.forget(b, 1);
    fs.fsyncdir(0).unwrap();
    let s4 = fs.stats();
    assert_eq!((s4.chunks, s4.chunk_bytes), (0, 0), "unreferenced chunks removed");
    assert!(s4.sync_position > s1.sync_position);
    fs.shutdown().unwrap();
    drop(fs);
    fsck_clean(t.path());
}

#[test]
fn fsck_detects_corrupt_chunk() {
    let t = tempfile::tempdir().unwrap();
    let fs = dir_fs(t.path());
    write_file(&fs, ROOT, "f", &vec![42u8; 300_000]);
    fs.shutdown().unwrap();
    drop(fs);
    fsck_clean(t.path());
    {
        // Flip one byte of the chunk's bytes in its pack file.
        let db = redb::Database::open(t.path().join("store.redb")).unwrap();
        let rtx = db.begin_read().unwrap();
        let c = rtx.open_table(store::CHUNKS).unwrap();
        let (pack, offset, _, _) = c.first().unwrap().unwrap().1.value();
        let f = std::fs::OpenOptions::new().read(true).write(true).open(t.path().join("packs").join(store::pack::pack_name(pack))).unwrap();
        let mut b = [0u8; 1];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, offset + 1000).unwrap();
        b[0] ^= 1;
        std::os::unix::fs::FileExt::write_all_at(&f, &b, offset + 1000).unwrap();
    }
    let r = fsck(t.path()).unwrap();
    assert!(!r.is_clean());
    assert!(r.problems.iter().any(|p| p.place.starts_with("chunk_index/") && p.what.contains("BLAKE3")), "{r}");
}

#[test]
fn memory_store_is_removed() {
    let fs = mem();
    let wc = fs.stats();
    assert_eq!(wc.store, "memory");
    write_file(&fs, ROOT, "f", b"x");
    fs.shutdown().unwrap();
}

#[test]
fn parallel_table_read_matches_the_sequential_one() {
    // The check before a clean mount reads the inode tables in two threads
    // (`read_state_parallel`, D61): the same table, entries, manifests and
    // journal position as one thread's read, bad entries included.
    let t = tempfile::tempdir().unwrap();
    let fs = dir_fs(t.path());
    populate(&fs);
    let d = fs.mkdir(&C, ROOT, os("many"), 0o755).unwrap().ino;
    for i in 0..300 {
        write_file(&fs, d, &format!("f{i}"), format!("{i}").as_bytes());
    }
    fs.shutdown().unwrap();
    drop(fs);
    {
        // An entry naming no inode.
        let db = redb::Database::create(t.path().join("store.redb")).unwrap();
        let w = db.begin_write().unwrap();
        w.open_table(crate::schema::DIRENTS).unwrap().insert((d, &b"ghost"[..]), (999_999u64, 7u64)).unwrap();
        w.commit().unwrap();
    }
    let db = redb::Database::open(t.path().join("store.redb")).unwrap();
    let rtx = db.begin_read().unwrap();
    let a = crate::store::recovery::read_state(&rtx, 2).unwrap();
    let b = crate::store::recovery::read_state_parallel(&rtx, 2).unwrap();
    type Entries = Vec<(Vec<u8>, u64, u64)>;
    let shape = |r: &crate::store::recovery::Read| {
        let mut nodes: Vec<(u64, u64, Entries, Vec<u8>)> = r
            .st
            .nodes
            .iter()
            .map(|(i, n)| {
                let mut e: Entries = n.dir.as_ref().map(|d| d.by_name.iter().map(|(k, (c, k2))| (k.to_vec(), *c, *k2)).collect()).unwrap_or_default();
                e.sort();
                let cookies: Vec<u64> = n.dir.as_ref().map(|d| d.by_cookie.keys().copied().collect()).unwrap_or_default();
                assert_eq!(cookies.len(), e.len());
                (*i, n.rec.next_cookie, e, n.dname().to_vec())
            })
            .collect();
        nodes.sort();
        let mut m: Vec<u64> = r.has_manifest.iter().copied().collect();
        m.sort();
        (nodes, m, r.sync_pos, r.bad.clone(), r.st.next_ino)
    };
    let (sa, sb) = (shape(&a), shape(&b));
    assert_eq!(sa, sb);
    assert_eq!(sa.3, vec![(true, d, b"ghost".to_vec())], "the dangling entry is bad in both");
    assert!(sa.0.len() > 300 && sa.1.len() >= 300);
}

#[test]
fn table_read_links_each_directorys_entries_as_one_run() {
    // `link` puts a directory's entries in place as one run (D68): every
    // entry in both maps under its cookie, the cookie counter past them
    // all, each subdirectory's own name set; bad rows (a child that does
    // not exist, a parent that is not a directory, a local-only entry
    // whose name a synced one has) left out and listed, the rest of their
    // run kept. Checked against the rows themselves.
    let t = tempfile::tempdir().unwrap();
    let fs = dir_fs(t.path());
    populate(&fs);
    let d = fs.mkdir(&C, ROOT, os("many"), 0o755).unwrap().ino;
    let mut subs = Vec::new();
    for i in 0..40 {
        subs.push(fs.mkdir(&C, d, os(&format!("s{i}")), 0o755).unwrap().ino);
        write_file(&fs, d, &format!("f{i}"), b"x");
    }
    let file = write_file(&fs, d, "plain", b"y");
    fs.shutdown().unwrap();
    drop(fs);
    {
        let db = redb::Database::create(t.path().join("store.redb")).unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut de = w.open_table(crate::schema::DIRENTS).unwrap();
            de.insert((d, &b"ghost"[..]), (999_999u64, 1_000u64)).unwrap();
            // Two entries under a regular file: a run whose parent is no directory.
            de.insert((file, &b"a"[..]), (subs[0], 3u64)).unwrap();
            de.insert((file, &b"b"[..]), (subs[1], 4u64)).unwrap();
            let mut le = w.open_table(crate::schema::LOCAL_DIRENTS).unwrap();
            le.insert((d, &b"s3"[..]), (subs[4], 2_000u64)).unwrap();
        }
        w.commit().unwrap();
    }
    let db = redb::Database::open(t.path().join("store.redb")).unwrap();
    let rtx = db.begin_read().unwrap();
    let mut rows: Vec<(u64, Vec<u8>, u64, u64)> = Vec::new();
    for r in rtx.open_table(crate::schema::DIRENTS).unwrap().iter().unwrap() {
        let (k, v) = r.unwrap();
        let ((p, n), (c, ck)) = (k.value(), v.value());
        rows.push((p, n.to_vec(), c, ck));
    }
    for read in [crate::store::recovery::read_state(&rtx, 2).unwrap(), crate::store::recovery::read_state_parallel(&rtx, 2).unwrap()] {
        let mut bad = read.bad.clone();
        bad.sort();
        // Sorted as `bad` is: which of `d` and `file` has the lower number
        // depends on the pool of ready inodes (D52), not on this test.
        let mut want = vec![(false, d, b"s3".to_vec()), (true, d, b"ghost".to_vec()), (true, file, b"a".to_vec()), (true, file, b"b".to_vec())];
        want.sort();
        assert_eq!(bad, want);
        let mut kept = 0;
        for (p, n, c, ck) in &rows {
            if bad.iter().any(|(s, bp, bn)| *s && bp == p && bn == n) {
                continue;
            }
            kept += 1;
            let pn = &read.st.nodes[p];
            let dd = pn.dir.as_ref().unwrap();
            assert_eq!(dd.by_name.get(&n[..]), Some(&(*c, *ck)), "entry {n:?} of {p}");
            assert_eq!(dd.by_cookie.get(ck).map(|x| x.to_vec()), Some(n.clone()), "cookie {ck} of {p}");
            assert!(pn.rec.next_cookie > *ck);
            if let Some(cd) = read.st.nodes[c].dir.as_ref() {
                assert_eq!(&cd.dname[..], &n[..], "the name of directory {c}");
            }
        }
        assert!(kept > 80);
        for n in read.st.nodes.values() {
            if let Some(dd) = n.dir.as_ref() {
                assert_eq!(dd.by_name.len(), dd.by_cookie.len());
            }
        }
        assert!(read.st.nodes[&file].dir.is_none());
    }
}
