//! The dispatcher: one decoded request → one [`Filesystem`] call → one encoded reply.
//!
//! [`Dispatcher::dispatch`] takes the raw bytes of a contiguous request
//! (`/dev/fuse`) and fills a [`ReplyBuf`]; [`Dispatcher::dispatch_parts`]
//! does the same for a request a FUSE-over-io_uring entry holds in three
//! places (in-header, `op_in`, payload). Both return whether the kernel
//! expects a reply. The transport only moves bytes; decoding, the call into
//! the filesystem, and encoding live here, once, for every transport.
//!
//! INIT is negotiated by [`negotiate`] before a dispatcher exists (it needs
//! only the [`InitOptions`], which the session fills from its
//! [`MountOptions`](crate::MountOptions)); a later INIT reaching the
//! dispatcher gets EPROTO.
//!
//! Sits on the protocol (`abi`, `request`, `reply`), the [`Filesystem`] trait
//! and `stats`, and on nothing above: it does not know how bytes reach it
//! (`/dev/fuse`, io_uring), how the connection was mounted, or which
//! transport was chosen.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::abi::*;
use crate::fs::{ConnInfo, Errno, Filesystem, RequestCtx, SetAttrIn, SetTime, XattrReply};
use crate::reply::{encode_attr_out, encode_entry, encode_statx_out, DirentPlusWriter, DirentWriter, ReplyBuf};
use crate::request::{parse_header, opcode_needs_reply, Args, InHeader, Operation, ParseError, ParseOptions, Request};
use crate::stats::OpStats;

/// What [`negotiate`] asks the kernel for: the part of the mount options
/// that INIT needs. The session fills it from its
/// [`MountOptions`](crate::MountOptions) (`From<&MountOptions>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitOptions {
    /// Ask for READDIRPLUS (DO_READDIRPLUS + READDIRPLUS_AUTO).
    pub readdirplus: bool,
    /// Ask for FUSE_PASSTHROUGH with `max_stack_depth` 1.
    pub passthrough: bool,
    /// Ask for FUSE_OVER_IO_URING (the transport is not `/dev/fuse` only).
    pub over_io_uring: bool,
    /// Largest WRITE payload in bytes (at least 4096 is answered).
    pub max_write: u32,
    /// `fuse_init_out.max_background`; the congestion threshold is 3/4 of it.
    pub max_background: u16,
    /// Ask for POSIX_ACL with DONT_MASK and SETXATTR_EXT (see [`negotiate`]).
    pub posix_acl: bool,
}

/// What [`negotiate`] decided for one INIT request.
#[derive(Clone, Copy, Debug)]
pub enum InitDecision {
    /// Send `out` (the first `len` bytes) and use `info` from now on.
    Accept {
        /// The reply struct.
        out: fuse_init_out,
        /// How many bytes of `out` to send (depends on the answered minor).
        len: usize,
        /// What was agreed.
        info: ConnInfo,
    },
    /// The kernel speaks a newer major version: send `out` (major 7 only,
    /// first `len` bytes) and wait for a second INIT.
    RetryMajor {
        /// The reply struct (only `major`/`minor` set).
        out: fuse_init_out,
        /// How many bytes of `out` to send.
        len: usize,
    },
    /// Refuse with this errno (EPROTO: the kernel is too old).
    Refuse(i32),
}

/// Negotiates INIT (kernel doc: `fuse.h` "Version negotiation").
///
/// Answers protocol `7.min(kernel minor, 45)` with `fuse_init_out` sized for
/// that minor, and requests ASYNC_READ, BIG_WRITES,
/// EXPORT_SUPPORT, PARALLEL_DIROPS, MAX_PAGES (`max_pages` 256),
/// CACHE_SYMLINKS, INIT_EXT, DO_READDIRPLUS + READDIRPLUS_AUTO (if
/// `opts.readdirplus`) and PASSTHROUGH with `max_stack_depth` 1 (if
/// `opts.passthrough`) and OVER_IO_URING (if `opts.over_io_uring`, i.e.
/// unless the mount's transport is `Dev`) and HANDLE_KILLPRIV_V2, and with
/// `opts.posix_acl` POSIX_ACL, DONT_MASK and SETXATTR_EXT, each only
/// if the kernel offers it. `opts` is an [`InitOptions`] or anything that
/// converts into one (`&MountOptions`).
///
/// HANDLE_KILLPRIV_V2 makes the kernel set SB_NOSEC, so after one check an
/// inode without setuid/setgid bits or `security.capability` is marked
/// S_NOSEC and later writes skip `file_remove_privs` — without it every
/// write(2), passthrough writes included, costs a GETXATTR
/// `security.capability` round trip to the daemon. In exchange the
/// filesystem clears S_ISUID (and S_ISGID when S_IXGRP is set) itself: on
/// WRITE with FUSE_WRITE_KILL_SUIDGID, on SETATTR with FATTR_KILL_SUIDGID
/// (truncate by a caller without CAP_FSETID, chown), and on the SETATTR that
/// carries no attribute at all (see [`decode_setattr`]), which is how a
/// passthrough write reaches us (`SetAttrIn::remove_privs`). FUSE_OPEN_KILL_SUIDGID needs no handling:
/// it is only acted on with ATOMIC_O_TRUNC, and without that the kernel
/// truncates with a SETATTR that carries FATTR_KILL_SUIDGID.
///
/// POSIX_ACL makes the kernel check permissions against the ACL xattrs
/// (`system.posix_acl_access`, `…_default`, read with GETXATTR and cached)
/// and pass ACL changes on as SETXATTR / REMOVEXATTR; the filesystem stores
/// them and keeps the mode in step (the kernel does not: neither when an
/// access ACL is set nor on chmod), and gives new inodes their directory's
/// default ACL. DONT_MASK leaves the umask to the filesystem (the `umask` of
/// MKNOD, MKDIR, CREATE, TMPFILE), since a default ACL replaces it;
/// SETXATTR_EXT carries FUSE_SETXATTR_ACL_KILL_SGID.
///
/// Never WRITEBACK_CACHE, POSIX_LOCKS or FLOCK_LOCKS (locks stay
/// kernel-local), nor ATOMIC_O_TRUNC: with it the filesystem truncates inside OPEN, *before*
/// the VFS checks ETXTBSY (`handle_truncate` in fs/namei.c), so
/// `open(O_TRUNC)` of a running executable would destroy it (and then
/// succeed once the process died of SIGBUS). Without it the kernel checks
/// first and truncates with a SETATTR.
pub fn negotiate(init: &fuse_init_in, opts: impl Into<InitOptions>) -> InitDecision {
    let opts = opts.into();
    if init.major > FUSE_KERNEL_VERSION {
        let out = fuse_init_out { major: FUSE_KERNEL_VERSION, minor: FUSE_KERNEL_MINOR_VERSION, ..Default::default() };
        return InitDecision::RetryMajor { out, len: FUSE_COMPAT_INIT_OUT_SIZE };
    }
    if init.major < FUSE_KERNEL_VERSION || init.minor < FUSE_MIN_KERNEL_MINOR_VERSION {
        return InitDecision::Refuse(libc::EPROTO);
    }
    let minor = init.minor.min(FUSE_KERNEL_MINOR_VERSION);
    let mut kernel_flags = init.flags as u64;
    if kernel_flags & FUSE_INIT_EXT != 0 {
        kernel_flags |= (init.flags2 as u64) << 32;
    }
    let mut want = FUSE_ASYNC_READ
        | FUSE_BIG_WRITES
        | FUSE_EXPORT_SUPPORT
        | FUSE_PARALLEL_DIROPS
        | FUSE_MAX_PAGES
        | FUSE_CACHE_SYMLINKS
        | FUSE_HANDLE_KILLPRIV_V2
        | FUSE_INIT_EXT;
    if opts.readdirplus {
        want |= FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO;
    }
    if opts.passthrough {
        want |= FUSE_PASSTHROUGH;
    }
    if opts.over_io_uring {
        want |= FUSE_OVER_IO_URING;
    }
    if opts.posix_acl {
        want |= FUSE_POSIX_ACL | FUSE_DONT_MASK | FUSE_SETXATTR_EXT;
    }
    let flags = want & kernel_flags;
    let max_write = opts.max_write.max(4096);
    let max_pages = if flags & FUSE_MAX_PAGES != 0 { max_write.div_ceil(4096).min(u16::MAX as u32) as u16 } else { 0 };
    let passthrough = flags & FUSE_PASSTHROUGH != 0;
    let out = fuse_init_out {
        major: FUSE_KERNEL_VERSION,
        minor,
        max_readahead: init.max_readahead,
        flags: flags as u32,
        max_background: opts.max_background,
        congestion_threshold: opts.max_background.saturating_mul(3) / 4,
        max_write,
        time_gran: 1,
        max_pages,
        map_alignment: 0,
        flags2: if flags & FUSE_INIT_EXT != 0 { (flags >> 32) as u32 } else { 0 },
        max_stack_depth: if passthrough { 1 } else { 0 },
        request_timeout: 0,
        unused: [0; 11],
    };
    let info = ConnInfo {
        proto_minor: minor,
        kernel_flags,
        flags,
        max_write,
        max_readahead: init.max_readahead,
        passthrough,
    };
    InitDecision::Accept { out, len: fuse_init_out::wire_size(minor), info }
}

/// Decodes requests, calls the [`Filesystem`], encodes replies. Shared by all
/// workers of a session (`Arc<Dispatcher<F>>`); holds no per-request state.
pub struct Dispatcher<F: Filesystem> {
    fs: Arc<F>,
    info: ConnInfo,
    parse: ParseOptions,
    stats: Arc<OpStats>,
    destroyed: AtomicBool,
}

impl<F: Filesystem> Dispatcher<F> {
    /// A dispatcher for a connection negotiated as `info` (from [`negotiate`]),
    /// counting requests into `stats`. Does not call `fs.init`.
    pub fn new(fs: Arc<F>, info: ConnInfo, stats: Arc<OpStats>) -> Self {
        let parse = ParseOptions { setxattr_ext: info.flags & FUSE_SETXATTR_EXT != 0 };
        Dispatcher { fs, info, parse, stats, destroyed: AtomicBool::new(false) }
    }

    /// The negotiated connection parameters.
    pub fn conn_info(&self) -> &ConnInfo {
        &self.info
    }

    /// The filesystem requests go to.
    pub fn filesystem(&self) -> &Arc<F> {
        &self.fs
    }

    /// Calls `fs.destroy()` unless a DESTROY request already did. Idempotent.
    pub fn destroy(&self) {
        if !self.destroyed.swap(true, Ordering::AcqRel) {
            self.fs.destroy();
        }
    }

    /// Handles one contiguous request (`fuse_in_header` + arguments, exactly
    /// `len` bytes, as read from `/dev/fuse`). Leaves the reply in `reply`
    /// and returns true if it must be sent; false for FORGET, BATCH_FORGET,
    /// INTERRUPT, NOTIFY_REPLY, and requests whose header is unusable.
    pub fn dispatch(&self, request: &[u8], reply: &mut ReplyBuf) -> bool {
        let header = match parse_header(request) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(len = request.len(), "dropping request: {e}");
                return false;
            }
        };
        self.stats.record(header.opcode);
        reply.reset(header.unique);
        let started = std::time::Instant::now();
        let send = match Request::parse(request, self.parse) {
            Ok(req) => self.handle(&req.header, req.op, reply),
            Err(e) => self.malformed(&header, e, reply),
        };
        if send {
            self.stats.record_done(header.opcode, started.elapsed(), request.len(), reply.as_bytes().len());
        }
        send
    }

    /// Handles one request given as a FUSE-over-io_uring entry holds it: the
    /// in-header bytes (`in_out`), the first argument struct (`op_in`) and the
    /// payload (`payload_sz` bytes). Same reply contract as [`Self::dispatch`];
    /// the header's `len` is not checked against the pieces.
    pub fn dispatch_parts(&self, in_header: &[u8], op_in: &[u8], payload: &[u8], reply: &mut ReplyBuf) -> bool {
        let Some(header) = fuse_in_header::read_from(in_header) else {
            tracing::warn!("dropping ring request: short in-header");
            return false;
        };
        self.stats.record(header.opcode);
        reply.reset(header.unique);
        let started = std::time::Instant::now();
        let send = match Operation::parse(header.opcode, Args::split(op_in, payload), self.parse) {
            Ok(op) => self.handle(&header, op, reply),
            Err(e) => self.malformed(&header, e, reply),
        };
        if send {
            let request_len = in_header.len() + op_in.len() + payload.len();
            self.stats.record_done(header.opcode, started.elapsed(), request_len, reply.as_bytes().len());
        }
        send
    }

    fn malformed(&self, header: &InHeader, e: ParseError, reply: &mut ReplyBuf) -> bool {
        tracing::warn!(opcode = header.opcode, unique = header.unique, "malformed request: {e}");
        reply.set_error(libc::EIO);
        opcode_needs_reply(header.opcode)
    }

    fn handle(&self, h: &InHeader, op: Operation<'_>, reply: &mut ReplyBuf) -> bool {
        let ctx = RequestCtx { unique: h.unique, uid: h.uid, gid: h.gid, pid: h.pid };
        // One line per request with RINGFS_LOG=fuse_uring::dispatch=trace:
        // which requests an operation costs, and on which inode.
        tracing::trace!(nodeid = h.nodeid, pid = h.pid, "{op:?}");
        let fs = &*self.fs;
        let ino = h.nodeid;
        let res: Result<(), Errno> = match op {
            Operation::Lookup { name } => fs.lookup(&ctx, ino, name).map(|e| reply.push(&encode_entry(&e))),
            Operation::Forget { nlookup } => {
                fs.forget(ino, nlookup);
                return false;
            }
            Operation::BatchForget { items } => {
                for (nodeid, nlookup) in items {
                    fs.forget(nodeid, nlookup);
                }
                return false;
            }
            Operation::Interrupt { .. } | Operation::NotifyReply => return false,
            Operation::GetAttr { arg } => {
                let fh = (arg.getattr_flags & FUSE_GETATTR_FH != 0).then_some(arg.fh);
                fs.getattr(&ctx, ino, fh).map(|a| reply.push(&encode_attr_out(&a)))
            }
            Operation::SetAttr { arg } => {
                fs.setattr(&ctx, ino, &decode_setattr(&arg)).map(|a| reply.push(&encode_attr_out(&a)))
            }
            Operation::ReadLink => fs.readlink(&ctx, ino).and_then(|t| {
                // The kernel's buffer is one page minus the NUL.
                if t.len() >= 4096 {
                    return Err(Errno(libc::ENAMETOOLONG));
                }
                reply.push_bytes(&t);
                Ok(())
            }),
            Operation::Symlink { name, target } => {
                fs.symlink(&ctx, ino, name, target).map(|e| reply.push(&encode_entry(&e)))
            }
            Operation::MkNod { arg, name } => {
                fs.mknod(&ctx, ino, name, arg.mode, arg.rdev, arg.umask).map(|e| reply.push(&encode_entry(&e)))
            }
            Operation::MkDir { arg, name } => {
                fs.mkdir(&ctx, ino, name, arg.mode, arg.umask).map(|e| reply.push(&encode_entry(&e)))
            }
            Operation::Unlink { name } => fs.unlink(&ctx, ino, name),
            Operation::RmDir { name } => fs.rmdir(&ctx, ino, name),
            Operation::Rename { newdir, flags, name, newname } => fs.rename(&ctx, ino, name, newdir, newname, flags),
            Operation::Link { oldnodeid, newname } => {
                fs.link(&ctx, oldnodeid, ino, newname).map(|e| reply.push(&encode_entry(&e)))
            }
            Operation::Open { arg } => fs.open(&ctx, ino, arg.flags).map(|o| reply.push(&open_out(&o))),
            Operation::Read { arg } => fs.read(&ctx, ino, arg.fh, arg.offset, arg.size).map(|data| {
                let n = data.len().min(arg.size as usize);
                reply.push_bytes(&data[..n]);
            }),
            Operation::Write { arg, data } => fs
                .write(&ctx, ino, arg.fh, arg.offset, data, arg.write_flags)
                .map(|n| reply.push(&fuse_write_out { size: n, padding: 0 })),
            Operation::StatFs => fs.statfs(&ctx, ino).map(|s| {
                reply.push(&fuse_statfs_out {
                    st: fuse_kstatfs {
                        blocks: s.blocks,
                        bfree: s.bfree,
                        bavail: s.bavail,
                        files: s.files,
                        ffree: s.ffree,
                        bsize: s.bsize,
                        namelen: s.namelen,
                        frsize: s.frsize,
                        padding: 0,
                        spare: [0; 6],
                    },
                })
            }),
            Operation::Release { arg } => fs.release(&ctx, ino, arg.fh, arg.flags),
            Operation::Fsync { arg } => fs.fsync(&ctx, ino, arg.fh, arg.fsync_flags & FUSE_FSYNC_FDATASYNC != 0),
            Operation::SetXattr { flags, setxattr_flags, name, value, .. } => {
                fs.setxattr(&ctx, ino, name, value, flags, setxattr_flags)
            }
            Operation::GetXattr { size, name } => {
                fs.getxattr(&ctx, ino, name, size).and_then(|x| xattr_reply(reply, size, x))
            }
            Operation::ListXattr { size } => fs.listxattr(&ctx, ino, size).and_then(|x| xattr_reply(reply, size, x)),
            Operation::RemoveXattr { name } => fs.removexattr(&ctx, ino, name),
            Operation::Flush { arg } => fs.flush(&ctx, ino, arg.fh, arg.lock_owner),
            Operation::Init { .. } => Err(Errno(libc::EPROTO)),
            Operation::OpenDir { arg } => fs.opendir(&ctx, ino, arg.flags).map(|o| reply.push(&open_out(&o))),
            Operation::ReadDir { arg } => {
                let mut sink = DirentWriter::new(reply, arg.size as usize);
                fs.readdir(&ctx, ino, arg.fh, arg.offset, &mut sink)
            }
            Operation::ReadDirPlus { arg } => {
                let mut sink = DirentPlusWriter::new(reply, arg.size as usize);
                fs.readdirplus(&ctx, ino, arg.fh, arg.offset, &mut sink)
            }
            Operation::ReleaseDir { arg } => fs.releasedir(&ctx, ino, arg.fh, arg.flags),
            Operation::FsyncDir { arg } => {
                fs.fsyncdir(&ctx, ino, arg.fh, arg.fsync_flags & FUSE_FSYNC_FDATASYNC != 0)
            }
            Operation::Access { mask } => fs.access(&ctx, ino, mask),
            Operation::Create { arg, name } => fs.create(&ctx, ino, name, arg.mode, arg.umask, arg.flags).map(|(e, o)| {
                reply.push(&encode_entry(&e));
                reply.push(&open_out(&o));
            }),
            Operation::Tmpfile { arg, .. } => fs.tmpfile(&ctx, ino, arg.mode, arg.umask, arg.flags).map(|(e, o)| {
                reply.push(&encode_entry(&e));
                reply.push(&open_out(&o));
            }),
            Operation::Destroy => {
                self.destroy();
                Ok(())
            }
            Operation::Fallocate { arg } => fs.fallocate(&ctx, ino, arg.fh, arg.offset, arg.length, arg.mode),
            Operation::Lseek { arg } => fs
                .lseek(&ctx, ino, arg.fh, arg.offset, arg.whence)
                .map(|off| reply.push(&fuse_lseek_out { offset: off })),
            Operation::CopyFileRange { arg } => {
                // The legacy reply is a u32; the kernel clamps `len` accordingly.
                let len = arg.len.min(u32::MAX as u64 & !0xfff);
                fs.copy_file_range(&ctx, ino, arg.fh_in, arg.off_in, arg.nodeid_out, arg.fh_out, arg.off_out, len, arg.flags)
                    .map(|n| reply.push(&fuse_write_out { size: n.min(u32::MAX as u64) as u32, padding: 0 }))
            }
            Operation::CopyFileRange64 { arg } => fs
                .copy_file_range(&ctx, ino, arg.fh_in, arg.off_in, arg.nodeid_out, arg.fh_out, arg.off_out, arg.len, arg.flags)
                .map(|n| reply.push(&fuse_copy_file_range_out { bytes_copied: n })),
            Operation::Statx { arg } => {
                let fh = (arg.getattr_flags & FUSE_GETATTR_FH != 0).then_some(arg.fh);
                fs.statx(&ctx, ino, fh, arg.sx_flags, arg.sx_mask).map(|s| reply.push(&encode_statx_out(&s)))
            }
            Operation::Ioctl { arg, data } => fs.ioctl(&ctx, ino, arg.fh, arg.flags, arg.cmd, data, arg.out_size).map(|(result, out)| {
                let out = &out[..out.len().min(arg.out_size as usize)];
                reply.push(&fuse_ioctl_out { result, flags: 0, in_iovs: 0, out_iovs: 0 });
                reply.push_bytes(out);
            }),
            Operation::Unsupported { opcode } => {
                tracing::trace!(opcode, "unsupported opcode: ENOSYS");
                Err(Errno::ENOSYS)
            }
        };
        if let Err(Errno(e)) = res {
            reply.set_error(e);
        }
        true
    }
}

fn open_out(o: &crate::fs::Opened) -> fuse_open_out {
    fuse_open_out { fh: o.fh, open_flags: o.open_flags, backing_id: o.backing_id }
}

/// GETXATTR/LISTXATTR: with `size == 0` the kernel wants `fuse_getxattr_out`,
/// else the data itself, at most `size` bytes (ERANGE if larger).
fn xattr_reply(reply: &mut ReplyBuf, size: u32, x: XattrReply) -> Result<(), Errno> {
    match (size, x) {
        (0, XattrReply::Size(n)) => reply.push(&fuse_getxattr_out { size: n, padding: 0 }),
        (0, XattrReply::Data(d)) => reply.push(&fuse_getxattr_out { size: d.len() as u32, padding: 0 }),
        (_, XattrReply::Data(d)) if d.len() <= size as usize => reply.push_bytes(&d),
        (_, XattrReply::Data(_)) => return Err(Errno(libc::ERANGE)),
        (_, XattrReply::Size(n)) if n > size => return Err(Errno(libc::ERANGE)),
        (_, XattrReply::Size(_)) => return Err(Errno::EIO),
    }
    Ok(())
}

/// `fuse_setattr_in` → [`SetAttrIn`], from its `valid` mask (FATTR_*).
/// FATTR_ATIME_NOW/MTIME_NOW win over an explicit time; FATTR_LOCKOWNER is ignored.
///
/// A SETATTR that changes no attribute (no MODE, UID, GID, SIZE, ATIME,
/// MTIME or CTIME bit) is decoded as `remove_privs`. With HANDLE_KILLPRIV_V2
/// `fuse_setattr` (fs/fuse/dir.c) drops ATTR_KILL_SUID/ATTR_KILL_SGID and the
/// ATTR_MODE the VFS derived from them, so the requests that only remove
/// privileges arrive empty: `file_remove_privs` for a write, fallocate or
/// copy_file_range by a caller without CAP_FSETID on a setuid/setgid file
/// (through passthrough the daemon sees no WRITE at all), `chown(f, -1, -1)`
/// (`chown_common` in fs/open.c, which kills suid on any non-directory) —
/// all of which want what FATTR_KILL_SUIDGID wants — and the same write by a
/// caller *with* CAP_FSETID when the file has `security.capability`: the
/// kernel then sends REMOVEXATTR of it (ATTR_KILL_PRIV in `setattr_prepare`)
/// and an empty SETATTR that must leave the set-id bits alone. The filesystem
/// tells them apart (see ringfs's adapter).
pub fn decode_setattr(a: &fuse_setattr_in) -> SetAttrIn {
    let v = a.valid;
    let has = |bit: u32| v & bit != 0;
    let changes = FATTR_MODE | FATTR_UID | FATTR_GID | FATTR_SIZE | FATTR_ATIME | FATTR_MTIME | FATTR_ATIME_NOW
        | FATTR_MTIME_NOW | FATTR_CTIME;
    let time = |now: u32, at: u32, secs: u64, nsecs: u32| {
        if has(now) {
            Some(SetTime::Now)
        } else if has(at) {
            Some(SetTime::At(secs as i64, nsecs))
        } else {
            None
        }
    };
    SetAttrIn {
        mode: has(FATTR_MODE).then_some(a.mode),
        uid: has(FATTR_UID).then_some(a.uid),
        gid: has(FATTR_GID).then_some(a.gid),
        size: has(FATTR_SIZE).then_some(a.size),
        atime: time(FATTR_ATIME_NOW, FATTR_ATIME, a.atime, a.atimensec),
        mtime: time(FATTR_MTIME_NOW, FATTR_MTIME, a.mtime, a.mtimensec),
        ctime: has(FATTR_CTIME).then_some((a.ctime as i64, a.ctimensec)),
        fh: has(FATTR_FH).then_some(a.fh),
        kill_suidgid: has(FATTR_KILL_SUIDGID),
        remove_privs: v & changes == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{Attr, Entry};
    use crate::MountOptions;
    use std::ffi::OsStr;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Fake {
        forgets: Mutex<Vec<(u64, u64)>>,
        setattr: Mutex<Option<SetAttrIn>>,
    }
    impl Filesystem for Fake {
        fn lookup(&self, _: &RequestCtx, _: u64, name: &OsStr) -> crate::fs::Result<Entry> {
            if name == "neg" {
                return Ok(Entry { entry_timeout: std::time::Duration::from_millis(1500), ..Default::default() });
            }
            Ok(Entry { attr: Attr { ino: 7, ..Default::default() }, ..Default::default() })
        }
        fn forget(&self, nodeid: u64, nlookup: u64) {
            self.forgets.lock().unwrap().push((nodeid, nlookup));
        }
        fn setattr(&self, _: &RequestCtx, _: u64, set: &SetAttrIn) -> crate::fs::Result<crate::fs::AttrReply> {
            *self.setattr.lock().unwrap() = Some(*set);
            Ok(Default::default())
        }
        fn getxattr(&self, _: &RequestCtx, _: u64, _: &OsStr, _: u32) -> crate::fs::Result<XattrReply> {
            Ok(XattrReply::Data(b"12345".to_vec()))
        }
    }

    fn setup() -> (Dispatcher<Fake>, Arc<OpStats>) {
        let stats = Arc::new(OpStats::default());
        (Dispatcher::new(Arc::new(Fake::default()), ConnInfo::default(), stats.clone()), stats)
    }

    fn run(d: &Dispatcher<Fake>, r: &[u8]) -> Option<(fuse_out_header, Vec<u8>)> {
        let mut reply = ReplyBuf::default();
        d.dispatch(r, &mut reply).then(|| (reply.header(), reply.body().to_vec()))
    }

    use crate::request::tests::req;

    #[test]
    fn unknown_and_unsupported_opcodes_get_enosys() {
        let (d, stats) = setup();
        for op in [9999, FUSE_GETLK, FUSE_SETLKW, FUSE_IOCTL, FUSE_POLL, FUSE_BMAP, FUSE_TMPFILE, FUSE_STATX, FUSE_READLINK] {
            let (h, body) = run(&d, &req(op, &[0u8; 64])).expect("reply");
            assert_eq!((h.error, h.unique, h.len, body.len()), (-libc::ENOSYS, 42, 16, 0), "opcode {op}");
        }
        assert_eq!(stats.get(9999), 1);
        assert_eq!(stats.get(FUSE_IOCTL), 1);
    }

    #[test]
    fn malformed_requests_get_eio_and_no_reply_ops_stay_silent() {
        let (d, _) = setup();
        let (h, _) = run(&d, &req(FUSE_LOOKUP, b"no-nul")).unwrap();
        assert_eq!(h.error, -libc::EIO);
        let (h, _) = run(&d, &req(FUSE_GETATTR, &[0u8; 3])).unwrap();
        assert_eq!(h.error, -libc::EIO);
        assert!(run(&d, &[1, 2, 3]).is_none(), "unusable header: nothing to answer");
        assert!(run(&d, &req(FUSE_FORGET, &[0u8; 4])).is_none(), "malformed FORGET: no reply");
        assert!(run(&d, &req(FUSE_FORGET, fuse_forget_in { nlookup: 3 }.as_bytes())).is_none());
        assert!(run(&d, &req(FUSE_INTERRUPT, fuse_interrupt_in { unique: 1 }.as_bytes())).is_none());
        assert_eq!(*d.filesystem().forgets.lock().unwrap(), [(1, 3)]);
        let (h, _) = run(&d, &req(FUSE_INIT, &[0u8; 64])).unwrap();
        assert_eq!(h.error, -libc::EPROTO, "second INIT");
    }

    #[test]
    fn entries_negative_entries_and_xattr_sizes() {
        let (d, _) = setup();
        let (h, body) = run(&d, &req(FUSE_LOOKUP, b"x\0")).unwrap();
        assert_eq!((h.error, h.len as usize, body.len()), (0, 16 + 128, 128));
        assert_eq!(fuse_entry_out::read_from(&body).unwrap().nodeid, 7);
        let (h, body) = run(&d, &req(FUSE_LOOKUP, b"neg\0")).unwrap();
        let e = fuse_entry_out::read_from(&body).unwrap();
        assert_eq!((h.error, e.nodeid, e.entry_valid, e.entry_valid_nsec), (0, 0, 1, 500_000_000));
        let mut g = fuse_getxattr_in { size: 0, padding: 0 }.as_bytes().to_vec();
        g.extend_from_slice(b"user.x\0");
        let (_, body) = run(&d, &req(FUSE_GETXATTR, &g)).unwrap();
        assert_eq!(fuse_getxattr_out::read_from(&body).unwrap().size, 5);
        g[..4].copy_from_slice(&4u32.to_ne_bytes());
        assert_eq!(run(&d, &req(FUSE_GETXATTR, &g)).unwrap().0.error, -libc::ERANGE);
        g[..4].copy_from_slice(&5u32.to_ne_bytes());
        assert_eq!(run(&d, &req(FUSE_GETXATTR, &g)).unwrap().1, b"12345");
    }

    #[test]
    fn setattr_valid_mask_is_decoded() {
        let (d, _) = setup();
        let a = fuse_setattr_in {
            valid: FATTR_SIZE | FATTR_FH | FATTR_ATIME | FATTR_ATIME_NOW | FATTR_MTIME | FATTR_KILL_SUIDGID,
            fh: 9,
            size: 100,
            mtime: 5,
            mtimensec: 6,
            mode: 0o777,
            ..Default::default()
        };
        let (h, body) = run(&d, &req(FUSE_SETATTR, a.as_bytes())).unwrap();
        assert_eq!((h.error, body.len()), (0, 104));
        let s = d.filesystem().setattr.lock().unwrap().unwrap();
        assert_eq!((s.size, s.fh, s.mode, s.uid), (Some(100), Some(9), None, None));
        assert_eq!((s.atime, s.mtime, s.ctime), (Some(SetTime::Now), Some(SetTime::At(5, 6)), None));
        assert!(s.kill_suidgid);
        // Only a mode: no kill. Nothing but FATTR_FH / LOCKOWNER: the kernel's
        // remove-privileges request under HANDLE_KILLPRIV_V2.
        assert!(!s.remove_privs);
        let m = decode_setattr(&fuse_setattr_in { valid: FATTR_MODE, ..Default::default() });
        assert!(!m.kill_suidgid && !m.remove_privs);
        assert!(!decode_setattr(&fuse_setattr_in { valid: FATTR_MTIME_NOW, ..Default::default() }).remove_privs);
        for v in [0, FATTR_FH, FATTR_LOCKOWNER] {
            let s = decode_setattr(&fuse_setattr_in { valid: v, ..Default::default() });
            assert!(s.remove_privs && !s.kill_suidgid && s.mode.is_none() && s.size.is_none() && s.mtime.is_none(), "{v:#x}");
        }
    }

    #[test]
    fn negotiation() {
        let opts = MountOptions { passthrough: true, transport: crate::Transport::Dev, ..Default::default() };
        let all = u32::MAX;
        let init = fuse_init_in { major: 7, minor: 45, max_readahead: 131072, flags: all, flags2: all, unused: [0; 11] };
        let InitDecision::Accept { out, len, info } = negotiate(&init, &opts) else { panic!() };
        assert_eq!((out.major, out.minor, len), (7, 45, 64));
        assert_eq!((out.max_write, out.max_pages, out.max_stack_depth), (1 << 20, 256, 1));
        assert!(info.passthrough);
        let f = info.flags;
        for bad in [FUSE_WRITEBACK_CACHE, FUSE_POSIX_LOCKS, FUSE_FLOCK_LOCKS, FUSE_HANDLE_KILLPRIV, FUSE_ATOMIC_O_TRUNC, FUSE_OVER_IO_URING, FUSE_POSIX_ACL, FUSE_DONT_MASK, FUSE_SETXATTR_EXT] {
            assert_eq!(f & bad, 0, "{bad:#x}");
        }
        for good in [FUSE_ASYNC_READ, FUSE_BIG_WRITES, FUSE_DO_READDIRPLUS, FUSE_READDIRPLUS_AUTO, FUSE_PARALLEL_DIROPS, FUSE_MAX_PAGES, FUSE_INIT_EXT, FUSE_PASSTHROUGH, FUSE_HANDLE_KILLPRIV_V2] {
            assert_ne!(f & good, 0, "{good:#x}");
        }
        assert_eq!(out.flags2 as u64, f >> 32);
        // io_uring is asked for unless the transport is Dev.
        let auto = MountOptions { transport: crate::Transport::Auto, ..opts.clone() };
        let InitDecision::Accept { info, .. } = negotiate(&init, &auto) else { panic!() };
        assert_ne!(info.flags & FUSE_OVER_IO_URING, 0);
        // POSIX ACLs come with DONT_MASK (the filesystem applies the umask) and SETXATTR_EXT.
        let acl = MountOptions { posix_acl: true, ..opts.clone() };
        let InitDecision::Accept { info, .. } = negotiate(&init, &acl) else { panic!() };
        let want = FUSE_POSIX_ACL | FUSE_DONT_MASK | FUSE_SETXATTR_EXT;
        assert_eq!(info.flags & want, want);
        // A kernel without INIT_EXT: flags2 ignored, no passthrough.
        let old = fuse_init_in { minor: 22, flags: (FUSE_ASYNC_READ | FUSE_BIG_WRITES) as u32, flags2: all, ..init };
        let InitDecision::Accept { out, len, info } = negotiate(&old, &opts) else { panic!() };
        assert_eq!((out.minor, len, info.passthrough, out.flags2), (22, 24, false, 0));
        assert_eq!(info.flags, FUSE_ASYNC_READ | FUSE_BIG_WRITES);
        // Too old, newer major.
        assert!(matches!(negotiate(&fuse_init_in { minor: 5, ..init }, &opts), InitDecision::Refuse(libc::EPROTO)));
        assert!(matches!(negotiate(&fuse_init_in { major: 8, ..init }, &opts), InitDecision::RetryMajor { len: 8, .. }));
    }
}
