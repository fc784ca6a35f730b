//! What `ringfs restore` must do to make the live tree a commit's
//! ([`plan_restore`]): the live tree is built as a commit would build it
//! (nothing written), merged with the commit's tree by name, and every
//! difference becomes a [`Step`]; subtrees whose object ids are equal are
//! skipped unread, so a plan costs what differs, never the tree size.
//!
//! Owns: the order of a restore's steps (a name is removed before another
//! inode takes it; a directory is made before its entries and gets its
//! attributes after them, so its mtime is the commit's) and what counts as
//! added, removed, rewritten and changed in place. Must not touch: the
//! inode table (`Fs::snapshot_restore` applies the steps), writing.

use std::time::Duration;

use crate::snap::object::*;

use crate::schema::{meta_get, REFS};
use crate::snap::{build, head, loader, object_in, se, SnapError};
use crate::store::db::Store;

/// One thing a restore does, in order. Paths are relative to the
/// workspace root, `/`-separated raw bytes (`dir` empty: the root).
#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// Remove `name` in `dir` and everything below it (deepest first).
    /// `replaced`: an [`Step::Add`] of the same name follows.
    Remove { dir: Vec<u8>, name: Vec<u8>, replaced: bool },
    /// Make `entry` in `dir` with the commit's attributes (a file with the
    /// manifest `content`). `replaces`: the name held another inode (its
    /// content, kind or symlink target differed).
    Add { dir: Vec<u8>, entry: Entry, content: Option<FileObj>, replaces: bool },
    /// Set the attributes of the inode at `path` in place (its content is
    /// the commit's already). `counted`: more than a directory's mtime
    /// differs (a directory gets one after any change below it).
    Meta { path: Vec<u8>, meta: Meta, counted: bool },
}

/// An invalidation of the kernel's caches that a restore asks for, in the
/// filesystem's inode numbers (FUSE nodeids): a (directory, name) entry
/// added, removed or replaced, or an inode whose attributes (or, for a
/// directory, entries) changed in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inval {
    Entry { parent: u64, name: Vec<u8> },
    Inode(u64),
}

/// What a restore did. `commit`: the commit restored (hex id). Paths
/// `added` (in the commit, not in the live tree), `removed` (the reverse,
/// everything below a removed directory included), `rewritten` (the same
/// name, another content, kind or symlink target: a new inode),
/// `changed` (attributes set in place). `bytes`: content bytes of the files
/// made (from the store's chunks, none copied). `kept`: paths the commit
/// would remove or add that are local-only now (or a directory still
/// holding local-only entries), left alone. `invalidations`: for the
/// caller to send to the kernel after the call. `phases`: durations in
/// order (hash, flush, plan, manifests, apply, durable).
#[derive(Clone, Debug, Default)]
pub struct RestoreReport {
    pub commit: String,
    pub added: u64,
    pub removed: u64,
    pub rewritten: u64,
    pub changed: u64,
    pub bytes: u64,
    pub kept: Vec<Vec<u8>>,
    pub invalidations: Vec<Inval>,
    pub phases: Vec<(&'static str, Duration)>,
}

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        name.to_vec()
    } else {
        [prefix, b"/", name].concat()
    }
}

type Load<'a> = dyn FnMut(&ObjectId) -> Result<Vec<u8>, String> + 'a;

fn entries(load: &mut Load, id: Option<&ObjectId>) -> Result<Vec<Entry>, String> {
    match id {
        Some(id) => Ok(dec_dir(&load(id)?).map_err(|e| format!("directory object {}: {e}", hex_id(id)))?.entries),
        None => Ok(Vec::new()),
    }
}

fn obj(e: &Entry) -> Option<&ObjectId> {
    match &e.target {
        Target::Object(id) => Some(id),
        _ => None,
    }
}

/// Steps turning directory `a` (live) into `b` (commit) at `path`.
fn merge_dir(load: &mut Load, a: Option<&ObjectId>, b: Option<&ObjectId>, path: &[u8], out: &mut Vec<Step>) -> Result<(), String> {
    if a.is_some() && a == b {
        return Ok(());
    }
    let (ea, eb) = (entries(load, a)?, entries(load, b)?);
    let (mut i, mut j) = (0, 0);
    while i < ea.len() || j < eb.len() {
        let ord = match (ea.get(i), eb.get(j)) {
            (Some(x), Some(y)) => x.name.cmp(&y.name),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match ord {
            std::cmp::Ordering::Less => {
                merge_one(load, Some(&ea[i]), None, path, out)?;
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                merge_one(load, None, Some(&eb[j]), path, out)?;
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                merge_one(load, Some(&ea[i]), Some(&eb[j]), path, out)?;
                i += 1;
                j += 1;
            }
        }
    }
    Ok(())
}

/// Steps turning entry `a` (live) into `b` (commit), both named the same
/// in directory `dir`.
fn merge_one(load: &mut Load, a: Option<&Entry>, b: Option<&Entry>, dir: &[u8], out: &mut Vec<Step>) -> Result<(), String> {
    match (a, b) {
        (None, None) => Ok(()),
        (Some(x), None) => {
            out.push(Step::Remove { dir: dir.to_vec(), name: x.name.clone(), replaced: false });
            Ok(())
        }
        (None, Some(y)) => add(load, y, dir, false, out),
        (Some(x), Some(y)) => {
            let path = join(dir, &x.name);
            let same_inode = x.kind == y.kind && x.meta.rdev == y.meta.rdev && (x.kind == EntryKind::Dir || x.target == y.target);
            if !same_inode {
                out.push(Step::Remove { dir: dir.to_vec(), name: x.name.clone(), replaced: true });
                return add(load, y, dir, true, out);
            }
            let counted = if x.kind == EntryKind::Dir { (Meta { mtime: y.meta.mtime, ..x.meta.clone() }) != y.meta } else { x.meta != y.meta };
            if x.kind == EntryKind::Dir && x.target != y.target {
                merge_dir(load, obj(x), obj(y), &path, out)?;
                out.push(Step::Meta { path, meta: y.meta.clone(), counted });
            } else if x.meta != y.meta {
                out.push(Step::Meta { path, meta: y.meta.clone(), counted });
            }
            Ok(())
        }
    }
}

/// Steps making entry `y` in `dir`, a directory's whole subtree with it.
fn add(load: &mut Load, y: &Entry, dir: &[u8], replaces: bool, out: &mut Vec<Step>) -> Result<(), String> {
    let content = match (&y.kind, obj(y)) {
        (EntryKind::File, Some(id)) => {
            let b = load(id)?;
            Some(crate::snap::manifest::read_file(&b, &mut |n: &ObjectId| load(n)).map_err(|e| format!("file manifest object {}: {e}", hex_id(id)))?)
        }
        _ => None,
    };
    out.push(Step::Add { dir: dir.to_vec(), entry: y.clone(), content, replaces });
    if y.kind == EntryKind::Dir {
        let path = join(dir, &y.name);
        let before = out.len();
        merge_dir(load, None, obj(y), &path, out)?;
        if out.len() > before {
            // Its entries moved its mtime.
            out.push(Step::Meta { path, meta: y.meta.clone(), counted: false });
        }
    }
    Ok(())
}

/// The entry at `comps` below root directory object `root` (`None`: some
/// component is missing or not a directory).
fn find(load: &mut Load, root: &ObjectId, comps: &[&[u8]]) -> Result<Option<Entry>, String> {
    let mut dir = *root;
    for (k, c) in comps.iter().enumerate() {
        let es = entries(load, Some(&dir))?;
        let Some(e) = es.into_iter().find(|e| e.name == *c) else { return Ok(None) };
        if k + 1 == comps.len() {
            return Ok(Some(e));
        }
        match (e.kind, e.target) {
            (EntryKind::Dir, Target::Object(id)) => dir = id,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// A `--path` made canonical: relative to the workspace root, no empty,
/// `.` or `..` components. Errors name the path and what to give instead.
pub(crate) fn clean_path(p: &[u8]) -> Result<Vec<u8>, SnapError> {
    let shown = crate::printable(p);
    let comps: Vec<&[u8]> = p.split(|b| *b == b'/').filter(|c| !c.is_empty() && *c != b".").collect();
    if comps.iter().any(|c| *c == b"..") {
        return Err(SnapError::BadPath { path: shown, why: "\"..\" is not allowed; give the path relative to the workspace root".into() });
    }
    if comps.is_empty() {
        return Err(SnapError::BadPath { path: shown, why: "names the workspace root; leave --path out to restore the whole tree".into() });
    }
    Ok(comps.join(&b'/'))
}

/// The steps that make the live tree (as the store's tables hold it now:
/// the caller has settled it) the tree of `commit`, whole or only below
/// `paths` (canonical, see [`clean_path`]; a path under another one given
/// is covered by it). Built in a write transaction that is aborted.
/// Errors: [`SnapError::BadPath`] for a path in neither tree, or whose
/// parent is not a directory in the live tree while the commit has it;
/// [`SnapError::Store`].
pub(crate) fn plan_restore(store: &Store, commit: &ObjectId, paths: &[Vec<u8>]) -> Result<Vec<Step>, SnapError> {
    let txn = store.begin_write().map_err(se)?;
    let (_, head_id) = head(&txn.open_table(REFS).map_err(se)?)?;
    let base = match head_id {
        Some(_) => meta_get(&txn, "snap_pos").map_err(se)?,
        None => None,
    };
    let built = build::build(&txn, &store.packs, base, None).map_err(SnapError::Store)?;
    let c = dec_commit(&object_in(&txn, &store.packs, commit)?).map_err(|e| SnapError::Store(format!("commit {}: {e}", hex_id(commit))))?;
    let mut steps = Vec::new();
    {
        let objects = crate::store::objects::read_in(&txn, &store.packs).map_err(SnapError::Store)?;
        let mut load = loader(&built.new_objects, |id| objects.get(id));
        if paths.is_empty() {
            merge_dir(&mut load, Some(&built.root), Some(&c.root), b"", &mut steps).map_err(SnapError::Store)?;
            if built.root != c.root || built.root_meta != c.root_meta {
                let counted = (Meta { mtime: c.root_meta.mtime, ..built.root_meta.clone() }) != c.root_meta;
                steps.push(Step::Meta { path: Vec::new(), meta: c.root_meta.clone(), counted });
            }
        } else {
            let mut ps: Vec<Vec<u8>> = paths.to_vec();
            ps.sort();
            ps.dedup();
            let covered = |p: &Vec<u8>, by: &Vec<u8>| p.len() > by.len() && p.starts_with(by) && p[by.len()] == b'/';
            let keep: Vec<Vec<u8>> = ps.iter().filter(|p| !ps.iter().any(|q| covered(p, q))).cloned().collect();
            for p in keep {
                let comps: Vec<&[u8]> = p.split(|b| *b == b'/').collect();
                let live = find(&mut load, &built.root, &comps).map_err(SnapError::Store)?;
                let tgt = find(&mut load, &c.root, &comps).map_err(SnapError::Store)?;
                let shown = crate::printable(&p);
                let short = hex_id(commit)[..12].to_string();
                if live.is_none() && tgt.is_none() {
                    return Err(SnapError::BadPath { path: shown, why: format!("in neither the live tree nor commit {short}; check the spelling (relative to the workspace root)") });
                }
                let dir = &comps[..comps.len() - 1];
                if live.is_none() && !dir.is_empty() {
                    let parent = find(&mut load, &built.root, dir).map_err(SnapError::Store)?;
                    if parent.map(|e| e.kind) != Some(EntryKind::Dir) {
                        let pp = crate::printable(&dir.join(&b'/'));
                        return Err(SnapError::BadPath { path: shown, why: format!("its directory {pp} is not a directory in the live tree; restore --path {pp} instead") });
                    }
                }
                merge_one(&mut load, live.as_ref(), tgt.as_ref(), &dir.join(&b'/'), &mut steps).map_err(SnapError::Store)?;
            }
        }
    }
    txn.abort().map_err(se)?;
    Ok(steps)
}
