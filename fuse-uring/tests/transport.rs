//! Transport selection, start-up failure handling, the slow-request pool and
//! teardown (umount, `unmount()`, kill -9), on both transports where it
//! applies. Needs root, /dev/fuse and, for io_uring,
//! `/sys/module/fuse/parameters/enable_uring` = Y.

mod support;

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use fuse_uring::ring::RingFault;
use fuse_uring::*;
use support::*;

fn opts(t: Transport) -> MountOptions {
    MountOptions { transport: t, ..Default::default() }
}

fn mounted_here(mnt: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let m = mnt.to_str().unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(m))
}

/// Runs `f` on a thread; None if it does not finish within `limit` (the
/// thread is left behind: the caller must then unblock it, e.g. by aborting).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

fn pin_to(cpu: usize) {
    // SAFETY: zeroed cpu_set_t is empty; cpu is small.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[test]
fn transport_info_reports_what_is_used() {
    let m = Mounted::new(opts(Transport::Uring));
    let t = &m.transport;
    assert_eq!((t.kind, t.requested, t.reason.as_deref()), (TransportKind::IoUring, Transport::Uring, None));
    assert_eq!(t.queues, fuse_uring::possible_cpus().unwrap());
    assert_eq!(t.depth, 4);
    assert!(t.payload_size >= m.info.max_write as usize && t.payload_size >= 8192, "{t:?}");
    assert_eq!(t.kind.as_str(), "io_uring");
    assert!(t.to_string().starts_with("io_uring ("), "{t}");
    assert_ne!(m.info.flags & fuse_uring::abi::FUSE_OVER_IO_URING, 0);
    std::fs::write(m.path("f"), b"x").unwrap();
    assert!(m.stats.get(fuse_uring::abi::FUSE_STATFS) == 0, "the start-up probe is not counted");
    m.finish().unwrap();

    let m = Mounted::new(MountOptions { queue_depth: 2, ..opts(Transport::Auto) });
    assert_eq!((m.transport.kind, m.transport.depth), (TransportKind::IoUring, 2), "Auto picks io_uring here");
    m.finish().unwrap();

    let m = Mounted::new(opts(Transport::Dev));
    let t = &m.transport;
    assert_eq!((t.kind, t.queues, t.depth, t.reason.as_deref()), (TransportKind::DevFuse, 0, 0, None));
    assert_eq!(m.info.flags & fuse_uring::abi::FUSE_OVER_IO_URING, 0);
    assert_eq!(t.to_string(), "/dev/fuse");
    m.finish().unwrap();
}

/// A ring that fails to start: Auto remounts on /dev/fuse (and says why),
/// Uring returns an error and leaves no mount behind.
fn failed_start(fault: RingFault, reason_has: &str) {
    let o = MountOptions { ring_fault: fault, ring_start_timeout: Duration::from_secs(1), ..opts(Transport::Auto) };
    let m = Mounted::new(o.clone());
    assert_eq!(m.transport.kind, TransportKind::DevFuse, "{:?}", m.transport);
    let reason = m.transport.reason.clone().unwrap();
    assert!(reason.contains(reason_has) && reason.contains("remounted on /dev/fuse"), "{reason}");
    std::fs::write(m.path("works"), b"on /dev/fuse").unwrap();
    assert_eq!(std::fs::read(m.path("works")).unwrap(), b"on /dev/fuse");
    m.finish().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let started = Instant::now();
    let err = mount(&mnt, &MountOptions { transport: Transport::Uring, ..o }).expect_err("Uring must fail");
    assert!(err.to_string().contains("failed to start") && err.to_string().contains(reason_has), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!mounted_here(&mnt), "nothing left mounted");
    // The mount point is usable (not a dead FUSE mount).
    assert!(std::fs::metadata(&mnt).unwrap().is_dir());
}

#[test]
fn register_error_falls_back_or_fails_cleanly() {
    failed_start(RingFault::SmallPayload, "REGISTER failed");
}

#[test]
fn ring_that_never_gets_ready_is_aborted() {
    failed_start(RingFault::SkipLastQueue, "no answer through the ring");
}

/// A held FSYNC does not keep other requests from CPU 0 waiting: io_uring
/// hands it to the pool; /dev/fuse, served by one reader (`workers` 1), too.
fn slow_request_does_not_stall(t: Transport, workers: usize) {
    let fs = MemFs::with_ttl(Duration::ZERO);
    *fs.hold_fsync.lock().unwrap() = true;
    let m = Mounted::with_workers(opts(t), fs, workers);
    std::fs::write(m.path("f"), b"data").unwrap();
    let (p, fs) = (m.path("f"), m.fs.clone());
    // FSYNC from CPU 0 blocks in the filesystem...
    let syncer = std::thread::spawn(move || {
        pin_to(0);
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.sync_all()
    });
    let t0 = Instant::now();
    while m.stats.get(fuse_uring::abi::FUSE_FSYNC) == 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(m.stats.get(fuse_uring::abi::FUSE_FSYNC), 1, "fsync reached the daemon");
    // ...while other requests from the same CPU are still answered.
    let p = m.path("f");
    let r = within(Duration::from_secs(10), move || {
        pin_to(0);
        (0..50).map(|_| std::fs::metadata(&p).map(|md| md.len())).collect::<io::Result<Vec<_>>>()
    });
    // Release the fsync whatever happened, so nothing stays blocked.
    *fs.hold_fsync.lock().unwrap() = false;
    fs.fsync_cv.notify_all();
    let lens = r.expect("GETATTR on CPU 0 stalled behind a slow FSYNC").unwrap();
    assert!(lens.iter().all(|&l| l == 4));
    syncer.join().unwrap().unwrap();
    assert_eq!(fs.fsyncs.load(Ordering::SeqCst), 1);
    m.finish().unwrap();
}

#[test]
fn slow_request_does_not_stall_its_queue() {
    slow_request_does_not_stall(Transport::Uring, 2);
}

#[test]
fn slow_request_does_not_stall_the_dev_reader() {
    slow_request_does_not_stall(Transport::Dev, 1);
}

fn parallel_clients(t: Transport) {
    let m = Mounted::new(MountOptions { max_write: 128 * 1024, ..opts(t) });
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let dir = m.path(&format!("d{k}"));
            std::thread::spawn(move || {
                std::fs::create_dir(&dir).unwrap();
                for i in 0..100 {
                    let p = dir.join(format!("f{i}"));
                    let data: Vec<u8> = (0..(i * 997 + k * 131) % 300_000).map(|b| (b % 251) as u8).collect();
                    std::fs::write(&p, &data).unwrap();
                    assert_eq!(std::fs::read(&p).unwrap(), data);
                    std::fs::remove_file(&p).unwrap();
                }
                std::fs::remove_dir(&dir).unwrap();
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert!(names(&m.mnt).is_empty());
    m.finish().unwrap();
}

#[test]
fn parallel_clients_dev() {
    parallel_clients(Transport::Dev);
}

#[test]
fn parallel_clients_uring() {
    parallel_clients(Transport::Uring);
}

/// Teardown 1: `umount` (the command) while the session runs; `run` returns
/// Ok (on io_uring every entry completed with ENOTCONN) and destroy ran.
fn umount_command(t: Transport) {
    let m = Mounted::new(opts(t));
    std::fs::write(m.path("f"), b"x").unwrap();
    let st = Command::new("umount").arg(&m.mnt).status().unwrap();
    assert!(st.success());
    let mut m = m;
    let thread = m.thread.take().unwrap();
    let r = within(Duration::from_secs(10), move || thread.join().unwrap());
    assert!(r.expect("run() did not return after umount").is_ok());
    assert!(m.fs.destroyed.load(Ordering::SeqCst));
    assert!(!mounted_here(&m.mnt));
}

#[test]
fn umount_command_dev() {
    umount_command(Transport::Dev);
}

#[test]
fn umount_command_uring() {
    umount_command(Transport::Uring);
}

/// Teardown 2: the daemon's own stop (what `ringfs` does on SIGTERM:
/// `Unmounter::unmount`) while clients keep issuing requests.
fn unmount_under_load(t: Transport) {
    let mut m = Mounted::with_fs(opts(t), MemFs::with_ttl(Duration::ZERO));
    std::fs::write(m.path("f"), b"x").unwrap();
    let p = m.path("f");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (p, stop) = (p.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && std::fs::metadata(&p).is_ok() {
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    unmount(&m.mnt).unwrap();
    let thread = m.thread.take().unwrap();
    let r = within(Duration::from_secs(10), move || thread.join().unwrap());
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        assert!(c.join().unwrap() > 0);
    }
    assert!(r.expect("run() did not return after unmount").is_ok());
    assert!(m.fs.destroyed.load(Ordering::SeqCst));
    assert!(!mounted_here(&m.mnt));
}

#[test]
fn unmount_under_load_dev() {
    unmount_under_load(Transport::Dev);
}

#[test]
fn unmount_under_load_uring() {
    unmount_under_load(Transport::Uring);
}

const CHILD_ENV: &str = "FUSE_URING_TEST_CHILD";

/// Not a test on its own: the daemon process of the kill -9 tests (runs
/// only when `FUSE_URING_TEST_CHILD=<mountpoint>,<transport>` is set).
#[test]
fn child_daemon_for_kill_tests() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (mnt, t) = spec.split_once(',').unwrap();
    let session = mount(Path::new(mnt), &opts(t.parse().unwrap())).unwrap();
    println!("READY {}", session.transport_info().kind);
    io::stdout().flush().unwrap();
    let _ = session.run(Arc::new(MemFs::new()), 2);
    std::process::exit(0);
}

/// Teardown 3: kill -9 of the daemon. Accesses then fail (ENOTCONN) instead
/// of hanging, and `umount` succeeds.
fn kill9(t: Transport) {
    let dir = tempfile::tempdir().unwrap();
    let mnt: PathBuf = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_daemon_for_kill_tests", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{},{}", mnt.display(), t))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let ready = loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            break None;
        }
        // libtest prints "test <name> ... " before the test's own output.
        if let Some((_, kind)) = line.trim().split_once("READY ") {
            break Some(kind.to_string());
        }
    };
    let cleanup = |mnt: &Path| {
        let _ = fuse_uring::transport::abort_connection(mnt);
        let _ = Command::new("umount").arg("-l").arg(mnt).status();
    };
    let Some(kind) = ready else {
        let _ = child.kill();
        let _ = child.wait();
        cleanup(&mnt);
        panic!("child daemon did not start");
    };
    let want = if t == Transport::Uring { "io_uring" } else { "/dev/fuse" };
    assert_eq!(kind, want);
    std::fs::write(mnt.join("f"), b"served by the child").unwrap();
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"served by the child");
    // An open file keeps the kernel's view busy across the kill.
    let mut f = std::fs::File::open(mnt.join("f")).unwrap();

    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    let t0 = Instant::now();
    let exited = loop {
        if child.try_wait().unwrap().is_some() {
            break true;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if !exited {
        cleanup(&mnt);
        let _ = child.wait();
        panic!("the killed daemon did not exit");
    }
    // No hang: requests fail with ENOTCONN.
    let mut buf = [0u8; 4];
    let read = within(Duration::from_secs(5), move || f.read(&mut buf).map_err(|e| e.raw_os_error()));
    let m2 = mnt.clone();
    let stat = within(Duration::from_secs(5), move || std::fs::metadata(m2.join("f")).map_err(|e| e.raw_os_error()).map(|m| m.ino()));
    if read.is_none() || stat.is_none() {
        cleanup(&mnt);
        panic!("access to the dead mount hung (read {read:?}, stat {stat:?})");
    }
    assert_eq!(stat.unwrap(), Err(Some(libc::ENOTCONN)));
    assert!(read.unwrap().is_err());
    let st = Command::new("umount").arg(&mnt).status().unwrap();
    if !st.success() {
        cleanup(&mnt);
        panic!("umount after kill -9 failed");
    }
    assert!(!mounted_here(&mnt));
}

#[test]
fn kill9_dev() {
    kill9(Transport::Dev);
}

#[test]
fn kill9_uring() {
    kill9(Transport::Uring);
}

/// A session dropped without `run` (e.g. the daemon failed after mounting)
/// aborts its connection: callers get ENOTCONN instead of hanging.
fn dropped_unserved(t: Transport) {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let session = mount(&mnt, &opts(t)).unwrap();
    drop(session);
    let m2 = mnt.clone();
    let r = within(Duration::from_secs(5), move || std::fs::metadata(&m2).map_err(|e| e.raw_os_error()).map(drop));
    let ok = r.is_some();
    if !ok {
        let _ = fuse_uring::transport::abort_connection(&mnt);
    }
    let st = Command::new("umount").arg(&mnt).status().unwrap();
    assert!(ok, "stat on an unserved, dropped session hung");
    assert_eq!(r.unwrap(), Err(Some(libc::ENOTCONN)));
    assert!(st.success());
}

#[test]
fn dropped_unserved_dev() {
    dropped_unserved(Transport::Dev);
}

#[test]
fn dropped_unserved_uring() {
    dropped_unserved(Transport::Uring);
}

/// FORGET (and BATCH_FORGET) never come through the ring: the `/dev/fuse`
/// reader kept beside the rings receives them; notifications go out on
/// `/dev/fuse` too.
#[test]
fn forgets_and_notifications_use_dev_fuse_beside_the_ring() {
    use fuse_uring::abi::{FUSE_BATCH_FORGET, FUSE_FORGET, FUSE_ROOT_ID};
    use std::ffi::OsStr;
    let m = Mounted::new(opts(Transport::Uring));
    let mut inos = Vec::new();
    for i in 0..20 {
        let name = format!("f{i}");
        std::fs::write(m.path(&name), b"x").unwrap();
        inos.push((name.clone(), std::fs::metadata(m.path(&name)).unwrap().ino()));
    }
    // Remove behind the kernel's back and announce it: the dentries go, the
    // unused inodes are evicted, and the kernel sends FORGETs.
    let ctx = RequestCtx { unique: 0, uid: 0, gid: 0, pid: 0 };
    for (name, ino) in &inos {
        m.fs.unlink(&ctx, FUSE_ROOT_ID, OsStr::new(name)).unwrap();
        m.notifier.delete(FUSE_ROOT_ID, *ino, OsStr::new(name)).unwrap();
    }
    let t0 = Instant::now();
    let forgets = || m.stats.get(FUSE_FORGET) + m.stats.get(FUSE_BATCH_FORGET);
    while forgets() == 0 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(forgets() >= 1, "{:?}", m.stats.snapshot());
    assert!(names(&m.mnt).is_empty());
    m.finish().unwrap();
}

/// FUSE mounts stacked at `mnt` in this mount namespace (fstype `fuse*`).
fn fuse_mounts_at(mnt: &Path) -> usize {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let m = mnt.to_str().unwrap();
    info.lines()
        .filter(|l| l.split(' ').nth(4) == Some(m))
        .filter(|l| l.split(" - ").nth(1).is_some_and(|t| t.starts_with("fuse")))
        .count()
}

/// Something mounted over the mount point while the ring starts (another
/// mount on the same path): the probe must still reach *this* connection,
/// and a fallback must abort *this* connection and not detach the other
/// mount. Regression: the probe statfs'ed the path (answered by the other
/// filesystem: "only 0 of 2 probe requests came through the ring") and the
/// fallback detached the other mount, leaving the aborted first mount under
/// the new one ("still mounted after the daemon stopped").
/// Returns (transport, FUSE mounts left at the path after unmount, tmpfs left).
fn overmounted_start(fault: RingFault) -> (TransportInfo, usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let o = MountOptions { ring_fault: fault, ring_start_timeout: Duration::from_secs(2), ..opts(Transport::Auto) };
    let session = within(Duration::from_secs(30), {
        let mnt = mnt.clone();
        move || mount(&mnt, &o)
    })
    .expect("mount must not hang")
    .expect("mount");
    let transport = session.transport_info();
    let t = std::thread::spawn(move || session.run(Arc::new(MemFs::new()), 2));
    // The fault hook left a tmpfs on top of our mount; remove it (only it).
    let c = std::ffi::CString::new(mnt.to_str().unwrap()).unwrap();
    let on_top = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some(mnt.to_str().unwrap()))
        .is_some_and(|l| l.contains(" - tmpfs "));
    // With the fallback, /dev/fuse was mounted over the tmpfs.
    if on_top {
        // SAFETY: plain umount2 of a path we mounted.
        assert_eq!(unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) }, 0);
    }
    std::fs::write(mnt.join("f"), b"served").unwrap();
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"served");
    unmount(&mnt).unwrap();
    let r = within(Duration::from_secs(20), move || t.join().unwrap()).expect("run() must end after unmount");
    r.unwrap();
    // Whatever is left at the path (the tmpfs below the /dev/fuse remount).
    let fuse_left = fuse_mounts_at(&mnt);
    let tmpfs_left = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(mnt.to_str().unwrap()) && l.contains(" - tmpfs "))
        .count();
    let m = mnt.clone();
    within(Duration::from_secs(20), move || {
        while std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().any(|l| l.split(' ').nth(4) == Some(m.to_str().unwrap())) {
            // SAFETY: as above; only mounts on our own temp dir.
            if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
                break;
            }
        }
    })
    .expect("removing what is left (an aborted mount) must not hang");
    (transport, fuse_left, tmpfs_left)
}

#[test]
fn probe_reaches_this_connection_when_the_path_is_overmounted() {
    let (t, left, _) = overmounted_start(RingFault::OvermountBeforeProbe);
    assert_eq!(t.kind, TransportKind::IoUring, "the probe must go to our connection, not the path: {t}");
    assert_eq!(left, 0, "nothing of ours left mounted");
}

#[test]
fn fallback_detaches_this_mount_when_the_path_is_overmounted() {
    let (t, fuse_left, tmpfs_left) = overmounted_start(RingFault::OvermountAndSkipLastQueue);
    assert_eq!(t.kind, TransportKind::DevFuse, "{t}");
    assert!(t.reason.as_deref().unwrap_or("").contains("no answer through the ring"), "{t}");
    assert_eq!(tmpfs_left, 1, "the fallback must not detach someone else's mount on top of ours");
    assert_eq!(fuse_left, 1, "our aborted io_uring mount stays under it (dead, not hung) until removed");
}

/// A forced fallback (ring never ready) followed by unmount: run() ends and
/// neither the /dev/fuse mount nor the aborted io_uring mount is left.
#[test]
fn forced_fallback_then_unmount_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let o = MountOptions { ring_fault: RingFault::SkipLastQueue, ring_start_timeout: Duration::from_secs(1), ..opts(Transport::Auto) };
    let session = mount(&mnt, &o).unwrap();
    assert_eq!(session.transport_info().kind, TransportKind::DevFuse);
    assert_eq!(fuse_mounts_at(&mnt), 1, "only the /dev/fuse remount is mounted");
    let t = std::thread::spawn(move || session.run(Arc::new(MemFs::new()), 2));
    std::fs::write(mnt.join("f"), b"x").unwrap();
    unmount(&mnt).unwrap();
    within(Duration::from_secs(20), move || t.join().unwrap()).expect("run() must end after unmount").unwrap();
    assert_eq!(fuse_mounts_at(&mnt), 0, "neither the remount nor the aborted io_uring mount is left");
}

/// Several mounts started at once on a loaded machine all get io_uring,
/// serve, and end on unmount with nothing left mounted.
#[test]
fn parallel_mounts_under_load_all_get_io_uring_and_unmount() {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let burners: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            })
        })
        .collect();
    let n = 8;
    let starts: Vec<_> = (0..n)
        .map(|i| {
            std::thread::spawn(move || {
                let m = Mounted::new(opts(Transport::Auto));
                std::fs::write(m.path("f"), format!("mount {i}")).unwrap();
                assert_eq!(std::fs::read_to_string(m.path("f")).unwrap(), format!("mount {i}"));
                let (t, mnt) = (m.transport.clone(), m.mnt.clone());
                let r = within(Duration::from_secs(30), move || m.finish()).expect("run() must end after unmount");
                (t, mnt, r)
            })
        })
        .collect();
    let results: Vec<_> = starts.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    for b in burners {
        b.join().unwrap();
    }
    for (t, mnt, r) in results {
        assert_eq!(t.kind, TransportKind::IoUring, "{t}");
        r.unwrap();
        assert!(!mounted_here(&mnt), "{} still mounted", mnt.display());
    }
}
