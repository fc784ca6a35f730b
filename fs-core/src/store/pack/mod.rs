//! Pack files: chunk bytes outside the B-tree (pack format v1,
//! docs/FORMATS.md). `STORE/packs/<id:08x>.pack` holds a 16-byte header and
//! then records `hash[32] | len u32 LE | bytes[len]`; the redb index
//! (`schema::CHUNKS`) maps a chunk's hash to its [`Loc`] (pack, offset of
//! its bytes, len) and `schema::PACKS` keeps each pack's live bytes.
//!
//! - [`Packs::append`]: the one open pack, appended under a mutex, sealed
//!   at [`SEAL_AT`] (a new pack file, and an fsync of the directory);
//! - [`Packs::sync`]: fdatasync of the open pack and of every pack sealed
//!   since the last sync, called before every durable redb commit that may
//!   reference new bytes, so a durable index entry points at durable bytes;
//! - [`Packs::read`]: pread through a small cache of open descriptors; a
//!   pack compacted away is `NotFound` and the caller looks the chunk up
//!   again;
//! - [`Packs::open`]: at store open, pack files the index does not know
//!   (a crash before their first commit, or after a compaction's commit)
//!   are deleted and the open pack's torn tail is truncated (never a
//!   sealed pack's);
//! - [`scan_pack`]: record by record, for salvage, fsck and compaction;
//! - [`check`]: fsck's checks of the index against the pack files.
//!
//! Must not touch: manifests, the inode table, working copies.

pub(crate) mod check;
pub(crate) mod usable;
mod scan;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use redb::{ReadableDatabase, ReadableTable, WriteTransaction};

use crate::schema::{StoreResult, META, PACKS, PACK_RECORD_HEADER};

pub use scan::scan_pack;
pub(crate) use scan::header as scan_header;
pub(crate) use scan::{scan_pack_from, scan_pack_until};

/// Magic at the start of every pack file.
pub const MAGIC: &[u8; 8] = b"RFSPACK1";
/// Pack format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the pack header (magic, version u32 LE, reserved u32).
pub const HEADER_LEN: u64 = 16;
/// Bytes before a record's chunk bytes (hash, len u32 LE).
pub const RECORD_HEADER: u64 = PACK_RECORD_HEADER;
/// The open pack is sealed (never written again) once the next record
/// would take it past this size: 32 MiB, a unit of tens of MiB for upload
/// and compaction (docs/DECISIONS.md).
pub const SEAL_AT: u64 = 32 << 20;
/// The largest chunk a record may hold (a scan refuses longer lengths as
/// torn): 2 MiB, `chunk::MAX_CHUNK`, with room to spare.
pub const MAX_RECORD: u64 = 4 << 20;
/// Open pack descriptors kept for readers.
const READER_CACHE: usize = 16;
/// [`Packs::read_many`]: records at most this far apart (bytes) share a read.
pub(crate) const SPAN_GAP: u64 = 64 << 10;
/// [`Packs::read_many`]: the longest read it makes of several records (bytes).
pub(crate) const SPAN_MAX: u64 = 1 << 20;

/// Where a chunk's bytes are: pack id, offset of the bytes in the pack file,
/// their length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub pack: u32,
    pub offset: u64,
    pub len: u32,
}

/// A pack's row in `schema::PACKS`: `total` = end of its last committed
/// record (bytes), `live` = bytes of the records the index points at
/// (header + chunk bytes), `sealed` = no longer appended to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackInfo {
    pub total: u64,
    pub live: u64,
    pub sealed: bool,
}

/// `<id:08x>.pack`.
pub fn pack_name(id: u32) -> String {
    format!("{id:08x}.pack")
}

/// The id of a file named like [`pack_name`], or `None`.
pub fn pack_id(name: &str) -> Option<u32> {
    let hex = name.strip_suffix(".pack")?;
    if hex.len() != 8 {
        return None;
    }
    u32::from_str_radix(hex, 16).ok()
}

/// The pack ids of the files in `dir` (none if it does not exist).
pub fn pack_files(dir: &Path) -> std::io::Result<BTreeSet<u32>> {
    let mut ids = BTreeSet::new();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ids),
        Err(e) => return Err(e),
    };
    for e in rd {
        if let Some(id) = e?.file_name().to_str().and_then(pack_id) {
            ids.insert(id);
        }
    }
    Ok(ids)
}

/// Reads the bytes at `loc` from the pack files in `packs_dir` (tests and
/// tools reading a store no daemon holds). Errors: as [`std::fs::File::open`]
/// and pread; `UnexpectedEof` past the pack's end.
pub fn read_chunk(packs_dir: &Path, loc: Loc) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; loc.len as usize];
    File::open(packs_dir.join(pack_name(loc.pack)))?.read_exact_at(&mut buf, loc.offset)?;
    Ok(buf)
}

/// `schema::PACKS` and META `next_pack` as committed in `db` (empty for a
/// store before schema 3).
pub(crate) fn known_packs(db: &redb::Database) -> std::result::Result<(BTreeMap<u32, PackInfo>, u32), redb::Error> {
    let rtx = db.begin_read()?;
    let mut known = BTreeMap::new();
    match rtx.open_table(PACKS) {
        Ok(t) => {
            for r in t.iter()? {
                let (k, v) = r?;
                let (total, live, sealed) = v.value();
                known.insert(k.value(), PackInfo { total, live, sealed });
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let next = match rtx.open_table(META) {
        Ok(t) => t.get("next_pack")?.map(|g| g.value()).unwrap_or(0),
        Err(redb::TableError::TableDoesNotExist(_)) => 0,
        Err(e) => return Err(e.into()),
    };
    Ok((known, next.min(u32::MAX as u64) as u32))
}

struct OpenPack {
    id: u32,
    file: Arc<File>,
    /// Bytes written (the next record's offset).
    len: u64,
}

struct Writer {
    next_id: u32,
    open: Option<OpenPack>,
    /// Packs sealed since the last [`Packs::sync`], still to fdatasync.
    unsynced: Vec<Arc<File>>,
    /// The open pack was written since the last sync.
    dirty: bool,
    /// Packs no longer appended to whose PACKS row may not say sealed yet.
    rolled: BTreeSet<u32>,
    /// [`SEAL_AT`] (smaller in tests).
    seal_at: u64,
    /// Made by [`Packs::read_only`]: appends are refused (it knows no
    /// pack ids, so a new pack could take one in use).
    read_only: bool,
}

/// The pack files of one store: the open pack's writer and the readers.
pub(crate) struct Packs {
    dir: PathBuf,
    writer: Mutex<Writer>,
    readers: Mutex<Vec<(u32, Arc<File>)>>,
    /// The object index files this store has loaded (`store::oidx`).
    oidx_cache: crate::store::oidx::Cache,
    _tmp: Option<tempfile::TempDir>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Packs {
    /// Opens the pack directory `dir` (created if missing) of a store whose
    /// index knows the packs `known` and META `next_pack`: pack files the
    /// index does not know are deleted; the open pack (the highest unsealed
    /// one) is scanned and its tail past the last valid record truncated;
    /// other unsealed packs are treated as sealed. `tmp` is kept alive with
    /// the handle (a memory store's directory). Errors: I/O on the
    /// directory or the open pack.
    pub(crate) fn open(dir: PathBuf, tmp: Option<tempfile::TempDir>, known: &BTreeMap<u32, PackInfo>, next_pack: u32) -> std::io::Result<Packs> {
        if !dir.exists() {
            crate::private::create_dir_all(&dir)?;
            if let Some(p) = dir.parent() {
                File::open(p)?.sync_all()?;
            }
        }
        let files = pack_files(&dir)?;
        let mut removed = 0;
        for id in files.iter().filter(|id| !known.contains_key(id)) {
            tracing::info!("packs: removing {}, which no index entry uses (left by a crash)", pack_name(*id));
            std::fs::remove_file(dir.join(pack_name(*id)))?;
            removed += 1;
        }
        if removed > 0 {
            File::open(&dir)?.sync_all()?;
        }
        let mut rolled: BTreeSet<u32> = known.iter().filter(|(_, i)| !i.sealed).map(|(id, _)| *id).collect();
        let mut open = None;
        if let Some(id) = rolled.iter().next_back().copied() {
            let path = dir.join(pack_name(id));
            if files.contains(&id) {
                // Only bytes past what a durable commit recorded can be a
                // torn tail: those are scanned (the records before were
                // synced before that commit, and are neither read nor
                // hashed here: damage to them is disk corruption, found
                // when a chunk is read, and by `ringfs fsck --full`), and
                // nothing the index knows is ever cut. After a clean
                // shutdown the file ends there: nothing is read (D61).
                let durable = known[&id].total;
                let valid = scan_pack_from(&path, durable, |_, _, _| true)?;
                let f = OpenOptions::new().read(true).write(true).open(&path)?;
                let len = f.metadata()?.len();
                let keep = valid.max(durable).min(len);
                if len > keep {
                    tracing::warn!("packs: {} ends in {} bytes of a torn record (a crash while appending): truncated", pack_name(id), len - keep);
                    f.set_len(keep)?;
                    f.sync_data()?;
                }
                if len < durable {
                    tracing::error!(
                        "packs: {} is {len} bytes, shorter than the {durable} bytes the index expects: kept as it is; `ringfs fsck --full --store {}` (unmounted) lists the damaged chunks, the files' working copies still hold their bytes",
                        pack_name(id),
                        dir.parent().unwrap_or(&dir).display()
                    );
                }
                if keep < SEAL_AT {
                    rolled.remove(&id);
                    open = Some(OpenPack { id, file: Arc::new(f), len: keep });
                }
            } else {
                tracing::error!("packs: the open pack {} is missing: its chunks are lost (ringfs fsck lists them)", path.display());
            }
        }
        let max_seen = known.keys().chain(files.iter()).next_back().map(|m| m + 1).unwrap_or(0);
        let next_id = next_pack.max(max_seen).max(known.keys().next_back().map(|m| m + 1).unwrap_or(0));
        Ok(Packs {
            dir,
            writer: Mutex::new(Writer { next_id, open, unsynced: Vec::new(), dirty: false, rolled, seal_at: SEAL_AT, read_only: false }),
            readers: Mutex::new(Vec::new()),
            oidx_cache: Default::default(),
            _tmp: tmp,
        })
    }

    /// A handle that only reads the packs in `dir` (fsck, salvage): no
    /// open pack, nothing deleted or truncated.
    pub(crate) fn read_only(dir: PathBuf) -> Packs {
        Packs {
            dir,
            writer: Mutex::new(Writer { next_id: 0, open: None, unsynced: Vec::new(), dirty: false, rolled: BTreeSet::new(), seal_at: SEAL_AT, read_only: true }),
            readers: Mutex::new(Vec::new()),
            oidx_cache: Default::default(),
            _tmp: None,
        }
    }

    /// Seals packs at `bytes` instead of [`SEAL_AT`] (tests).
    #[cfg(test)]
    pub(crate) fn set_seal_at(&self, bytes: u64) {
        lock(&self.writer).seal_at = bytes;
    }

    /// The object index files of this store (`store::oidx`): its pack
    /// directory and the cache of the files loaded.
    pub(crate) fn oidx(&self) -> crate::store::oidx::Ix<'_> {
        crate::store::oidx::Ix { dir: &self.dir, cache: &self.oidx_cache }
    }

    /// The pack directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of pack `id`.
    pub(crate) fn path(&self, id: u32) -> PathBuf {
        self.dir.join(pack_name(id))
    }

    /// The id of the pack being appended to, if one is open.
    pub(crate) fn open_id(&self) -> Option<u32> {
        lock(&self.writer).open.as_ref().map(|o| o.id)
    }

    /// Appends one record (`hash`, `bytes`) to the open pack, sealing it
    /// and starting a new one first if the record would take it past
    /// [`SEAL_AT`]. Not durable until [`Packs::sync`]. Returns where the
    /// bytes are. Errors: I/O (ENOSPC…); a failed append leaves at most a
    /// torn record that the next append overwrites.
    pub(crate) fn append(&self, hash: &[u8; 32], bytes: &[u8]) -> std::io::Result<Loc> {
        let mut w = lock(&self.writer);
        if w.read_only {
            return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "the store's packs were opened read-only (a bug: nothing may be appended here)"));
        }
        let need = RECORD_HEADER + bytes.len() as u64;
        if w.open.as_ref().is_none_or(|o| o.len > HEADER_LEN && o.len + need > w.seal_at) {
            self.roll(&mut w)?;
        }
        let o = w.open.as_mut().expect("an open pack after roll");
        let mut head = [0u8; RECORD_HEADER as usize];
        head[..32].copy_from_slice(hash);
        head[32..].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
        o.file.write_all_at(&head, o.len)?;
        o.file.write_all_at(bytes, o.len + RECORD_HEADER)?;
        let loc = Loc { pack: o.id, offset: o.len + RECORD_HEADER, len: bytes.len() as u32 };
        o.len += need;
        w.dirty = true;
        Ok(loc)
    }

    /// Seals the open pack (if any) and creates the next one. On failure
    /// (ENOSPC…) the open pack stays as it was and the half-made file goes.
    fn roll(&self, w: &mut Writer) -> std::io::Result<()> {
        let id = w.next_id;
        let next = id.checked_add(1).ok_or_else(|| std::io::Error::other("pack ids exhausted"))?;
        let path = self.path(id);
        let made = (|| {
            let f = match OpenOptions::new().read(true).write(true).create_new(true).mode(crate::private::FILE_MODE).open(&path) {
                // Left by an earlier failed attempt of ours: never in the index.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::fs::remove_file(&path)?;
                    OpenOptions::new().read(true).write(true).create_new(true).mode(crate::private::FILE_MODE).open(&path)?
                }
                r => r?,
            };
            f.write_all_at(&scan::header(), 0)?;
            File::open(&self.dir)?.sync_all()?;
            Ok(f)
        })();
        let f = match made {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        if let Some(o) = w.open.take() {
            w.unsynced.push(o.file);
            w.rolled.insert(o.id);
        }
        w.next_id = next;
        w.open = Some(OpenPack { id, file: Arc::new(f), len: HEADER_LEN });
        w.dirty = true;
        Ok(())
    }

    /// Has anything been appended (or a pack sealed) since the last
    /// [`Packs::sync`]? (A hint: an append may land right after.)
    pub(crate) fn needs_sync(&self) -> bool {
        let w = lock(&self.writer);
        w.dirty || !w.unsynced.is_empty()
    }

    /// Makes every appended byte durable: fdatasync of the packs sealed
    /// since the last sync and of the open pack if written. Call before a
    /// durable redb commit. Errors: the first failed fdatasync (the packs
    /// not yet synced stay queued).
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        let mut w = lock(&self.writer);
        while let Some(f) = w.unsynced.last() {
            f.sync_data()?;
            w.unsynced.pop();
        }
        if w.dirty {
            if let Some(o) = &w.open {
                o.file.sync_data()?;
            }
            w.dirty = false;
        }
        Ok(())
    }

    /// Reads the bytes at `loc` into `buf` (resized to `loc.len`). Errors:
    /// `NotFound` if the pack is gone (compacted away after the caller
    /// looked the chunk up: look again), `UnexpectedEof` past its end, I/O.
    pub(crate) fn read(&self, loc: Loc, buf: &mut Vec<u8>) -> std::io::Result<()> {
        let f = self.reader(loc.pack)?;
        buf.resize(loc.len as usize, 0);
        f.read_exact_at(buf, loc.offset)
    }

    /// Reads many records in few system calls: `locs` sorted by (pack,
    /// offset); neighbours less than [`SPAN_GAP`] bytes apart are read in
    /// one `pread` of at most [`SPAN_MAX`] bytes (a record longer than that
    /// alone), and `each(i, bytes)` is called with each record's index in
    /// `locs` and its bytes, in order. Errors: as [`Packs::read`] (the
    /// error's index is the first record of the span that failed), or
    /// `each`'s (index `usize::MAX`).
    pub(crate) fn read_many<E>(&self, locs: &[Loc], mut each: impl FnMut(usize, &[u8]) -> Result<(), E>) -> Result<(), (usize, Result<std::io::Error, E>)> {
        let mut buf = Vec::new();
        let mut i = 0;
        while i < locs.len() {
            let (start, pack) = (locs[i].offset, locs[i].pack);
            let mut end = start + locs[i].len as u64;
            let mut j = i + 1;
            while j < locs.len() && locs[j].pack == pack && locs[j].offset >= start && locs[j].offset <= end + SPAN_GAP {
                let e = locs[j].offset + locs[j].len as u64;
                if e.max(end) - start > SPAN_MAX {
                    break;
                }
                end = end.max(e);
                j += 1;
            }
            self.read(Loc { pack, offset: start, len: (end - start) as u32 }, &mut buf).map_err(|e| (i, Ok(e)))?;
            for (k, l) in locs.iter().enumerate().take(j).skip(i) {
                let o = (l.offset - start) as usize;
                each(k, &buf[o..o + l.len as usize]).map_err(|e| (usize::MAX, Err(e)))?;
            }
            i = j;
        }
        Ok(())
    }

    fn reader(&self, id: u32) -> std::io::Result<Arc<File>> {
        let mut c = lock(&self.readers);
        if let Some(i) = c.iter().position(|(p, _)| *p == id) {
            let e = c.remove(i);
            let f = e.1.clone();
            c.insert(0, e);
            return Ok(f);
        }
        drop(c);
        let f = Arc::new(File::open(self.path(id))?);
        let mut c = lock(&self.readers);
        c.insert(0, (id, f.clone()));
        c.truncate(READER_CACHE);
        Ok(f)
    }

    /// Unlinks pack `id` (after a durable commit removed it from the index)
    /// and forgets its cached descriptor; readers holding it finish.
    pub(crate) fn remove(&self, id: u32) -> std::io::Result<()> {
        lock(&self.readers).retain(|(p, _)| *p != id);
        match std::fs::remove_file(self.path(id)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        File::open(&self.dir)?.sync_all()
    }

    /// Seals the open pack now (the next append starts a new one), so that
    /// `ringfs gc` can reclaim the dead bytes of the pack being appended to.
    pub(crate) fn seal_open(&self) {
        let mut w = lock(&self.writer);
        if let Some(o) = w.open.take() {
            w.unsynced.push(o.file);
            w.rolled.insert(o.id);
            w.dirty = true;
        }
    }

    /// Records in `txn` what appends since the last call did: `touched`
    /// maps a pack id to (live bytes added, end of its last record); the
    /// PACKS rows of packs no longer open say sealed; META `next_pack`.
    pub(crate) fn note(&self, txn: &WriteTransaction, touched: &BTreeMap<u32, (u64, u64)>) -> StoreResult<()> {
        let mut w = lock(&self.writer);
        let open = w.open.as_ref().map(|o| o.id);
        let mut t = txn.open_table(PACKS)?;
        for (&id, &(add, end)) in touched {
            let row = t.get(id)?.map(|g| g.value());
            let (total, live, sealed) = row.unwrap_or((HEADER_LEN, 0, false));
            t.insert(id, (total.max(end), live + add, sealed || Some(id) != open))?;
        }
        let rolled: Vec<u32> = w.rolled.iter().copied().collect();
        for id in rolled {
            let row = t.get(id)?.map(|g| g.value());
            match row {
                Some((total, live, false)) => {
                    t.insert(id, (total, live, true))?;
                }
                _ => {
                    w.rolled.remove(&id);
                }
            }
        }
        drop(t);
        let mut m = txn.open_table(META)?;
        let next = m.get("next_pack")?.map(|g| g.value()).unwrap_or(0);
        if (w.next_id as u64) > next {
            m.insert("next_pack", w.next_id as u64)?;
        }
        Ok(())
    }
}
