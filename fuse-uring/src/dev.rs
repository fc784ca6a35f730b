//! The `/dev/fuse` device: the session's fd ([`FuseDev`]), the classic
//! read/write transport (`worker_loop`: read one request, dispatch, write
//! one reply; slow requests handed to a [`SlowPool`](crate::slow)), cloned per-worker fds ([`clone_fd`]), kernel notifications
//! ([`Notifier`]) and passthrough backing ids ([`backing_open`],
//! [`backing_close`]).
//!
//! Only moves bytes and issues ioctls on the fd: decoding, the filesystem
//! call and encoding are the [`Dispatcher`]'s. It does not mount, answer
//! INIT, choose a transport or know about io_uring rings (the ring transport
//! builds on [`FuseDev`]; the session on both).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use crate::abi::*;
use crate::dispatch::Dispatcher;
use crate::fs::Filesystem;
use crate::reply::ReplyBuf;
use crate::slow::SlowPool;

/// A shared handle on the session's `/dev/fuse` fd (the one `mount(2)` was
/// given). Needed for notifications and passthrough backing ids; cheap to clone.
#[derive(Clone, Debug)]
pub struct FuseDev(Arc<OwnedFd>);

impl FuseDev {
    /// Shares `fd`, a `/dev/fuse` fd, as the session's device.
    pub(crate) fn new(fd: OwnedFd) -> FuseDev {
        FuseDev(Arc::new(fd))
    }
}

impl AsFd for FuseDev {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub(crate) fn open_dev_fuse() -> io::Result<OwnedFd> {
    // SAFETY: plain open(2) of a constant NUL-terminated path.
    let fd = cvt(unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by open(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a new `/dev/fuse` fd attached to `session`'s connection
/// (`FUSE_DEV_IOC_CLONE`), so a worker gets its own request processing queue.
pub fn clone_fd(session: impl AsFd) -> io::Result<OwnedFd> {
    let fd = open_dev_fuse()?;
    let mut src: u32 = session.as_fd().as_raw_fd() as u32;
    // SAFETY: the ioctl reads one u32 (the session fd number) from `src`.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), FUSE_DEV_IOC_CLONE as _, &mut src as *mut u32) })?;
    Ok(fd)
}

/// `FUSE_DEV_IOC_BACKING_OPEN`: registers `file` as a passthrough backing file
/// on the connection of `dev` (the session fd) and returns its backing id, for
/// `Opened::backing_id` with `FOPEN_PASSTHROUGH`. Each call makes a new id.
/// Errors: EPERM without CAP_SYS_ADMIN in the initial user namespace,
/// EOPNOTSUPP if passthrough was not negotiated, EISDIR/EINVAL for files that
/// cannot back (kernel doc: Documentation/filesystems/fuse-passthrough.rst).
pub fn backing_open(dev: impl AsFd, file: impl AsFd) -> io::Result<i32> {
    let map = fuse_backing_map { fd: file.as_fd().as_raw_fd(), flags: 0, padding: 0 };
    // SAFETY: the ioctl reads a `fuse_backing_map` from the pointer.
    cvt(unsafe { libc::ioctl(dev.as_fd().as_raw_fd(), FUSE_DEV_IOC_BACKING_OPEN as _, &map as *const fuse_backing_map) })
}

/// `FUSE_DEV_IOC_BACKING_CLOSE`: drops backing id `id` (files already opened
/// with it keep their backing file). Errors: ENOENT for an unknown id.
pub fn backing_close(dev: impl AsFd, id: i32) -> io::Result<()> {
    let id = id as u32;
    // SAFETY: the ioctl reads one u32 from the pointer.
    cvt(unsafe { libc::ioctl(dev.as_fd().as_raw_fd(), FUSE_DEV_IOC_BACKING_CLOSE as _, &id as *const u32) })?;
    Ok(())
}

pub(crate) fn read_request(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: reads into a live, writable buffer of buf.len() bytes.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr() as *mut _, buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // ENOENT: the request was interrupted before we read it.
            Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::ENOENT) => continue,
            _ => return Err(e),
        }
    }
}

/// Writes one reply with one write(2) of the whole message. ENOENT (request
/// interrupted and gone) is not an error.
pub(crate) fn write_reply(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: writes from a live slice of bytes.len() bytes.
    retry_write(|| unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr() as *const _, bytes.len()) })
}

/// Runs one write to /dev/fuse (`write` returns what write(2)/writev(2)
/// does) until it is not EINTR/EAGAIN; ENOENT is success (the request was
/// interrupted and is gone, or nothing is cached for a notification).
fn retry_write(mut write: impl FnMut() -> isize) -> io::Result<()> {
    loop {
        if write() >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
            Some(libc::ENOENT) => return Ok(()),
            _ => return Err(e),
        }
    }
}

/// Writes one message made of `parts` to /dev/fuse with writev(2), retrying
/// on EINTR/EAGAIN. ENOENT is not an error: the request was interrupted and
/// is gone, or (notifications) nothing is cached for that inode or entry.
fn write_parts(fd: BorrowedFd<'_>, parts: &[&[u8]]) -> io::Result<()> {
    let iov: Vec<libc::iovec> = parts.iter().map(|p| libc::iovec { iov_base: p.as_ptr() as *mut _, iov_len: p.len() }).collect();
    // SAFETY: every iovec points into a live slice borrowed for this call.
    retry_write(|| unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), iov.len() as i32) })
}

/// Sends kernel cache invalidations (`FUSE_NOTIFY_*`, kernel doc: fuse.h
/// "notify") on the session fd, with `unique` 0. Clonable; usable from any
/// thread, also while `run` serves requests.
///
/// Do not invalidate a directory's entry from inside a request that holds
/// that directory locked in the kernel (e.g. inval_entry(parent, ..) while
/// answering a LOOKUP/CREATE in `parent`): the kernel would deadlock. Send
/// such notifications from another thread.
#[derive(Clone, Debug)]
pub struct Notifier {
    dev: FuseDev,
}

impl Notifier {
    /// Notifications on `dev`.
    pub(crate) fn new(dev: FuseDev) -> Notifier {
        Notifier { dev }
    }

    fn send(&self, code: i32, parts: &[&[u8]]) -> io::Result<()> {
        let len: usize = std::mem::size_of::<fuse_out_header>() + parts.iter().map(|p| p.len()).sum::<usize>();
        let h = fuse_out_header { len: len as u32, error: code, unique: 0 };
        let all: Vec<&[u8]> = std::iter::once(h.as_bytes()).chain(parts.iter().copied()).collect();
        write_parts(self.dev.as_fd(), &all)
    }

    fn check_name(name: &OsStr) -> io::Result<&[u8]> {
        let b = name.as_bytes();
        if b.len() > FUSE_NAME_MAX {
            return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        }
        Ok(b)
    }

    /// FUSE_NOTIFY_INVAL_ENTRY: drop the kernel's cached dentry `name` in
    /// directory `parent` (positive or negative). Ok if it was not cached.
    pub fn inval_entry(&self, parent: u64, name: &OsStr) -> io::Result<()> {
        let b = Self::check_name(name)?;
        let arg = fuse_notify_inval_entry_out { parent, namelen: b.len() as u32, flags: 0 };
        self.send(FUSE_NOTIFY_INVAL_ENTRY, &[arg.as_bytes(), b, &[0]])
    }

    /// FUSE_NOTIFY_INVAL_INODE: drop cached attributes of `nodeid` and its
    /// page cache from byte `off` for `len` bytes (`len` 0 = to the end;
    /// `off` < 0 = attributes only). Ok if the inode is not cached.
    pub fn inval_inode(&self, nodeid: u64, off: i64, len: i64) -> io::Result<()> {
        let arg = fuse_notify_inval_inode_out { ino: nodeid, off, len };
        self.send(FUSE_NOTIFY_INVAL_INODE, &[arg.as_bytes()])
    }

    /// FUSE_NOTIFY_DELETE: `name` in `parent` (which was `child`) is gone;
    /// the kernel drops the dentry and, if `child` is an unused directory,
    /// marks it dead. Ok if nothing was cached.
    pub fn delete(&self, parent: u64, child: u64, name: &OsStr) -> io::Result<()> {
        let b = Self::check_name(name)?;
        let arg = fuse_notify_delete_out { parent, child, namelen: b.len() as u32, padding: 0 };
        self.send(FUSE_NOTIFY_DELETE, &[arg.as_bytes(), b, &[0]])
    }

    /// FUSE_NOTIFY_STORE: put `data` in the page cache of `nodeid` at byte
    /// `offset` (fs/fuse/dev.c `fuse_notify_store`: the pages it fills
    /// become up to date; a store past the cached size extends it). ENOENT
    /// if the kernel has no inode `nodeid`, EINVAL if it is not a regular
    /// file. The caller keeps the pages right: the kernel drops them only
    /// on an open without FOPEN_KEEP_CACHE or an invalidation.
    pub fn store(&self, nodeid: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        let size = u32::try_from(data.len()).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        let arg = fuse_notify_store_out { nodeid, offset, size, padding: 0 };
        self.send(FUSE_NOTIFY_STORE, &[arg.as_bytes(), data])
    }
}

/// Serves requests on `fd` until the connection ends: reads one whole
/// request into a `bufsize` buffer, [`Dispatcher::dispatch`]es it (a panic in
/// the filesystem is answered EIO) and writes the reply. With a `pool`, a
/// slow request ([`Filesystem::is_slow`]) is copied and handed to it, and the
/// reply is written by the pool thread on the same fd, so this reader goes
/// straight back to read(2) (the io_uring transport's rule). Ok on ENODEV or
/// ECONNABORTED (unmounted or aborted); other read errors end it with Err.
pub(crate) fn worker_loop<F: Filesystem>(
    fd: Arc<OwnedFd>,
    d: &Arc<Dispatcher<F>>,
    bufsize: usize,
    pool: Option<&Arc<SlowPool>>,
) -> io::Result<()> {
    let mut buf = vec![0u8; bufsize];
    let mut reply = ReplyBuf::with_capacity(64 * 1024);
    loop {
        let n = match read_request(fd.as_fd(), &mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV) | Some(libc::ECONNABORTED)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let req = &buf[..n];
        if let Some(pool) = pool.filter(|p| p.started() && is_slow_request(&**d, req)) {
            let (fd, d, req) = (fd.clone(), d.clone(), req.to_vec());
            pool.submit(Box::new(move |reply: &mut ReplyBuf| {
                let _ = serve_one(fd.as_fd(), &d, &req, reply);
            }));
            continue;
        }
        if !serve_one(fd.as_fd(), d, req, &mut reply) {
            return Ok(());
        }
        // Do not let one huge reply pin memory forever.
        if reply.body_len() > 4 << 20 {
            reply = ReplyBuf::with_capacity(64 * 1024);
        }
    }
}

/// Whether the request in `req` (a whole `/dev/fuse` message) is slow for
/// `d`'s filesystem ([`Filesystem::is_slow`] with its opcode and, for READ
/// and WRITE, its size). Unparsable requests are not slow.
fn is_slow_request<F: Filesystem>(d: &Dispatcher<F>, req: &[u8]) -> bool {
    let Some(h) = fuse_in_header::read_from(req) else { return false };
    let arg = req.get(std::mem::size_of::<fuse_in_header>()..).unwrap_or(&[]);
    let size = match h.opcode {
        FUSE_READ => fuse_read_in::read_from(arg).map_or(0, |a| a.size),
        FUSE_WRITE => fuse_write_in::read_from(arg).map_or(0, |a| a.size),
        _ => 0,
    };
    d.filesystem().is_slow(h.opcode, size)
}

/// Dispatches one request and writes its reply on `fd` (a panic in the
/// filesystem is answered EIO). False when the connection is gone (ENODEV,
/// ECONNABORTED on the reply); a reply that fails otherwise is logged.
fn serve_one<F: Filesystem>(fd: BorrowedFd<'_>, d: &Dispatcher<F>, req: &[u8], reply: &mut ReplyBuf) -> bool {
    let send = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.dispatch(req, reply))) {
        Ok(send) => send,
        Err(_) => {
            // The filesystem panicked; answer EIO so the caller does not hang.
            match crate::request::parse_header(req) {
                Ok(h) if crate::request::opcode_needs_reply(h.opcode) => {
                    tracing::error!(opcode = h.opcode, "filesystem panicked; replying EIO");
                    reply.reset(h.unique);
                    reply.set_error(libc::EIO);
                    true
                }
                _ => false,
            }
        }
    };
    if send {
        match write_reply(fd, reply.as_bytes()) {
            Ok(()) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV) | Some(libc::ECONNABORTED)) => return false,
            Err(e) => tracing::warn!("writing FUSE reply failed: {e}"),
        }
    }
    true
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Notifier>();
    is::<FuseDev>();
}
