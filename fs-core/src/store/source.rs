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
    /// The bytes of each chunk in `want` (hash, length), in the same order.
    /// They need not be checked (the store checks each against its hash).
    /// Errors: one line naming the remote and the chunk that failed.
    fn fetch(&self, want: &[([u8; 32], u32)]) -> Result<Vec<Vec<u8>>, String>;
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

