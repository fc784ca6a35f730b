//! The redb schema (version [`SCHEMA_VERSION`]): table layout, records,
//! their encoding, and the typed helpers shared by the group commit,
//! recovery and fsck. The layout is written down in docs/ARCHITECTURE.md.
//! It sits below the inode table (whose nodes hold [`InodeRec`]s) and the
//! store (which writes them), so neither imports the other for it.
//!
//! Owns: table definitions and record types. Must not touch: the in-memory
//! inode table, working copies, transactions of its own (the helpers work
//! in the caller's).

use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

/// Schema version this build writes and reads. Versions 1 to 6 are
/// migrated in place at mount (`store/migrate.rs`); the layout of each
/// version is in docs/FORMATS.md.
pub const SCHEMA_VERSION: u64 = 7;

/// meta: "schema", "store_id", "next_ino", "clean", "chunk_count",
/// "chunk_bytes", and since schema 3 "next_pack" (the next pack id).
pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// inodes: ino → bincode [`InodeRec`].
pub const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");
/// dirents: (parent, name) → (child, cookie).
pub const DIRENTS: TableDefinition<(u64, &[u8]), (u64, u64)> = TableDefinition::new("dirents");
/// manifests of schemas 1 to 5: ino → bincode `Vec<ChunkRef>`, the whole
/// live manifest in one row (read by the migration to schema 6, fsck,
/// salvage). Since schema 6 live manifests are `store::live`'s tables.
pub const MANIFESTS_V5: TableDefinition<u64, &[u8]> = TableDefinition::new("manifests");
/// live_manifests (since schema 6): ino → bincode `live::Root`, the
/// segments of the file's live manifest (`crate::live`, docs/FORMATS.md
/// "redb schema 7").
pub const LIVE_ROOTS: TableDefinition<u64, &[u8]> = TableDefinition::new("live_manifests");
/// live_segments (since schema 6): segment id (BLAKE3 of its bytes) →
/// bincode `live::Segment`. Immutable for an id.
pub const LIVE_SEGMENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("live_segments");
/// live_segment_refs (since schema 6): segment id → number of root entries
/// naming it (a row exists exactly when the segment does).
pub const LIVE_SEGMENT_REFS: TableDefinition<&[u8], u64> = TableDefinition::new("live_segment_refs");
/// chunk_index (since schema 3): BLAKE3 hash → (pack id, offset of the
/// bytes in the pack file, length, number of manifest entries naming it).
/// The bytes are in `STORE/packs/<pack:08x>.pack` (docs/FORMATS.md).
pub const CHUNKS: TableDefinition<&[u8], (u32, u64, u32, u64)> = TableDefinition::new("chunk_index");
/// packs (since schema 3): pack id → (end of its last committed record in
/// bytes, live bytes = record header + bytes of every chunk the index points
/// into it, sealed).
pub const PACKS: TableDefinition<u32, (u64, u64, bool)> = TableDefinition::new("packs");
/// Bytes of a pack record's header (hash, length), counted in live bytes.
pub const PACK_RECORD_HEADER: u64 = 36;
/// chunks of schemas 1 and 2: BLAKE3 hash → bytes (read by the migration).
pub const CHUNKS_V2: TableDefinition<&[u8], &[u8]> = TableDefinition::new("chunks");
/// chunk_refs of schemas 1 and 2: BLAKE3 hash → number of manifest entries.
pub const CHUNK_REFS_V2: TableDefinition<&[u8], u64> = TableDefinition::new("chunk_refs");
/// xattrs: (ino, name) → value.
pub const XATTRS: TableDefinition<(u64, &[u8]), &[u8]> = TableDefinition::new("xattrs");
/// symlinks: ino → target.
pub const SYMLINKS: TableDefinition<u64, &[u8]> = TableDefinition::new("symlinks");
/// journal: sync position → bincode [`JournalRecord`].
pub const JOURNAL: TableDefinition<u64, &[u8]> = TableDefinition::new("journal");

/// object_index (since schema 5): snapshot object id (BLAKE3 of the
/// encoded bytes, 32 bytes) → (pack id, offset of the encoded bytes in the
/// pack file, length): the object is a record of a pack file like a chunk
/// (docs/FORMATS.md "Snapshot objects, version 1", "redb schema 7"). Read
/// and written through `store::objects`. Immutable: an id is written once
/// and never changed (compaction moves its record).
pub const OBJECTS: TableDefinition<&[u8], (u32, u64, u32)> = TableDefinition::new("object_index");
/// object_files (since schema 7): object index file number → (entries,
/// file length in bytes): the immutable sorted files
/// `packs/objects-<n:08x>.oidx` holding `object_index` entries moved out
/// of the table (docs/FORMATS.md "Object index files"; `store::oidx`).
pub const OBJECT_FILES: TableDefinition<u64, (u64, u64)> = TableDefinition::new("object_files");
/// objects of schema 4: object id → the encoded object (read by the
/// migration to schema 5 and by fsck of a schema-4 store).
pub const OBJECTS_V4: TableDefinition<&[u8], &[u8]> = TableDefinition::new("objects");
/// refs (since schema 4): ref name → value. A branch (`main`) → its head
/// commit id (32 bytes); `HEAD` → `ref: <branch>` (the branch commits go to).
pub const REFS: TableDefinition<&str, &[u8]> = TableDefinition::new("refs");
/// snap_inodes (since schema 4): ino → bincode [`SnapEntry`], the object id
/// the inode had in the last snapshot and the names it had there, so a
/// commit reuses unchanged subtrees without walking them.
pub const SNAP_INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("snap_inodes");
/// manifest_sizes (since schema 4): ino → the file size its manifest was
/// cut at (the inode record's size can be newer while a file is written).
pub const MANIFEST_SIZES: TableDefinition<u64, u64> = TableDefinition::new("manifest_sizes");

/// pool: ino → side (0: the working-copy directory, 1: the local-only
/// directory). The empty backing files a clean shutdown left ready for the
/// next mount's creates (docs/FORMATS.md "Ready backing files"); read only
/// when meta "clean" is 1, rewritten by every clean shutdown. Optional: a
/// store without it has no ready files.
pub const POOL: TableDefinition<u64, u8> = TableDefinition::new("pool");

/// Local-only inodes (paths matching an ignore pattern) keep their metadata
/// in these tables, which are never journaled, hashed or synced; their
/// bytes live in the local backing directory. Same layouts as above.
pub const LOCAL_INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("local_inodes");
pub const LOCAL_DIRENTS: TableDefinition<(u64, &[u8]), (u64, u64)> = TableDefinition::new("local_dirents");
pub const LOCAL_XATTRS: TableDefinition<(u64, &[u8]), &[u8]> = TableDefinition::new("local_xattrs");
pub const LOCAL_SYMLINKS: TableDefinition<u64, &[u8]> = TableDefinition::new("local_symlinks");

/// Persistent attributes of an inode.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct InodeRec {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub blocks: u64,
    pub nlink: u32,
    pub rdev: u32,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    /// Directories: the parent ("..").
    pub parent: u64,
    /// Directories: the next readdir cookie to hand out (starts at 3).
    pub next_cookie: u64,
    /// Birth time (statx(2) `stx_btime`); (0, 0) if unknown (inodes made
    /// before schema 2). Since schema 2.
    pub btime: (i64, u32),
    /// Inode flags as FS_IOC_GETFLAGS reports them (`FS_IMMUTABLE_FL`,
    /// `FS_APPEND_FL`, …; see [`KEPT_FLAGS`]). Since schema 2.
    pub flags: u32,
}

/// Inode flags (linux/fs.h), defined with the other POSIX facts in
/// `posix.rs`.
pub use crate::posix::{FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL, FS_NODUMP_FL, KEPT_FLAGS};

/// The inode record of schema 1: [`InodeRec`] without `btime` and `flags`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct InodeRecV1 {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub blocks: u64,
    pub nlink: u32,
    pub rdev: u32,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    pub parent: u64,
    pub next_cookie: u64,
}

impl From<InodeRecV1> for InodeRec {
    fn from(r: InodeRecV1) -> InodeRec {
        InodeRec {
            mode: r.mode,
            uid: r.uid,
            gid: r.gid,
            size: r.size,
            blocks: r.blocks,
            nlink: r.nlink,
            rdev: r.rdev,
            atime: r.atime,
            mtime: r.mtime,
            ctime: r.ctime,
            parent: r.parent,
            next_cookie: r.next_cookie,
            btime: (0, 0),
            flags: 0,
        }
    }
}

impl InodeRec {
    /// Why this record cannot have been written by ringfs, or `None`: a
    /// file type that is none of the seven of stat(2), mode bits beyond the
    /// type, set-id, sticky and permission bits, or a time whose
    /// nanoseconds are 10^9 or more (utimensat(2) refuses those with
    /// EINVAL, so only damage makes them). Seconds are not bounded: any
    /// `i64` can be set. Used by fsck (damage it reports) and salvage.
    pub fn implausible(&self) -> Option<String> {
        let kinds = [libc::S_IFREG, libc::S_IFDIR, libc::S_IFLNK, libc::S_IFCHR, libc::S_IFBLK, libc::S_IFIFO, libc::S_IFSOCK];
        if !kinds.contains(&(self.mode & libc::S_IFMT)) {
            return Some(format!("mode {:o} has no known file type", self.mode));
        }
        if self.mode & !(libc::S_IFMT | 0o7777) != 0 {
            return Some(format!("mode {:o} has bits beyond the file type and permissions", self.mode));
        }
        for (name, t) in [("atime", self.atime), ("mtime", self.mtime), ("ctime", self.ctime), ("btime", self.btime)] {
            if t.1 >= 1_000_000_000 {
                return Some(format!("{name} nanoseconds {} not below 10^9", t.1));
            }
        }
        None
    }
}

/// Decodes an inode record written by schema `schema` (1 or 2).
pub fn dec_inode(b: &[u8], schema: u64) -> Result<InodeRec, String> {
    if schema == 1 {
        dec::<InodeRecV1>(b).map(InodeRec::from)
    } else {
        dec::<InodeRec>(b)
    }
}

/// One piece of a file: its offset, length and BLAKE3 hash.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChunkRef {
    pub offset: u64,
    pub len: u32,
    pub hash: [u8; 32],
}

/// `st_blocks` (512-byte units) of a file whose data is `chunks` (sorted
/// by offset, holes between them): the 4 KiB pages the chunks touch, as a
/// working copy restored sparse from them allocates on ext4 — not the size,
/// which would count a sparse file's holes (stat(2) `st_blocks`).
pub fn data_blocks(chunks: &[ChunkRef]) -> u64 {
    let (mut pages, mut next) = (0u64, 0u64);
    for c in chunks.iter().filter(|c| c.len > 0) {
        let first = (c.offset / 4096).max(next);
        let end = (c.offset + c.len as u64).div_ceil(4096);
        if end > first {
            pages += end - first;
            next = end;
        }
    }
    pages * 8
}

/// A journal entry: what changed at a sync position. Within one commit,
/// changes to the same inode or name are coalesced into one record.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum JournalRecord {
    /// A name now points at `child` (created, linked or renamed to).
    Linked { parent: u64, name: Vec<u8>, child: u64 },
    /// A name was removed (unlinked, or renamed away).
    Unlinked { parent: u64, name: Vec<u8> },
    /// Attributes (or xattrs) of an inode changed.
    Attrs { ino: u64 },
    /// An inode was freed.
    Removed { ino: u64 },
    /// A file's content was stored: its size, chunk count and a hash of
    /// its manifest (since schema 6: BLAKE3 of its live root's bytes).
    Content { ino: u64, size: u64, chunks: u32, manifest_hash: [u8; 32] },
}

pub fn enc<T: Serialize>(v: &T) -> Vec<u8> {
    bincode::serialize(v).expect("bincode serialize")
}

pub fn dec<'a, T: Deserialize<'a>>(b: &'a [u8]) -> Result<T, String> {
    bincode::deserialize(b).map_err(|e| e.to_string())
}

pub(crate) type StoreResult<T> = std::result::Result<T, redb::Error>;

/// What a snapshot remembers of an inode ([`SNAP_INODES`]): its object id
/// in the last commit (a file manifest or directory object; zero for other
/// kinds) and the (parent, name) entries that named it there.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SnapEntry {
    pub id: [u8; 32],
    pub links: Vec<(u64, Vec<u8>)>,
}

/// Drops one reference per manifest entry. A chunk whose count reaches
/// zero leaves the index and its pack's live bytes fall by its record.
/// Returns (chunks removed, bytes removed).
pub(crate) fn drop_refs(
    chunks: &mut Table<&[u8], (u32, u64, u32, u64)>,
    packs: &mut Table<u32, (u64, u64, bool)>,
    manifest: &[ChunkRef],
) -> StoreResult<(u64, u64)> {
    let mut removed = (0u64, 0u64);
    for c in manifest {
        let Some((pack, off, len, refs)) = chunks.get(&c.hash[..])?.map(|g| g.value()) else { continue };
        if refs <= 1 {
            chunks.remove(&c.hash[..])?;
            removed.0 += 1;
            removed.1 += len as u64;
            let row = packs.get(pack)?.map(|g| g.value());
            if let Some((total, live, sealed)) = row {
                packs.insert(pack, (total, live.saturating_sub(PACK_RECORD_HEADER + len as u64), sealed))?;
            }
        } else {
            chunks.insert(&c.hash[..], (pack, off, len, refs - 1))?;
        }
    }
    Ok(removed)
}

/// Reads a meta value.
pub(crate) fn meta_get(txn: &WriteTransaction, key: &str) -> StoreResult<Option<u64>> {
    let t = txn.open_table(META)?;
    let v = t.get(key)?.map(|g| g.value());
    Ok(v)
}

/// Adds signed deltas to the chunk counters in meta.
pub(crate) fn bump_chunk_counters(txn: &WriteTransaction, dcount: i64, dbytes: i64) -> StoreResult<()> {
    if dcount == 0 && dbytes == 0 {
        return Ok(());
    }
    let mut t = txn.open_table(META)?;
    let c = t.get("chunk_count")?.map(|g| g.value()).unwrap_or(0);
    let b = t.get("chunk_bytes")?.map(|g| g.value()).unwrap_or(0);
    t.insert("chunk_count", (c as i64 + dcount).max(0) as u64)?;
    t.insert("chunk_bytes", (b as i64 + dbytes).max(0) as u64)?;
    Ok(())
}

/// Creates every table so read transactions find them.
pub(crate) fn create_tables(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(META)?;
    txn.open_table(INODES)?;
    txn.open_table(DIRENTS)?;
    txn.open_table(LIVE_ROOTS)?;
    txn.open_table(LIVE_SEGMENTS)?;
    txn.open_table(LIVE_SEGMENT_REFS)?;
    txn.open_table(CHUNKS)?;
    txn.open_table(PACKS)?;
    txn.open_table(XATTRS)?;
    txn.open_table(SYMLINKS)?;
    txn.open_table(JOURNAL)?;
    txn.open_table(LOCAL_INODES)?;
    txn.open_table(LOCAL_DIRENTS)?;
    txn.open_table(LOCAL_XATTRS)?;
    txn.open_table(LOCAL_SYMLINKS)?;
    txn.open_table(OBJECTS)?;
    txn.open_table(OBJECT_FILES)?;
    txn.open_table(REFS)?;
    txn.open_table(SNAP_INODES)?;
    txn.open_table(MANIFEST_SIZES)?;
    Ok(())
}

/// Lower-case hex of a hash (chunk names in messages).
pub(crate) fn hex(b: &[u8]) -> String {
    // Not format!("{:02x}") per byte: a clone writes the hex of every chunk
    // it records, and that formatting was 15 % of its CPU (D79).
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(DIGITS[usize::from(x >> 4)] as char);
        s.push(DIGITS[usize::from(x & 15)] as char);
    }
    s
}
