//! Remote-only chunks (a lazy clone, docs/FORMATS.md "Remote-only chunks"):
//! chunk index rows whose bytes are not in a local pack but on a remote, in
//! pack [`REMOTE_PACK`] (offset 0, the chunk's length, its references as
//! usual), and the [`ChunkSource`] that fetches them. A fetched chunk is
//! checked against its BLAKE3 hash, appended to the open pack and its row
//! moved there in a non-durable transaction that the next durable group
//! commit covers (it syncs the packs before committing), so a crash leaves
//! it remote-only or local, never pointing at missing bytes.
//!
//! Owns: the sentinel, fetching into packs. Must not know: transports, keys,
//! the remote layout (the `ringfs` binary implements [`ChunkSource`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;

use redb::{Durability, ReadableTable};

use crate::schema::{hex, CHUNKS, PACK_RECORD_HEADER};
use crate::store::db::Store;

pub use super::source::{ChunkSource, REMOTE_PACK};

impl Store {
    /// For each of `hashes`, whether the chunk index names it remote-only
    /// ([`REMOTE_PACK`]) now, read in one read transaction.
    fn remote_only_flags<'a>(&self, hashes: impl Iterator<Item = &'a [u8; 32]>) -> Result<Vec<bool>, String> {
        let e = |x: &dyn std::fmt::Display| format!("reading the chunk index: {x}");
        let rtx = self.begin_read().map_err(|x| e(&x))?;
        let index = rtx.open_table(CHUNKS).map_err(|x| e(&x))?;
        hashes.map(|h| Ok(index.get(&h[..]).map_err(|x| e(&x))?.map(|g| g.value().0) == Some(REMOTE_PACK))).collect()
    }

    /// Every remote-only chunk: (hash, length).
    pub(crate) fn remote_only(&self) -> Result<Vec<([u8; 32], u32)>, redb::Error> {
        let rtx = self.begin_read()?;
        let mut v = Vec::new();
        for r in rtx.open_table(CHUNKS)?.iter()? {
            let (k, val) = r?;
            let (pack, _, len, _) = val.value();
            if pack == REMOTE_PACK {
                if let Ok(h) = <[u8; 32]>::try_from(k.value()) {
                    v.push((h, len));
                }
            }
        }
        Ok(v)
    }

    /// Fetches the chunks of `want` (hash, length) that are still
    /// remote-only (each once) through the store's [`ChunkSource`], checks
    /// each against its hash and stores them in the local packs (durable
    /// with the next group commit). Returns how many were stored. Errors: no source installed, the source's error,
    /// a chunk not matching its hash (nothing of it stored), the store's.
    pub(crate) fn fetch_remote(&self, want: &[([u8; 32], u32)]) -> Result<u64, String> {
        if want.is_empty() {
            return Ok(0);
        }
        let Some(src) = self.remote.source.get() else {
            return Err(format!(
                "chunk {} is only on the remote and this daemon has no remote to fetch it from (mount with the store's remote record in STORE/remotes/)",
                hex(&want[0].0)
            ));
        };
        // Only what is still remote-only, each chunk once: a first open and
        // the prefetch asking for the same chunks download them once.
        let want: Vec<([u8; 32], u32)> = {
            let remote = self.remote_only_flags(want.iter().map(|w| &w.0))?;
            let mut seen = HashSet::new();
            want.iter().zip(remote).filter(|(w, r)| *r && seen.insert(w.0)).map(|(w, _)| *w).collect()
        };
        if want.is_empty() {
            return Ok(0);
        }
        // A chunk whose row cannot be read counts as remote (fetched).
        let still_remote = |h: &[u8; 32]| {
            self.remote_only_flags(std::iter::once(h))
                .map_or(true, |v| v[0])
        };
        let got = src.fetch(&want, &still_remote)?;
        let (n, bad) = self.store_fetched(&got)?;
        for (h, _) in &want {
            if bad.contains(h) {
                return Err(format!(
                    "{}: chunk {} does not match its hash (nothing of it was used)",
                    src.describe(),
                    hex(h)
                ));
            }
        }
        for h in &bad {
            tracing::warn!(
                "{}: chunk {} (fetched beside a wanted one) does not match its hash: not used",
                src.describe(),
                hex(h)
            );
        }
        // Every wanted chunk is local now: fetched here, or by another
        // thread meanwhile (a source may leave those out).
        let remote = self.remote_only_flags(want.iter().map(|w| &w.0))?;
        if let Some((h, _)) = want.iter().zip(remote).find(|(_, r)| *r).map(|(w, _)| *w) {
            return Err(format!("{}: chunk {} was not fetched", src.describe(), hex(&h)));
        }
        Ok(n)
    }

    /// Checks every chunk of `got` (hash, bytes) against its hash, then
    /// stores those that match and are still remote-only in the local
    /// packs and moves their rows there in one transaction, durable with
    /// the next group commit. Returns how many were stored and the hashes
    /// of those that did not match (never stored; they stay remote-only).
    pub(crate) fn store_fetched(
        &self,
        got: &[([u8; 32], bytes::Bytes)],
    ) -> Result<(u64, Vec<[u8; 32]>), String> {
        let mut bad = Vec::new();
        let good: Vec<&([u8; 32], bytes::Bytes)> = got
            .iter()
            .filter(|(h, b)| {
                let ok = blake3::hash(b).as_bytes() == h;
                if !ok {
                    bad.push(*h);
                }
                ok
            })
            .collect();
        // Nothing to write when every chunk is local already (a waiter on
        // another thread's fetch): no write transaction.
        {
            let any = self.remote_only_flags(good.iter().map(|g| &g.0))?.into_iter().any(|r| r);
            if !any {
                return Ok((0, bad));
            }
        }
        let e = |x: redb::Error| format!("storing fetched chunks: {x}");
        let mut txn = self.begin_write().map_err(e)?;
        let mut touched: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let (mut n, mut nb) = (0u64, 0u64);
        {
            let mut index = txn.open_table(CHUNKS).map_err(|x| e(x.into()))?;
            for (h, b) in &good {
                let cur = index
                    .get(&h[..])
                    .map_err(|x| e(x.into()))?
                    .map(|g| g.value());
                // Fetched meanwhile by another thread, or gone (gc).
                let Some((REMOTE_PACK, _, _, refs)) = cur else {
                    continue;
                };
                let loc = self
                    .packs
                    .append(h, b)
                    .map_err(|x| format!("storing fetched chunk {}: {x}", hex(h)))?;
                index
                    .insert(&h[..], (loc.pack, loc.offset, loc.len, refs))
                    .map_err(|x| e(x.into()))?;
                let t = touched.entry(loc.pack).or_default();
                t.0 += PACK_RECORD_HEADER + loc.len as u64;
                t.1 = loc.offset + loc.len as u64;
                n += 1;
                nb += loc.len as u64;
            }
        }
        self.packs
            .note(&txn, &touched)
            .map_err(|x| format!("storing fetched chunks: {x}"))?;
        // Not durable by itself (no fsync per first open): the next durable
        // group commit covers it and syncs the packs before it commits, as
        // for a hash worker's content transaction. A crash before that
        // leaves these rows remote-only, and the chunks are fetched again.
        txn.set_durability(Durability::None)
            .map_err(|x| e(x.into()))?;
        txn.commit().map_err(|x| e(x.into()))?;
        self.content_pending.store(true, Ordering::SeqCst);
        self.remote.fetched.fetch_add(n, Ordering::Relaxed);
        self.remote.fetched_bytes.fetch_add(nb, Ordering::Relaxed);
        Ok((n, bad))
    }
}
