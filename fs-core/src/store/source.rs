//! The state a [`Store`](super::db::Store) keeps for remote-only chunks (a
//! lazy clone, [`super::remote`]): the sentinel pack id of their index
//! rows, the [`ChunkSource`] trait the `ringfs` binary implements, and the
//! installed source with its counters. A leaf (no store imports), so the
//! store handle can hold it.

use std::sync::atomic::AtomicU64;

/// The pack id of a remote-only chunk's index row (no pack file has it:
/// pack ids are allocated upwards from 0).
pub const REMOTE_PACK: u32 = u32::MAX;

/// Where remote-only chunks come from (implemented by the `ringfs` binary
/// over its remote). Called from FUSE request threads (a first open) and
/// the prefetch thread, so it must not hang: bounded retries, then an error.
pub trait ChunkSource: Send + Sync {
    /// The bytes of every chunk in `want` (hash, length), as (hash, bytes)
    /// pairs in any order, and possibly of more chunks than asked (a
    /// source may fetch a wanted chunk's neighbours on the remote in the
    /// same request, so the next first opens find them local); a wanted
    /// chunk may be left out only when it was stored meanwhile by
    /// [`Transfer::store_remote_chunks`](crate::snap::transfer::Transfer::store_remote_chunks)
    /// (`still_remote(hash)` answers whether the chunk index still names
    /// it remote-only now: a source asks it before fetching a chunk alone,
    /// so a chunk another thread stored meanwhile is not downloaded twice).
    /// They need not be checked (the store checks each against its hash).
    /// `Bytes`: slices of the response bodies, never copied per chunk.
    /// Errors: one line naming the remote and the chunk that failed.
    fn fetch(
        &self,
        want: &[([u8; 32], u32)],
        still_remote: &dyn Fn(&[u8; 32]) -> bool,
    ) -> Result<Vec<([u8; 32], bytes::Bytes)>, String>;
    /// The remote's name and URL, for log lines.
    fn describe(&self) -> String;
}

/// The chunk source of a store and what it fetched.
#[derive(Default)]
pub(crate) struct Remote {
    pub(crate) source: std::sync::OnceLock<std::sync::Arc<dyn ChunkSource>>,
    /// Chunks and bytes fetched since the store was opened.
    pub(crate) fetched: AtomicU64,
    pub(crate) fetched_bytes: AtomicU64,
}
