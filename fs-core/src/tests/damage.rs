//! Damaged stores at the library level: undecodable records found by fsck
//! and refused by open_store, the in-memory overlay redb repairs into, redb
//! panics caught quietly, salvage of a store whose names are partly lost.

use super::*;
use crate::store::readonly::{guarded, Overlay};
use redb::StorageBackend;

/// A store with two files and a directory, shut down cleanly.
fn made(d: &Path) -> (u64, u64) {
    let fs = dir_fs(d);
    let dir = fs.mkdir(&C, ROOT, os("d"), 0o755).unwrap().ino;
    let a = write_file(&fs, dir, "a", b"alpha");
    let b = write_file(&fs, ROOT, "b", &vec![7u8; 300_000]);
    fs.shutdown().unwrap();
    drop(fs);
    (a, b)
}

#[test]
fn undecodable_inode_record_is_reported_and_refused() {
    let t = tempfile::tempdir().unwrap();
    let (a, _) = made(t.path());
    {
        let db = redb::Database::create(t.path().join("store.redb")).unwrap();
        let w = db.begin_write().unwrap();
        w.open_table(store::INODES).unwrap().insert(a, &b"\x01\x02"[..]).unwrap();
        w.commit().unwrap();
    }
    let rep = fsck_store(t.path(), FsckOptions::default()).unwrap();
    assert!(rep.problems.iter().any(|p| p.place == format!("inodes key {a}") && p.what.contains("undecodable")), "{rep}");
    let before = std::fs::read(t.path().join("store.redb")).unwrap();
    let e = Fs::open_store(cfg(StoreLocation::Dir(t.path().to_path_buf()))).err().unwrap();
    assert!(matches!(e, StoreError::Damaged { .. }), "{e}");
    assert!(e.to_string().contains(&format!("inodes key {a}")) && e.to_string().contains("ringfs salvage"), "{e}");
    assert_eq!(std::fs::read(t.path().join("store.redb")).unwrap(), before, "a refused store was written to");
    // Salvage: the file whose record is lost keeps its name and bytes (its working copy).
    let to = t.path().join("new");
    let rep = salvage(t.path(), &to).unwrap();
    assert!(rep.complete(), "{rep}");
    let fs = dir_fs(&to);
    let d = fs.lookup(&C, ROOT, os("d")).unwrap().ino;
    let ai = fs.lookup(&C, d, os("a")).unwrap().ino;
    assert_eq!(read_all(&fs, ai), b"alpha");
    let bi = fs.lookup(&C, ROOT, os("b")).unwrap().ino;
    assert_eq!(read_all(&fs, bi), vec![7u8; 300_000]);
    fs.shutdown().unwrap();
}

#[test]
fn inode_record_with_impossible_times_is_reported_by_fsck() {
    let t = tempfile::tempdir().unwrap();
    let (a, _) = made(t.path());
    {
        let db = redb::Database::create(t.path().join("store.redb")).unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut tab = w.open_table(store::INODES).unwrap();
            let mut rec = crate::schema::dec_inode(tab.get(a).unwrap().unwrap().value(), crate::schema::SCHEMA_VERSION).unwrap();
            rec.mtime.1 = 4_000_000_000;
            tab.insert(a, &crate::schema::enc(&rec)[..]).unwrap();
        }
        w.commit().unwrap();
    }
    let rep = fsck_store(t.path(), FsckOptions { full: true }).unwrap();
    assert!(rep.problems.iter().any(|p| p.place == format!("inode {a}") && p.what.contains("mtime nanoseconds 4000000000")), "{rep}");
}

#[test]
fn lost_names_go_to_lost_found_and_missing_chunks_are_reported() {
    let t = tempfile::tempdir().unwrap();
    let (_, b) = made(t.path());
    {
        let db = redb::Database::create(t.path().join("store.redb")).unwrap();
        let w = db.begin_write().unwrap();
        w.open_table(store::DIRENTS).unwrap().remove((ROOT, &b"d"[..])).unwrap();
        w.open_table(store::CHUNKS).unwrap().retain(|_, _| false).unwrap();
        w.commit().unwrap();
    }
    // b: no working copy and no index entries: its chunks come from the packs.
    std::fs::remove_file(t.path().join("wc").join(b.to_string())).unwrap();
    let rep = salvage(t.path(), &t.path().join("from-packs")).unwrap();
    assert!(rep.complete() && rep.packs.contains("chunks"), "{rep}");
    let fs = dir_fs(&t.path().join("from-packs"));
    let bi = fs.lookup(&C, ROOT, os("b")).unwrap().ino;
    assert_eq!(read_all(&fs, bi), vec![7u8; 300_000]);
    fs.shutdown().unwrap();
    // And with the packs gone too, nothing has b's bytes.
    std::fs::remove_dir_all(t.path().join("packs")).unwrap();
    let to = t.path().join("new");
    let rep = salvage(t.path(), &to).unwrap();
    assert!(!rep.complete(), "{rep}");
    // b's manifest names chunks nothing holds: its record does not verify,
    // so it is in lost+found (not restored as /b), its bytes reported lost.
    let bl = format!("/lost+found/{b}");
    assert!(rep.lost.iter().any(|(p, w)| *p == bl && w.contains("neither")), "{rep}");
    assert!(rep.lost_found.iter().any(|(p, w)| *p == bl && w.contains("named /b by records that do not verify")), "{rep}");
    assert!(!rep.named.iter().any(|p| p == "/b"), "{rep}");
    assert!(rep.lost_found.iter().any(|(p, _)| p.starts_with("/lost+found/")), "{rep}");
    let fs = dir_fs(&to);
    let lf = fs.lookup(&C, ROOT, os("lost+found")).unwrap().ino;
    // The directory, under its old inode number (the only entry).
    let mut names = Vec::new();
    let fh = fs.opendir(&C, lf).unwrap();
    fs.readdir(lf, fh, 0, &mut |e| {
        if e.name != b"." && e.name != b".." {
            names.push(e.name.to_vec());
        }
        true
    })
    .unwrap();
    assert!(names.contains(&b.to_string().into_bytes()), "{names:?} {rep}");
    let dir = names.iter().map(|n| fs.lookup(&C, lf, OsStr::from_bytes(n)).unwrap()).find(|a| a.mode & libc::S_IFMT == libc::S_IFDIR);
    let dir = dir.expect("the directory d, under its old inode number").ino;
    let ai = fs.lookup(&C, dir, os("a")).unwrap().ino;
    assert_eq!(read_all(&fs, ai), b"alpha");
    fs.shutdown().unwrap();
}

#[test]
fn overlay_reads_the_file_and_keeps_writes_in_memory() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("f");
    let base: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    std::fs::write(&p, &base).unwrap();
    let ov = Overlay::new(std::fs::File::open(&p).unwrap()).unwrap();
    assert_eq!(ov.len().unwrap(), 10_000);
    ov.write(4090, &[0xAA; 20]).unwrap();
    let mut buf = vec![0u8; 40];
    ov.read(4080, &mut buf).unwrap();
    assert_eq!(&buf[..10], &base[4080..4090]);
    assert_eq!(&buf[10..30], &[0xAA; 20]);
    assert_eq!(&buf[30..], &base[4110..4120]);
    // Shrink then grow: the cut bytes read as zero.
    ov.set_len(5000).unwrap();
    ov.set_len(9000).unwrap();
    let mut tail = vec![1u8; 100];
    ov.read(8000, &mut tail).unwrap();
    assert!(tail.iter().all(|b| *b == 0));
    ov.read(4990, &mut tail[..10]).unwrap();
    assert_eq!(&tail[..10], &base[4990..5000]);
    assert!(ov.read(8950, &mut [0u8; 100]).is_err(), "a read past the end");
    assert_eq!(std::fs::read(&p).unwrap(), base, "the file was written");
}

#[test]
fn guarded_turns_a_panic_into_an_error() {
    let r: std::result::Result<(), String> = guarded(|| unreachable!("a damaged page"));
    assert!(r.unwrap_err().contains("a damaged page"));
    assert_eq!(guarded(|| 5), Ok(5));
}

/// Damage met while serving (issue 41, D89): a store opened cleanly (its
/// check read the tables through another handle) whose database turns to
/// junk past its header behind the open handle. A snapshot commit meets it
/// (a redb panic or error inside a store transaction): it fails, the
/// thread that ran it lives, the store says it is damaged (by table, with
/// the fix) and refuses writes, what is in memory still answers, and the
/// shutdown skips the final commit, leaving the lock file naming a pid (as
/// a crash does) so the next open reads every table and refuses the store.
#[test]
fn damage_met_while_served_turns_the_store_read_only() {
    let t = tempfile::tempdir().unwrap();
    {
        let fs = dir_fs(t.path());
        write_file(&fs, ROOT, "big", &body(7, 4 << 20));
        write_file(&fs, ROOT, "small", b"small");
        fs.shutdown().unwrap();
    }
    let fs = dir_fs(t.path());
    assert!(!fs.is_damaged() && fs.damaged().is_none());
    let db = t.path().join("store.redb");
    let len = std::fs::metadata(&db).unwrap().len();
    let junk: Vec<u8> = (0..len - 16384).map(|i| (i.wrapping_mul(2654435761) >> 7) as u8 ^ 0x5a).collect();
    std::os::unix::fs::FileExt::write_all_at(&std::fs::OpenOptions::new().write(true).open(&db).unwrap(), &junk, 16384).unwrap();
    // As the control socket runs it: a panic there refuses the request.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fs.snapshot_commit(&crate::snap::CommitOptions { message: "m".into(), author: "t@h".into(), allow_empty: true })));
    assert!(!matches!(r, Ok(Ok(_))), "a commit over a damaged database succeeded");
    assert!(fs.is_damaged(), "the commit met damage: {:?}", r.as_ref().map(|r| r.as_ref().err()));
    let d = fs.damaged().unwrap().to_string();
    assert!(d.starts_with("store damaged in ") && d.contains("read-only") && d.contains("ringfs salvage --store"), "{d}");
    assert_eq!(fs.damaged().unwrap().to_string(), d, "named once");
    // What is in memory still answers; nothing more is stored.
    assert!(fs.getattr(ROOT, None).is_ok());
    assert!(fs.store_now().is_err());
    let e = fs.shutdown().unwrap_err();
    assert!(matches!(e, StoreError::ServedDamaged(_)) && e.to_string().contains("final commit was skipped"), "{e}");
    drop(fs);
    assert!(!std::fs::read(t.path().join("ringfs.lock")).unwrap().is_empty(), "the lock file keeps the pid: the next mount reads every table");
}

/// What the check before a mount of a cleanly shut down store would cost
/// if it also read the live manifest tables (issue 41; docs/DECISIONS.md
/// D89): a store of `RINGFS_MEASURE_FILES` small files (default 10 000)
/// in 100 directories and four 64 MiB files, then per round (7) a fresh
/// read-only open timing the clean check's reads (pack list, meta, chunk
/// index, the inode tables), the segment tables beside them
/// (`live_segments`, `live_segment_refs`, undecoded) and every
/// `live_roots` record decoded (its keys are read already). Prints the
/// medians. Run by hand:
/// `RINGFS_MEASURE_FILES=200000 cargo test --release -p fs-core --lib
/// measure_manifest_check -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_manifest_check() {
    use crate::store::readonly::open_read_only;
    use crate::store::scan::walk;
    let n: u32 = std::env::var("RINGFS_MEASURE_FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let t = tempfile::tempdir().unwrap();
    {
        let fs = dir_fs(t.path());
        let dirs: Vec<u64> = (0..100).map(|d| fs.mkdir(&C, ROOT, os(&format!("d{d}")), 0o755).unwrap().ino).collect();
        for i in 0..n {
            write_file(&fs, dirs[(i % 100) as usize], &format!("f{i}"), &body(i, 200 + (i as usize % 3000)));
        }
        // Four 64 MiB files: ~8 000 chunks each, the segments' share.
        for i in 0..4 {
            write_file(&fs, ROOT, &format!("big{i}"), &body(n + i, 64 << 20));
        }
        fs.shutdown().unwrap();
    }
    let size = std::fs::metadata(t.path().join("store.redb")).unwrap().len();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let (mut now, mut added, mut decoded) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..7 {
        let ro = open_read_only(t.path()).unwrap();
        let rtx = ro.begin_read().unwrap();
        let t0 = std::time::Instant::now();
        for w in [walk(&rtx, store::PACKS, |_, _| {}), walk(&rtx, store::META, |_, _| {}), walk(&rtx, store::CHUNKS, |_, _| {})] {
            assert!(w.damage.is_none());
        }
        crate::store::recovery::read_state_parallel(&rtx, 2).unwrap();
        now.push(t0.elapsed());
        let t1 = std::time::Instant::now();
        let segs = walk(&rtx, store::LIVE_SEGMENTS, |_, _| {});
        let refs = walk(&rtx, store::LIVE_SEGMENT_REFS, |_, _| {});
        added.push(t1.elapsed());
        assert!(segs.damage.is_none() && refs.damage.is_none());
        // The alternative: every root decoded too (what a full check adds).
        let t2 = std::time::Instant::now();
        let roots = walk(&rtx, store::LIVE_ROOTS, |_, v| assert!(crate::schema::dec::<crate::live::Root>(v).is_ok()));
        decoded.push(t2.elapsed());
        if added.len() == 1 {
            eprintln!("{n} files, store.redb {size} bytes: live_segments {} rows, live_segment_refs {} rows, live_roots {} rows", segs.records, refs.records, roots.records);
        }
    }
    now.sort();
    added.sort();
    decoded.sort();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "{n} files: clean check's reads median {:.1} ms (min {:.1}); segment tables median {:.1} ms (min {:.1}); roots decoded median {:.1} ms (min {:.1}); load {}",
        ms(now[3]),
        ms(now[0]),
        ms(added[3]),
        ms(added[0]),
        ms(decoded[3]),
        ms(decoded[0]),
        load.trim()
    );
}
