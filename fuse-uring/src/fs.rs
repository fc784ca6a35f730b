//! The `Filesystem` trait: everything a transport needs from a filesystem.
//!
//! This is the contract between the FUSE session (request decoding, reply
//! encoding, both transports) and whatever serves the requests. It speaks in
//! nodeids, file handles and plain values; of the wire format it knows only
//! the opcode numbers that [`is_slow_default`] (the default of
//! [`Filesystem::is_slow`]) sorts, and it knows nothing of the decoder, the
//! encoder, the dispatcher, the transports or the session, which all build on
//! it.
//! Method semantics follow the kernel's FUSE protocol
//! (`include/uapi/linux/fuse.h`) and libfuse's `fuse_lowlevel.h`.
//!
//! Every method returns `Err(Errno)` with a positive errno value
//! (`libc::ENOENT`, ...). The default implementations answer `ENOSYS`, which
//! makes the kernel fall back (or fail the syscall) as documented for each op.

use std::ffi::OsStr;
use std::time::Duration;

use crate::abi::{
    FUSE_COPY_FILE_RANGE, FUSE_COPY_FILE_RANGE_64, FUSE_FALLOCATE, FUSE_FSYNC, FUSE_FSYNCDIR, FUSE_READ, FUSE_RELEASE, FUSE_SYNCFS,
    FUSE_WRITE,
};

/// A positive errno value (`libc::ENOENT`, ...) sent back as `-errno` in
/// `fuse_out_header.error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// Function not implemented: the kernel remembers it for many ops and stops asking.
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    /// I/O error.
    pub const EIO: Errno = Errno(libc::EIO);
}

impl From<std::io::Error> for Errno {
    fn from(e: std::io::Error) -> Self {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

/// Result of a filesystem operation.
pub type Result<T> = std::result::Result<T, Errno>;

/// Who sent a request (from `fuse_in_header`).
#[derive(Clone, Copy, Debug)]
pub struct RequestCtx {
    /// Request id, unique among requests in flight.
    pub unique: u64,
    /// The caller's fsuid.
    pub uid: u32,
    /// The caller's fsgid.
    pub gid: u32,
    /// The caller's thread group id (0 for requests the kernel makes itself).
    pub pid: u32,
}

/// Attributes of an inode, as in `struct fuse_attr`. Times are seconds and
/// nanoseconds since the Unix epoch; `mode` includes the file type bits
/// (`S_IFREG`, ...); `blocks` counts 512-byte units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    /// Inode number (the nodeid); 0 only in negative entries.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Allocated 512-byte blocks.
    pub blocks: u64,
    /// Last access: seconds since the epoch.
    pub atime: i64,
    /// Nanoseconds part of `atime` (0..1e9).
    pub atime_nsec: u32,
    /// Last modification: seconds since the epoch.
    pub mtime: i64,
    /// Nanoseconds part of `mtime`.
    pub mtime_nsec: u32,
    /// Last status change: seconds since the epoch.
    pub ctime: i64,
    /// Nanoseconds part of `ctime`.
    pub ctime_nsec: u32,
    /// File type (`S_IF*`) and permission bits.
    pub mode: u32,
    /// Number of hard links.
    pub nlink: u32,
    /// Owner user id.
    pub uid: u32,
    /// Owner group id.
    pub gid: u32,
    /// Device number for device special files (kernel `new_encode_dev` format).
    pub rdev: u32,
    /// Preferred I/O size in bytes (`st_blksize`; 0 lets the kernel choose).
    pub blksize: u32,
}

/// A LOOKUP-style reply (`struct fuse_entry_out`). `attr.ino` is the nodeid;
/// a nodeid of 0 is a negative entry, cached by the kernel for
/// `entry_timeout`. Every positive entry returned by lookup, mknod, mkdir,
/// symlink, link and create adds one to the inode's lookup count, which the
/// kernel later returns with FORGET.
#[derive(Clone, Copy, Debug, Default)]
pub struct Entry {
    /// Attributes; `attr.ino` is the nodeid (0: negative entry).
    pub attr: Attr,
    /// Inode generation: (nodeid, generation) must be unique over the filesystem's life.
    pub generation: u64,
    /// How long the kernel may cache the name → nodeid binding.
    pub entry_timeout: Duration,
    /// How long the kernel may cache the attributes.
    pub attr_timeout: Duration,
}

/// A GETATTR/SETATTR reply (`struct fuse_attr_out`).
#[derive(Clone, Copy, Debug, Default)]
pub struct AttrReply {
    /// The inode's attributes.
    pub attr: Attr,
    /// How long the kernel may cache them.
    pub timeout: Duration,
}

/// A STATX reply (`struct fuse_statx_out`): the attributes GETATTR has, and
/// what only statx(2) carries.
#[derive(Clone, Copy, Debug, Default)]
pub struct StatxReply {
    /// The inode's attributes.
    pub attr: Attr,
    /// Birth time (seconds, nanoseconds since the epoch), if known.
    pub btime: Option<(i64, u32)>,
    /// `stx_attributes` bits (`abi::STATX_ATTR_IMMUTABLE`, `STATX_ATTR_APPEND`).
    pub attributes: u64,
    /// How long the kernel may cache the attributes.
    pub timeout: Duration,
}

/// An OPEN/CREATE/OPENDIR reply (`struct fuse_open_out`). `open_flags` holds
/// `FOPEN_*` bits; `backing_id` is only meaningful with `FOPEN_PASSTHROUGH`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Opened {
    /// File handle, passed back in later requests on this open file.
    pub fh: u64,
    /// `FOPEN_*` bits (`abi::FOPEN_KEEP_CACHE`, ...).
    pub open_flags: u32,
    /// Backing id from `backing_open`, with `FOPEN_PASSTHROUGH`; else 0.
    pub backing_id: i32,
}

/// A time to set in SETATTR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    /// `UTIME_NOW` (FATTR_ATIME_NOW / FATTR_MTIME_NOW).
    Now,
    /// An explicit time: seconds and nanoseconds since the epoch.
    At(i64, u32),
}

/// The fields a SETATTR request asks to change (`struct fuse_setattr_in`,
/// decoded from its `valid` mask). `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttrIn {
    /// New permission bits (FATTR_MODE).
    pub mode: Option<u32>,
    /// New owner (FATTR_UID).
    pub uid: Option<u32>,
    /// New group (FATTR_GID).
    pub gid: Option<u32>,
    /// New size in bytes: truncate or extend (FATTR_SIZE).
    pub size: Option<u64>,
    /// New access time (FATTR_ATIME / FATTR_ATIME_NOW).
    pub atime: Option<SetTime>,
    /// New modification time (FATTR_MTIME / FATTR_MTIME_NOW).
    pub mtime: Option<SetTime>,
    /// New change time, seconds and nanoseconds (FATTR_CTIME).
    pub ctime: Option<(i64, u32)>,
    /// The file handle the change was made through (FATTR_FH), e.g. ftruncate.
    pub fh: Option<u64>,
    /// FATTR_KILL_SUIDGID: clear S_ISUID, and S_ISGID if S_IXGRP is set, of
    /// a non-directory.
    pub kill_suidgid: bool,
    /// The request changes no attribute at all: with HANDLE_KILLPRIV_V2 the
    /// kernel's remove-privileges request (see `decode_setattr`), which
    /// wants S_ISUID/S_ISGID cleared unless it only removed
    /// `security.capability` for a caller with CAP_FSETID.
    pub remove_privs: bool,
}

/// A STATFS reply (`struct fuse_kstatfs`).
#[derive(Clone, Copy, Debug, Default)]
pub struct StatFs {
    /// Total blocks, in `frsize` units.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Preferred block size in bytes.
    pub bsize: u32,
    /// Longest file name in bytes.
    pub namelen: u32,
    /// Fragment size in bytes (unit of `blocks`).
    pub frsize: u32,
}

/// One directory entry for READDIR/READDIRPLUS. `offset` is the cookie of
/// the position *after* this entry: the kernel passes it back to continue.
/// `kind` is the `DT_*` type.
#[derive(Clone, Copy, Debug)]
pub struct DirEntry<'a> {
    /// Inode number shown in `d_ino`.
    pub ino: u64,
    /// Cookie of the position after this entry.
    pub offset: u64,
    /// `DT_*` type (`libc::DT_REG`, ...).
    pub kind: u32,
    /// The name: non-empty, no `/` or NUL, at most 1024 bytes (else the kernel fails the READDIR with EIO).
    pub name: &'a [u8],
}

/// Where READDIR entries go. `push` returns false, without adding the
/// entry, when the reply buffer is full; the filesystem then stops.
pub trait DirSink {
    /// Adds `entry`; false (nothing added) when the reply is full.
    fn push(&mut self, entry: &DirEntry<'_>) -> bool;
}

/// Where READDIRPLUS entries go. `push` returns false, without adding the
/// entry, when the reply buffer is full. An added entry with a non-zero
/// nodeid counts as a lookup (the kernel will FORGET it), except for `.`
/// and `..`, which must be given with `entry.attr.ino == 0`.
pub trait DirPlusSink {
    /// Adds `entry` with its lookup reply `attr`; false (nothing added) when the reply is full.
    fn push(&mut self, entry: &DirEntry<'_>, attr: &Entry) -> bool;
}

/// A GETXATTR/LISTXATTR reply: the size needed when the request's size was
/// 0, else the data (ERANGE when it does not fit is the filesystem's job).
#[derive(Clone, Debug)]
pub enum XattrReply {
    /// The size in bytes the value/list needs (answer to `size == 0`).
    Size(u32),
    /// The value, or the NUL-separated name list; at most `size` bytes (else ERANGE is sent).
    Data(Vec<u8>),
}

/// What the kernel and the session agreed on in INIT.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConnInfo {
    /// Protocol minor version in use (major is 7).
    pub proto_minor: u32,
    /// The kernel's advertised INIT flags (flags | flags2 << 32).
    pub kernel_flags: u64,
    /// The flags we answered with (flags | flags2 << 32).
    pub flags: u64,
    /// Largest WRITE payload the kernel will send, in bytes.
    pub max_write: u32,
    /// The kernel's readahead limit, in bytes.
    pub max_readahead: u32,
    /// FUSE_PASSTHROUGH was negotiated: `Opened::backing_id` may be used.
    pub passthrough: bool,
}

/// READ/WRITE larger than this are slow ([`is_slow_default`]).
pub const SLOW_IO_BYTES: u32 = 64 * 1024;

/// The default of [`Filesystem::is_slow`]:
/// requests that may block for long and so leave the ring thread.
pub fn is_slow_default(opcode: u32, size: u32) -> bool {
    match opcode {
        FUSE_FSYNC | FUSE_FSYNCDIR | FUSE_FALLOCATE | FUSE_COPY_FILE_RANGE | FUSE_COPY_FILE_RANGE_64 | FUSE_SYNCFS
        | FUSE_RELEASE => true,
        FUSE_READ | FUSE_WRITE => size > SLOW_IO_BYTES,
        _ => false,
    }
}

/// The operations a FUSE filesystem serves. Implementations are shared by
/// all worker threads (`&self`, `Send + Sync`).
#[allow(unused_variables)]
pub trait Filesystem: Send + Sync + 'static {
    /// Called once after INIT was negotiated, before any other request.
    fn init(&self, info: &ConnInfo) {}
    /// Called on DESTROY or when the session ends.
    fn destroy(&self) {}
    /// Whether a request may block for long (disk sync, hashing, large
    /// copies). The io_uring transport runs such requests on its worker pool,
    /// so the ring thread of that CPU keeps serving; others run inline (a pool
    /// hop costs two thread wake-ups). `size` is the READ/WRITE size (else 0).
    /// Default: [`is_slow_default`] (FSYNC, FSYNCDIR, FALLOCATE,
    /// COPY_FILE_RANGE(_64), SYNCFS, RELEASE, READ/WRITE > 64 KiB).
    /// `/dev/fuse` hands them to its pool the same way (D57).
    fn is_slow(&self, opcode: u32, size: u32) -> bool {
        is_slow_default(opcode, size)
    }

    /// LOOKUP: find `name` in directory `parent`. Answer ENOENT or a negative entry (`attr.ino == 0`, cached for `entry_timeout`) if absent. With EXPORT_SUPPORT negotiated the kernel may also look up `.` and `..`.
    fn lookup(&self, ctx: &RequestCtx, parent: u64, name: &OsStr) -> Result<Entry> {
        Err(Errno::ENOSYS)
    }
    /// FORGET / one item of BATCH_FORGET: drop `nlookup` from the lookup count.
    fn forget(&self, nodeid: u64, nlookup: u64) {}
    /// GETATTR: the attributes of `nodeid`; `fh` is set when the caller has the file open (fstat).
    fn getattr(&self, ctx: &RequestCtx, nodeid: u64, fh: Option<u64>) -> Result<AttrReply> {
        Err(Errno::ENOSYS)
    }
    /// SETATTR: change the fields set in `set`; answer the new attributes.
    fn setattr(&self, ctx: &RequestCtx, nodeid: u64, set: &SetAttrIn) -> Result<AttrReply> {
        Err(Errno::ENOSYS)
    }
    /// READLINK: the symlink's target, at most 4095 bytes (longer: ENAMETOOLONG is sent).
    fn readlink(&self, ctx: &RequestCtx, nodeid: u64) -> Result<Vec<u8>> {
        Err(Errno::ENOSYS)
    }
    /// SYMLINK: create symlink `name` in `parent` pointing to `target`.
    fn symlink(&self, ctx: &RequestCtx, parent: u64, name: &OsStr, target: &OsStr) -> Result<Entry> {
        Err(Errno::ENOSYS)
    }
    /// `mode` includes the type bits; `umask` is the caller's umask (the
    /// kernel has already applied it unless FUSE_DONT_MASK was negotiated,
    /// which `MountOptions::posix_acl` does: the filesystem then applies it
    /// unless the parent's default ACL decides).
    fn mknod(&self, ctx: &RequestCtx, parent: u64, name: &OsStr, mode: u32, rdev: u32, umask: u32) -> Result<Entry> {
        Err(Errno::ENOSYS)
    }
    /// MKDIR: create directory `name` in `parent`; `mode` has the permission bits (the kernel adds S_IFDIR).
    fn mkdir(&self, ctx: &RequestCtx, parent: u64, name: &OsStr, mode: u32, umask: u32) -> Result<Entry> {
        Err(Errno::ENOSYS)
    }
    /// UNLINK: remove the non-directory `name` from `parent`.
    fn unlink(&self, ctx: &RequestCtx, parent: u64, name: &OsStr) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// RMDIR: remove the empty directory `name` from `parent`.
    fn rmdir(&self, ctx: &RequestCtx, parent: u64, name: &OsStr) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// RENAME / RENAME2. `flags` holds `RENAME_NOREPLACE`, `RENAME_EXCHANGE`,
    /// `RENAME_WHITEOUT` bits (0 for plain RENAME).
    fn rename(&self, ctx: &RequestCtx, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// LINK: create hard link `newname` in `newparent` to inode `nodeid`.
    fn link(&self, ctx: &RequestCtx, nodeid: u64, newparent: u64, newname: &OsStr) -> Result<Entry> {
        Err(Errno::ENOSYS)
    }
    /// `flags` are the open(2) flags (O_ACCMODE, O_TRUNC, O_APPEND, ...).
    fn open(&self, ctx: &RequestCtx, nodeid: u64, flags: u32) -> Result<Opened> {
        Err(Errno::ENOSYS)
    }
    /// CREATE: create and open regular file `name` in `parent` (`flags` as in open(2)). ENOSYS makes the kernel fall back to MKNOD + OPEN.
    fn create(&self, ctx: &RequestCtx, parent: u64, name: &OsStr, mode: u32, umask: u32, flags: u32) -> Result<(Entry, Opened)> {
        Err(Errno::ENOSYS)
    }
    /// TMPFILE: `open(parent, O_TMPFILE)`: create and open a regular file
    /// with no name (nlink 0) in `parent`; `mode`, `umask` and `flags` as
    /// for CREATE (`flags` has O_EXCL when it must never get a name; the
    /// kernel enforces that on LINK). ENOSYS: the kernel answers EOPNOTSUPP
    /// from then on.
    fn tmpfile(&self, ctx: &RequestCtx, parent: u64, mode: u32, umask: u32, flags: u32) -> Result<(Entry, Opened)> {
        Err(Errno::ENOSYS)
    }
    /// Returns at most `size` bytes; fewer only at end of file.
    fn read(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        Err(Errno::ENOSYS)
    }
    /// Returns the number of bytes written. `write_flags` are FUSE_WRITE_*;
    /// with FUSE_WRITE_KILL_SUIDGID (HANDLE_KILLPRIV_V2, a caller without
    /// CAP_FSETID) the filesystem clears S_ISUID, and S_ISGID if S_IXGRP is set.
    fn write(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, offset: u64, data: &[u8], write_flags: u32) -> Result<u32> {
        Err(Errno::ENOSYS)
    }
    /// FLUSH: called on every close(2) of a file descriptor; `lock_owner` identifies it.
    fn flush(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, lock_owner: u64) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// The last close of an open file description. Errors are ignored by the kernel.
    fn release(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, flags: u32) -> Result<()> {
        Ok(())
    }
    /// FSYNC: make the file's data (and with `datasync == false` its metadata) durable.
    fn fsync(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, datasync: bool) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// OPENDIR: open directory `nodeid`; `flags` as in open(2).
    fn opendir(&self, ctx: &RequestCtx, nodeid: u64, flags: u32) -> Result<Opened> {
        Ok(Opened::default())
    }
    /// READDIR: push entries from position `offset` (0 = start, else a cookie from a previous `DirEntry::offset`) until `sink` is full or the directory ends.
    fn readdir(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, offset: u64, sink: &mut dyn DirSink) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// READDIRPLUS: like `readdir`, each entry with its lookup reply (which counts as a lookup when `attr.ino != 0`).
    fn readdirplus(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, offset: u64, sink: &mut dyn DirPlusSink) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// RELEASEDIR: the last close of an open directory.
    fn releasedir(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, flags: u32) -> Result<()> {
        Ok(())
    }
    /// FSYNCDIR: make the directory's contents durable.
    fn fsyncdir(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, datasync: bool) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// STATFS: filesystem statistics (statfs(2)).
    fn statfs(&self, ctx: &RequestCtx, nodeid: u64) -> Result<StatFs> {
        Err(Errno::ENOSYS)
    }
    /// `flags` are XATTR_CREATE / XATTR_REPLACE; `setxattr_flags` are
    /// FUSE_SETXATTR_* (FUSE_SETXATTR_ACL_KILL_SGID: an access ACL set by a
    /// caller outside the file's group without CAP_FSETID also clears
    /// S_ISGID), 0 unless SETXATTR_EXT was negotiated.
    fn setxattr(&self, ctx: &RequestCtx, nodeid: u64, name: &OsStr, value: &[u8], flags: u32, setxattr_flags: u32) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// `size == 0` asks for the size only.
    fn getxattr(&self, ctx: &RequestCtx, nodeid: u64, name: &OsStr, size: u32) -> Result<XattrReply> {
        Err(Errno::ENOSYS)
    }
    /// The names, each NUL-terminated; `size == 0` asks for the size only.
    fn listxattr(&self, ctx: &RequestCtx, nodeid: u64, size: u32) -> Result<XattrReply> {
        Err(Errno::ENOSYS)
    }
    /// REMOVEXATTR: remove extended attribute `name`.
    fn removexattr(&self, ctx: &RequestCtx, nodeid: u64, name: &OsStr) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// ACCESS: check `mask` (R_OK/W_OK/X_OK/F_OK) for the caller. Not sent with `default_permissions`.
    fn access(&self, ctx: &RequestCtx, nodeid: u64, mask: u32) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// `mode` holds FALLOC_FL_* bits.
    fn fallocate(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, offset: u64, length: u64, mode: u32) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// SEEK_DATA / SEEK_HOLE (the kernel handles SEEK_SET/CUR/END itself).
    fn lseek(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, offset: u64, whence: u32) -> Result<u64> {
        Err(Errno::ENOSYS)
    }
    /// Returns the number of bytes copied.
    #[allow(clippy::too_many_arguments)]
    fn copy_file_range(&self, ctx: &RequestCtx, nodeid_in: u64, fh_in: u64, off_in: u64, nodeid_out: u64, fh_out: u64, off_out: u64, len: u64, flags: u64) -> Result<u64> {
        Err(Errno::ENOSYS)
    }
    /// STATX (statx(2) asking for more than GETATTR carries, e.g. the birth
    /// time): `fh` as in GETATTR, `flags` the `AT_STATX_*` sync flags, `mask`
    /// the `STATX_*` fields asked for. ENOSYS (the default) makes the kernel
    /// use GETATTR from then on.
    fn statx(&self, ctx: &RequestCtx, nodeid: u64, fh: Option<u64>, flags: u32, mask: u32) -> Result<StatxReply> {
        Err(Errno::ENOSYS)
    }
    /// IOCTL on an open file (`fh`; `flags` has `abi::FUSE_IOCTL_DIR` for a
    /// directory): `cmd` with `input`; answer ioctl(2)'s return value and at
    /// most `out_size` bytes of output. The kernel's fileattr code (chattr,
    /// lsattr) sends `abi::FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS` with a 4-byte
    /// argument. Default ENOSYS (the caller sees ENOTTY).
    #[allow(clippy::too_many_arguments)]
    fn ioctl(&self, ctx: &RequestCtx, nodeid: u64, fh: u64, flags: u32, cmd: u32, input: &[u8], out_size: u32) -> Result<(i32, Vec<u8>)> {
        Err(Errno::ENOSYS)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_slow_default_opcodes() {
        use crate::abi::*;
        use super::is_slow_default as slow;
        assert!(slow(FUSE_FSYNC, 0) && slow(FUSE_RELEASE, 0) && slow(FUSE_COPY_FILE_RANGE_64, 0));
        assert!(slow(FUSE_READ, 128 * 1024) && !slow(FUSE_READ, 4096) && !slow(FUSE_WRITE, 65536));
        assert!(!slow(FUSE_GETATTR, 0) && !slow(FUSE_LOOKUP, 0) && !slow(FUSE_CREATE, 0));
    }
}
