//! Reading a pack file record by record (pack format v1, docs/FORMATS.md):
//! [`scan_pack`] for salvage, fsck and compaction, and the header check.
//!
//! Owns: what a valid record is (its bytes hash to its hash) and where a
//! scan stops (the first short or invalid record: a torn tail). Must not
//! touch: the index in redb.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::{HEADER_LEN, MAGIC, MAX_RECORD, RECORD_HEADER, VERSION};

/// The 16-byte header of a pack file: magic, format version, reserved.
pub(crate) fn header() -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// Reads every valid record of the pack file at `path`, in order, with a
/// buffer of at most one record ([`MAX_RECORD`] bytes) plus a 1 MiB read
/// buffer, calling `f(offset of the bytes, hash, bytes)` for each; `f`
/// returns false to stop early. Returns the valid length (header plus the
/// records before the first short or invalid one, or before the stop).
/// Errors: I/O errors opening or reading; a file whose header is not pack
/// format v1 is `InvalidData`.
pub(crate) fn scan_pack_until(path: &Path, f: impl FnMut(u64, &[u8; 32], &[u8]) -> bool) -> std::io::Result<u64> {
    scan_pack_from(path, HEADER_LEN, f)
}

/// [`scan_pack_until`] from byte `start`, which must be where a record
/// begins (the header's end, or the end of a record an index row
/// recorded): the header is still checked, the records before `start` are
/// neither read nor hashed. Returns the valid length (at least `start`
/// when the file is that long; the file's length when it is shorter).
/// Errors: those of [`scan_pack_until`].
pub(crate) fn scan_pack_from(path: &Path, start: u64, mut f: impl FnMut(u64, &[u8; 32], &[u8]) -> bool) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut r = BufReader::with_capacity(if len.saturating_sub(start) < (1 << 20) { 64 << 10 } else { 1 << 20 }, file);
    let mut h = [0u8; HEADER_LEN as usize];
    if read_full(&mut r, &mut h)? < h.len() || h[..12] != header()[..12] {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: not a ringfs pack file (format v1)", path.display())));
    }
    let mut pos = HEADER_LEN;
    if start > HEADER_LEN {
        if start >= len {
            return Ok(len);
        }
        r.seek(SeekFrom::Start(start))?;
        pos = start;
    }
    let mut rec = [0u8; RECORD_HEADER as usize];
    let mut buf = Vec::new();
    loop {
        if read_full(&mut r, &mut rec)? < rec.len() {
            return Ok(pos);
        }
        let hash: [u8; 32] = rec[..32].try_into().expect("32 bytes");
        let len = u32::from_le_bytes(rec[32..36].try_into().expect("4 bytes"));
        if len as u64 > MAX_RECORD {
            return Ok(pos);
        }
        buf.resize(len as usize, 0);
        if read_full(&mut r, &mut buf)? < buf.len() || blake3::hash(&buf).as_bytes() != &hash {
            return Ok(pos);
        }
        if !f(pos + RECORD_HEADER, &hash, &buf) {
            return Ok(pos);
        }
        pos += RECORD_HEADER + len as u64;
    }
}

/// Pack format v1 salvage scan (docs/FORMATS.md): calls `f(offset of the
/// bytes, BLAKE3 hash, bytes)` for each valid record of the pack file at
/// `path`, reading with a bounded buffer (one record, at most 2 MiB, plus
/// 1 MiB), and returns the valid length in bytes: the header and every
/// record before the first short or invalid one. Errors: opening or
/// reading the file; `InvalidData` if its header is not `RFSPACK1` v1.
pub fn scan_pack(path: &Path, mut f: impl FnMut(u64, &[u8; 32], &[u8])) -> std::io::Result<u64> {
    scan_pack_until(path, |o, h, b| {
        f(o, h, b);
        true
    })
}

/// Reads until `buf` is full or EOF; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
