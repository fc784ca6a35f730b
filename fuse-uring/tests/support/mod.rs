//! Shared by the mount tests: a tiny in-memory filesystem ([`MemFs`]) and a
//! mount guard ([`Mounted`]) that unmounts, joins and removes its temp dir
//! on every path, parametrised by transport.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fuse_uring::abi::*;
use fuse_uring::*;

// ---- the in-memory filesystem -------------------------------------------------------

pub struct Node {
    attr: Attr,
    data: Vec<u8>,
    children: BTreeMap<Vec<u8>, u64>,
    parent: u64,
}

#[derive(Default)]
pub struct MemFs {
    nodes: Mutex<(HashMap<u64, Node>, u64)>,
    pub destroyed: AtomicBool,
    /// Inodes opened with FOPEN_PASSTHROUGH on this backing id.
    pub backing: Mutex<HashMap<u64, i32>>,
    /// Entry and attribute timeout (default 10 s).
    pub ttl: Duration,
    /// FSYNC blocks while this is true (tests of the slow-request pool).
    pub hold_fsync: Mutex<bool>,
    pub fsync_cv: std::sync::Condvar,
    pub fsyncs: std::sync::atomic::AtomicU64,
}

/// One listed directory entry: (ino, offset, kind, name, attr).
pub type Listed = (u64, u64, u32, Vec<u8>, Option<Attr>);

const TTL: Duration = Duration::from_secs(10);

impl MemFs {
    pub fn new() -> Self {
        Self::with_ttl(TTL)
    }
    pub fn with_ttl(ttl: Duration) -> Self {
        let fs = MemFs { ttl, ..Default::default() };
        let root = Node { attr: attr(FUSE_ROOT_ID, libc::S_IFDIR | 0o755, 2), data: vec![], children: BTreeMap::new(), parent: 1 };
        *fs.nodes.lock().unwrap() = (HashMap::from([(FUSE_ROOT_ID, root)]), 2);
        fs
    }
    fn entry(&self, a: Attr) -> Entry {
        Entry { attr: a, generation: 0, entry_timeout: self.ttl, attr_timeout: self.ttl }
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
        Ok(self.entry(a))
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

pub fn attr(ino: u64, mode: u32, nlink: u32) -> Attr {
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
            Some(c) => Ok(self.entry(g.0[c].attr)),
            None => Ok(self.entry(Attr::default())), // negative entry, cached for TTL
        }
    }
    fn getattr(&self, _: &RequestCtx, ino: u64, _: Option<u64>) -> Result<AttrReply> {
        let g = self.nodes.lock().unwrap();
        Ok(AttrReply { attr: g.0.get(&ino).ok_or(Errno(libc::ENOENT))?.attr, timeout: self.ttl })
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
        Ok(AttrReply { attr: n.attr, timeout: self.ttl })
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
    fn fsync(&self, _: &RequestCtx, _: u64, _: u64, _: bool) -> Result<()> {
        let mut held = self.hold_fsync.lock().unwrap();
        while *held {
            held = self.fsync_cv.wait(held).unwrap();
        }
        self.fsyncs.fetch_add(1, Ordering::SeqCst);
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
            let e = a.map(|a| self.entry(a)).unwrap_or_default();
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
pub struct Mounted {
    pub mnt: PathBuf,
    pub fs: Arc<MemFs>,
    pub stats: Arc<OpStats>,
    pub info: ConnInfo,
    pub transport: TransportInfo,
    pub notifier: Notifier,
    pub dev: FuseDev,
    pub thread: Option<JoinHandle<io::Result<()>>>,
    pub _dir: tempfile::TempDir, // dropped after Drop::drop: removed once unmounted
}

impl Mounted {
    pub fn new(opts: MountOptions) -> Mounted {
        Self::with_fs(opts, MemFs::new())
    }
    /// Mounts `fs`, served with `Session::run(fs, 2)`; with
    /// `Transport::Uring` asserts that io_uring is in use.
    pub fn with_fs(opts: MountOptions, fs: MemFs) -> Mounted {
        Self::with_workers(opts, fs, 2)
    }
    /// As [`Mounted::with_fs`], served with `Session::run(fs, workers)`.
    pub fn with_workers(opts: MountOptions, fs: MemFs, workers: usize) -> Mounted {
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let session = mount(&mnt, &opts).expect("mount (needs root and /dev/fuse)");
        let fs = Arc::new(fs);
        let transport = session.transport_info();
        if opts.transport == Transport::Uring {
            assert_eq!(transport.kind, TransportKind::IoUring, "{transport}");
        }
        let (stats, info, notifier, dev) = (session.stats(), session.conn_info(), session.notifier(), session.device());
        let f = fs.clone();
        let thread = std::thread::spawn(move || session.run(f, workers));
        Mounted { mnt, fs, stats, info, transport, notifier, dev, thread: Some(thread), _dir: dir }
    }
    pub fn path(&self, p: &str) -> PathBuf {
        self.mnt.join(p)
    }
    /// Unmounts and returns what `Session::run` returned.
    pub fn finish(mut self) -> io::Result<()> {
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

pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

pub fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.expect_err("expected an error").raw_os_error().unwrap()
}

