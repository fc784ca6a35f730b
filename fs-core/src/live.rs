//! Live file manifests (schema 6, docs/FORMATS.md "Live manifests"): a
//! file's chunk list stored as a small root row (`live_manifests`, ino →
//! the segments' start offsets and ids) over content-addressed segments
//! (`live_segments`, id → up to [`SEG_MAX`] entries with gaps and lengths,
//! no absolute offsets), counted in `live_segment_refs`. A change rewrites
//! the root and the segments it touches, not the whole list (a 32 MiB file
//! of small chunks was one ~196 KB row rewritten copy-on-write at every
//! re-hash); a file written anew with a prefix (a prepend) shares every
//! segment after the first cut that resynchronizes — with a few bytes
//! prepended, every segment but its first chunk's own (D66).
//!
//! Chunk references: a segment holds one reference per entry on each chunk
//! it names, taken when the segment is created and dropped when its last
//! root entry goes ([`Moves`]); the callers move the chunk index.
//!
//! Owns: the encoding and the three tables. Must not touch: the chunk
//! index (callers apply [`Moves`]), working copies, the inode table.

use std::collections::BTreeMap;

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::schema::{dec, drop_refs, enc, ChunkRef, StoreResult, CHUNKS, LIVE_ROOTS, LIVE_SEGMENTS, LIVE_SEGMENT_REFS, MANIFEST_SIZES, PACKS};

/// A segment ends after an entry whose hash's first 4 bytes (LE) are ≡ 0
/// mod this (content-defined: ~64 entries, ~2.8 KB encoded).
pub const SEG_AVG: u32 = 64;
/// … or after this many entries.
pub const SEG_MAX: usize = 256;

/// A live manifest's root: (offset of the segment's first chunk in the
/// file, segment id) per segment, in file order; or, for a chunk list
/// that is one segment (up to ~64 chunks: most files), its entries inline
/// (as a segment's, the first gap from offset 0) and no segments, so a
/// small file costs one row as before schema 6.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Root {
    pub segs: Vec<(u64, [u8; 32])>,
    pub inline: Vec<(u64, u32, [u8; 32])>,
}

/// A segment: per chunk (bytes of hole since the previous chunk's end, or
/// 0 for the first; length; BLAKE3 hash).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Segment {
    pub entries: Vec<(u64, u32, [u8; 32])>,
}

/// What a write or removal did to chunk references: `add` holds one entry
/// per reference to take (entries of segments created, at their offsets in
/// the new manifest), `drop` one per reference to drop (entries of
/// segments that lost their last root entry; offsets meaningless).
#[derive(Default, Debug)]
pub struct Moves {
    pub add: Vec<ChunkRef>,
    pub drop: Vec<ChunkRef>,
}

fn is_cut(h: &[u8; 32]) -> bool {
    u32::from_le_bytes(h[0..4].try_into().unwrap()) % SEG_AVG == 0
}

/// Cuts a manifest into segments: (start offset, encoded segment, its id,
/// range of `m`). A list of two segments or more has its first chunk as a
/// segment of its own (D66): a file written anew with a few bytes before
/// its content (a prepend: a temporary file renamed over the old one)
/// differs from the old one in its first chunk, so it then shares every
/// segment but that one-entry segment, and the chunk references of the
/// chunks after it are neither taken by the new file nor dropped with the
/// old one (two transactions that each touched a segment's worth of
/// hash-spread rows of the chunk index).
fn cut(m: &[ChunkRef]) -> Vec<(u64, Vec<u8>, [u8; 32], std::ops::Range<usize>)> {
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < m.len() {
        let mut j = i;
        while j < m.len() {
            j += 1;
            if is_cut(&m[j - 1].hash) || j - i >= SEG_MAX {
                break;
            }
        }
        ranges.push(i..j);
        i = j;
    }
    if ranges.len() >= 2 && ranges[0].len() > 1 {
        let first = ranges[0].clone();
        ranges.splice(0..1, [0..1, 1..first.end]);
    }
    ranges.into_iter().map(|r| segment(m, r)).collect()
}

/// The segment of `m[r]`: (start offset, encoded segment, its id, `r`).
fn segment(m: &[ChunkRef], r: std::ops::Range<usize>) -> (u64, Vec<u8>, [u8; 32], std::ops::Range<usize>) {
    let mut s = Segment::default();
    let mut end = m[r.start].offset;
    for c in &m[r.clone()] {
        s.entries.push((c.offset.saturating_sub(end), c.len, c.hash));
        end = c.offset + c.len as u64;
    }
    let b = enc(&s);
    let id = *blake3::hash(&b).as_bytes();
    (m[r.start].offset, b, id, r)
}

/// Decodes a segment's entries at `start` into `out`.
fn expand(start: u64, seg: &[u8], out: &mut Vec<ChunkRef>) -> Result<(), String> {
    let s: Segment = dec(seg)?;
    expand_entries(start, &s.entries, out);
    Ok(())
}

/// Entries (gap, len, hash) from `start` as chunk references, into `out`.
fn expand_entries(start: u64, entries: &[(u64, u32, [u8; 32])], out: &mut Vec<ChunkRef>) {
    let mut end = start;
    for &(gap, len, hash) in entries {
        let offset = end + gap;
        out.push(ChunkRef { offset, len, hash });
        end = offset + len as u64;
    }
}

/// A chunk list as inline entries (gaps from offset 0).
fn inline_of(m: &[ChunkRef]) -> Vec<(u64, u32, [u8; 32])> {
    let mut end = 0;
    m.iter()
        .map(|c| {
            let e = (c.offset.saturating_sub(end), c.len, c.hash);
            end = c.offset + c.len as u64;
            e
        })
        .collect()
}

/// The chunk list of a root whose segments `get` returns (`None`: a segment
/// is missing). Errors: undecodable or missing, as text.
pub fn expand_root(root: &[u8], get: &mut dyn FnMut(&[u8; 32]) -> Result<Option<Vec<u8>>, String>) -> Result<Vec<ChunkRef>, String> {
    let r: Root = dec(root)?;
    let mut out = Vec::new();
    expand_entries(0, &r.inline, &mut out);
    for (start, id) in &r.segs {
        let Some(b) = get(id)? else { return Err(format!("segment {} is missing", crate::schema::hex(id))) };
        expand(*start, &b, &mut out).map_err(|e| format!("segment {}: {e}", crate::schema::hex(id)))?;
    }
    Ok(out)
}

/// The live manifest of `ino` read through the tables of a read or write
/// transaction (`None`: the file has no stored content). Errors: redb, or
/// a root or segment that does not decode or is missing.
pub fn read<R, S>(roots: &R, segs: &S, ino: u64) -> Result<Option<Vec<ChunkRef>>, String>
where
    R: ReadableTable<u64, &'static [u8]>,
    S: ReadableTable<&'static [u8], &'static [u8]>,
{
    let Some(g) = roots.get(ino).map_err(|e| e.to_string())? else { return Ok(None) };
    let mut get = |id: &[u8; 32]| -> Result<Option<Vec<u8>>, String> { Ok(segs.get(&id[..]).map_err(|e| e.to_string())?.map(|g| g.value().to_vec())) };
    expand_root(g.value(), &mut get).map(Some).map_err(|e| format!("live manifest {ino}: {e}"))
}

/// Reads the live manifest of `ino` in a read transaction (tables absent:
/// none).
pub fn read_tx(rtx: &redb::ReadTransaction, ino: u64) -> Result<Option<Vec<ChunkRef>>, String> {
    let roots = match rtx.open_table(LIVE_ROOTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let segs = rtx.open_table(LIVE_SEGMENTS).map_err(|e| e.to_string())?;
    read(&roots, &segs, ino)
}

/// Whether `ino` has a live manifest, in a write transaction.
pub(crate) fn has(txn: &WriteTransaction, ino: u64) -> StoreResult<bool> {
    Ok(txn.open_table(LIVE_ROOTS)?.get(ino)?.is_some())
}

/// The live manifest of `ino` in a write transaction (an undecodable one
/// reads as none: its references are then left, and fsck names them).
#[cfg(test)]
pub(crate) fn read_w(txn: &WriteTransaction, ino: u64) -> StoreResult<Option<Vec<ChunkRef>>> {
    let roots = txn.open_table(LIVE_ROOTS)?;
    let segs = txn.open_table(LIVE_SEGMENTS)?;
    Ok(read(&roots, &segs, ino).unwrap_or_else(|e| {
        tracing::error!("{e}");
        None
    }))
}

/// Stores `m` as the live manifest of `ino` in `txn`, replacing the old
/// one: segments both name are not touched, new ones are created (their
/// entries in [`Moves::add`]), ones no root names any more removed (their
/// entries in [`Moves::drop`]). Returns the moves and the BLAKE3 hash of
/// the new root's bytes. The caller applies the moves to the chunk index,
/// adds before drops.
pub(crate) fn write(txn: &WriteTransaction, ino: u64, m: &[ChunkRef]) -> StoreResult<(Moves, [u8; 32])> {
    let mut segs = cut(m);
    let root = if segs.len() <= 1 {
        segs.clear();
        Root { segs: Vec::new(), inline: inline_of(m) }
    } else {
        Root { segs: segs.iter().map(|(s, _, id, _)| (*s, *id)).collect(), inline: Vec::new() }
    };
    let bytes = enc(&root);
    let hash = *blake3::hash(&bytes).as_bytes();
    let old: Root = {
        let t = txn.open_table(LIVE_ROOTS)?;
        let g = t.get(ino)?;
        match g {
            Some(g) if g.value() == &bytes[..] => return Ok((Moves::default(), hash)),
            Some(g) => dec(g.value()).unwrap_or_default(),
            None => Root::default(),
        }
    };
    let mut delta: BTreeMap<[u8; 32], i64> = BTreeMap::new();
    for (_, id) in &old.segs {
        *delta.entry(*id).or_default() -= 1;
    }
    for (_, _, id, _) in &segs {
        *delta.entry(*id).or_default() += 1;
    }
    let mut moves = Moves::default();
    // Inline entries hold their references themselves: moved by the
    // difference of the old and new entries' hashes.
    if !old.inline.is_empty() || !root.inline.is_empty() {
        let mut d: BTreeMap<[u8; 32], i64> = BTreeMap::new();
        for (_, _, h) in &old.inline {
            *d.entry(*h).or_default() -= 1;
        }
        for (_, _, h) in &root.inline {
            *d.entry(*h).or_default() += 1;
        }
        if !root.inline.is_empty() {
            for c in m {
                if let Some(n) = d.get_mut(&c.hash).filter(|n| **n > 0) {
                    *n -= 1;
                    moves.add.push(*c);
                }
            }
        }
        for (h, n) in d {
            for _ in n..0 {
                moves.drop.push(ChunkRef { offset: 0, len: 0, hash: h });
            }
        }
    }
    {
        let mut refs = txn.open_table(LIVE_SEGMENT_REFS)?;
        let mut st = txn.open_table(LIVE_SEGMENTS)?;
        for (start, b, id, range) in &segs {
            let Some(d) = delta.get_mut(id) else { continue };
            if *d <= 0 {
                continue;
            }
            let add = std::mem::take(d) as u64;
            let cur = refs.get(&id[..])?.map(|g| g.value()).unwrap_or(0);
            if cur == 0 {
                st.insert(&id[..], &b[..])?;
                moves.add.extend_from_slice(&m[range.clone()]);
            }
            let _ = start;
            refs.insert(&id[..], cur + add)?;
        }
        for (id, d) in delta {
            if d >= 0 {
                continue;
            }
            dec_ref(&mut refs, &mut st, &id, (-d) as u64, &mut moves.drop)?;
        }
    }
    txn.open_table(LIVE_ROOTS)?.insert(ino, &bytes[..])?;
    Ok((moves, hash))
}

fn dec_ref(
    refs: &mut redb::Table<&[u8], u64>,
    st: &mut redb::Table<&[u8], &[u8]>,
    id: &[u8; 32],
    n: u64,
    drop: &mut Vec<ChunkRef>,
) -> StoreResult<()> {
    let cur = refs.get(&id[..])?.map(|g| g.value()).unwrap_or(0);
    if cur > n {
        refs.insert(&id[..], cur - n)?;
        return Ok(());
    }
    refs.remove(&id[..])?;
    if let Some(g) = st.remove(&id[..])? {
        if let Err(e) = expand(0, g.value(), drop) {
            tracing::error!("live segment {}: {e} (its chunk references stay)", crate::schema::hex(id));
        }
    }
    Ok(())
}

/// Removes the live manifest of `ino` (if any): its segments lose a root
/// entry each. Returns the references to drop ([`Moves::drop`]).
pub(crate) fn remove(txn: &WriteTransaction, ino: u64) -> StoreResult<Moves> {
    let old = txn.open_table(LIVE_ROOTS)?.remove(ino)?.map(|g| g.value().to_vec());
    let mut moves = Moves::default();
    let Some(old) = old else { return Ok(moves) };
    let r: Root = dec(&old).unwrap_or_default();
    moves.drop.extend(r.inline.iter().map(|&(_, _, hash)| ChunkRef { offset: 0, len: 0, hash }));
    let mut refs = txn.open_table(LIVE_SEGMENT_REFS)?;
    let mut st = txn.open_table(LIVE_SEGMENTS)?;
    for (_, id) in &r.segs {
        dec_ref(&mut refs, &mut st, id, 1, &mut moves.drop)?;
    }
    Ok(moves)
}

/// Removes an inode's live manifest (and its size row) and drops the chunk
/// references of the segments no other manifest names. Returns (chunks
/// removed, bytes removed).
pub(crate) fn remove_manifest(txn: &WriteTransaction, ino: u64) -> StoreResult<(u64, u64)> {
    txn.open_table(MANIFEST_SIZES)?.remove(ino)?;
    let moves = remove(txn, ino)?;
    if moves.drop.is_empty() {
        return Ok((0, 0));
    }
    let mut chunks = txn.open_table(CHUNKS)?;
    let mut packs = txn.open_table(PACKS)?;
    drop_refs(&mut chunks, &mut packs, &moves.drop)
}

/// Removes every live manifest (a switch of branch): the tables emptied,
/// one reference dropped per entry of every segment.
pub(crate) fn clear(txn: &WriteTransaction) -> StoreResult<Moves> {
    let mut moves = Moves::default();
    {
        let mut roots = txn.open_table(LIVE_ROOTS)?;
        while let Some((_, v)) = roots.pop_first()? {
            let r: Root = dec(v.value()).unwrap_or_default();
            moves.drop.extend(r.inline.iter().map(|&(_, _, hash)| ChunkRef { offset: 0, len: 0, hash }));
        }
    }
    txn.open_table(LIVE_SEGMENT_REFS)?.retain(|_, _| false)?;
    let mut st = txn.open_table(LIVE_SEGMENTS)?;
    while let Some((_, v)) = st.pop_first()? {
        let _ = expand(0, v.value(), &mut moves.drop);
    }
    Ok(moves)
}

/// A table opened, `None` when it does not exist.
fn open<T>(r: Result<T, redb::TableError>) -> Result<Option<T>, String> {
    match r {
        Ok(t) => Ok(Some(t)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Calls `f` with every live manifest a read transaction holds, of either
/// layout: schema 6's roots over segments, or the whole-list rows of
/// schemas 1–5 (`MANIFESTS_V5`; fsck of a kept copy, salvage). A table
/// absent holds none. Errors: a table that cannot be opened or iterated.
pub fn each(rtx: &redb::ReadTransaction, f: &mut dyn FnMut(u64, Result<Vec<ChunkRef>, String>)) -> Result<(), String> {
    let open_err = |e: redb::TableError| e.to_string();
    match rtx.open_table(crate::schema::MANIFESTS_V5) {
        Ok(t) => {
            for r in t.iter().map_err(|e| e.to_string())? {
                let (k, v) = r.map_err(|e| e.to_string())?;
                f(k.value(), dec(v.value()));
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(open_err(e)),
    }
    let roots = match rtx.open_table(LIVE_ROOTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(open_err(e)),
    };
    let segs = rtx.open_table(LIVE_SEGMENTS).map_err(open_err)?;
    for r in roots.iter().map_err(|e| e.to_string())? {
        let (k, v) = r.map_err(|e| e.to_string())?;
        let mut get = |id: &[u8; 32]| -> Result<Option<Vec<u8>>, String> { Ok(segs.get(&id[..]).map_err(|e| e.to_string())?.map(|g| g.value().to_vec())) };
        f(k.value(), expand_root(v.value(), &mut get));
    }
    Ok(())
}

/// The chunk references the live manifests hold, added to `want` (hash →
/// count): one per entry of a schema-5 row, one per entry of each segment
/// of schema 6. Checks the segment tables: each segment's count equals the
/// root entries naming it, none without a count or a count without a
/// segment, every segment decodes; `bad(place, what)` for each problem.
pub fn chunk_refs(rtx: &redb::ReadTransaction, want: &mut std::collections::HashMap<[u8; 32], u64>, bad: &mut dyn FnMut(String, String)) -> Result<(), String> {
    if let Some(t) = open(rtx.open_table(crate::schema::MANIFESTS_V5))? {
        for r in t.iter().map_err(|e| e.to_string())? {
            let (_, v) = r.map_err(|e| e.to_string())?;
            for c in dec::<Vec<ChunkRef>>(v.value()).unwrap_or_default() {
                *want.entry(c.hash).or_default() += 1;
            }
        }
    }
    let (Some(roots), Some(segs), Some(refs)) = (open(rtx.open_table(LIVE_ROOTS))?, open(rtx.open_table(LIVE_SEGMENTS))?, open(rtx.open_table(LIVE_SEGMENT_REFS))?) else {
        return Ok(());
    };
    let mut named: std::collections::HashMap<[u8; 32], u64> = std::collections::HashMap::new();
    for r in roots.iter().map_err(|e| e.to_string())? {
        let (k, v) = r.map_err(|e| e.to_string())?;
        match dec::<Root>(v.value()) {
            Ok(root) => {
                for (_, _, h) in root.inline {
                    *want.entry(h).or_default() += 1;
                }
                for (_, id) in root.segs {
                    *named.entry(id).or_default() += 1;
                }
            }
            Err(e) => bad(format!("live manifest {}", k.value()), format!("undecodable root: {e}")),
        }
    }
    for r in segs.iter().map_err(|e| e.to_string())? {
        let (k, v) = r.map_err(|e| e.to_string())?;
        let place = format!("live segment {}", crate::schema::hex(k.value()));
        if blake3::hash(v.value()).as_bytes()[..] != *k.value() {
            bad(place.clone(), "its bytes do not hash to its id".into());
        }
        let id: [u8; 32] = k.value().try_into().unwrap_or([0; 32]);
        let count = refs.get(k.value()).map_err(|e| e.to_string())?.map(|g| g.value());
        let n = named.remove(&id).unwrap_or(0);
        if count != Some(n) || n == 0 {
            bad(place.clone(), format!("count {count:?} but {n} root entries name it"));
        }
        match dec::<Segment>(v.value()) {
            Ok(s) => {
                for (_, _, h) in s.entries {
                    *want.entry(h).or_default() += 1;
                }
            }
            Err(e) => bad(place, format!("undecodable: {e}")),
        }
    }
    for r in refs.iter().map_err(|e| e.to_string())? {
        let (k, _) = r.map_err(|e| e.to_string())?;
        if segs.get(k.value()).map_err(|e| e.to_string())?.is_none() {
            bad(format!("live segment {}", crate::schema::hex(k.value())), "counted but missing".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(n: usize, seed: u8) -> Vec<ChunkRef> {
        let mut off = 0;
        (0..n)
            .map(|i| {
                let hash = *blake3::hash(&[seed, (i % 251) as u8, (i / 251) as u8]).as_bytes();
                let c = ChunkRef { offset: off, len: 8000 + (i as u32 % 7), hash };
                off += c.len as u64 + if i % 100 == 99 { 4096 } else { 0 };
                c
            })
            .collect()
    }

    #[test]
    fn round_trip_and_sharing() {
        let db = redb::Database::builder().create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
        let txn = db.begin_write().unwrap();
        let m = refs(4000, 1);
        let (mv, _) = write(&txn, 5, &m).unwrap();
        assert_eq!(mv.add.len(), 4000);
        assert_eq!(read_w(&txn, 5).unwrap().unwrap(), m);
        // A prepend into another inode shares all segments after the first.
        let mut p = vec![ChunkRef { offset: 0, len: 10, hash: [7; 32] }];
        p.extend(m.iter().map(|c| ChunkRef { offset: c.offset + 10, ..*c }));
        let (mv, _) = write(&txn, 6, &p).unwrap();
        assert!(mv.add.len() <= SEG_MAX + 1, "{}", mv.add.len());
        assert_eq!(read_w(&txn, 6).unwrap().unwrap(), p);
        let mv = remove(&txn, 5).unwrap();
        assert!(mv.drop.len() <= SEG_MAX, "{}", mv.drop.len());
        // An overwrite of one chunk rewrites one segment.
        let mut q = p.clone();
        q[2000].hash = [9; 32];
        let (mv, _) = write(&txn, 6, &q).unwrap();
        assert!(mv.add.len() <= SEG_MAX && mv.drop.len() == mv.add.len());
        assert_eq!(read_w(&txn, 6).unwrap().unwrap(), q);
        // A small file is inline: one root row, references per entry.
        let mut s = refs(20, 3);
        for c in &mut s {
            c.hash[0] |= 1; // no cut: one segment
        }
        let (mv, _) = write(&txn, 7, &s).unwrap();
        assert_eq!(mv.add.len(), 20);
        let mut s2 = s.clone();
        s2[4].hash = [8; 32];
        let (mv, _) = write(&txn, 7, &s2).unwrap();
        assert_eq!((mv.add.len(), mv.drop.len()), (1, 1));
        assert_eq!(mv.add[0], s2[4]);
        assert_eq!(read_w(&txn, 7).unwrap().unwrap(), s2);
        let mv = clear(&txn).unwrap();
        assert_eq!(mv.drop.len(), q.len() + 20);
        assert!(read_w(&txn, 6).unwrap().is_none());
        assert!(read_w(&txn, 7).unwrap().is_none());
    }

    /// A few bytes written before a file's content change its first chunk
    /// only (content-defined chunking resynchronizes): the file written
    /// anew shares every segment but the first chunk's own (D66), and
    /// removing the old one drops that chunk's reference alone.
    #[test]
    fn prepend_changes_only_the_first_chunks_segment() {
        let db = redb::Database::builder().create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
        let txn = db.begin_write().unwrap();
        let m = refs(4000, 1);
        write(&txn, 5, &m).unwrap();
        let mut p: Vec<ChunkRef> = m.iter().map(|c| ChunkRef { offset: c.offset + 10, ..*c }).collect();
        p[0] = ChunkRef { offset: 0, len: m[0].len + 10, hash: [7; 32] };
        let (mv, _) = write(&txn, 6, &p).unwrap();
        assert_eq!(mv.add, vec![p[0]]);
        assert_eq!(read_w(&txn, 6).unwrap().unwrap(), p);
        let mv = remove(&txn, 5).unwrap();
        assert_eq!(mv.drop.iter().map(|c| c.hash).collect::<Vec<_>>(), vec![m[0].hash]);
        // A list of one segment stays inline (no first-chunk segment).
        let mut s = refs(20, 3);
        for c in &mut s {
            c.hash[0] |= 1;
        }
        assert!(cut(&s).len() == 1);
        let segs = cut(&m);
        assert_eq!(segs[0].3, 0..1);
        assert_eq!(segs.iter().map(|s| s.3.len()).sum::<usize>(), m.len());
    }
}
