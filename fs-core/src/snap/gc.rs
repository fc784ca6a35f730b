//! Garbage collection of snapshot objects ([`collect`]): every object no
//! ref reaches is deleted, and the chunk references of the deleted file
//! manifest objects are dropped, in one durable transaction (a crash
//! leaves the store as before or as after). Chunks whose count reaches zero
//! leave the index and their bytes become dead in their packs, for the
//! compaction that follows (`ringfs gc`: [`crate::Fs::gc`],
//! [`crate::gc_store`]).
//!
//! What stays (the roots of the mark): the commit every ref names (each
//! branch; `HEAD` is symbolic, or a commit id when detached), through all
//! parents, root directories, directories, file manifests and the nodes of
//! version 2 manifests ([`super::manifest::child_nodes`]); and the tree
//! of the store's last commit (the root inode's `snap_inodes` row names its
//! root directory object), whose unchanged subtrees the next commit reuses
//! (so it stays even when the branch that commit went to was deleted,
//! until the next commit replaces it); and the exec points a running
//! `ringfs exec` call has pinned ([`super::point`]). Chunks of the live tree
//! are counted by the live manifests and are not touched here.
//!
//! Cost: each distinct reachable commit and directory object is read once
//! (a subtree already marked is not walked again), and each reachable file
//! manifest object and manifest node once (to find its nodes), plus one
//! pass over the `object_index` table's keys
//! and the bytes of the objects deleted (read from their packs; their
//! records become dead bytes there, which compaction drops).
//!
//! Owns: which objects are garbage. Must not touch: live manifests, the
//! inode tables, pack files (compaction does).

use std::collections::HashSet;
use std::time::Instant;

use redb::{Durability, ReadableTable, WriteTransaction};

use super::manifest::{child_nodes, own_chunks, KIND_NODE};
use super::object::*;
use super::{se, SnapError};
use crate::schema::*;
use crate::store::db::Store;
use crate::types::StoreError;

pub use crate::store::compact::SnapGcReport;

/// `ringfs gc --store DIR` on a store no daemon holds: the snapshot
/// objects no ref reaches collected ([`collect`]), then every sealed pack
/// with dead bytes compacted. Errors: those of
/// [`crate::store::compact::gc_store_with`] ([`StoreError::Locked`] while a
/// daemon holds it, [`StoreError::Corrupt`], [`StoreError::Io`]; a
/// collection that failed is an `Io` error naming the database, and
/// nothing was deleted).
pub fn gc_store(dir: &std::path::Path) -> Result<crate::GcReport, StoreError> {
    crate::store::compact::gc_store_with(dir, |store| {
        let r = collect(store).map_err(|e| e.to_string())?;
        failpoint("gc-after-commit");
        Ok(r)
    })
}

/// Test-only crash points: `RINGFS_FAILPOINT=NAME` makes the process kill
/// itself (SIGKILL, as `kill -9`) when it reaches the point so named.
/// Points: `gc-after-mark` (objects marked, nothing written),
/// `gc-before-commit` (deletions made in the open transaction, not
/// committed), `gc-after-commit` (snapshot GC committed, pack compaction
/// not begun), `restore-after-manifests` (a restore's manifests made
/// durable, its tree not: fs/restore.rs). docs/DECISIONS.md D36.
pub(crate) fn failpoint(name: &str) {
    if failpoint_armed(name) {
        tracing::warn!("failpoint {name}: killing the process");
        // SAFETY: raise(2) with a valid signal number has no memory effects.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
}

/// Is crash point `name` set in `RINGFS_FAILPOINT` (test-only)? For a
/// caller that must prepare the crash before [`failpoint`].
pub(crate) fn failpoint_armed(name: &str) -> bool {
    std::env::var_os("RINGFS_FAILPOINT").is_some_and(|v| v == name)
}

/// Deletes every snapshot object the refs and the last commit's tree do not reach
/// and drops the chunk references of the deleted file manifest objects,
/// in one durable transaction (nothing is written when nothing is
/// garbage). A store without snapshot tables has nothing to collect.
/// Errors: [`SnapError::Store`] (redb; a reachable commit or directory
/// object missing or not decoding — the store is damaged and nothing is
/// deleted, `ringfs fsck` names it).
pub(crate) fn collect(store: &Store) -> Result<SnapGcReport, SnapError> {
    let t = Instant::now();
    let mut txn = store.begin_write().map_err(se)?;
    txn.set_durability(Durability::Immediate).map_err(se)?;
    let marked = mark(&txn, &store.packs, &store.pinned_roots())?;
    failpoint("gc-after-mark");
    let mut rep = SnapGcReport::default();
    let mut dropped: Vec<ChunkRef> = Vec::new();
    let retired;
    {
        let mut objects = crate::store::objects::write(&txn, &store.packs).map_err(SnapError::Store)?;
        let mut dead: Vec<ObjectId> = Vec::new();
        let mut total = 0u64;
        // The table's rows and the object index files' entries (keys
        // that are not ids are left: fsck reports them).
        for (id, _) in objects.objects.all().map_err(SnapError::Store)? {
            total += 1;
            if !marked.contains(&id) {
                dead.push(id);
            }
        }
        rep.objects_kept = total - dead.len() as u64;
        for id in dead {
            let Some(b) = objects.objects.get(&id).map_err(SnapError::Store)? else { continue };
            objects.delete(&id).map_err(SnapError::Store)?;
            rep.objects_deleted += 1;
            match kind_of(&b) {
                // Exactly the references `write_built` added for it: one
                // per chunk entry a manifest or node holds itself.
                Ok(KIND_FILE | KIND_NODE) => {
                    let own = own_chunks(&b).map_err(|e| SnapError::Store(format!("object {}: {e}", hex_id(&id))))?;
                    rep.refs_dropped += own.len() as u64;
                    dropped.extend(own.into_iter().map(|hash| ChunkRef { offset: 0, len: 0, hash }));
                }
                Ok(KIND_COMMIT) => rep.commits_deleted += 1,
                _ => {}
            }
        }
        // Their records' bytes are dead in their packs (compaction drops
        // them); the files naming them are rewritten without them.
        retired = objects.finish(&txn).map_err(SnapError::Store)?;
    }
    if rep.objects_deleted == 0 {
        txn.abort().map_err(se)?;
        rep.time = t.elapsed();
        return Ok(rep);
    }
    {
        let mut chunks = txn.open_table(CHUNKS).map_err(se)?;
        let mut packs = txn.open_table(PACKS).map_err(se)?;
        (rep.chunks_freed, rep.chunk_bytes_freed) = drop_refs(&mut chunks, &mut packs, &dropped).map_err(se)?;
    }
    bump_chunk_counters(&txn, -(rep.chunks_freed as i64), -(rep.chunk_bytes_freed as i64)).map_err(se)?;
    failpoint("gc-before-commit");
    // Earlier non-durable group commits become durable with this one: the
    // pack bytes they name are made durable first (as a snapshot commit does).
    store.packs.sync().map_err(se)?;
    txn.commit().map_err(se)?;
    crate::store::oidx::unlink_retired(store.packs.oidx(), retired);
    store.bump_counters(-(rep.chunks_freed as i64), -(rep.chunk_bytes_freed as i64));
    rep.time = t.elapsed();
    Ok(rep)
}

/// Where a marked id came from: its kind when the object naming it says
/// so, `None` for the `snap_inodes` root (a directory object, or nothing
/// stored).
type Pending = (ObjectId, Option<u8>);

/// The ids of every object reachable from the refs, the pinned exec points
/// and the root inode's `snap_inodes` row. Commit, directory, file manifest objects and manifest
/// nodes are read once each.
fn mark(txn: &WriteTransaction, packs: &crate::store::pack::Packs, pins: &[ObjectId]) -> Result<HashSet<ObjectId>, SnapError> {
    let objects = crate::store::objects::read_in(txn, packs).map_err(SnapError::Store)?;
    let mut marked: HashSet<ObjectId> = HashSet::new();
    // Exec points in use (`super::point`): root directory objects.
    let mut stack: Vec<Pending> = pins.iter().map(|id| (*id, Some(KIND_DIR))).collect();
    for r in txn.open_table(REFS).map_err(se)?.iter().map_err(se)? {
        let (_, v) = r.map_err(se)?;
        // A symbolic ref (`ref: NAME`) names a branch, marked by its own row.
        if let Ok(id) = <ObjectId>::try_from(v.value()) {
            stack.push((id, Some(KIND_COMMIT)));
        }
    }
    // The tree of the store's last commit: its root directory object is
    // the root inode's (1) row (rows of inodes removed by a commit built from
    // scratch can linger; they are never read again, so they keep nothing).
    let root = txn.open_table(SNAP_INODES).map_err(se)?.get(1u64).map_err(se)?.map(|g| g.value().to_vec());
    if let Some(v) = root {
        let row: SnapEntry = dec(&v).map_err(|e| SnapError::Store(format!("snap_inodes row of the root: {e}")))?;
        if row.id != [0; 32] {
            stack.push((row.id, None));
        }
    }
    walk(&objects, &mut stack, &mut marked)?;
    Ok(marked)
}

/// Marks everything reachable from `stack`, skipping what is marked.
fn walk<T: ReadableTable<&'static [u8], crate::store::objects::Row>>(
    objects: &crate::store::objects::Objects<'_, T>,
    stack: &mut Vec<Pending>,
    marked: &mut HashSet<ObjectId>,
) -> Result<(), SnapError> {
    while let Some((id, kind)) = stack.pop() {
        if marked.contains(&id) {
            continue;
        }
        let Some(b) = objects.get(&id).map_err(SnapError::Store)? else {
            match kind {
                // The snap_inodes root naming nothing stored: nothing to
                // keep (the next commit builds the tree again).
                None => continue,
                _ => return Err(SnapError::Store(format!("object {} is reachable but missing: nothing collected (ringfs fsck --store DIR lists the damage)", hex_id(&id)))),
            }
        };
        marked.insert(id);
        let bad = |e: String| SnapError::Store(format!("object {}: {e}: nothing collected (ringfs fsck --store DIR lists the damage)", hex_id(&id)));
        match kind_of(&b).map_err(bad)? {
            KIND_COMMIT => {
                let c = dec_commit(&b).map_err(bad)?;
                stack.push((c.root, Some(KIND_DIR)));
                stack.extend(c.parents.into_iter().map(|p| (p, Some(KIND_COMMIT))));
            }
            KIND_DIR => {
                for e in dec_dir(&b).map_err(bad)?.entries {
                    if let Target::Object(c) = e.target {
                        stack.push((c, Some(if e.kind == EntryKind::Dir { KIND_DIR } else { KIND_FILE })));
                    }
                }
            }
            // A version 2 manifest's nodes (none for version 1).
            KIND_FILE | KIND_NODE => stack.extend(child_nodes(&b).map_err(bad)?.into_iter().map(|c| (c, Some(KIND_NODE)))),
            _ => {}
        }
    }
    Ok(())
}

/// Tests: sets ref `name` to `value` (a 32-byte commit id or `ref: NAME`),
/// or deletes it (`None`), in a durable transaction.
#[cfg(test)]
pub(crate) fn set_ref_for_tests(store: &Store, name: &str, value: Option<&[u8]>) {
    let mut txn = store.begin_write().unwrap();
    txn.set_durability(Durability::Immediate).unwrap();
    {
        let mut refs = txn.open_table(REFS).unwrap();
        match value {
            Some(v) => {
                refs.insert(name, v).unwrap();
            }
            None => {
                refs.remove(name).unwrap();
            }
        }
    }
    txn.commit().unwrap();
}
