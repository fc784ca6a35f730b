//! [`Fs`]: the live filesystem. The inode table, directory tree and open
//! handles live in memory behind one mutex; file bytes live in working copies
//! read and written outside that mutex; redb receives group commits from a
//! background thread and content manifests from the hash workers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{Database, Durability, ReadableDatabase, ReadableTable};

use crate::chunk;
use crate::host::{copy_range, is_host_id, HostTrees};
use crate::local::{BackDir, IgnorePolicy};
use crate::store::*;
use crate::types::*;

pub(crate) const ROOT: u64 = 1;
const NAME_MAX: usize = 255;
const SYMLINK_MAX: usize = 4095;
const LINK_MAX: u32 = 65000;
const XATTR_NAME_MAX: usize = 255;
const XATTR_SIZE_MAX: usize = 65536;
const BLKSIZE: u32 = 4096;
/// Bounds of the pools of ready (empty) backing files for new files.
const POOL_MIN: usize = 8;
const POOL_MAX: usize = 512;
/// Pool index: working copies of synced files (`Inner::wc`).
const POOL_WC: usize = 0;
/// Pool index: bytes of local-only files (`Inner::local`).
const POOL_LOCAL: usize = 1;

const S_IFMT: u32 = libc::S_IFMT;
const S_IFDIR: u32 = libc::S_IFDIR;
const S_IFREG: u32 = libc::S_IFREG;
const S_IFLNK: u32 = libc::S_IFLNK;

fn now() -> (i64, u32) {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_secs() as i64, d.subsec_nanos())
}

fn err<T>(e: i32) -> Result<T> {
    Err(Errno(e))
}

fn is_dir(mode: u32) -> bool {
    mode & S_IFMT == S_IFDIR
}

/// `mode` after a remove-privileges request: S_ISUID cleared, and S_ISGID
/// if S_IXGRP is set (a setgid file without group-exec is a mandatory-locking
/// marker, kept as Linux keeps it); directories unchanged.
pub(crate) fn killed_privs(mode: u32) -> u32 {
    if is_dir(mode) {
        return mode;
    }
    let mut m = mode & !libc::S_ISUID;
    if m & libc::S_IXGRP != 0 {
        m &= !libc::S_ISGID;
    }
    m
}

/// A warning that would repeat while a condition lasts (a full disk) is
/// logged at most once a minute.
#[derive(Default)]
struct LogThrottle(Mutex<Option<std::time::Instant>>);

impl LogThrottle {
    /// True, and the minute starts again, if nothing was logged in the last one.
    fn due(&self) -> bool {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(60)) {
            return false;
        }
        *last = Some(std::time::Instant::now());
        true
    }

    /// The condition is over: true if it had been logged.
    fn reset(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take().is_some()
    }
}

fn is_reg(mode: u32) -> bool {
    mode & S_IFMT == S_IFREG
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return err(libc::ENOENT);
    }
    if name.len() > NAME_MAX {
        return err(libc::ENAMETOOLONG);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return err(libc::EINVAL);
    }
    Ok(())
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// Pending directory-entry changes: (parent, name) → Some((child, cookie)) or None (removed).
type DirentChanges = HashMap<(u64, Vec<u8>), Option<(u64, u64)>>;
/// A pending inode change: its record and symlink target, or None if freed.
type InodeChange = (u64, Option<(InodeRec, Option<Vec<u8>>)>);

/// Directory contents: name → (child, cookie) and cookie → name.
#[derive(Default)]
struct DirData {
    by_name: HashMap<Vec<u8>, (u64, u64)>,
    by_cookie: BTreeMap<u64, Vec<u8>>,
}

/// The working-copy fd of an open inode, shared by its handles.
pub(crate) struct OpenFile {
    file: File,
    append: Mutex<()>,
}

struct Node {
    rec: InodeRec,
    lookups: u64,
    opens: u32,
    file: Option<Arc<OpenFile>>,
    dir: Option<Box<DirData>>,
    symlink: Option<Vec<u8>>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    content_gen: u64,
    hashed_gen: u64,
    hash_lock: Arc<Mutex<()>>,
    /// The working copy's (mtime, ctime, size) when we last looked: writes
    /// that bypass the daemon (passthrough, shared mmap) change it.
    wc_seen: Option<WcStamp>,
    /// Local-only: metadata in the LOCAL_* tables, never hashed or journaled.
    local: bool,
    /// The bytes live in the local backing directory (else in `wc/`).
    data_local: bool,
    /// Directories: their name in their parent (for path-based policy).
    dname: Vec<u8>,
}

/// (mtime, ctime, size) of a working copy.
type WcStamp = ((i64, u32), (i64, u32), u64);

fn wc_stamp(m: &std::fs::Metadata) -> WcStamp {
    use std::os::unix::fs::MetadataExt;
    ((m.mtime(), m.mtime_nsec() as u32), (m.ctime(), m.ctime_nsec() as u32), m.size())
}

impl Node {
    fn new(rec: InodeRec) -> Node {
        let dir = if is_dir(rec.mode) { Some(Box::default()) } else { None };
        Node {
            rec,
            lookups: 0,
            opens: 0,
            file: None,
            dir,
            symlink: None,
            xattrs: BTreeMap::new(),
            content_gen: 0,
            hashed_gen: 0,
            hash_lock: Arc::new(Mutex::new(())),
            wc_seen: None,
            local: false,
            data_local: false,
            dname: Vec::new(),
        }
    }
}

struct Handle {
    ino: u64,
    flags: u32,
    file: Option<Arc<OpenFile>>,
}

#[derive(Default)]
struct State {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    handles: HashMap<u64, Handle>,
    dirty_inodes: HashSet<u64>,
    dirty_dirents: DirentChanges,
    dirty_xattrs: HashMap<(u64, Vec<u8>), Option<Vec<u8>>>,
    freed: HashSet<u64>,
    /// Freed local-only inodes (removed from the LOCAL_* tables only).
    freed_local: HashSet<u64>,
    hash_queued: HashSet<u64>,
    /// Reserved inode numbers whose (empty) backing file already exists:
    /// `[POOL_WC]` in the working-copy directory, `[POOL_LOCAL]` in the
    /// local-only directory.
    pool: [Vec<u64>; 2],
}

impl State {
    fn node(&self, ino: u64) -> Result<&Node> {
        self.nodes.get(&ino).ok_or(Errno(libc::ENOENT))
    }
    fn node_mut(&mut self, ino: u64) -> Result<&mut Node> {
        self.nodes.get_mut(&ino).ok_or(Errno(libc::ENOENT))
    }
    /// A directory that can receive new entries.
    fn live_dir(&self, ino: u64) -> Result<&Node> {
        let n = self.node(ino)?;
        if !is_dir(n.rec.mode) {
            return err(libc::ENOTDIR);
        }
        if n.rec.nlink == 0 {
            return err(libc::ENOENT);
        }
        Ok(n)
    }
    fn child(&self, parent: u64, name: &[u8]) -> Option<(u64, u64)> {
        self.nodes.get(&parent)?.dir.as_ref()?.by_name.get(name).copied()
    }
    /// Path of directory `dir` relative to the root ("" for the root).
    fn dir_path(&self, mut dir: u64) -> Vec<u8> {
        let mut parts: Vec<&[u8]> = Vec::new();
        while dir != ROOT && parts.len() < 4096 {
            let Some(n) = self.nodes.get(&dir) else { break };
            parts.push(&n.dname);
            dir = n.rec.parent;
        }
        parts.reverse();
        parts.join(&b'/')
    }
    fn is_local(&self, ino: u64) -> bool {
        self.nodes.get(&ino).map(|n| n.local).unwrap_or(false)
    }
    fn set_dname(&mut self, child: u64, name: &[u8]) {
        if let Some(c) = self.nodes.get_mut(&child) {
            if c.dir.is_some() {
                c.dname = name.to_vec();
            }
        }
    }
    fn touch_inode(&mut self, ino: u64) {
        self.dirty_inodes.insert(ino);
    }
    fn set_ctime(&mut self, ino: u64, t: (i64, u32)) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.rec.ctime = t;
            self.dirty_inodes.insert(ino);
        }
    }
    fn set_mctime(&mut self, ino: u64, t: (i64, u32)) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.rec.mtime = t;
            n.rec.ctime = t;
            self.dirty_inodes.insert(ino);
        }
    }
    /// Links `name` in `parent` to `child` with a fresh cookie.
    fn add_entry(&mut self, parent: u64, name: &[u8], child: u64) -> u64 {
        let p = self.nodes.get_mut(&parent).expect("parent");
        let cookie = p.rec.next_cookie.max(3);
        p.rec.next_cookie = cookie + 1;
        let d = p.dir.as_mut().expect("dir");
        d.by_name.insert(name.to_vec(), (child, cookie));
        d.by_cookie.insert(cookie, name.to_vec());
        self.dirty_inodes.insert(parent);
        self.dirty_dirents.insert((parent, name.to_vec()), Some((child, cookie)));
        self.set_dname(child, name);
        cookie
    }
    /// Points an existing entry at another child, keeping its cookie.
    fn repoint_entry(&mut self, parent: u64, name: &[u8], child: u64) {
        let d = self.nodes.get_mut(&parent).and_then(|p| p.dir.as_mut()).expect("dir");
        let e = d.by_name.get_mut(name).expect("entry");
        e.0 = child;
        let cookie = e.1;
        self.dirty_dirents.insert((parent, name.to_vec()), Some((child, cookie)));
        self.set_dname(child, name);
    }
    fn remove_entry(&mut self, parent: u64, name: &[u8]) -> Option<(u64, u64)> {
        let d = self.nodes.get_mut(&parent)?.dir.as_mut()?;
        let (child, cookie) = d.by_name.remove(name)?;
        d.by_cookie.remove(&cookie);
        self.dirty_dirents.insert((parent, name.to_vec()), None);
        Some((child, cookie))
    }
    /// Frees `ino` if nothing references it any more; returns its working
    /// copy path's inode number to delete outside the lock.
    fn maybe_free(&mut self, ino: u64) -> Option<Freed> {
        let n = self.nodes.get(&ino)?;
        if ino == ROOT || n.rec.nlink > 0 || n.lookups > 0 || n.opens > 0 {
            return None;
        }
        let n = self.nodes.remove(&ino).unwrap();
        for name in n.xattrs.keys() {
            self.dirty_xattrs.insert((ino, name.clone()), None);
        }
        self.dirty_inodes.remove(&ino);
        self.hash_queued.remove(&ino);
        if n.local {
            self.freed_local.insert(ino);
        } else {
            self.freed.insert(ino);
        }
        Some(Freed { ino, regular: is_reg(n.rec.mode), data_local: n.data_local })
    }
    fn alloc_ino(&mut self) -> u64 {
        let i = self.next_ino;
        self.next_ino += 1;
        i
    }
    fn dirty_count(&self) -> u64 {
        (self.dirty_inodes.len()
            + self.dirty_dirents.len()
            + self.dirty_xattrs.len()
            + self.freed.len()
            + self.freed_local.len()
            + self.hash_queued.len()) as u64
    }
}

#[must_use]
struct Freed {
    ino: u64,
    regular: bool,
    data_local: bool,
}

/// Called with the inode of each new native root.
type RootListener = Arc<dyn Fn(u64) + Send + Sync>;

pub(crate) struct Inner {
    /// The redb handle; `None` after an I/O error closed it until it is
    /// reopened (see [`Inner::db`]).
    db: RwLock<Option<Database>>,
    /// An I/O error (ENOSPC, EIO) poisoned the handle: reopen before the next transaction.
    db_broken: AtomicBool,
    /// Files whose content transaction committed non-durably since the last
    /// durable commit: lost if the database must be reopened, so re-hashed then.
    nondurable: Mutex<HashSet<u64>>,
    wc_dir: PathBuf,
    /// The working-copy directory and the local-only directory, used only
    /// through their descriptors (confined, see [`BackDir`]).
    wc: BackDir,
    local: BackDir,
    /// Native-root trees (`LOCAL/roots`), served here until bind-mounted.
    host: HostTrees,
    /// Make eligible new local-only directories native roots.
    native_roots: bool,
    /// Told the inode of every native root made (mkdir) or found (open).
    root_listener: Mutex<Option<RootListener>>,
    policy: Option<IgnorePolicy>,
    /// The LOCAL_* tables may hold records (patterns now, or local-only
    /// inodes loaded from an earlier mount): commits must clean them up.
    local_tables: bool,
    store_desc: String,
    store_dir: Option<PathBuf>,
    state: Mutex<State>,
    next_fh: AtomicU64,
    sync_pos: AtomicU64,
    chunk_count: AtomicU64,
    chunk_bytes: AtomicU64,
    /// Hash jobs: (inode, not before). See [`HASH_DELAY`].
    hash_tx: Mutex<Option<mpsc::Sender<(u64, std::time::Instant)>>>,
    /// A content transaction committed non-durably since the last durable
    /// group commit.
    content_pending: AtomicBool,
    /// Wakes the pool thread (waits on `state`).
    pool_cv: Condvar,
    /// How many ready backing files to keep per pool: doubles (from POOL_MIN,
    /// up to POOL_MAX) whenever a create finds the pool empty. The local-only
    /// pool starts at 0, so a workspace without local-only files keeps none.
    pool_size: [std::sync::atomic::AtomicUsize; 2],
    /// Failing store commits (a full disk retries every commit interval).
    store_trouble: LogThrottle,
    /// Each pool failing to make a file (retried every second).
    pool_trouble: [LogThrottle; 2],
    stopping: AtomicBool,
    stop: Mutex<bool>,
    stop_cv: Condvar,
    abandon: AtomicBool,
    shut: AtomicBool,
    commit_interval: std::time::Duration,
    /// Held for the life of the Fs: the flock on DIR/ringfs.lock.
    lock_file: Mutex<Option<File>>,
    _tmp: Option<tempfile::TempDir>,
    _tmp_local: Option<tempfile::TempDir>,
}

/// The filesystem. `Send + Sync`; every method takes `&self`. Inode numbers
/// are FUSE nodeids; the root is inode 1.
pub struct Fs {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn io_err(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io { path: path.to_path_buf(), source: e }
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt { path: path.to_path_buf(), reason: e.to_string() }
}

/// Takes the exclusive flock on `dir/ringfs.lock` and writes our pid into it.
pub(crate) fn take_lock(dir: &Path) -> std::result::Result<File, StoreError> {
    let p = dir.join("ringfs.lock");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&p)
        .map_err(|e| io_err(&p, e))?;
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut s = String::new();
            let _ = f.read_to_string(&mut s);
            return Err(StoreError::Locked { pid: s.trim().parse().ok(), path: dir.to_path_buf() });
        }
        return Err(io_err(&p, e));
    }
    let _ = f.set_len(0);
    let _ = f.write_all_at(format!("{}\n", std::process::id()).as_bytes(), 0);
    Ok(f)
}

pub(crate) fn open_db(dir: &Path) -> std::result::Result<Database, StoreError> {
    let p = dir.join("store.redb");
    Database::create(&p).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => {
            StoreError::Locked { pid: None, path: dir.to_path_buf() }
        }
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if !matches!(io.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof) =>
        {
            io_err(&p, io)
        }
        e => corrupt(&p, e),
    })
}

struct Loaded {
    clean: bool,
    state: State,
    sync_pos: u64,
    chunk_count: u64,
    chunk_bytes: u64,
    rehash: Vec<u64>,
}

fn root_rec() -> InodeRec {
    let t = now();
    InodeRec {
        mode: S_IFDIR | 0o755,
        nlink: 2,
        size: 4096,
        blocks: 8,
        atime: t,
        mtime: t,
        ctime: t,
        parent: ROOT,
        next_cookie: 3,
        ..Default::default()
    }
}

/// Creates or loads the tables, checks the schema, and after an unclean
/// shutdown repairs what a crash can leave behind. Marks the store in use
/// (clean = 0) durably.
fn load(db: &Database, dbpath: &Path, wc: &BackDir, local: &BackDir) -> std::result::Result<Loaded, StoreError> {
    let c = |e: redb::Error| corrupt(dbpath, e);
    let mut txn = db.begin_write().map_err(|e| c(e.into()))?;
    txn.set_durability(Durability::Immediate).map_err(|e| c(e.into()))?;
    create_tables(&txn).map_err(c)?;
    let schema = meta_get(&txn, "schema").map_err(c)?;
    match schema {
        None => {
            let mut m = txn.open_table(META).map_err(|e| c(e.into()))?;
            let id = u64::from_le_bytes(
                blake3::hash(format!("{:?}{}", SystemTime::now(), std::process::id()).as_bytes()).as_bytes()[..8]
                    .try_into()
                    .unwrap(),
            );
            for (k, v) in [("schema", SCHEMA_VERSION), ("store_id", id), ("next_ino", 2), ("clean", 1), ("chunk_count", 0), ("chunk_bytes", 0)] {
                m.insert(k, v).map_err(|e| c(e.into()))?;
            }
            drop(m);
            let mut t = txn.open_table(INODES).map_err(|e| c(e.into()))?;
            t.insert(ROOT, &enc(&root_rec())[..]).map_err(|e| c(e.into()))?;
        }
        Some(v) if v > SCHEMA_VERSION => {
            return Err(StoreError::NewerSchema { found: v, supported: SCHEMA_VERSION, path: dbpath.to_path_buf() });
        }
        Some(_) => {}
    }
    let clean = meta_get(&txn, "clean").map_err(c)? == Some(1);
    let mut st = State { next_ino: meta_get(&txn, "next_ino").map_err(c)?.unwrap_or(2).max(2), ..Default::default() };
    let chunk_count = meta_get(&txn, "chunk_count").map_err(c)?.unwrap_or(0);
    let chunk_bytes = meta_get(&txn, "chunk_bytes").map_err(c)?.unwrap_or(0);
    let mut has_manifest = HashSet::new();
    let sync_pos;
    {
        let t = txn.open_table(INODES).map_err(|e| c(e.into()))?;
        for r in t.iter().map_err(|e| c(e.into()))? {
            let (k, v) = r.map_err(|e| c(e.into()))?;
            let rec: InodeRec = dec(v.value()).map_err(|e| corrupt(dbpath, format!("inode {}: {e}", k.value())))?;
            st.next_ino = st.next_ino.max(k.value() + 1);
            st.nodes.insert(k.value(), Node::new(rec));
        }
        let t = txn.open_table(SYMLINKS).map_err(|e| c(e.into()))?;
        for r in t.iter().map_err(|e| c(e.into()))? {
            let (k, v) = r.map_err(|e| c(e.into()))?;
            if let Some(n) = st.nodes.get_mut(&k.value()) {
                n.symlink = Some(v.value().to_vec());
            }
        }
        let t = txn.open_table(XATTRS).map_err(|e| c(e.into()))?;
        for r in t.iter().map_err(|e| c(e.into()))? {
            let (k, v) = r.map_err(|e| c(e.into()))?;
            let (ino, name) = k.value();
            if let Some(n) = st.nodes.get_mut(&ino) {
                n.xattrs.insert(name.to_vec(), v.value().to_vec());
            }
        }
        // Local-only inodes: same layouts in the LOCAL_* tables.
        let t = txn.open_table(LOCAL_INODES).map_err(|e| c(e.into()))?;
        for r in t.iter().map_err(|e| c(e.into()))? {
            let (k, v) = r.map_err(|e| c(e.into()))?;
            let rec: InodeRec = dec(v.value()).map_err(|e| corrupt(dbpath, format!("local inode {}: {e}", k.value())))?;
            st.next_ino = st.next_ino.max(k.value() + 1);
            if k.value() == ROOT || st.nodes.contains_key(&k.value()) {
                continue; // the synced record wins
            }
            let mut n = Node::new(rec);
            n.local = true;
            n.data_local = true;
            st.nodes.insert(k.value(), n);
        }
        let t = txn.open_table(LOCAL_SYMLINKS).map_err(|e| c(e.into()))?;
        for r in t.iter().map_err(|e| c(e.into()))? {
            let (k, v) = r.map_err(|e| c(e.into()))?;
            if let Some(n) = st.nodes.get_mut(&k.value()).filter(|n| n.local) {
                n.symlink = Some(v.value().to_vec());
            }
        }
        let t = txn.open_table(LOCAL_XATTRS).map_err(|e| c(e.into()))?;
        for r in t.iter().map_err(|e| c(e.into()))? {
            let (k, v) = r.map_err(|e| c(e.into()))?;
            let (ino, name) = k.value();
            if let Some(n) = st.nodes.get_mut(&ino).filter(|n| n.local) {
                n.xattrs.insert(name.to_vec(), v.value().to_vec());
            }
        }
        let t = txn.open_table(MANIFESTS).map_err(|e| c(e.into()))?;
        for r in t.iter().map_err(|e| c(e.into()))? {
            let (k, _) = r.map_err(|e| c(e.into()))?;
            has_manifest.insert(k.value());
        }
        let t = txn.open_table(JOURNAL).map_err(|e| c(e.into()))?;
        sync_pos = t.last().map_err(|e| c(e.into()))?.map(|(k, _)| k.value()).unwrap_or(0);
        for table in [DIRENTS, LOCAL_DIRENTS] {
            let t = txn.open_table(table).map_err(|e| c(e.into()))?;
            let mut bad = Vec::new();
            for r in t.iter().map_err(|e| c(e.into()))? {
                let (k, v) = r.map_err(|e| c(e.into()))?;
                let (parent, name) = k.value();
                let (child, cookie) = v.value();
                let ok = st.nodes.contains_key(&child)
                    && st.nodes.get(&parent).map(|p| p.dir.is_some() && !p.dir.as_ref().unwrap().by_name.contains_key(name)).unwrap_or(false);
                if !ok {
                    bad.push((parent, name.to_vec()));
                    continue;
                }
                let p = st.nodes.get_mut(&parent).unwrap();
                p.rec.next_cookie = p.rec.next_cookie.max(cookie + 1);
                let d = p.dir.as_mut().unwrap();
                d.by_name.insert(name.to_vec(), (child, cookie));
                d.by_cookie.insert(cookie, name.to_vec());
                if let Some(ch) = st.nodes.get_mut(&child) {
                    if ch.dir.is_some() {
                        ch.dname = name.to_vec();
                    }
                }
            }
            drop(t);
            if !bad.is_empty() {
                tracing::warn!("store recovery: removing {} dangling directory entries", bad.len());
                let mut t = txn.open_table(table).map_err(|e| c(e.into()))?;
                for (p, n) in bad {
                    t.remove((p, &n[..])).map_err(|e| c(e.into()))?;
                }
            }
        }
    }
    // Where each file's bytes are, and directory link counts over both sides.
    let local_names: HashSet<u64> = local.names().iter().filter_map(|n| n.parse().ok()).collect();
    let any_local = !local_names.is_empty() || st.nodes.values().any(|n| n.local);
    if any_local {
        for (ino, n) in st.nodes.iter_mut() {
            n.data_local = local_names.contains(ino);
        }
        let subdirs: Vec<(u64, u32)> = st
            .nodes
            .iter()
            .filter_map(|(&i, n)| n.dir.as_ref().map(|d| (i, d.by_name.values().filter(|(c, _)| st.nodes.get(c).map(|c| c.dir.is_some()).unwrap_or(false)).count() as u32)))
            .collect();
        for (i, k) in subdirs {
            let n = st.nodes.get_mut(&i).unwrap();
            if n.rec.nlink > 0 {
                n.rec.nlink = 2 + k;
            }
        }
    }
    let data_exists = |st: &State, ino: u64| {
        let dl = st.nodes.get(&ino).map(|n| n.data_local).unwrap_or(false);
        if dl {
            local_names.contains(&ino)
        } else {
            wc.exists(&ino.to_string())
        }
    };
    let mut rehash = Vec::new();
    let (mut dcount, mut dbytes) = (0i64, 0i64);
    if !clean {
        // Inodes with no links (unlinked while open, or freed after the
        // last commit): nothing can reach them after a restart.
        let orphans: Vec<u64> = st.nodes.iter().filter(|(&i, n)| i != ROOT && n.rec.nlink == 0).map(|(&i, _)| i).collect();
        for ino in &orphans {
            let n = st.nodes.remove(ino).unwrap();
            for (it, st_) in [(INODES, SYMLINKS), (LOCAL_INODES, LOCAL_SYMLINKS)] {
                txn.open_table(it).map_err(|e| c(e.into()))?.remove(*ino).map_err(|e| c(e.into()))?;
                txn.open_table(st_).map_err(|e| c(e.into()))?.remove(*ino).map_err(|e| c(e.into()))?;
            }
            for xtab in [XATTRS, LOCAL_XATTRS] {
                let mut xt = txn.open_table(xtab).map_err(|e| c(e.into()))?;
                for name in n.xattrs.keys() {
                    xt.remove((*ino, &name[..])).map_err(|e| c(e.into()))?;
                }
            }
        }
        // Manifests whose inode is gone (or local-only now).
        for ino in has_manifest.iter().copied().collect::<Vec<_>>() {
            if !st.nodes.get(&ino).map(|n| is_reg(n.rec.mode) && !n.local).unwrap_or(false) {
                let (cn, cb) = remove_manifest(&txn, ino).map_err(c)?;
                dcount -= cn as i64;
                dbytes -= cb as i64;
                has_manifest.remove(&ino);
            }
        }
        // Working copies with no inode: a file made after the last commit
        // (its name was lost with the crash). Empty ones (the pool) go; any
        // with bytes are kept in STORE/lost+found, never deleted.
        let lost = dbpath.parent().filter(|p| !p.as_os_str().is_empty()).and_then(|p| BackDir::open(&p.join("lost+found")).ok());
        let mut saved = 0;
        let mut orphan = |dir: &BackDir, name: &str, prefix: &str| {
            let bytes = dir.open_ro(name).and_then(|f| f.metadata()).map(|m| m.len()).unwrap_or(0);
            if bytes == 0 {
                let _ = dir.unlink(name);
                return;
            }
            // Names already taken (an earlier crash's) are never replaced.
            let candidates = |base: String| (0..10_000).map(move |i| if i == 0 { base.clone() } else { format!("{base}.{i}") });
            // Into lost+found: a rename, or (--local-dir on another
            // filesystem) a copy; failing both, a name the daemon never uses.
            let into_lost = |l: &BackDir| {
                for to in candidates(format!("{prefix}{name}")) {
                    let r = dir.rename_noreplace(name, l, &to).or_else(|e| match e.raw_os_error() {
                        Some(libc::EXDEV) => (|| -> std::io::Result<()> {
                            let mut src = dir.open_ro(name)?;
                            let mut dst = l.create_new(&to)?;
                            std::io::copy(&mut src, &mut dst)?;
                            dst.sync_all()?;
                            dir.unlink(name)
                        })(),
                        _ => Err(e),
                    });
                    match r {
                        Ok(()) => return true,
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                        Err(_) => return false,
                    }
                }
                false
            };
            if lost.as_ref().is_some_and(into_lost) {
                saved += 1;
                return;
            }
            for to in candidates(format!("lost-{name}")) {
                match dir.rename_noreplace(name, dir, &to) {
                    Ok(()) => {
                        tracing::warn!("a file without a name after the crash is kept as {}/{to}", dir.path().display());
                        return;
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                    Err(_) => break,
                }
            }
            tracing::error!("a file without a name after the crash is left as {}/{name}", dir.path().display());
        };
        for name in wc.names() {
            let keep = name.parse::<u64>().ok().map(|i| st.nodes.get(&i).map(|n| is_reg(n.rec.mode) && !n.data_local).unwrap_or(false)).unwrap_or(false);
            if !keep {
                orphan(wc, &name, "wc-");
            }
        }
        // In the local directory only our own names (numbers, restores).
        for name in local.names() {
            let ours = name.parse::<u64>().ok();
            let keep = ours.map(|i| st.nodes.get(&i).map(|n| is_reg(n.rec.mode) && n.data_local).unwrap_or(false)).unwrap_or(true);
            if name.starts_with(".restore-") {
                let _ = local.unlink(&name);
            } else if !keep {
                orphan(local, &name, "local-");
            }
        }
        if saved > 0 {
            tracing::warn!(
                "{saved} files made after the last commit lost their names in the crash; their bytes are in {}",
                dbpath.parent().unwrap_or(Path::new(".")).join("lost+found").display()
            );
        }
        let regular: Vec<u64> = st.nodes.iter().filter(|(_, n)| is_reg(n.rec.mode)).map(|(&i, _)| i).collect();
        for ino in regular {
            if !data_exists(&st, ino) {
                continue;
            }
            let n = st.nodes.get_mut(&ino).unwrap();
            if n.local {
                // Local-only bytes are the truth: take their size and mtime.
                if let Ok(m) = local.open_ro(&ino.to_string()).and_then(|f| f.metadata()) {
                    use std::os::unix::fs::MetadataExt;
                    n.rec.size = m.size();
                    n.rec.blocks = m.blocks();
                    n.rec.mtime = n.rec.mtime.max((m.mtime(), m.mtime_nsec() as u32));
                    st.dirty_inodes.insert(ino);
                }
            } else {
                n.content_gen = 1;
                rehash.push(ino);
            }
        }
        tracing::info!("store recovery after unclean shutdown: {} orphan inodes freed, {} working copies to re-hash", orphans.len(), rehash.len());
    }
    let candidates: Vec<u64> = st
        .nodes
        .iter()
        .filter(|(i, n)| is_reg(n.rec.mode) && (n.local || !has_manifest.contains(i)) && n.content_gen == 0 && n.rec.size > 0)
        .map(|(&i, _)| i)
        .collect();
    let mut lost = Vec::new();
    for ino in candidates {
        // No stored content and no working copy to re-hash: the data is lost.
        if !data_exists(&st, ino) {
            let n = st.nodes.get_mut(&ino).unwrap();
            n.rec.size = 0;
            n.rec.blocks = 0;
            lost.push(ino);
        } else if !st.nodes[&ino].local && !rehash.contains(&ino) {
            // A synced file whose hashing failed (say on a full disk): its
            // working copy is the truth; store it now.
            st.nodes.get_mut(&ino).unwrap().content_gen = 1;
            rehash.push(ino);
        }
    }
    st.dirty_inodes.extend(lost);
    bump_chunk_counters(&txn, dcount, dbytes).map_err(c)?;
    {
        let mut m = txn.open_table(META).map_err(|e| c(e.into()))?;
        m.insert("clean", 0).map_err(|e| c(e.into()))?;
        m.insert("next_ino", st.next_ino).map_err(|e| c(e.into()))?;
    }
    txn.commit().map_err(|e| c(e.into()))?;
    Ok(Loaded {
        clean,
        state: st,
        sync_pos,
        chunk_count: (chunk_count as i64 + dcount).max(0) as u64,
        chunk_bytes: (chunk_bytes as i64 + dbytes).max(0) as u64,
        rehash,
    })
}

/// How long a file released after writing waits before it is hashed (the
/// working copy is the truth meanwhile; fsync hashes at once).
const HASH_DELAY: std::time::Duration = std::time::Duration::from_millis(300);

/// Hashing runs in the background: a lower CPU priority (nice 5: about a
/// quarter of a foreground thread's share when they compete, never starved)
/// and the lowest best-effort I/O priority (ioprio_set(2)) for this thread,
/// so that the processes using the workspace go first on a busy machine.
fn background_priority() {
    // SAFETY: per-thread settings of the calling thread (its tid).
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 5);
        const IOPRIO_WHO_PROCESS: libc::c_long = 1;
        const IOPRIO_CLASS_BE: libc::c_long = 2;
        libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid as libc::c_long, (IOPRIO_CLASS_BE << 13) | 7);
    }
}

fn is_io_error(e: &redb::Error) -> bool {
    matches!(e, redb::Error::Io(_) | redb::Error::PreviousIo)
}

impl Inner {
    /// A write transaction, reopening the database first if an I/O error
    /// closed it (a durable store only; a memory store cannot fail so).
    fn begin_write(&self) -> std::result::Result<redb::WriteTransaction, redb::Error> {
        self.reopen_if_broken()?;
        let g = self.db.read().unwrap_or_else(|p| p.into_inner());
        let db = g.as_ref().ok_or(redb::Error::PreviousIo)?;
        db.begin_write().map_err(|e| {
            let e = redb::Error::from(e);
            if is_io_error(&e) {
                self.db_broken.store(true, Ordering::SeqCst);
            }
            e
        })
    }

    fn begin_read(&self) -> std::result::Result<redb::ReadTransaction, redb::Error> {
        self.reopen_if_broken()?;
        let g = self.db.read().unwrap_or_else(|p| p.into_inner());
        Ok(g.as_ref().ok_or(redb::Error::PreviousIo)?.begin_read()?)
    }

    /// After an I/O error: closes the handle and opens the database again
    /// (its last committed state). Err while that still fails.
    fn reopen_if_broken(&self) -> std::result::Result<(), redb::Error> {
        if !self.db_broken.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Some(dir) = &self.store_dir else { return Ok(()) };
        let mut g = self.db.write().unwrap_or_else(|p| p.into_inner());
        if !self.db_broken.load(Ordering::SeqCst) {
            return Ok(()); // another thread reopened it
        }
        drop(g.take());
        match open_db(dir) {
            Ok(db) => {
                // The reopened database is at its last durable commit: the
                // chunk counters come from it, and content stored since then
                // is gone, so those files are hashed again.
                if let Ok(rtx) = db.begin_read() {
                    let get = |k: &str| rtx.open_table(META).ok().and_then(|t| t.get(k).ok().flatten().map(|v| v.value()));
                    if let (Some(c), Some(b)) = (get("chunk_count"), get("chunk_bytes")) {
                        self.chunk_count.store(c, Ordering::SeqCst);
                        self.chunk_bytes.store(b, Ordering::SeqCst);
                    }
                }
                *g = Some(db);
                self.db_broken.store(false, Ordering::SeqCst);
                drop(g);
                let lost: Vec<u64> = std::mem::take(&mut *self.nondurable.lock().unwrap_or_else(|p| p.into_inner())).into_iter().collect();
                let mut st = self.lock();
                for ino in &lost {
                    if let Some(n) = st.nodes.get_mut(ino) {
                        n.hashed_gen = 0;
                        n.content_gen = n.content_gen.max(1);
                    }
                    self.queue_hash(&mut st, *ino);
                }
                if self.store_trouble.due() {
                    tracing::warn!("store: database reopened after an I/O error; retrying queued changes and re-storing {} files", lost.len());
                }
                Ok(())
            }
            Err(e) => {
                tracing::error!("store: reopening the database failed: {e}");
                Err(redb::Error::Io(std::io::Error::other(e.to_string())))
            }
        }
    }

    /// Serves every native root found on disk whose directory is still a
    /// live local-only directory; an orphaned tree is left alone (warned).
    fn attach_roots(&self) {
        let st = self.lock();
        for ino in self.host.on_disk() {
            let ok = st.nodes.get(&ino).map(|n| is_dir(n.rec.mode) && n.local && n.rec.nlink > 0).unwrap_or(false);
            let empty = st.nodes.get(&ino).and_then(|n| n.dir.as_ref()).map(|d| d.by_name.is_empty()).unwrap_or(true);
            if !ok || !empty {
                tracing::warn!("native root tree {} has no local-only directory in the workspace; left as is", self.host.root_path(ino).display());
                continue;
            }
            if let Err(e) = self.host.attach_root(ino) {
                tracing::warn!("native root tree {}: {e}", self.host.root_path(ino).display());
            }
        }
    }

    /// Makes every eligible local-only directory kept the flat way (by an
    /// earlier mount with native roots off, or one that the ignore patterns
    /// made local-only) a native root: its subtree is rebuilt as a host
    /// tree in `roots/<ino>.new` (file data hard-linked, else copied), renamed
    /// into place, then removed from the model and committed. On any error
    /// the directory stays as it was (warned).
    fn migrate_flat_roots(&self) {
        let cands: Vec<u64> = {
            let st = self.lock();
            let mut v: Vec<u64> = st
                .nodes
                .iter()
                .filter(|(i, n)| **i != ROOT && n.local && n.dir.is_some() && n.rec.nlink > 0 && !st.is_local(n.rec.parent) && !self.host.is_root(**i))
                .map(|(i, _)| *i)
                .collect();
            v.sort_unstable();
            v
        };
        let mut done = 0;
        for ino in cands {
            match self.migrate_one(ino) {
                Ok(()) => done += 1,
                Err(e) => tracing::warn!("local-only directory inode {ino} stays served by the daemon: making it a native root failed: {e}"),
            }
        }
        if done > 0 {
            tracing::info!("{done} local-only directories became native roots");
            if let Err(e) = self.commit(Durability::Immediate, true, None) {
                tracing::warn!("committing migrated native roots: {e}");
            }
        }
    }

    fn migrate_one(&self, root: u64) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let mut st = self.lock();
        // The subtree, parents before children: (ino, parent, name).
        let mut order: Vec<(u64, u64, Vec<u8>)> = Vec::new();
        let mut stack = vec![root];
        let mut links: HashMap<u64, u32> = HashMap::new();
        while let Some(d) = stack.pop() {
            let Some(dd) = st.nodes.get(&d).and_then(|n| n.dir.as_ref()) else { continue };
            for (name, (c, _)) in &dd.by_name {
                order.push((*c, d, name.clone()));
                match st.nodes.get(c) {
                    Some(n) if n.dir.is_some() => stack.push(*c),
                    Some(_) => *links.entry(*c).or_default() += 1,
                    None => return Err(std::io::Error::other(format!("dangling entry to inode {c}"))),
                }
            }
        }
        for (c, k) in &links {
            if st.nodes[c].rec.nlink != *k {
                return Err(std::io::Error::other(format!("inode {c} has hard links outside the directory")));
            }
            if st.nodes[c].lookups > 0 || st.nodes[c].opens > 0 {
                return Err(std::io::Error::other("in use"));
            }
        }
        let final_dir = self.host.root_path(root);
        let tmp = final_dir.with_extension("new");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        if final_dir.exists() {
            // A tree renamed into place before a crash, the model not yet committed: redo.
            std::fs::remove_dir_all(&final_dir)?;
        }
        let mut nested: Vec<(u64, PathBuf)> = Vec::new();
        let build = (|| -> std::io::Result<()> {
            std::fs::create_dir(&tmp)?;
            let mut paths: HashMap<u64, PathBuf> = HashMap::from([(root, tmp.clone())]);
            let mut first: HashMap<u64, PathBuf> = HashMap::new();
            for (c, parent, name) in &order {
                let path = paths[parent].join(OsStr::from_bytes(name));
                let n = &st.nodes[c];
                let mode = n.rec.mode;
                if self.host.is_root(*c) {
                    // A native root moved below this directory: its tree moves in last.
                    nested.push((*c, path));
                    continue;
                }
                match mode & S_IFMT {
                    S_IFDIR => {
                        std::fs::create_dir(&path)?;
                        paths.insert(*c, path.clone());
                    }
                    libc::S_IFREG => {
                        if let Some(p) = first.get(c) {
                            std::fs::hard_link(p, &path)?;
                            continue;
                        }
                        let src = self.data_dir(n.data_local).path().join(c.to_string());
                        if std::fs::hard_link(&src, &path).is_err() {
                            if src.exists() {
                                std::fs::copy(&src, &path)?;
                            } else {
                                std::fs::File::create(&path)?.set_len(n.rec.size)?;
                            }
                        }
                        first.insert(*c, path.clone());
                    }
                    libc::S_IFLNK => {
                        let t = n.symlink.clone().unwrap_or_default();
                        std::os::unix::fs::symlink(OsStr::from_bytes(&t), &path)?;
                    }
                    _ => {
                        let cp = std::ffi::CString::new(path.as_os_str().as_bytes())?;
                        if unsafe { libc::mknod(cp.as_ptr(), mode, n.rec.rdev as libc::dev_t) } != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                }
            }
            // Owners, modes, xattrs and times, children before parents.
            let meta = |ino: u64, path: &Path| -> std::io::Result<()> {
                let n = &st.nodes[&ino];
                let cp = std::ffi::CString::new(path.as_os_str().as_bytes())?;
                let lnk = n.rec.mode & S_IFMT == libc::S_IFLNK;
                unsafe {
                    if libc::lchown(cp.as_ptr(), n.rec.uid, n.rec.gid) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if !lnk && libc::chmod(cp.as_ptr(), n.rec.mode & 0o7777) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    for (k, v) in &n.xattrs {
                        let kc = std::ffi::CString::new(k.clone())?;
                        libc::lsetxattr(cp.as_ptr(), kc.as_ptr(), v.as_ptr().cast(), v.len(), 0);
                    }
                    let ts = [
                        libc::timespec { tv_sec: n.rec.atime.0, tv_nsec: n.rec.atime.1 as i64 },
                        libc::timespec { tv_sec: n.rec.mtime.0, tv_nsec: n.rec.mtime.1 as i64 },
                    ];
                    libc::utimensat(libc::AT_FDCWD, cp.as_ptr(), ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW);
                }
                Ok(())
            };
            let mut by_path: Vec<(u64, PathBuf)> = Vec::new();
            let mut paths2: HashMap<u64, PathBuf> = HashMap::from([(root, tmp.clone())]);
            for (c, parent, name) in &order {
                let path = paths2[parent].join(OsStr::from_bytes(name));
                if st.nodes[c].dir.is_some() {
                    paths2.insert(*c, path.clone());
                }
                by_path.push((*c, path));
            }
            for (c, path) in by_path.iter().rev() {
                if !self.host.is_root(*c) {
                    meta(*c, path)?;
                }
            }
            meta(root, &tmp)?;
            // Nested roots' trees move in (and back out if anything fails).
            let mut moved: Vec<&(u64, PathBuf)> = Vec::new();
            for n in &nested {
                if let Err(e) = std::fs::rename(self.host.root_path(n.0), &n.1) {
                    for m in moved {
                        let _ = std::fs::rename(&m.1, self.host.root_path(m.0));
                    }
                    return Err(e);
                }
                moved.push(n);
            }
            if let Err(e) = std::fs::rename(&tmp, &final_dir) {
                for m in moved {
                    let _ = std::fs::rename(&m.1, self.host.root_path(m.0));
                }
                return Err(e);
            }
            Ok(())
        })();
        if let Err(e) = build {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        for (c, _) in &nested {
            self.host.detach_root(*c);
        }
        // The model forgets the subtree; its flat data files go.
        let mut freed = Vec::new();
        for (c, parent, name) in order.iter().rev() {
            st.remove_entry(*parent, name);
            if let Some(n) = st.nodes.get_mut(c) {
                n.rec.nlink = 0;
            }
            if let Some(f) = st.maybe_free(*c) {
                freed.push(f);
            }
            // It may still have synced records (made local-only by a pattern
            // change at this mount, not committed yet): drop those too.
            st.freed.insert(*c);
        }
        if let Some(n) = st.nodes.get_mut(&root) {
            n.rec.nlink = 2;
            st.dirty_inodes.insert(root);
        }
        drop(st);
        for f in freed.into_iter().filter(|f| f.regular) {
            let _ = self.data_dir(f.data_local).unlink(&f.ino.to_string());
        }
        self.host.attach_root(root).map_err(|e| std::io::Error::from_raw_os_error(e.0))
    }

    /// Native roots whose path the ignore patterns no longer match become
    /// synced again: their host tree is taken into the model (file data
    /// hard-linked, else copied, into working copies, queued for hashing),
    /// then removed. On any error the root stays as it was (warned).
    fn import_unmatched_roots(&self) {
        let cands: Vec<(u64, Vec<u8>)> = {
            let st = self.lock();
            self.host
                .roots()
                .into_iter()
                .filter_map(|i| {
                    let n = st.nodes.get(&i)?;
                    let (parent, name) = (n.rec.parent, n.dname.clone());
                    (n.rec.nlink > 0 && !self.local_for(&st, parent, &name, true)).then_some((i, name))
                })
                .collect()
        };
        let mut done = false;
        for (ino, name) in cands {
            match self.import_one(ino) {
                Ok(files) => {
                    done = true;
                    tracing::info!("native root {} no longer matches the ignore patterns: {files} files are synced now", String::from_utf8_lossy(&name));
                }
                Err(e) => tracing::warn!("native root inode {ino} no longer matches the ignore patterns but stays local-only: {e}"),
            }
        }
        if done {
            if let Err(e) = self.commit(Durability::Immediate, true, None) {
                tracing::warn!("committing imported native roots: {e}");
            }
        }
    }

    fn import_one(&self, root: u64) -> std::io::Result<usize> {
        use std::os::unix::fs::MetadataExt;
        let top = self.host.root_path(root);
        let ts = |s: i64, ns: i64| (s, ns as u32);
        let rec_of = |m: &std::fs::Metadata, parent: u64| InodeRec {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            size: if m.is_dir() { 4096 } else { m.size() },
            blocks: if m.is_dir() { 8 } else { m.blocks() },
            nlink: if m.is_dir() { 2 } else { 0 },
            rdev: m.rdev() as u32,
            atime: ts(m.atime(), m.atime_nsec()),
            mtime: ts(m.mtime(), m.mtime_nsec()),
            ctime: ts(m.ctime(), m.ctime_nsec()),
            parent: if m.is_dir() { parent } else { 0 },
            next_cookie: 3,
        };
        let xattrs_of = |p: &Path| -> BTreeMap<Vec<u8>, Vec<u8>> {
            let mut out = BTreeMap::new();
            let Ok(cp) = std::ffi::CString::new(p.as_os_str().as_bytes()) else { return out };
            let mut names = vec![0u8; 65536];
            let n = unsafe { libc::llistxattr(cp.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
            if n <= 0 {
                return out;
            }
            for k in names[..n as usize].split(|b| *b == 0).filter(|k| !k.is_empty() && !k.starts_with(b"system.posix_acl_")) {
                let Ok(kc) = std::ffi::CString::new(k) else { continue };
                let mut v = vec![0u8; 65536];
                let r = unsafe { libc::lgetxattr(cp.as_ptr(), kc.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
                if r >= 0 {
                    v.truncate(r as usize);
                    out.insert(k.to_vec(), v);
                }
            }
            out
        };
        let mut st = self.lock();
        // Build every node first; nothing enters the model until all data is linked.
        let mut made: Vec<(u64, Node)> = Vec::new();
        let mut entries: Vec<(u64, Vec<u8>, u64)> = Vec::new();
        let mut by_host: HashMap<u64, u64> = HashMap::new();
        let mut linked: Vec<u64> = Vec::new();
        let mut stack = vec![(top.clone(), root)];
        let r = (|| -> std::io::Result<()> {
            while let Some((dir, dino)) = stack.pop() {
                for e in std::fs::read_dir(&dir)? {
                    let e = e?;
                    let path = e.path();
                    let m = std::fs::symlink_metadata(&path)?;
                    let name = e.file_name().as_bytes().to_vec();
                    if !m.is_dir() {
                        if let Some(&i) = by_host.get(&m.ino()) {
                            entries.push((dino, name, i));
                            continue;
                        }
                    }
                    let ino = st.alloc_ino();
                    let mut node = Node::new(rec_of(&m, dino));
                    node.xattrs = xattrs_of(&path);
                    if m.is_dir() {
                        node.dir = Some(Box::default());
                        stack.push((path, ino));
                    } else if m.file_type().is_symlink() {
                        node.symlink = Some(std::fs::read_link(&path)?.as_os_str().as_bytes().to_vec());
                    } else if m.is_file() {
                        let wc = self.wc.path().join(ino.to_string());
                        if std::fs::hard_link(&path, &wc).is_err() {
                            std::fs::copy(&path, &wc)?;
                        }
                        linked.push(ino);
                        node.content_gen = 1;
                        by_host.insert(m.ino(), ino);
                    }
                    entries.push((dino, name, ino));
                    made.push((ino, node));
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            for i in linked {
                let _ = self.wc.unlink(&i.to_string());
            }
            return Err(e);
        }
        let root_meta = std::fs::symlink_metadata(&top)?;
        let files = linked.len();
        for (i, n) in made {
            for (k, v) in &n.xattrs {
                st.dirty_xattrs.insert((i, k.clone()), Some(v.clone()));
            }
            st.nodes.insert(i, n);
            st.dirty_inodes.insert(i);
        }
        let root_xattrs = xattrs_of(&top);
        // Parents before children: entries were collected top-down.
        for (p, name, c) in &entries {
            st.add_entry(*p, name, *c);
            if let Some(n) = st.nodes.get_mut(c) {
                if n.dir.is_some() {
                    if let Some(pn) = st.nodes.get_mut(p) {
                        pn.rec.nlink += 1;
                    }
                } else {
                    n.rec.nlink += 1;
                }
            }
        }
        let mut entry = None;
        if let Some(n) = st.nodes.get_mut(&root) {
            let m = rec_of(&root_meta, n.rec.parent);
            (n.rec.mode, n.rec.uid, n.rec.gid, n.rec.atime, n.rec.mtime, n.rec.ctime) = (m.mode, m.uid, m.gid, m.atime, m.mtime, m.ctime);
            n.local = false;
            n.data_local = false;
            n.xattrs = root_xattrs.clone();
            entry = Some((n.rec.parent, n.dname.clone()));
        }
        for (k, v) in root_xattrs {
            st.dirty_xattrs.insert((root, k), Some(v));
        }
        st.dirty_inodes.insert(root);
        if let Some((p, name)) = entry {
            // Its own name moves to the synced tables; the parent's stored
            // link count now counts it.
            st.repoint_entry(p, &name, root);
            st.dirty_inodes.insert(p);
        }
        self.host.detach_root(root);
        for i in &linked {
            self.queue_hash(&mut st, *i);
        }
        drop(st);
        if let Err(e) = std::fs::remove_dir_all(&top) {
            tracing::warn!("removing the imported native root tree {}: {e}", top.display());
        }
        Ok(files)
    }

    fn tell_root(&self, ino: u64) {
        let l = self.root_listener.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(l) = l {
            l(ino);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where a file's bytes live: the local-only directory or `wc/`.
    fn data_dir(&self, data_local: bool) -> &BackDir {
        if data_local {
            &self.local
        } else {
            &self.wc
        }
    }

    /// Is `name` in `parent` local-only (for a new entry of that kind)?
    fn local_for(&self, st: &State, parent: u64, name: &[u8], is_dir: bool) -> bool {
        if st.is_local(parent) {
            return true;
        }
        match &self.policy {
            Some(p) => p.matches(&join_path(&st.dir_path(parent), name), is_dir),
            None => false,
        }
    }

    /// The inodes whose side changes if `ino` (named `name` in `parent`)
    /// becomes `local`, with its subtree re-evaluated by path:
    /// (ino, local, parent, name). EXDEV if a file with several links would
    /// change sides (`strict`; otherwise such files are left alone).
    fn plan_sides(&self, st: &State, ino: u64, local: bool, parent: u64, name: &[u8], strict: bool) -> Result<Vec<(u64, bool, u64, Vec<u8>)>> {
        let mut out = Vec::new();
        let start_path = if self.policy.is_some() && !local { join_path(&st.dir_path(parent), name) } else { Vec::new() };
        let mut stack = vec![(ino, local, parent, name.to_vec(), start_path)];
        while let Some((i, local, parent, name, path)) = stack.pop() {
            let Some(n) = st.nodes.get(&i) else { continue };
            if !local && self.host.is_root(i) {
                // A native root's tree is taken into the model afterwards
                // (`import_unmatched_roots`), or at a rename refused (EXDEV).
                continue;
            }
            if n.local != local {
                if n.dir.is_none() && n.rec.nlink > 1 {
                    if strict {
                        return err(libc::EXDEV);
                    }
                    continue;
                }
                out.push((i, local, parent, name.clone()));
            }
            if let Some(d) = &n.dir {
                if !local && self.policy.is_none() && !d.by_name.values().any(|(c, _)| st.is_local(*c)) {
                    continue; // nothing below can change
                }
                for (cname, (c, _)) in &d.by_name {
                    let Some(cn) = st.nodes.get(c) else { continue };
                    let cpath = if local || self.policy.is_none() { Vec::new() } else { join_path(&path, cname) };
                    let cl = local || self.policy.as_ref().map(|p| p.matches(&cpath, cn.dir.is_some())).unwrap_or(false);
                    stack.push((*c, cl, i, cname.clone(), cpath));
                }
            }
        }
        Ok(out)
    }

    /// Moves inodes to their new side (see [`Inner::plan_sides`]): their
    /// bytes (renameat between the backing directories; a file stays
    /// where it is if that fails, e.g. across filesystems) and every
    /// record of theirs is rewritten on the new side at the next commit.
    fn apply_sides(&self, st: &mut State, plan: &[(u64, bool, u64, Vec<u8>)]) {
        for (ino, local, parent, name) in plan {
            let (ino, local) = (*ino, *local);
            let Some(n) = st.nodes.get_mut(&ino) else { continue };
            n.local = local;
            let reg = is_reg(n.rec.mode);
            if reg && n.data_local != local {
                let fname = ino.to_string();
                let (from, to) = (self.data_dir(n.data_local), self.data_dir(local));
                if !from.exists(&fname) {
                    n.data_local = local;
                } else if let Err(e) = from.rename_to(&fname, to, &fname) {
                    tracing::warn!("moving the bytes of inode {ino} between {} and {}: {e}; they stay", from.path().display(), to.path().display());
                } else {
                    n.data_local = local;
                }
            }
            if reg && !local {
                // Now synced: its content enters the store.
                n.content_gen += 1;
            }
            let xattrs: Vec<(Vec<u8>, Vec<u8>)> = n.xattrs.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let children: Vec<(Vec<u8>, (u64, u64))> =
                n.dir.as_ref().map(|d| d.by_name.iter().map(|(k, v)| (k.clone(), *v)).collect()).unwrap_or_default();
            let opens = n.opens;
            st.dirty_inodes.insert(ino);
            st.dirty_inodes.insert(*parent);
            for (k, v) in xattrs {
                st.dirty_xattrs.insert((ino, k), Some(v));
            }
            for (k, v) in children {
                st.dirty_dirents.insert((ino, k), Some(v));
            }
            if let Some(e) = st.child(*parent, name) {
                st.dirty_dirents.insert((*parent, name.clone()), Some(e));
            }
            if local {
                st.hash_queued.remove(&ino);
            } else if reg && opens == 0 {
                self.queue_hash(st, ino);
            }
        }
    }

    fn queue_hash(&self, st: &mut State, ino: u64) {
        if st.hash_queued.insert(ino) {
            let tx = self.hash_tx.lock().unwrap_or_else(|p| p.into_inner());
            match tx.as_ref() {
                Some(tx) if tx.send((ino, std::time::Instant::now() + HASH_DELAY)).is_ok() => {}
                _ => {
                    st.hash_queued.remove(&ino);
                }
            }
        }
    }

    /// One group commit: everything dirty in one redb transaction.
    /// `force` commits even when nothing is dirty (to make earlier
    /// non-durable content transactions durable); `clean` sets the flag.
    fn commit(&self, durability: Durability, force: bool, clean: Option<bool>) -> std::result::Result<(), redb::Error> {
        let mut txn = self.begin_write()?;
        txn.set_durability(durability)?;
        // Content transactions before ours become durable with ours.
        let covered = if matches!(durability, Durability::Immediate) {
            std::mem::take(&mut *self.nondurable.lock().unwrap_or_else(|p| p.into_inner()))
        } else {
            HashSet::new()
        };
        // Drain after taking the writer: a content transaction that
        // committed before us saw only inodes we now include.
        let (inodes, dirents, xattrs, freed, freed_local, loc, next_ino) = {
            let mut st = self.lock();
            let st = &mut *st;
            let any_local = self.local_tables;
            let inodes: Vec<InodeChange> = std::mem::take(&mut st.dirty_inodes)
                .into_iter()
                .map(|i| {
                    let v = st.nodes.get(&i).map(|n| {
                        let mut rec = n.rec.clone();
                        if any_local && !n.local {
                            // The store sees only synced subdirectories.
                            if let Some(d) = &n.dir {
                                let local_subdirs = d
                                    .by_name
                                    .values()
                                    .filter(|(c, _)| st.nodes.get(c).map(|c| c.local && c.dir.is_some()).unwrap_or(false))
                                    .count() as u32;
                                rec.nlink = rec.nlink.saturating_sub(local_subdirs);
                            }
                        }
                        (rec, n.symlink.clone())
                    });
                    (i, v)
                })
                .collect();
            let dirents = std::mem::take(&mut st.dirty_dirents);
            let xattrs = std::mem::take(&mut st.dirty_xattrs);
            // Which of the inodes named here are local-only now.
            let mut loc = HashSet::new();
            if any_local {
                let mut mark = |i: u64| {
                    if st.nodes.get(&i).map(|n| n.local).unwrap_or(false) {
                        loc.insert(i);
                    }
                };
                for (i, _) in &inodes {
                    mark(*i);
                }
                for ((p, _), v) in &dirents {
                    mark(*p);
                    if let Some((c, _)) = v {
                        mark(*c);
                    }
                }
                for (i, _) in xattrs.keys() {
                    mark(*i);
                }
            }
            (inodes, dirents, xattrs, std::mem::take(&mut st.freed), std::mem::take(&mut st.freed_local), loc, st.next_ino)
        };
        let empty = inodes.is_empty() && dirents.is_empty() && xattrs.is_empty() && freed.is_empty() && freed_local.is_empty();
        let pending = self.content_pending.swap(false, Ordering::SeqCst);
        if empty && !force && !pending && clean.is_none() {
            txn.abort()?;
            return Ok(());
        }
        let r = self.write_commit(&txn, &inodes, &dirents, &xattrs, &freed, &freed_local, &loc, next_ino, clean);
        let r = match r {
            Ok(v) => txn.commit().map_err(redb::Error::from).map(|_| v),
            Err(e) => Err(e),
        };
        match r {
            Ok((seq, dc, db)) => {
                self.sync_pos.fetch_max(seq, Ordering::SeqCst);
                self.bump_counters(dc, db);
                Ok(())
            }
            Err(e) => {
                self.nondurable.lock().unwrap_or_else(|p| p.into_inner()).extend(covered);
                if is_io_error(&e) {
                    // redb refuses every later transaction on this handle.
                    self.db_broken.store(true, Ordering::SeqCst);
                    if self.store_trouble.due() {
                        tracing::error!("store: commit failed ({e}); changes stay queued, the database is reopened for the next commit (repeated at most once a minute)");
                    }
                }
                // Put the changes back so the next commit retries them.
                if pending {
                    self.content_pending.store(true, Ordering::SeqCst);
                }
                let mut st = self.lock();
                for (i, _) in inodes {
                    if st.nodes.contains_key(&i) {
                        st.dirty_inodes.insert(i);
                    }
                }
                for (k, v) in dirents {
                    st.dirty_dirents.entry(k).or_insert(v);
                }
                for (k, v) in xattrs {
                    st.dirty_xattrs.entry(k).or_insert(v);
                }
                st.freed.extend(freed);
                st.freed_local.extend(freed_local);
                Err(e)
            }
        }
    }

    fn bump_counters(&self, dc: i64, db: i64) {
        let f = |a: &AtomicU64, d: i64| {
            let _ = a.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some((v as i64 + d).max(0) as u64));
        };
        f(&self.chunk_count, dc);
        f(&self.chunk_bytes, db);
    }

    /// Writes one group commit. Synced inodes, names and xattrs go to the
    /// main tables with journal records; local-only ones (`loc`) to the
    /// LOCAL_* tables without any. An inode or name that changed sides is
    /// removed from the other side (for the synced side that is journaled
    /// as its disappearance, and a synced file's manifest is dropped).
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn write_commit(
        &self,
        txn: &redb::WriteTransaction,
        inodes: &[(u64, Option<(InodeRec, Option<Vec<u8>>)>)],
        dirents: &HashMap<(u64, Vec<u8>), Option<(u64, u64)>>,
        xattrs: &HashMap<(u64, Vec<u8>), Option<Vec<u8>>>,
        freed: &HashSet<u64>,
        freed_local: &HashSet<u64>,
        loc: &HashSet<u64>,
        next_ino: u64,
        clean: Option<bool>,
    ) -> std::result::Result<(u64, i64, i64), redb::Error> {
        let mut seq = self.sync_pos.load(Ordering::SeqCst);
        let mut journal: Vec<JournalRecord> = Vec::new();
        let has_local = self.local_tables || !freed_local.is_empty();
        let (mut dc, mut db) = (0i64, 0i64);
        {
            let mut t = txn.open_table(DIRENTS)?;
            let mut lt = txn.open_table(LOCAL_DIRENTS)?;
            for ((p, name), v) in dirents {
                let local = loc.contains(p) || matches!(v, Some((c, _)) if loc.contains(c));
                match v {
                    Some((child, cookie)) if !local => {
                        t.insert((*p, &name[..]), (*child, *cookie))?;
                        journal.push(JournalRecord::Linked { parent: *p, name: name.clone(), child: *child });
                        if has_local {
                            lt.remove((*p, &name[..]))?;
                        }
                    }
                    Some((child, cookie)) => {
                        lt.insert((*p, &name[..]), (*child, *cookie))?;
                        if t.remove((*p, &name[..]))?.is_some() {
                            journal.push(JournalRecord::Unlinked { parent: *p, name: name.clone() });
                        }
                    }
                    None => {
                        let had = t.remove((*p, &name[..]))?.is_some();
                        if had || (!has_local && !loc.contains(p)) {
                            journal.push(JournalRecord::Unlinked { parent: *p, name: name.clone() });
                        }
                        if has_local {
                            lt.remove((*p, &name[..]))?;
                        }
                    }
                }
            }
            let mut t = txn.open_table(INODES)?;
            let mut s = txn.open_table(SYMLINKS)?;
            let mut lt = txn.open_table(LOCAL_INODES)?;
            let mut ls = txn.open_table(LOCAL_SYMLINKS)?;
            for (ino, v) in inodes {
                let Some((rec, link)) = v else { continue };
                if loc.contains(ino) {
                    lt.insert(*ino, &enc(rec)[..])?;
                    if let Some(l) = link {
                        ls.insert(*ino, &l[..])?;
                    }
                    // It left the synced side: drop its record and content.
                    let had = t.remove(*ino)?.is_some();
                    s.remove(*ino)?;
                    let had_manifest = txn.open_table(MANIFESTS)?.get(*ino)?.is_some();
                    if had_manifest {
                        let (c, b) = remove_manifest(txn, *ino)?;
                        dc -= c as i64;
                        db -= b as i64;
                    }
                    if had || had_manifest {
                        journal.push(JournalRecord::Removed { ino: *ino });
                    }
                } else {
                    t.insert(*ino, &enc(rec)[..])?;
                    if let Some(l) = link {
                        s.insert(*ino, &l[..])?;
                    }
                    journal.push(JournalRecord::Attrs { ino: *ino });
                    if has_local {
                        lt.remove(*ino)?;
                        ls.remove(*ino)?;
                    }
                }
            }
            let mut x = txn.open_table(XATTRS)?;
            let mut lx = txn.open_table(LOCAL_XATTRS)?;
            for ((ino, name), v) in xattrs {
                let local = loc.contains(ino) || freed_local.contains(ino);
                match (v, local) {
                    (Some(val), false) => {
                        x.insert((*ino, &name[..]), &val[..])?;
                        if has_local {
                            lx.remove((*ino, &name[..]))?;
                        }
                    }
                    (Some(val), true) => {
                        lx.insert((*ino, &name[..]), &val[..])?;
                        x.remove((*ino, &name[..]))?;
                    }
                    (None, _) => {
                        x.remove((*ino, &name[..]))?;
                        if has_local {
                            lx.remove((*ino, &name[..]))?;
                        }
                    }
                };
                if !freed.contains(ino) && !local {
                    journal.push(JournalRecord::Attrs { ino: *ino });
                }
            }
            for ino in freed {
                t.remove(*ino)?;
                s.remove(*ino)?;
            }
            for ino in freed_local {
                lt.remove(*ino)?;
                ls.remove(*ino)?;
            }
        }
        for ino in freed {
            let (c, b) = remove_manifest(txn, *ino)?;
            dc -= c as i64;
            db -= b as i64;
            journal.push(JournalRecord::Removed { ino: *ino });
        }
        // Coalesce: one Attrs record per inode, none for freed ones.
        let mut seen_attrs = HashSet::new();
        journal.retain(|r| match r {
            JournalRecord::Attrs { ino } => !freed.contains(ino) && seen_attrs.insert(*ino),
            _ => true,
        });
        {
            let mut j = txn.open_table(JOURNAL)?;
            for r in &journal {
                seq += 1;
                j.insert(seq, &enc(r)[..])?;
            }
        }
        bump_chunk_counters(txn, dc, db)?;
        let mut m = txn.open_table(META)?;
        m.insert("next_ino", next_ino)?;
        if let Some(c) = clean {
            m.insert("clean", c as u64)?;
        }
        Ok((seq, dc, db))
    }

    /// Cuts, hashes and stores the working copy of `ino` if its content
    /// changed since the last time. Returns once the manifest is committed
    /// (non-durably; the next group commit makes it durable).
    fn hash_file(&self, ino: u64) -> Result<()> {
        let hl = {
            let mut st = self.lock();
            st.hash_queued.remove(&ino);
            match st.nodes.get(&ino) {
                Some(n) if is_reg(n.rec.mode) && !n.local && n.content_gen != n.hashed_gen => n.hash_lock.clone(),
                _ => return Ok(()),
            }
        };
        let _g = hl.lock().unwrap_or_else(|p| p.into_inner());
        let (gen, data_local) = {
            let st = self.lock();
            match st.nodes.get(&ino) {
                Some(n) if !n.local && n.content_gen != n.hashed_gen => (n.content_gen, n.data_local),
                _ => return Ok(()),
            }
        };
        let f = match self.data_dir(data_local).open_ro(&ino.to_string()) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let mut manifest = Vec::new();
        let size = f.metadata()?.len();
        // Only the data extents are cut and hashed (lseek(2) SEEK_DATA /
        // SEEK_HOLE): holes are not in the manifest, and a restore leaves
        // them unwritten (set_len), so a 1 TiB sparse file costs nothing.
        for (start, end) in data_extents(&f, size)? {
            let reader = std::io::Read::take(ReadAt { file: &f, pos: start }, end - start);
            chunk::chunk_stream(std::io::BufReader::with_capacity(1 << 20, reader), |off, b| {
                manifest.push(ChunkRef { offset: start + off, len: b.len() as u32, hash: *blake3::hash(b).as_bytes() });
                Ok(())
            })?;
        }
        let blocks = f.metadata().map(|m| std::os::unix::fs::MetadataExt::blocks(&m)).unwrap_or(0);
        let mut txn = self.begin_write().map_err(db_errno)?;
        txn.set_durability(Durability::None).map_err(db_errno)?;
        {
            let st = self.lock();
            match st.nodes.get(&ino) {
                Some(n) if n.content_gen == gen && !n.local => {}
                _ => {
                    let _ = txn.abort();
                    return Ok(()); // freed, changed again (a later release re-hashes) or now local-only
                }
            }
        }
        let stored = (|| -> std::result::Result<Option<(u64, i64, i64)>, redb::Error> {
            let (mut dc, mut db) = (0i64, 0i64);
            {
                let mut refs = txn.open_table(CHUNK_REFS)?;
                let mut chunks = txn.open_table(CHUNKS)?;
                let mut buf = Vec::new();
                for c in &manifest {
                    let cur = refs.get(&c.hash[..])?.map(|g| g.value());
                    match cur {
                        Some(n) => {
                            refs.insert(&c.hash[..], n + 1)?;
                        }
                        None => {
                            buf.resize(c.len as usize, 0);
                            if f.read_exact_at(&mut buf, c.offset).is_err() || blake3::hash(&buf).as_bytes() != &c.hash {
                                return Ok(None); // changed under us
                            }
                            chunks.insert(&c.hash[..], &buf[..])?;
                            refs.insert(&c.hash[..], 1)?;
                            dc += 1;
                            db += c.len as i64;
                        }
                    }
                }
            }
            let (c, b) = remove_manifest(&txn, ino)?;
            dc -= c as i64;
            db -= b as i64;
            txn.open_table(MANIFESTS)?.insert(ino, &enc(&manifest)[..])?;
            let seq = self.sync_pos.fetch_add(1, Ordering::SeqCst) + 1;
            let rec = JournalRecord::Content {
                ino,
                size,
                chunks: manifest.len() as u32,
                manifest_hash: *blake3::hash(&enc(&manifest)).as_bytes(),
            };
            txn.open_table(JOURNAL)?.insert(seq, &enc(&rec)[..])?;
            bump_chunk_counters(&txn, dc, db)?;
            Ok(Some((seq, dc, db)))
        })();
        match stored {
            Ok(Some((_, dc, db))) => {
                txn.commit().map_err(db_errno)?;
                self.nondurable.lock().unwrap_or_else(|p| p.into_inner()).insert(ino);
                self.content_pending.store(true, Ordering::SeqCst);
                self.bump_counters(dc, db);
                let mut st = self.lock();
                if let Some(n) = st.nodes.get_mut(&ino) {
                    if n.hashed_gen < gen {
                        n.hashed_gen = gen;
                    }
                    // Only if nothing changed the file since we checked.
                    if n.content_gen == gen && (n.rec.size != size || n.rec.blocks != blocks) {
                        n.rec.size = size;
                        n.rec.blocks = blocks;
                        st.dirty_inodes.insert(ino);
                    }
                }
                Ok(())
            }
            Ok(None) => {
                let _ = txn.abort();
                Ok(())
            }
            Err(e) => {
                let _ = txn.abort();
                tracing::error!("storing content of inode {ino}: {e}");
                Err(Errno::EIO)
            }
        }
    }

    /// Opens (and if needed restores) the working copy of a regular file.
    fn open_wc(&self, ino: u64) -> Result<File> {
        let data_local = self.lock().node(ino)?.data_local;
        let name = ino.to_string();
        match self.data_dir(data_local).open_rw(&name) {
            Ok(f) => return Ok(f),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e.into()),
        }
        // A rename across the local-only boundary may have moved the bytes
        // between reading the side and opening (`apply_sides` moves them
        // under the lock): look again with the lock held, so that ENOENT
        // means the file is really missing — never rebuild or empty a file
        // that is only elsewhere.
        let (data_local, local, mtime) = {
            let st = self.lock();
            let n = st.node(ino)?;
            match self.data_dir(n.data_local).open_rw(&name) {
                Ok(f) => return Ok(f),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e.into()),
            }
            (n.data_local, n.local, n.rec.mtime)
        };
        let dir = self.data_dir(data_local);
        if local {
            // Local-only bytes have no copy in the store.
            let f = dir.create(&name, false)?;
            set_mtime(&f, mtime);
            return Ok(f);
        }
        // Missing: rebuild from the manifest, or start empty.
        let tmp = format!(".restore-{ino}");
        let f = dir.create(&tmp, true)?;
        let size = self.lock().node(ino)?.rec.size;
        let rtx = self.begin_read().map_err(db_errno)?;
        let mt = rtx.open_table(MANIFESTS).map_err(db_errno)?;
        let manifest: Vec<ChunkRef> = match mt.get(ino).map_err(db_errno)? {
            Some(g) => dec(g.value()).map_err(|_| Errno::EIO)?,
            None => Vec::new(),
        };
        let ct = rtx.open_table(CHUNKS).map_err(db_errno)?;
        for c in &manifest {
            let g = ct.get(&c.hash[..]).map_err(db_errno)?.ok_or_else(|| {
                tracing::error!("restore of inode {ino}: chunk {} missing", hex(&c.hash));
                Errno::EIO
            })?;
            f.write_all_at(g.value(), c.offset)?;
        }
        f.set_len(size)?;
        set_mtime(&f, mtime);
        dir.rename_to(&tmp, dir, &name)?;
        Ok(f)
    }

    /// Keeps `pool_size` empty working copies ready, under reserved inode
    /// numbers; refills when half are used.
    fn pool_loop(self: &Arc<Self>) {
        let low = |st: &State, i: usize| st.pool[i].len() <= self.pool_size[i].load(Ordering::Relaxed) / 2
            && st.pool[i].len() < self.pool_size[i].load(Ordering::Relaxed);
        loop {
            let (side, range) = {
                let mut st = self.lock();
                while !self.stopping.load(Ordering::SeqCst) && !low(&st, POOL_WC) && !low(&st, POOL_LOCAL) {
                    st = self.pool_cv.wait_timeout(st, std::time::Duration::from_millis(500)).unwrap_or_else(|p| p.into_inner()).0;
                }
                if self.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let side = if low(&st, POOL_WC) { POOL_WC } else { POOL_LOCAL };
                let k = self.pool_size[side].load(Ordering::Relaxed).saturating_sub(st.pool[side].len()) as u64;
                let first = st.next_ino;
                st.next_ino += k;
                (side, first..first + k)
            };
            let dir = self.data_dir(side == POOL_LOCAL);
            let mut made = Vec::new();
            let mut failed = None;
            for ino in range.clone() {
                match dir.create_new(&ino.to_string()) {
                    Ok(_) => made.push(ino),
                    Err(e) => {
                        failed = Some((ino, e));
                        break;
                    }
                }
            }
            {
                let mut st = self.lock();
                st.pool[side].extend(made.into_iter().rev());
                if let Some((ino, _)) = &failed {
                    // Give back the numbers not used, if nobody took one since.
                    if st.next_ino == range.end {
                        st.next_ino = *ino;
                    }
                }
            }
            if let Some((ino, e)) = failed {
                // A full disk: say so once a minute, retry every second.
                if self.pool_trouble[side].due() {
                    tracing::warn!("backing-file pool: {}/{ino}: {e} (retrying every second)", dir.path().display());
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }

    fn commit_loop(self: &Arc<Self>) {
        let mut stop = self.stop.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let (g, _) = self.stop_cv.wait_timeout(stop, self.commit_interval).unwrap_or_else(|p| p.into_inner());
            stop = g;
            if *stop {
                return;
            }
            drop(stop);
            match self.commit(Durability::Immediate, false, None) {
                Err(e) => {
                    if self.store_trouble.due() {
                        tracing::error!("group commit failed: {e}");
                    }
                }
                Ok(()) => {
                    if self.store_trouble.reset() {
                        tracing::warn!("store: commits work again");
                    }
                }
            }
            stop = self.stop.lock().unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Sets a backing file's mtime (atime untouched).
fn set_mtime(f: &File, t: (i64, u32)) {
    let ts = [libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }, libc::timespec { tv_sec: t.0 as _, tv_nsec: t.1 as _ }];
    // SAFETY: futimens reads two timespecs from a valid array.
    unsafe { libc::futimens(f.as_raw_fd(), ts.as_ptr()) };
}

fn join_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

fn db_errno<E: std::fmt::Display>(e: E) -> Errno {
    tracing::error!("store: {e}");
    Errno::EIO
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn kind_of(mode: u32) -> u32 {
    (mode & S_IFMT) >> 12
}

fn attr_of(ino: u64, n: &Node) -> Attr {
    let r = &n.rec;
    Attr {
        ino,
        size: r.size,
        blocks: r.blocks,
        atime: r.atime.0,
        atime_nsec: r.atime.1,
        mtime: r.mtime.0,
        mtime_nsec: r.mtime.1,
        ctime: r.ctime.0,
        ctime_nsec: r.ctime.1,
        mode: r.mode,
        nlink: r.nlink,
        uid: r.uid,
        gid: r.gid,
        rdev: r.rdev,
        blksize: BLKSIZE,
    }
}

/// Size, blocks and (if newer, e.g. after passthrough writes) mtime of an
/// open working copy.
fn fstat_into(f: &File, a: &mut Attr) {
    if let Ok(m) = f.metadata() {
        use std::os::unix::fs::MetadataExt;
        a.size = m.size();
        a.blocks = m.blocks();
        let wm = (m.mtime(), m.mtime_nsec() as u32);
        if wm > (a.mtime, a.mtime_nsec) {
            (a.mtime, a.mtime_nsec) = wm;
            if wm > (a.ctime, a.ctime_nsec) {
                (a.ctime, a.ctime_nsec) = wm;
            }
        }
    }
}

impl Fs {
    /// Opens (creating if missing) the store. (Named `open_store` because
    /// [`Fs::open`] is open(2).) For a `Dir` store takes an
    /// exclusive flock on `DIR/ringfs.lock` (holding our pid), opens
    /// `DIR/store.redb`, checks the schema version and, after an unclean
    /// shutdown, frees unlinked inodes, deletes working copies that have no
    /// inode and re-hashes the others in the background.
    ///
    /// Errors: [`StoreError::Locked`] (another process holds it),
    /// [`StoreError::NewerSchema`], [`StoreError::Corrupt`] (redb cannot
    /// open it), [`StoreError::Io`].
    pub fn open_store(cfg: Config) -> std::result::Result<Fs, StoreError> {
        let policy = IgnorePolicy::new(&cfg.local.ignore).map_err(|(pattern, reason)| StoreError::Ignore { pattern, reason })?;
        let policy = if policy.is_empty() { None } else { Some(policy) };
        let (db, wc_dir, desc, dir, lock, tmp, dbpath) = match &cfg.store {
            StoreLocation::Dir(d) => {
                std::fs::create_dir_all(d).map_err(|e| io_err(d, e))?;
                let lock = take_lock(d)?;
                let wc = d.join("wc");
                std::fs::create_dir_all(&wc).map_err(|e| io_err(&wc, e))?;
                let db = open_db(d)?;
                (db, wc, d.display().to_string(), Some(d.clone()), Some(lock), None, d.join("store.redb"))
            }
            StoreLocation::Memory => {
                let tmp = tempfile::Builder::new().prefix("ringfs-wc-").tempdir().map_err(|e| io_err(&std::env::temp_dir(), e))?;
                let db = Database::builder()
                    .create_with_backend(redb::backends::InMemoryBackend::new())
                    .map_err(|e| corrupt(Path::new("memory"), e))?;
                (db, tmp.path().to_path_buf(), "memory".to_string(), None, None, Some(tmp), PathBuf::from("memory"))
            }
        };
        let (local_dir, tmp_local) = match (&cfg.local.dir, &dir) {
            (Some(l), _) => (l.clone(), None),
            (None, Some(d)) => (d.join("local"), None),
            (None, None) => {
                let t = tempfile::Builder::new().prefix("ringfs-local-").tempdir().map_err(|e| io_err(&std::env::temp_dir(), e))?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let wc = BackDir::open(&wc_dir).map_err(|e| io_err(&wc_dir, e))?;
        let local = BackDir::open(&local_dir).map_err(|e| io_err(&local_dir, e))?;
        if !wc.same_fs(&local) {
            tracing::warn!(
                "local-only directory {} is on another filesystem than {}: files renamed across the boundary keep their bytes where they are",
                local_dir.display(),
                wc_dir.display()
            );
        }
        let roots_dir = local_dir.join("roots");
        let host = HostTrees::open_dir(&roots_dir).map_err(|e| io_err(&roots_dir, e))?;
        let loaded = load(&db, &dbpath, &wc, &local)?;
        if !loaded.clean {
            tracing::warn!("store {desc} was not shut down cleanly; recovered");
        }
        let local_tables = policy.is_some() || loaded.state.nodes.values().any(|n| n.local);
        let inner = Arc::new(Inner {
            db: RwLock::new(Some(db)),
            db_broken: AtomicBool::new(false),
            nondurable: Mutex::new(HashSet::new()),
            wc_dir,
            wc,
            local,
            host,
            native_roots: cfg.local.native_roots,
            root_listener: Mutex::new(None),
            policy,
            local_tables,
            store_desc: desc,
            store_dir: dir,
            state: Mutex::new(loaded.state),
            next_fh: AtomicU64::new(1),
            sync_pos: AtomicU64::new(loaded.sync_pos),
            chunk_count: AtomicU64::new(loaded.chunk_count),
            chunk_bytes: AtomicU64::new(loaded.chunk_bytes),
            hash_tx: Mutex::new(None),
            content_pending: AtomicBool::new(false),
            pool_cv: Condvar::new(),
            pool_size: [std::sync::atomic::AtomicUsize::new(POOL_MIN), std::sync::atomic::AtomicUsize::new(0)],
            pool_trouble: Default::default(),
            store_trouble: LogThrottle::default(),
            stopping: AtomicBool::new(false),
            stop: Mutex::new(false),
            stop_cv: Condvar::new(),
            abandon: AtomicBool::new(false),
            shut: AtomicBool::new(false),
            commit_interval: cfg.commit_interval,
            lock_file: Mutex::new(lock),
            _tmp: tmp,
            _tmp_local: tmp_local,
        });
        inner.attach_roots();
        let mut threads = Vec::new();
        let (tx, rx) = mpsc::channel::<(u64, std::time::Instant)>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..cfg.hash_threads.max(1) {
            let inner = inner.clone();
            let rx = rx.clone();
            threads.push(spawn_named(format!("ringfs-hash-{i}"), move || {
                background_priority();
                loop {
                    let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    let Ok((ino, not_before)) = job else { return };
                    if inner.abandon.load(Ordering::SeqCst) {
                        continue;
                    }
                    // A released file is often read back (or written again)
                    // at once: let that go first. Shutdown does not wait.
                    let wait = not_before.saturating_duration_since(std::time::Instant::now());
                    if !wait.is_zero() && !inner.stopping.load(Ordering::SeqCst) {
                        std::thread::sleep(wait);
                    }
                    if let Err(e) = inner.hash_file(ino) {
                        tracing::warn!("hashing inode {ino}: {e}");
                    }
                }
            })?);
        }
        *inner.hash_tx.lock().unwrap() = Some(tx);
        let pool = inner.clone();
        threads.push(spawn_named("ringfs-wcpool".into(), move || pool.pool_loop())?);
        let committer = inner.clone();
        threads.push(spawn_named("ringfs-commit".into(), move || committer.commit_loop())?);
        {
            let mut st = inner.lock();
            for ino in loaded.rehash {
                inner.queue_hash(&mut st, ino);
            }
            // The ignore patterns may differ from the last mount's: put
            // every inode on the side its path now calls for.
            let top: Vec<(Vec<u8>, u64, bool)> = st
                .node(ROOT)
                .ok()
                .and_then(|r| r.dir.as_ref())
                .map(|d| d.by_name.iter().map(|(k, (c, _))| (k.clone(), *c, st.nodes.get(c).map(|n| n.dir.is_some()).unwrap_or(false))).collect())
                .unwrap_or_default();
            let mut plan = Vec::new();
            for (name, c, dir) in top {
                let l = inner.policy.as_ref().map(|p| p.matches(&name, dir)).unwrap_or(false);
                if let Ok(p) = inner.plan_sides(&st, c, l, ROOT, &name, false) {
                    plan.extend(p);
                }
            }
            if !plan.is_empty() {
                tracing::info!("ignore patterns changed: {} inodes change sides", plan.len());
                inner.apply_sides(&mut st, &plan);
            }
        }
        inner.import_unmatched_roots();
        if inner.native_roots {
            inner.migrate_flat_roots();
        }
        Ok(Fs { inner, threads: Mutex::new(threads) })
    }

    fn attr_now(&self, ino: u64) -> Result<Attr> {
        if self.inner.host.is_root(ino) {
            return self.inner.host.getattr(ino);
        }
        let (mut a, f) = {
            let st = self.inner.lock();
            let n = st.node(ino)?;
            (attr_of(ino, n), n.file.clone())
        };
        if let Some(f) = f {
            fstat_into(&f.file, &mut a);
        }
        Ok(a)
    }

    /// lookup: the attributes of `name` in directory `parent`; adds one to
    /// its lookup count. ENOENT, ENOTDIR, ENAMETOOLONG.
    pub fn lookup(&self, _c: &Caller, parent: u64, name: &OsStr) -> Result<Attr> {
        let name = name.as_bytes();
        if self.inner.host.serves(parent) {
            return self.inner.host.lookup(parent, name);
        }
        if name.len() > NAME_MAX {
            return err(libc::ENAMETOOLONG);
        }
        let ino = {
            let mut st = self.inner.lock();
            let p = st.node(parent)?;
            if !is_dir(p.rec.mode) {
                return err(libc::ENOTDIR);
            }
            let ino = match name {
                b"." => parent,
                b".." => p.rec.parent,
                _ => st.child(parent, name).ok_or(Errno(libc::ENOENT))?.0,
            };
            st.node_mut(ino)?.lookups += 1;
            ino
        };
        self.attr_now(ino)
    }

    /// FORGET: drops `n` from the lookup count; frees the inode when it
    /// also has no links and no open handles.
    pub fn forget(&self, ino: u64, n: u64) {
        if is_host_id(ino) {
            return self.inner.host.forget(ino, n);
        }
        let freed = {
            let mut st = self.inner.lock();
            match st.nodes.get_mut(&ino) {
                Some(node) => node.lookups = node.lookups.saturating_sub(n),
                None => return,
            }
            st.maybe_free(ino)
        };
        self.finish_free(freed);
    }

    fn finish_free(&self, f: Option<Freed>) {
        if let Some(f) = f {
            if f.regular {
                let _ = self.inner.data_dir(f.data_local).unlink(&f.ino.to_string());
            }
        }
    }

    /// stat(2) of an inode. Regular files that are open report the size
    /// and allocated blocks of their working copy.
    pub fn getattr(&self, ino: u64, _fh: Option<u64>) -> Result<Attr> {
        if is_host_id(ino) {
            return self.inner.host.getattr(ino);
        }
        self.attr_now(ino)
    }

    /// chmod(2), chown(2), truncate(2)/ftruncate(2), utimensat(2). With
    /// `s.fh` a size change acts on that handle's working copy. Size on a
    /// directory: EISDIR; on other non-regular files: EINVAL.
    pub fn setattr(&self, _c: &Caller, ino: u64, s: &SetAttr) -> Result<Attr> {
        if self.inner.host.serves(ino) {
            return self.inner.host.setattr(ino, s);
        }
        let t = now();
        if let Some(size) = s.size {
            let (file, mode) = {
                let st = self.inner.lock();
                let n = st.node(ino)?;
                let f = match s.fh.and_then(|fh| st.handles.get(&fh)) {
                    Some(h) if h.ino == ino => h.file.clone(),
                    _ => n.file.clone(),
                };
                (f, n.rec.mode)
            };
            if is_dir(mode) {
                return err(libc::EISDIR);
            }
            if !is_reg(mode) {
                return err(libc::EINVAL);
            }
            if size > i64::MAX as u64 {
                return err(libc::EFBIG);
            }
            let blocks = match &file {
                Some(f) => {
                    f.file.set_len(size)?;
                    f.file.metadata().map(|m| std::os::unix::fs::MetadataExt::blocks(&m)).unwrap_or(0)
                }
                None => {
                    let f = self.inner.open_wc(ino)?;
                    f.set_len(size)?;
                    f.metadata().map(|m| std::os::unix::fs::MetadataExt::blocks(&m)).unwrap_or(0)
                }
            };
            let mut st = self.inner.lock();
            let n = st.node_mut(ino)?;
            n.rec.size = size;
            n.rec.blocks = blocks;
            n.rec.mtime = t;
            n.rec.ctime = t;
            n.content_gen += 1;
            let opens = n.opens;
            st.touch_inode(ino);
            if opens == 0 {
                self.inner.queue_hash(&mut st, ino);
            }
        }
        let mut st = self.inner.lock();
        if s.mtime.is_some() {
            // Take in bypassing writes before our futimens below hides them.
            if let Some(f) = st.node(ino)?.file.clone() {
                note_bypass(&mut st, ino, &f);
            }
        }
        let n = st.node_mut(ino)?;
        let mut changed = s.size.is_some();
        if let Some(m) = s.mode {
            n.rec.mode = (n.rec.mode & S_IFMT) | (m & 0o7777);
            changed = true;
        }
        if let Some(u) = s.uid {
            n.rec.uid = u;
            changed = true;
        }
        if let Some(g) = s.gid {
            n.rec.gid = g;
            changed = true;
        }
        if s.kill_suidgid {
            n.rec.mode = killed_privs(n.rec.mode);
            changed = true;
        }
        let pick = |x: SetTime| match x {
            SetTime::Now => t,
            SetTime::At(s, ns) => (s, ns),
        };
        if let Some(a) = s.atime {
            n.rec.atime = pick(a);
            changed = true;
        }
        if let Some(m) = s.mtime {
            n.rec.mtime = pick(m);
            changed = true;
            // Keep the working copy's mtime in step, so that only writes
            // that bypass us make it newer than ours.
            if let Some(f) = &n.file {
                let ts = [
                    libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
                    libc::timespec { tv_sec: n.rec.mtime.0 as _, tv_nsec: n.rec.mtime.1 as _ },
                ];
                unsafe { libc::futimens(f.file.as_raw_fd(), ts.as_ptr()) };
                n.wc_seen = f.file.metadata().ok().map(|m| wc_stamp(&m));
            }
        }
        if let Some(c) = s.ctime {
            n.rec.ctime = c;
        } else if changed {
            n.rec.ctime = t;
        }
        st.touch_inode(ino);
        drop(st);
        self.attr_now(ino)
    }

    /// What a write by a caller without CAP_FSETID does to the mode of
    /// `ino` (`file_remove_privs`, fs/inode.c): clears S_ISUID, and S_ISGID
    /// if S_IXGRP is set, of a non-directory, and then updates ctime.
    /// Nothing (not even ctime) when neither bit would change. Errors:
    /// ENOENT for an unknown inode.
    pub fn kill_suidgid(&self, ino: u64) -> Result<()> {
        if self.inner.host.serves(ino) {
            return self.inner.host.kill_suidgid(ino);
        }
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        let mode = killed_privs(n.rec.mode);
        if mode != n.rec.mode {
            n.rec.mode = mode;
            n.rec.ctime = now();
            st.touch_inode(ino);
        }
        Ok(())
    }

    /// readlink(2): the target bytes. EINVAL if not a symlink.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        if is_host_id(ino) {
            return self.inner.host.readlink(ino);
        }
        let st = self.inner.lock();
        st.node(ino)?.symlink.clone().ok_or(Errno(libc::EINVAL))
    }

    /// Creates an inode of `mode` (type bits included) named `name` in
    /// `parent`, owned by the caller (group from a setgid parent).
    fn make(&self, c: &Caller, parent: u64, name: &OsStr, mode: u32, rdev: u32, link: Option<Vec<u8>>) -> Result<Attr> {
        self.make_in(c, parent, name, mode, rdev, link, false).map(|x| x.0)
    }

    /// As `make`; with `pooled`, a regular file takes a ready working copy
    /// from the pool when there is one (returned true).
    #[allow(clippy::too_many_arguments)]
    fn make_in(&self, c: &Caller, parent: u64, name: &OsStr, mode: u32, rdev: u32, link: Option<Vec<u8>>, pooled: bool) -> Result<(Attr, bool)> {
        let name = name.as_bytes();
        check_name(name)?;
        let t = now();
        let mut st = self.inner.lock();
        st.live_dir(parent)?;
        if is_dot(name) || st.child(parent, name).is_some() {
            return err(libc::EEXIST);
        }
        let p = st.node(parent)?;
        let (pgid, psgid) = (p.rec.gid, p.rec.mode & libc::S_ISGID != 0);
        let dir = is_dir(mode);
        let local = self.inner.local_for(&st, parent, name, dir);
        let mut mode = mode;
        if dir && psgid {
            mode |= libc::S_ISGID;
        }
        let side = if local { POOL_LOCAL } else { POOL_WC };
        let from_pool = if pooled && is_reg(mode) { st.pool[side].pop() } else { None };
        if pooled && is_reg(mode) {
            let size = &self.inner.pool_size[side];
            if from_pool.is_none() {
                // Creates outran the pool: keep more ready.
                let _ = size.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| Some((s * 2).clamp(POOL_MIN, POOL_MAX)));
            }
            if st.pool[side].len() <= size.load(Ordering::Relaxed) / 2 {
                self.inner.pool_cv.notify_one();
            }
        }
        let ino = match from_pool {
            Some(i) => i,
            None => st.alloc_ino(),
        };
        let rec = InodeRec {
            mode,
            uid: c.uid,
            gid: if psgid { pgid } else { c.gid },
            size: if dir { 4096 } else { link.as_ref().map(|l| l.len() as u64).unwrap_or(0) },
            blocks: if dir { 8 } else { 0 },
            nlink: if dir { 2 } else { 1 },
            rdev,
            atime: t,
            mtime: t,
            ctime: t,
            parent: if dir { parent } else { 0 },
            next_cookie: 3,
        };
        let (m, u, g) = (rec.mode, rec.uid, rec.gid);
        let mut node = Node::new(rec);
        node.symlink = link;
        node.lookups = 1;
        node.local = local;
        node.data_local = local;
        let root = dir && local && self.inner.native_roots && !st.is_local(parent);
        st.nodes.insert(ino, node);
        if root {
            // Under the lock: no request can see the directory before its tree exists.
            if let Err(e) = self.inner.host.create_root(ino, m, u, g) {
                tracing::warn!("native root for inode {ino}: making its tree failed ({e}); served as a plain local-only directory");
            }
        }
        st.touch_inode(ino);
        st.add_entry(parent, name, ino);
        if dir {
            st.node_mut(parent)?.rec.nlink += 1;
        }
        st.set_mctime(parent, t);
        Ok((attr_of(ino, st.node(ino)?), from_pool.is_some()))
    }

    /// symlink(2): `name` in `parent` pointing at `target`. +1 lookup.
    /// EEXIST, ENOENT, ENOTDIR, ENAMETOOLONG (name > 255 or target > 4095 bytes).
    pub fn symlink(&self, c: &Caller, parent: u64, name: &OsStr, target: &OsStr) -> Result<Attr> {
        let t = target.as_bytes();
        if self.inner.host.serves(parent) {
            return self.inner.host.symlink(c, parent, name.as_bytes(), t);
        }
        if t.len() > SYMLINK_MAX {
            return err(libc::ENAMETOOLONG);
        }
        if t.is_empty() {
            return err(libc::ENOENT);
        }
        self.make(c, parent, name, S_IFLNK | 0o777, 0, Some(t.to_vec()))
    }

    /// mknod(2): regular files (type 0 or S_IFREG), fifos, sockets, and
    /// character/block devices (uid 0 only, else EPERM). +1 lookup.
    /// Directories or unknown types: EINVAL (use mkdir).
    pub fn mknod(&self, c: &Caller, parent: u64, name: &OsStr, mode: u32, rdev: u32) -> Result<Attr> {
        if self.inner.host.serves(parent) {
            let mode = if mode & S_IFMT == 0 { mode | S_IFREG } else { mode };
            return self.inner.host.mknod(c, parent, name.as_bytes(), mode, rdev);
        }
        let ty = mode & S_IFMT;
        let ty = match ty {
            0 => S_IFREG,
            libc::S_IFREG | libc::S_IFIFO | libc::S_IFSOCK => ty,
            libc::S_IFCHR | libc::S_IFBLK => {
                if c.uid != 0 {
                    return err(libc::EPERM);
                }
                ty
            }
            _ => return err(libc::EINVAL),
        };
        let rdev = if ty == libc::S_IFCHR || ty == libc::S_IFBLK { rdev } else { 0 };
        if ty != S_IFREG {
            return self.make(c, parent, name, ty | (mode & 0o7777), rdev, None);
        }
        // A regular file gets its backing file now, as from creat(2), so that
        // a full disk fails the mknod (ENOSPC) rather than every later open.
        let (a, pooled) = self.make_in(c, parent, name, ty | (mode & 0o7777), 0, None, true)?;
        if !pooled {
            if let Err(e) = self.new_backing_file(a.ino, false) {
                self.unmake(parent, name, a.ino);
                return Err(e);
            }
        }
        Ok(a)
    }

    /// The backing file of a regular file `make_in` just made: the pooled
    /// one (`pooled`), or a new one in its side's directory.
    fn new_backing_file(&self, ino: u64, pooled: bool) -> Result<File> {
        let (data_local, mtime) = {
            let st = self.inner.lock();
            let n = st.node(ino)?;
            (n.data_local, n.rec.mtime)
        };
        let f = self.inner.data_dir(data_local).create(&ino.to_string(), !pooled)?;
        if !pooled {
            // A file made just now is newer than our timestamps; only
            // writes that bypass us may make it newer.
            set_mtime(&f, mtime);
        }
        Ok(f)
    }

    /// mkdir(2): +1 lookup; the parent's nlink grows by one.
    ///
    /// An eligible local-only directory (`native_roots` on, its parent
    /// synced) becomes a native root: its contents live in a host tree
    /// (`LOCAL/roots/<ino>`), it is committed durably before the reply, and
    /// the root listener is told so the daemon can bind-mount it.
    pub fn mkdir(&self, c: &Caller, parent: u64, name: &OsStr, mode: u32) -> Result<Attr> {
        if self.inner.host.serves(parent) {
            return self.inner.host.mkdir(c, parent, name.as_bytes(), mode);
        }
        let a = self.make(c, parent, name, S_IFDIR | (mode & 0o7777), 0, None)?;
        if self.inner.host.is_root(a.ino) {
            if let Err(e) = self.inner.commit(Durability::Immediate, true, None) {
                tracing::warn!("committing native root {}: {e}", a.ino);
            }
            self.inner.tell_root(a.ino);
            return self.inner.host.getattr(a.ino);
        }
        Ok(a)
    }

    /// unlink(2): EISDIR for directories, ENOENT, ENOTDIR. The inode lives
    /// on while looked up or open.
    pub fn unlink(&self, _c: &Caller, parent: u64, name: &OsStr) -> Result<()> {
        let name = name.as_bytes();
        if self.inner.host.serves(parent) {
            return self.inner.host.unlink(parent, name);
        }
        check_name(name)?;
        let t = now();
        let freed = {
            let mut st = self.inner.lock();
            if !is_dir(st.node(parent)?.rec.mode) {
                return err(libc::ENOTDIR);
            }
            if is_dot(name) {
                return err(libc::EISDIR);
            }
            let (child, _) = st.child(parent, name).ok_or(Errno(libc::ENOENT))?;
            if is_dir(st.node(child)?.rec.mode) {
                return err(libc::EISDIR);
            }
            st.remove_entry(parent, name);
            let n = st.node_mut(child)?;
            n.rec.nlink = n.rec.nlink.saturating_sub(1);
            n.rec.ctime = t;
            st.touch_inode(child);
            st.set_mctime(parent, t);
            st.maybe_free(child)
        };
        self.finish_free(freed);
        Ok(())
    }

    /// rmdir(2): ENOTDIR, ENOTEMPTY, EINVAL for ".", ENOENT.
    pub fn rmdir(&self, _c: &Caller, parent: u64, name: &OsStr) -> Result<()> {
        let name = name.as_bytes();
        if self.inner.host.serves(parent) {
            return self.inner.host.rmdir(parent, name);
        }
        check_name(name)?;
        let t = now();
        let freed = {
            let mut st = self.inner.lock();
            if !is_dir(st.node(parent)?.rec.mode) {
                return err(libc::ENOTDIR);
            }
            if name == b"." {
                return err(libc::EINVAL);
            }
            if name == b".." {
                return err(libc::ENOTEMPTY);
            }
            let (child, _) = st.child(parent, name).ok_or(Errno(libc::ENOENT))?;
            let n = st.node(child)?;
            if !is_dir(n.rec.mode) {
                return err(libc::ENOTDIR);
            }
            if !n.dir.as_ref().map(|d| d.by_name.is_empty()).unwrap_or(true) {
                return err(libc::ENOTEMPTY);
            }
            if self.inner.host.is_root(child) {
                // ENOTEMPTY unless its tree is empty (EBUSY comes from the
                // kernel while it is bind-mounted).
                self.inner.host.remove_root(child)?;
            }
            st.remove_entry(parent, name);
            let n = st.node_mut(child)?;
            n.rec.nlink = 0;
            n.rec.ctime = t;
            st.touch_inode(child);
            let p = st.node_mut(parent)?;
            p.rec.nlink = p.rec.nlink.saturating_sub(1);
            st.set_mctime(parent, t);
            st.maybe_free(child)
        };
        self.finish_free(freed);
        Ok(())
    }

    /// Is `anc` an ancestor of (or equal to) directory `d`?
    fn is_ancestor(st: &State, anc: u64, mut d: u64) -> bool {
        loop {
            if d == anc {
                return true;
            }
            if d == ROOT {
                return false;
            }
            match st.nodes.get(&d) {
                Some(n) if n.rec.parent != d => d = n.rec.parent,
                _ => return false,
            }
        }
    }

    /// rename(2)/renameat2(2). `flags`: RENAME_NOREPLACE (EEXIST if the
    /// target exists), RENAME_EXCHANGE (swap; ENOENT if either is missing);
    /// RENAME_WHITEOUT or unknown bits: EINVAL. Moving a directory into its
    /// own subtree: EINVAL. Replacing: ENOTDIR / EISDIR on a type
    /// mismatch, ENOTEMPTY for a non-empty directory. Renaming onto another
    /// link of the same inode succeeds and changes nothing.
    pub fn rename(&self, _c: &Caller, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32) -> Result<()> {
        const NOREPLACE: u32 = libc::RENAME_NOREPLACE;
        const EXCHANGE: u32 = libc::RENAME_EXCHANGE;
        if flags & !(NOREPLACE | EXCHANGE) != 0 || flags == NOREPLACE | EXCHANGE {
            return err(libc::EINVAL);
        }
        let (name, newname) = (name.as_bytes(), newname.as_bytes());
        let host = &self.inner.host;
        match (host.serves(parent), host.serves(newparent)) {
            (true, true) => return host.rename(parent, name, newparent, newname, flags),
            (false, false) => {}
            // A native root is another filesystem, as it is once bind-mounted.
            _ => return err(libc::EXDEV),
        }
        check_name(name)?;
        check_name(newname)?;
        if is_dot(name) || is_dot(newname) {
            return err(libc::EBUSY);
        }
        {
            let st = self.inner.lock();
            if let Some((src, _)) = st.child(parent, name) {
                if host.is_root(src) && !self.inner.local_for(&st, newparent, newname, true) {
                    // Its contents cannot become synced in place.
                    return err(libc::EXDEV);
                }
                if let Some((dst, _)) = st.child(newparent, newname) {
                    if dst != src && (host.is_root(dst) || (flags & libc::RENAME_EXCHANGE != 0 && host.is_root(src))) {
                        return err(libc::EBUSY);
                    }
                }
            }
        }
        let t = now();
        let freed = {
            let mut st = self.inner.lock();
            if !is_dir(st.node(parent)?.rec.mode) || !is_dir(st.node(newparent)?.rec.mode) {
                return err(libc::ENOTDIR);
            }
            let (src, _) = st.child(parent, name).ok_or(Errno(libc::ENOENT))?;
            let src_dir = is_dir(st.node(src)?.rec.mode);
            let dst = st.child(newparent, newname).map(|x| x.0);
            if st.node(newparent)?.rec.nlink == 0 {
                return err(libc::ENOENT); // a removed directory takes no new entries
            }
            if flags & EXCHANGE != 0 {
                let dst = dst.ok_or(Errno(libc::ENOENT))?;
                if src == dst {
                    return Ok(());
                }
                let dst_dir = is_dir(st.node(dst)?.rec.mode);
                if parent != newparent {
                    if src_dir && Self::is_ancestor(&st, src, newparent) {
                        return err(libc::EINVAL);
                    }
                    if dst_dir && Self::is_ancestor(&st, dst, parent) {
                        return err(libc::EINVAL);
                    }
                }
                let sl = self.inner.local_for(&st, newparent, newname, src_dir);
                let dl = self.inner.local_for(&st, parent, name, dst_dir);
                let mut plan = self.inner.plan_sides(&st, src, sl, newparent, newname, true)?;
                plan.extend(self.inner.plan_sides(&st, dst, dl, parent, name, true)?);
                st.repoint_entry(parent, name, dst);
                st.repoint_entry(newparent, newname, src);
                self.inner.apply_sides(&mut st, &plan);
                if parent != newparent {
                    if src_dir {
                        st.node_mut(src)?.rec.parent = newparent;
                        st.node_mut(parent)?.rec.nlink -= 1;
                        st.node_mut(newparent)?.rec.nlink += 1;
                    }
                    if dst_dir {
                        st.node_mut(dst)?.rec.parent = parent;
                        st.node_mut(newparent)?.rec.nlink -= 1;
                        st.node_mut(parent)?.rec.nlink += 1;
                    }
                }
                st.set_ctime(src, t);
                st.set_ctime(dst, t);
                st.set_mctime(parent, t);
                st.set_mctime(newparent, t);
                return Ok(());
            }
            if src_dir && Self::is_ancestor(&st, src, newparent) {
                return err(libc::EINVAL);
            }
            // Crossing between synced and local-only paths moves the inode
            // (and its subtree) to the other side, atomically under our lock.
            let plan = if dst != Some(src) {
                let sl = self.inner.local_for(&st, newparent, newname, src_dir);
                self.inner.plan_sides(&st, src, sl, newparent, newname, true)?
            } else {
                Vec::new()
            };
            let mut freed = None;
            if let Some(dst) = dst {
                if flags & NOREPLACE != 0 {
                    return err(libc::EEXIST);
                }
                if dst == src {
                    return Ok(()); // same inode: POSIX says do nothing
                }
                let dn = st.node(dst)?;
                let dst_dir = is_dir(dn.rec.mode);
                if src_dir && !dst_dir {
                    return err(libc::ENOTDIR);
                }
                if !src_dir && dst_dir {
                    return err(libc::EISDIR);
                }
                if dst_dir && !dn.dir.as_ref().map(|d| d.by_name.is_empty()).unwrap_or(true) {
                    return err(libc::ENOTEMPTY);
                }
                st.remove_entry(newparent, newname);
                let dn = st.node_mut(dst)?;
                if dst_dir {
                    dn.rec.nlink = 0;
                } else {
                    dn.rec.nlink = dn.rec.nlink.saturating_sub(1);
                }
                dn.rec.ctime = t;
                st.touch_inode(dst);
                if dst_dir {
                    st.node_mut(newparent)?.rec.nlink -= 1;
                }
                freed = Some(dst);
            }
            st.remove_entry(parent, name);
            st.add_entry(newparent, newname, src);
            if src_dir && parent != newparent {
                st.node_mut(src)?.rec.parent = newparent;
                st.node_mut(parent)?.rec.nlink -= 1;
                st.node_mut(newparent)?.rec.nlink += 1;
            }
            st.set_ctime(src, t);
            st.set_mctime(parent, t);
            st.set_mctime(newparent, t);
            self.inner.apply_sides(&mut st, &plan);
            freed.and_then(|d| st.maybe_free(d))
        };
        self.finish_free(freed);
        Ok(())
    }

    /// link(2): a new name for `ino`. EPERM for directories, EEXIST,
    /// EMLINK beyond 65000 links. +1 lookup.
    pub fn link(&self, _c: &Caller, ino: u64, newparent: u64, newname: &OsStr) -> Result<Attr> {
        let name = newname.as_bytes();
        match (is_host_id(ino), self.inner.host.serves(newparent)) {
            (true, true) => return self.inner.host.link(ino, newparent, name),
            (false, false) => {}
            _ => return err(libc::EXDEV),
        }
        check_name(name)?;
        let t = now();
        {
            let mut st = self.inner.lock();
            let n = st.node(ino)?;
            if is_dir(n.rec.mode) {
                return err(libc::EPERM);
            }
            if n.rec.nlink == 0 {
                return err(libc::ENOENT); // as link(2) of an unlinked file (not O_TMPFILE)
            }
            if n.rec.nlink >= LINK_MAX {
                return err(libc::EMLINK);
            }
            st.live_dir(newparent)?;
            if is_dot(name) || st.child(newparent, name).is_some() {
                return err(libc::EEXIST);
            }
            // One inode lives on one side: no hard links across the boundary.
            if self.inner.local_for(&st, newparent, name, false) != st.node(ino)?.local {
                return err(libc::EXDEV);
            }
            st.add_entry(newparent, name, ino);
            let n = st.node_mut(ino)?;
            n.rec.nlink += 1;
            n.rec.ctime = t;
            n.lookups += 1;
            st.touch_inode(ino);
            st.set_mctime(newparent, t);
        }
        self.attr_now(ino)
    }
}

/// Takes in writes that bypassed us (FUSE passthrough): they show in the
/// working copy's size and mtime. Marks the content changed if so.
fn note_bypass(st: &mut State, ino: u64, f: &OpenFile) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = f.file.metadata() else { return };
    let Some(n) = st.nodes.get_mut(&ino) else { return };
    let wm = (m.mtime(), m.mtime_nsec() as u32);
    let stamp = wc_stamp(&m);
    // Any change since we last looked (the coarse host clock can leave a
    // passthrough write's mtime below ours, so compare stamps too).
    let seen_moved = n.wc_seen.is_some_and(|s| s != stamp);
    n.wc_seen = Some(stamp);
    let moved = wm > n.rec.mtime || n.rec.size != m.size() || seen_moved;
    if moved || n.rec.blocks != m.blocks() {
        n.rec.size = m.size();
        n.rec.blocks = m.blocks();
        if wm > n.rec.mtime {
            n.rec.mtime = wm;
            n.rec.ctime = n.rec.ctime.max(wm);
        }
        if moved {
            n.content_gen += 1;
        }
        st.dirty_inodes.insert(ino);
    }
}

fn can_write(flags: u32) -> bool {
    let acc = flags as i32 & libc::O_ACCMODE;
    acc == libc::O_WRONLY || acc == libc::O_RDWR
}
fn can_read(flags: u32) -> bool {
    let acc = flags as i32 & libc::O_ACCMODE;
    acc == libc::O_RDONLY || acc == libc::O_RDWR
}

impl Fs {
    /// Attaches a new handle to `ino`, opening its working copy if this is
    /// the first handle. Returns the handle.
    fn attach(&self, ino: u64, flags: u32, fresh: Option<File>) -> Result<(u64, Option<Arc<OpenFile>>)> {
        let (mode, existing) = {
            let st = self.inner.lock();
            let n = st.node(ino)?;
            (n.rec.mode, n.file.clone())
        };
        let file = if is_reg(mode) {
            Some(match existing {
                Some(f) => f,
                None => {
                    let f = match fresh {
                        Some(f) => f,
                        None => self.inner.open_wc(ino)?,
                    };
                    Arc::new(OpenFile { file: f, append: Mutex::new(()) })
                }
            })
        } else {
            None
        };
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        let file = match (&n.file, file) {
            (Some(f), Some(_)) => Some(f.clone()),
            (None, Some(f)) => {
                n.wc_seen = f.file.metadata().ok().map(|m| wc_stamp(&m));
                n.file = Some(f.clone());
                Some(f)
            }
            (_, None) => None,
        };
        n.opens += 1;
        st.handles.insert(fh, Handle { ino, flags, file: file.clone() });
        Ok((fh, file))
    }

    fn truncate_on_open(&self, ino: u64, file: &Option<Arc<OpenFile>>) -> Result<()> {
        if let Some(f) = file {
            f.file.set_len(0)?;
            let t = now();
            let mut st = self.inner.lock();
            let n = st.node_mut(ino)?;
            n.rec.size = 0;
            n.rec.blocks = 0;
            n.rec.mtime = t;
            n.rec.ctime = t;
            n.content_gen += 1;
            st.touch_inode(ino);
        }
        Ok(())
    }

    /// open(2) of an existing inode: returns a file handle. Honours
    /// O_TRUNC (even with O_RDONLY, as ext4) and remembers O_APPEND and the
    /// access mode. EISDIR when asking to write a directory.
    pub fn open(&self, _c: &Caller, ino: u64, flags: u32) -> Result<u64> {
        if self.inner.host.serves(ino) {
            return self.inner.host.open(ino, flags);
        }
        {
            let st = self.inner.lock();
            if is_dir(st.node(ino)?.rec.mode) && can_write(flags) {
                return err(libc::EISDIR);
            }
        }
        let (fh, file) = self.attach(ino, flags, None)?;
        if flags as i32 & libc::O_TRUNC != 0 {
            if let Err(e) = self.truncate_on_open(ino, &file) {
                let _ = self.release(fh);
                return Err(e);
            }
        }
        Ok(fh)
    }

    /// open(2) with O_CREAT: creates a regular file `name` (+1 lookup) and
    /// opens it. If it exists: EEXIST with O_EXCL, EISDIR for a directory,
    /// else opens it (honouring O_TRUNC).
    pub fn create(&self, c: &Caller, parent: u64, name: &OsStr, mode: u32, flags: u32) -> Result<(Attr, u64)> {
        if self.inner.host.serves(parent) {
            return self.inner.host.create(c, parent, name.as_bytes(), mode, flags);
        }
        let existing = {
            let mut st = self.inner.lock();
            st.live_dir(parent)?;
            match st.child(parent, name.as_bytes()) {
                Some((ino, _)) => {
                    if flags as i32 & libc::O_EXCL != 0 {
                        return err(libc::EEXIST);
                    }
                    if is_dir(st.node(ino)?.rec.mode) {
                        return err(libc::EISDIR);
                    }
                    st.node_mut(ino)?.lookups += 1;
                    Some(ino)
                }
                None => None,
            }
        };
        let (ino, pooled) = match existing {
            Some(ino) => (ino, false),
            None => {
                let (a, pooled) = self.make_in(c, parent, name, S_IFREG | (mode & 0o7777), 0, None, true)?;
                (a.ino, pooled)
            }
        };
        let r = (|| {
            let fresh = match existing {
                None => Some(self.new_backing_file(ino, pooled)?),
                Some(_) => None,
            };
            let (fh, file) = self.attach(ino, flags, fresh)?;
            if existing.is_some() && flags as i32 & libc::O_TRUNC != 0 {
                self.truncate_on_open(ino, &file)?;
            }
            Ok((self.attr_now(ino)?, fh))
        })();
        if r.is_err() {
            if existing.is_none() {
                // A failed creat(2) (no space for the backing file) leaves no name.
                self.unmake(parent, name, ino);
            } else {
                self.forget(ino, 1);
            }
        }
        r
    }

    /// Takes back a regular file `make_in` just made as `name` in `parent`
    /// (its name, and the lookup it was given) when its backing file could
    /// not be made.
    fn unmake(&self, parent: u64, name: &OsStr, ino: u64) {
        {
            let mut st = self.inner.lock();
            if st.child(parent, name.as_bytes()).map(|(i, _)| i) == Some(ino) {
                st.remove_entry(parent, name.as_bytes());
                if let Ok(n) = st.node_mut(ino) {
                    n.rec.nlink = 0;
                }
                st.touch_inode(ino);
            }
        }
        self.forget(ino, 1);
    }

    fn handle(&self, fh: u64) -> Result<(u64, u32, Arc<OpenFile>)> {
        let st = self.inner.lock();
        let h = st.handles.get(&fh).ok_or(Errno(libc::EBADF))?;
        match &h.file {
            Some(f) => Ok((h.ino, h.flags, f.clone())),
            None => err(libc::EINVAL),
        }
    }

    /// pread(2) through a handle: at most `size` bytes, fewer only at end of file.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        if is_host_id(fh) {
            return self.inner.host.read(fh, offset, size);
        }
        let (ino, flags, f) = self.handle(fh)?;
        if !can_read(flags) {
            return err(libc::EBADF);
        }
        let mut buf = vec![0u8; size as usize];
        let mut got = 0;
        while got < buf.len() {
            match f.file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(got);
        self.touch_atime(ino);
        Ok(buf)
    }

    /// relatime, as ext4 mounts by default: atime moves on access when it is
    /// not newer than mtime/ctime or is a day old.
    fn touch_atime(&self, ino: u64) {
        let t = now();
        let mut st = self.inner.lock();
        if let Some(n) = st.nodes.get_mut(&ino) {
            let r = &mut n.rec;
            if r.atime <= r.mtime || r.atime <= r.ctime || r.atime.0 + 86400 <= t.0 {
                r.atime = t;
                st.dirty_inodes.insert(ino);
            }
        }
    }

    /// pwrite(2) through a handle (at end of file for O_APPEND handles).
    /// Returns the bytes written; updates mtime/ctime. EBADF on a
    /// read-only handle.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        if is_host_id(fh) {
            return self.inner.host.write(fh, offset, data);
        }
        let (ino, flags, f) = self.handle(fh)?;
        if !can_write(flags) {
            return err(libc::EBADF);
        }
        let append = flags as i32 & libc::O_APPEND != 0;
        let guard = if append { Some(f.append.lock().unwrap_or_else(|p| p.into_inner())) } else { None };
        let offset = if append { f.file.metadata()?.len() } else { offset };
        f.file.write_all_at(data, offset)?;
        drop(guard);
        let t = now();
        let mut st = self.inner.lock();
        if let Some(n) = st.nodes.get_mut(&ino) {
            if !data.is_empty() {
                n.rec.size = n.rec.size.max(offset + data.len() as u64);
            }
            n.rec.mtime = t;
            n.rec.ctime = t;
            n.content_gen += 1;
            st.dirty_inodes.insert(ino);
        }
        Ok(data.len() as u32)
    }

    /// close(2) of one descriptor: nothing to do (data is hashed at release).
    pub fn flush(&self, fh: u64) -> Result<()> {
        if is_host_id(fh) {
            return Ok(());
        }
        let st = self.inner.lock();
        st.handles.get(&fh).map(|_| ()).ok_or(Errno(libc::EBADF))
    }

    /// The last close of an open file description. Returns at once; a
    /// changed file is queued for hashing. Frees an unlinked inode whose
    /// last handle this was.
    pub fn release(&self, fh: u64) -> Result<()> {
        if is_host_id(fh) {
            return self.inner.host.release(fh);
        }
        let (freed, last) = {
            let mut st = self.inner.lock();
            let h = st.handles.remove(&fh).ok_or(Errno(libc::EBADF))?;
            let ino = h.ino;
            let Some(n) = st.nodes.get_mut(&ino) else { return Ok(()) };
            n.opens = n.opens.saturating_sub(1);
            let last = if n.opens == 0 { n.file.take() } else { None };
            // Writes that bypassed us (FUSE passthrough) show in the working
            // copy's size and mtime.
            if let Some(f) = h.file.as_ref().filter(|_| can_write(h.flags)) {
                note_bypass(&mut st, ino, f);
            }
            let n = st.nodes.get_mut(&ino).unwrap();
            let dirty = n.content_gen != n.hashed_gen && n.rec.nlink > 0;
            if dirty {
                self.inner.queue_hash(&mut st, ino);
            }
            (st.maybe_free(ino), last)
        };
        drop(last);
        self.finish_free(freed);
        Ok(())
    }

    /// fsync(2)/fdatasync(2): hashes the file if it changed and returns
    /// after a durable commit of it and of all pending metadata.
    pub fn fsync(&self, fh: u64, _datasync: bool) -> Result<()> {
        if is_host_id(fh) {
            return self.inner.host.fsync(fh, _datasync);
        }
        let ino = {
            let mut st = self.inner.lock();
            let h = st.handles.get(&fh).ok_or(Errno(libc::EBADF))?;
            let (ino, f) = (h.ino, h.file.clone());
            if let Some(f) = f {
                note_bypass(&mut st, ino, &f);
            }
            ino
        };
        self.inner.hash_file(ino)?;
        self.inner.commit(Durability::Immediate, true, None).map_err(db_errno)
    }

    /// opendir(3): a handle for readdir. ENOTDIR.
    pub fn opendir(&self, _c: &Caller, ino: u64) -> Result<u64> {
        if self.inner.host.serves(ino) {
            return self.inner.host.opendir(ino);
        }
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        if !is_dir(n.rec.mode) {
            return err(libc::ENOTDIR);
        }
        n.opens += 1;
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        st.handles.insert(fh, Handle { ino, flags: 0, file: None });
        Ok(fh)
    }

    /// closedir(3).
    pub fn releasedir(&self, fh: u64) {
        if is_host_id(fh) {
            let _ = self.inner.host.release(fh);
            return;
        }
        let freed = {
            let mut st = self.inner.lock();
            let Some(h) = st.handles.remove(&fh) else { return };
            if let Some(n) = st.nodes.get_mut(&h.ino) {
                n.opens = n.opens.saturating_sub(1);
            }
            st.maybe_free(h.ino)
        };
        self.finish_free(freed);
    }

    /// fsync(2) on a directory: a durable commit of all pending metadata.
    pub fn fsyncdir(&self, _fh: u64) -> Result<()> {
        if is_host_id(_fh) {
            return self.inner.host.fsync(_fh, false);
        }
        self.inner.commit(Durability::Immediate, true, None).map_err(db_errno)
    }

    /// Collects up to `max` entries of `ino` with cookie > `offset`, each
    /// with its attributes when `plus` (and one lookup taken for it).
    #[allow(clippy::type_complexity)]
    fn dir_batch(&self, ino: u64, offset: u64, max: usize, plus: bool) -> Result<Vec<(u64, u64, u32, Vec<u8>, Option<Attr>)>> {
        let mut st = self.inner.lock();
        let n = st.node(ino)?;
        let d = n.dir.as_ref().ok_or(Errno(libc::ENOTDIR))?;
        let mut out = Vec::new();
        if offset < 1 {
            out.push((ino, 1, libc::DT_DIR as u32, b".".to_vec(), None));
        }
        if offset < 2 {
            out.push((n.rec.parent, 2, libc::DT_DIR as u32, b"..".to_vec(), None));
        }
        let from = offset.max(2) + 1;
        for (&cookie, name) in d.by_cookie.range(from..) {
            if out.len() >= max {
                break;
            }
            let child = d.by_name[name].0;
            out.push((child, cookie, 0, name.clone(), None));
        }
        for e in out.iter_mut().filter(|e| e.1 > 2) {
            if let Some(c) = st.nodes.get_mut(&e.0) {
                e.2 = kind_of(c.rec.mode);
                if plus {
                    c.lookups += 1;
                    e.4 = Some(attr_of(e.0, c));
                }
            }
        }
        Ok(out)
    }

    /// readdir(3) from `offset` (0 = start; otherwise the `offset` of the
    /// last entry taken): "." (cookie 1), ".." (2), then children in cookie
    /// order. Cookies stay valid while entries are added or removed.
    /// `sink` returns false when full: the entry was not taken and reading stops.
    pub fn readdir(&self, ino: u64, _fh: u64, offset: u64, sink: &mut dyn FnMut(&DirEntry) -> bool) -> Result<()> {
        if is_host_id(_fh) {
            return self.inner.host.readdir(_fh, offset, sink);
        }
        let mut off = offset;
        loop {
            let batch = self.dir_batch(ino, off, 256, false)?;
            if batch.is_empty() {
                return Ok(());
            }
            for (child, cookie, kind, name, _) in &batch {
                if !sink(&DirEntry { ino: *child, offset: *cookie, kind: *kind, name }) {
                    return Ok(());
                }
                off = *cookie;
            }
        }
    }

    /// readdirplus: as [`Fs::readdir`] with each child's attributes (and
    /// +1 lookup for each child the sink took); `None` for "." and "..".
    pub fn readdirplus(&self, ino: u64, _fh: u64, offset: u64, sink: &mut dyn FnMut(&DirEntry, Option<&Attr>) -> bool) -> Result<()> {
        if is_host_id(_fh) {
            return self.inner.host.readdirplus(_fh, offset, sink);
        }
        let mut off = offset;
        loop {
            let batch = self.dir_batch(ino, off, 256, true)?;
            if batch.is_empty() {
                return Ok(());
            }
            let mut it = batch.into_iter();
            while let Some((child, cookie, kind, name, attr)) = it.next() {
                let attr = match attr {
                    Some(_) if self.inner.host.is_root(child) => self.inner.host.getattr(child).ok(),
                    Some(mut a) if is_reg(a.mode) => {
                        let f = self.inner.lock().nodes.get(&child).and_then(|n| n.file.clone());
                        if let Some(f) = f {
                            fstat_into(&f.file, &mut a);
                        }
                        Some(a)
                    }
                    a => a,
                };
                if !sink(&DirEntry { ino: child, offset: cookie, kind, name: &name }, attr.as_ref()) {
                    if attr.is_some() {
                        self.forget(child, 1);
                    }
                    for (c, _, _, _, a) in it {
                        if a.is_some() {
                            self.forget(c, 1);
                        }
                    }
                    return Ok(());
                }
                off = cookie;
            }
        }
    }

    /// statfs(2): space from the host filesystem holding the store, inode
    /// counts from ours.
    pub fn statfs(&self) -> StatFs {
        let inodes = self.inner.lock().nodes.len() as u64;
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let p = std::ffi::CString::new(self.inner.wc_dir.as_os_str().as_bytes()).unwrap_or_default();
        let ok = unsafe { libc::statvfs(p.as_ptr(), &mut s) } == 0;
        if !ok {
            return StatFs { bsize: BLKSIZE, frsize: BLKSIZE, namelen: NAME_MAX as u32, files: inodes, ..Default::default() };
        }
        StatFs {
            blocks: s.f_blocks as u64,
            bfree: s.f_bfree as u64,
            bavail: s.f_bavail as u64,
            files: inodes + s.f_ffree as u64,
            ffree: s.f_ffree as u64,
            bsize: s.f_bsize as u32,
            namelen: NAME_MAX as u32,
            frsize: s.f_frsize as u32,
        }
    }

    /// setxattr(2). `flags`: XATTR_CREATE (EEXIST if present), XATTR_REPLACE
    /// (ENODATA if absent). Names over 255 bytes or empty: ERANGE; values
    /// over 64 KiB: E2BIG. POSIX ACLs (`system.posix_acl_*`): EOPNOTSUPP.
    pub fn setxattr(&self, _c: &Caller, ino: u64, name: &OsStr, value: &[u8], flags: u32) -> Result<()> {
        if self.inner.host.serves(ino) {
            return self.inner.host.setxattr(ino, name, value, flags);
        }
        let name = name.as_bytes();
        if name.starts_with(b"system.posix_acl_") {
            // No POSIX ACLs: storing one as a plain xattr would not change the
            // mode (cp -p / mv set the mode that way and fall back to chmod).
            return err(libc::EOPNOTSUPP);
        }
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return err(libc::ERANGE);
        }
        if value.len() > XATTR_SIZE_MAX {
            return err(libc::E2BIG);
        }
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        let exists = n.xattrs.contains_key(name);
        if flags as i32 & libc::XATTR_CREATE != 0 && exists {
            return err(libc::EEXIST);
        }
        if flags as i32 & libc::XATTR_REPLACE != 0 && !exists {
            return err(libc::ENODATA);
        }
        n.xattrs.insert(name.to_vec(), value.to_vec());
        n.rec.ctime = now();
        st.touch_inode(ino);
        st.dirty_xattrs.insert((ino, name.to_vec()), Some(value.to_vec()));
        Ok(())
    }

    /// getxattr(2): `size` 0 asks for the length; ENODATA if absent,
    /// ERANGE if `size` is too small.
    pub fn getxattr(&self, ino: u64, name: &OsStr, size: u32) -> Result<XattrValue> {
        if self.inner.host.serves(ino) {
            return self.inner.host.getxattr(ino, name, size);
        }
        let st = self.inner.lock();
        let v = st.node(ino)?.xattrs.get(name.as_bytes()).ok_or(Errno(libc::ENODATA))?;
        sized(v.clone(), size)
    }

    /// listxattr(2): NUL-terminated names; `size` 0 asks for the length;
    /// ERANGE if too small. No attributes: an empty list.
    pub fn listxattr(&self, ino: u64, size: u32) -> Result<XattrValue> {
        if self.inner.host.serves(ino) {
            return self.inner.host.listxattr(ino, size);
        }
        let st = self.inner.lock();
        let mut out = Vec::new();
        for k in st.node(ino)?.xattrs.keys() {
            out.extend_from_slice(k);
            out.push(0);
        }
        sized(out, size)
    }

    /// removexattr(2): ENODATA if absent.
    pub fn removexattr(&self, _c: &Caller, ino: u64, name: &OsStr) -> Result<()> {
        if self.inner.host.serves(ino) {
            return self.inner.host.removexattr(ino, name);
        }
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        if n.xattrs.remove(name.as_bytes()).is_none() {
            return err(libc::ENODATA);
        }
        n.rec.ctime = now();
        st.touch_inode(ino);
        st.dirty_xattrs.insert((ino, name.as_bytes().to_vec()), None);
        Ok(())
    }

    /// fallocate(2) through a handle: mode 0, FALLOC_FL_KEEP_SIZE, and
    /// FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE; anything else EOPNOTSUPP.
    pub fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: u32) -> Result<()> {
        if is_host_id(fh) {
            return self.inner.host.fallocate(fh, offset, length, mode);
        }
        let keep = libc::FALLOC_FL_KEEP_SIZE as u32;
        let punch = libc::FALLOC_FL_PUNCH_HOLE as u32;
        if mode != 0 && mode != keep && mode != (punch | keep) {
            return err(libc::EOPNOTSUPP);
        }
        if length == 0 {
            return err(libc::EINVAL);
        }
        let (ino, flags, f) = self.handle(fh)?;
        if !can_write(flags) {
            return err(libc::EBADF);
        }
        let r = unsafe { libc::fallocate(f.file.as_raw_fd(), mode as i32, offset as i64, length as i64) };
        if r != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let m = f.file.metadata()?;
        let t = now();
        let mut st = self.inner.lock();
        if let Some(n) = st.nodes.get_mut(&ino) {
            use std::os::unix::fs::MetadataExt;
            n.rec.size = m.size();
            n.rec.blocks = m.blocks();
            n.rec.ctime = t;
            if mode & punch != 0 || mode == 0 {
                n.rec.mtime = t;
            }
            n.content_gen += 1;
            st.dirty_inodes.insert(ino);
        }
        Ok(())
    }

    /// lseek(2) through a handle: SEEK_DATA / SEEK_HOLE answered from the
    /// working copy (ENXIO past the end); SEEK_SET/SEEK_END computed;
    /// others EINVAL.
    pub fn lseek(&self, fh: u64, offset: u64, whence: u32) -> Result<u64> {
        if is_host_id(fh) {
            return self.inner.host.lseek(fh, offset, whence);
        }
        let (_, _, f) = self.handle(fh)?;
        match whence as i32 {
            libc::SEEK_SET => Ok(offset),
            libc::SEEK_END => Ok(f.file.metadata()?.len().saturating_add(offset)),
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                // pread-based I/O never uses the fd's position, so seeking the
                // shared fd is harmless.
                let r = unsafe { libc::lseek(f.file.as_raw_fd(), offset as i64, whence as i32) };
                if r < 0 {
                    Err(std::io::Error::last_os_error().into())
                } else {
                    Ok(r as u64)
                }
            }
            _ => err(libc::EINVAL),
        }
    }

    /// copy_file_range(2) between two open handles; returns bytes copied
    /// (0 at end of input). EBADF for a wrong access mode.
    pub fn copy_file_range(&self, fh_in: u64, off_in: u64, fh_out: u64, off_out: u64, len: u64) -> Result<u64> {
        match (is_host_id(fh_in), is_host_id(fh_out)) {
            (true, true) => {
                let host = &self.inner.host;
                let (a, b) = (host.handle_fd(fh_in).ok_or(Errno(libc::EBADF))?, host.handle_fd(fh_out).ok_or(Errno(libc::EBADF))?);
                return copy_range(a, off_in, b, off_out, len);
            }
            (false, false) => {}
            // Across a native root: the kernel falls back to read + write.
            _ => return err(libc::EOPNOTSUPP),
        }
        let (_, fin, src) = self.handle(fh_in)?;
        let (ino_out, fout, dst) = self.handle(fh_out)?;
        if !can_read(fin) || !can_write(fout) {
            return err(libc::EBADF);
        }
        let mut oi = off_in as i64;
        let mut oo = off_out as i64;
        let len = len.min(1 << 30) as usize;
        let r = unsafe { libc::copy_file_range(src.file.as_raw_fd(), &mut oi, dst.file.as_raw_fd(), &mut oo, len, 0) };
        let n = if r >= 0 {
            r as u64
        } else {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EXDEV) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => {
                    let mut buf = vec![0u8; len.min(1 << 20)];
                    let got = src.file.read_at(&mut buf, off_in)?;
                    dst.file.write_all_at(&buf[..got], off_out)?;
                    got as u64
                }
                _ => return Err(e.into()),
            }
        };
        if n > 0 {
            let t = now();
            let mut st = self.inner.lock();
            if let Some(nd) = st.nodes.get_mut(&ino_out) {
                nd.rec.size = nd.rec.size.max(off_out + n);
                nd.rec.mtime = t;
                nd.rec.ctime = t;
                nd.content_gen += 1;
                st.dirty_inodes.insert(ino_out);
            }
        }
        Ok(n)
    }

    /// The working-copy file behind an open regular-file handle, for FUSE
    /// passthrough (register it as the backing file). The fd stays valid
    /// until the handle's inode has no open handles left.
    pub fn backing_fd(&self, fh: u64) -> Option<std::os::unix::io::RawFd> {
        if is_host_id(fh) {
            return self.inner.host.handle_fd(fh);
        }
        self.handle(fh).ok().map(|(_, _, f)| f.file.as_raw_fd())
    }

    /// Local-only paths: the ignore patterns in force, the backing
    /// directory, and how many live inodes are local-only.
    pub fn local_info(&self) -> (Vec<String>, PathBuf, u64) {
        let n = self.inner.lock().nodes.values().filter(|n| n.local).count() as u64;
        (self.inner.policy.as_ref().map(|p| p.patterns().to_vec()).unwrap_or_default(), self.inner.local.path().to_path_buf(), n)
    }

    /// Is inode `ino` local-only (its path matches an ignore pattern)?
    /// Is `ino` in a native root's host tree (or a root itself)? Its host
    /// files can change behind the daemon (through the bind mount), so the
    /// kernel must not cache its entries or attributes.
    pub fn is_host(&self, ino: u64) -> bool {
        self.inner.host.serves(ino)
    }

    pub fn is_local(&self, ino: u64) -> Option<bool> {
        if self.inner.host.serves(ino) {
            return Some(true);
        }
        self.inner.lock().nodes.get(&ino).map(|n| n.local)
    }

    /// Sets the function told the inode of every native root made from now
    /// on by mkdir (see [`Fs::mkdir`]); it must not block on the mount.
    pub fn set_root_listener(&self, f: impl Fn(u64) + Send + Sync + 'static) {
        *self.inner.root_listener.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(f));
    }

    /// The native roots that are live directories of the workspace, by inode.
    pub fn native_roots(&self) -> Vec<NativeRoot> {
        let st = self.inner.lock();
        self.inner
            .host
            .roots()
            .into_iter()
            .filter(|i| st.nodes.get(i).map(|n| n.rec.nlink > 0).unwrap_or(false))
            .map(|ino| NativeRoot {
                ino,
                path: PathBuf::from(OsStr::from_bytes(&st.dir_path(ino)).to_os_string()),
                backing: self.inner.host.root_path(ino),
            })
            .collect()
    }

    /// A description of the store (`ringfs stats`).
    pub fn stats(&self) -> Stats {
        let st = self.inner.lock();
        Stats {
            store: self.inner.store_desc.clone(),
            inodes: st.nodes.len() as u64,
            chunks: self.inner.chunk_count.load(Ordering::SeqCst),
            chunk_bytes: self.inner.chunk_bytes.load(Ordering::SeqCst),
            sync_position: self.inner.sync_pos.load(Ordering::SeqCst),
            dirty: st.dirty_count(),
        }
    }

    fn stop_threads(&self, abandon: bool) {
        if abandon {
            self.inner.abandon.store(true, Ordering::SeqCst);
        }
        self.inner.stopping.store(true, Ordering::SeqCst);
        self.inner.pool_cv.notify_all();
        *self.inner.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.inner.stop_cv.notify_all();
        self.inner.hash_tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }

    /// Clean shutdown: frees unlinked inodes, hashes every changed working
    /// copy, commits durably, marks the store clean and releases
    /// `ringfs.lock`. Idempotent. The `Fs` must not be used afterwards; redb
    /// keeps its database file open (and locked) until the `Fs` is dropped,
    /// so drop it before reopening the store.
    pub fn shutdown(&self) -> std::result::Result<(), StoreError> {
        if self.inner.shut.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let dbpath = self.inner.store_dir.as_ref().map(|d| d.join("store.redb")).unwrap_or_else(|| PathBuf::from("memory"));
        // Let the workers drain what is queued, then hash the rest here.
        self.stop_threads(false);
        let (freed, dirty): (Vec<Freed>, Vec<u64>) = {
            let mut st = self.inner.lock();
            st.handles.clear();
            let all: Vec<u64> = st.nodes.keys().copied().collect();
            let mut freed = Vec::new();
            for ino in &all {
                let n = st.nodes.get_mut(ino).unwrap();
                n.opens = 0;
                n.lookups = 0;
                n.file = None;
                if let Some(f) = st.maybe_free(*ino) {
                    freed.push(f);
                }
            }
            let dirty = st.nodes.iter().filter(|(_, n)| is_reg(n.rec.mode) && n.content_gen != n.hashed_gen).map(|(&i, _)| i).collect();
            (freed, dirty)
        };
        for f in freed {
            self.finish_free(Some(f));
        }
        let pools = std::mem::take(&mut self.inner.lock().pool);
        for (side, pool) in pools.into_iter().enumerate() {
            for ino in pool {
                let _ = self.inner.data_dir(side == POOL_LOCAL).unlink(&ino.to_string());
            }
        }
        let mut unstored = Vec::new();
        for ino in dirty {
            if let Err(e) = self.inner.hash_file(ino) {
                tracing::error!("shutdown: hashing inode {ino}: {e}");
                unstored.push((ino, e));
            }
        }
        // An I/O error (a full disk) closes the database; the next attempt
        // reopens it. Queued changes are kept across attempts.
        let mut last = None;
        for attempt in 0..3 {
            match self.inner.commit(Durability::Immediate, true, Some(true)) {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(e) => {
                    tracing::error!("final commit, attempt {}: {e}", attempt + 1);
                    last = Some(e);
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            }
        }
        if last.is_none() {
            // A reopen during those attempts may have dropped content stored
            // since the last durable commit: store it again (or report it).
            let again: Vec<u64> = {
                let st = self.inner.lock();
                st.nodes.iter().filter(|(_, n)| is_reg(n.rec.mode) && !n.local && n.content_gen != n.hashed_gen).map(|(&i, _)| i).collect()
            };
            if !again.is_empty() {
                for ino in again {
                    if let Err(e) = self.inner.hash_file(ino) {
                        unstored.push((ino, e));
                    }
                }
                if let Err(e) = self.inner.commit(Durability::Immediate, true, Some(true)) {
                    last = Some(e);
                }
            }
        }
        if let Some(e) = last {
            let dir = dbpath.parent().unwrap_or(Path::new(".")).to_path_buf();
            return Err(StoreError::Io {
                path: dbpath.clone(),
                source: std::io::Error::other(format!(
                    "the final commit failed ({e}): changes since the last commit are not in the store; \
                     file bytes stay in {}/wc and are kept in {}/lost+found at the next mount; free space (df {}) and mount again",
                    dir.display(),
                    dir.display(),
                    dir.display()
                )),
            });
        }
        self.inner.lock_file.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((ino, e)) = unstored.first() {
            let dir = dbpath.parent().unwrap_or(Path::new(".")).to_path_buf();
            return Err(StoreError::Io {
                path: dbpath.clone(),
                source: std::io::Error::other(format!(
                    "{} changed files could not be stored (inode {ino}: {e}); their bytes are safe in {}/wc and are stored at the next mount (free space first: df {})",
                    unstored.len(),
                    dir.display(),
                    dir.display()
                )),
            });
        }
        // A memory store's temporary directories go now: the daemon may
        // exit without dropping the Fs (threads still hold it).
        for t in [&self.inner._tmp, &self.inner._tmp_local].into_iter().flatten() {
            let _ = std::fs::remove_dir_all(t.path());
        }
        Ok(())
    }

    /// Test hook: stops like a killed process would — no final commit, the
    /// store stays marked unclean — and releases the store.
    #[doc(hidden)]
    pub fn simulate_crash(self) {
        self.inner.shut.store(true, Ordering::SeqCst);
        self.stop_threads(true);
    }
}

impl Drop for Fs {
    /// Dropping without [`Fs::shutdown`] behaves like a crash: the last
    /// group commit stands, and the next open recovers.
    fn drop(&mut self) {
        if !self.inner.shut.load(Ordering::SeqCst) {
            tracing::warn!("ringfs store {} dropped without shutdown", self.inner.store_desc);
        }
        self.stop_threads(true);
    }
}

fn sized(v: Vec<u8>, size: u32) -> Result<XattrValue> {
    if size == 0 {
        Ok(XattrValue::Size(v.len() as u32))
    } else if (size as usize) < v.len() {
        err(libc::ERANGE)
    } else {
        Ok(XattrValue::Data(v))
    }
}

/// A `Read` over a file from a position, with pread(2) (the file's own
/// offset is left alone).
struct ReadAt<'a> {
    file: &'a std::fs::File,
    pos: u64,
}

impl std::io::Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// The data extents `[start, end)` of the first `size` bytes of `f`, from
/// lseek(2) SEEK_DATA / SEEK_HOLE; the whole range if the host filesystem
/// does not support them.
fn data_extents(f: &std::fs::File, size: u64) -> std::io::Result<Vec<(u64, u64)>> {
    let fd = f.as_raw_fd();
    let seek = |off: u64, whence: i32| -> std::io::Result<Option<u64>> {
        // SAFETY: lseek on a valid fd; the file offset it moves is not used
        // by anyone else (all I/O on working copies is positional).
        let r = unsafe { libc::lseek(fd, off as libc::off_t, whence) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::ENXIO) { Ok(None) } else { Err(e) };
        }
        Ok(Some(r as u64))
    };
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        let start = match seek(pos, libc::SEEK_DATA) {
            Ok(Some(d)) => d,
            Ok(None) => break,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(vec![(0, size)]),
            Err(e) => return Err(e),
        };
        if start >= size {
            break;
        }
        let end = seek(start, libc::SEEK_HOLE)?.unwrap_or(size).min(size);
        if end <= start {
            break;
        }
        out.push((start, end));
        pos = end;
    }
    Ok(out)
}

/// Starts a named background thread of the store; a failure to start is a
/// [`StoreError::Io`].
fn spawn_named(
    name: String,
    f: impl FnOnce() + Send + 'static,
) -> std::result::Result<std::thread::JoinHandle<()>, StoreError> {
    std::thread::Builder::new().name(name).spawn(f).map_err(|e| io_err(Path::new("thread"), e))
}
