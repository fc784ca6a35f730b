//! Deferred trees (docs/FORMATS.md "Deferred tree", docs/DECISIONS.md
//! D54): a fork writes no per-file rows; its store records the commit its
//! live tree is (`meta` rows `lazy_tree` = format version 1 and
//! `lazy_base_0` … `lazy_base_3`, the commit id's four little-endian
//! 64-bit words) and its live tables hold only the root directory's
//! record. The tree's rows (inodes, entries, manifests, `snap_inodes`) are
//! written, with the chunk references of the live manifests, by the first
//! transaction that needs the live tables: the mount's loading transaction
//! ([`crate::store::recovery::load`]) or a switch of branch
//! (`snap::switch`), in that same transaction, which also removes the
//! marker. Until then every reader of the live tables sees an empty root
//! and reference counts that match it (only objects hold chunks), which
//! fsck accepts; readers of commits (log, diff of commits, branch, fork,
//! gc, push) never read the live tables.
//!
//! Must not touch: the inode table in memory, working copies, packs (only
//! read through [`crate::store::objects`]).

use redb::{ReadableDatabase, ReadableTable, WriteTransaction};

use crate::inode::ROOT;
use crate::schema::{enc, hex, CHUNKS, META};
use crate::snap::materialize::{write_tree, Written};
use crate::snap::object::{hex_id, ObjectId};
use crate::snap::refs::commit_obj;
use crate::store::pack::Packs;

/// The `meta` key whose presence marks a deferred tree; its value is the
/// format version ([`LAZY_VERSION`]).
pub(crate) const LAZY_KEY: &str = "lazy_tree";
/// Version of the deferred-tree rows this build reads and writes.
pub(crate) const LAZY_VERSION: u64 = 1;
const BASE_KEYS: [&str; 4] = ["lazy_base_0", "lazy_base_1", "lazy_base_2", "lazy_base_3"];

/// Records in `meta` that the live tree is commit `c`'s, not yet written.
pub(crate) fn mark(meta: &mut redb::Table<&str, u64>, c: &ObjectId) -> Result<(), redb::StorageError> {
    meta.insert(LAZY_KEY, LAZY_VERSION)?;
    for (i, k) in BASE_KEYS.iter().enumerate() {
        meta.insert(*k, u64::from_le_bytes(c[8 * i..8 * i + 8].try_into().unwrap()))?;
    }
    Ok(())
}

/// The commit a deferred tree stands for, if the store has one. Errors:
/// redb, a version this build does not know, missing id words (as text).
pub(crate) fn pending<T: ReadableTable<&'static str, u64>>(meta: &T) -> Result<Option<ObjectId>, String> {
    let get = |k: &str| meta.get(k).map(|g| g.map(|g| g.value())).map_err(|e| e.to_string());
    match get(LAZY_KEY)? {
        None => Ok(None),
        Some(LAZY_VERSION) => {
            let mut id = [0u8; 32];
            for (i, k) in BASE_KEYS.iter().enumerate() {
                let w = get(k)?.ok_or_else(|| format!("meta row {k} is missing (the store's deferred tree names no commit): run `ringfs fsck`"))?;
                id[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
            }
            Ok(Some(id))
        }
        Some(v) => Err(format!("the store's deferred tree has format version {v} (this ringfs reads {LAZY_VERSION}): use a newer ringfs")),
    }
}

/// Writes a deferred tree into the live tables of `txn` (which must hold
/// no synced inode but the root), adds the live manifests' chunk
/// references, sets `next_ino` and removes the marker. `None`: the store
/// had no deferred tree (nothing written). Errors: a missing or
/// undecodable object, a chunk missing from the index, redb (as text).
pub(crate) fn materialize(txn: &WriteTransaction, packs: &Packs) -> Result<Option<Written>, String> {
    let e = |x: redb::Error| x.to_string();
    let Some(c) = pending(&txn.open_table(META).map_err(|x| e(x.into()))?)? else { return Ok(None) };
    let w = {
        let objects = crate::store::objects::read_in(txn, packs)?;
        let commit = commit_obj(&objects, &c).map_err(|x| format!("the deferred tree's commit {}: {x}", hex_id(&c)))?;
        let mut load = |id: &ObjectId| -> Result<Vec<u8>, String> { objects.need(id) };
        write_tree(txn, &mut load, &commit, ROOT + 1)?
    };
    {
        let mut chunks = txn.open_table(CHUNKS).map_err(|x| e(x.into()))?;
        for (h, n) in &w.uses {
            let Some((p, o, l, r)) = chunks.get(&h[..]).map_err(|x| e(x.into()))?.map(|g| g.value()) else {
                return Err(format!("chunk {} of the deferred tree is not in the chunk index (run `ringfs fsck`)", hex(h)));
            };
            chunks.insert(&h[..], (p, o, l, r + n)).map_err(|x| e(x.into()))?;
        }
        let mut m = txn.open_table(META).map_err(|x| e(x.into()))?;
        let next = m.get("next_ino").map_err(|x| e(x.into()))?.map(|g| g.value()).unwrap_or(2);
        m.insert("next_ino", next.max(w.next_ino)).map_err(|x| e(x.into()))?;
        m.remove(LAZY_KEY).map_err(|x| e(x.into()))?;
        for k in BASE_KEYS {
            m.remove(k).map_err(|x| e(x.into()))?;
        }
    }
    Ok(Some(w))
}

/// Regular files and directories (the root included) of commit `c`'s
/// tree, reading its directory objects only (`load`: bytes by id).
/// Errors: a missing or undecodable directory object.
pub(crate) fn count(load: &mut dyn FnMut(&ObjectId) -> Result<Vec<u8>, String>, c: &crate::snap::object::CommitObj) -> Result<(u64, u64), String> {
    use crate::snap::object::{dec_dir, EntryKind, Target};
    let (mut files, mut dirs) = (0u64, 0u64);
    let mut stack = vec![c.root];
    while let Some(id) = stack.pop() {
        dirs += 1;
        let d = dec_dir(&load(&id)?).map_err(|x| format!("directory object {}: {x}", hex_id(&id)))?;
        for en in &d.entries {
            match (&en.kind, &en.target) {
                (EntryKind::Dir, Target::Object(sub)) => stack.push(*sub),
                (EntryKind::File, _) => files += 1,
                _ => {}
            }
        }
    }
    Ok((files, dirs))
}

/// The root record a fork writes beside the marker: the commit's root
/// directory (mode, owner, times), empty until the tree is written.
pub(crate) fn root_row(txn: &WriteTransaction, meta: &crate::snap::object::Meta) -> Result<(), String> {
    let rec = crate::snap::materialize::root_rec_of(meta);
    txn.open_table(crate::schema::INODES).map_err(|x| x.to_string())?.insert(ROOT, &enc(&rec)[..]).map_err(|x| x.to_string())?;
    Ok(())
}

/// [`materialize`] in its own durable transaction of `db`, if the store
/// has a deferred tree (checked first in a read transaction: a store
/// without one pays no write). `true`: the tree was written. Errors: as
/// [`materialize`], redb (as text).
pub(crate) fn materialize_db(db: &redb::Database, packs: &Packs) -> Result<bool, String> {
    {
        let rtx = db.begin_read().map_err(|x| x.to_string())?;
        let meta = match rtx.open_table(META) {
            Ok(m) => m,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(false),
            Err(x) => return Err(x.to_string()),
        };
        if pending(&meta)?.is_none() {
            return Ok(false);
        }
    }
    let mut txn = db.begin_write().map_err(|x| x.to_string())?;
    txn.set_durability(redb::Durability::Immediate).map_err(|x| x.to_string())?;
    let w = materialize(&txn, packs)?;
    txn.commit().map_err(|x| x.to_string())?;
    if let Some(w) = &w {
        tracing::info!("fork's tree written into the store's tables: {} files, {} directories", w.files, w.dirs);
    }
    Ok(w.is_some())
}
