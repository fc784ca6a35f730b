//! End-to-end tests through a real FUSE mount (needs root and /dev/fuse):
//! a tiny in-memory filesystem mounted on a temp dir, driven with std::fs.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, OsStr};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fuse_uring::abi::*;
use fuse_uring::*;

// ---- the in-memory filesystem -------------------------------------------------------

struct Node {
    attr: Attr,
    data: Vec<u8>,
    children: BTreeMap<Vec<u8>, u64>,
    parent: u64,
}

#[derive(Default)]
struct MemFs {
    nodes: Mutex<(HashMap<u64, Node>, u64)>,
    destroyed: AtomicBool,
    /// Inodes opened with FOPEN_PASSTHROUGH on this backing id.
    backing: Mutex<HashMap<u64, i32>>,
}

/// One listed directory entry: (ino, offset, kind, name, attr).
type Listed = (u64, u64, u32, Vec<u8>, Option<Attr>);

const TTL: Duration = Duration::from_secs(10);

impl MemFs {
    fn new() -> Self {
        let fs = MemFs::default();
        let root = Node { attr: attr(FUSE_ROOT_ID, libc::S_IFDIR | 0o755, 2), data: vec![], children: BTreeMap::new(), parent: 1 };
        *fs.nodes.lock().unwrap() = (HashMap::from([(FUSE_ROOT_ID, root)]), 2);
        fs
    }
    fn entry(a: Attr) -> Entry {
        Entry { attr: a, generation: 0, entry_timeout: TTL, attr_timeout: TTL }
    }
    fn add(&self, parent: u64, name: &OsStr, mode: u32) -> Result<Entry> {
        let mut g = self.nodes.lock().unwrap();
        let (nodes, next) = &mut *g;
        let p = nodes.get(&parent).ok_or(Errno(libc::ENOENT))?;
        if p.children.contains_key(name.as_bytes()) {
            return Err(Errno(libc::EEXIST));
        }
        let ino = *next;
        *next += 1;
        let a = attr(ino, mode, if mode & libc::S_IFMT == libc::S_IFDIR { 2 } else { 1 });
        nodes.insert(ino, Node { attr: a, data: vec![], children: BTreeMap::new(), parent });
        nodes.get_mut(&parent).unwrap().children.insert(name.as_bytes().to_vec(), ino);
        Ok(Self::entry(a))
    }
    fn remove(&self, parent: u64, name: &OsStr, dir: bool) -> Result<()> {
        let mut g = self.nodes.lock().unwrap();
        let nodes = &mut g.0;
        let ino = *nodes.get(&parent).and_then(|p| p.children.get(name.as_bytes())).ok_or(Errno(libc::ENOENT))?;
        let n = &nodes[&ino];
        if dir != (n.attr.mode & libc::S_IFMT == libc::S_IFDIR) {
            return Err(Errno(if dir { libc::ENOTDIR } else { libc::EISDIR }));
        }
        if dir && !n.children.is_empty() {
            return Err(Errno(libc::ENOTEMPTY));
        }
        nodes.get_mut(&parent).unwrap().children.remove(name.as_bytes());
        nodes.remove(&ino);
        Ok(())
    }
    /// (ino, offset, kind, name, attr) of every entry from `offset` on.
    fn list(&self, ino: u64, offset: u64) -> Result<Vec<Listed>> {
        let g = self.nodes.lock().unwrap();
        let n = g.0.get(&ino).ok_or(Errno(libc::ENOENT))?;
        let mut all = vec![(ino, libc::DT_DIR as u32, b".".to_vec(), None), (n.parent, libc::DT_DIR as u32, b"..".to_vec(), None)];
        for (name, c) in &n.children {
            let a = g.0[c].attr;
            let kind = if a.mode & libc::S_IFMT == libc::S_IFDIR { libc::DT_DIR } else { libc::DT_REG };
            all.push((*c, kind as u32, name.clone(), Some(a)));
        }
        Ok(all.into_iter().enumerate().skip(offset as usize).map(|(i, (ino, k, n, a))| (ino, i as u64 + 1, k, n, a)).collect())
    }
}

fn attr(ino: u64, mode: u32, nlink: u32) -> Attr {
    Attr { ino, mode, nlink, blksize: 4096, mtime: 1_700_000_000, ..Default::default() }
}

impl Filesystem for MemFs {
    fn destroy(&self) {
        self.destroyed.store(true, Ordering::SeqCst);
    }
    fn lookup(&self, _: &RequestCtx, parent: u64, name: &OsStr) -> Result<Entry> {
        let g = self.nodes.lock().unwrap();
        let p = g.0.get(&parent).ok_or(Errno(libc::ENOENT))?;
        match p.children.get(name.as_bytes()) {
            Some(c) => Ok(Self::entry(g.0[c].attr)),
            None => Ok(Self::entry(Attr::default())), // negative entry, cached for TTL
        }
    }
    fn getattr(&self, _: &RequestCtx, ino: u64, _: Option<u64>) -> Result<AttrReply> {
        let g = self.nodes.lock().unwrap();
        Ok(AttrReply { attr: g.0.get(&ino).ok_or(Errno(libc::ENOENT))?.attr, timeout: TTL })
    }
    fn setattr(&self, _: &RequestCtx, ino: u64, set: &SetAttrIn) -> Result<AttrReply> {
        let mut g = self.nodes.lock().unwrap();
        let n = g.0.get_mut(&ino).ok_or(Errno(libc::ENOENT))?;
        if let Some(size) = set.size {
            n.data.resize(size as usize, 0);
            n.attr.size = size;
        }
        if let Some(mode) = set.mode {
            n.attr.mode = (n.attr.mode & libc::S_IFMT) | (mode & 0o7777);
        }
        if let Some(SetTime::At(s, ns)) = set.mtime {
            (n.attr.mtime, n.attr.mtime_nsec) = (s, ns);
        }
        Ok(AttrReply { attr: n.attr, timeout: TTL })
    }
    fn mkdir(&self, _: &RequestCtx, parent: u64, name: &OsStr, mode: u32, _: u32) -> Result<Entry> {
        self.add(parent, name, libc::S_IFDIR | (mode & 0o7777))
    }
    fn create(&self, _: &RequestCtx, parent: u64, name: &OsStr, mode: u32, _: u32, _: u32) -> Result<(Entry, Opened)> {
        Ok((self.add(parent, name, mode)?, Opened::default()))
    }
    fn unlink(&self, _: &RequestCtx, parent: u64, name: &OsStr) -> Result<()> {
        self.remove(parent, name, false)
    }
    fn rmdir(&self, _: &RequestCtx, parent: u64, name: &OsStr) -> Result<()> {
        self.remove(parent, name, true)
    }
    fn rename(&self, _: &RequestCtx, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32) -> Result<()> {
        if flags != 0 {
            return Err(Errno(libc::EINVAL));
        }
        let mut g = self.nodes.lock().unwrap();
        let nodes = &mut g.0;
        let ino = nodes.get_mut(&parent).and_then(|p| p.children.remove(name.as_bytes())).ok_or(Errno(libc::ENOENT))?;
        if let Some(old) = nodes.get_mut(&newparent).unwrap().children.insert(newname.as_bytes().to_vec(), ino) {
            nodes.remove(&old);
        }
        nodes.get_mut(&ino).unwrap().parent = newparent;
        Ok(())
    }
    fn open(&self, _: &RequestCtx, ino: u64, _: u32) -> Result<Opened> {
        match self.backing.lock().unwrap().get(&ino) {
            Some(&backing_id) => Ok(Opened { fh: 0, open_flags: FOPEN_PASSTHROUGH, backing_id }),
            None => Ok(Opened::default()),
        }
    }
    fn read(&self, _: &RequestCtx, ino: u64, _: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let g = self.nodes.lock().unwrap();
        let d = &g.0.get(&ino).ok_or(Errno(libc::ENOENT))?.data;
        let start = (offset as usize).min(d.len());
        Ok(d[start..(start + size as usize).min(d.len())].to_vec())
    }
    fn write(&self, _: &RequestCtx, ino: u64, _: u64, offset: u64, data: &[u8], _: u32) -> Result<u32> {
        let mut g = self.nodes.lock().unwrap();
        let n = g.0.get_mut(&ino).ok_or(Errno(libc::ENOENT))?;
        let end = offset as usize + data.len();
        if n.data.len() < end {
            n.data.resize(end, 0);
        }
        n.data[offset as usize..end].copy_from_slice(data);
        n.attr.size = n.data.len() as u64;
        Ok(data.len() as u32)
    }
    fn flush(&self, _: &RequestCtx, _: u64, _: u64, _: u64) -> Result<()> {
        Ok(())
    }
    fn readdir(&self, _: &RequestCtx, ino: u64, _: u64, offset: u64, sink: &mut dyn DirSink) -> Result<()> {
        for (ino, off, kind, name, _) in self.list(ino, offset)? {
            if !sink.push(&DirEntry { ino, offset: off, kind, name: &name }) {
                break;
            }
        }
        Ok(())
    }
    fn readdirplus(&self, _: &RequestCtx, ino: u64, _: u64, offset: u64, sink: &mut dyn DirPlusSink) -> Result<()> {
        for (ino, off, kind, name, a) in self.list(ino, offset)? {
            let e = a.map(Self::entry).unwrap_or_default();
            if !sink.push(&DirEntry { ino, offset: off, kind, name: &name }, &e) {
                break;
            }
        }
        Ok(())
    }
    fn statfs(&self, _: &RequestCtx, _: u64) -> Result<StatFs> {
        Ok(StatFs { blocks: 1000, bfree: 500, bavail: 500, files: 100, ffree: 50, bsize: 4096, namelen: 255, frsize: 4096 })
    }
}

// ---- the mount guard --------------------------------------------------------------------

/// Mounts a MemFs on a fresh temp dir; Drop unmounts, joins the session
/// thread (also when a test assertion panicked) and then removes the dir.
struct Mounted {
    mnt: PathBuf,
    fs: Arc<MemFs>,
    stats: Arc<OpStats>,
    info: ConnInfo,
    notifier: Notifier,
    dev: FuseDev,
    thread: Option<JoinHandle<io::Result<()>>>,
    _dir: tempfile::TempDir, // dropped after Drop::drop: removed once unmounted
}

impl Mounted {
    fn new(opts: MountOptions) -> Mounted {
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let session = mount(&mnt, &opts).expect("mount (needs root and /dev/fuse)");
        let fs = Arc::new(MemFs::new());
        let (stats, info, notifier, dev) = (session.stats(), session.conn_info(), session.notifier(), session.device());
        let f = fs.clone();
        let thread = std::thread::spawn(move || session.run(f, 2));
        Mounted { mnt, fs, stats, info, notifier, dev, thread: Some(thread), _dir: dir }
    }
    fn path(&self, p: &str) -> PathBuf {
        self.mnt.join(p)
    }
    /// Unmounts and returns what `Session::run` returned.
    fn finish(mut self) -> io::Result<()> {
        unmount(&self.mnt)?;
        self.thread.take().unwrap().join().expect("session thread panicked")
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            if let Err(e) = unmount(&self.mnt) {
                eprintln!("unmount {}: {e}", self.mnt.display());
            }
            let _ = t.join();
        }
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.expect_err("expected an error").raw_os_error().unwrap()
}

// ---- tests ----------------------------------------------------------------------------------

#[test]
fn file_and_directory_operations() {
    let m = Mounted::new(MountOptions::default());
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

#[test]
fn readdirplus_lists_large_directories() {
    let m = Mounted::new(MountOptions::default());
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

#[test]
fn plain_readdir_when_readdirplus_is_off() {
    let m = Mounted::new(MountOptions { readdirplus: false, fsname: "ringfs-test".into(), ..Default::default() });
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

#[test]
fn notifier_invalidates_cached_entries() {
    let m = Mounted::new(MountOptions::default());
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

#[test]
fn passthrough_negotiation_and_backing_ids() {
    let m = Mounted::new(MountOptions { passthrough: true, ..Default::default() });
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
