//! A stored file's bytes read in place, for handles served without a
//! working copy (D67): its manifest with its remote-only chunks fetched
//! first ([`Store::stored_manifest`]), and chunks read from their packs and
//! checked against their hashes ([`Store::read_stored_chunks`]).
//!
//! Owns: nothing but these reads ([`Store::restore_content`] writes the
//! same bytes into a working copy through them). Must not touch: the
//! inode table, working copies, chunk reference counts.

use crate::schema::*;
use crate::store::db::{db_errno, Store};
use crate::store::pack::Loc;
use crate::types::{Errno, Result};

impl Store {
    /// The chunks of `ino`'s stored content (sorted by offset; holes
    /// between them), from its live manifest or, for a file of a fork's
    /// deferred tree, its base object. Chunks that are only on the remote
    /// (a lazy clone) are fetched into the packs first, through the same
    /// source as a first open's restore (sharing the prefetch's batches,
    /// D56). No manifest: empty. `what` names the caller in logs ("read",
    /// "restore"). EIO if the manifest cannot be read or a fetch fails
    /// (logged naming the inode).
    pub(crate) fn stored_manifest(&self, ino: u64, what: &str) -> Result<Vec<ChunkRef>> {
        // Taken before the read begins: when it is `None` the tables held
        // the tree before this read did.
        let deferred = self.deferred();
        let rtx = self.begin_read().map_err(db_errno)?;
        let manifest: Vec<ChunkRef> = match crate::live::read_tx(&rtx, ino) {
            Ok(Some(m)) => m,
            // A file of a fork's deferred tree: its base object's chunks.
            Ok(None) => match deferred.map(|t| t.chunks(self, &rtx, ino)).transpose() {
                Ok(m) => m.flatten().unwrap_or_default(),
                Err(e) => {
                    tracing::error!("{what} of inode {ino}: {e}");
                    return Err(Errno::EIO);
                }
            },
            Err(e) => {
                tracing::error!("{what} of inode {ino}: {e}");
                return Err(Errno::EIO);
            }
        };
        let remote: Vec<([u8; 32], u32)> = {
            let t = rtx.open_table(CHUNKS).map_err(db_errno)?;
            let mut v = Vec::new();
            for c in &manifest {
                if let Some((crate::store::remote::REMOTE_PACK, _, len, _)) = t.get(&c.hash[..]).map_err(db_errno)?.map(|g| g.value()) {
                    v.push((c.hash, len));
                }
            }
            v
        };
        drop(rtx);
        if !remote.is_empty() {
            if let Err(e) = self.fetch_remote(&remote) {
                tracing::error!("{what} of inode {ino}: fetching {} remote-only chunks: {e}", remote.len());
                return Err(Errno::EIO);
            }
        }
        Ok(manifest)
    }

    /// The bytes of `chunks` (of inode `ino`, named in errors), each read
    /// from its pack and checked against its hash ([`Store::each_stored_chunk`]).
    pub(crate) fn read_stored_chunks(&self, ino: u64, chunks: &[ChunkRef]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::with_capacity(chunks.len());
        self.each_stored_chunk(ino, "read", chunks, |_, b| {
            out.push(b.to_vec());
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f` with each of `chunks` and its bytes, read from its pack
    /// (looked up again if compaction moved it meanwhile) and checked
    /// against its hash, in one read transaction. `what` names the caller
    /// in logs. EIO if a chunk is missing from the index, still
    /// remote-only, unreadable or damaged (logged with its hash); `f`'s
    /// errors are returned as they are.
    pub(crate) fn each_stored_chunk(&self, ino: u64, what: &str, chunks: &[ChunkRef], mut f: impl FnMut(&ChunkRef, &[u8]) -> Result<()>) -> Result<()> {
        let mut rtx = self.begin_read().map_err(db_errno)?;
        // One table for every chunk (opened again only after compaction
        // moved a chunk).
        let mut table = rtx.open_table(CHUNKS).map_err(db_errno)?;
        let mut buf = Vec::new();
        for c in chunks {
            let mut looked = 0;
            loop {
                let loc = table.get(&c.hash[..]).map_err(db_errno)?.map(|g| g.value());
                let Some((pack, offset, len, _)) = loc.filter(|l| l.0 != crate::store::remote::REMOTE_PACK) else {
                    tracing::error!("{what} of inode {ino}: chunk {} is not in a local pack", hex(&c.hash));
                    return Err(Errno::EIO);
                };
                match self.packs.read(Loc { pack, offset, len }, &mut buf) {
                    Ok(()) => break,
                    // Compacted away since we looked: look again.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound && looked < 3 => {
                        looked += 1;
                        rtx = self.begin_read().map_err(db_errno)?;
                        table = rtx.open_table(CHUNKS).map_err(db_errno)?;
                    }
                    Err(e) => {
                        tracing::error!("{what} of inode {ino}: chunk {} in {}: {e}", hex(&c.hash), self.packs.path(pack).display());
                        return Err(Errno::EIO);
                    }
                }
            }
            if blake3::hash(&buf).as_bytes() != &c.hash {
                tracing::error!("{what} of inode {ino}: chunk {} is damaged in its pack (its bytes no longer match its hash)", hex(&c.hash));
                return Err(Errno::EIO);
            }
            f(c, &buf)?;
        }
        Ok(())
    }
}
