//! Comparing two snapshot trees ([`diff_trees`]): directory objects are
//! merged by name, and a subtree whose object id is the same on both sides
//! is skipped without being read, so a diff costs what differs. Objects
//! come through a [`Source`] (a commit lends the directory objects its
//! build holds decoded) or an encoded-bytes loader ([`diff_trees`]).
//!
//! Owns: what counts as added, modified and removed. Must not touch: redb
//! (objects come through the caller's loader), the inode table.

use crate::snap::object::*;

/// What happened to a path between two trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Removed,
}

impl ChangeKind {
    /// "added", "modified" or "removed".
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Removed => "removed",
        }
    }
}

/// One side of a change: the entry's kind, permission bits (`mode &
/// 0o7777`) and size in bytes (files; symlinks: target length; else 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Side {
    pub kind: EntryKind,
    pub mode: u32,
    pub size: u64,
}

/// A changed path (relative to the workspace root, `/`-separated, raw
/// bytes) with its old side (none when added) and new side (none when
/// removed). A directory is listed as modified only when its mode, owner,
/// flags or xattrs changed (not for its mtime, which every entry added or
/// removed moves); changes below it are listed by their own paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub path: Vec<u8>,
    pub kind: ChangeKind,
    pub old: Option<Side>,
    pub new: Option<Side>,
}

fn side(e: &Entry) -> Side {
    Side { kind: e.kind, mode: e.meta.mode, size: e.meta.size }
}

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        name.to_vec()
    } else {
        [prefix, b"/", name].concat()
    }
}

/// Where a diff reads objects: directory objects decoded (shared, so a
/// caller that already holds them decoded, as a commit's build does, lends
/// them without a copy), any object's encoded bytes.
pub trait Source {
    /// The directory object `id`. Errors: missing, or not a directory object.
    fn dir(&mut self, id: &ObjectId) -> Result<std::sync::Arc<DirObj>, String>;
    /// The encoded bytes of object `id`. Errors: missing or unreadable.
    fn bytes(&mut self, id: &ObjectId) -> Result<Vec<u8>, String>;
}

/// A [`Source`] over an encoded-bytes loader: every directory decoded when asked.
struct Bytes<'a>(&'a mut dyn FnMut(&ObjectId) -> Result<Vec<u8>, String>);

impl Source for Bytes<'_> {
    fn dir(&mut self, id: &ObjectId) -> Result<std::sync::Arc<DirObj>, String> {
        let b = (self.0)(id)?;
        Ok(std::sync::Arc::new(dec_dir(&b).map_err(|e| format!("directory object {}: {e}", hex_id(id)))?))
    }
    fn bytes(&mut self, id: &ObjectId) -> Result<Vec<u8>, String> {
        (self.0)(id)
    }
}

/// Appends to `out` the changes from directory object `a` to `b` (either
/// may be absent: everything below the other is added or removed), paths
/// under `prefix`. `load` gives an object's bytes by id (Err: missing or
/// unreadable).
pub fn diff_trees(
    load: &mut dyn FnMut(&ObjectId) -> Result<Vec<u8>, String>,
    a: Option<&ObjectId>,
    b: Option<&ObjectId>,
    prefix: &[u8],
    out: &mut Vec<Change>,
) -> Result<(), String> {
    diff_in(&mut Bytes(load), a, b, prefix, out)
}

/// [`diff_trees`] reading objects through a [`Source`].
pub fn diff_in(
    load: &mut dyn Source,
    a: Option<&ObjectId>,
    b: Option<&ObjectId>,
    prefix: &[u8],
    out: &mut Vec<Change>,
) -> Result<(), String> {
    if a.is_some() && a == b {
        return Ok(());
    }
    let empty = std::sync::Arc::new(DirObj::default());
    let da = match a {
        Some(id) => load.dir(id)?,
        None => empty.clone(),
    };
    let db = match b {
        Some(id) => load.dir(id)?,
        None => empty,
    };
    let (ea, eb) = (&da.entries, &db.entries);
    let (mut i, mut j) = (0, 0);
    while i < ea.len() || j < eb.len() {
        let ord = match (ea.get(i), eb.get(j)) {
            (Some(x), Some(y)) => x.name.cmp(&y.name),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match ord {
            std::cmp::Ordering::Less => {
                one_side(load, &ea[i], prefix, ChangeKind::Removed, out)?;
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                one_side(load, &eb[j], prefix, ChangeKind::Added, out)?;
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                let (x, y) = (&ea[i], &eb[j]);
                let path = join(prefix, &x.name);
                if x.kind != y.kind {
                    out.push(Change { path: path.clone(), kind: ChangeKind::Modified, old: Some(side(x)), new: Some(side(y)) });
                    if x.kind == EntryKind::Dir {
                        below(load, x, &path, ChangeKind::Removed, out)?;
                    }
                    if y.kind == EntryKind::Dir {
                        below(load, y, &path, ChangeKind::Added, out)?;
                    }
                } else if x.kind == EntryKind::Dir {
                    // A directory's mtime moves with every entry added or
                    // removed, which is listed by its own path.
                    if (Meta { mtime: y.meta.mtime, ..x.meta.clone() }) != y.meta {
                        out.push(Change { path: path.clone(), kind: ChangeKind::Modified, old: Some(side(x)), new: Some(side(y)) });
                    }
                    if let (Target::Object(p), Target::Object(q)) = (&x.target, &y.target) {
                        diff_in(load, Some(p), Some(q), &path, out)?;
                    }
                } else if x.meta != y.meta || (x.target != y.target && !same_file(load, &x.target, &y.target)?) {
                    out.push(Change { path, kind: ChangeKind::Modified, old: Some(side(x)), new: Some(side(y)) });
                }
                i += 1;
                j += 1;
            }
        }
    }
    Ok(())
}

/// The workspace root's own change between two trees whose root
/// directories have attributes `a` and `b` (no directory entry holds
/// them: commits keep them as `root_meta`): a [`Change`] of path `""`
/// (empty), `Modified`, when its mode, owner, flags or xattrs differ (not
/// for its mtime, as for any directory). Diffs list it first.
pub fn root_change(a: &Meta, b: &Meta) -> Option<Change> {
    if (Meta { mtime: b.mtime, ..a.clone() }) == *b {
        return None;
    }
    let s = |m: &Meta| Some(Side { kind: EntryKind::Dir, mode: m.mode, size: 0 });
    Some(Change { path: Vec::new(), kind: ChangeKind::Modified, old: s(a), new: s(b) })
}

/// Whether two file manifests of different ids hold the same chunks: only
/// when one is version 1 and the other version 2 (a file's entry rebuilt
/// after an upgrade with nothing changed); otherwise different ids are
/// different content (each version's encoding is canonical).
fn same_file(load: &mut dyn Source, a: &Target, b: &Target) -> Result<bool, String> {
    let (Target::Object(a), Target::Object(b)) = (a, b) else { return Ok(false) };
    let (ba, bb) = (load.bytes(a)?, load.bytes(b)?);
    if ba.len() < 6 || bb.len() < 6 || ba[4] == bb[4] || ba[5] != KIND_FILE || bb[5] != KIND_FILE {
        return Ok(false);
    }
    let mut bytes = |id: &ObjectId| load.bytes(id);
    let fa = crate::snap::manifest::read_file(&ba, &mut bytes).map_err(|e| format!("file manifest {}: {e}", hex_id(a)))?;
    let fb = crate::snap::manifest::read_file(&bb, &mut bytes).map_err(|e| format!("file manifest {}: {e}", hex_id(b)))?;
    Ok(fa == fb)
}

/// An entry on one side only: itself, and for a directory everything below.
fn one_side(load: &mut dyn Source, e: &Entry, prefix: &[u8], kind: ChangeKind, out: &mut Vec<Change>) -> Result<(), String> {
    let path = join(prefix, &e.name);
    let s = Some(side(e));
    let (old, new) = if kind == ChangeKind::Added { (None, s) } else { (s, None) };
    out.push(Change { path: path.clone(), kind, old, new });
    if e.kind == EntryKind::Dir {
        below(load, e, &path, kind, out)?;
    }
    Ok(())
}

/// Everything below directory entry `e`, as added or removed.
fn below(load: &mut dyn Source, e: &Entry, path: &[u8], kind: ChangeKind, out: &mut Vec<Change>) -> Result<(), String> {
    if let Target::Object(id) = &e.target {
        let (a, b) = if kind == ChangeKind::Added { (None, Some(id)) } else { (Some(id), None) };
        diff_in(load, a, b, path, out)?;
    }
    Ok(())
}
