//! The store: one redb database per workspace (`DIR/store.redb`, or an
//! in-memory one) holding inodes, directory entries, xattrs, symlinks,
//! file manifests, chunks with reference counts, and the change journal.
//!
//! - [`db`]: the [`Store`](db::Store) handle — opening, the store lock, write and read
//!   transactions, reopening after an I/O error, chunk counters, the sync
//!   position;
//! - [`batch`]: what one group commit writes ([`Batch`](batch::Batch)) and
//!   how it is written (main or `local_*` tables, journal records);
//! - [`commit`]: the group commit and its background thread;
//! - [`compact`]: compaction of mostly dead pack files;
//! - [`content`]: a file's content (chunks, manifest, journal record) stored
//!   or read back;
//! - [`recovery`]: loading the inode table at open and repairing what a crash
//!   left (orphans, dangling entries, lost+found);
//! - [`migrate`]: bringing a store of an earlier schema to this one;
//! - [`objects`]: snapshot objects' bytes by id (records in the pack
//!   files, their locations in `object_index`);
//! - [`oidx`]: object index files, the immutable sorted runs of
//!   `object_index` entries a commit flushes, shared by forks;
//! - [`pack`]: chunk bytes in pack files, their index entries' locations,
//!   compaction.
//! - [`remote`]: remote-only chunks of a lazy clone and the
//!   [`ChunkSource`](remote::ChunkSource) that fetches them;
//! - [`source`]: the sentinel pack id, the `ChunkSource` trait and the
//!   store's installed source (a leaf the store handle holds);
//! - [`stored`]: a stored file's bytes read in place (its manifest, its
//!   chunks), for handles served without a working copy;
//! - [`fault`]: damage met while serving (a redb panic or corruption
//!   error in any transaction) turning the store read-only;
//! - [`readonly`]: opening the database without writing to it, and
//!   guarding redb calls that may panic on a damaged file;
//! - [`scan`]: reading every table of a database that may be damaged
//!   (fsck, the check before a mount, salvage).
//!
//! Must not touch: FUSE, path policy, working-copy pools, hashing threads.

pub(crate) mod batch;
pub(crate) mod commit;
pub mod compact;
pub(crate) mod content;
pub(crate) mod db;
pub(crate) mod fault;
pub(crate) mod migrate;
pub(crate) mod objects;
pub(crate) mod oidx;
pub mod pack;
pub(crate) mod readonly;
pub(crate) mod recovery;
pub mod remote;
pub(crate) mod source;
pub(crate) mod stored;
pub(crate) mod scan;

/// The pack id of a chunk that is only on the remote (a lazy clone's,
/// docs/FORMATS.md "Remote-only chunks").
pub use source::REMOTE_PACK;

/// The tables and records (public: fsck and integration tests read the
/// tables); they live in [`crate::schema`], below the inode table.
pub use crate::schema::{
    dec, dec_inode, enc, ChunkRef, InodeRec, JournalRecord, SnapEntry, MANIFEST_SIZES, OBJECTS, OBJECT_FILES, OBJECTS_V4, REFS, SNAP_INODES, CHUNKS, CHUNKS_V2, CHUNK_REFS_V2, DIRENTS, FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL,
    FS_NODUMP_FL, INODES, JOURNAL, KEPT_FLAGS, LOCAL_DIRENTS, LOCAL_INODES, LOCAL_SYMLINKS, LOCAL_XATTRS, MANIFESTS_V5, LIVE_ROOTS, LIVE_SEGMENTS, LIVE_SEGMENT_REFS, META, PACKS, SCHEMA_VERSION,
    SYMLINKS, XATTRS,
};
