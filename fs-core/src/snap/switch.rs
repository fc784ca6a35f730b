//! `ringfs mount --branch NAME` on a store checked out on another branch:
//! the live tree becomes NAME's head in place ([`switch_store`]), before
//! the store is opened for serving. Refused when the live tree holds
//! anything its branch head does not (commit it, or fork), so nothing is
//! lost; `HEAD` then names NAME and `BASE` its head.
//!
//! Owns: replacing the synced live tables by a commit's tree. Must not
//! touch: local-only tables (refused when one hangs below a synced
//! directory other than the root, whose inode number would change).

use std::path::Path;

use redb::{Durability, ReadableTable, ReadableTableMetadata};

use crate::inode::ROOT;
use crate::schema::*;
use crate::snap::materialize::write_tree;
use crate::snap::object::*;
use crate::snap::refs::{commit_obj, branch_names, head_branch, open_offline, ref_id, BranchStoreError, BASE_KEY, HEAD_KEY};
use crate::snap::{build, se, SnapError};

/// What a switch did: the branch before and after and the commit now live
/// (`switched` false: the store was on that branch already).
#[derive(Clone, Debug, Default)]
pub struct SwitchReport {
    pub from: String,
    pub to: String,
    pub commit: String,
    pub switched: bool,
    pub files: u64,
}

/// Makes `name` the checked-out branch of the unmounted store `dir` (its
/// lock held meanwhile): the synced live tree is replaced by the branch
/// head's tree in one durable transaction, then the old working copies
/// are removed. Errors: the store's; [`SnapError::Unknown`] (no such
/// branch); [`SnapError::Dirty`] when the live tree is not its head's tree
/// (or the store was not shut down cleanly); [`SnapError::Store`] when a
/// local-only path hangs below a synced subdirectory.
pub fn switch_store(dir: &Path, name: &str) -> Result<SwitchReport, BranchStoreError> {
    let store = open_offline(dir).map_err(BranchStoreError::Store)?;
    let r = switch(&store, dir, name, false).map_err(BranchStoreError::Snap);
    store.release_lock();
    r
}

/// After a pull moved the checked-out branch `name` (`BASE` still its old
/// head): the live tree becomes the new head's tree, refused as a switch
/// is ([`SnapError::Dirty`]) when it holds changes not in its last commit.
pub(crate) fn refresh(store: &crate::store::db::Store, dir: &Path, name: &str) -> Result<SwitchReport, SnapError> {
    switch(store, dir, name, true)
}

fn switch(store: &crate::store::db::Store, dir: &Path, name: &str, refresh: bool) -> Result<SwitchReport, SnapError> {
    let mut txn = store.begin_write().map_err(se)?;
    txn.set_durability(Durability::Immediate).map_err(se)?;
    let (cur, target, base) = {
        let refs = txn.open_table(REFS).map_err(se)?;
        let cur = head_branch(&refs)?;
        let target = ref_id(&refs, name)?;
        let base = ref_id(&refs, BASE_KEY)?.or(ref_id(&refs, &cur)?);
        if target.is_none() || name == HEAD_KEY || name == BASE_KEY {
            let candidates = branch_names(&refs)?;
            return Err(SnapError::Unknown { name: name.to_string(), candidates });
        }
        (cur, target.unwrap(), base)
    };
    let mut rep = SwitchReport { from: cur.clone(), to: name.to_string(), commit: hex_id(&target), ..Default::default() };
    if cur == name && (!refresh || base == Some(target)) {
        txn.abort().map_err(se)?;
        return Ok(rep);
    }
    let dirty = |why: String| SnapError::Dirty { branch: cur.clone(), why };
    // A fork whose tree is unwritten (never mounted or never changed, D60):
    // its tree is written first (snap/lazy.rs), in
    // this transaction, so the check below sees it.
    crate::snap::materialize::write_deferred(&txn, &store.packs).map_err(SnapError::Store)?;
    if meta_get(&txn, "clean").map_err(se)? != Some(1) {
        return Err(dirty("the store was not shut down cleanly (mount it once and unmount it)".into()));
    }
    // The live tree must be its base commit's tree, exactly.
    let built = build::build(&txn, &store.packs, meta_get(&txn, "snap_pos").map_err(se)?.filter(|_| base.is_some()), None).map_err(SnapError::Store)?;
    let objects = crate::store::objects::read_in(&txn, &store.packs).map_err(SnapError::Store)?;
    match base {
        Some(b) => {
            if commit_obj(&objects, &b)?.root != built.root {
                return Err(dirty(format!("the live tree has changes not in its last commit {}", hex_id(&b))));
            }
        }
        None => {
            let empty = enc_dir(&DirObj::default());
            let n = txn.open_table(DIRENTS).map_err(se)?.len().map_err(se)?;
            if n > 0 || built.root != id_of(&empty) {
                return Err(dirty("the live tree has files and no commit".into()));
            }
        }
    }
    drop(built);
    for r in txn.open_table(LOCAL_DIRENTS).map_err(se)?.iter().map_err(se)? {
        let (k, _) = r.map_err(se)?;
        let parent = k.value().0;
        if parent != ROOT && txn.open_table(INODES).map_err(se)?.get(parent).map_err(se)?.is_some() {
            return Err(SnapError::Store(format!(
                "local-only path {:?} is inside a synced directory, which a switch of branch renumbers: fork instead (`ringfs fork --store {}@{name} --to NEWMNT`)",
                String::from_utf8_lossy(k.value().1),
                dir.display()
            )));
        }
    }
    // Out with the old synced tree (its manifests' chunk references too).
    let mut gone = Vec::new();
    {
        let moves = crate::live::clear(&txn).map_err(se)?;
        let mut chunks = txn.open_table(CHUNKS).map_err(se)?;
        let mut packs = txn.open_table(PACKS).map_err(se)?;
        let (c, b) = drop_refs(&mut chunks, &mut packs, &moves.drop).map_err(se)?;
        let (dc, db) = (-(c as i64), -(b as i64));
        drop((chunks, packs));
        bump_chunk_counters(&txn, dc, db).map_err(se)?;
        let mut inodes = txn.open_table(INODES).map_err(se)?;
        while let Some((k, _)) = inodes.pop_first().map_err(se)? {
            if k.value() != ROOT {
                gone.push(k.value());
            }
        }
        txn.open_table(DIRENTS).map_err(se)?.retain(|_, _| false).map_err(se)?;
        txn.open_table(MANIFEST_SIZES).map_err(se)?.retain(|_, _| false).map_err(se)?;
        txn.open_table(XATTRS).map_err(se)?.retain(|_, _| false).map_err(se)?;
        txn.open_table(SYMLINKS).map_err(se)?.retain(|_, _| false).map_err(se)?;
        txn.open_table(SNAP_INODES).map_err(se)?.retain(|_, _| false).map_err(se)?;
    }
    let c = commit_obj(&objects, &target)?;
    let mut load = |id: &ObjectId| -> Result<Vec<u8>, String> {
        objects.need(id)
    };
    let next = meta_get(&txn, "next_ino").map_err(se)?.unwrap_or(2).max(2);
    let w = write_tree(&txn, &mut load, &c, next, crate::posix::now()).map_err(SnapError::Store)?;
    drop(objects);
    {
        let mut chunks = txn.open_table(CHUNKS).map_err(se)?;
        for (h, n) in &w.uses {
            let Some((p, o, l, r)) = chunks.get(&h[..]).map_err(se)?.map(|g| g.value()) else {
                return Err(SnapError::Store(format!("chunk {} of branch {name}'s tree is not in the chunk index (run `ringfs fsck`)", hex(h))));
            };
            chunks.insert(&h[..], (p, o, l, r + n)).map_err(se)?;
        }
        let last = txn.open_table(JOURNAL).map_err(se)?.last().map_err(se)?.map(|(k, _)| k.value()).unwrap_or(0);
        let mut m = txn.open_table(META).map_err(se)?;
        m.insert("next_ino", w.next_ino).map_err(se)?;
        m.insert("snap_pos", last).map_err(se)?;
        let mut refs = txn.open_table(REFS).map_err(se)?;
        refs.insert(HEAD_KEY, format!("ref: {name}").as_bytes()).map_err(se)?;
        refs.insert(BASE_KEY, &target[..]).map_err(se)?;
    }
    txn.commit().map_err(se)?;
    // The old working copies (numbers the new tree never uses: it was
    // numbered from next_ino).
    let wc = dir.join("wc");
    for ino in gone {
        let _ = std::fs::remove_file(wc.join(ino.to_string()));
    }
    rep.switched = true;
    rep.files = w.files;
    Ok(rep)
}
