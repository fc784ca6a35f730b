//! Host trees: the contents of native roots.
//!
//! Owns: serving a host directory tree as FUSE nodeids (`HOST_BIT | st_ino`)
//! until its bind mount lands, confined to the tree. Must not touch: the
//! inode table or the store (the model's root directory is the only link,
//! kept by `fs/roots.rs`).
//!
//! A native root is a local-only directory whose contents are a real
//! directory tree on the host disk, `LOCAL/roots/<ino>` (`ino` = the root
//! directory's inode in the model). The FUSE mount bind-mounts that tree
//! over the directory (crate `native-roots`), after which the kernel never
//! asks the daemon about anything below it. Until the bind mount lands
//! (the moments after `mkdir node_modules`), after `ringfs unroot`, with
//! `--native-roots off`, or for a process whose cwd or open directory is the
//! covered FUSE directory, the daemon serves the same tree itself, here, as
//! a plain passthrough filesystem, so nothing diverges.
//!
//! * **Nodeids.** A host inode is known to FUSE as `HOST_BIT | st_ino`
//!   (the host inode number, stable, equal for hard links). The daemon holds
//!   an `O_PATH` descriptor per nodeid while its lookup count is above 0, so
//!   the host inode number cannot be reused under a live nodeid. The root
//!   directory itself keeps its model inode number.
//! * **Confinement.** Every name is resolved one component at a time from a
//!   held directory descriptor with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`,
//!   `O_PATH | O_NOFOLLOW`; every other call is `*at` on one name or on the
//!   held descriptor itself, so a symlink in the tree is never followed by
//!   the daemon.
//! * **Semantics** are the host filesystem's (ext4): permissions are
//!   checked by the kernel on the FUSE side (`default_permissions`, POSIX
//!   ACLs read from the host inodes); new entries get the caller's uid and
//!   gid (or the parent's gid when it is setgid) and the requested mode
//!   less the caller's umask, or, in a directory with a default ACL, what
//!   the host makes of that ACL and the requested mode.
//! * **Handles** (`HOST_BIT | n`) own their own descriptor. Regular files
//!   are opened `O_RDWR` when possible so that one passthrough backing file
//!   serves every later open of the inode.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::types::{Attr, Caller, DirEntry, Errno, Result, SetAttr, SetTime, XattrValue, XATTR_ACL_KILL_SGID};

/// The bit that marks host nodeids and host file handles.
pub(crate) const HOST_BIT: u64 = 1 << 62;

/// Is this nodeid (or file handle) one of the host trees'?
pub(crate) fn is_host_id(x: u64) -> bool {
    x & HOST_BIT != 0
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_XDEV);

fn cvt(r: libc::c_int) -> Result<libc::c_int> {
    if r < 0 {
        Err(Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)))
    } else {
        Ok(r)
    }
}

fn cname(name: &[u8]) -> Result<CString> {
    if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
        return Err(Errno(libc::EINVAL));
    }
    CString::new(name).map_err(|_| Errno(libc::EINVAL))
}

fn proc_path(fd: RawFd) -> CString {
    CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL")
}

fn fstat(fd: RawFd) -> Result<libc::stat> {
    // SAFETY: `st` is written by the kernel; an all-zero stat is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstatat(fd, c"".as_ptr(), &mut st, libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

fn attr_from(st: &libc::stat, ino: u64) -> Attr {
    Attr {
        ino,
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: st.st_atime,
        atime_nsec: st.st_atime_nsec as u32,
        mtime: st.st_mtime,
        mtime_nsec: st.st_mtime_nsec as u32,
        ctime: st.st_ctime,
        ctime_nsec: st.st_ctime_nsec as u32,
        mode: st.st_mode,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        // The host file's own birth time is not read (statx per stat).
        btime: None,
        flags: 0,
    }
}

/// What a new host entry's mode becomes after it is made (see
/// [`HostTrees::new_mode`]).
#[derive(Clone, Copy)]
enum NewMode {
    /// Exactly these bits.
    Exact(u32),
    /// What the host's default-ACL inheritance made of these bits, with
    /// their set-id and sticky bits.
    Inherited(u32),
}

struct HNode {
    fd: Arc<OwnedFd>,
    lookups: u64,
}

/// One directory entry read from the host: (name, host st_ino, DT_* type).
type HostEntry = (Vec<u8>, u64, u32);

enum HHandle {
    File { file: Arc<File>, append: bool },
    Dir { fd: Arc<OwnedFd>, ino: u64, entries: Vec<HostEntry> },
}

#[derive(Default)]
struct HState {
    nodes: HashMap<u64, HNode>,
    /// Root directory (model inode) → O_PATH descriptor of its tree.
    roots: HashMap<u64, Arc<OwnedFd>>,
    handles: HashMap<u64, HHandle>,
    next_fh: u64,
}

/// Every native root's tree, under one directory (`LOCAL/roots`).
pub(crate) struct HostTrees {
    dir: OwnedFd,
    path: PathBuf,
    st: Mutex<HState>,
    /// `st.roots.len()`, readable without the lock: most workspaces have no
    /// native roots, and every request asks [`HostTrees::serves`].
    root_count: std::sync::atomic::AtomicUsize,
}

impl HostTrees {
    /// Opens (creating if missing, mode 0700: D87) the directory that
    /// holds the trees.
    pub(crate) fn open_dir(path: &Path) -> std::io::Result<HostTrees> {
        crate::private::create_dir_all(path)?;
        let dir = rustix::fs::open(path, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW, Mode::empty())?;
        Ok(HostTrees {
            dir,
            path: path.to_path_buf(),
            st: Mutex::new(HState { next_fh: 1, ..Default::default() }),
            root_count: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Model inode numbers that have a tree on disk.
    pub(crate) fn on_disk(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let Ok(fd) = rustix::fs::openat(&self.dir, ".", OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) else {
            return out;
        };
        let Ok(mut d) = rustix::fs::Dir::read_from(&fd) else { return out };
        for e in d.by_ref().flatten() {
            if let Some(i) = std::str::from_utf8(e.file_name().to_bytes()).ok().and_then(|s| s.parse().ok()) {
                out.push(i);
            }
        }
        out
    }

    /// Serves model directory `ino` from its tree `roots/<ino>`.
    pub(crate) fn attach_root(&self, ino: u64) -> Result<()> {
        let fd = rustix::fs::openat2(
            &self.dir,
            ino.to_string(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        )
        .map_err(|e| Errno(e.raw_os_error()))?;
        let mut st = self.lock();
        st.roots.insert(ino, Arc::new(fd));
        self.root_count.store(st.roots.len(), std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Makes the (empty) tree of a new root directory with its owner and
    /// mode, and serves the directory from it.
    pub(crate) fn create_root(&self, ino: u64, mode: u32, uid: u32, gid: u32) -> Result<()> {
        let name = CString::new(ino.to_string()).expect("digits");
        cvt(unsafe { libc::mkdirat(self.dir.as_raw_fd(), name.as_ptr(), 0o700) })?;
        self.attach_root(ino)?;
        let fd = self.root_fd(ino)?;
        if let Err(e) = set_owner_mode(fd.as_raw_fd(), uid, gid, Some(mode & 0o7777)) {
            let _ = self.remove_root(ino);
            return Err(e);
        }
        Ok(())
    }

    /// rmdir of a root directory: its tree must be empty (ENOTEMPTY).
    pub(crate) fn remove_root(&self, ino: u64) -> Result<()> {
        let name = CString::new(ino.to_string()).expect("digits");
        cvt(unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) })?;
        self.detach_root(ino);
        Ok(())
    }

    /// Stops serving `ino` as a root (its tree moved into another root's).
    pub(crate) fn detach_root(&self, ino: u64) {
        let mut st = self.lock();
        st.roots.remove(&ino);
        self.root_count.store(st.roots.len(), std::sync::atomic::Ordering::Release);
    }

    /// Is `ino` a root directory?
    pub(crate) fn is_root(&self, ino: u64) -> bool {
        if self.root_count.load(std::sync::atomic::Ordering::Acquire) == 0 {
            return false;
        }
        self.lock().roots.contains_key(&ino)
    }

    /// Is `ino` served here (a host nodeid or a root directory)?
    pub(crate) fn serves(&self, ino: u64) -> bool {
        is_host_id(ino) || self.is_root(ino)
    }

    /// The root directories, by model inode.
    pub(crate) fn roots(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.lock().roots.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Host path of root `ino`'s tree (the bind mount's source).
    pub(crate) fn root_path(&self, ino: u64) -> PathBuf {
        self.path.join(ino.to_string())
    }

    fn root_fd(&self, ino: u64) -> Result<Arc<OwnedFd>> {
        self.lock().roots.get(&ino).cloned().ok_or(Errno(libc::ENOENT))
    }

    fn fd(&self, ino: u64) -> Result<Arc<OwnedFd>> {
        let st = self.lock();
        if let Some(n) = st.nodes.get(&ino) {
            return Ok(n.fd.clone());
        }
        st.roots.get(&ino).cloned().ok_or(Errno(libc::ESTALE))
    }

    /// The attributes of `ino` from the host inode (roots keep their model number).
    pub(crate) fn getattr(&self, ino: u64) -> Result<Attr> {
        let fd = self.fd(ino)?;
        Ok(attr_from(&fstat(fd.as_raw_fd())?, ino))
    }

    /// Takes a lookup on the inode `fd` refers to; returns its attributes.
    fn remember(&self, fd: OwnedFd) -> Result<Attr> {
        let st = fstat(fd.as_raw_fd())?;
        let id = HOST_BIT | st.st_ino;
        let mut s = self.lock();
        s.nodes.entry(id).or_insert_with(|| HNode { fd: Arc::new(fd), lookups: 0 }).lookups += 1;
        Ok(attr_from(&st, id))
    }

    fn open_child(parent: &OwnedFd, name: &[u8]) -> Result<OwnedFd> {
        if name.len() > 255 {
            return Err(Errno(libc::ENAMETOOLONG));
        }
        cname(name)?;
        rustix::fs::openat2(parent, OsStr::from_bytes(name), OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty(), RESOLVE)
            .map_err(|e| Errno(e.raw_os_error()))
    }

    /// lookup: +1 lookup on the child. ENOENT, ENOTDIR.
    pub(crate) fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        let p = self.fd(parent)?;
        if name == b"." {
            let a = self.getattr(parent)?;
            if is_host_id(parent) {
                if let Some(n) = self.lock().nodes.get_mut(&parent) {
                    n.lookups += 1;
                }
            }
            return Ok(a);
        }
        let fd = Self::open_child(&p, name)?;
        self.remember(fd)
    }

    /// FORGET: drops `n` lookups; the descriptor closes at zero.
    pub(crate) fn forget(&self, ino: u64, n: u64) {
        let mut s = self.lock();
        if let Some(node) = s.nodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(n);
            if node.lookups == 0 {
                s.nodes.remove(&ino);
            }
        }
    }

    /// chmod, chown, truncate, utimensat on a host inode.
    pub(crate) fn setattr(&self, ino: u64, s: &SetAttr) -> Result<Attr> {
        let fd = self.fd(ino)?;
        let raw = fd.as_raw_fd();
        if s.uid.is_some() || s.gid.is_some() {
            let (u, g) = (s.uid.map(|x| x as libc::uid_t).unwrap_or(u32::MAX), s.gid.map(|x| x as libc::gid_t).unwrap_or(u32::MAX));
            cvt(unsafe { libc::fchownat(raw, c"".as_ptr(), u, g, libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW) })?;
        }
        if let Some(mode) = s.mode {
            chmod_fd(raw, mode & 0o7777)?;
        }
        if let Some(size) = s.size {
            let handle = s.fh.filter(|fh| is_host_id(*fh)).and_then(|fh| match self.lock().handles.get(&fh) {
                Some(HHandle::File { file, .. }) => Some(file.clone()),
                _ => None,
            });
            let file = match handle {
                Some(f) => f,
                None => {
                    let st = fstat(raw)?;
                    match st.st_mode & libc::S_IFMT {
                        libc::S_IFDIR => return Err(Errno(libc::EISDIR)),
                        libc::S_IFREG => {}
                        _ => return Err(Errno(libc::EINVAL)),
                    }
                    Arc::new(reopen(raw, libc::O_WRONLY)?)
                }
            };
            file.set_len(size)?;
        }
        if s.atime.is_some() || s.mtime.is_some() {
            let ts = |t: Option<SetTime>| match t {
                None => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
                Some(SetTime::Now) => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
                Some(SetTime::At(s, ns)) => libc::timespec { tv_sec: s, tv_nsec: ns as i64 },
            };
            let times = [ts(s.atime), ts(s.mtime)];
            cvt(unsafe { libc::utimensat(raw, c"".as_ptr(), times.as_ptr(), libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW) })?;
        }
        if s.kill_suidgid {
            // The daemon's own truncate or write (CAP_FSETID) leaves the
            // host's set-id bits alone; the caller's would not have.
            self.kill_suidgid(ino)?;
        }
        self.getattr(ino)
    }

    /// Clears S_ISUID, and S_ISGID if S_IXGRP is set, of a host
    /// non-directory (see `Fs::kill_suidgid`); nothing when neither is set.
    pub(crate) fn kill_suidgid(&self, ino: u64) -> Result<()> {
        let fd = self.fd(ino)?;
        let mode = fstat(fd.as_raw_fd())?.st_mode;
        let killed = crate::posix::killed_privs(mode);
        if killed != mode {
            chmod_fd(fd.as_raw_fd(), killed & 0o7777)?;
        }
        Ok(())
    }

    /// FS_IOC_GETFLAGS of a host file or directory (the host filesystem
    /// keeps and enforces its flags). ENOTTY for other kinds.
    pub(crate) fn get_flags(&self, ino: u64) -> Result<u32> {
        let f = self.flags_file(ino)?;
        let mut flags: libc::c_int = 0;
        cvt(unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_GETFLAGS as _, &mut flags) })?;
        Ok(flags as u32)
    }

    /// FS_IOC_SETFLAGS of a host file or directory.
    pub(crate) fn set_flags(&self, ino: u64, flags: u32) -> Result<()> {
        let f = self.flags_file(ino)?;
        let v = flags as libc::c_int;
        cvt(unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_SETFLAGS as _, &v) }).map(|_| ())
    }

    /// A descriptor of a regular file or directory that takes the flag
    /// ioctls (an O_PATH one does not); opening has no side effect for those.
    fn flags_file(&self, ino: u64) -> Result<File> {
        let fd = self.fd(ino)?;
        match fstat(fd.as_raw_fd())?.st_mode & libc::S_IFMT {
            libc::S_IFREG | libc::S_IFDIR => reopen(fd.as_raw_fd(), libc::O_RDONLY | libc::O_NONBLOCK),
            _ => Err(Errno(libc::ENOTTY)),
        }
    }

    /// readlink(2).
    pub(crate) fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let fd = self.fd(ino)?;
        let mut buf = vec![0u8; 4097];
        let n = unsafe { libc::readlinkat(fd.as_raw_fd(), c"".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    /// (uid, gid) for a new entry of `c` in directory `pfd`, and whether
    /// the directory is setgid.
    fn owner_for(pfd: RawFd, c: &Caller) -> Result<(u32, u32, bool)> {
        let p = fstat(pfd)?;
        let sgid = p.st_mode & libc::S_ISGID != 0;
        Ok((c.uid, if sgid { p.st_gid } else { c.gid }, sgid))
    }

    /// How to make a new entry of permission bits `mode` in directory
    /// `pfd` for `c`: the bits to create it with, and its [`NewMode`].
    /// Without a default ACL there it is made owner-only (`private`) and
    /// then given exactly `mode` less the umask; with one, the host's
    /// `posix_acl_create` decides from `mode` itself (the umask ignored).
    fn new_mode(pfd: RawFd, c: &Caller, mode: u32, private: u32) -> (u32, NewMode) {
        let p = proc_path(pfd);
        let acl = unsafe { libc::getxattr(p.as_ptr(), c"system.posix_acl_default".as_ptr(), std::ptr::null_mut(), 0) } > 0;
        match acl {
            true => (mode & 0o777, NewMode::Inherited(mode)),
            false => (private, NewMode::Exact(mode & !(c.umask & 0o777))),
        }
    }

    /// Gives the new entry `name` in `pfd` its owner and mode, then
    /// remembers it (+1 lookup). On failure the entry is removed again.
    fn finish_new(&self, pfd: &OwnedFd, name: &[u8], c: &Caller, mode: Option<NewMode>, dir: bool) -> Result<Attr> {
        let r = (|| {
            let fd = Self::open_child(pfd, name)?;
            Self::own_new(fd.as_raw_fd(), pfd.as_raw_fd(), c, mode, dir)?;
            self.remember(fd)
        })();
        if r.is_err() {
            if let Ok(n) = cname(name) {
                unsafe { libc::unlinkat(pfd.as_raw_fd(), n.as_ptr(), if dir { libc::AT_REMOVEDIR } else { 0 }) };
            }
        }
        r
    }

    /// The owner and mode of new inode `fd` in directory `pfd` (see
    /// [`HostTrees::new_mode`]); a setgid directory's subdirectory keeps
    /// S_ISGID. chown clears set-id bits, so they are put back after it.
    fn own_new(fd: RawFd, pfd: RawFd, c: &Caller, mode: Option<NewMode>, dir: bool) -> Result<()> {
        let (uid, gid, sgid) = Self::owner_for(pfd, c)?;
        let sg = |m: u32| if dir && sgid { m | libc::S_ISGID } else { m };
        match mode {
            None => set_owner_mode(fd, uid, gid, None),
            Some(NewMode::Exact(m)) => set_owner_mode(fd, uid, gid, Some(sg(m))),
            Some(NewMode::Inherited(m)) => {
                set_owner_mode(fd, uid, gid, None)?;
                let cur = fstat(fd)?.st_mode & 0o7777;
                let want = (cur & 0o777) | (sg(m) & 0o7000);
                if want != cur {
                    chmod_fd(fd, want)?;
                }
                Ok(())
            }
        }
    }

    /// mkdir(2) in a host directory.
    pub(crate) fn mkdir(&self, c: &Caller, parent: u64, name: &[u8], mode: u32) -> Result<Attr> {
        let p = self.fd(parent)?;
        let n = cname(name)?;
        let (made, mode) = Self::new_mode(p.as_raw_fd(), c, mode & 0o7777, 0o700);
        cvt(unsafe { libc::mkdirat(p.as_raw_fd(), n.as_ptr(), made) })?;
        self.finish_new(&p, name, c, Some(mode), true)
    }

    /// mknod(2) in a host directory (regular files, FIFOs, sockets, devices).
    pub(crate) fn mknod(&self, c: &Caller, parent: u64, name: &[u8], mode: u32, rdev: u32) -> Result<Attr> {
        let p = self.fd(parent)?;
        let n = cname(name)?;
        let (made, perm) = Self::new_mode(p.as_raw_fd(), c, mode & 0o7777, 0o600);
        cvt(unsafe { libc::mknodat(p.as_raw_fd(), n.as_ptr(), (mode & libc::S_IFMT) | made, rdev as libc::dev_t) })?;
        self.finish_new(&p, name, c, Some(perm), false)
    }

    /// symlink(2) in a host directory.
    pub(crate) fn symlink(&self, c: &Caller, parent: u64, name: &[u8], target: &[u8]) -> Result<Attr> {
        let p = self.fd(parent)?;
        let n = cname(name)?;
        let t = CString::new(target).map_err(|_| Errno(libc::EINVAL))?;
        cvt(unsafe { libc::symlinkat(t.as_ptr(), p.as_raw_fd(), n.as_ptr()) })?;
        self.finish_new(&p, name, c, None, false)
    }

    /// open(2) with O_CREAT in a host directory: (attributes, handle).
    pub(crate) fn create(&self, c: &Caller, parent: u64, name: &[u8], mode: u32, flags: u32) -> Result<(Attr, u64)> {
        let p = self.fd(parent)?;
        let n = cname(name)?;
        let fl = flags as i32;
        let (perms, perm) = Self::new_mode(p.as_raw_fd(), c, mode & 0o7777, 0o600);
        let made = unsafe { libc::openat(p.as_raw_fd(), n.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_RDWR | libc::O_CLOEXEC, perms) };
        let attr = if made >= 0 {
            unsafe { libc::close(made) };
            self.finish_new(&p, name, c, Some(perm), false)?
        } else {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) || fl & libc::O_EXCL != 0 {
                return Err(e.into());
            }
            let a = self.lookup(parent, name)?;
            if a.mode & libc::S_IFMT == libc::S_IFDIR {
                self.forget(a.ino, 1);
                return Err(Errno(libc::EISDIR));
            }
            a
        };
        match self.open(attr.ino, flags) {
            Ok(fh) => {
                if fl & libc::O_TRUNC != 0 && made < 0 {
                    if let Some(HHandle::File { file, .. }) = self.lock().handles.get(&fh) {
                        file.set_len(0)?;
                    }
                }
                Ok((self.getattr(attr.ino)?, fh))
            }
            Err(e) => {
                self.forget(attr.ino, 1);
                Err(e)
            }
        }
    }

    /// open(2) with O_TMPFILE in a host directory: the host's unnamed
    /// inode (+1 lookup) and a handle. The host inode stays linkable; the
    /// kernel refuses link(2) of one opened with O_EXCL on the FUSE side.
    pub(crate) fn tmpfile(&self, c: &Caller, parent: u64, mode: u32, flags: u32) -> Result<(Attr, u64)> {
        let p = self.fd(parent)?;
        let fl = flags as i32;
        let keep = fl & (libc::O_NONBLOCK | libc::O_SYNC | libc::O_DSYNC | libc::O_NOATIME);
        let (perms, perm) = Self::new_mode(p.as_raw_fd(), c, mode & 0o7777, 0o600);
        let r = cvt(unsafe { libc::openat(p.as_raw_fd(), c".".as_ptr(), libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC | keep, perms) })?;
        // SAFETY: `r` is a fresh descriptor we own.
        let file = unsafe { File::from_raw_fd(r) };
        Self::own_new(file.as_raw_fd(), p.as_raw_fd(), c, Some(perm), false)?;
        let attr = self.remember(OwnedFd::from(file.try_clone()?))?;
        Ok((attr, self.add_handle(HHandle::File { file: Arc::new(file), append: fl & libc::O_APPEND != 0 })))
    }

    /// unlink(2) in a host directory.
    pub(crate) fn unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        let p = self.fd(parent)?;
        let n = cname(name)?;
        cvt(unsafe { libc::unlinkat(p.as_raw_fd(), n.as_ptr(), 0) }).map(|_| ())
    }

    /// rmdir(2) in a host directory.
    pub(crate) fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        let p = self.fd(parent)?;
        if name == b"." {
            return Err(Errno(libc::EINVAL));
        }
        if name == b".." {
            return Err(Errno(libc::ENOTEMPTY));
        }
        let n = cname(name)?;
        cvt(unsafe { libc::unlinkat(p.as_raw_fd(), n.as_ptr(), libc::AT_REMOVEDIR) }).map(|_| ())
    }

    /// renameat2(2) between host directories (any trees).
    pub(crate) fn rename(&self, parent: u64, name: &[u8], newparent: u64, newname: &[u8], flags: u32) -> Result<()> {
        let (p, np) = (self.fd(parent)?, self.fd(newparent)?);
        let (n, nn) = (cname(name).map_err(|_| Errno(libc::EBUSY))?, cname(newname).map_err(|_| Errno(libc::EBUSY))?);
        cvt(unsafe { libc::renameat2(p.as_raw_fd(), n.as_ptr(), np.as_raw_fd(), nn.as_ptr(), flags) }).map(|_| ())
    }

    /// link(2) of host inode `ino` as `newname` in host directory `newparent`.
    pub(crate) fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Attr> {
        let (fd, np) = (self.fd(ino)?, self.fd(newparent)?);
        let nn = cname(newname)?;
        cvt(unsafe { libc::linkat(fd.as_raw_fd(), c"".as_ptr(), np.as_raw_fd(), nn.as_ptr(), libc::AT_EMPTY_PATH) })?;
        let fd = Self::open_child(&np, newname)?;
        self.remember(fd)
    }

    fn add_handle(&self, h: HHandle) -> u64 {
        let mut s = self.lock();
        let fh = HOST_BIT | s.next_fh;
        s.next_fh += 1;
        s.handles.insert(fh, h);
        fh
    }

    /// open(2) of a host inode: a handle. Directories: EISDIR when writing.
    pub(crate) fn open(&self, ino: u64, flags: u32) -> Result<u64> {
        let fd = self.fd(ino)?;
        let st = fstat(fd.as_raw_fd())?;
        let fl = flags as i32;
        let acc = fl & libc::O_ACCMODE;
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR && acc != libc::O_RDONLY {
            return Err(Errno(libc::EISDIR));
        }
        let keep = fl & (libc::O_NONBLOCK | libc::O_SYNC | libc::O_DSYNC | libc::O_NOATIME);
        let is_reg = st.st_mode & libc::S_IFMT == libc::S_IFREG;
        let file = if is_reg {
            // One backing file serves every open of the inode: read-write if we can.
            match reopen(fd.as_raw_fd(), libc::O_RDWR | keep) {
                Ok(f) => f,
                Err(e) if acc == libc::O_RDONLY && matches!(e.0, libc::EACCES | libc::ETXTBSY | libc::EROFS | libc::EPERM) => {
                    reopen(fd.as_raw_fd(), libc::O_RDONLY | keep)?
                }
                Err(e) => return Err(e),
            }
        } else {
            reopen(fd.as_raw_fd(), acc | keep)?
        };
        Ok(self.add_handle(HHandle::File { file: Arc::new(file), append: fl & libc::O_APPEND != 0 }))
    }

    fn file(&self, fh: u64) -> Result<(Arc<File>, bool)> {
        match self.lock().handles.get(&fh) {
            Some(HHandle::File { file, append }) => Ok((file.clone(), *append)),
            Some(_) => Err(Errno(libc::EISDIR)),
            None => Err(Errno(libc::EBADF)),
        }
    }

    /// The descriptor behind a file handle (passthrough backing file).
    pub(crate) fn handle_fd(&self, fh: u64) -> Option<RawFd> {
        self.file(fh).ok().map(|(f, _)| f.as_raw_fd())
    }

    /// pread(2): at most `size` bytes.
    pub(crate) fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let (f, _) = self.file(fh)?;
        crate::posix::pread_full(&f, offset, size)
    }

    /// pwrite(2) (at end of file for O_APPEND handles).
    pub(crate) fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        let (f, append) = self.file(fh)?;
        let offset = if append { f.metadata()?.len() } else { offset };
        f.write_all_at(data, offset)?;
        Ok(data.len() as u32)
    }

    /// The last close of a file or directory handle.
    pub(crate) fn release(&self, fh: u64) -> Result<()> {
        self.lock().handles.remove(&fh).map(|_| ()).ok_or(Errno(libc::EBADF))
    }

    /// fsync(2)/fdatasync(2) of a file handle, or of a directory handle.
    pub(crate) fn fsync(&self, fh: u64, datasync: bool) -> Result<()> {
        let h = match self.lock().handles.get(&fh) {
            Some(HHandle::File { file, .. }) => Ok(file.clone()),
            Some(HHandle::Dir { fd, .. }) => Err(fd.clone()),
            None => return Err(Errno(libc::EBADF)),
        };
        match h {
            Ok(f) if datasync => f.sync_data()?,
            Ok(f) => f.sync_all()?,
            Err(d) => reopen(d.as_raw_fd(), libc::O_RDONLY | libc::O_DIRECTORY)?.sync_all()?,
        }
        Ok(())
    }

    /// fallocate(2).
    pub(crate) fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: u32) -> Result<()> {
        let (f, _) = self.file(fh)?;
        cvt(unsafe { libc::fallocate(f.as_raw_fd(), mode as i32, offset as i64, length as i64) }).map(|_| ())
    }

    /// lseek(2) with SEEK_DATA / SEEK_HOLE (others: the kernel's business).
    pub(crate) fn lseek(&self, fh: u64, offset: u64, whence: u32) -> Result<u64> {
        let (f, _) = self.file(fh)?;
        let r = unsafe { libc::lseek(f.as_raw_fd(), offset as i64, whence as i32) };
        if r < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(r as u64)
    }

    /// opendir(3) of a host directory.
    pub(crate) fn opendir(&self, ino: u64) -> Result<u64> {
        let fd = self.fd(ino)?;
        if fstat(fd.as_raw_fd())?.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(Errno(libc::ENOTDIR));
        }
        Ok(self.add_handle(HHandle::Dir { fd, ino, entries: Vec::new() }))
    }

    /// The entries of a directory handle from `offset` (index + 1 of the
    /// last taken); offset 0 re-reads the directory (rewinddir).
    fn entries_from(&self, fh: u64, offset: u64) -> Result<(u64, Vec<HostEntry>)> {
        let fd = match self.lock().handles.get(&fh) {
            Some(HHandle::Dir { fd, .. }) => fd.clone(),
            Some(_) => return Err(Errno(libc::ENOTDIR)),
            None => return Err(Errno(libc::EBADF)),
        };
        if offset == 0 {
            let d = reopen(fd.as_raw_fd(), libc::O_RDONLY | libc::O_DIRECTORY)?;
            let mut out = Vec::new();
            let mut dir = rustix::fs::Dir::read_from(&d).map_err(|e| Errno(e.raw_os_error()))?;
            for e in dir.by_ref() {
                let e = e.map_err(|e| Errno(e.raw_os_error()))?;
                out.push((e.file_name().to_bytes().to_vec(), e.ino(), dtype(e.file_type())));
            }
            if let Some(HHandle::Dir { entries, .. }) = self.lock().handles.get_mut(&fh) {
                *entries = out;
            }
        }
        match self.lock().handles.get(&fh) {
            Some(HHandle::Dir { ino, entries, .. }) => Ok((*ino, entries.iter().skip(offset as usize).cloned().collect())),
            _ => Err(Errno(libc::EBADF)),
        }
    }

    /// readdir(3) of a directory handle.
    pub(crate) fn readdir(&self, fh: u64, offset: u64, sink: &mut dyn FnMut(&DirEntry) -> bool) -> Result<()> {
        let (dino, list) = self.entries_from(fh, offset)?;
        for (i, (name, ino, kind)) in list.iter().enumerate() {
            let ino = if name == b"." { dino } else { HOST_BIT | ino };
            if !sink(&DirEntry { ino, offset: offset + i as u64 + 1, kind: *kind, name }) {
                break;
            }
        }
        Ok(())
    }

    /// readdirplus: as readdir, with a lookup (+1) and attributes per child.
    pub(crate) fn readdirplus(&self, fh: u64, offset: u64, sink: &mut dyn FnMut(&DirEntry, Option<&Attr>) -> bool) -> Result<()> {
        let (dino, list) = self.entries_from(fh, offset)?;
        for (i, (name, ino, kind)) in list.iter().enumerate() {
            let off = offset + i as u64 + 1;
            let attr = if name == b"." || name == b".." {
                None
            } else {
                match self.lookup(dino, name) {
                    Ok(a) => Some(a),
                    Err(_) => continue, // gone since the directory was read
                }
            };
            let ino = match (&attr, name.as_slice()) {
                (Some(a), _) => a.ino,
                (None, b".") => dino,
                (None, _) => HOST_BIT | ino,
            };
            if !sink(&DirEntry { ino, offset: off, kind: *kind, name }, attr.as_ref()) {
                if let Some(a) = attr {
                    self.forget(a.ino, 1);
                }
                break;
            }
        }
        Ok(())
    }

    /// setxattr(2) / getxattr(2) / listxattr(2) / removexattr(2) on the host
    /// inode. ACLs are the host's (it keeps the mode in step); with
    /// [`XATTR_ACL_KILL_SGID`] an access ACL also clears S_ISGID, which the
    /// daemon's own call (CAP_FSETID) would not.
    pub(crate) fn setxattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: u32) -> Result<()> {
        let (p, n) = (self.xpath(ino)?, CString::new(name.as_bytes()).map_err(|_| Errno(libc::EINVAL))?);
        let fl = (flags & !XATTR_ACL_KILL_SGID) as i32;
        cvt(unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), fl) })?;
        if flags & XATTR_ACL_KILL_SGID != 0 && name.as_bytes() == crate::acl::ACCESS {
            let fd = self.fd(ino)?;
            let mode = fstat(fd.as_raw_fd())?.st_mode;
            if mode & libc::S_ISGID != 0 {
                chmod_fd(fd.as_raw_fd(), mode & 0o7777 & !libc::S_ISGID)?;
            }
        }
        Ok(())
    }

    pub(crate) fn getxattr(&self, ino: u64, name: &OsStr, size: u32) -> Result<XattrValue> {
        let (p, n) = (self.xpath(ino)?, CString::new(name.as_bytes()).map_err(|_| Errno(libc::EINVAL))?);
        xattr_call(size, |buf, len| unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.cast(), len) })
    }

    pub(crate) fn listxattr(&self, ino: u64, size: u32) -> Result<XattrValue> {
        let p = self.xpath(ino)?;
        xattr_call(size, |buf, len| unsafe { libc::listxattr(p.as_ptr(), buf.cast(), len) })
    }

    pub(crate) fn removexattr(&self, ino: u64, name: &OsStr) -> Result<()> {
        let (p, n) = (self.xpath(ino)?, CString::new(name.as_bytes()).map_err(|_| Errno(libc::EINVAL))?);
        cvt(unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) }).map(|_| ())
    }

    /// /proc/self/fd path of a held descriptor, valid while `fd` lives:
    /// callers keep the node looked up (the kernel does for the call).
    fn xpath(&self, ino: u64) -> Result<CString> {
        let fd = self.fd(ino)?;
        Ok(proc_path(fd.as_raw_fd()))
    }
}

/// ioctl(2) requests of linux/fs.h (`_IOR('f', 1, long)`, `_IOW('f', 2, long)`).
const FS_IOC_GETFLAGS: u64 = 0x8008_6601;
const FS_IOC_SETFLAGS: u64 = 0x4008_6602;

/// Opens the inode behind O_PATH descriptor `fd` with `flags`, through its
/// /proc/self/fd magic link (our own descriptor: nothing to resolve).
fn reopen(fd: RawFd, flags: i32) -> Result<File> {
    let p = proc_path(fd);
    let r = cvt(unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: `r` is a fresh descriptor we own.
    Ok(unsafe { File::from_raw_fd(r) })
}

fn chmod_fd(fd: RawFd, mode: u32) -> Result<()> {
    let st = fstat(fd)?;
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(Errno(libc::EOPNOTSUPP));
    }
    let p = proc_path(fd);
    cvt(unsafe { libc::chmod(p.as_ptr(), mode) }).map(|_| ())
}

/// chown, then the exact mode (chown clears set-id bits).
fn set_owner_mode(fd: RawFd, uid: u32, gid: u32, mode: Option<u32>) -> Result<()> {
    cvt(unsafe { libc::fchownat(fd, c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW) })?;
    if let Some(m) = mode {
        chmod_fd(fd, m)?;
    }
    Ok(())
}

fn xattr_call(size: u32, f: impl Fn(*mut u8, usize) -> isize) -> Result<XattrValue> {
    if size == 0 {
        let n = f(std::ptr::null_mut(), 0);
        if n < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        return Ok(XattrValue::Size(n as u32));
    }
    let mut buf = vec![0u8; size as usize];
    let n = f(buf.as_mut_ptr(), buf.len());
    if n < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    buf.truncate(n as usize);
    Ok(XattrValue::Data(buf))
}

fn dtype(t: rustix::fs::FileType) -> u32 {
    use rustix::fs::FileType as T;
    (match t {
        T::RegularFile => libc::DT_REG,
        T::Directory => libc::DT_DIR,
        T::Symlink => libc::DT_LNK,
        T::Fifo => libc::DT_FIFO,
        T::Socket => libc::DT_SOCK,
        T::CharacterDevice => libc::DT_CHR,
        T::BlockDevice => libc::DT_BLK,
        _ => libc::DT_UNKNOWN,
    }) as u32
}

/// copy_file_range(2) between two descriptors (either side may be a host handle).
pub(crate) fn copy_range(fd_in: RawFd, off_in: u64, fd_out: RawFd, off_out: u64, len: u64) -> Result<u64> {
    let (mut a, mut b) = (off_in as i64, off_out as i64);
    let n = unsafe { libc::copy_file_range(fd_in, &mut a, fd_out, &mut b, len as usize, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(n as u64)
}
