//! A full disk under the store: writes fail with ENOSPC, a group commit that
//! hits ENOSPC keeps its changes queued and the database is reopened, so
//! once space is freed fsync works again, nothing is lost at remount, fsck
//! is clean; `ringfs umount` reports a final commit that could not be made.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Makes `dir` and mounts a tmpfs with `opts` (e.g. "size=8m,nr_inodes=64")
    /// on it; unmounted (lazily) and removed when dropped.
    fn mount(dir: &Path, opts: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount").args(["-t", "tmpfs", "-o", opts, "ringfs-full-test"]).arg(dir).status().unwrap();
        assert!(st.success(), "mount tmpfs");
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn ringfs_ok(args: &[&std::ffi::OsStr]) -> std::process::Output {
    run_timeout(Command::new(RINGFS).args(args), Duration::from_secs(120))
}

/// Does `ok()` hold within 5 s (tried every 100 ms)?
fn within_5s(mut ok: impl FnMut() -> bool) -> bool {
    for _ in 0..50 {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// `ringfs umount MP` succeeds, then `ringfs fsck --store STORE` is clean.
fn umount_then_fsck(mp: &Path, store: &Path) {
    let o = ringfs_ok(&["umount".as_ref(), mp.as_os_str()]);
    assert!(o.status.success(), "umount: {}", out_str(&o).1);
    let o = ringfs_ok(&["fsck".as_ref(), "--store".as_ref(), store.as_os_str()]);
    assert!(o.status.success(), "fsck: {}", out_str(&o).0);
}

fn fsync(p: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new().write(true).open(p)?.sync_all()
}

/// A 64 MiB tmpfs (in a temporary directory) holding a store, mounted at
/// `mnt` beside it with `--commit-interval-ms ms`: (the temporary
/// directory, the tmpfs, the tmpfs's directory, the mountpoint, the store).
/// Drop the returned values in reverse order (as bindings of one `let`
/// are), after unmounting (`scopeguard`).
fn mounted_on_64m_tmpfs(ms: &str) -> (tempfile::TempDir, Tmpfs, std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let base = tempfile::Builder::new().prefix("ringfs-full-").tempdir().unwrap();
    let fsdir = base.path().join("fs");
    let mp = base.path().join("mnt");
    std::fs::create_dir_all(&mp).unwrap();
    let tmpfs = Tmpfs::mount(&fsdir, "size=64m");
    let store = fsdir.join("store");
    let o = ringfs_ok(&["mount".as_ref(), mp.as_os_str(), "--store".as_ref(), store.as_os_str(), "--daemon".as_ref(), "--commit-interval-ms".as_ref(), ms.as_ref()]);
    assert!(o.status.success(), "mount: {}", out_str(&o).1);
    (base, tmpfs, fsdir, mp, store)
}

#[test]
fn full_disk_during_commit_recovers_once_space_is_freed() {
    if raw_mode() {
        return;
    }
    let (_base, _tmpfs, fsdir, mp, store) = mounted_on_64m_tmpfs("600000");
    let cleanup = scopeguard(&mp);
    // Files that must survive, then a filler (outside the store) that fills the disk.
    std::fs::create_dir(mp.join("d")).unwrap();
    let keep: Vec<Vec<u8>> = (0..3u8).map(|i| (0..2_000_000u32).map(|j| (j as u8).wrapping_mul(i + 3)).collect()).collect();
    for (i, k) in keep.iter().enumerate() {
        std::fs::write(mp.join(format!("d/keep{i}")), k).unwrap();
    }
    fsync(&mp.join("d/keep0")).expect("fsync with space");
    // More changes, then a filler outside the store fills the disk: their
    // commit (the fsync's; no group commit runs in this test, whose 200 ms
    // interval let one commit them first on a loaded machine) fails.
    std::fs::write(mp.join("d/late"), b"late but kept").unwrap();
    std::fs::rename(mp.join("d/keep2"), mp.join("d/keep2-renamed")).unwrap();
    let filler = fsdir.join("filler");
    let _ = Command::new("dd").args(["if=/dev/zero", "bs=1M", "status=none"]).arg(format!("of={}", filler.display())).stderr(std::process::Stdio::null()).status();
    let r = fsync(&mp.join("d/late"));
    assert!(r.is_err(), "fsync on a full disk must fail");
    std::thread::sleep(Duration::from_millis(600));
    // Space comes back: fsync works again, nothing queued was dropped.
    std::fs::remove_file(&filler).unwrap();
    assert!(within_5s(|| fsync(&mp.join("d/late")).is_ok()), "fsync after space was freed");
    umount_then_fsck(&mp, &store);
    drop(cleanup);
    let o = ringfs_ok(&["mount".as_ref(), mp.as_os_str(), "--store".as_ref(), store.as_os_str(), "--daemon".as_ref()]);
    assert!(o.status.success(), "remount: {}", out_str(&o).1);
    let cleanup = scopeguard(&mp);
    assert_eq!(std::fs::read(mp.join("d/keep0")).unwrap(), keep[0]);
    assert_eq!(std::fs::read(mp.join("d/keep1")).unwrap(), keep[1]);
    assert_eq!(std::fs::read(mp.join("d/keep2-renamed")).unwrap(), keep[2]);
    assert!(!mp.join("d/keep2").exists());
    assert_eq!(std::fs::read(mp.join("d/late")).unwrap(), b"late but kept");
    drop(cleanup);
}

/// The disk filled from inside the workspace, then `rm` there: the space
/// comes back within a commit interval (the working copies of removed
/// files go once a commit records the removal, or at once when the commit
/// itself fails for want of space, D76), and writing works again.
#[test]
fn rm_in_the_workspace_frees_space_on_a_full_disk() {
    if raw_mode() {
        return;
    }
    let (_base, _tmpfs, _fsdir, mp, store) = mounted_on_64m_tmpfs("200");
    let cleanup = scopeguard(&mp);
    let block: Vec<u8> = (0..4u32 << 20).map(|j| (j.wrapping_mul(2654435761) >> 13) as u8).collect();
    let fill = |prefix: &str| -> usize {
        let mut n = 0;
        loop {
            let p = mp.join(format!("{prefix}{n}"));
            let r = std::fs::write(&p, &block).and_then(|_| fsync(&p));
            if r.is_err() {
                let _ = std::fs::remove_file(&p);
                return n;
            }
            n += 1;
            assert!(n < 64, "64 MiB filesystem never filled");
        }
    };
    let n = fill("big");
    assert!(n >= 2, "only {n} files fit");
    for i in 0..n {
        std::fs::remove_file(mp.join(format!("big{i}"))).unwrap();
    }
    // Room again for at least one such file, within a few commit intervals.
    let p = mp.join("after");
    assert!(within_5s(|| std::fs::write(&p, &block).and_then(|_| fsync(&p)).is_ok()), "no room after removing {n} files of 4 MiB in the workspace");
    umount_then_fsck(&mp, &store);
    drop(cleanup);
}

/// Unmounts `mp` (ringfs umount, then a lazy umount) when dropped.
fn scopeguard(mp: &Path) -> impl Drop + '_ {
    struct G<'a>(&'a Path);
    impl Drop for G<'_> {
        fn drop(&mut self) {
            if is_mounted(self.0) {
                let _ = run_timeout(Command::new(RINGFS).arg("umount").arg(self.0), Duration::from_secs(60));
            }
            if is_mounted(self.0) {
                let _ = Command::new("umount").arg("-l").arg(self.0).status();
            }
        }
    }
    G(mp)
}

/// A create that fails for want of space (here: a `--local-dir` out of
/// inodes) leaves no name behind, as creat(2) on ext4; the names that were
/// made keep their bytes, and the store stays consistent.
#[test]
fn failed_creates_leave_no_name() {
    if raw_mode() {
        return;
    }
    let base = tempfile::Builder::new().prefix("ringfs-full-").tempdir().unwrap();
    let (fsdir, mp, store) = (base.path().join("fs"), base.path().join("mnt"), base.path().join("store"));
    std::fs::create_dir_all(&mp).unwrap();
    let _tmpfs = Tmpfs::mount(&fsdir, "size=8m,nr_inodes=64");
    let local = fsdir.join("local");
    let args: Vec<&std::ffi::OsStr> = vec![
        "mount".as_ref(), mp.as_os_str(), "--store".as_ref(), store.as_os_str(), "--local-dir".as_ref(), local.as_os_str(),
        "--ignore".as_ref(), "/*".as_ref(), "--native-roots".as_ref(), "off".as_ref(), "--daemon".as_ref(),
    ];
    let o = ringfs_ok(&args);
    assert!(o.status.success(), "mount: {}", out_str(&o).1);
    let cleanup = scopeguard(&mp);
    std::fs::create_dir(mp.join("d")).unwrap();
    let mut made = std::collections::BTreeSet::new();
    let mut failed = 0;
    for i in 0..200 {
        match std::fs::write(mp.join(format!("d/f{i}")), format!("content {i}")) {
            Ok(()) => {
                made.insert(format!("f{i}"));
            }
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "f{i}: {e}");
                failed += 1;
            }
        }
    }
    assert!(failed > 0 && !made.is_empty(), "made {} failed {failed}", made.len());
    // mknod(2) of a regular file fails the same way (it used to succeed and
    // leave a name that no open could use).
    let nod = mp.join("d/nod");
    let r = unsafe { libc::mknod(cstr(&nod).as_ptr(), libc::S_IFREG | 0o644, 0) };
    assert_eq!((r, if r < 0 { errno() } else { 0 }), (-1, libc::ENOSPC), "mknod on a full --local-dir");
    assert!(!nod.exists());
    let names: std::collections::BTreeSet<String> =
        std::fs::read_dir(mp.join("d")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, made, "names left by failed creates");
    for n in &made {
        assert_eq!(std::fs::read_to_string(mp.join("d").join(n)).unwrap(), format!("content {}", &n[1..]));
    }
    let o = run_timeout(Command::new(RINGFS).arg("umount").arg(&mp), Duration::from_secs(60));
    assert!(o.status.success(), "umount: {}", out_str(&o).1);
    drop(cleanup);
    let o = ringfs_ok(&["fsck".as_ref(), "--store".as_ref(), store.as_os_str()]);
    assert!(o.status.success(), "fsck: {}", out_str(&o).0);
    // No pooled or orphaned files left in the local directory.
    let numbered = std::fs::read_dir(&local).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().parse::<u64>().is_ok()).count();
    assert_eq!(numbered, made.len());
}

/// Local-only files made after the last commit lose their names in a
/// kill -9; with `--local-dir` on another filesystem than the store their
/// bytes are copied into STORE/lost+found (a rename cannot cross), never
/// deleted.
#[test]
fn crash_keeps_unnamed_local_bytes_across_filesystems() {
    if raw_mode() {
        return;
    }
    let base = tempfile::Builder::new().prefix("ringfs-lost-").tempdir().unwrap();
    let fsdir = base.path().join("fs");
    let _tmpfs = Tmpfs::mount(&fsdir, "size=16m");
    let local = fsdir.join("local");
    let mut m = TestMount::builder(Backend::Store)
        .args(["--local-dir", local.to_str().unwrap(), "--ignore", "node_modules", "--native-roots", "off", "--commit-interval-ms", "60000"])
        .name("lost-local")
        .mount();
    m.sh_ok("mkdir node_modules && echo first > node_modules/committed && sync node_modules/committed\n\
             for i in 1 2 3; do echo \"precious $i\" > node_modules/new$i; done");
    m.kill_daemon();
    m.mount_again();
    assert_eq!(std::fs::read_to_string(m.p("node_modules/committed")).unwrap(), "first\n");
    let lost = m.store_dir().join("lost+found");
    let mut kept: Vec<String> = std::fs::read_dir(&lost)
        .map(|d| d.map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect())
        .unwrap_or_default();
    kept.sort();
    assert_eq!(kept, ["precious 1\n", "precious 2\n", "precious 3\n"], "bytes of the unnamed local-only files");
}

/// Crash after crash: inode numbers of files lost in one crash are given out
/// again, but STORE/lost+found never replaces what an earlier crash put there.
#[test]
fn repeated_crashes_keep_every_lost_file() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::builder(Backend::Store)
        .args(["--ignore", "node_modules", "--native-roots", "off", "--commit-interval-ms", "60000"])
        .name("lost-repeat")
        .mount();
    m.sh_ok("mkdir node_modules && echo keep > k && sync k");
    for r in 1..=3 {
        m.sh_ok(&format!("echo synced-round{r} > s{r}; echo local-round{r} > node_modules/x{r}"));
        m.kill_daemon();
        m.mount_again();
    }
    let lost = m.store_dir().join("lost+found");
    let mut kept: Vec<String> = std::fs::read_dir(&lost).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
    kept.sort();
    let mut want: Vec<String> = (1..=3).flat_map(|r| [format!("local-round{r}\n"), format!("synced-round{r}\n")]).collect();
    want.sort();
    assert_eq!(kept, want);
}

/// The disk filled up under a command (issue 41): a commit (the changed
/// files cannot be stored), a fork and a lazy clone into that disk, and
/// `remote add` (the remote's disk, or the store's for its record) each
/// fail with the line "the disk holding PATH is full" and what to free,
/// leaving nothing half-made (no new store or build directory, no remote
/// marker or record); once space is freed the commit goes through and
/// fsck is clean.
#[test]
fn full_disk_is_named_by_commit_fork_clone_and_remote_add() {
    if raw_mode() {
        return;
    }
    use std::io::Write;
    let (base, _tmpfs, fsdir, mp, store) = mounted_on_64m_tmpfs("600000");
    let cleanup = scopeguard(&mp);
    let base = base.path().to_path_buf();
    let run = |args: &[&str]| ringfs_ok(&args.iter().map(|a| a.as_ref()).collect::<Vec<&std::ffi::OsStr>>());
    let s = |p: &Path| p.to_str().unwrap().to_string();
    std::fs::write(mp.join("first"), b"first").unwrap();
    let o = run(&["commit", &s(&mp)]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    // A remote (on another disk) to clone from.
    let origin = base.join("origin");
    let (m, u) = (s(&mp), format!("file://{}", origin.display()));
    for args in [vec!["remote", "add", m.as_str(), "o", u.as_str()], vec!["push", m.as_str()]] {
        let o = run(&args);
        assert!(o.status.success(), "{args:?}: {:?}", out_str(&o));
    }
    // A file held open for writing (not hashed until the commit), then the disk filled.
    let mut f = std::fs::File::create(mp.join("big")).unwrap();
    f.write_all(&(0..3_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect::<Vec<u8>>()).unwrap();
    let filler = fsdir.join("filler");
    // (Again before each command: whatever a failed one gave back is taken.)
    let fill = || {
        let _ = Command::new("dd").args(["if=/dev/zero", "bs=4k", "status=none", "oflag=append", "conv=notrunc"]).arg(format!("of={}", filler.display())).stderr(std::process::Stdio::null()).status();
    };
    let full = |o: &std::process::Output, path: &Path| {
        let err = out_str(o).1;
        assert!(!o.status.success(), "{:?}", out_str(o));
        assert!(err.contains(&format!("the disk holding {} is full", path.display())) && err.contains("free space"), "{err}");
    };
    fill();
    full(&run(&["commit", &s(&mp)]), &store);
    let fork = fsdir.join("fork");
    fill();
    full(&run(&["fork", &s(&mp), "--new-store", &s(&fork), "--no-mount"]), &fsdir);
    let clone = fsdir.join("clone");
    fill();
    full(&run(&["clone", &format!("file://{}", origin.display()), "--store", &s(&clone)]), &fsdir);
    // The remote's disk full; then the store's, for the remote's record.
    let r_full = fsdir.join("remote");
    fill();
    full(&run(&["remote", "add", &s(&mp), "r1", &format!("file://{}", r_full.display())]), &r_full);
    let r_ok = base.join("remote");
    fill();
    full(&run(&["remote", "add", &s(&mp), "r2", &format!("file://{}", r_ok.display())]), &store);
    let names: Vec<String> = std::fs::read_dir(&fsdir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.iter().all(|n| n == "store" || n == "filler"), "left on the full disk: {names:?}");
    assert!(!r_ok.exists(), "the remote set up for a remote add that failed");
    let remotes: Vec<_> = std::fs::read_dir(store.join("remotes")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(remotes, ["o"]);
    // Space back: the commit takes the file in.
    std::fs::remove_file(&filler).unwrap();
    drop(f);
    let o = run(&["commit", &s(&mp)]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    umount_then_fsck(&mp, &store);
    drop(cleanup);
}
