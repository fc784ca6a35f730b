//! fsck's checks of the chunk index (`schema::CHUNKS`) and pack table
//! (`schema::PACKS`) against the pack files: each location inside its
//! pack, reference counts equal to the manifests' uses, live bytes per
//! pack (chunks and, since schema 5, snapshot objects), with `full` each
//! chunk's bytes against its hash, pack files the index does not know,
//! and (schema 7) the object index files.
//!
//! Owns: what a consistent pack store is. Must not touch: anything on disk
//! (read only).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use redb::{ReadTransaction, ReadableTable};

use super::{pack_files, pack_name, Loc, HEADER_LEN, RECORD_HEADER};
use crate::schema::{hex, CHUNKS, CHUNKS_V2, CHUNK_REFS_V2, OBJECTS, PACKS};

/// What [`check_chunks`] counted.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ChunkCounts {
    pub(crate) chunks: u64,
    pub(crate) bytes: u64,
    pub(crate) packs: u64,
    pub(crate) unreferenced_packs: u64,
    /// Remote-only chunks (a lazy clone) and their bytes: not missing.
    pub(crate) remote_only: (u64, u64),
}

/// Checks the index in `rtx` against the pack files in `packs_dir`, given
/// how many times the manifests use each hash (`want_refs`). Each problem
/// goes to `bad(place, what)`. `full`: also reads every chunk and checks
/// its BLAKE3 hash. Pack files the index does not list are counted, and
/// are a problem only if `clean` (after a crash they are expected: the next
/// open removes them). Errors: redb errors reading the tables.
pub(crate) fn check_chunks(
    rtx: &ReadTransaction,
    packs_dir: &Path,
    want_refs: &HashMap<[u8; 32], u64>,
    full: bool,
    clean: bool,
    bad: &mut dyn FnMut(String, String),
) -> Result<ChunkCounts, redb::Error> {
    let mut n = ChunkCounts::default();
    let mut rows = BTreeMap::new();
    for r in rtx.open_table(PACKS)?.iter()? {
        let (k, v) = r?;
        rows.insert(k.value(), v.value());
    }
    n.packs = rows.len() as u64;
    let files = pack_files(packs_dir).unwrap_or_default();
    let mut sizes = HashMap::new();
    for &id in rows.keys() {
        match std::fs::metadata(packs_dir.join(pack_name(id))) {
            Ok(m) => {
                sizes.insert(id, m.len());
            }
            Err(e) => bad(format!("packs/{}", pack_name(id)), format!("pack file unreadable: {e}")),
        }
    }
    for id in files.iter().filter(|id| !rows.contains_key(id)) {
        n.unreferenced_packs += 1;
        if clean {
            bad(format!("packs/{}", pack_name(*id)), "pack file no index entry uses (removed at the next mount)".into());
        }
    }
    let reader = super::Packs::read_only(packs_dir.to_path_buf());
    let mut live: HashMap<u32, u64> = HashMap::new();
    let mut buf = Vec::new();
    let mut seen = 0u64;
    for r in rtx.open_table(CHUNKS)?.iter()? {
        let (k, v) = r?;
        let (pack, offset, len, refs) = v.value();
        let place = format!("chunk_index/{}", hex(k.value()));
        n.chunks += 1;
        n.bytes += len as u64;
        let Ok(hash) = <[u8; 32]>::try_from(k.value()) else {
            bad(place, "key is not a 32-byte hash".into());
            continue;
        };
        let want = want_refs.get(&hash).copied().unwrap_or(0);
        if want > 0 {
            seen += 1;
        }
        if want == 0 {
            bad(place.clone(), "indexed but no manifest uses it".into());
        } else if refs != want {
            bad(place.clone(), format!("count {refs} but manifests use it {want} times"));
        }
        if pack == crate::store::remote::REMOTE_PACK {
            n.remote_only.0 += 1;
            n.remote_only.1 += len as u64;
            continue;
        }
        *live.entry(pack).or_default() += RECORD_HEADER + len as u64;
        let Some(size) = sizes.get(&pack).copied() else {
            if !rows.contains_key(&pack) {
                bad(place, format!("in pack {} which the pack table does not list", pack_name(pack)));
            }
            continue;
        };
        if offset < HEADER_LEN + RECORD_HEADER || offset + len as u64 > size {
            bad(place, format!("bytes {offset}..{} outside {} ({size} bytes)", offset + len as u64, pack_name(pack)));
            continue;
        }
        if full {
            match reader.read(Loc { pack, offset, len }, &mut buf) {
                Ok(()) if blake3::hash(&buf).as_bytes() == &hash => {}
                Ok(()) => bad(place, format!("bytes at {} offset {offset} do not match its BLAKE3 hash", pack_name(pack))),
                Err(e) => bad(place, format!("reading {}: {e}", pack_name(pack))),
            }
        }
    }
    // Snapshot objects (schema 5) are records of the packs too: their
    // bytes are live (`snap::check` reads and checks each one).
    match rtx.open_table(OBJECTS) {
        Ok(t) => {
            for r in t.iter()? {
                let (k, v) = r?;
                let (pack, _, len) = v.value();
                *live.entry(pack).or_default() += RECORD_HEADER + len as u64;
                if !rows.contains_key(&pack) {
                    bad(format!("object_index/{}", hex(k.value())), format!("in pack {} which the pack table does not list", pack_name(pack)));
                }
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    // Object index files (schema 7, D65): each read and checked (damage
    // named by the file), each entry inside a pack of the pack table.
    let idx = crate::store::oidx::check(rtx, packs_dir, bad).map_err(|e| redb::Error::Io(std::io::Error::other(e)))?;
    for f in &idx {
        let fplace = format!("packs/{}", crate::store::oidx::file_name(f.n));
        for (id, (pack, offset, len)) in f.iter() {
            *live.entry(pack).or_default() += RECORD_HEADER + len as u64;
            if !rows.contains_key(&pack) {
                bad(fplace.clone(), format!("object {} is in pack {} which the pack table does not list", hex(&id), pack_name(pack)));
            } else if let Some(&size) = sizes.get(&pack) {
                if offset < HEADER_LEN + RECORD_HEADER || offset + len as u64 > size {
                    bad(fplace.clone(), format!("object {}: bytes {offset}..{} outside {} ({size} bytes)", hex(&id), offset + len as u64, pack_name(pack)));
                }
            }
        }
    }
    if seen < want_refs.len() as u64 {
        let index = rtx.open_table(CHUNKS)?;
        for (h, want) in want_refs {
            if index.get(&h[..])?.is_none() {
                bad(format!("chunk_index/{}", hex(h)), format!("missing; manifests use it {want} times"));
            }
        }
    }
    for (id, (total, row_live, _)) in &rows {
        let have = live.get(id).copied().unwrap_or(0);
        if *row_live != have {
            bad(format!("packs/{}", pack_name(*id)), format!("live bytes {row_live} but the index points at {have}"));
        }
        if let Some(size) = sizes.get(id) {
            if size < total {
                bad(format!("packs/{}", pack_name(*id)), format!("{size} bytes but its committed records end at {total}"));
            }
        }
    }
    Ok(n)
}

/// The length of every indexed chunk, by hash, from `chunk_index` (schema
/// 3) or the old `chunks` table (schemas 1 and 2, which fsck reads as they
/// are). Errors: redb errors reading the table.
pub(crate) fn chunk_lens(rtx: &ReadTransaction, schema: u64) -> Result<HashMap<[u8; 32], u32>, redb::Error> {
    let mut out = HashMap::new();
    if schema >= 3 {
        for r in rtx.open_table(CHUNKS)?.iter()? {
            let (k, v) = r?;
            if let Ok(h) = <[u8; 32]>::try_from(k.value()) {
                out.insert(h, v.value().2);
            }
        }
    } else {
        for r in rtx.open_table(CHUNKS_V2)?.iter()? {
            let (k, v) = r?;
            if let Ok(h) = <[u8; 32]>::try_from(k.value()) {
                out.insert(h, v.value().len() as u32);
            }
        }
    }
    Ok(out)
}

/// [`check_chunks`] for a store of schema 1 or 2 (chunk bytes in the
/// `chunks` table, counts in `chunk_refs`): every chunk's hash, that a
/// manifest uses it, and the counts.
pub(crate) fn check_chunks_v2(
    rtx: &ReadTransaction,
    want_refs: &HashMap<[u8; 32], u64>,
    bad: &mut dyn FnMut(String, String),
) -> Result<ChunkCounts, redb::Error> {
    let mut n = ChunkCounts::default();
    for r in rtx.open_table(CHUNKS_V2)?.iter()? {
        let (k, v) = r?;
        n.chunks += 1;
        n.bytes += v.value().len() as u64;
        if blake3::hash(v.value()).as_bytes()[..] != *k.value() {
            bad(format!("chunks/{}", hex(k.value())), "content does not match its BLAKE3 hash".into());
        }
        if !<[u8; 32]>::try_from(k.value()).is_ok_and(|h| want_refs.contains_key(&h)) {
            bad(format!("chunks/{}", hex(k.value())), "stored but no manifest uses it".into());
        }
    }
    let mut seen = std::collections::HashSet::new();
    for r in rtx.open_table(CHUNK_REFS_V2)?.iter()? {
        let (k, v) = r?;
        let Ok(h) = <[u8; 32]>::try_from(k.value()) else {
            bad(format!("chunk_refs/{}", hex(k.value())), "key is not a 32-byte hash".into());
            continue;
        };
        seen.insert(h);
        let want = want_refs.get(&h).copied().unwrap_or(0);
        if v.value() != want {
            bad(format!("chunk_refs/{}", hex(&h)), format!("count {} but manifests use it {want} times", v.value()));
        }
    }
    for (h, want) in want_refs {
        if !seen.contains(h) {
            bad(format!("chunk_refs/{}", hex(h)), format!("missing; manifests use it {want} times"));
        }
    }
    Ok(n)
}
