//! Exec points: the tree the store holds at one moment, written as
//! snapshot objects without moving any ref ([`take`]), so that what one
//! `ringfs exec` call changed is the diff of the points taken before and
//! after it ([`changes`]), skipping equal subtrees.
//!
//! A point advances `snap_pos` and the `snap_inodes` rows as a commit does
//! (the next commit or point follows only the journal after it), so taking
//! one costs what changed since the last point or commit, never the size
//! of the tree. A point is no commit: `ringfs log` and the branch list do
//! not show it. While a call uses it, its root is pinned in the store's
//! memory (`Store::pins`): gc keeps what a pin reaches; once unpinned (the
//! call ended, or the daemon stopped) gc frees what nothing else reaches.
//! docs/DECISIONS.md D40.
//!
//! Owns: taking points, pinning them, their diff. Must not touch: the inode
//! table (the caller settles the live tree first: `Fs::exec_begin`), refs.

use redb::{Durability, ReadableTable};

use super::diff::{diff_trees, Change};
use super::object::*;
use super::{base_pos, build, head, se, write_objects, SnapError};
use crate::schema::*;
use crate::store::db::Store;

/// A point: the root directory object of the synced tree, the journal
/// position it covers, the journal records read since the previous point
/// or commit, the snapshot objects it wrote (count, encoded bytes), and
/// whether its transaction was durable (`false` also when nothing was
/// written because nothing changed), where the local-only change log
/// stood, and the root directory's own attributes (which no directory
/// entry holds: a commit keeps them as `root_meta`).
#[derive(Clone, Debug, Default)]
pub struct ExecPoint {
    pub root: ObjectId,
    pub pos: u64,
    pub records: u64,
    pub objects_new: u64,
    pub bytes_new: u64,
    pub durable: bool,
    /// Where the local-only change log stood (`Fs::exec_local_changes`).
    pub local_mark: usize,
    /// The root directory's mode, owner, flags and xattrs (and mtime).
    pub root_meta: Meta,
}

/// Takes a point of the tree the store's tables hold now (the caller has
/// stored changed files and flushed the inode table). `durable`: the
/// transaction is durable (pack files synced first) when it writes
/// anything; nothing is written when nothing changed since the last point
/// or commit. `pin`: the root is pinned before the transaction commits
/// (so no gc can run in between); the pin's token is returned.
/// Errors: [`SnapError::Store`].
pub(crate) fn take(
    store: &Store,
    durable: bool,
    pin: bool,
) -> Result<(ExecPoint, Option<u64>), SnapError> {
    if let Some(r) = unchanged(store, pin)? {
        return Ok(r);
    }
    let mut txn = store.begin_write().map_err(se)?;
    let has_head = head(&txn.open_table(REFS).map_err(se)?)?.1.is_some();
    let base = base_pos(&txn, has_head)?;
    let built = build::build(&txn, &store.packs, base, None).map_err(SnapError::Store)?;
    let mut p = ExecPoint {
        root: built.root,
        pos: built.covered,
        records: built.records,
        root_meta: built.root_meta.clone(),
        ..Default::default()
    };
    let token = pin.then(|| store.pin(built.root));
    let unchanged = base.is_some()
        && built.records == 0
        && built.new_objects.is_empty()
        && built.cache.is_empty()
        && built.uncache.is_empty();
    if unchanged {
        txn.abort().map_err(se)?;
        return Ok((p, token));
    }
    let r = (|| {
        if durable {
            txn.set_durability(Durability::Immediate).map_err(se)?;
        }
        (p.objects_new, p.bytes_new) =
            write_objects(&txn, &store.packs, &built, None).map_err(SnapError::Store)?;
        txn.open_table(META)
            .map_err(se)?
            .insert("snap_pos", built.covered)
            .map_err(se)?;
        if durable {
            store.packs.sync().map_err(se)?;
        }
        txn.commit().map_err(se)
    })();
    if let Err(e) = r {
        if let Some(t) = token {
            store.unpin(t);
        }
        return Err(e);
    }
    p.durable = durable;
    if !durable {
        // The next durable group commit must run to make this one durable.
        store
            .content_pending
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
    Ok((p, token))
}

/// The fast path of [`take`], in read transactions only (no writer lock):
/// when the journal has nothing after `snap_pos` and `snap_inodes` holds
/// the root's row, the point is that row's tree. A pin is taken, then the
/// root object is checked to still exist (a gc that ran before the pin
/// and freed it makes this fall back to the slow path; one after it keeps
/// it). `None`: take the slow path.
fn unchanged(store: &Store, pin: bool) -> Result<Option<(ExecPoint, Option<u64>)>, SnapError> {
    let exists = |root: &ObjectId| -> Result<bool, SnapError> {
        let rtx = store.begin_read().map_err(se)?;
        let objects = crate::store::objects::read(&rtx, &store.packs).map_err(SnapError::Store)?;
        objects.contains(root).map_err(SnapError::Store)
    };
    let (root, pos, root_meta) = {
        let rtx = store.begin_read().map_err(se)?;
        let Some(pos) = rtx
            .open_table(META)
            .map_err(se)?
            .get("snap_pos")
            .map_err(se)?
            .map(|g| g.value())
        else {
            return Ok(None);
        };
        let last = rtx
            .open_table(JOURNAL)
            .map_err(se)?
            .last()
            .map_err(se)?
            .map(|(k, _)| k.value())
            .unwrap_or(0);
        if last > pos {
            return Ok(None);
        }
        let Some(row) = rtx
            .open_table(SNAP_INODES)
            .map_err(se)?
            .get(crate::inode::ROOT)
            .map_err(se)?
            .map(|g| g.value().to_vec())
        else {
            return Ok(None);
        };
        let row: SnapEntry = dec(&row).map_err(se)?;
        (row.id, pos, root_meta(&rtx)?)
    };
    let token = pin.then(|| store.pin(root));
    if !exists(&root)? {
        if let Some(t) = token {
            store.unpin(t);
        }
        return Ok(None);
    }
    Ok(Some((
        ExecPoint {
            root,
            pos,
            root_meta,
            ..Default::default()
        },
        token,
    )))
}

/// The root's attributes as the tables hold them now (what [`build`]
/// keeps as `root_meta`). Errors: [`SnapError::Store`].
fn root_meta(rtx: &redb::ReadTransaction) -> Result<Meta, SnapError> {
    use crate::inode::ROOT;
    let rec: InodeRec = match rtx.open_table(INODES).map_err(se)?.get(ROOT).map_err(se)? {
        Some(g) => dec(g.value()).map_err(se)?,
        None => return Err(SnapError::Store("the root directory has no inode record".into())),
    };
    let mut xattrs = Vec::new();
    let x = rtx.open_table(XATTRS).map_err(se)?;
    for r in x.range((ROOT, &b""[..])..(ROOT + 1, &b""[..])).map_err(se)? {
        let (k, v) = r.map_err(se)?;
        xattrs.push((k.value().1.to_vec(), v.value().to_vec()));
    }
    Ok(Meta {
        mode: rec.mode & 0o7777,
        uid: rec.uid,
        gid: rec.gid,
        mtime: rec.mtime,
        size: 0,
        rdev: rec.rdev,
        flags: rec.flags,
        xattrs,
    })
}

/// The paths that differ between the trees rooted at `from` and `to`, in
/// path order; equal subtrees are skipped unread. Errors:
/// [`SnapError::Store`] (an object missing: a point that was not pinned).
pub(crate) fn changes(
    store: &Store,
    from: &ObjectId,
    to: &ObjectId,
) -> Result<Vec<Change>, SnapError> {
    let mut out = Vec::new();
    if from == to {
        return Ok(out);
    }
    let rtx = store.begin_read().map_err(se)?;
    let objects = crate::store::objects::read(&rtx, &store.packs).map_err(SnapError::Store)?;
    let mut load = |id: &ObjectId| -> Result<Vec<u8>, String> {
        objects.need(id)
    };
    diff_trees(&mut load, Some(from), Some(to), b"", &mut out).map_err(SnapError::Store)?;
    Ok(out)
}
