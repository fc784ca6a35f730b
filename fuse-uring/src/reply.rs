//! The reply encoder: a reusable buffer holding `fuse_out_header` + body.
//!
//! [`ReplyBuf`] keeps the 16-byte out-header and the body in one
//! allocation, header first, so the `/dev/fuse` transport sends
//! [`ReplyBuf::as_bytes`] with a single `write(2)`. A FUSE-over-io_uring
//! transport instead copies [`ReplyBuf::header`] into the ring entry's
//! `in_out` area and [`ReplyBuf::body`] into its payload buffer (setting
//! `payload_sz` to `body().len()`). The buffer keeps its capacity between
//! requests: call [`ReplyBuf::reset`] (the dispatcher does) and reuse it.
//!
//! Built on [`abi`](crate::abi) and the [`Filesystem`](crate::Filesystem)
//! trait's value types (it encodes [`Attr`](crate::Attr),
//! [`Entry`] and directory entries, and its writers are the
//! trait's [`DirSink`]/[`DirPlusSink`]); it calls no filesystem method and
//! does not know which transport sends the bytes.

use crate::abi::*;
use crate::fs::{DirEntry, DirPlusSink, DirSink, Entry};

const OUT_HEADER: usize = std::mem::size_of::<fuse_out_header>();

/// A reply under construction: `fuse_out_header` followed by the body.
#[derive(Debug)]
pub struct ReplyBuf {
    buf: Vec<u8>,
}

impl Default for ReplyBuf {
    fn default() -> Self {
        Self::with_capacity(4096)
    }
}

impl ReplyBuf {
    /// A reply buffer with room for `capacity` body bytes before it grows.
    pub fn with_capacity(capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(OUT_HEADER + capacity);
        buf.resize(OUT_HEADER, 0);
        ReplyBuf { buf }
    }

    /// Starts a new, empty, successful reply to request `unique`.
    pub fn reset(&mut self, unique: u64) {
        self.buf.truncate(OUT_HEADER);
        self.write_header(0, unique);
    }

    fn write_header(&mut self, error: i32, unique: u64) {
        let h = fuse_out_header { len: 0, error, unique };
        self.buf[..OUT_HEADER].copy_from_slice(h.as_bytes());
    }

    /// Turns the reply into an error reply: empty body, `error = -errno`.
    /// An errno outside 1..=4095 is sent as EIO (the kernel rejects others).
    pub fn set_error(&mut self, errno: i32) {
        let errno = if (1..4096).contains(&errno) { errno } else { libc::EIO };
        let unique = self.header().unique;
        self.buf.truncate(OUT_HEADER);
        self.write_header(-errno, unique);
    }

    /// Appends raw bytes to the body.
    #[inline]
    pub fn push_bytes(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Appends a wire struct to the body.
    #[inline]
    pub fn push<T: Pod>(&mut self, value: &T) {
        self.buf.extend_from_slice(value.as_bytes());
    }

    /// Appends `n` zero bytes to the body.
    #[inline]
    pub fn push_zeros(&mut self, n: usize) {
        self.buf.resize(self.buf.len() + n, 0);
    }

    /// The out-header with `len` = header + body length.
    pub fn header(&self) -> fuse_out_header {
        let mut h = fuse_out_header::read_from(&self.buf).expect("header present");
        h.len = self.buf.len() as u32;
        h
    }

    /// The body (everything after the out-header).
    pub fn body(&self) -> &[u8] {
        &self.buf[OUT_HEADER..]
    }

    /// Length of the body in bytes.
    pub fn body_len(&self) -> usize {
        self.buf.len() - OUT_HEADER
    }

    /// The whole message, header (with `len` filled in) then body, ready
    /// for one `write(2)` on `/dev/fuse`.
    pub fn as_bytes(&mut self) -> &[u8] {
        let len = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&len.to_ne_bytes());
        &self.buf
    }

    /// Truncates the body to `len` bytes (no-op if shorter).
    pub fn truncate_body(&mut self, len: usize) {
        self.buf.truncate(OUT_HEADER + len);
    }
}

fn secs_nsecs(d: std::time::Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

/// `Attr` → `fuse_attr` (times are sent as the kernel's u64, two's complement).
pub fn encode_attr(a: &crate::fs::Attr) -> fuse_attr {
    fuse_attr {
        ino: a.ino,
        size: a.size,
        blocks: a.blocks,
        atime: a.atime as u64,
        mtime: a.mtime as u64,
        ctime: a.ctime as u64,
        atimensec: a.atime_nsec,
        mtimensec: a.mtime_nsec,
        ctimensec: a.ctime_nsec,
        mode: a.mode,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

/// `StatxReply` → `fuse_statx_out`: the basic fields always, the birth time
/// when known (`mask` says which).
pub fn encode_statx_out(s: &crate::fs::StatxReply) -> fuse_statx_out {
    let a = &s.attr;
    let t = |sec: i64, nsec: u32| fuse_sx_time { tv_sec: sec, tv_nsec: nsec, reserved: 0 };
    // `rdev` is in the kernel's new_encode_dev format.
    let (major, minor) = ((a.rdev & 0xfff00) >> 8, (a.rdev & 0xff) | ((a.rdev >> 12) & 0xfff00));
    let (v, vn) = secs_nsecs(s.timeout);
    fuse_statx_out {
        attr_valid: v,
        attr_valid_nsec: vn,
        flags: 0,
        spare: [0; 2],
        stat: fuse_statx {
            mask: STATX_BASIC_STATS | if s.btime.is_some() { STATX_BTIME } else { 0 },
            blksize: a.blksize,
            attributes: s.attributes,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            mode: a.mode as u16,
            spare0: 0,
            ino: a.ino,
            size: a.size,
            blocks: a.blocks,
            attributes_mask: STATX_ATTR_IMMUTABLE | STATX_ATTR_APPEND,
            atime: t(a.atime, a.atime_nsec),
            btime: s.btime.map(|(sec, nsec)| t(sec, nsec)).unwrap_or_default(),
            ctime: t(a.ctime, a.ctime_nsec),
            mtime: t(a.mtime, a.mtime_nsec),
            rdev_major: major,
            rdev_minor: minor,
            dev_major: 0,
            dev_minor: 0,
            spare2: [0; 14],
        },
    }
}

/// `Entry` → `fuse_entry_out`. `attr.ino == 0` gives nodeid 0: a negative
/// entry the kernel caches for `entry_timeout`.
pub fn encode_entry(e: &Entry) -> fuse_entry_out {
    let (ev, evn) = secs_nsecs(e.entry_timeout);
    let (av, avn) = secs_nsecs(e.attr_timeout);
    fuse_entry_out {
        nodeid: e.attr.ino,
        generation: e.generation,
        entry_valid: ev,
        attr_valid: av,
        entry_valid_nsec: evn,
        attr_valid_nsec: avn,
        attr: encode_attr(&e.attr),
    }
}

/// `AttrReply` → `fuse_attr_out`.
pub fn encode_attr_out(a: &crate::fs::AttrReply) -> fuse_attr_out {
    let (v, vn) = secs_nsecs(a.timeout);
    fuse_attr_out { attr_valid: v, attr_valid_nsec: vn, dummy: 0, attr: encode_attr(&a.attr) }
}

/// A [`DirSink`] writing `fuse_dirent` records into a reply body, never
/// letting the body exceed `limit` bytes (the READDIR request's `size`).
/// Each record is `FUSE_DIRENT_SIZE(namelen)` bytes: header, name, zero
/// padding to a multiple of 8.
pub struct DirentWriter<'b> {
    reply: &'b mut ReplyBuf,
    limit: usize,
}

impl<'b> DirentWriter<'b> {
    /// Appends entries to `reply`'s body, up to `limit` body bytes in total.
    pub fn new(reply: &'b mut ReplyBuf, limit: usize) -> Self {
        DirentWriter { reply, limit }
    }
}

impl DirSink for DirentWriter<'_> {
    fn push(&mut self, entry: &DirEntry<'_>) -> bool {
        let size = fuse_dirent_size(entry.name.len());
        if self.reply.body_len() + size > self.limit {
            return false;
        }
        let d = fuse_dirent { ino: entry.ino, off: entry.offset, namelen: entry.name.len() as u32, r#type: entry.kind };
        self.reply.push(&d);
        self.reply.push_bytes(entry.name);
        self.reply.push_zeros(size - FUSE_NAME_OFFSET - entry.name.len());
        true
    }
}

/// A [`DirPlusSink`] writing `fuse_direntplus` records (entry_out, dirent,
/// name, zero padding to 8) into a reply body, up to `limit` body bytes.
pub struct DirentPlusWriter<'b> {
    reply: &'b mut ReplyBuf,
    limit: usize,
}

impl<'b> DirentPlusWriter<'b> {
    /// Appends entries to `reply`'s body, up to `limit` body bytes in total.
    pub fn new(reply: &'b mut ReplyBuf, limit: usize) -> Self {
        DirentPlusWriter { reply, limit }
    }
}

impl DirPlusSink for DirentPlusWriter<'_> {
    fn push(&mut self, entry: &DirEntry<'_>, attr: &Entry) -> bool {
        let size = fuse_direntplus_size(entry.name.len());
        if self.reply.body_len() + size > self.limit {
            return false;
        }
        let d = fuse_direntplus {
            entry_out: encode_entry(attr),
            dirent: fuse_dirent { ino: entry.ino, off: entry.offset, namelen: entry.name.len() as u32, r#type: entry.kind },
        };
        self.reply.push(&d);
        self.reply.push_bytes(entry.name);
        self.reply.push_zeros(size - FUSE_NAME_OFFSET_DIRENTPLUS - entry.name.len());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::Attr;

    #[test]
    fn error_reply_has_empty_body_and_negative_errno() {
        let mut r = ReplyBuf::default();
        r.reset(77);
        r.push_bytes(b"junk");
        r.set_error(libc::ENOENT);
        let h = r.header();
        assert_eq!((h.len, h.error, h.unique), (16, -libc::ENOENT, 77));
        r.set_error(0);
        assert_eq!(r.header().error, -libc::EIO);
        assert_eq!(r.as_bytes().len(), 16);
    }

    #[test]
    fn dirents_are_8_byte_aligned_and_respect_limit() {
        let mut r = ReplyBuf::default();
        r.reset(1);
        // 24 + 1 → 32; 24 + 8 → 32; 24 + 9 → 40.
        let limit = 32 + 32 + 39;
        let mut w = DirentWriter::new(&mut r, limit);
        assert!(w.push(&DirEntry { ino: 5, offset: 1, kind: 8, name: b"a" }));
        assert!(w.push(&DirEntry { ino: 6, offset: 2, kind: 4, name: b"12345678" }));
        assert!(!w.push(&DirEntry { ino: 7, offset: 3, kind: 8, name: b"123456789" }), "40 bytes do not fit in 39");
        let body = r.body().to_vec();
        assert!(body.len() <= limit);
        assert_eq!(body.len() % 8, 0);
        let d0 = fuse_dirent::read_from(&body).unwrap();
        assert_eq!((d0.ino, d0.off, d0.namelen, d0.r#type), (5, 1, 1, 8));
        assert_eq!(&body[24..25], b"a");
        assert!(body[25..32].iter().all(|&b| b == 0), "padding is zeroed");
        let d1 = fuse_dirent::read_from(&body[32..]).unwrap();
        assert_eq!((d1.ino, d1.namelen), (6, 8));
        assert_eq!(&body[56..64], b"12345678");
    }

    #[test]
    fn direntplus_layout() {
        let mut r = ReplyBuf::default();
        r.reset(1);
        let e = Entry { attr: Attr { ino: 9, mode: libc::S_IFREG | 0o644, size: 3, ..Default::default() }, ..Default::default() };
        let mut w = DirentPlusWriter::new(&mut r, 4096);
        assert!(w.push(&DirEntry { ino: 9, offset: 1, kind: 8, name: b"abc" }, &e));
        let dot = Entry::default();
        assert!(w.push(&DirEntry { ino: 1, offset: 2, kind: 4, name: b"." }, &dot));
        let body = r.body();
        assert_eq!(body.len(), fuse_direntplus_size(3) + fuse_direntplus_size(1));
        assert_eq!(fuse_direntplus_size(3), 160);
        let p = fuse_direntplus::read_from(body).unwrap();
        assert_eq!(p.entry_out.nodeid, 9);
        assert_eq!(p.entry_out.attr.size, 3);
        assert_eq!(p.dirent.namelen, 3);
        assert_eq!(&body[152..155], b"abc");
        let p2 = fuse_direntplus::read_from(&body[160..]).unwrap();
        assert_eq!((p2.entry_out.nodeid, p2.dirent.ino), (0, 1));
        // Full buffer: nothing is added past the limit.
        let mut r2 = ReplyBuf::default();
        r2.reset(2);
        let mut w2 = DirentPlusWriter::new(&mut r2, 159);
        assert!(!w2.push(&DirEntry { ino: 9, offset: 1, kind: 8, name: b"abc" }, &e));
        assert_eq!(r2.body_len(), 0);
    }
}
