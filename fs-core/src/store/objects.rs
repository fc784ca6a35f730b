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
//! Must not touch: the chunk index, manifests, refs (callers' business).

use std::collections::BTreeMap;

use redb::{ReadTransaction, ReadableTable, Table, WriteTransaction};

use crate::schema::{hex, OBJECTS, PACKS, PACK_RECORD_HEADER};
use crate::store::pack::{Loc, Packs};

/// An `object_index` row: (pack id, offset of the bytes, length).
pub type Row = (u32, u64, u32);

/// Object bytes by id through an `object_index` table (`T`: a read-only or
/// writable table) and the store's packs.
pub(crate) struct Objects<'p, T> {
    /// The `object_index` table (public for range scans over ids).
    pub(crate) index: T,
    packs: &'p Packs,
}

/// Opens `object_index` of a read transaction. Errors: redb, as text.
pub(crate) fn read<'p>(
    rtx: &ReadTransaction,
    packs: &'p Packs,
) -> Result<Objects<'p, redb::ReadOnlyTable<&'static [u8], Row>>, String> {
    Ok(Objects {
        index: rtx.open_table(OBJECTS).map_err(|e| e.to_string())?,
        packs,
    })
}

/// Opens `object_index` of a write transaction for reading (no writes).
/// Errors: redb, as text.
pub(crate) fn read_in<'t, 'p>(
    txn: &'t WriteTransaction,
    packs: &'p Packs,
) -> Result<Objects<'p, Table<'t, &'static [u8], Row>>, String> {
    Ok(Objects {
        index: txn.open_table(OBJECTS).map_err(|e| e.to_string())?,
        packs,
    })
}

impl<T: ReadableTable<&'static [u8], Row>> Objects<'_, T> {
    /// Where object `id`'s bytes are, if stored. Errors: redb, as text.
    pub(crate) fn loc(&self, id: &[u8; 32]) -> Result<Option<Loc>, String> {
        Ok(self
            .index
            .get(&id[..])
            .map_err(|e| e.to_string())?
            .map(|g| {
                let (pack, offset, len) = g.value();
                Loc { pack, offset, len }
            }))
    }

    /// Is object `id` stored? Errors: redb, as text.
    pub(crate) fn contains(&self, id: &[u8; 32]) -> Result<bool, String> {
        Ok(self.loc(id)?.is_some())
    }

    /// Object `id`'s encoded bytes, `None` if not stored. Errors: redb or
    /// reading the pack (a pack compacted away since this transaction
    /// began is `NotFound`: try again with a new transaction), as text
    /// naming the object and the pack.
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

    /// Inserts a row for bytes already in a pack this store records (a
    /// fork's copy of its origin's rows; the caller counts the pack's live
    /// bytes). Errors: redb, as text.
    pub(crate) fn insert_row(&mut self, id: &[u8; 32], row: Row) -> Result<(), String> {
        self.objects
            .index
            .insert(&id[..], row)
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Deletes object `id` (its record's bytes become dead in its pack).
    /// Returns its length if it was stored. Errors: redb, as text.
    pub(crate) fn delete(&mut self, id: &[u8; 32]) -> Result<Option<u32>, String> {
        let Some((pack, _, len)) = self
            .objects
            .index
            .remove(&id[..])
            .map_err(|e| e.to_string())?
            .map(|g| g.value())
        else {
            return Ok(None);
        };
        *self.dead.entry(pack).or_default() += PACK_RECORD_HEADER + len as u64;
        Ok(Some(len))
    }

    /// Records the appends (`Packs::note`) and the bytes deleted objects
    /// leave dead in their packs' `PACKS` rows. Errors: redb, as text.
    pub(crate) fn finish(self, txn: &WriteTransaction) -> Result<(), String> {
        let packs = self.objects.packs;
        drop(self.objects);
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
        Ok(())
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
    let f = std::fs::OpenOptions::new()
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
