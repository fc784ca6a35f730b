//! The request decoder: raw FUSE request bytes → [`Request`] (header + [`Operation`]).
//!
//! Transport-neutral. A request arrives either as one contiguous message
//! (`/dev/fuse`: `fuse_in_header`, then the arguments) or, on a
//! FUSE-over-io_uring ring entry, split in three places: the in-header in the
//! entry's `in_out` area, the first (per-op) argument struct in `op_in`, and
//! every further argument (names, WRITE data) in the payload buffer. An
//! [`Args`] hides the difference: [`Args::contiguous`] for `/dev/fuse`,
//! [`Args::split`] for a ring entry. The decoder only ever asks for "the fixed
//! struct of this op" and "the rest", so both give the same [`Operation`].
//!
//! Every read is bounds-checked; a short or malformed request gives a
//! [`ParseError`] (the dispatcher answers it with EIO), never a panic.
//!
//! Built on [`abi`] alone: it borrows from the request bytes and knows
//! nothing of the [`Filesystem`](crate::Filesystem) trait, replies, or where
//! the bytes came from.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::abi::{self, *};

/// Why a request could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Fewer bytes than a `fuse_in_header`, or `len` disagrees with the bytes read.
    /// The request cannot be answered (its `unique` is unknown or untrustworthy).
    BadHeader,
    /// The arguments are shorter than the opcode's struct, a name lacks its
    /// NUL terminator, or a length field points past the end. Answer EIO.
    Malformed,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::BadHeader => f.write_str("malformed fuse_in_header"),
            ParseError::Malformed => f.write_str("malformed request arguments"),
        }
    }
}

impl std::error::Error for ParseError {}

/// The argument bytes of one request, wherever the transport put them.
#[derive(Clone, Copy, Debug)]
pub struct Args<'a> {
    /// Holds the op's fixed struct (and, when contiguous, everything after it).
    first: &'a [u8],
    /// `None` for a contiguous message; the ring payload otherwise.
    rest: Option<&'a [u8]>,
}

impl<'a> Args<'a> {
    /// Arguments as one slice, everything after the `fuse_in_header` (`/dev/fuse`).
    pub fn contiguous(args: &'a [u8]) -> Self {
        Args { first: args, rest: None }
    }

    /// Arguments of a FUSE-over-io_uring entry: `op_in` holds the first
    /// argument struct (possibly zero-sized, e.g. LOOKUP), `payload` the
    /// rest (`payload_sz` bytes).
    pub fn split(op_in: &'a [u8], payload: &'a [u8]) -> Self {
        Args { first: op_in, rest: Some(payload) }
    }

    /// Splits off the opcode's fixed struct of `n` bytes; returns it and the rest.
    fn fixed(&self, n: usize) -> Result<(&'a [u8], &'a [u8]), ParseError> {
        match self.rest {
            None => {
                if self.first.len() < n {
                    return Err(ParseError::Malformed);
                }
                Ok(self.first.split_at(n))
            }
            Some(rest) => {
                if self.first.len() < n {
                    return Err(ParseError::Malformed);
                }
                Ok((&self.first[..n], rest))
            }
        }
    }

    fn pod<T: Pod>(&self) -> Result<(T, &'a [u8]), ParseError> {
        let (head, rest) = self.fixed(std::mem::size_of::<T>())?;
        Ok((T::read_from(head).ok_or(ParseError::Malformed)?, rest))
    }
}

/// Splits a NUL-terminated name off the front of `bytes`.
fn take_name(bytes: &[u8]) -> Result<(&OsStr, &[u8]), ParseError> {
    let nul = bytes.iter().position(|&b| b == 0).ok_or(ParseError::Malformed)?;
    Ok((OsStr::from_bytes(&bytes[..nul]), &bytes[nul + 1..]))
}

/// The fixed header of a request, with the fields the filesystem sees.
pub type InHeader = fuse_in_header;

/// One decoded FUSE request.
#[derive(Debug)]
pub struct Request<'a> {
    /// The request's `fuse_in_header` (`nodeid` is the inode the op acts on).
    pub header: InHeader,
    /// The decoded operation and its arguments, borrowing from the request bytes.
    pub op: Operation<'a>,
}

/// The items of a BATCH_FORGET, decoded lazily from the request bytes.
#[derive(Clone, Debug)]
pub struct ForgetIter<'a> {
    bytes: &'a [u8],
}

impl Iterator for ForgetIter<'_> {
    /// `(nodeid, nlookup)`.
    type Item = (u64, u64);
    fn next(&mut self) -> Option<(u64, u64)> {
        let one = fuse_forget_one::read_from(self.bytes)?;
        self.bytes = &self.bytes[std::mem::size_of::<fuse_forget_one>()..];
        Some((one.nodeid, one.nlookup))
    }
}

/// A decoded request's operation and arguments. The inode it acts on is
/// `header.nodeid`. Names are the raw bytes the kernel sent (no NUL).
#[derive(Debug)]
#[allow(missing_docs)]
pub enum Operation<'a> {
    Lookup { name: &'a OsStr },
    Forget { nlookup: u64 },
    BatchForget { items: ForgetIter<'a> },
    GetAttr { arg: fuse_getattr_in },
    SetAttr { arg: fuse_setattr_in },
    ReadLink,
    Symlink { name: &'a OsStr, target: &'a OsStr },
    MkNod { arg: fuse_mknod_in, name: &'a OsStr },
    MkDir { arg: fuse_mkdir_in, name: &'a OsStr },
    Unlink { name: &'a OsStr },
    RmDir { name: &'a OsStr },
    /// RENAME (flags 0) and RENAME2.
    Rename { newdir: u64, flags: u32, name: &'a OsStr, newname: &'a OsStr },
    Link { oldnodeid: u64, newname: &'a OsStr },
    Open { arg: fuse_open_in },
    Read { arg: fuse_read_in },
    /// `data` is exactly `arg.size` bytes.
    Write { arg: fuse_write_in, data: &'a [u8] },
    StatFs,
    Release { arg: fuse_release_in },
    Fsync { arg: fuse_fsync_in },
    /// `value` is exactly `size` bytes; `setxattr_flags` is 0 unless
    /// FUSE_SETXATTR_EXT was negotiated.
    SetXattr { size: u32, flags: u32, setxattr_flags: u32, name: &'a OsStr, value: &'a [u8] },
    GetXattr { size: u32, name: &'a OsStr },
    ListXattr { size: u32 },
    RemoveXattr { name: &'a OsStr },
    Flush { arg: fuse_flush_in },
    /// INIT; the session negotiates it (see [`crate::negotiate`]).
    Init { arg: fuse_init_in },
    OpenDir { arg: fuse_open_in },
    ReadDir { arg: fuse_read_in },
    ReleaseDir { arg: fuse_release_in },
    FsyncDir { arg: fuse_fsync_in },
    Access { mask: u32 },
    Create { arg: fuse_create_in, name: &'a OsStr },
    /// TMPFILE (`open(O_TMPFILE)`): as CREATE; the name is a placeholder.
    Tmpfile { arg: fuse_create_in, name: &'a OsStr },
    Interrupt { unique: u64 },
    Destroy,
    Fallocate { arg: fuse_fallocate_in },
    ReadDirPlus { arg: fuse_read_in },
    Lseek { arg: fuse_lseek_in },
    CopyFileRange { arg: fuse_copy_file_range_in },
    CopyFileRange64 { arg: fuse_copy_file_range_in },
    /// STATX (7.39): attributes with the birth time.
    Statx { arg: fuse_statx_in },
    /// IOCTL; `data` is the `in_size` bytes of input.
    Ioctl { arg: fuse_ioctl_in, data: &'a [u8] },
    /// NOTIFY_REPLY (answer to a retrieve notification): never answered.
    NotifyReply,
    /// Known but not served here (GETLK, SETLK, BMAP, POLL, ...) or
    /// unknown: answered with ENOSYS.
    Unsupported { opcode: u32 },
}

/// Decoder settings that depend on the INIT negotiation.
#[derive(Clone, Copy, Debug, Default)]
pub struct ParseOptions {
    /// FUSE_SETXATTR_EXT was negotiated: SETXATTR carries the 16-byte
    /// `fuse_setxattr_in` instead of the 8-byte compat one.
    pub setxattr_ext: bool,
}

/// Decodes the `fuse_in_header` at the start of `bytes`, checking `len`
/// against `bytes.len()` (`/dev/fuse` delivers exactly one request per read).
pub fn parse_header(bytes: &[u8]) -> Result<InHeader, ParseError> {
    let h = fuse_in_header::read_from(bytes).ok_or(ParseError::BadHeader)?;
    if (h.len as usize) != bytes.len() || (h.len as usize) < std::mem::size_of::<fuse_in_header>() {
        return Err(ParseError::BadHeader);
    }
    Ok(h)
}

impl<'a> Request<'a> {
    /// Decodes a contiguous request (`/dev/fuse`): header, then arguments.
    pub fn parse(bytes: &'a [u8], opts: ParseOptions) -> Result<Request<'a>, ParseError> {
        let header = parse_header(bytes)?;
        let args = &bytes[std::mem::size_of::<fuse_in_header>()..];
        // Extensions (security context, supplementary groups) follow the
        // arguments; strip them so trailing-name parsing is not confused.
        let ext = header.total_extlen as usize * 8;
        if ext > args.len() {
            return Err(ParseError::Malformed);
        }
        let args = &args[..args.len() - ext];
        let op = Operation::parse(header.opcode, Args::contiguous(args), opts)?;
        Ok(Request { header, op })
    }
}

impl<'a> Operation<'a> {
    /// Decodes the arguments of a request with opcode `opcode`.
    pub fn parse(opcode: u32, args: Args<'a>, opts: ParseOptions) -> Result<Operation<'a>, ParseError> {
        use Operation as O;
        let op = match opcode {
            FUSE_LOOKUP => O::Lookup { name: take_name(args.fixed(0)?.1)?.0 },
            FUSE_FORGET => O::Forget { nlookup: args.pod::<fuse_forget_in>()?.0.nlookup },
            FUSE_BATCH_FORGET => {
                let (arg, rest) = args.pod::<fuse_batch_forget_in>()?;
                let n = (arg.count as usize)
                    .checked_mul(std::mem::size_of::<fuse_forget_one>())
                    .ok_or(ParseError::Malformed)?;
                if rest.len() < n {
                    return Err(ParseError::Malformed);
                }
                O::BatchForget { items: ForgetIter { bytes: &rest[..n] } }
            }
            FUSE_GETATTR => O::GetAttr { arg: args.pod()?.0 },
            FUSE_SETATTR => O::SetAttr { arg: args.pod()?.0 },
            FUSE_READLINK => O::ReadLink,
            FUSE_SYMLINK => {
                let (name, rest) = take_name(args.fixed(0)?.1)?;
                let (target, _) = take_name(rest)?;
                O::Symlink { name, target }
            }
            FUSE_MKNOD => {
                let (arg, rest) = args.pod::<fuse_mknod_in>()?;
                O::MkNod { arg, name: take_name(rest)?.0 }
            }
            FUSE_MKDIR => {
                let (arg, rest) = args.pod::<fuse_mkdir_in>()?;
                O::MkDir { arg, name: take_name(rest)?.0 }
            }
            FUSE_UNLINK => O::Unlink { name: take_name(args.fixed(0)?.1)?.0 },
            FUSE_RMDIR => O::RmDir { name: take_name(args.fixed(0)?.1)?.0 },
            FUSE_RENAME => {
                let (arg, rest) = args.pod::<fuse_rename_in>()?;
                let (name, rest) = take_name(rest)?;
                let (newname, _) = take_name(rest)?;
                O::Rename { newdir: arg.newdir, flags: 0, name, newname }
            }
            FUSE_RENAME2 => {
                let (arg, rest) = args.pod::<fuse_rename2_in>()?;
                let (name, rest) = take_name(rest)?;
                let (newname, _) = take_name(rest)?;
                O::Rename { newdir: arg.newdir, flags: arg.flags, name, newname }
            }
            FUSE_LINK => {
                let (arg, rest) = args.pod::<fuse_link_in>()?;
                O::Link { oldnodeid: arg.oldnodeid, newname: take_name(rest)?.0 }
            }
            FUSE_OPEN => O::Open { arg: args.pod()?.0 },
            FUSE_READ => O::Read { arg: args.pod()?.0 },
            FUSE_WRITE => {
                let (arg, rest) = args.pod::<fuse_write_in>()?;
                let data = rest.get(..arg.size as usize).ok_or(ParseError::Malformed)?;
                O::Write { arg, data }
            }
            FUSE_STATFS => O::StatFs,
            FUSE_RELEASE => O::Release { arg: args.pod()?.0 },
            FUSE_FSYNC => O::Fsync { arg: args.pod()?.0 },
            FUSE_SETXATTR => {
                let n = if opts.setxattr_ext {
                    std::mem::size_of::<fuse_setxattr_in>()
                } else {
                    FUSE_COMPAT_SETXATTR_IN_SIZE
                };
                let (head, rest) = args.fixed(n)?;
                let mut buf = [0u8; std::mem::size_of::<fuse_setxattr_in>()];
                buf[..n].copy_from_slice(head);
                let arg = fuse_setxattr_in::read_from(&buf).ok_or(ParseError::Malformed)?;
                let (name, rest) = take_name(rest)?;
                let value = rest.get(..arg.size as usize).ok_or(ParseError::Malformed)?;
                O::SetXattr { size: arg.size, flags: arg.flags, setxattr_flags: arg.setxattr_flags, name, value }
            }
            FUSE_GETXATTR => {
                let (arg, rest) = args.pod::<fuse_getxattr_in>()?;
                O::GetXattr { size: arg.size, name: take_name(rest)?.0 }
            }
            FUSE_LISTXATTR => O::ListXattr { size: args.pod::<fuse_getxattr_in>()?.0.size },
            FUSE_REMOVEXATTR => O::RemoveXattr { name: take_name(args.fixed(0)?.1)?.0 },
            FUSE_FLUSH => O::Flush { arg: args.pod()?.0 },
            // fuse_init_in has grown over time (16 bytes before 7.36, 64 since).
            FUSE_INIT => O::Init { arg: fuse_init_in::parse(args.first).ok_or(ParseError::Malformed)? },
            FUSE_OPENDIR => O::OpenDir { arg: args.pod()?.0 },
            FUSE_READDIR => O::ReadDir { arg: args.pod()?.0 },
            FUSE_RELEASEDIR => O::ReleaseDir { arg: args.pod()?.0 },
            FUSE_FSYNCDIR => O::FsyncDir { arg: args.pod()?.0 },
            FUSE_ACCESS => O::Access { mask: args.pod::<fuse_access_in>()?.0.mask },
            FUSE_CREATE => {
                let (arg, rest) = args.pod::<fuse_create_in>()?;
                O::Create { arg, name: take_name(rest)?.0 }
            }
            FUSE_TMPFILE => {
                let (arg, rest) = args.pod::<fuse_create_in>()?;
                O::Tmpfile { arg, name: take_name(rest)?.0 }
            }
            FUSE_INTERRUPT => O::Interrupt { unique: args.pod::<fuse_interrupt_in>()?.0.unique },
            FUSE_DESTROY => O::Destroy,
            FUSE_FALLOCATE => O::Fallocate { arg: args.pod()?.0 },
            FUSE_READDIRPLUS => O::ReadDirPlus { arg: args.pod()?.0 },
            FUSE_LSEEK => O::Lseek { arg: args.pod()?.0 },
            FUSE_COPY_FILE_RANGE => O::CopyFileRange { arg: args.pod()?.0 },
            FUSE_COPY_FILE_RANGE_64 => O::CopyFileRange64 { arg: args.pod()?.0 },
            FUSE_STATX => O::Statx { arg: args.pod()?.0 },
            FUSE_IOCTL => {
                let (arg, rest) = args.pod::<fuse_ioctl_in>()?;
                let data = rest.get(..arg.in_size as usize).ok_or(ParseError::Malformed)?;
                O::Ioctl { arg, data }
            }
            abi::FUSE_NOTIFY_REPLY => O::NotifyReply,
            other => O::Unsupported { opcode: other },
        };
        Ok(op)
    }

    /// False for the requests the kernel expects no reply to
    /// (FORGET, BATCH_FORGET, INTERRUPT, NOTIFY_REPLY).
    pub fn needs_reply(&self) -> bool {
        !matches!(
            self,
            Operation::Forget { .. } | Operation::BatchForget { .. } | Operation::Interrupt { .. } | Operation::NotifyReply
        )
    }
}

/// True for the opcodes the kernel expects no reply to, decided from the
/// opcode alone (used when the arguments could not be decoded).
pub fn opcode_needs_reply(opcode: u32) -> bool {
    !matches!(opcode, FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT | abi::FUSE_NOTIFY_REPLY)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request with header `opcode` and argument bytes `args`.
    pub(crate) fn req(opcode: u32, args: &[u8]) -> Vec<u8> {
        let h = fuse_in_header {
            len: (40 + args.len()) as u32,
            opcode,
            unique: 42,
            nodeid: 1,
            uid: 0,
            gid: 0,
            pid: 1,
            total_extlen: 0,
            padding: 0,
        };
        let mut v = h.as_bytes().to_vec();
        v.extend_from_slice(args);
        v
    }

    fn parse(bytes: &[u8]) -> Result<Operation<'_>, ParseError> {
        Request::parse(bytes, ParseOptions::default()).map(|r| r.op)
    }

    #[test]
    fn short_or_inconsistent_headers_are_rejected() {
        assert_eq!(parse(&[]).unwrap_err(), ParseError::BadHeader);
        assert_eq!(parse(&[0u8; 39]).unwrap_err(), ParseError::BadHeader);
        let mut r = req(FUSE_GETATTR, &[0u8; 16]);
        r.truncate(50); // len says 56
        assert_eq!(parse(&r).unwrap_err(), ParseError::BadHeader);
        let mut r = req(FUSE_STATFS, &[]);
        r[0..4].copy_from_slice(&8u32.to_ne_bytes()); // len < header size
        r.truncate(8);
        assert_eq!(parse(&r).unwrap_err(), ParseError::BadHeader);
    }

    #[test]
    fn names_and_payloads_are_bounds_checked() {
        assert!(matches!(parse(&req(FUSE_LOOKUP, b"abc\0")).unwrap(), Operation::Lookup { name } if name == "abc"));
        assert_eq!(parse(&req(FUSE_LOOKUP, b"abc")).unwrap_err(), ParseError::Malformed, "no NUL");
        assert_eq!(parse(&req(FUSE_SYMLINK, b"a\0target")).unwrap_err(), ParseError::Malformed);
        let mut rename = fuse_rename2_in { newdir: 5, flags: 1, padding: 0 }.as_bytes().to_vec();
        rename.extend_from_slice(b"old\0new\0");
        match parse(&req(FUSE_RENAME2, &rename)).unwrap() {
            Operation::Rename { newdir: 5, flags: 1, name, newname } => assert_eq!((name.as_bytes(), newname.as_bytes()), (&b"old"[..], &b"new"[..])),
            other => panic!("{other:?}"),
        }
        // WRITE whose size points past the end
        let mut w = fuse_write_in { size: 100, ..Default::default() }.as_bytes().to_vec();
        w.extend_from_slice(&[1u8; 99]);
        assert_eq!(parse(&req(FUSE_WRITE, &w)).unwrap_err(), ParseError::Malformed);
        w.push(1);
        assert!(matches!(parse(&req(FUSE_WRITE, &w)).unwrap(), Operation::Write { data, .. } if data.len() == 100));
        // BATCH_FORGET with an absurd count
        let mut b = fuse_batch_forget_in { count: u32::MAX, dummy: 0 }.as_bytes().to_vec();
        b.extend_from_slice(fuse_forget_one { nodeid: 2, nlookup: 3 }.as_bytes());
        assert_eq!(parse(&req(FUSE_BATCH_FORGET, &b)).unwrap_err(), ParseError::Malformed);
        b[..4].copy_from_slice(&1u32.to_ne_bytes());
        match parse(&req(FUSE_BATCH_FORGET, &b)).unwrap() {
            Operation::BatchForget { items } => assert_eq!(items.collect::<Vec<_>>(), [(2, 3)]),
            other => panic!("{other:?}"),
        }
        // SETXATTR value past the end, compat (8-byte) and EXT (16-byte) layouts
        let mut x = fuse_setxattr_in { size: 4, flags: 1, setxattr_flags: 0, padding: 0 }.as_bytes()[..8].to_vec();
        x.extend_from_slice(b"user.a\0abc");
        assert_eq!(parse(&req(FUSE_SETXATTR, &x)).unwrap_err(), ParseError::Malformed);
        x.push(b'd');
        assert!(matches!(parse(&req(FUSE_SETXATTR, &x)).unwrap(), Operation::SetXattr { value: b"abcd", flags: 1, .. }));
        let mut x2 = fuse_setxattr_in { size: 2, flags: 0, setxattr_flags: 1, padding: 0 }.as_bytes().to_vec();
        x2.extend_from_slice(b"user.b\0hi");
        let r = req(FUSE_SETXATTR, &x2);
        let op = Request::parse(&r, ParseOptions { setxattr_ext: true }).unwrap().op;
        assert!(matches!(op, Operation::SetXattr { value: b"hi", setxattr_flags: 1, .. }), "{op:?}");
        // extensions beyond the request
        let mut r = req(FUSE_STATFS, &[]);
        r[36..38].copy_from_slice(&1u16.to_ne_bytes());
        assert_eq!(parse(&r).unwrap_err(), ParseError::Malformed);
    }

    #[test]
    fn every_opcode_with_every_truncation_never_panics() {
        let body: Vec<u8> = (0..200u32).map(|i| if i % 13 == 0 { 0 } else { (i * 7) as u8 | 1 }).collect();
        let zeros = vec![0u8; 200];
        for opcode in (0..60).chain([CUSE_INIT, 4095, u32::MAX]) {
            for src in [&body, &zeros] {
                for n in 0..=src.len() {
                    let r = req(opcode, &src[..n]);
                    let _ = parse(&r);
                    let _ = Operation::parse(opcode, Args::split(&src[..n.min(40)], &src[n.min(40)..n]), ParseOptions { setxattr_ext: true });
                }
            }
        }
    }

    #[test]
    fn tmpfile_decodes_like_create() {
        let mut t = fuse_create_in { flags: libc::O_TMPFILE as u32 | 2, mode: 0o100600, umask: 0o22, open_flags: 0 }.as_bytes().to_vec();
        t.extend_from_slice(b"/\0");
        match parse(&req(FUSE_TMPFILE, &t)).unwrap() {
            Operation::Tmpfile { arg, name } => assert_eq!((arg.mode, arg.umask, name.as_bytes()), (0o100600, 0o22, &b"/"[..])),
            other => panic!("{other:?}"),
        }
        assert_eq!(parse(&req(FUSE_TMPFILE, &t[..16])).unwrap_err(), ParseError::Malformed, "no name");
    }

    #[test]
    fn split_args_match_contiguous() {
        let mut c = fuse_mkdir_in { mode: 0o755, umask: 0o22 }.as_bytes().to_vec();
        c.extend_from_slice(b"dir\0");
        let a = Operation::parse(FUSE_MKDIR, Args::contiguous(&c), ParseOptions::default()).unwrap();
        let b = Operation::parse(FUSE_MKDIR, Args::split(&c[..8], &c[8..]), ParseOptions::default()).unwrap();
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        // LOOKUP has a zero-sized first argument: the name is in the payload.
        let l = Operation::parse(FUSE_LOOKUP, Args::split(&[], b"x\0"), ParseOptions::default()).unwrap();
        assert!(matches!(l, Operation::Lookup { name } if name == "x"));
    }

    #[test]
    fn init_accepts_old_and_new_layouts() {
        let new = fuse_init_in { major: 7, minor: 45, max_readahead: 1 << 17, flags: 1 << 30, flags2: 1 << 5, unused: [0; 11] };
        assert!(matches!(parse(&req(FUSE_INIT, new.as_bytes())).unwrap(), Operation::Init { arg } if arg == new));
        let old = &new.as_bytes()[..16];
        assert!(matches!(parse(&req(FUSE_INIT, old)).unwrap(), Operation::Init { arg } if arg.flags2 == 0 && arg.minor == 45));
        assert_eq!(parse(&req(FUSE_INIT, &old[..12])).unwrap_err(), ParseError::Malformed);
    }
}
