//! End-to-end tests through a real FUSE mount (needs root and /dev/fuse):
//! a tiny in-memory filesystem mounted on a temp dir, driven with std::fs.
//! Every test runs on both transports (`<name>::dev`, `<name>::uring`); the
//! io_uring runs need `/sys/module/fuse/parameters/enable_uring` = Y.

mod support;

use std::ffi::{CString, OsStr};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::sync::atomic::Ordering;

use fuse_uring::abi::*;
use fuse_uring::*;
use support::*;

/// Runs test function `$name(transport)` as `$name::dev` and `$name::uring`.
macro_rules! both_transports {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn dev() {
                super::$name(fuse_uring::Transport::Dev)
            }
            #[test]
            fn uring() {
                super::$name(fuse_uring::Transport::Uring)
            }
        }
    )*};
}

both_transports!(
    file_and_directory_operations,
    readdirplus_lists_large_directories,
    plain_readdir_when_readdirplus_is_off,
    notifier_invalidates_cached_entries,
    passthrough_negotiation_and_backing_ids,
);

// ---- tests ----------------------------------------------------------------------------------

fn file_and_directory_operations(t: Transport) {
    let m = Mounted::new(MountOptions { transport: t, ..Default::default() });
    assert_eq!(m.info.proto_minor, FUSE_KERNEL_MINOR_VERSION.min(m.info.proto_minor));
    assert!(m.info.flags & FUSE_WRITEBACK_CACHE == 0 && m.info.flags & FUSE_POSIX_LOCKS == 0);
    assert!(!m.info.passthrough);

    // stat of the root and statfs
    let md = std::fs::metadata(&m.mnt).unwrap();
    assert!(md.is_dir());
    assert_eq!(md.ino(), 1);
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    let c = CString::new(m.mnt.as_os_str().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut sfs) }, 0);
    assert_eq!((sfs.f_blocks, sfs.f_bsize), (1000, 4096));

    // create, write, read back, stat size
    let mut f = std::fs::File::create(m.path("hello.txt")).unwrap();
    f.write_all(b"hello, fuse").unwrap();
    drop(f);
    assert_eq!(std::fs::read(m.path("hello.txt")).unwrap(), b"hello, fuse");
    assert_eq!(std::fs::metadata(m.path("hello.txt")).unwrap().len(), 11);
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(m.path("hello.txt")).unwrap();
    f.seek(SeekFrom::Start(7)).unwrap();
    f.write_all(b"FUSE!").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello, FUSE!");
    f.set_len(5).unwrap(); // SETATTR with FATTR_SIZE (+ FATTR_FH)
    drop(f);
    assert_eq!(std::fs::read(m.path("hello.txt")).unwrap(), b"hello");

    // a large write goes through in max_write chunks
    let big: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(m.path("big"), &big).unwrap();
    assert_eq!(std::fs::read(m.path("big")).unwrap(), big);

    // mkdir, rename into it, ls
    std::fs::create_dir(m.path("d")).unwrap();
    assert!(std::fs::metadata(m.path("d")).unwrap().file_type().is_dir());
    std::fs::rename(m.path("hello.txt"), m.path("d/renamed.txt")).unwrap();
    assert_eq!(names(&m.mnt), ["big", "d"]);
    assert_eq!(names(&m.path("d")), ["renamed.txt"]);
    assert_eq!(std::fs::read(m.path("d/renamed.txt")).unwrap(), b"hello");
    assert!(!std::fs::metadata(m.path("d/renamed.txt")).unwrap().file_type().is_fifo());

    // negative lookup: ENOENT, then served from the kernel's negative dentry cache
    assert_eq!(errno(std::fs::metadata(m.path("nope"))), libc::ENOENT);
    let lookups = m.stats.get(FUSE_LOOKUP);
    assert_eq!(errno(std::fs::metadata(m.path("nope"))), libc::ENOENT);
    assert_eq!(m.stats.get(FUSE_LOOKUP), lookups, "negative entry was cached");
    std::fs::write(m.path("nope"), b"now it exists").unwrap();
    assert_eq!(std::fs::read(m.path("nope")).unwrap(), b"now it exists");

    // unlink, rmdir
    assert_eq!(errno(std::fs::remove_dir(m.path("d"))), libc::ENOTEMPTY);
    std::fs::remove_file(m.path("d/renamed.txt")).unwrap();
    std::fs::remove_dir(m.path("d")).unwrap();
    std::fs::remove_file(m.path("nope")).unwrap();
    assert_eq!(names(&m.mnt), ["big"]);

    // xattrs are not implemented by MemFs: ENOSYS, which the kernel reports as EOPNOTSUPP
    let p = CString::new(m.path("big").as_os_str().as_bytes()).unwrap();
    let mut buf = [0u8; 64];
    let r = unsafe { libc::getxattr(p.as_ptr(), c"user.x".as_ptr(), buf.as_mut_ptr() as *mut _, buf.len()) };
    assert_eq!((r, io::Error::last_os_error().raw_os_error()), (-1, Some(libc::EOPNOTSUPP)));
    let r = unsafe { libc::setxattr(p.as_ptr(), c"user.x".as_ptr(), b"v".as_ptr() as *const _, 1, 0) };
    assert_eq!((r, io::Error::last_os_error().raw_os_error()), (-1, Some(libc::EOPNOTSUPP)));
    assert!(m.stats.get(FUSE_GETXATTR) >= 1 && m.stats.get(FUSE_SETXATTR) >= 1);

    // an op the session does not serve (IOCTL) is answered ENOSYS: the caller gets an error
    let f = std::fs::File::open(m.path("big")).unwrap();
    let r = unsafe { libc::ioctl(f.as_raw_fd(), 0x8004_5201u32 as _, buf.as_mut_ptr()) };
    assert_eq!(r, -1);
    drop(f);
    assert!(m.stats.get(FUSE_IOCTL) >= 1, "IOCTL reached the daemon");

    // counters
    let snap = m.stats.snapshot();
    let count = |name: &str| snap.iter().find(|c| c.name == name).map_or(0, |c| c.count);
    for op in ["LOOKUP", "CREATE", "WRITE", "READ", "MKDIR", "RENAME", "UNLINK", "RMDIR", "READDIRPLUS", "STATFS"] {
        assert!(count(op) >= 1, "{op} counted: {snap:?}");
    }
    assert_eq!(count("INIT"), 0, "INIT is answered before the counters start");

    let fs = m.fs.clone();
    m.finish().expect("run() ends cleanly after unmount");
    assert!(fs.destroyed.load(Ordering::SeqCst), "destroy() called when the session ended");
}

fn make_files(m: &Mounted, n: usize) -> Vec<String> {
    let mut expected: Vec<String> = (0..n).map(|i| format!("file-with-a-longish-name-{i:04}")).collect();
    for name in &expected {
        std::fs::File::create(m.path(name)).unwrap();
    }
    expected.sort();
    expected
}

fn readdirplus_lists_large_directories(t: Transport) {
    let m = Mounted::new(MountOptions { transport: t, ..Default::default() });
    assert!(m.info.flags & FUSE_DO_READDIRPLUS != 0);
    let expected = make_files(&m, 300);
    assert_eq!(names(&m.mnt), expected);
    // 300 × 200-byte direntplus records do not fit in one 4 KiB reply. With
    // READDIRPLUS_AUTO the kernel asks READDIRPLUS first and, once it has the
    // entries cached, continues with plain READDIR.
    assert!(m.stats.get(FUSE_READDIRPLUS) >= 1, "{:?}", m.stats.snapshot());
    assert!(m.stats.get(FUSE_READDIRPLUS) + m.stats.get(FUSE_READDIR) >= 2, "{:?}", m.stats.snapshot());
    // attributes came with the listing
    let md = std::fs::metadata(m.path(&expected[7])).unwrap();
    assert!(md.is_file());
    m.finish().unwrap();
}

fn plain_readdir_when_readdirplus_is_off(t: Transport) {
    let m = Mounted::new(MountOptions { transport: t, readdirplus: false, fsname: "ringfs-test".into(), ..Default::default() });
    assert!(m.info.flags & FUSE_DO_READDIRPLUS == 0);
    let expected = make_files(&m, 300);
    assert_eq!(names(&m.mnt), expected);
    assert!(m.stats.get(FUSE_READDIR) >= 2, "{:?}", m.stats.snapshot());
    assert_eq!(m.stats.get(FUSE_READDIRPLUS), 0);
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts.lines().find(|l| l.contains(m.mnt.to_str().unwrap())).expect("listed in /proc/self/mounts");
    assert!(line.starts_with("ringfs-test ") && line.contains(" fuse.ringfs "), "{line}");
    m.finish().unwrap();
}

fn notifier_invalidates_cached_entries(t: Transport) {
    let m = Mounted::new(MountOptions { transport: t, ..Default::default() });
    // "x" is cached as a negative entry for 10 s...
    assert_eq!(errno(std::fs::metadata(m.path("x"))), libc::ENOENT);
    // ...so a file created behind the kernel's back is invisible...
    let ctx = RequestCtx { unique: 0, uid: 0, gid: 0, pid: 0 };
    m.fs.create(&ctx, FUSE_ROOT_ID, OsStr::new("x"), libc::S_IFREG | 0o644, 0, 0).unwrap();
    assert_eq!(errno(std::fs::metadata(m.path("x"))), libc::ENOENT);
    // ...until the daemon invalidates it.
    m.notifier.inval_entry(FUSE_ROOT_ID, OsStr::new("x")).unwrap();
    let ino = std::fs::metadata(m.path("x")).unwrap().ino();
    // removed behind the kernel's back, then announced with NOTIFY_DELETE
    m.fs.unlink(&ctx, FUSE_ROOT_ID, OsStr::new("x")).unwrap();
    m.notifier.delete(FUSE_ROOT_ID, ino, OsStr::new("x")).unwrap();
    assert_eq!(errno(std::fs::metadata(m.path("x"))), libc::ENOENT);
    // invalidating what the kernel does not cache is fine
    m.notifier.inval_inode(123_456, 0, 0).unwrap();
    m.notifier.inval_entry(FUSE_ROOT_ID, OsStr::new("never-looked-up")).unwrap();
    m.notifier.inval_inode(FUSE_ROOT_ID, -1, 0).unwrap();
    m.finish().unwrap();
}

fn passthrough_negotiation_and_backing_ids(t: Transport) {
    let m = Mounted::new(MountOptions { transport: t, passthrough: true, ..Default::default() });
    assert!(m.info.passthrough, "kernel 6.18 offers FUSE_PASSTHROUGH");
    assert_eq!(m.info.flags & FUSE_WRITEBACK_CACHE, 0);
    std::fs::write(m.path("pt"), b"through the daemon").unwrap();
    let ino = std::fs::metadata(m.path("pt")).unwrap().ino();

    let host = m._dir.path().join("backing");
    std::fs::write(&host, b"THROUGH THE BACKING").unwrap();
    let backing = std::fs::OpenOptions::new().read(true).write(true).open(&host).unwrap();
    let id = backing_open(&m.dev, &backing).expect("BACKING_OPEN");
    assert!(id > 0);
    m.fs.backing.lock().unwrap().insert(ino, id);
    let reads = m.stats.get(FUSE_READ);
    let mut f = std::fs::File::open(m.path("pt")).unwrap();
    let mut buf = vec![0u8; 19];
    f.read_exact(&mut buf).unwrap();
    assert_eq!(buf, b"THROUGH THE BACKING");
    assert_eq!(m.stats.get(FUSE_READ), reads, "served by the kernel from the backing file");
    drop(f);
    backing_close(&m.dev, id).expect("BACKING_CLOSE");
    assert!(backing_close(&m.dev, id).is_err(), "id already closed");
    m.finish().unwrap();
}
