//! Pack files through `Fs`: compaction while readers restore content in
//! other threads, automatic compaction, gc of a store no daemon holds, and
//! kill -9 at random points while appending and compacting.

use super::*;
use std::io::{BufRead, Read, Seek};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// fsync, then store the file now (fsync itself no longer hashes: D29).
fn fsync_ino(fs: &Fs, ino: u64) {
    let fh = fs.open(&C, ino, libc::O_RDONLY as u32).unwrap();
    fs.fsync(fh, false).unwrap();
    fs.release(fh).unwrap();
    fs.store_now().unwrap();
}

fn restored(fs: &Fs, ino: u64) -> Vec<u8> {
    let mut f = tempfile::tempfile().unwrap();
    fs.test_store().restore_content(ino, &f).unwrap();
    let mut out = Vec::new();
    f.rewind().unwrap();
    f.read_to_end(&mut out).unwrap();
    out
}

#[test]
fn compaction_with_concurrent_readers() {
    let t = tempfile::tempdir().unwrap();
    let fs = Arc::new(dir_fs(t.path()));
    fs.test_store().packs.set_seal_at(600 << 10);
    let mut files = Vec::new();
    for i in 0..24u32 {
        let b = body(i, 150_000 + i as usize * 7_000);
        let ino = write_file(&fs, ROOT, &format!("f{i}"), &b);
        fsync_ino(&fs, ino);
        files.push((i, ino, b));
    }
    let packs_before = crate::store::pack::pack_files(&t.path().join("packs")).unwrap().len();
    assert!(packs_before >= 4, "{packs_before} packs");
    let keep: Arc<Vec<(u64, Vec<u8>)>> = Arc::new(files.iter().filter(|f| f.0 % 3 == 0).map(|f| (f.1, f.2.clone())).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (fs, keep, stop) = (fs.clone(), keep.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) || n == 0 {
                    for (ino, b) in keep.iter() {
                        assert!(restored(&fs, *ino) == *b, "inode {ino} restored wrong");
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    for (i, ino, _) in files.iter().filter(|f| f.0 % 3 != 0) {
        fs.unlink(&C, ROOT, os(&format!("f{i}"))).unwrap();
        fs.forget(*ino, 1);
    }
    let r = fs.gc().unwrap();
    stop.store(true, Ordering::SeqCst);
    for h in readers {
        assert!(h.join().unwrap() > 0);
    }
    assert!(r.packs_compacted > 0 && r.reclaimed() > 0, "{r:?}");
    assert!(r.bytes_after < r.bytes_before, "{r:?}");
    for (ino, b) in keep.iter() {
        assert!(restored(&fs, *ino) == *b);
    }
    fs.shutdown().unwrap();
    drop(fs);
    fsck_clean(t.path());
    // From the packs alone (no working copies).
    std::fs::remove_dir_all(t.path().join("wc")).unwrap();
    let fs = dir_fs(t.path());
    for (i, ino, b) in files.iter().filter(|f| f.0 % 3 == 0) {
        assert!(read_all(&fs, *ino) == *b, "f{i}");
    }
    fs.shutdown().unwrap();
    drop(fs);
    // gc of the unmounted store: nothing left to reclaim but it works.
    let r = crate::gc_store(t.path()).unwrap();
    assert_eq!(r.bytes_after, r.bytes_before.min(r.bytes_after));
    fsck_clean(t.path());
}

#[test]
fn freed_chunks_lower_live_bytes_and_empty_packs_go() {
    let t = tempfile::tempdir().unwrap();
    let fs = dir_fs(t.path());
    fs.test_store().packs.set_seal_at(300 << 10);
    let mut inos = Vec::new();
    for i in 0..6u32 {
        let ino = write_file(&fs, ROOT, &format!("f{i}"), &body(100 + i, 200_000));
        fsync_ino(&fs, ino);
        inos.push(ino);
    }
    for (i, ino) in inos.iter().enumerate() {
        fs.unlink(&C, ROOT, os(&format!("f{i}"))).unwrap();
        fs.forget(*ino, 1);
    }
    let r = fs.gc().unwrap();
    // Every sealed pack was all dead: removed without copying anything
    // (by this gc, or already by the automatic compaction after a commit).
    assert_eq!(r.chunks_moved, 0, "{r:?}");
    // The pack being appended to was all dead too: gc sealed and removed it.
    assert_eq!(r.packs_after, 0, "{r:?}");
    assert_eq!(crate::store::pack::pack_files(&t.path().join("packs")).unwrap().len(), 0);
    // And appending goes on in a new pack.
    let ino = write_file(&fs, ROOT, "after", &body(7, 50_000));
    fsync_ino(&fs, ino);
    assert_eq!(restored(&fs, ino), body(7, 50_000));
    fs.shutdown().unwrap();
    drop(fs);
    fsck_clean(t.path());
}

/// Child half of `kill_9_during_append_and_compaction`: writes, fsyncs,
/// deletes and compacts until killed; prints "synced I INO" after each
/// fsync and "gone I" before each unlink.
#[test]
#[ignore]
fn pack_kill_child() {
    let Ok(d) = std::env::var("RINGFS_PACK_KILL_DIR") else { return };
    let start: u32 = std::env::var("RINGFS_PACK_KILL_START").unwrap().parse().unwrap();
    let fs = Fs::open_store(Config { commit_interval: Duration::from_millis(5), ..cfg(StoreLocation::Dir(d.into())) }).unwrap();
    fs.test_store().packs.set_seal_at(256 << 10);
    use std::io::Write;
    let mut out = std::io::stdout();
    let mut inos = Vec::new();
    for i in start.. {
        let name = format!("f{i}");
        let (a, fh) = fs.create(&C, ROOT, os(&name), 0o644, libc::O_RDWR as u32).unwrap();
        fs.write(fh, 0, &body(i, 140_000 + (i as usize % 5) * 30_000)).unwrap();
        fs.fsync(fh, false).unwrap();
        fs.release(fh).unwrap();
        writeln!(out, "synced {i} {}", a.ino).unwrap();
        inos.push(a.ino);
        if i % 2 == 1 {
            writeln!(out, "gone {}", i - 1).unwrap();
            out.flush().unwrap();
            if fs.unlink(&C, ROOT, os(&format!("f{}", i - 1))).is_ok() {
                fs.forget(inos[inos.len() - 2], 1);
            }
        }
        out.flush().unwrap();
        if i % 4 == 3 {
            fs.gc().unwrap();
        }
    }
}

#[test]
fn kill_9_during_append_and_compaction() {
    let t = tempfile::tempdir().unwrap();
    let mut synced: Vec<(u32, u64)> = Vec::new();
    let mut gone = std::collections::HashSet::new();
    let mut next = 0u32;
    for round in 0..20u32 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::packs::pack_kill_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env("RINGFS_PACK_KILL_DIR", t.path())
            .env("RINGFS_PACK_KILL_START", next.to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        struct Kill(u32);
        impl Drop for Kill {
            fn drop(&mut self) {
                unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
            }
        }
        let guard = Kill(child.id());
        // Kill after a pseudo-random number of fsyncs (2..9), at a random
        // point of the next append, unlink or compaction.
        let want = 2 + (blake3::hash(&round.to_le_bytes()).as_bytes()[0] % 8) as usize;
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut n = 0;
        let mut note = |line: String, synced: &mut Vec<(u32, u64)>| {
            if let Some(rest) = line.strip_prefix("synced ") {
                let v: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
                synced.push((v[0] as u32, v[1]));
                next = next.max(v[0] as u32 + 1);
                true
            } else {
                if let Some(rest) = line.strip_prefix("gone ") {
                    gone.insert(rest.parse::<u32>().unwrap());
                }
                false
            }
        };
        for line in out.by_ref() {
            if note(line.unwrap(), &mut synced) {
                n += 1;
                if n == want {
                    std::thread::sleep(Duration::from_micros(blake3::hash(&[round as u8, 1]).as_bytes()[0] as u64 * 40));
                    break;
                }
            }
        }
        drop(guard);
        // What it printed before it died.
        for line in out {
            let Ok(line) = line else { break };
            note(line, &mut synced);
        }
        child.wait().unwrap();
        // Names must not collide with files of an earlier round.
        next = next.saturating_add(1);
        let fs = dir_fs(t.path());
        for (i, ino) in &synced {
            if gone.contains(i) {
                continue;
            }
            assert!(read_all(&fs, *ino) == body(*i, 140_000 + (*i as usize % 5) * 30_000), "round {round}: fsynced f{i} damaged");
        }
        fs.shutdown().unwrap();
        drop(fs);
        let r = fsck(t.path()).unwrap();
        assert!(r.is_clean(), "round {round}: {r}");
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Child half of `kill_9_during_migration`: opens (migrates) the store and
/// says so, then idles until killed.
#[test]
#[ignore]
fn migrate_kill_child() {
    let Ok(d) = std::env::var("RINGFS_MIGRATE_KILL_DIR") else { return };
    let fs = Fs::open_store(cfg(StoreLocation::Dir(d.into()))).unwrap();
    println!("open");
    std::io::Write::flush(&mut std::io::stdout()).unwrap();
    std::thread::sleep(Duration::from_secs(30));
    drop(fs);
}

/// The schema-2 fixture of ringfs/tests (made by the release before pack
/// files), migrated by a child killed at a spread of moments: the next open
/// migrates (or finds migrated) a store with every file intact, fsck clean.
#[test]
fn kill_9_during_migration() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ringfs/tests/fixtures/store-schema2");
    let pattern: Vec<u8> = (0..1u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let t = tempfile::tempdir().unwrap();
    for round in 0..20u64 {
        let d = t.path().join(format!("s{round}"));
        copy_tree(&fixture, &d);
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::packs::migrate_kill_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env("RINGFS_MIGRATE_KILL_DIR", &d)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // 0 to 38 ms in 2 ms steps: the child opens (and migrates) the
        // fixture about 30 ms after its start on an idle machine, so the
        // kills land before, during and after the migration.
        std::thread::sleep(Duration::from_millis(round * 2));
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        // Working copies gone too (a host crash): the bytes must come from the store.
        std::fs::remove_dir_all(d.join("wc")).unwrap();
        let fs = dir_fs(&d);
        let a = lookup(&fs, ROOT, "a.txt").unwrap().ino;
        assert_eq!(read_all(&fs, a), b"hello\n", "round {round}");
        let dir = lookup(&fs, ROOT, "dir").unwrap().ino;
        let b = lookup(&fs, dir, "b").unwrap().ino;
        assert!(read_all(&fs, b) == pattern, "round {round}: dir/b");
        fs.shutdown().unwrap();
        drop(fs);
        let r = fsck(&d).unwrap();
        assert!(r.is_clean(), "round {round}: {r}");
        assert!(r.packs >= 1, "round {round}: {r}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
