//! The thin adapter from the FUSE session (`fuse_uring::Filesystem`) to the
//! filesystem model (`fs_core::Fs`): type conversions and cache policy
//! (entry/attr timeouts, FOPEN_* flags) and the passthrough backing ids
//! (one per open inode, see [`Backing`]).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fs_core::Fs;
use fuse_uring::fs::{
    Attr, AttrReply, ConnInfo, DirEntry, DirPlusSink, DirSink, Entry, Errno, Filesystem, Opened, RequestCtx, Result,
    SetAttrIn, SetTime, StatFs, StatxReply, XattrReply,
};
use fuse_uring::abi::{FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, STATX_ATTR_APPEND, STATX_ATTR_IMMUTABLE};

/// ioctl(2) `FS_IOC_FSGETXATTR` / `FS_IOC_FSSETXATTR` (`_IOR/_IOW('X', 31/32,
/// struct fsxattr)`, linux/fs.h); `struct fsxattr` is 28 bytes, `fsx_xflags` first.
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
const FSXATTR_SIZE: usize = 28;
/// (inode flag `FS_*_FL`, extended flag `FS_XFLAG_*`) pairs for the flags ringfs keeps.
const XFLAGS: [(u32, u32); 4] = [(0x10, 0x8), (0x20, 0x10), (0x40, 0x80), (0x80, 0x40)];

/// The `fsx_xflags` of inode flags.
fn xflags_of(flags: u32) -> u32 {
    XFLAGS.iter().filter(|(f, _)| flags & f != 0).map(|(_, x)| x).fold(0, |a, x| a | x)
}

/// Inode flags from `old` with the kept ones replaced by those in `xflags`;
/// None if `xflags` asks for one ringfs does not keep.
fn flags_of_xflags(old: u32, xflags: u32) -> Option<u32> {
    let known: u32 = XFLAGS.iter().map(|(_, x)| x).fold(0, |a, x| a | x);
    if xflags & !known != 0 {
        return None;
    }
    let kept: u32 = XFLAGS.iter().map(|(f, _)| f).fold(0, |a, f| a | f);
    Some((old & !kept) | XFLAGS.iter().filter(|(_, x)| xflags & x != 0).map(|(f, _)| f).fold(0, |a, f| a | f))
}

/// `FOPEN_KEEP_CACHE`: keep the page cache across opens (include/uapi/linux/fuse.h).
const FOPEN_KEEP_CACHE: u32 = 1 << 1;
/// `FOPEN_CACHE_DIR`: the kernel may cache this directory's listing in its
/// page cache (include/uapi/linux/fuse.h; used on OPENDIR replies).
const FOPEN_CACHE_DIR: u32 = 1 << 3;
/// `FOPEN_NOFLUSH`: do not send FLUSH on close; ringfs has nothing to flush then.
const FOPEN_NOFLUSH: u32 = 1 << 5;
/// `FOPEN_PASSTHROUGH`: the kernel serves read/write/mmap from the backing
/// file named by `backing_id` (kernel 6.9). Never with KEEP_CACHE (EIO).
const FOPEN_PASSTHROUGH: u32 = 1 << 7;

/// Passthrough backing ids: one per inode, registered on the inode's first
/// open and closed after its last release. The kernel binds an inode to one
/// backing file while it has open files, so every open of an inode in that
/// time must name the same id; the refcount here guarantees it.
///
/// If registering fails (it should not once the start-up probe passed), the
/// inode is served through the daemon for as long as it stays open
/// (`id == None`), again so that all its opens agree.
///
/// Writes through a shared mapping of a passthrough file change the working
/// copy's mtime with no request to the daemon and no attribute invalidation
/// in the kernel. So while an inode has writable passthrough handles and a
/// size above 0 its attributes are not cached (timeout 0, see
/// [`Adapter::timeouts`]), and a writable open of an existing file drops
/// what the kernel cached before (a notification, not a round trip): every
/// stat meanwhile and the first one after the last close asks the daemon,
/// which answers from the working copy. An empty file cannot be written
/// through a mapping (a store past the end is SIGBUS), and every way of
/// giving it a size either invalidates the kernel's cached size and mtime
/// (write, fallocate, copy_file_range) or is a SETATTR whose reply carries
/// the new size and so timeout 0 (truncate): its attributes may be cached,
/// which spares a GETATTR per create (D46).
///
/// A handle fs-core serves from the store's chunks (no working copy, D67)
/// is never passthrough: it is a cached open (`FOPEN_KEEP_CACHE`), so the
/// kernel puts the inode in its cached I/O mode, in which it refuses (EIO)
/// any passthrough open of the inode (fs/fuse/iomode.c). So while an inode
/// has such handles every other open of it — a writer's, whose working
/// copy fs-core builds — is served through the daemon too (`id == None`),
/// and its writes reach the readers through the inode's page cache (and
/// the daemon's reads of the working copy); once the inode has no handle
/// left, the next open registers a backing file again. The kernel leaves
/// the cached mode when a file is released, before it sends RELEASE.
/// Conversely a chunk-served handle of an inode already open with a
/// backing file takes that passthrough (its backing file is the working
/// copy, which holds the file's bytes).
struct Backing {
    dev: fuse_uring::FuseDev,
    notifier: fuse_uring::Notifier,
    inodes: Mutex<BackingTable>,
}

/// An inode open in passthrough mode.
struct BackingInode {
    /// Its backing id, or None for "through the daemon".
    id: Option<i32>,
    /// Open handles, and how many of them can write.
    handles: u32,
    writers: u32,
}

#[derive(Default)]
struct BackingTable {
    by_ino: HashMap<u64, BackingInode>,
    /// Handles counted in `by_ino`: fh → (ino, writable).
    handles: HashMap<u64, (u64, bool)>,
}

impl Backing {
    /// The open flags and backing id for a new handle `fh` of `ino` whose
    /// working copy is `fd` (None: not a regular file), opened with open(2)
    /// `flags`; `through_daemon`: unless the inode is already open with a
    /// backing id (all its opens must agree), serve it without passthrough;
    /// `created`: the file was just made by CREATE or TMPFILE, so the kernel
    /// has no attributes of it cached that need dropping; `chunked`: fs-core
    /// serves `fh` from the store's chunks (`fd` is None then).
    fn open(&self, ino: u64, fh: u64, fd: Option<std::os::fd::RawFd>, flags: u32, through_daemon: bool, created: bool, chunked: bool) -> Opened {
        let fd = match fd {
            Some(fd) => Some(fd),
            None if chunked => None,
            None => return Opened { fh, open_flags: FOPEN_NOFLUSH, backing_id: 0 },
        };
        let writable = flags as i32 & libc::O_ACCMODE != libc::O_RDONLY;
        let mut t = self.inodes.lock().unwrap_or_else(|p| p.into_inner());
        let id = match (t.by_ino.get_mut(&ino), fd) {
            (Some(e), _) => {
                e.handles += 1;
                e.writers += writable as u32;
                e.id
            }
            (None, None) => {
                t.by_ino.insert(ino, BackingInode { id: None, handles: 1, writers: 0 });
                None
            }
            (None, Some(_)) if through_daemon => {
                t.by_ino.insert(ino, BackingInode { id: None, handles: 1, writers: writable as u32 });
                None
            }
            (None, Some(fd)) => {
                // SAFETY: `fd` is the working copy fs-core keeps open while the
                // inode has handles; we hold one (fh) right now.
                let file = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                let id = match fuse_uring::backing_open(&self.dev, file) {
                    Ok(id) => Some(id),
                    Err(e) => {
                        tracing::warn!("passthrough: registering the backing file of inode {ino} failed: {e}; serving it through the daemon");
                        None
                    }
                };
                t.by_ino.insert(ino, BackingInode { id, handles: 1, writers: writable as u32 });
                id
            }
        };
        t.handles.insert(fh, (ino, writable));
        drop(t);
        if writable && id.is_some() && !created {
            // Attributes cached before this open (LOOKUP's) would outlive
            // writes through a mapping; the inode may not be cached (ENOENT).
            let _ = self.notifier.inval_inode(ino, -1, 0);
        }
        match id {
            Some(id) => Opened { fh, open_flags: FOPEN_PASSTHROUGH | FOPEN_NOFLUSH, backing_id: id },
            // The stored bytes it serves do not change behind the page
            // cache: every change goes through it (no passthrough handle
            // exists while this one does).
            None if chunked => Opened { fh, open_flags: FOPEN_KEEP_CACHE | FOPEN_NOFLUSH, backing_id: 0 },
            None => Opened { fh, open_flags: FOPEN_NOFLUSH, backing_id: 0 },
        }
    }

    /// After the release of `fh`: closes the inode's backing id if this was its last handle.
    fn release(&self, fh: u64) {
        let mut t = self.inodes.lock().unwrap_or_else(|p| p.into_inner());
        let Some((ino, writable)) = t.handles.remove(&fh) else { return };
        let close = match t.by_ino.get_mut(&ino) {
            Some(e) if e.handles > 1 => {
                e.handles -= 1;
                e.writers -= writable as u32;
                None
            }
            Some(_) => t.by_ino.remove(&ino).and_then(|e| e.id),
            None => None,
        };
        if let Some(id) = close {
            if let Err(e) = fuse_uring::backing_close(&self.dev, id) {
                tracing::warn!("passthrough: closing backing id {id} of inode {ino}: {e}");
            }
        }
    }

    fn open_ids(&self) -> usize {
        self.inodes.lock().unwrap_or_else(|p| p.into_inner()).by_ino.values().filter(|e| e.id.is_some()).count()
    }

    /// Does `ino` have writable passthrough handles?
    fn writing(&self, ino: u64) -> bool {
        self.inodes.lock().unwrap_or_else(|p| p.into_inner()).by_ino.get(&ino).is_some_and(|e| e.writers > 0 && e.id.is_some())
    }
}

/// Cache policy for kernel replies. ringfs is the only writer of its
/// workspace, so entries and attributes can be cached long; the kernel
/// updates or invalidates them itself on every change made through the mount.
#[derive(Clone, Copy, Debug)]
pub struct CachePolicy {
    /// Entry (dentry) timeout, also used for negative entries.
    pub entry_timeout: Duration,
    /// Attribute timeout.
    pub attr_timeout: Duration,
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy { entry_timeout: Duration::from_secs(86400), attr_timeout: Duration::from_secs(86400) }
    }
}

/// Serves `fuse_uring::Filesystem` requests from an `fs_core::Fs`.
pub struct Adapter {
    fs: Arc<Fs>,
    cache: CachePolicy,
    conn: Mutex<Option<ConnInfo>>,
    backing: Option<Backing>,
    /// REMOVEXATTR `security.capability` just answered: nodeid → (caller's
    /// pid, when). See [`Adapter::remove_privs_kills`].
    caps_removed: Mutex<HashMap<u64, (u32, Instant)>>,
    /// Every change refused with EROFS whatever the mount's flags say (a
    /// `mount --at` view: read-only even when remounted read-write).
    read_only: bool,
    /// Drops the kernel's cached attributes after a change whose reply
    /// cannot carry them (an IOCTL setting inode flags moves ctime).
    notifier: Option<fuse_uring::Notifier>,
    /// The mount's `dirsync` (bit 0) and `sync` (bit 1): see [`Adapter::set_sync_writes`].
    sync_writes: AtomicU8,
}

/// `capability.h`: the capability that keeps set-id bits on write.
const CAP_FSETID: u32 = 4;

/// Does task `pid` have CAP_FSETID in its effective set
/// (`/proc/PID/status` `CapEff`)? Falls back to "is root" when unreadable.
fn has_cap_fsetid(ctx: &RequestCtx) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{}/status", ctx.pid)).unwrap_or_default();
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|h| u64::from_str_radix(h.trim(), 16).ok());
    match eff {
        Some(caps) => caps & (1 << CAP_FSETID) != 0,
        None => ctx.uid == 0,
    }
}

impl Adapter {
    pub fn new(fs: Arc<Fs>, cache: CachePolicy) -> Adapter {
        Adapter { fs, cache, conn: Mutex::new(None), backing: None, caps_removed: Mutex::new(HashMap::new()), read_only: false, notifier: None, sync_writes: AtomicU8::new(0) }
    }

    /// Invalidate cached attributes through `notifier` after changes whose
    /// replies carry none (see [`Adapter::attrs_changed`]). Without it the
    /// kernel shows such a change once its attribute timeout runs out.
    pub fn set_notifier(&mut self, notifier: fuse_uring::Notifier) {
        self.notifier = Some(notifier);
    }

    /// Follow the mount's `dirsync` (`dirs`: a change to a directory is
    /// durable before its reply) and `sync` (`all`: every metadata change
    /// is). File data under `sync` the kernel makes synchronous itself.
    pub fn set_sync_writes(&self, dirs: bool, all: bool) {
        self.sync_writes.store(dirs as u8 | (all as u8) << 1, Ordering::Relaxed);
    }

    /// After the change `r` (`dir`: of a directory's entries): commits it
    /// durably first when the mount asks for it (`sync`, `dirsync`). The
    /// change is made whatever the commit does, so it is answered as made
    /// (the kernel's caches follow the reply); a failed commit is logged
    /// and the next fsync or commit reports it.
    fn synced<T>(&self, r: Result<T>, dir: bool) -> Result<T> {
        let mode = self.sync_writes.load(Ordering::Relaxed);
        if r.is_ok() && mode & if dir { 3 } else { 2 } != 0 {
            if let Err(e) = self.fs.sync_metadata() {
                tracing::error!("sync/dirsync mount: committing a change durably failed (errno {}); it stays pending", e.0);
            }
        }
        r
    }

    /// `nodeid`'s attributes changed in a request whose reply does not
    /// carry them (FS_IOC_SETFLAGS moves ctime): the kernel drops what it
    /// cached, so the next stat asks the daemon. No inode lock is taken
    /// by the kernel for this, so it is safe from within the request.
    fn attrs_changed(&self, nodeid: u64) {
        if let Some(n) = &self.notifier {
            // ENOENT: the kernel does not have the inode cached.
            let _ = n.inval_inode(nodeid, -1, 0);
        }
    }

    /// Refuse every change with EROFS from now on, whatever the mount's
    /// flags (a `mount --at` view; the kernel's MS_RDONLY can be lifted by
    /// a remount).
    pub fn set_read_only(&mut self) {
        self.read_only = true;
    }

    /// Err(EROFS) when changes are refused ([`Adapter::set_read_only`], or
    /// the store met damage while served: `fs_core::StoreDamaged`).
    fn writable(&self) -> Result<()> {
        if self.read_only || self.fs.is_damaged() {
            Err(Errno(libc::EROFS))
        } else {
            Ok(())
        }
    }

    /// Whether an empty SETATTR (`SetAttrIn::remove_privs`) clears the set-id
    /// bits. The kernel sends one after a write, fallocate or copy_file_range
    /// by a caller without CAP_FSETID on a set-id file, and for
    /// `chown(f, -1, -1)` — both clear them — but also, right after its
    /// REMOVEXATTR `security.capability`, when a caller *with* CAP_FSETID
    /// writes a file that has a capability: then the bits stay (as on ext4).
    /// That last case is recognised by the REMOVEXATTR from the same task a
    /// moment before plus CAP_FSETID; `chown(f, -1, -1)` by such a caller on a
    /// set-id file with a capability is indistinguishable from it on the wire
    /// and keeps the bits too (docs/SEMANTICS.md).
    fn remove_privs_kills(&self, ctx: &RequestCtx, nodeid: u64) -> bool {
        let removed = self.caps_removed.lock().unwrap_or_else(|p| p.into_inner()).remove(&nodeid);
        match removed {
            Some((pid, at)) if pid == ctx.pid && at.elapsed() < Duration::from_secs(1) => !has_cap_fsetid(ctx),
            _ => true,
        }
    }

    /// Serve regular files with FUSE passthrough, registering working copies
    /// as backing files on `dev` (the session fd). Call before the session
    /// runs, and only when INIT negotiated passthrough and registering a
    /// backing file works (CAP_SYS_ADMIN).
    /// `notifier` invalidates cached attributes of files opened for writing.
    pub fn enable_passthrough(&mut self, dev: fuse_uring::FuseDev, notifier: fuse_uring::Notifier) {
        self.backing = Some(Backing { dev, notifier, inodes: Mutex::new(BackingTable::default()) });
    }

    /// Passthrough is in use.
    pub fn passthrough(&self) -> bool {
        self.backing.is_some()
    }

    /// Backing ids currently registered (inodes open in passthrough mode).
    pub fn backing_ids(&self) -> usize {
        self.backing.as_ref().map(|b| b.open_ids()).unwrap_or(0)
    }

    /// The FOPEN flags and backing id of a new handle; `created`: see
    /// [`Backing::open`] (true only for an empty file CREATE or TMPFILE made).
    fn file_opened(&self, ino: u64, fh: u64, flags: u32, created: bool) -> Opened {
        match &self.backing {
            // An append-only file is served through the daemon, which puts
            // every write at its end: the kernel checks neither fcntl's
            // clearing of O_APPEND nor a shared writable mapping against the
            // flag (FUSE inodes do not carry it).
            Some(b) => {
                let append_only = self.fs.get_flags(ino).is_ok_and(|f| f & fs_core::store::FS_APPEND_FL != 0);
                // Only a handle without a working copy can be chunk-served:
                // the usual open asks the handle table once.
                let fd = self.fs.backing_fd(fh);
                let chunked = fd.is_none() && self.fs.served_from_chunks(fh);
                b.open(ino, fh, fd, flags, append_only, created, chunked)
            }
            // A native root's file may change through the bind mount: no page cache kept.
            None if self.fs.is_host(ino) => Opened { fh, open_flags: FOPEN_NOFLUSH, backing_id: 0 },
            None => Opened { fh, open_flags: FOPEN_KEEP_CACHE | FOPEN_NOFLUSH, backing_id: 0 },
        }
    }

    /// (entry, attr) timeouts for `ino` of `size` bytes (None: a size not
    /// read from an open file's working copy, as a listing's, which may lag
    /// passthrough writes): none for native-root trees, which change behind
    /// the daemon's back through their bind mount. A root directory itself
    /// keeps its long entry timeout: its dentry is the bind mount's
    /// mountpoint, revalidated on every walk through it. Attributes of a
    /// file open for writing with passthrough are not cached unless it is
    /// known to be empty (see [`Backing`]).
    fn timeouts(&self, ino: u64, size: Option<u64>) -> (Duration, Duration) {
        match self.fs.is_host(ino) {
            false if size != Some(0) && self.backing.as_ref().is_some_and(|b| b.writing(ino)) => (self.cache.entry_timeout, Duration::ZERO),
            false => (self.cache.entry_timeout, self.cache.attr_timeout),
            true if fs_core::is_host_nodeid(ino) => (Duration::ZERO, Duration::ZERO),
            true => (self.cache.entry_timeout, Duration::ZERO),
        }
    }

    /// Negative entries in a native root's tree are not cached.
    fn negative_timeout(&self, parent: u64) -> Duration {
        if self.fs.is_host(parent) {
            Duration::ZERO
        } else {
            self.cache.entry_timeout
        }
    }

    /// What INIT negotiated, once it has run.
    pub fn conn_info(&self) -> Option<ConnInfo> {
        *self.conn.lock().unwrap()
    }

    /// The entry reply for `a`, whose size is the working copy's if the
    /// file is open (`Fs::lookup`, `create`, `link`, …).
    fn entry(&self, a: &fs_core::Attr) -> Entry {
        let (entry_timeout, attr_timeout) = self.timeouts(a.ino, Some(a.size));
        Entry { attr: attr(a), generation: 0, entry_timeout, attr_timeout }
    }

    /// The entry of a READDIRPLUS listing: its size is the inode record's,
    /// behind passthrough writes to an open file.
    fn listed_entry(&self, a: &fs_core::Attr) -> Entry {
        let (entry_timeout, attr_timeout) = self.timeouts(a.ino, None);
        Entry { attr: attr(a), generation: 0, entry_timeout, attr_timeout }
    }

    fn attr_reply(&self, a: &fs_core::Attr) -> AttrReply {
        AttrReply { attr: attr(a), timeout: self.timeouts(a.ino, Some(a.size)).1 }
    }
}

fn caller(ctx: &RequestCtx) -> fs_core::Caller {
    fs_core::Caller { uid: ctx.uid, gid: ctx.gid, pid: ctx.pid, umask: 0 }
}

/// The caller of a create, with its umask (FUSE_DONT_MASK: fs-core applies
/// it unless a default ACL decides).
fn creator(ctx: &RequestCtx, umask: u32) -> fs_core::Caller {
    fs_core::Caller { umask, ..caller(ctx) }
}

fn err(e: fs_core::Errno) -> Errno {
    Errno(e.0)
}

fn attr(a: &fs_core::Attr) -> Attr {
    Attr {
        ino: a.ino,
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        atime_nsec: a.atime_nsec,
        mtime: a.mtime,
        mtime_nsec: a.mtime_nsec,
        ctime: a.ctime,
        ctime_nsec: a.ctime_nsec,
        mode: a.mode,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
    }
}

fn set_time(t: SetTime) -> fs_core::SetTime {
    match t {
        SetTime::Now => fs_core::SetTime::Now,
        SetTime::At(s, ns) => fs_core::SetTime::At(s, ns),
    }
}

fn xattr(v: fs_core::XattrValue) -> XattrReply {
    match v {
        fs_core::XattrValue::Size(n) => XattrReply::Size(n),
        fs_core::XattrValue::Data(d) => XattrReply::Data(d),
    }
}

impl Filesystem for Adapter {
    fn init(&self, info: &ConnInfo) {
        *self.conn.lock().unwrap() = Some(*info);
    }

    fn lookup(&self, ctx: &RequestCtx, parent: u64, name: &OsStr) -> Result<Entry> {
        match self.fs.lookup(&caller(ctx), parent, name) {
            Ok(a) => Ok(self.entry(&a)),
            // A negative entry: the kernel caches the absence for entry_timeout.
            Err(e) if e.0 == libc::ENOENT => {
                Ok(Entry { entry_timeout: self.negative_timeout(parent), ..Entry::default() })
            }
            Err(e) => Err(err(e)),
        }
    }

    fn forget(&self, nodeid: u64, nlookup: u64) {
        self.fs.forget(nodeid, nlookup)
    }

    fn getattr(&self, _ctx: &RequestCtx, nodeid: u64, fh: Option<u64>) -> Result<AttrReply> {
        self.fs.getattr(nodeid, fh).map(|a| self.attr_reply(&a)).map_err(err)
    }

    fn setattr(&self, ctx: &RequestCtx, nodeid: u64, s: &SetAttrIn) -> Result<AttrReply> {
        self.writable()?;
        let set = fs_core::SetAttr {
            mode: s.mode,
            uid: s.uid,
            gid: s.gid,
            size: s.size,
            atime: s.atime.map(set_time),
            mtime: s.mtime.map(set_time),
            ctime: s.ctime,
            fh: s.fh,
            kill_suidgid: s.kill_suidgid || (s.remove_privs && self.remove_privs_kills(ctx, nodeid)),
        };
        self.synced(self.fs.setattr(&caller(ctx), nodeid, &set).map(|a| self.attr_reply(&a)).map_err(err), false)
    }

    fn statx(&self, _ctx: &RequestCtx, nodeid: u64, fh: Option<u64>, _flags: u32, _mask: u32) -> Result<StatxReply> {
        let a = self.fs.getattr(nodeid, fh).map_err(err)?;
        // FS_IMMUTABLE_FL and FS_APPEND_FL are the statx attribute bits too.
        let attributes = a.flags as u64 & (STATX_ATTR_IMMUTABLE | STATX_ATTR_APPEND);
        Ok(StatxReply { attr: attr(&a), btime: a.btime, attributes, timeout: self.timeouts(nodeid, Some(a.size)).1 })
    }

    fn ioctl(&self, _ctx: &RequestCtx, nodeid: u64, _fh: u64, _flags: u32, cmd: u32, input: &[u8], _out_size: u32) -> Result<(i32, Vec<u8>)> {
        // The kernel's fileattr code (chattr, lsattr, xfs_io) speaks either
        // 4-byte inode flags or a `struct fsxattr` (it reads the old
        // attributes that way before every change).
        let word = |b: &[u8], at: usize| b.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_ne_bytes).ok_or(Errno(libc::EINVAL));
        match cmd {
            FS_IOC_GETFLAGS => Ok((0, self.fs.get_flags(nodeid).map_err(err)?.to_ne_bytes().to_vec())),
            FS_IOC_SETFLAGS => {
                self.writable()?;
                let flags = word(input, 0)?;
                self.synced(self.fs.set_flags(nodeid, flags).map_err(err), false)?;
                self.attrs_changed(nodeid);
                Ok((0, Vec::new()))
            }
            FS_IOC_FSGETXATTR => {
                let mut out = vec![0u8; FSXATTR_SIZE];
                out[..4].copy_from_slice(&xflags_of(self.fs.get_flags(nodeid).map_err(err)?).to_ne_bytes());
                Ok((0, out))
            }
            FS_IOC_FSSETXATTR => {
                self.writable()?;
                let old = self.fs.get_flags(nodeid).map_err(err)?;
                let new = flags_of_xflags(old, word(input, 0)?).ok_or(Errno(libc::EOPNOTSUPP))?;
                self.synced(self.fs.set_flags(nodeid, new).map_err(err), false)?;
                self.attrs_changed(nodeid);
                Ok((0, Vec::new()))
            }
            _ => Err(Errno(libc::ENOTTY)),
        }
    }

    fn readlink(&self, _ctx: &RequestCtx, nodeid: u64) -> Result<Vec<u8>> {
        self.fs.readlink(nodeid).map_err(err)
    }

    fn symlink(&self, ctx: &RequestCtx, parent: u64, name: &OsStr, target: &OsStr) -> Result<Entry> {
        self.writable()?;
        self.synced(self.fs.symlink(&caller(ctx), parent, name, target).map(|a| self.entry(&a)).map_err(err), true)
    }

    fn mknod(&self, ctx: &RequestCtx, parent: u64, name: &OsStr, mode: u32, rdev: u32, umask: u32) -> Result<Entry> {
        self.writable()?;
        self.synced(self.fs.mknod(&creator(ctx, umask), parent, name, mode, rdev).map(|a| self.entry(&a)).map_err(err), true)
    }

    fn mkdir(&self, ctx: &RequestCtx, parent: u64, name: &OsStr, mode: u32, umask: u32) -> Result<Entry> {
        self.writable()?;
        self.synced(self.fs.mkdir(&creator(ctx, umask), parent, name, mode).map(|a| self.entry(&a)).map_err(err), true)
    }

    fn unlink(&self, ctx: &RequestCtx, parent: u64, name: &OsStr) -> Result<()> {
        self.writable()?;
        self.synced(self.fs.unlink(&caller(ctx), parent, name).map_err(err), true)
    }

    fn rmdir(&self, ctx: &RequestCtx, parent: u64, name: &OsStr) -> Result<()> {
        self.writable()?;
        self.synced(self.fs.rmdir(&caller(ctx), parent, name).map_err(err), true)
    }

    fn rename(&self, ctx: &RequestCtx, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32) -> Result<()> {
        self.writable()?;
        self.synced(self.fs.rename(&caller(ctx), parent, name, newparent, newname, flags).map_err(err), true)
    }

    fn link(&self, ctx: &RequestCtx, nodeid: u64, newparent: u64, newname: &OsStr) -> Result<Entry> {
        self.writable()?;
        self.synced(self.fs.link(&caller(ctx), nodeid, newparent, newname).map(|a| self.entry(&a)).map_err(err), true)
    }

    fn open(&self, ctx: &RequestCtx, nodeid: u64, flags: u32) -> Result<Opened> {
        if flags as i32 & libc::O_ACCMODE != libc::O_RDONLY || flags as i32 & libc::O_TRUNC != 0 {
            self.writable()?;
        }
        let fh = self.fs.open(&caller(ctx), nodeid, flags).map_err(err)?;
        Ok(self.file_opened(nodeid, fh, flags, false))
    }

    fn create(&self, ctx: &RequestCtx, parent: u64, name: &OsStr, mode: u32, umask: u32, flags: u32) -> Result<(Entry, Opened)> {
        self.writable()?;
        let (a, fh) = self.fs.create(&creator(ctx, umask), parent, name, mode, flags).map_err(err)?;
        self.synced(Ok(()), true)?;
        // Opened first: the entry's attribute timeout depends on it. A
        // CREATE of a name that exists opens that file, maybe not empty.
        let opened = self.file_opened(a.ino, fh, flags, a.size == 0);
        Ok((self.entry(&a), opened))
    }

    fn tmpfile(&self, ctx: &RequestCtx, parent: u64, mode: u32, umask: u32, flags: u32) -> Result<(Entry, Opened)> {
        self.writable()?;
        let (a, fh) = self.fs.tmpfile(&creator(ctx, umask), parent, mode, flags).map_err(err)?;
        let opened = self.file_opened(a.ino, fh, flags, true);
        Ok((self.entry(&a), opened))
    }

    fn read(&self, _ctx: &RequestCtx, _nodeid: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        self.fs.read(fh, offset, size).map_err(err)
    }

    fn write(&self, _ctx: &RequestCtx, nodeid: u64, fh: u64, offset: u64, data: &[u8], write_flags: u32) -> Result<u32> {
        self.writable()?;
        if write_flags & fuse_uring::abi::FUSE_WRITE_KILL_SUIDGID != 0 {
            // HANDLE_KILLPRIV_V2: a caller without CAP_FSETID writes.
            self.fs.kill_suidgid(nodeid).map_err(err)?;
        }
        self.fs.write(fh, offset, data).map_err(err)
    }

    fn flush(&self, _ctx: &RequestCtx, _nodeid: u64, fh: u64, _lock_owner: u64) -> Result<()> {
        self.fs.flush(fh).map_err(err)
    }

    fn release(&self, _ctx: &RequestCtx, _nodeid: u64, fh: u64, _flags: u32) -> Result<()> {
        let r = self.fs.release(fh).map_err(err);
        if let Some(b) = &self.backing {
            b.release(fh);
        }
        r
    }

    fn fsync(&self, _ctx: &RequestCtx, _nodeid: u64, fh: u64, datasync: bool) -> Result<()> {
        self.fs.fsync(fh, datasync).map_err(err)
    }

    fn opendir(&self, ctx: &RequestCtx, nodeid: u64, _flags: u32) -> Result<Opened> {
        let fh = self.fs.opendir(&caller(ctx), nodeid).map_err(err)?;
        // The daemon's own directories change only through this mount or
        // through restore, which invalidates them (FUSE_NOTIFY_INVAL_ENTRY
        // bumps the kernel's directory version, INVAL_INODE drops its pages):
        // the kernel may keep their listings (D42). A native root's host tree
        // changes behind the daemon's back: never cached.
        let open_flags = if fs_core::is_host_nodeid(fh) { 0 } else { FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE };
        Ok(Opened { fh, open_flags, backing_id: 0 })
    }

    fn readdir(&self, _ctx: &RequestCtx, nodeid: u64, fh: u64, offset: u64, sink: &mut dyn DirSink) -> Result<()> {
        self.fs
            .readdir(nodeid, fh, offset, &mut |e: &fs_core::DirEntry| {
                sink.push(&DirEntry { ino: e.ino, offset: e.offset, kind: e.kind, name: e.name })
            })
            .map_err(err)
    }

    fn readdirplus(&self, _ctx: &RequestCtx, nodeid: u64, fh: u64, offset: u64, sink: &mut dyn DirPlusSink) -> Result<()> {
        self.fs
            .readdirplus(nodeid, fh, offset, &mut |e: &fs_core::DirEntry, a: Option<&fs_core::Attr>| {
                let d = DirEntry { ino: e.ino, offset: e.offset, kind: e.kind, name: e.name };
                match a {
                    Some(a) => sink.push(&d, &self.listed_entry(a)),
                    // "." and "..": no lookup reference is taken for them.
                    None => sink.push(&d, &Entry::default()),
                }
            })
            .map_err(err)
    }

    fn releasedir(&self, _ctx: &RequestCtx, _nodeid: u64, fh: u64, _flags: u32) -> Result<()> {
        self.fs.releasedir(fh);
        Ok(())
    }

    fn fsyncdir(&self, _ctx: &RequestCtx, _nodeid: u64, fh: u64, _datasync: bool) -> Result<()> {
        self.fs.fsyncdir(fh).map_err(err)
    }

    fn statfs(&self, _ctx: &RequestCtx, _nodeid: u64) -> Result<StatFs> {
        let s = self.fs.statfs();
        Ok(StatFs {
            blocks: s.blocks,
            bfree: s.bfree,
            bavail: s.bavail,
            files: s.files,
            ffree: s.ffree,
            bsize: s.bsize,
            namelen: s.namelen,
            frsize: s.frsize,
        })
    }

    fn setxattr(&self, ctx: &RequestCtx, nodeid: u64, name: &OsStr, value: &[u8], flags: u32, setxattr_flags: u32) -> Result<()> {
        self.writable()?;
        let kill = if setxattr_flags & fuse_uring::abi::FUSE_SETXATTR_ACL_KILL_SGID != 0 { fs_core::XATTR_ACL_KILL_SGID } else { 0 };
        self.synced(self.fs.setxattr(&caller(ctx), nodeid, name, value, (flags & !fs_core::XATTR_ACL_KILL_SGID) | kill).map_err(err), false)
    }

    fn getxattr(&self, _ctx: &RequestCtx, nodeid: u64, name: &OsStr, size: u32) -> Result<XattrReply> {
        self.fs.getxattr(nodeid, name, size).map(xattr).map_err(err)
    }

    fn listxattr(&self, _ctx: &RequestCtx, nodeid: u64, size: u32) -> Result<XattrReply> {
        self.fs.listxattr(nodeid, size).map(xattr).map_err(err)
    }

    fn removexattr(&self, ctx: &RequestCtx, nodeid: u64, name: &OsStr) -> Result<()> {
        self.writable()?;
        self.synced(self.fs.removexattr(&caller(ctx), nodeid, name).map_err(err), false)?;
        if name.as_encoded_bytes() == b"security.capability" {
            let mut m = self.caps_removed.lock().unwrap_or_else(|p| p.into_inner());
            if m.len() >= 64 {
                m.retain(|_, (_, at)| at.elapsed() < Duration::from_secs(1));
            }
            m.insert(nodeid, (ctx.pid, Instant::now()));
        }
        Ok(())
    }

    fn fallocate(&self, _ctx: &RequestCtx, _nodeid: u64, fh: u64, offset: u64, length: u64, mode: u32) -> Result<()> {
        self.writable()?;
        self.fs.fallocate(fh, offset, length, mode).map_err(err)
    }

    fn lseek(&self, _ctx: &RequestCtx, _nodeid: u64, fh: u64, offset: u64, whence: u32) -> Result<u64> {
        self.fs.lseek(fh, offset, whence).map_err(err)
    }

    fn copy_file_range(
        &self,
        _ctx: &RequestCtx,
        _nodeid_in: u64,
        fh_in: u64,
        off_in: u64,
        _nodeid_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        _flags: u64,
    ) -> Result<u64> {
        self.writable()?;
        self.fs.copy_file_range(fh_in, off_in, fh_out, off_out, len).map_err(err)
    }
}
