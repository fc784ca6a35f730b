//! Object index files (docs/FORMATS.md "Object index files, version 1",
//! D65): immutable sorted runs of `object_index` entries in
//! `STORE/packs/objects-<n:08x>.oidx`, recorded in `schema::OBJECT_FILES`,
//! so the index of a long history is shared by hard link like the packs
//! instead of being copied into every fork's database.
//!
//! - [`flush_if_due`]: a snapshot commit moves the table's rows into a new
//!   file once there are [`flush_at`] of them (file fdatasync'd and renamed
//!   into place before the commit's durable transaction records it);
//! - [`IdxFile`]: one file, read whole and checked once per store
//!   ([`Cache`], kept in `Packs`), looked up by binary search;
//! - [`rewrite`]: gc and compaction replace a file naming what they drop
//!   or move by a new one, in their transaction; [`unlink_retired`] after
//!   it commits;
//! - [`sweep`]: at store open, files no row records (a crash between a
//!   file's fsync and its commit) are removed;
//! - [`check`]: fsck's checks, damage named by file.
//!
//! Readers go through `store::objects` (`Objects::loc` falls through the
//! table to these files). Must not touch: the chunk index, refs, pack
//! files.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, WriteTransaction};

use crate::schema::{META, OBJECTS, OBJECT_FILES};

/// An `object_index` value: (pack id, offset of the bytes, length).
pub type Row = (u32, u64, u32);

/// A store's object index files: the `packs/` directory and the cache of
/// loaded files (`Packs::oidx` hands it out).
#[derive(Clone, Copy)]
pub(crate) struct Ix<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) cache: &'a Cache,
}

/// Magic at the start of every object index file.
pub const MAGIC: &[u8; 8] = b"RFSOIDX1";
/// Format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the header (magic, version, entry size, count, reserved).
pub const HEADER_LEN: usize = 32;
/// Bytes of one entry: id[32], pack u32, offset u64, len u32 (LE).
pub const ENTRY_LEN: usize = 48;
/// Bytes of the trailer (BLAKE3 of the header and entries).
pub const TRAILER_LEN: usize = 32;
/// `object_index` rows at which a snapshot commit moves them into a file:
/// 4 096 rows (0.19 MiB of file; D62, D65). [`flush_at`] reads the test
/// override.
pub const FLUSH_AT: u64 = 4096;

/// The flush threshold: [`FLUSH_AT`], or (tests only) the positive number
/// in `RINGFS_TEST_OIDX_FLUSH_AT`, read once per process.
pub fn flush_at() -> u64 {
    static V: OnceLock<u64> = OnceLock::new();
    *V.get_or_init(|| std::env::var("RINGFS_TEST_OIDX_FLUSH_AT").ok().and_then(|v| v.parse().ok()).filter(|v| *v > 0).unwrap_or(FLUSH_AT))
}

/// The file name of object index file `n`.
pub fn file_name(n: u64) -> String {
    format!("objects-{n:08x}.oidx")
}

/// The number of a file named like [`file_name`], or `None`.
pub fn file_number(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("objects-")?.strip_suffix(".oidx")?;
    if hex.len() < 8 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// One object index file, read whole and checked.
pub(crate) struct IdxFile {
    /// Its number (`objects-<n:08x>.oidx`).
    pub(crate) n: u64,
    /// Its length in bytes.
    pub(crate) file_len: u64,
    /// The entries, `ENTRY_LEN` bytes each, ascending by id.
    entries: Vec<u8>,
}

fn row_of(e: &[u8]) -> Row {
    let pack = u32::from_le_bytes(e[32..36].try_into().unwrap());
    let offset = u64::from_le_bytes(e[36..44].try_into().unwrap());
    let len = u32::from_le_bytes(e[44..48].try_into().unwrap());
    (pack, offset, len)
}

impl IdxFile {
    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.entries.len() / ENTRY_LEN
    }

    fn entry(&self, i: usize) -> &[u8] {
        &self.entries[i * ENTRY_LEN..(i + 1) * ENTRY_LEN]
    }

    /// Index of the first entry whose id is not below `id`.
    fn lower_bound(&self, id: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if &self.entry(mid)[..32] < id {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Object `id`'s row, if this file holds it.
    pub(crate) fn get(&self, id: &[u8]) -> Option<Row> {
        let i = self.lower_bound(id);
        (i < self.len() && &self.entry(i)[..32] == id).then(|| row_of(self.entry(i)))
    }

    /// Every entry, ascending by id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = ([u8; 32], Row)> + '_ {
        self.entries.chunks_exact(ENTRY_LEN).map(|e| (e[..32].try_into().unwrap(), row_of(e)))
    }

    /// The ids in `lo..=hi`, ascending.
    pub(crate) fn ids_in(&self, lo: &[u8; 32], hi: &[u8; 32]) -> impl Iterator<Item = [u8; 32]> + '_ {
        let start = self.lower_bound(lo);
        let hi = *hi;
        self.entries[start * ENTRY_LEN..].chunks_exact(ENTRY_LEN).map(|e| <[u8; 32]>::try_from(&e[..32]).unwrap()).take_while(move |id| *id <= hi)
    }
}

/// The bytes of a file holding `entries` (ascending by id, distinct).
fn encode(entries: &[([u8; 32], Row)]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN + entries.len() * ENTRY_LEN + TRAILER_LEN);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&(ENTRY_LEN as u32).to_le_bytes());
    b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    for (id, (pack, offset, len)) in entries {
        b.extend_from_slice(id);
        b.extend_from_slice(&pack.to_le_bytes());
        b.extend_from_slice(&offset.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
    }
    let h = blake3::hash(&b);
    b.extend_from_slice(h.as_bytes());
    b
}

/// Decodes and checks file `n`'s bytes: magic, version, entry size, length,
/// BLAKE3, ids strictly ascending, and the count `want` its row records.
/// Errors: what is wrong, as text.
pub(crate) fn decode(n: u64, b: &[u8], want: u64) -> Result<IdxFile, String> {
    if b.len() < HEADER_LEN + TRAILER_LEN || &b[..8] != MAGIC {
        return Err("not an object index file (no RFSOIDX1 header)".into());
    }
    let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
    if version != VERSION {
        return Err(format!("format version {version} (this ringfs reads {VERSION})"));
    }
    let esize = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    let count = u64::from_le_bytes(b[16..24].try_into().unwrap());
    if esize != ENTRY_LEN || count != want {
        return Err(format!("header says {count} entries of {esize} bytes, the object_files row {want} of {ENTRY_LEN}"));
    }
    let body = HEADER_LEN as u64 + count * ENTRY_LEN as u64;
    if b.len() as u64 != body + TRAILER_LEN as u64 {
        return Err(format!("{} bytes where {count} entries take {}", b.len(), body + TRAILER_LEN as u64));
    }
    let body = body as usize;
    if blake3::hash(&b[..body]).as_bytes() != &b[body..] {
        return Err("its bytes do not match its BLAKE3 trailer (damaged)".into());
    }
    let entries = b[HEADER_LEN..body].to_vec();
    let f = IdxFile { n, file_len: b.len() as u64, entries };
    for i in 1..f.len() {
        if f.entry(i - 1)[..32] >= f.entry(i)[..32] {
            return Err(format!("entries {} and {i} are not in ascending id order", i - 1));
        }
    }
    Ok(f)
}

/// Reads and checks file `n` in `dir` (`count`: its row's). Errors: text
/// naming the file, what is wrong and the fix.
pub(crate) fn load(dir: &Path, n: u64, count: u64) -> Result<IdxFile, String> {
    let path = dir.join(file_name(n));
    let store = dir.parent().unwrap_or(dir).display().to_string();
    let b = std::fs::read(&path).map_err(|e| format!("object index file {}: {e}; `ringfs fsck --store {store}` checks the store", path.display()))?;
    decode(n, &b, count).map_err(|e| format!("object index file {} is damaged: {e}; `ringfs fsck --store {store}` lists what it held", path.display()))
}

/// Object index files loaded by one store (kept in its `Packs`): each is
/// read and checked once.
#[derive(Default)]
pub(crate) struct Cache {
    files: Mutex<HashMap<u64, Arc<IdxFile>>>,
}

impl Cache {
    /// File `n` of `dir` (`count`: its row's), loaded once. Errors: as [`load`].
    pub(crate) fn get(&self, dir: &Path, n: u64, count: u64) -> Result<Arc<IdxFile>, String> {
        if let Some(f) = self.files.lock().unwrap_or_else(|p| p.into_inner()).get(&n) {
            if f.len() as u64 == count {
                return Ok(f.clone());
            }
        }
        let f = Arc::new(load(dir, n, count)?);
        self.files.lock().unwrap_or_else(|p| p.into_inner()).insert(n, f.clone());
        Ok(f)
    }

    fn insert(&self, f: IdxFile) {
        self.files.lock().unwrap_or_else(|p| p.into_inner()).insert(f.n, Arc::new(f));
    }

}

/// The rows of `object_files`: (number, entries, file length), ascending.
fn rows_of<T: ReadableTable<u64, (u64, u64)>>(t: &T) -> Result<Vec<(u64, u64, u64)>, String> {
    let mut v = Vec::new();
    for r in t.iter().map_err(|e| e.to_string())? {
        let (k, v2) = r.map_err(|e| e.to_string())?;
        let (count, len) = v2.value();
        v.push((k.value(), count, len));
    }
    Ok(v)
}

/// The files `object_files` of a read transaction records (none for a
/// store before schema 7): (number, entries, file length).
pub(crate) fn recorded(rtx: &ReadTransaction) -> Result<Vec<(u64, u64, u64)>, String> {
    match rtx.open_table(OBJECT_FILES) {
        Ok(t) => rows_of(&t),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(Vec::new()),
        Err(e) => Err(e.to_string()),
    }
}

/// The files a read transaction records, loaded through `packs`' cache.
/// Errors: redb, or a missing or damaged file (named).
pub(crate) fn files_read(rtx: &ReadTransaction, ix: Ix<'_>) -> Result<Vec<Arc<IdxFile>>, String> {
    recorded(rtx)?.into_iter().map(|(n, c, _)| ix.cache.get(ix.dir, n, c)).collect()
}

/// [`files_read`] in a write transaction.
pub(crate) fn files_in(txn: &WriteTransaction, ix: Ix<'_>) -> Result<Vec<Arc<IdxFile>>, String> {
    let rows = rows_of(&txn.open_table(OBJECT_FILES).map_err(|e| e.to_string())?)?;
    rows.into_iter().map(|(n, c, _)| ix.cache.get(ix.dir, n, c)).collect()
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `entries` (ascending, distinct) as a new file: the next number
/// of META `next_oidx`, written as `<name>.tmp`, fdatasync'd, renamed into
/// place and the directory fsynced; then recorded in `object_files` and
/// `next_oidx` advanced in `txn` (durable with it) and kept in the cache.
/// Returns its number. Errors: I/O (naming the file) or redb, as text.
fn write_new(txn: &WriteTransaction, ix: Ix<'_>, entries: &[([u8; 32], Row)]) -> Result<u64, String> {
    let e = |e: redb::Error| e.to_string();
    let mut meta = txn.open_table(META).map_err(|x| e(x.into()))?;
    let mut n = meta.get("next_oidx").map_err(|x| e(x.into()))?.map(|g| g.value()).unwrap_or(0);
    let mut files = txn.open_table(OBJECT_FILES).map_err(|x| e(x.into()))?;
    if let Some(last) = files.last().map_err(|x| e(x.into()))? {
        n = n.max(last.0.value() + 1);
    }
    let bytes = encode(entries);
    let dir = ix.dir;
    let (tmp, path) = (dir.join(format!("{}.tmp", file_name(n))), dir.join(file_name(n)));
    let io = |p: &Path, x: std::io::Error| format!("writing object index file {}: {x}", p.display());
    let f = crate::private::create(&tmp).map_err(|x| io(&tmp, x))?;
    f.write_all_at(&bytes, 0).map_err(|x| io(&tmp, x))?;
    f.sync_data().map_err(|x| io(&tmp, x))?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(|x| io(&path, x))?;
    sync_dir(dir).map_err(|x| io(dir, x))?;
    files.insert(n, (entries.len() as u64, bytes.len() as u64)).map_err(|x| e(x.into()))?;
    meta.insert("next_oidx", n + 1).map_err(|x| e(x.into()))?;
    let body = HEADER_LEN + entries.len() * ENTRY_LEN;
    ix.cache.insert(IdxFile { n, file_len: bytes.len() as u64, entries: bytes[HEADER_LEN..body].to_vec() });
    Ok(n)
}

/// At a snapshot commit (before its durable commit): when `object_index`
/// holds at least [`flush_at`] rows, writes them all into a new file and
/// empties the table, in `txn`. Returns the file's (number, entries), or
/// `None` when not due. Errors: I/O or redb, as text; an I/O error
/// (writing the file) leaves every table of `txn` as it was.
pub(crate) fn flush_if_due(txn: &WriteTransaction, ix: Ix<'_>) -> Result<Option<(u64, u64)>, String> {
    flush_at_least(txn, ix, flush_at())
}

/// [`flush_if_due`] with the threshold `min` (rows; at least 1).
pub(crate) fn flush_at_least(txn: &WriteTransaction, ix: Ix<'_>, min: u64) -> Result<Option<(u64, u64)>, String> {
    let e = |e: redb::Error| e.to_string();
    let (entries, odd) = {
        let t = txn.open_table(OBJECTS).map_err(|x| e(x.into()))?;
        if t.len().map_err(|x| e(x.into()))? < min.max(1) {
            return Ok(None);
        }
        let (mut entries, mut odd) = (Vec::new(), Vec::new());
        for r in t.iter().map_err(|x| e(x.into()))? {
            let (k, v) = r.map_err(|x| e(x.into()))?;
            match <[u8; 32]>::try_from(k.value()) {
                Ok(id) => entries.push((id, v.value())),
                // Not an id (fsck reports it): left as a row.
                Err(_) => odd.push((k.value().to_vec(), v.value())),
            }
        }
        (entries, odd)
    };
    let n = write_new(txn, ix, &entries)?;
    txn.delete_table(OBJECTS).map_err(|x| e(x.into()))?;
    let mut t = txn.open_table(OBJECTS).map_err(|x| e(x.into()))?;
    for (k, v) in odd {
        t.insert(&k[..], v).map_err(|x| e(x.into()))?;
    }
    Ok(Some((n, entries.len() as u64)))
}

/// Files replaced in a transaction, to unlink once it is durable
/// ([`unlink_retired`]); empty when no file changed.
#[derive(Debug, Default)]
#[must_use]
pub(crate) struct Retired(pub(crate) Vec<u64>);

/// Replaces every recorded file that names an id of `changes` (`None`: the
/// entry goes; `Some(row)`: the object's new place) by a new file holding
/// its other entries and the changed ones (none when nothing is left), in
/// `txn`. Returns the replaced files, to unlink after `txn` commits.
/// Errors: I/O or redb, as text.
pub(crate) fn rewrite(txn: &WriteTransaction, ix: Ix<'_>, changes: &HashMap<[u8; 32], Option<Row>>) -> Result<Retired, String> {
    let mut retired = Retired::default();
    if changes.is_empty() {
        return Ok(retired);
    }
    for f in files_in(txn, ix)? {
        if !changes.keys().any(|id| f.get(id).is_some()) {
            continue;
        }
        let entries: Vec<([u8; 32], Row)> = f
            .iter()
            .filter_map(|(id, row)| match changes.get(&id) {
                None => Some((id, row)),
                Some(None) => None,
                Some(Some(r)) => Some((id, *r)),
            })
            .collect();
        txn.open_table(OBJECT_FILES).map_err(|e| e.to_string())?.remove(f.n).map_err(|e| e.to_string())?;
        if !entries.is_empty() {
            write_new(txn, ix, &entries)?;
        }
        retired.0.push(f.n);
    }
    Ok(retired)
}

/// Unlinks the files `retired` names (after the transaction that replaced
/// them committed durably). A failure is logged: the file is unrecorded,
/// and [`sweep`] removes it at the next store open.
pub(crate) fn unlink_retired(ix: Ix<'_>, retired: Retired) {
    if retired.0.is_empty() {
        return;
    }
    // The cache keeps the retired file's entries: a read transaction begun
    // before the replacing commit may still name its number (numbers of
    // recorded files are never used again, so the entry cannot go stale).
    for n in retired.0 {
        let p = ix.dir.join(file_name(n));
        if let Err(e) = std::fs::remove_file(&p) {
            tracing::warn!("removing {}: {e} (removed at the next store open)", p.display());
        }
    }
    if let Err(e) = sync_dir(ix.dir) {
        tracing::warn!("syncing {}: {e}", ix.dir.display());
    }
}

/// At store open (no writer yet): removes the object index files in `dir`
/// that the committed `object_files` of `db` does not record, and
/// temporaries (a crash between a file's fsync and the commit recording
/// it, or after a commit that replaced it). Returns how many. Errors:
/// reading `db` or `dir`, as text (the caller logs it; nothing is lost).
pub(crate) fn sweep(db: &redb::Database, dir: &Path) -> Result<usize, String> {
    use redb::ReadableDatabase;
    let rtx = db.begin_read().map_err(|e| e.to_string())?;
    let keep: std::collections::HashSet<u64> = recorded(&rtx)?.into_iter().map(|r| r.0).collect();
    let mut gone: Vec<PathBuf> = Vec::new();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    for ent in rd.flatten() {
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        let stale = match file_number(name) {
            Some(n) => !keep.contains(&n),
            None => name.starts_with("objects-") && name.ends_with(".oidx.tmp"),
        };
        if stale {
            gone.push(ent.path());
        }
    }
    for p in &gone {
        tracing::info!("packs: removing {}, which no object_files row records (left by a crash)", p.display());
        std::fs::remove_file(p).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if !gone.is_empty() {
        sync_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Ok(gone.len())
}

/// fsck: loads and checks every file `rtx` records from `dir`, calling
/// `bad(place, what)` for a missing or damaged one (place
/// `packs/objects-<n>.oidx`). Returns the files that passed. Errors: redb.
pub(crate) fn check(rtx: &ReadTransaction, dir: &Path, bad: &mut dyn FnMut(String, String)) -> Result<Vec<IdxFile>, String> {
    let mut ok = Vec::new();
    for (n, count, len) in recorded(rtx)? {
        let place = format!("packs/{}", file_name(n));
        match std::fs::read(dir.join(file_name(n))) {
            Err(e) => bad(place, format!("recorded in object_files but cannot be read: {e}; its {count} objects cannot be found (restore the file from a copy of the store, or a fork that links it)")),
            Ok(b) => match decode(n, &b, count) {
                Err(e) => bad(place, format!("{e}; its {count} objects cannot be found (restore the file from a copy of the store, or a fork that links it)")),
                Ok(f) if f.file_len != len => bad(place, format!("{} bytes where object_files records {len}", f.file_len)),
                Ok(f) => ok.push(f),
            },
        }
    }
    Ok(ok)
}
