//! A regular file's content in the store: its chunks (new ones stored, known
//! ones referenced once more), its manifest and a `Content` journal record
//! ([`Store::put_content`]), and the way back ([`Store::restore_content`]).
//!
//! Owns: chunk reference counting for content, the content journal record.
//! Must not touch: the inode table, working-copy files (the caller reads the
//! bytes and passes them in, or passes the file to write into).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use redb::ReadableTable;

use crate::store::db::Store;
use crate::schema::*;
use crate::types::Result;

impl Store {
    /// Stores `manifest` (the chunks of a file of `size` bytes) as the
    /// content of `ino` in `txn`: chunks the store lacks are appended to the open pack
    /// (durable at the next durable commit, [`Packs::sync`](crate::store::pack::Packs::sync)) after being read with
    /// `read(chunk, buf)`, which fills `buf` with the chunk's bytes and
    /// returns false if it cannot (or they no longer hash to it); the old
    /// manifest's references are dropped. Returns (journal sequence, chunk
    /// count delta, chunk bytes delta), or `None` if the file changed under
    /// us (the caller aborts `txn`). The caller commits `txn` and then calls
    /// [`Store::content_committed`].
    pub(crate) fn put_content(
        &self,
        txn: &redb::WriteTransaction,
        ino: u64,
        size: u64,
        manifest: &[ChunkRef],
        mut read: impl FnMut(&ChunkRef, &mut Vec<u8>) -> bool,
    ) -> std::result::Result<Option<(u64, i64, i64)>, redb::Error> {
        let (mut dc, mut db) = (0i64, 0i64);
        let mut touched: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        // The live manifest is a root over shared segments (`crate::live`):
        // only the segments the change created take chunk references (one
        // per entry), and only the ones no manifest names any more drop
        // theirs. A small edit of a big file rewrites the root and a
        // segment or two, and touches a few rows of the chunk index.
        let (mut moves, manifest_hash) = crate::live::write(txn, ino, manifest)?;
        {
            let mut chunks = txn.open_table(CHUNKS)?;
            // A reference taken and dropped in this transaction (the
            // unchanged chunks of a rewritten segment: an overwrite's new
            // segment names 63 of the old one's 64) is not written at all:
            // the chunk index is keyed by hash, so each count update copies
            // a leaf of its own (D66). Only for chunks the index holds (an
            // absent one is stored again by its add).
            net_moves(&chunks, &mut moves)?;
            let mut buf = Vec::new();
            let mut new_b = 0u64;
            let all_b: u64 = manifest.iter().map(|c| c.len as u64).sum();
            // References to add per hash (a segment may name a chunk twice).
            let mut add: HashMap<[u8; 32], u64> = HashMap::new();
            for c in &moves.add {
                *add.entry(c.hash).or_default() += 1;
            }
            for c in &moves.add {
                let Some(n) = add.remove(&c.hash) else { continue };
                let cur = chunks.get(&c.hash[..])?.map(|g| g.value());
                match cur {
                    Some((pack, off, len, refs)) => {
                        chunks.insert(&c.hash[..], (pack, off, len, refs + n))?;
                    }
                    None => {
                        buf.resize(c.len as usize, 0);
                        if !read(c, &mut buf) {
                            return Ok(None); // changed under us
                        }
                        let loc = self.packs.append(&c.hash, &buf).map_err(redb::Error::Io)?;
                        chunks.insert(&c.hash[..], (loc.pack, loc.offset, loc.len, n))?;
                        let t = touched.entry(loc.pack).or_default();
                        t.0 += PACK_RECORD_HEADER + loc.len as u64;
                        t.1 = loc.offset + loc.len as u64;
                        dc += 1;
                        db += c.len as i64;
                        new_b += c.len as u64;
                    }
                }
            }
            self.content_new.fetch_add(new_b, Ordering::Relaxed);
            self.content_reused.fetch_add(all_b - new_b, Ordering::Relaxed);
        }
        self.packs.note(txn, &touched)?;
        let (c, b) = {
            let mut chunks = txn.open_table(CHUNKS)?;
            let mut packs = txn.open_table(PACKS)?;
            drop_refs(&mut chunks, &mut packs, &moves.drop)?
        };
        dc -= c as i64;
        db -= b as i64;
        txn.open_table(MANIFEST_SIZES)?.insert(ino, size)?;
        let seq = self.journal_last(txn)? + 1;
        self.sync_pos.fetch_max(seq, Ordering::SeqCst);
        let rec = JournalRecord::Content { ino, size, chunks: manifest.len() as u32, manifest_hash };
        txn.open_table(JOURNAL)?.insert(seq, &enc(&rec)[..])?;
        bump_chunk_counters(txn, dc, db)?;
        Ok(Some((seq, dc, db)))
    }

    /// After the caller committed (non-durably) the transaction of
    /// [`Store::put_content`] for `ino`: the next durable group commit must
    /// cover it, and the counters move by (`dc`, `db`).
    pub(crate) fn content_committed(&self, ino: u64, dc: i64, db: i64) {
        self.nondurable.lock().unwrap_or_else(|p| p.into_inner()).insert(ino);
        self.content_pending.store(true, Ordering::SeqCst);
        self.bump_counters(dc, db);
    }

    /// `st_blocks` of files `inos` of a fork's deferred tree whose nodes do
    /// not know them yet (`inode::BLOCKS_UNKNOWN`, D60), in their order:
    /// from the file's base object while the tables defer the tree, else
    /// from its row (written from the same object). `None` for an inode
    /// neither knows, or on an error (logged). Reads packs: call it with
    /// no lock held.
    pub(crate) fn base_blocks(&self, inos: &[u64]) -> Vec<Option<u64>> {
        // Taken before the read begins, as in `restore_content`.
        let deferred = self.deferred();
        let rtx = match self.begin_read() {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("block count of a fork's file: {e}");
                return vec![None; inos.len()];
            }
        };
        let from_base = match &deferred {
            Some(t) => t.blocks(self, &rtx, inos),
            None => Ok(vec![None; inos.len()]),
        };
        let from_base = from_base.unwrap_or_else(|e| {
            tracing::error!("block count of a fork's file from its object: {e}");
            vec![None; inos.len()]
        });
        let rows = rtx.open_table(INODES).ok();
        inos.iter()
            .zip(from_base)
            .map(|(&ino, b)| {
                b.or_else(|| {
                    let g = rows.as_ref()?.get(ino).ok()??;
                    let r = dec::<InodeRec>(g.value()).ok()?;
                    (r.blocks != crate::inode::BLOCKS_UNKNOWN).then_some(r.blocks)
                })
            })
            .collect()
    }

    /// Writes the stored content of `ino` into `f` at its offsets (holes
    /// stay unwritten), reading each chunk from its pack (looked up again if
    /// compaction moved it meanwhile) and checking its hash. No manifest:
    /// nothing written. EIO if the manifest cannot be decoded or a chunk is
    /// missing or damaged (logged with its hash).
    pub(crate) fn restore_content(&self, ino: u64, f: &File) -> Result<()> {
        let manifest = self.stored_manifest(ino, "restore")?;
        self.each_stored_chunk(ino, "restore", &manifest, |c, b| Ok(f.write_all_at(b, c.offset)?))
    }
}

/// Cancels, pairwise, references that `moves` both adds and drops for the
/// same chunk when the chunk index holds it: the count would move by +1 and
/// −1 in one transaction. What is left moves the index the same way.
fn net_moves(chunks: &redb::Table<&[u8], (u32, u64, u32, u64)>, moves: &mut crate::live::Moves) -> std::result::Result<(), redb::Error> {
    if moves.add.is_empty() || moves.drop.is_empty() {
        return Ok(());
    }
    let mut dropped: HashMap<[u8; 32], u64> = HashMap::new();
    for c in &moves.drop {
        *dropped.entry(c.hash).or_default() += 1;
    }
    // Pairs to cancel per hash: min(adds, drops), held chunks only.
    let mut cancel: HashMap<[u8; 32], u64> = HashMap::new();
    for c in &moves.add {
        let Some(d) = dropped.get_mut(&c.hash) else { continue };
        if *d == 0 {
            continue;
        }
        if !cancel.contains_key(&c.hash) && chunks.get(&c.hash[..])?.is_none() {
            *d = 0;
            continue;
        }
        *d -= 1;
        *cancel.entry(c.hash).or_default() += 1;
    }
    if cancel.is_empty() {
        return Ok(());
    }
    let mut left = cancel.clone();
    moves.add.retain(|c| match left.get_mut(&c.hash) {
        Some(n) if *n > 0 => {
            *n -= 1;
            false
        }
        _ => true,
    });
    moves.drop.retain(|c| match cancel.get_mut(&c.hash) {
        Some(n) if *n > 0 => {
            *n -= 1;
            false
        }
        _ => true,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(h: u8) -> ChunkRef {
        ChunkRef { offset: 0, len: 1, hash: [h; 32] }
    }

    #[test]
    fn net_moves_cancels_pairs_of_held_chunks_only() {
        let db = redb::Database::builder().create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
        let txn = db.begin_write().unwrap();
        let mut t = txn.open_table(CHUNKS).unwrap();
        for h in [1u8, 2, 3] {
            t.insert(&[h; 32][..], (0u32, 0u64, 1u32, 2u64)).unwrap();
        }
        // 1: added twice, dropped once; 2: dropped only; 3: added only;
        // 4: added and dropped but not in the index (stored again).
        let mut m = crate::live::Moves { add: vec![c(1), c(1), c(3), c(4)], drop: vec![c(2), c(1), c(4)] };
        net_moves(&t, &mut m).unwrap();
        assert_eq!(m.add, vec![c(1), c(3), c(4)]);
        assert_eq!(m.drop, vec![c(2), c(4)]);
    }
}
