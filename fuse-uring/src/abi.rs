//! The kernel's FUSE wire format: constants and `#[repr(C)]` structs.
//!
//! Follows `include/uapi/linux/fuse.h` at protocol 7.45 (Linux 6.18). Field
//! names keep the kernel's spelling so the header can be read side by side.
//! Nothing here knows about transports or the [`Filesystem`](crate::Filesystem)
//! trait.
//!
//! All structs are plain integers with explicit padding fields, so every bit
//! pattern is a valid value and no struct has implicit padding bytes. That is
//! what makes [`Pod::read_from`] (an unaligned read after a length check) and
//! [`Pod::as_bytes`] sound; the `const` size assertions at the bottom of this
//! file pin each layout to the kernel's.



/// Protocol major version spoken (`FUSE_KERNEL_VERSION`).
pub const FUSE_KERNEL_VERSION: u32 = 7;
/// Highest protocol minor version this crate speaks (`FUSE_KERNEL_MINOR_VERSION`).
pub const FUSE_KERNEL_MINOR_VERSION: u32 = 45;
/// Lowest kernel minor version accepted in INIT (Linux 2.6.28+). Below it,
/// several request structs had shorter "compat" layouts this crate does not parse.
pub const FUSE_MIN_KERNEL_MINOR_VERSION: u32 = 12;
/// The nodeid of the mount's root directory.
pub const FUSE_ROOT_ID: u64 = 1;
/// Smallest read buffer the kernel accepts on `/dev/fuse` (`FUSE_MIN_READ_BUFFER`).
pub const FUSE_MIN_READ_BUFFER: usize = 8192;
/// `FUSE_NAME_MAX`: longest name in a dirent the kernel accepts.
pub const FUSE_NAME_MAX: usize = 1024;

// ---- opcodes (enum fuse_opcode) -------------------------------------------------

/// Opcode: look up a name in a directory → `fuse_entry_out`.
pub const FUSE_LOOKUP: u32 = 1;
/// Opcode: drop lookup references (no reply).
pub const FUSE_FORGET: u32 = 2;
/// Opcode: get attributes → `fuse_attr_out`.
pub const FUSE_GETATTR: u32 = 3;
/// Opcode: set attributes → `fuse_attr_out`.
pub const FUSE_SETATTR: u32 = 4;
/// Opcode: read a symlink target.
pub const FUSE_READLINK: u32 = 5;
/// Opcode: create a symlink.
pub const FUSE_SYMLINK: u32 = 6;
/// Opcode: create a file node.
pub const FUSE_MKNOD: u32 = 8;
/// Opcode: create a directory.
pub const FUSE_MKDIR: u32 = 9;
/// Opcode: remove a non-directory.
pub const FUSE_UNLINK: u32 = 10;
/// Opcode: remove a directory.
pub const FUSE_RMDIR: u32 = 11;
/// Opcode: rename.
pub const FUSE_RENAME: u32 = 12;
/// Opcode: create a hard link.
pub const FUSE_LINK: u32 = 13;
/// Opcode: open a file → `fuse_open_out`.
pub const FUSE_OPEN: u32 = 14;
/// Opcode: read file data.
pub const FUSE_READ: u32 = 15;
/// Opcode: write file data → `fuse_write_out`.
pub const FUSE_WRITE: u32 = 16;
/// Opcode: filesystem statistics.
pub const FUSE_STATFS: u32 = 17;
/// Opcode: last close of an open file.
pub const FUSE_RELEASE: u32 = 18;
/// Opcode: sync a file.
pub const FUSE_FSYNC: u32 = 20;
/// Opcode: set an extended attribute.
pub const FUSE_SETXATTR: u32 = 21;
/// Opcode: get an extended attribute.
pub const FUSE_GETXATTR: u32 = 22;
/// Opcode: list extended attributes.
pub const FUSE_LISTXATTR: u32 = 23;
/// Opcode: remove an extended attribute.
pub const FUSE_REMOVEXATTR: u32 = 24;
/// Opcode: close(2) of a file descriptor.
pub const FUSE_FLUSH: u32 = 25;
/// Opcode: connection setup (protocol and feature negotiation).
pub const FUSE_INIT: u32 = 26;
/// Opcode: open a directory.
pub const FUSE_OPENDIR: u32 = 27;
/// Opcode: read directory entries.
pub const FUSE_READDIR: u32 = 28;
/// Opcode: last close of an open directory.
pub const FUSE_RELEASEDIR: u32 = 29;
/// Opcode: sync a directory.
pub const FUSE_FSYNCDIR: u32 = 30;
/// Opcode: test a POSIX lock.
pub const FUSE_GETLK: u32 = 31;
/// Opcode: set a POSIX lock.
pub const FUSE_SETLK: u32 = 32;
/// Opcode: set a POSIX lock, waiting.
pub const FUSE_SETLKW: u32 = 33;
/// Opcode: check access permissions.
pub const FUSE_ACCESS: u32 = 34;
/// Opcode: create and open a file.
pub const FUSE_CREATE: u32 = 35;
/// Opcode: interrupt a pending request (no reply).
pub const FUSE_INTERRUPT: u32 = 36;
/// Opcode: map a block (fuseblk only).
pub const FUSE_BMAP: u32 = 37;
/// Opcode: connection teardown (fuseblk/virtiofs).
pub const FUSE_DESTROY: u32 = 38;
/// Opcode: ioctl on an open file.
pub const FUSE_IOCTL: u32 = 39;
/// Opcode: poll an open file.
pub const FUSE_POLL: u32 = 40;
/// Opcode: data for a retrieve notification (no reply).
pub const FUSE_NOTIFY_REPLY: u32 = 41;
/// Opcode: many FORGETs in one request (no reply).
pub const FUSE_BATCH_FORGET: u32 = 42;
/// Opcode: allocate or punch file space.
pub const FUSE_FALLOCATE: u32 = 43;
/// Opcode: read directory entries with their attributes.
pub const FUSE_READDIRPLUS: u32 = 44;
/// Opcode: rename with RENAME_* flags.
pub const FUSE_RENAME2: u32 = 45;
/// Opcode: SEEK_DATA / SEEK_HOLE.
pub const FUSE_LSEEK: u32 = 46;
/// Opcode: server-side copy, 32-bit result.
pub const FUSE_COPY_FILE_RANGE: u32 = 47;
/// Opcode: DAX mapping setup (virtiofs).
pub const FUSE_SETUPMAPPING: u32 = 48;
/// Opcode: DAX mapping removal (virtiofs).
pub const FUSE_REMOVEMAPPING: u32 = 49;
/// Opcode: sync the whole filesystem.
pub const FUSE_SYNCFS: u32 = 50;
/// Opcode: create an unnamed temporary file.
pub const FUSE_TMPFILE: u32 = 51;
/// Opcode: statx with extended fields (7.39).
pub const FUSE_STATX: u32 = 52;
/// Opcode: server-side copy, 64-bit result (7.45).
pub const FUSE_COPY_FILE_RANGE_64: u32 = 53;
/// Opcode: CUSE connection setup.
pub const CUSE_INIT: u32 = 4096;

/// One past the highest regular opcode; per-opcode tables have this many slots.
pub const FUSE_OPCODE_MAX: usize = 54;

/// The kernel's name of an opcode (`"LOOKUP"`, ...), or `None` if unknown.
pub fn opcode_name(opcode: u32) -> Option<&'static str> {
    Some(match opcode {
        FUSE_LOOKUP => "LOOKUP",
        FUSE_FORGET => "FORGET",
        FUSE_GETATTR => "GETATTR",
        FUSE_SETATTR => "SETATTR",
        FUSE_READLINK => "READLINK",
        FUSE_SYMLINK => "SYMLINK",
        FUSE_MKNOD => "MKNOD",
        FUSE_MKDIR => "MKDIR",
        FUSE_UNLINK => "UNLINK",
        FUSE_RMDIR => "RMDIR",
        FUSE_RENAME => "RENAME",
        FUSE_LINK => "LINK",
        FUSE_OPEN => "OPEN",
        FUSE_READ => "READ",
        FUSE_WRITE => "WRITE",
        FUSE_STATFS => "STATFS",
        FUSE_RELEASE => "RELEASE",
        FUSE_FSYNC => "FSYNC",
        FUSE_SETXATTR => "SETXATTR",
        FUSE_GETXATTR => "GETXATTR",
        FUSE_LISTXATTR => "LISTXATTR",
        FUSE_REMOVEXATTR => "REMOVEXATTR",
        FUSE_FLUSH => "FLUSH",
        FUSE_INIT => "INIT",
        FUSE_OPENDIR => "OPENDIR",
        FUSE_READDIR => "READDIR",
        FUSE_RELEASEDIR => "RELEASEDIR",
        FUSE_FSYNCDIR => "FSYNCDIR",
        FUSE_GETLK => "GETLK",
        FUSE_SETLK => "SETLK",
        FUSE_SETLKW => "SETLKW",
        FUSE_ACCESS => "ACCESS",
        FUSE_CREATE => "CREATE",
        FUSE_INTERRUPT => "INTERRUPT",
        FUSE_BMAP => "BMAP",
        FUSE_DESTROY => "DESTROY",
        FUSE_IOCTL => "IOCTL",
        FUSE_POLL => "POLL",
        FUSE_NOTIFY_REPLY => "NOTIFY_REPLY",
        FUSE_BATCH_FORGET => "BATCH_FORGET",
        FUSE_FALLOCATE => "FALLOCATE",
        FUSE_READDIRPLUS => "READDIRPLUS",
        FUSE_RENAME2 => "RENAME2",
        FUSE_LSEEK => "LSEEK",
        FUSE_COPY_FILE_RANGE => "COPY_FILE_RANGE",
        FUSE_SETUPMAPPING => "SETUPMAPPING",
        FUSE_REMOVEMAPPING => "REMOVEMAPPING",
        FUSE_SYNCFS => "SYNCFS",
        FUSE_TMPFILE => "TMPFILE",
        FUSE_STATX => "STATX",
        FUSE_COPY_FILE_RANGE_64 => "COPY_FILE_RANGE_64",
        CUSE_INIT => "CUSE_INIT",
        _ => return None,
    })
}

// ---- INIT flags (fuse_init_in/out .flags | .flags2 << 32) -----------------------

/// The kernel may send several READs on one file at once.
pub const FUSE_ASYNC_READ: u64 = 1 << 0;
/// The server handles POSIX locks (not used: locks stay kernel-local).
pub const FUSE_POSIX_LOCKS: u64 = 1 << 1;
/// Unused.
pub const FUSE_FILE_OPS: u64 = 1 << 2;
/// OPEN handles O_TRUNC itself (no separate SETATTR).
pub const FUSE_ATOMIC_O_TRUNC: u64 = 1 << 3;
/// LOOKUP of "." and ".." is handled (NFS export).
pub const FUSE_EXPORT_SUPPORT: u64 = 1 << 4;
/// WRITEs larger than 4 KiB.
pub const FUSE_BIG_WRITES: u64 = 1 << 5;
/// The kernel does not apply the umask to create modes.
pub const FUSE_DONT_MASK: u64 = 1 << 6;
/// The kernel may splice to the fuse device.
pub const FUSE_SPLICE_WRITE: u64 = 1 << 7;
/// The kernel may move pages when splicing.
pub const FUSE_SPLICE_MOVE: u64 = 1 << 8;
/// The server may splice from the fuse device.
pub const FUSE_SPLICE_READ: u64 = 1 << 9;
/// The server handles BSD locks (not used).
pub const FUSE_FLOCK_LOCKS: u64 = 1 << 10;
/// Ioctl on directories.
pub const FUSE_HAS_IOCTL_DIR: u64 = 1 << 11;
/// Invalidate cached data when mtime/size change.
pub const FUSE_AUTO_INVAL_DATA: u64 = 1 << 12;
/// READDIRPLUS is supported.
pub const FUSE_DO_READDIRPLUS: u64 = 1 << 13;
/// The kernel chooses READDIRPLUS or READDIR adaptively.
pub const FUSE_READDIRPLUS_AUTO: u64 = 1 << 14;
/// Asynchronous direct I/O.
pub const FUSE_ASYNC_DIO: u64 = 1 << 15;
/// Kernel write-back cache (excludes passthrough; not used).
pub const FUSE_WRITEBACK_CACHE: u64 = 1 << 16;
/// ENOSYS from OPEN means "no open needed".
pub const FUSE_NO_OPEN_SUPPORT: u64 = 1 << 17;
/// Lookups and readdirs in one directory may run in parallel.
pub const FUSE_PARALLEL_DIROPS: u64 = 1 << 18;
/// The server clears suid/sgid on write/chown/truncate.
pub const FUSE_HANDLE_KILLPRIV: u64 = 1 << 19;
/// The kernel enforces POSIX ACLs.
pub const FUSE_POSIX_ACL: u64 = 1 << 20;
/// Reads after an abort fail with ECONNABORTED.
pub const FUSE_ABORT_ERROR: u64 = 1 << 21;
/// `fuse_init_out.max_pages` is valid.
pub const FUSE_MAX_PAGES: u64 = 1 << 22;
/// The kernel caches symlink targets.
pub const FUSE_CACHE_SYMLINKS: u64 = 1 << 23;
/// ENOSYS from OPENDIR means "no opendir needed".
pub const FUSE_NO_OPENDIR_SUPPORT: u64 = 1 << 24;
/// Cached data only invalidated by notification.
pub const FUSE_EXPLICIT_INVAL_DATA: u64 = 1 << 25;
/// `map_alignment` is valid (DAX).
pub const FUSE_MAP_ALIGNMENT: u64 = 1 << 26;
/// The kernel creates submounts (virtiofs).
pub const FUSE_SUBMOUNTS: u64 = 1 << 27;
/// The server clears suid/sgid (and the kernel sets SB_NOSEC), signalled per request; see `negotiate`.
pub const FUSE_HANDLE_KILLPRIV_V2: u64 = 1 << 28;
/// SETXATTR carries the 16-byte `fuse_setxattr_in`.
pub const FUSE_SETXATTR_EXT: u64 = 1 << 29;
/// `flags2` is valid (flags bits 32..63).
pub const FUSE_INIT_EXT: u64 = 1 << 30;
/// Reserved.
pub const FUSE_INIT_RESERVED: u64 = 1 << 31;
/// Create requests carry a security context extension.
pub const FUSE_SECURITY_CTX: u64 = 1 << 32;
/// Per-inode DAX.
pub const FUSE_HAS_INODE_DAX: u64 = 1 << 33;
/// Create requests carry a supplementary group extension.
pub const FUSE_CREATE_SUPP_GROUP: u64 = 1 << 34;
/// NOTIFY_INVAL_ENTRY accepts FUSE_EXPIRE_ONLY.
pub const FUSE_HAS_EXPIRE_ONLY: u64 = 1 << 35;
/// Shared mmap on FOPEN_DIRECT_IO files.
pub const FUSE_DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
/// Backing-file passthrough (kernel 6.9, 7.40); needs `max_stack_depth`.
pub const FUSE_PASSTHROUGH: u64 = 1 << 37;
/// The filesystem must not be NFS-exported.
pub const FUSE_NO_EXPORT_SUPPORT: u64 = 1 << 38;
/// The kernel supports NOTIFY_RESEND.
pub const FUSE_HAS_RESEND: u64 = 1 << 39;
/// Idmapped mounts allowed.
pub const FUSE_ALLOW_IDMAP: u64 = 1 << 40;
/// FUSE-over-io_uring transport (kernel 6.14, 7.42).
pub const FUSE_OVER_IO_URING: u64 = 1 << 41;
/// `request_timeout` is valid (7.43).
pub const FUSE_REQUEST_TIMEOUT: u64 = 1 << 42;

// ---- FOPEN_* (fuse_open_out.open_flags) -----------------------------------------

/// Bypass the page cache for this open file.
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;
/// Keep cached data from previous opens.
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;
/// The file is not seekable.
pub const FOPEN_NONSEEKABLE: u32 = 1 << 2;
/// Cache READDIR results (directories).
pub const FOPEN_CACHE_DIR: u32 = 1 << 3;
/// Stream-like file: no file position.
pub const FOPEN_STREAM: u32 = 1 << 4;
/// Do not send FLUSH on close.
pub const FOPEN_NOFLUSH: u32 = 1 << 5;
/// Allow parallel direct writes.
pub const FOPEN_PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
/// Serve I/O from `backing_id` (never with KEEP_CACHE).
pub const FOPEN_PASSTHROUGH: u32 = 1 << 7;

// ---- FATTR_* (fuse_setattr_in.valid) --------------------------------------------

/// `mode` is valid.
pub const FATTR_MODE: u32 = 1 << 0;
/// `uid` is valid.
pub const FATTR_UID: u32 = 1 << 1;
/// `gid` is valid.
pub const FATTR_GID: u32 = 1 << 2;
/// `size` is valid (truncate).
pub const FATTR_SIZE: u32 = 1 << 3;
/// `atime` is valid.
pub const FATTR_ATIME: u32 = 1 << 4;
/// `mtime` is valid.
pub const FATTR_MTIME: u32 = 1 << 5;
/// `fh` is valid (change through an open file).
pub const FATTR_FH: u32 = 1 << 6;
/// Set atime to the current time.
pub const FATTR_ATIME_NOW: u32 = 1 << 7;
/// Set mtime to the current time.
pub const FATTR_MTIME_NOW: u32 = 1 << 8;
/// `lock_owner` is valid.
pub const FATTR_LOCKOWNER: u32 = 1 << 9;
/// `ctime` is valid.
pub const FATTR_CTIME: u32 = 1 << 10;
/// Clear suid/sgid (with HANDLE_KILLPRIV_V2).
pub const FATTR_KILL_SUIDGID: u32 = 1 << 11;

// ---- misc request flags -----------------------------------------------------------

/// `fuse_getattr_in.getattr_flags`: `fh` is valid.
pub const FUSE_GETATTR_FH: u32 = 1 << 0;
/// `fuse_release_in.release_flags`.
pub const FUSE_RELEASE_FLUSH: u32 = 1 << 0;
/// `fuse_release_in.release_flags`: drop BSD locks.
pub const FUSE_RELEASE_FLOCK_UNLOCK: u32 = 1 << 1;
/// `fuse_write_in.write_flags`.
pub const FUSE_WRITE_CACHE: u32 = 1 << 0;
/// `fuse_write_in.write_flags`: `lock_owner` is valid.
pub const FUSE_WRITE_LOCKOWNER: u32 = 1 << 1;
/// `fuse_write_in.write_flags`: clear suid/sgid.
pub const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `fuse_read_in.read_flags`.
pub const FUSE_READ_LOCKOWNER: u32 = 1 << 1;
/// `fuse_fsync_in.fsync_flags`.
pub const FUSE_FSYNC_FDATASYNC: u32 = 1 << 0;
/// `fuse_open_in.open_flags`.
pub const FUSE_OPEN_KILL_SUIDGID: u32 = 1 << 0;
/// `fuse_setxattr_in.setxattr_flags`.
pub const FUSE_SETXATTR_ACL_KILL_SGID: u32 = 1 << 0;
/// `fuse_notify_inval_entry_out.flags`: only expire the entry, keep it cached.
pub const FUSE_EXPIRE_ONLY: u32 = 1 << 0;

// ---- notify codes (fuse_out_header.error when unique == 0) ----------------------

/// Notify code: poll wakeup.
pub const FUSE_NOTIFY_POLL: i32 = 1;
/// Notify code: invalidate an inode's attributes and data.
pub const FUSE_NOTIFY_INVAL_INODE: i32 = 2;
/// Notify code: invalidate a directory entry.
pub const FUSE_NOTIFY_INVAL_ENTRY: i32 = 3;
/// Notify code: store data in the page cache.
pub const FUSE_NOTIFY_STORE: i32 = 4;
/// Notify code: retrieve data from the page cache.
pub const FUSE_NOTIFY_RETRIEVE: i32 = 5;
/// Notify code: an entry was deleted.
pub const FUSE_NOTIFY_DELETE: i32 = 6;
/// Notify code: resend pending requests.
pub const FUSE_NOTIFY_RESEND: i32 = 7;
/// Notify code: invalidate all dentries (7.44).
pub const FUSE_NOTIFY_INC_EPOCH: i32 = 8;
/// Notify code: drop unused inodes (7.45).
pub const FUSE_NOTIFY_PRUNE: i32 = 9;

// ---- /dev/fuse ioctls ---------------------------------------------------------------

/// `FUSE_DEV_IOC_MAGIC`.
pub const FUSE_DEV_IOC_MAGIC: u32 = 229;

const fn ioc(dir: u32, nr: u32, size: u32) -> u32 {
    (dir << 30) | (size << 16) | (FUSE_DEV_IOC_MAGIC << 8) | nr
}
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// `FUSE_DEV_IOC_CLONE = _IOR(229, 0, uint32_t)`: attach a freshly opened
/// `/dev/fuse` fd to the connection of the session fd passed as argument.
pub const FUSE_DEV_IOC_CLONE: u32 = ioc(IOC_READ, 0, 4);
/// `FUSE_DEV_IOC_BACKING_OPEN = _IOW(229, 1, struct fuse_backing_map)`.
pub const FUSE_DEV_IOC_BACKING_OPEN: u32 = ioc(IOC_WRITE, 1, 16);
/// `FUSE_DEV_IOC_BACKING_CLOSE = _IOW(229, 2, uint32_t)`.
pub const FUSE_DEV_IOC_BACKING_CLOSE: u32 = ioc(IOC_WRITE, 2, 4);

// ---- FUSE-over-io_uring (for the later ring transport) ----------------------------

/// `enum fuse_uring_cmd`: register a ring entry.
pub const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
/// `enum fuse_uring_cmd`: commit a reply and fetch the next request.
pub const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;
/// Size of `fuse_uring_req_header.in_out` and `.op_in`.
pub const FUSE_URING_IN_OUT_HEADER_SZ: usize = 128;
/// Size of `fuse_uring_req_header.op_in`.
pub const FUSE_URING_OP_IN_OUT_SZ: usize = 128;

// ---- structs ---------------------------------------------------------------------------

/// Plain-old-data wire structs: `#[repr(C)]`, integers only, no implicit padding.
///
/// # Safety
/// Implementors must have no padding bytes and accept every bit pattern.
pub unsafe trait Pod: Copy + Sized {
    /// Reads `Self` from the start of `bytes` (any alignment); `None` if
    /// `bytes` is shorter than `size_of::<Self>()`.
    #[inline]
    fn read_from(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < std::mem::size_of::<Self>() {
            return None;
        }
        // SAFETY: length checked above; `Self: Pod` accepts any bit pattern;
        // read_unaligned has no alignment requirement.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const Self) })
    }

    /// The struct's bytes, as sent on the wire.
    #[inline]
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `Self: Pod` has no padding, so all bytes are initialised.
        unsafe { std::slice::from_raw_parts(self as *const Self as *const u8, std::mem::size_of::<Self>()) }
    }
}

macro_rules! pod {
    ($($t:ident = $size:expr),* $(,)?) => {
        $(
            // SAFETY: integer-only repr(C) struct; the size assertion below
            // equals the sum of its fields, so there is no padding.
            unsafe impl Pod for $t {}
            const _: () = assert!(std::mem::size_of::<$t>() == $size);
        )*
    };
}

/// Header of every request (40 bytes).
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_in_header {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// Length of extensions after the arguments, in units of 8 bytes.
    pub total_extlen: u16,
    pub padding: u16,
}

/// Header of every reply and notification (16 bytes); `error` is `-errno` or a notify code.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_out_header {
    pub len: u32,
    pub error: i32,
    pub unique: u64,
}

/// Inode attributes as sent in entry/attr replies.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_attr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: u64,
    pub mtime: u64,
    pub ctime: u64,
    pub atimensec: u32,
    pub mtimensec: u32,
    pub ctimensec: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    pub flags: u32,
}

/// STATFS data.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_kstatfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
    pub padding: u32,
    pub spare: [u32; 6],
}

/// LOOKUP-style reply: nodeid, generation, timeouts, attributes.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_entry_out {
    pub nodeid: u64,
    pub generation: u64,
    pub entry_valid: u64,
    pub attr_valid: u64,
    pub entry_valid_nsec: u32,
    pub attr_valid_nsec: u32,
    pub attr: fuse_attr,
}

/// FORGET argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_forget_in {
    pub nlookup: u64,
}

/// One BATCH_FORGET item.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_forget_one {
    pub nodeid: u64,
    pub nlookup: u64,
}

/// BATCH_FORGET argument; `count` `fuse_forget_one` follow.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_batch_forget_in {
    pub count: u32,
    pub dummy: u32,
}

/// GETATTR argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_getattr_in {
    pub getattr_flags: u32,
    pub dummy: u32,
    pub fh: u64,
}

/// GETATTR/SETATTR reply.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_attr_out {
    pub attr_valid: u64,
    pub attr_valid_nsec: u32,
    pub dummy: u32,
    pub attr: fuse_attr,
}

/// MKNOD argument; the name follows.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_mknod_in {
    pub mode: u32,
    pub rdev: u32,
    pub umask: u32,
    pub padding: u32,
}

/// MKDIR argument; the name follows.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_mkdir_in {
    pub mode: u32,
    pub umask: u32,
}

/// RENAME argument; old and new names follow.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_rename_in {
    pub newdir: u64,
}

/// RENAME2 argument; old and new names follow.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_rename2_in {
    pub newdir: u64,
    pub flags: u32,
    pub padding: u32,
}

/// LINK argument; the new name follows.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_link_in {
    pub oldnodeid: u64,
}

/// SETATTR argument; `valid` holds FATTR_* bits.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_setattr_in {
    pub valid: u32,
    pub padding: u32,
    pub fh: u64,
    pub size: u64,
    pub lock_owner: u64,
    pub atime: u64,
    pub mtime: u64,
    pub ctime: u64,
    pub atimensec: u32,
    pub mtimensec: u32,
    pub ctimensec: u32,
    pub mode: u32,
    pub unused4: u32,
    pub uid: u32,
    pub gid: u32,
    pub unused5: u32,
}

/// OPEN/OPENDIR argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_open_in {
    pub flags: u32,
    pub open_flags: u32,
}

/// CREATE argument; the name follows.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_create_in {
    pub flags: u32,
    pub mode: u32,
    pub umask: u32,
    pub open_flags: u32,
}

/// OPEN/OPENDIR/CREATE reply.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_open_out {
    pub fh: u64,
    pub open_flags: u32,
    pub backing_id: i32,
}

/// RELEASE/RELEASEDIR argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_release_in {
    pub fh: u64,
    pub flags: u32,
    pub release_flags: u32,
    pub lock_owner: u64,
}

/// FLUSH argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_flush_in {
    pub fh: u64,
    pub unused: u32,
    pub padding: u32,
    pub lock_owner: u64,
}

/// READ/READDIR/READDIRPLUS argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_read_in {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub read_flags: u32,
    pub lock_owner: u64,
    pub flags: u32,
    pub padding: u32,
}

/// WRITE argument; `size` data bytes follow.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_write_in {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub write_flags: u32,
    pub lock_owner: u64,
    pub flags: u32,
    pub padding: u32,
}

/// WRITE (and COPY_FILE_RANGE) reply.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_write_out {
    pub size: u32,
    pub padding: u32,
}

/// STATFS reply.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_statfs_out {
    pub st: fuse_kstatfs,
}

/// FSYNC/FSYNCDIR argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_fsync_in {
    pub fh: u64,
    pub fsync_flags: u32,
    pub padding: u32,
}

/// SETXATTR argument. Without FUSE_SETXATTR_EXT negotiated the kernel sends
/// only the first 8 bytes (`FUSE_COMPAT_SETXATTR_IN_SIZE`).
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_setxattr_in {
    pub size: u32,
    pub flags: u32,
    pub setxattr_flags: u32,
    pub padding: u32,
}
/// `FUSE_COMPAT_SETXATTR_IN_SIZE`.
pub const FUSE_COMPAT_SETXATTR_IN_SIZE: usize = 8;

/// GETXATTR/LISTXATTR argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_getxattr_in {
    pub size: u32,
    pub padding: u32,
}

/// GETXATTR/LISTXATTR size-only reply.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_getxattr_out {
    pub size: u32,
    pub padding: u32,
}

/// ACCESS argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_access_in {
    pub mask: u32,
    pub padding: u32,
}

/// INIT argument. Kernels before 7.36 send only the first 16 bytes
/// (`flags2` and later absent); parse with [`fuse_init_in::parse`].
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_init_in {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub flags2: u32,
    pub unused: [u32; 11],
}

impl fuse_init_in {
    /// Parses an INIT argument of 16 bytes (before 7.36) or more; missing
    /// trailing fields read as zero. `None` if shorter than 16 bytes
    /// (8 bytes for kernels before 7.6 are not supported).
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < 16 {
            return None;
        }
        let mut buf = [0u8; std::mem::size_of::<fuse_init_in>()];
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        Self::read_from(&buf)
    }
}

/// `FUSE_COMPAT_INIT_OUT_SIZE` (minor < 5).
pub const FUSE_COMPAT_INIT_OUT_SIZE: usize = 8;
/// `FUSE_COMPAT_22_INIT_OUT_SIZE` (minor < 23).
pub const FUSE_COMPAT_22_INIT_OUT_SIZE: usize = 24;

/// INIT reply (64 bytes since 7.23).
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_init_out {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub max_background: u16,
    pub congestion_threshold: u16,
    pub max_write: u32,
    pub time_gran: u32,
    pub max_pages: u16,
    pub map_alignment: u16,
    pub flags2: u32,
    pub max_stack_depth: u32,
    pub request_timeout: u16,
    pub unused: [u16; 11],
}

impl fuse_init_out {
    /// How many bytes of `fuse_init_out` to send for protocol minor `minor`
    /// (the kernel rejects a longer reply from an older-protocol daemon).
    pub fn wire_size(minor: u32) -> usize {
        if minor < 5 {
            FUSE_COMPAT_INIT_OUT_SIZE
        } else if minor < 23 {
            FUSE_COMPAT_22_INIT_OUT_SIZE
        } else {
            std::mem::size_of::<fuse_init_out>()
        }
    }
}

/// INTERRUPT argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_interrupt_in {
    pub unique: u64,
}

/// FALLOCATE argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_fallocate_in {
    pub fh: u64,
    pub offset: u64,
    pub length: u64,
    pub mode: u32,
    pub padding: u32,
}

/// Header of one READDIR entry; the name follows, then zero padding up to
/// the next multiple of 8 ([`fuse_dirent_size`]).
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_dirent {
    pub ino: u64,
    pub off: u64,
    pub namelen: u32,
    pub r#type: u32,
}
/// `FUSE_NAME_OFFSET`: where the name starts in a dirent.
pub const FUSE_NAME_OFFSET: usize = 24;

/// Header of one READDIRPLUS entry: entry_out then dirent, name follows.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_direntplus {
    pub entry_out: fuse_entry_out,
    pub dirent: fuse_dirent,
}
/// `FUSE_NAME_OFFSET_DIRENTPLUS`.
pub const FUSE_NAME_OFFSET_DIRENTPLUS: usize = 152;

/// `FUSE_DIRENT_ALIGN(x)`: round up to a multiple of 8.
#[inline]
pub const fn fuse_dirent_align(x: usize) -> usize {
    (x + 7) & !7
}
/// `FUSE_DIRENT_SIZE`: bytes a READDIR entry with a `namelen`-byte name takes.
#[inline]
pub const fn fuse_dirent_size(namelen: usize) -> usize {
    fuse_dirent_align(FUSE_NAME_OFFSET + namelen)
}
/// `FUSE_DIRENTPLUS_SIZE`: bytes a READDIRPLUS entry takes.
#[inline]
pub const fn fuse_direntplus_size(namelen: usize) -> usize {
    fuse_dirent_align(FUSE_NAME_OFFSET_DIRENTPLUS + namelen)
}

/// LSEEK argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_lseek_in {
    pub fh: u64,
    pub offset: u64,
    pub whence: u32,
    pub padding: u32,
}

/// LSEEK reply.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_lseek_out {
    pub offset: u64,
}

/// COPY_FILE_RANGE(_64) argument.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_copy_file_range_in {
    pub fh_in: u64,
    pub off_in: u64,
    pub nodeid_out: u64,
    pub fh_out: u64,
    pub off_out: u64,
    pub len: u64,
    pub flags: u64,
}

/// COPY_FILE_RANGE_64 reply (7.45); plain COPY_FILE_RANGE answers `fuse_write_out`.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_copy_file_range_out {
    pub bytes_copied: u64,
}

/// NOTIFY_INVAL_INODE body.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_notify_inval_inode_out {
    pub ino: u64,
    pub off: i64,
    pub len: i64,
}

/// Followed by the name and a NUL byte.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_notify_inval_entry_out {
    pub parent: u64,
    pub namelen: u32,
    pub flags: u32,
}

/// Followed by the name and a NUL byte.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_notify_delete_out {
    pub parent: u64,
    pub child: u64,
    pub namelen: u32,
    pub padding: u32,
}

/// NOTIFY_STORE body, followed by `size` bytes of data.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_notify_store_out {
    pub nodeid: u64,
    pub offset: u64,
    pub size: u32,
    pub padding: u32,
}

/// Argument of `FUSE_DEV_IOC_BACKING_OPEN`.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_backing_map {
    pub fd: i32,
    pub flags: u32,
    pub padding: u64,
}

/// STATX argument (7.39).
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_statx_in {
    pub getattr_flags: u32,
    pub reserved: u32,
    pub fh: u64,
    pub sx_flags: u32,
    pub sx_mask: u32,
}

/// A time in [`fuse_statx`].
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_sx_time {
    pub tv_sec: i64,
    pub tv_nsec: u32,
    pub reserved: i32,
}

/// The attributes of a STATX reply (`struct statx`'s fields, 7.39).
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_statx {
    pub mask: u32,
    pub blksize: u32,
    pub attributes: u64,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mode: u16,
    pub spare0: u16,
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub attributes_mask: u64,
    pub atime: fuse_sx_time,
    pub btime: fuse_sx_time,
    pub ctime: fuse_sx_time,
    pub mtime: fuse_sx_time,
    pub rdev_major: u32,
    pub rdev_minor: u32,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub spare2: [u64; 14],
}

/// STATX reply.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_statx_out {
    pub attr_valid: u64,
    pub attr_valid_nsec: u32,
    pub flags: u32,
    pub spare: [u64; 2],
    pub stat: fuse_statx,
}

/// `statx(2)` mask bits (linux/stat.h).
pub const STATX_BASIC_STATS: u32 = 0x7ff;
/// `statx(2)`: `stx_btime` is valid.
pub const STATX_BTIME: u32 = 0x800;
/// `stx_attributes`: the file is immutable (same bit as `FS_IMMUTABLE_FL`).
pub const STATX_ATTR_IMMUTABLE: u64 = 0x10;
/// `stx_attributes`: the file is append-only (same bit as `FS_APPEND_FL`).
pub const STATX_ATTR_APPEND: u64 = 0x20;

/// IOCTL argument; `in_size` bytes of input follow.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_ioctl_in {
    pub fh: u64,
    pub flags: u32,
    pub cmd: u32,
    pub arg: u64,
    pub in_size: u32,
    pub out_size: u32,
}

/// IOCTL reply; up to `out_size` bytes of output follow.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_ioctl_out {
    pub result: i32,
    pub flags: u32,
    pub in_iovs: u32,
    pub out_iovs: u32,
}

/// `fuse_ioctl_in.flags`: the request is on a directory.
pub const FUSE_IOCTL_DIR: u32 = 1 << 4;
/// ioctl(2) `FS_IOC_GETFLAGS` (`_IOR('f', 1, long)`); the kernel's fileattr
/// code sends it with a 4-byte `unsigned int`.
pub const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
/// ioctl(2) `FS_IOC_SETFLAGS` (`_IOW('f', 2, long)`), 4-byte argument.
pub const FS_IOC_SETFLAGS: u32 = 0x4008_6602;

/// The 80-byte command area of a FUSE-over-io_uring SQE (`fuse_uring_cmd_req`).
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_uring_cmd_req {
    pub flags: u64,
    pub commit_id: u64,
    pub qid: u16,
    pub padding: [u8; 6],
}

/// `fuse_uring_ent_in_out`: per-entry metadata after `in_out` and `op_in`.
#[allow(missing_docs)] // fields as in fuse.h
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fuse_uring_ent_in_out {
    pub flags: u64,
    pub commit_id: u64,
    pub payload_sz: u32,
    pub padding: u32,
    pub reserved: u64,
}

pod! {
    fuse_in_header = 40,
    fuse_out_header = 16,
    fuse_attr = 88,
    fuse_kstatfs = 80,
    fuse_entry_out = 128,
    fuse_forget_in = 8,
    fuse_forget_one = 16,
    fuse_batch_forget_in = 8,
    fuse_getattr_in = 16,
    fuse_attr_out = 104,
    fuse_mknod_in = 16,
    fuse_mkdir_in = 8,
    fuse_rename_in = 8,
    fuse_rename2_in = 16,
    fuse_link_in = 8,
    fuse_setattr_in = 88,
    fuse_open_in = 8,
    fuse_create_in = 16,
    fuse_open_out = 16,
    fuse_release_in = 24,
    fuse_flush_in = 24,
    fuse_read_in = 40,
    fuse_write_in = 40,
    fuse_write_out = 8,
    fuse_statfs_out = 80,
    fuse_fsync_in = 16,
    fuse_setxattr_in = 16,
    fuse_getxattr_in = 8,
    fuse_getxattr_out = 8,
    fuse_access_in = 8,
    fuse_init_in = 64,
    fuse_init_out = 64,
    fuse_interrupt_in = 8,
    fuse_fallocate_in = 32,
    fuse_dirent = 24,
    fuse_direntplus = 152,
    fuse_lseek_in = 24,
    fuse_lseek_out = 8,
    fuse_copy_file_range_in = 56,
    fuse_copy_file_range_out = 8,
    fuse_notify_inval_inode_out = 24,
    fuse_notify_inval_entry_out = 16,
    fuse_notify_delete_out = 24,
    fuse_notify_store_out = 24,
    fuse_backing_map = 16,
    fuse_uring_cmd_req = 24,
    fuse_statx_in = 24,
    fuse_sx_time = 16,
    fuse_statx = 256,
    fuse_statx_out = 288,
    fuse_ioctl_in = 32,
    fuse_ioctl_out = 16,
    fuse_uring_ent_in_out = 32,
}

const _: () = assert!(std::mem::offset_of!(fuse_init_out, max_stack_depth) == 36);
const _: () = assert!(std::mem::offset_of!(fuse_init_out, flags2) == 32);
const _: () = assert!(std::mem::offset_of!(fuse_entry_out, attr) == 40);
const _: () = assert!(FUSE_DEV_IOC_CLONE == 0x8004_e500);
const _: () = assert!(FUSE_DEV_IOC_BACKING_OPEN == 0x4010_e501);
const _: () = assert!(FUSE_DEV_IOC_BACKING_CLOSE == 0x4004_e502);
