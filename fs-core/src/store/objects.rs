//! Snapshot objects' bytes by id (since schema 5, docs/FORMATS.md "redb schema
//! 6"): an object is a record of the store's pack files, like a chunk
//! (record hash = object id), and `schema::OBJECTS` (`object_index`) maps
//! its id to where its bytes are (pack, offset, length). A snapshot commit
//! therefore appends its new objects to the open pack that it fdatasyncs
//! anyway, and writes one small row per object instead of the object; a
//! fork links the packs and copies the rows.
//!
//! Readers of an object by id go through [`Objects::get`] /
//! [`Objects::need`] (snap, transfer, fsck, gc); the passes that read every
//! record of a pack (compaction, fsck's pack check, a fork counting chunk
//! references, `snap::check`) read the packs themselves. Every writer goes
//! through
//! [`ObjectsMut::put`] and [`ObjectsMut::delete`], which keep the pack
//! table's live bytes (`schema::PACKS`) in step, so compaction keeps live
//! objects and drops dead ones.
//!
//! Since schema 7 the entries of a long history are mostly in object
//! index files (`store::oidx`, flushed by snapshot commits): [`Objects`]
//! loads the files its transaction records and [`Objects::loc`] falls
//! through the table to them; [`Objects::all`] and [`Objects::ids_in`]
//! range over both; [`ObjectsMut::delete`] of an object in a file has the
//! file rewritten at [`ObjectsMut::finish`].
//!
//! Must not touch: the chunk index, manifests, refs (callers' business).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use redb::{ReadTransaction, ReadableTable, Table, WriteTransaction};

use crate::schema::{hex, OBJECTS, PACKS, PACK_RECORD_HEADER};
use crate::store::oidx::{IdxFile, Retired};
use crate::store::pack::{Loc, Packs};

/// An `object_index` row: (pack id, offset of the bytes, length).
pub use crate::store::oidx::Row;

/// Object bytes by id through an `object_index` table (`T`: a read-only or
/// writable table), the object index files the transaction records, and
/// the store's packs.
pub(crate) struct Objects<'p, T> {
    /// The `object_index` table: the rows not flushed into a file (range
    /// scans over every id go through [`Objects::all`] / [`Objects::ids_in`]).
    pub(crate) index: T,
    files: Vec<Arc<IdxFile>>,
    packs: &'p Packs,
}

/// Opens `object_index` of a read transaction and loads the object index
/// files it records. Errors: redb, or a missing or damaged file (named),
/// as text.
pub(crate) fn read<'p>(
    rtx: &ReadTransaction,
    packs: &'p Packs,
) -> Result<Objects<'p, redb::ReadOnlyTable<&'static [u8], Row>>, String> {
    Ok(Objects {
        index: rtx.open_table(OBJECTS).map_err(|e| e.to_string())?,
        files: crate::store::oidx::files_read(rtx, packs.oidx())?,
        packs,
    })
}

/// Opens `object_index` of a write transaction for reading (no writes)
/// and loads the files it records. Errors: as [`read`].
pub(crate) fn read_in<'t, 'p>(
    txn: &'t WriteTransaction,
    packs: &'p Packs,
) -> Result<Objects<'p, Table<'t, &'static [u8], Row>>, String> {
    Ok(Objects {
        index: txn.open_table(OBJECTS).map_err(|e| e.to_string())?,
        files: crate::store::oidx::files_in(txn, packs.oidx())?,
        packs,
    })
}

impl<T: ReadableTable<&'static [u8], Row>> Objects<'_, T> {
    /// Where object `id`'s bytes are, if stored: its `object_index` row,
    /// else its entry in an object index file. Errors: redb, as text.
    pub(crate) fn loc(&self, id: &[u8; 32]) -> Result<Option<Loc>, String> {
        let row = match self.index.get(&id[..]).map_err(|e| e.to_string())? {
            Some(g) => Some(g.value()),
            None => self.in_files(id).map(|(_, r)| r),
        };
        Ok(row.map(|(pack, offset, len)| Loc { pack, offset, len }))
    }

    /// Object `id`'s entry in a file: (file number, row).
    fn in_files(&self, id: &[u8; 32]) -> Option<(u64, Row)> {
        self.files.iter().find_map(|f| f.get(id).map(|r| (f.n, r)))
    }

    /// The object index files of this transaction.
    pub(crate) fn files(&self) -> &[Arc<IdxFile>] {
        &self.files
    }

    /// Every stored object: the table's rows (32-byte keys; fsck reports
    /// others) in id order, then each file's entries in id order. Errors:
    /// redb, as text.
    pub(crate) fn all(&self) -> Result<Vec<([u8; 32], Row)>, String> {
        let mut v = Vec::new();
        for r in self.index.iter().map_err(|e| e.to_string())? {
            let (k, row) = r.map_err(|e| e.to_string())?;
            if let Ok(id) = <[u8; 32]>::try_from(k.value()) {
                v.push((id, row.value()));
            }
        }
        for f in &self.files {
            v.extend(f.iter());
        }
        Ok(v)
    }

    /// The stored ids in `lo..=hi` (rows and files), ascending. Errors:
    /// redb, as text.
    pub(crate) fn ids_in(&self, lo: &[u8; 32], hi: &[u8; 32]) -> Result<Vec<[u8; 32]>, String> {
        let mut v = Vec::new();
        for r in self.index.range(&lo[..]..=&hi[..]).map_err(|e| e.to_string())? {
            let (k, _) = r.map_err(|e| e.to_string())?;
            if let Ok(id) = <[u8; 32]>::try_from(k.value()) {
                v.push(id);
            }
        }
        for f in &self.files {
            v.extend(f.ids_in(lo, hi));
        }
        v.sort_unstable();
        v.dedup();
        Ok(v)
    }

    /// Is object `id` stored? Errors: redb, as text.
    pub(crate) fn contains(&self, id: &[u8; 32]) -> Result<bool, String> {
        Ok(self.loc(id)?.is_some())
    }

    /// Object `id`'s encoded bytes, `None` if not stored; checked against
    /// its id (an object's id is the BLAKE3 of its bytes, as
    /// `snap::object::id_of`: damaged bytes are never decoded and served,
    /// D71). Errors: redb or reading the pack (a pack compacted away since
    /// this transaction began is `NotFound`: try again with a new
    /// transaction), or bytes that do not hash to the id, as text naming
    /// the object and the pack.
    pub(crate) fn get(&self, id: &[u8; 32]) -> Result<Option<Vec<u8>>, String> {
        let Some(loc) = self.loc(id)? else {
            return Ok(None);
        };
        let mut buf = Vec::new();
        self.packs.read(loc, &mut buf).map_err(|e| {
            format!(
                "object {}: reading {} at {}: {e}",
                hex(id),
                crate::store::pack::pack_name(loc.pack),
                loc.offset
            )
        })?;
        check(id, loc, &buf)?;
        Ok(Some(buf))
    }

    /// [`Objects::get`], a missing object being an error ("object … is
    /// missing").
    pub(crate) fn need(&self, id: &[u8; 32]) -> Result<Vec<u8>, String> {
        self.get(id)?
            .ok_or_else(|| format!("object {} is missing", hex(id)))
    }
}

/// Writes objects in one write transaction: appends records to the open
/// pack, inserts their rows, and at [`ObjectsMut::finish`] records in
/// `PACKS` what the appends and deletions changed. The caller syncs the
/// packs (`Packs::sync`) before committing the transaction durably.
pub(crate) struct ObjectsMut<'t, 'p> {
    pub(crate) objects: Objects<'p, Table<'t, &'static [u8], Row>>,
    touched: BTreeMap<u32, (u64, u64)>,
    dead: BTreeMap<u32, u64>,
    /// Objects deleted from files (their files are rewritten at finish).
    file_dead: HashMap<[u8; 32], Option<Row>>,
}

/// Opens `object_index` of `txn` for writing. Errors: redb, as text.
pub(crate) fn write<'t, 'p>(
    txn: &'t WriteTransaction,
    packs: &'p Packs,
) -> Result<ObjectsMut<'t, 'p>, String> {
    Ok(ObjectsMut {
        objects: read_in(txn, packs)?,
        touched: BTreeMap::new(),
        dead: BTreeMap::new(),
        file_dead: HashMap::new(),
    })
}

impl<'t, 'p> ObjectsMut<'t, 'p> {
    /// Stores `bytes` as object `id` (its BLAKE3 hash, not checked here)
    /// unless stored already. Returns whether it was new. Errors: the
    /// append (ENOSPC…) or redb, as text.
    pub(crate) fn put(&mut self, id: &[u8; 32], bytes: &[u8]) -> Result<bool, String> {
        if self.objects.contains(id)? {
            return Ok(false);
        }
        let loc = self
            .objects
            .packs
            .append(id, bytes)
            .map_err(|e| format!("appending object {} to a pack: {e}", hex(id)))?;
        self.objects
            .index
            .insert(&id[..], (loc.pack, loc.offset, loc.len))
            .map_err(|e| e.to_string())?;
        let t = self.touched.entry(loc.pack).or_default();
        t.0 += PACK_RECORD_HEADER + loc.len as u64;
        t.1 = loc.offset + loc.len as u64;
        Ok(true)
    }

    /// Deletes object `id` (its record's bytes become dead in its pack; an
    /// entry of a file is dropped when [`ObjectsMut::finish`] rewrites the
    /// file). Returns its length if it was stored. Errors: redb, as text.
    pub(crate) fn delete(&mut self, id: &[u8; 32]) -> Result<Option<u32>, String> {
        let row = self.objects.index.remove(&id[..]).map_err(|e| e.to_string())?.map(|g| g.value());
        let row = match row {
            Some(r) => Some(r),
            None if self.file_dead.contains_key(id) => None,
            None => self.objects.in_files(id).map(|(_, r)| r),
        };
        let Some((pack, _, len)) = row else {
            return Ok(None);
        };
        if self.objects.in_files(id).is_some() {
            self.file_dead.insert(*id, None);
        }
        *self.dead.entry(pack).or_default() += PACK_RECORD_HEADER + len as u64;
        Ok(Some(len))
    }

    /// Records the appends (`Packs::note`) and the bytes deleted objects
    /// leave dead in their packs' `PACKS` rows, and rewrites the object
    /// index files that named deleted objects. Returns the replaced files,
    /// for `oidx::unlink_retired` once `txn` is durable. Errors: redb or
    /// writing a file, as text.
    pub(crate) fn finish(self, txn: &WriteTransaction) -> Result<Retired, String> {
        let packs = self.objects.packs;
        drop(self.objects);
        let retired = crate::store::oidx::rewrite(txn, packs.oidx(), &self.file_dead)?;
        packs.note(txn, &self.touched).map_err(|e| e.to_string())?;
        if !self.dead.is_empty() {
            let mut t = txn.open_table(PACKS).map_err(|e| e.to_string())?;
            for (id, d) in self.dead {
                let row = t.get(id).map_err(|e| e.to_string())?.map(|g| g.value());
                if let Some((total, live, sealed)) = row {
                    t.insert(id, (total, live.saturating_sub(d), sealed))
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(retired)
    }
}

/// Writes `objects` (id, encoded bytes; ids not checked here) that
/// `object_index` lacks into a new pack file `packs_dir/<id:08x>.pack`,
/// fdatasync'd with its directory, and records them: their rows, the
/// pack's `PACKS` row (sealed) and META `next_pack` past `id`. For stores
/// written without an open pack (an import into an unmounted store, a
/// clone being built). Returns how many objects were written (0: no file
/// made). Errors: I/O or redb, as text naming the file.
pub(crate) fn put_as_pack(
    txn: &WriteTransaction,
    packs_dir: &std::path::Path,
    id: u32,
    objects: &[([u8; 32], Vec<u8>)],
) -> Result<u64, String> {
    use std::os::unix::fs::FileExt;
    let mut index = txn.open_table(OBJECTS).map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut file = crate::store::pack::scan_header().to_vec();
    for (oid, b) in objects {
        if index.get(&oid[..]).map_err(|e| e.to_string())?.is_some() || !seen.insert(*oid) {
            continue;
        }
        file.extend_from_slice(oid);
        file.extend_from_slice(&(b.len() as u32).to_le_bytes());
        rows.push((*oid, (id, file.len() as u64, b.len() as u32)));
        file.extend_from_slice(b);
    }
    if rows.is_empty() {
        return Ok(0);
    }
    let path = packs_dir.join(crate::store::pack::pack_name(id));
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let f = crate::private::options()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(io)?;
    f.write_all_at(&file, 0).map_err(io)?;
    f.sync_data().map_err(io)?;
    std::fs::File::open(packs_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("{}: {e}", packs_dir.display()))?;
    for (oid, row) in &rows {
        index.insert(&oid[..], *row).map_err(|e| e.to_string())?;
    }
    let total = file.len() as u64;
    let live = total - crate::store::pack::HEADER_LEN;
    txn.open_table(PACKS)
        .map_err(|e| e.to_string())?
        .insert(id, (total, live, true))
        .map_err(|e| e.to_string())?;
    let mut m = txn
        .open_table(crate::schema::META)
        .map_err(|e| e.to_string())?;
    let next = m
        .get("next_pack")
        .map_err(|e| e.to_string())?
        .map(|g| g.value())
        .unwrap_or(0);
    m.insert("next_pack", next.max(id as u64 + 1))
        .map_err(|e| e.to_string())?;
    Ok(rows.len() as u64)
}

/// Whether `bytes`, read from `loc`, are object `id`'s: an object's id is
/// the BLAKE3 of its bytes (as `snap::object::id_of`; D71). Errors: the
/// line naming the damaged object, where it is, `ringfs fsck` and the fix.
pub(crate) fn check(id: &[u8; 32], loc: Loc, bytes: &[u8]) -> Result<(), String> {
    if blake3::hash(bytes).as_bytes() == id {
        return Ok(());
    }
    Err(format!(
        "object {} is damaged: its {} bytes in {} at {} do not hash to its id; run `ringfs fsck` on the store, and restore the pack from a copy or a fork that links it (same inode)",
        hex(id),
        loc.len,
        crate::store::pack::pack_name(loc.pack),
        loc.offset
    ))
}
