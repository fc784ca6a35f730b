//! A ring entry's memory and one request's trip through it.
//!
//! Owns the buffers a queue registers with the kernel ([`QueueMem`]: per
//! entry a 288-byte header buffer — `in_out`, `op_in`,
//! `fuse_uring_ent_in_out` — and a payload buffer), their allocation and
//! release, and [`process_entry`]: read the request where the kernel put it,
//! hand it to the [`Handler`] (the session's dispatcher) and write the reply
//! back (out-header in `in_out`, body in the payload, `payload_sz`).
//!
//! Knows nothing of io_uring submissions and completions, queues or threads:
//! who owns an entry when is the ring threads' protocol (see "Entry
//! ownership" in the [ring module doc](super)); every accessor here is
//! `unsafe` and asks its caller to own the entry.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::abi::*;
use crate::dispatch::Dispatcher;
use crate::fs::Filesystem;
use crate::reply::ReplyBuf;

/// Offset of `op_in` in the header buffer.
pub(super) const OP_IN: usize = FUSE_URING_IN_OUT_HEADER_SZ;
/// Offset of `fuse_uring_ent_in_out` in the header buffer.
pub(super) const ENT_IN_OUT: usize = OP_IN + FUSE_URING_OP_IN_OUT_SZ;
/// Size of `struct fuse_uring_req_header` (288 bytes).
pub const HEADER_SIZE: usize = ENT_IN_OUT + std::mem::size_of::<fuse_uring_ent_in_out>();

/// The READ/WRITE size from a ring entry's `op_in`, else 0.
pub(super) fn io_size(opcode: u32, op_in: &[u8]) -> u32 {
    match opcode {
        FUSE_READ => fuse_read_in::read_from(op_in).map_or(0, |a| a.size),
        FUSE_WRITE => fuse_write_in::read_from(op_in).map_or(0, |a| a.size),
        _ => 0,
    }
}

struct EntryMem {
    hdr: *mut u8,
    payload: *mut u8,
}

/// The header and payload buffers of one queue's entries (see "Entry
/// ownership" in the [ring module doc](super)). Headers on the heap,
/// payloads in anonymous mappings (zeroed by the kernel, untouched pages
/// stay unbacked); never moved.
pub(crate) struct QueueMem {
    entries: Vec<EntryMem>,
    payload_len: usize,
    /// `[header, payload]` per entry, as REGISTER reads them.
    pub(super) iov: Vec<[libc::iovec; 2]>,
    /// Set once the kernel has released every entry: only then is freeing safe.
    pub(super) drained: AtomicBool,
}

// SAFETY: the raw pointers are owned heap buffers; access follows the
// single-owner protocol of the ring module doc.
unsafe impl Send for QueueMem {}
// SAFETY: as above.
unsafe impl Sync for QueueMem {}

fn hdr_layout() -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(HEADER_SIZE, 64).expect("layout")
}

/// A payload buffer of `len` bytes: an anonymous private mapping, so it is
/// page-aligned and zero-filled by the kernel on first touch. (The heap's
/// zeroed allocation with page alignment would memset every page up front:
/// 2 queues × depth × ~1 MiB at each mount.) Errors: mmap(2)'s (ENOMEM).
fn map_payload(len: usize) -> io::Result<*mut u8> {
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}

impl QueueMem {
    pub(super) fn new(depth: usize, payload_len: usize) -> io::Result<QueueMem> {
        let mut m = QueueMem { entries: Vec::new(), payload_len, iov: Vec::new(), drained: AtomicBool::new(true) };
        for _ in 0..depth {
            // SAFETY: non-zero-sized layouts.
            let hdr = unsafe { std::alloc::alloc_zeroed(hdr_layout()) };
            if hdr.is_null() {
                return Err(io::Error::from_raw_os_error(libc::ENOMEM));
            }
            let payload = match map_payload(payload_len) {
                Ok(p) => p,
                Err(e) => {
                    // SAFETY: allocated just above with this layout, not yet recorded.
                    unsafe { std::alloc::dealloc(hdr, hdr_layout()) };
                    return Err(e);
                }
            };
            m.entries.push(EntryMem { hdr, payload });
            m.iov.push([
                libc::iovec { iov_base: hdr as *mut _, iov_len: HEADER_SIZE },
                libc::iovec { iov_base: payload as *mut _, iov_len: payload_len },
            ]);
        }
        Ok(m)
    }

    /// The header buffer of entry `i`.
    ///
    /// # Safety
    /// The caller owns entry `i` (module doc) for the lifetime of the slice.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn hdr(&self, i: usize) -> &mut [u8] {
        std::slice::from_raw_parts_mut(self.entries[i].hdr, HEADER_SIZE)
    }

    /// The payload buffer of entry `i`.
    ///
    /// # Safety
    /// As for [`Self::hdr`].
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn payload(&self, i: usize) -> &mut [u8] {
        std::slice::from_raw_parts_mut(self.entries[i].payload, self.payload_len)
    }
}

impl Drop for QueueMem {
    fn drop(&mut self) {
        if !self.drained.load(Ordering::Acquire) {
            // The kernel may still own entries: leaking is the safe choice.
            tracing::debug!(entries = self.entries.len(), "ring buffers not drained; leaking them");
            return;
        }
        for e in &self.entries {
            // SAFETY: the header allocated in `new` with this layout, the payload
            // mapped there with this length; each freed once.
            unsafe {
                std::alloc::dealloc(e.hdr, hdr_layout());
                libc::munmap(e.payload as *mut libc::c_void, self.payload_len);
            }
        }
    }
}

/// What a ring thread serves requests with: the session's dispatcher
/// (type-erased, so the threads can start in `mount` before the filesystem
/// type is known) and the pool for slow requests.
pub(crate) trait Handler: Send + Sync {
    /// [`Dispatcher::dispatch_parts`].
    fn handle(&self, in_header: &[u8], op_in: &[u8], payload: &[u8], reply: &mut ReplyBuf) -> bool;
    /// [`Filesystem::is_slow`].
    fn is_slow(&self, opcode: u32, size: u32) -> bool;
}

impl<F: Filesystem> Handler for Dispatcher<F> {
    fn handle(&self, in_header: &[u8], op_in: &[u8], payload: &[u8], reply: &mut ReplyBuf) -> bool {
        self.dispatch_parts(in_header, op_in, payload, reply)
    }
    fn is_slow(&self, opcode: u32, size: u32) -> bool {
        self.filesystem().is_slow(opcode, size)
    }
}

/// # Safety
/// The caller owns entry `i`.
pub(super) unsafe fn ent_in_out(mem: &QueueMem, i: usize) -> fuse_uring_ent_in_out {
    fuse_uring_ent_in_out::read_from(&mem.hdr(i)[ENT_IN_OUT..]).expect("header buffer is 288 bytes")
}

/// Writes `reply` into entry `i`: out-header in `in_out`, all reply bytes in
/// the payload, `payload_sz`. A body larger than the payload becomes EIO.
///
/// # Safety
/// The caller owns entry `i`.
pub(super) unsafe fn put_reply(mem: &QueueMem, i: usize, reply: &mut ReplyBuf) {
    if reply.body_len() > mem.payload_len {
        tracing::error!(len = reply.body_len(), "reply larger than the ring payload; replying EIO");
        reply.set_error(libc::EIO);
    }
    let hdr = mem.hdr(i);
    hdr[..std::mem::size_of::<fuse_out_header>()].copy_from_slice(reply.header().as_bytes());
    mem.payload(i)[..reply.body_len()].copy_from_slice(reply.body());
    let mut meta = fuse_uring_ent_in_out::read_from(&hdr[ENT_IN_OUT..]).expect("288 bytes");
    meta.payload_sz = reply.body_len() as u32;
    hdr[ENT_IN_OUT..HEADER_SIZE].copy_from_slice(meta.as_bytes());
}

/// Dispatches the request held by entry `i` and writes the reply into the
/// entry. Shared by ring threads and pool jobs.
///
/// # Safety
/// The caller owns entry `i`.
pub(super) unsafe fn process_entry(mem: &QueueMem, i: usize, h: &dyn Handler, reply: &mut ReplyBuf) {
    let (send, unique) = {
        let hdr = mem.hdr(i);
        let meta = ent_in_out(mem, i);
        let payload = mem.payload(i);
        let n = (meta.payload_sz as usize).min(payload.len());
        let (in_out, rest) = hdr.split_at(OP_IN);
        let op_in = &rest[..FUSE_URING_OP_IN_OUT_SZ];
        let unique = fuse_in_header::read_from(in_out).map_or(meta.commit_id, |h| h.unique);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.handle(in_out, op_in, &payload[..n], reply)));
        let send = r.unwrap_or_else(|_| {
            tracing::error!(unique, "filesystem panicked; replying EIO");
            false
        });
        (send, unique)
    };
    if !send {
        // A ring entry is re-armed only by a commit, and requests without a
        // reply never come through the ring: answer EIO.
        reply.reset(unique);
        reply.set_error(libc::EIO);
    }
    put_reply(mem, i, reply);
    if reply.body_len() > 4 << 20 {
        *reply = ReplyBuf::with_capacity(64 * 1024);
    }
}
