//! Deferred trees (docs/FORMATS.md "Deferred tree", docs/DECISIONS.md
//! D54): a fork writes no per-file rows; its store records the commit its
//! live tree is (`meta` rows `lazy_tree` = format version 1 and
//! `lazy_base_0` … `lazy_base_3`, the commit id's four little-endian
//! 64-bit words) and its live tables hold only the root directory's
//! record. The tree's rows (inodes, entries, manifests, `snap_inodes`) are
//! written, with the chunk references of the live manifests, by the first
//! transaction that changes the live tree
//! (`snap::materialize::write_deferred`: the first write transaction of a
//! mount that changes something, `Store::begin_write` and the group
//! commit, or a switch of branch's transaction), which also removes the
//! marker. A mount before that serves the tree from its objects
//! (`snap::overlay`, D60).
//! Until then every reader of the live tables sees an empty root and
//! reference counts that match it (only objects hold chunks), which fsck
//! accepts; readers of commits (log, diff of commits, branch, fork,
//! gc, push) never read the live tables.
//!
//! Must not touch: the inode table in memory, working copies, packs (only
//! read through [`crate::store::objects`]).

use redb::{ReadableTable, WriteTransaction};

use crate::inode::ROOT;
use crate::schema::enc;
use crate::snap::object::{hex_id, ObjectId};

/// The `meta` key whose presence marks a deferred tree; its value is the
/// format version ([`LAZY_VERSION`]).
pub(crate) const LAZY_KEY: &str = "lazy_tree";
/// Version of the deferred-tree rows this build reads and writes.
pub(crate) const LAZY_VERSION: u64 = 1;
/// The `meta` keys of the commit id's four words, in order.
pub(crate) const BASE_KEYS: [&str; 4] = ["lazy_base_0", "lazy_base_1", "lazy_base_2", "lazy_base_3"];

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

/// Writes the root record a fork keeps beside the marker (`rec`: the
/// commit's root directory, empty until the tree is written).
pub(crate) fn root_row(txn: &WriteTransaction, rec: &crate::schema::InodeRec) -> Result<(), String> {
    txn.open_table(crate::schema::INODES).map_err(|x| x.to_string())?.insert(ROOT, &enc(rec)[..]).map_err(|x| x.to_string())?;
    Ok(())
}
