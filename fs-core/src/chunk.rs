//! Content-defined chunking (gear hash, FastCDC-style normalized chunking).
//!
//! A cut point depends only on the 64 bytes before it, so an insertion or a
//! prepend moves the boundaries after it along with the data: only the
//! chunk(s) around the edit change. Sizes: [`MIN_CHUNK`] 2 KiB,
//! [`AVG_CHUNK`] ~8 KiB, [`MAX_CHUNK`] 64 KiB (small, so that a small edit
//! of a big file stores little: docs/DECISIONS.md D37), except for files of
//! [`LARGE_FILE`] (1 GiB) and more at hashing time, which are cut at
//! [`LARGE`]'s 128 KiB / ~512 KiB / 2 MiB (the sizes of stores made before
//! D37) so their chunk index and manifests stay small ([`params_for`]).
//! Either kind of chunk stays valid whatever the file's size later (a
//! manifest lists each chunk's offset and length); a file crossing the
//! threshold is simply cut again with the other sizes at its next hashing.
//!
//! Owns: where chunks are cut. Must not touch: hashing, storage, files
//! (it reads a stream it is given).

/// Smallest chunk, except the last one of a file.
pub const MIN_CHUNK: usize = 2 * 1024;
/// Target average chunk size.
pub const AVG_CHUNK: usize = 8 * 1024;
/// Largest chunk.
pub const MAX_CHUNK: usize = 64 * 1024;

/// Files this big or bigger (bytes, at hashing time) are cut with [`LARGE`].
pub const LARGE_FILE: u64 = 1 << 30;

/// One set of chunking parameters: sizes in bytes and the two cut masks.
/// Before the average size a cut needs log2(avg) + 2 zero bits (rarer),
/// after it log2(avg) − 2 (likelier): normalized chunking keeps sizes close
/// to the average.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Smallest chunk, except the last one of a file (≥ 64).
    pub min: usize,
    /// Where the stricter mask gives way to the looser one.
    pub avg: usize,
    /// Largest chunk.
    pub max: usize,
    mask_s: u64,
    mask_l: u64,
}

const fn mask(bits: u32) -> u64 {
    ((1u64 << bits) - 1) << (64 - bits)
}

/// Files below [`LARGE_FILE`]: 2 KiB / ~8 KiB / 64 KiB (masks of 15 and 11 bits).
pub const SMALL: Params = Params { min: MIN_CHUNK, avg: AVG_CHUNK, max: MAX_CHUNK, mask_s: mask(15), mask_l: mask(11) };
/// Files of [`LARGE_FILE`] and more: 128 KiB / ~512 KiB / 2 MiB (masks of
/// 21 and 17 bits), the cuts of stores made before D37.
pub const LARGE: Params = Params { min: 128 * 1024, avg: 512 * 1024, max: 2 * 1024 * 1024, mask_s: mask(21), mask_l: mask(17) };

/// The parameters for a file of `size` bytes (its size when hashed).
pub fn params_for(size: u64) -> &'static Params {
    if size >= LARGE_FILE {
        &LARGE
    } else {
        &SMALL
    }
}

const fn gear_table() -> [u64; 256] {
    // splitmix64 from a fixed seed: the table is part of the on-disk format.
    let mut t = [0u64; 256];
    let mut x: u64 = 0x7269_6e67_6673_2d31; // "ringfs-1"
    let mut i = 0;
    while i < 256 {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        t[i] = z ^ (z >> 31);
        i += 1;
    }
    t
}

static GEAR: [u64; 256] = gear_table();

/// Length of the first chunk of `data` with the [`SMALL`] parameters (see
/// [`cut_point_with`]).
pub fn cut_point(data: &[u8], eof: bool) -> usize {
    cut_point_with(&SMALL, data, eof)
}

/// Length of the first chunk of `data` cut with `p`. `eof` says whether
/// `data` ends the file; when it does not, `data` must hold at least
/// `p.max` bytes (or the answer may be a premature cut at the buffer end).
pub fn cut_point_with(p: &Params, data: &[u8], eof: bool) -> usize {
    let n = data.len();
    if n <= p.min {
        debug_assert!(eof || n == 0 || n >= p.max);
        return n;
    }
    let end = n.min(p.max);
    let mid = end.min(p.avg);
    let mut h: u64 = 0;
    // Warm the hash over the 64 bytes before the minimum so the first
    // candidate already sees a full window.
    for &b in &data[p.min - 64..p.min] {
        h = (h << 1).wrapping_add(GEAR[b as usize]);
    }
    let mut i = p.min;
    while i < mid {
        h = (h << 1).wrapping_add(GEAR[data[i] as usize]);
        i += 1;
        if h & p.mask_s == 0 {
            return i;
        }
    }
    while i < end {
        h = (h << 1).wrapping_add(GEAR[data[i] as usize]);
        i += 1;
        if h & p.mask_l == 0 {
            return i;
        }
    }
    let _ = eof;
    end
}

/// Splits a whole in-memory buffer into chunk lengths (the tests' oracle for
/// [`chunk_stream`]). The lengths sum to `data.len()`.
#[cfg(test)]
pub fn chunk_lengths(data: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < data.len() {
        let c = cut_point(&data[off..], true);
        out.push(c);
        off += c;
    }
    out
}

/// Cuts a whole in-memory buffer (a file's bytes, or one of its data
/// extents) into chunks: calls `f(offset, bytes)` for each in order, with no
/// copy and no buffer of its own (the cuts are those of [`chunk_stream`]).
pub fn chunk_slice<E>(data: &[u8], mut f: impl FnMut(u64, &[u8]) -> Result<(), E>) -> Result<(), E> {
    let mut off = 0;
    while off < data.len() {
        let c = cut_point(&data[off..], true);
        f(off as u64, &data[off..off + c])?;
        off += c;
    }
    Ok(())
}

/// Bytes [`chunk_stream_with`] buffers for `p`: many chunks (1 MiB for
/// [`SMALL`]), so that moving the unconsumed tail (< `p.max`) to the front
/// is rare; at least two of the largest (4 MiB for [`LARGE`]).
fn stream_buf(p: &Params) -> usize {
    (1usize << 20).max(2 * p.max)
}

/// [`chunk_stream_with`] with the [`SMALL`] parameters (the tests' shorthand).
#[cfg(test)]
pub fn chunk_stream<R: std::io::Read>(r: R, f: impl FnMut(u64, &[u8]) -> std::io::Result<()>) -> std::io::Result<u64> {
    chunk_stream_with(&SMALL, r, f)
}

/// Streams chunks cut with `p` out of a reader, keeping at most 1 MiB (or
/// two of `p`'s largest chunks) in memory. Calls `f(offset, bytes)` for
/// each chunk in order; returns the bytes read.
pub fn chunk_stream_with<R: std::io::Read>(
    p: &Params,
    mut r: R,
    mut f: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
) -> std::io::Result<u64> {
    let stream_buf = stream_buf(p);
    let mut buf: Vec<u8> = Vec::with_capacity(stream_buf);
    let mut start = 0usize; // consumed bytes at the front of buf
    let mut off: u64 = 0;
    let mut eof = false;
    loop {
        if !eof && buf.len() - start < p.max {
            buf.drain(..start);
            start = 0;
            let want = stream_buf;
            while buf.len() < want {
                let old = buf.len();
                buf.resize(want, 0);
                let n = loop {
                    match r.read(&mut buf[old..]) {
                        Ok(n) => break n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            buf.truncate(old);
                            return Err(e);
                        }
                    }
                };
                buf.truncate(old + n);
                if n == 0 {
                    eof = true;
                    break;
                }
            }
        }
        let avail = &buf[start..];
        if avail.is_empty() {
            return Ok(off);
        }
        let c = cut_point_with(p, avail, eof);
        f(off, &avail[..c])?;
        off += c as u64;
        start += c;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn rand_bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.truncate(n);
        v
    }

    #[test]
    fn deterministic_and_bounded() {
        let d = rand_bytes(if cfg!(debug_assertions) { 6 << 20 } else { 16 << 20 }, 42);
        let a = chunk_lengths(&d);
        let b = chunk_lengths(&d);
        assert_eq!(a, b);
        assert_eq!(a.iter().sum::<usize>(), d.len());
        for (i, &l) in a.iter().enumerate() {
            assert!(l <= MAX_CHUNK);
            if i + 1 < a.len() {
                assert!(l >= MIN_CHUNK, "chunk {i} len {l}");
            }
        }
        let avg = d.len() / a.len();
        assert!(avg > 4 * 1024 && avg < 16 * 1024, "avg {avg}");
    }

    #[test]
    fn stream_matches_in_memory() {
        let d = rand_bytes(9 << 20 | 12345, 7);
        let mut got = Vec::new();
        chunk_stream(&d[..], |off, b| {
            got.push((off, b.len()));
            Ok(())
        })
        .unwrap();
        let mut off = 0u64;
        let want: Vec<_> = chunk_lengths(&d)
            .into_iter()
            .map(|l| {
                let o = off;
                off += l as u64;
                (o, l)
            })
            .collect();
        assert_eq!(got, want);
        let mut sliced = Vec::new();
        chunk_slice(&d, |off, b| {
            sliced.push((off, b.len()));
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(sliced, want);
    }

    fn new_bytes(old: &[u8], new: &[u8]) -> usize {
        let mut seen = HashSet::new();
        let mut off = 0;
        for l in chunk_lengths(old) {
            seen.insert(blake3::hash(&old[off..off + l]));
            off += l;
        }
        let mut fresh = 0;
        let mut off = 0;
        for l in chunk_lengths(new) {
            if !seen.contains(&blake3::hash(&new[off..off + l])) {
                fresh += l;
            }
            off += l;
        }
        fresh
    }

    #[test]
    fn prepend_10_bytes_to_32mib_stores_under_64kib() {
        let seeds: &[u64] = if cfg!(debug_assertions) { &[1] } else { &[1, 2, 3] };
        for &seed in seeds {
            let d = rand_bytes(32 << 20, seed);
            let mut p = b"0123456789".to_vec();
            p.extend_from_slice(&d);
            let fresh = new_bytes(&d, &p);
            eprintln!("prepend 10 B to 32 MiB (seed {seed}): {fresh} new bytes");
            assert!(fresh < 64 << 10, "seed {seed}: {fresh} new bytes");
        }
    }

    #[test]
    fn middle_edit_is_local() {
        let mb = if cfg!(debug_assertions) { 1 << 18 } else { 1 << 20 };
        let d = rand_bytes(32 * mb, 9);
        let mut e = d.clone();
        e[17 * mb] ^= 0xff;
        e.splice(20 * mb..20 * mb, b"inserted".iter().copied());
        let fresh = new_bytes(&d, &e);
        assert!(fresh < 5 * MAX_CHUNK, "{fresh}");
    }

    #[test]
    fn zeros_and_small() {
        assert_eq!(chunk_lengths(&[]), Vec::<usize>::new());
        assert_eq!(chunk_lengths(&[1, 2, 3]), vec![3]);
        let z = vec![0u8; 5 << 20];
        let l = chunk_lengths(&z);
        assert_eq!(l.iter().sum::<usize>(), z.len());
    }

    #[test]
    fn large_files_keep_the_old_cuts() {
        assert_eq!(params_for(LARGE_FILE - 1), &SMALL);
        assert_eq!(params_for(LARGE_FILE), &LARGE);
        let data = rand_bytes(12 << 20, 7);
        let mut lens = Vec::new();
        let n = chunk_stream_with(&LARGE, &data[..], |off, b| {
            assert_eq!(&data[off as usize..off as usize + b.len()], b);
            lens.push(b.len());
            Ok(())
        })
        .unwrap();
        assert_eq!(n, data.len() as u64);
        let (last, rest) = lens.split_last().unwrap();
        assert!(*last <= LARGE.max && rest.iter().all(|&l| (LARGE.min..=LARGE.max).contains(&l)), "{lens:?}");
        let avg = data.len() / lens.len();
        assert!((256 << 10..=1 << 20).contains(&avg), "average {avg} of {lens:?}");
    }
}
