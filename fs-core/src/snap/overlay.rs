//! A fork's deferred tree served from its objects (docs/DECISIONS.md D60,
//! docs/FORMATS.md "Deferred tree"): the one walk of a commit's tree that
//! numbers its inodes ([`walk_tree`]: root 1, then from a first number in
//! its stack order, deterministic), used both by
//! `snap::materialize::write_tree` (the rows) and by [`load_base`] (the
//! same inodes as in-memory nodes, for a mount that writes no rows).
//!
//! A mounted fork whose tree is still deferred keeps the tables as the fork
//! left them (the root's row, the marker); the first transaction that
//! changes the live tree writes the rows first (`Store::begin_write`, the
//! group commit), so every reader of the tables stays unchanged. Until
//! then a file's content is its base file object's chunk list
//! ([`BaseTree::files`], `Store::restore_content`). The store's hook and
//! the mount's read are `snap::materialize::Deferred` and `read_base`.
//!
//! Must not touch: the tables (only objects are read here), working copies.

use std::collections::HashMap;

use crate::inode::{Name, Node, NodeMap, BLOCKS_UNKNOWN, ROOT};
use crate::schema::InodeRec;
use crate::snap::object::*;

/// One step of [`walk_tree`].
pub(crate) enum Visit<'a> {
    /// Entry `en` of directory `dir`: inode `ino`, readdir cookie `cookie`,
    /// its record `rec` (a directory's is replaced by its [`Visit::Dir`]),
    /// for a regular file its manifest object's id `fid` and, when the walk
    /// reads file objects, that object decoded (`file`: size and chunks;
    /// then `rec.blocks` counts its chunks, else the size's 512-byte units).
    Entry { dir: u64, ino: u64, cookie: u64, en: &'a Entry, rec: InodeRec, fid: Option<ObjectId>, file: Option<FileObj> },
    /// Directory `ino` (object `id`, attributes `meta`, in `parent` under
    /// `name`; the root is its own parent with an empty name) after all its
    /// entries: its record (link count and next cookie counted).
    Dir { ino: u64, id: ObjectId, meta: &'a Meta, parent: u64, name: &'a [u8], rec: InodeRec },
}

/// The inode record of an entry of `kind` with attributes `m` in `parent`
/// (`now`: its ctime and birth time).
pub(crate) fn rec_of(kind: EntryKind, m: &Meta, parent: u64, now: (i64, u32)) -> InodeRec {
    let dir = kind == EntryKind::Dir;
    InodeRec {
        mode: kind.type_bits() | (m.mode & 0o7777),
        uid: m.uid,
        gid: m.gid,
        size: if dir { 4096 } else { m.size },
        blocks: if dir { 8 } else if kind == EntryKind::File { m.size.div_ceil(512) } else { 0 },
        nlink: if dir { 2 } else { 1 },
        rdev: m.rdev,
        atime: m.mtime,
        mtime: m.mtime,
        ctime: now,
        parent: if dir { parent } else { 0 },
        next_cookie: 3,
        btime: now,
        flags: m.flags,
    }
}

/// Walks commit `c`'s tree: the root is inode 1, the others are numbered
/// from `first_ino` in the order this walk meets them (a stack of
/// directories; entries in name order), each handed to `visit`. `load`
/// gives an object's bytes by id; `now` is every record's ctime and birth
/// time; `files`: read (and decode) each regular file's object too, else
/// only directory objects. Returns the next free inode number. Errors: a
/// missing or undecodable object, an entry whose target is of the wrong
/// kind, `visit`'s.
pub(crate) fn walk_tree(
    load: &mut dyn FnMut(&ObjectId) -> Result<Vec<u8>, String>,
    c: &CommitObj,
    first_ino: u64,
    now: (i64, u32),
    files: bool,
    visit: &mut dyn FnMut(Visit) -> Result<(), String>,
) -> Result<u64, String> {
    let mut next = first_ino;
    // Files of equal content share their manifest object: decoded once.
    let mut decoded: HashMap<ObjectId, FileObj> = HashMap::new();
    // (directory inode, its object, its meta, its parent, its name there)
    let mut stack: Vec<(u64, ObjectId, Meta, u64, Vec<u8>)> = vec![(ROOT, c.root, c.root_meta.clone(), ROOT, Vec::new())];
    while let Some((d, id, meta, parent, name)) = stack.pop() {
        let obj = dec_dir(&load(&id)?).map_err(|x| format!("directory object {}: {x}", hex_id(&id)))?;
        let mut rec = rec_of(EntryKind::Dir, &meta, parent, now);
        for (i, en) in obj.entries.iter().enumerate() {
            let ino = next;
            next += 1;
            let mut r = rec_of(en.kind, &en.meta, d, now);
            let (mut fid, mut file) = (None, None);
            match (&en.kind, &en.target) {
                (EntryKind::Dir, Target::Object(sub)) => {
                    rec.nlink += 1;
                    stack.push((ino, *sub, en.meta.clone(), d, en.name.clone()));
                }
                (EntryKind::File, Target::Object(id)) if !files => fid = Some(*id),
                (EntryKind::File, Target::Object(id)) => {
                    let f = match decoded.get(id) {
                        Some(f) => f.clone(),
                        None => {
                            let b = load(id)?;
                            let f = crate::snap::manifest::read_file(&b, &mut |n: &ObjectId| load(n)).map_err(|x| format!("file object {}: {x}", hex_id(id)))?;
                            decoded.insert(*id, f.clone());
                            f
                        }
                    };
                    // A sparse file's holes take no blocks (du, cp --sparse).
                    r.blocks = crate::schema::data_blocks(&f.chunks);
                    (fid, file) = (Some(*id), Some(f));
                }
                (EntryKind::Symlink, Target::Symlink(_)) => {}
                (EntryKind::File | EntryKind::Dir | EntryKind::Symlink, _) => {
                    return Err(format!("directory object {}: entry {:?} has a target of the wrong kind", hex_id(&id), String::from_utf8_lossy(&en.name)));
                }
                _ => {}
            }
            visit(Visit::Entry { dir: d, ino, cookie: 3 + i as u64, en, rec: r, fid, file })?;
        }
        rec.next_cookie = 3 + obj.entries.len() as u64;
        visit(Visit::Dir { ino: d, id, meta: &meta, parent, name: &name, rec })?;
    }
    Ok(next)
}

/// A commit's tree as in-memory nodes ([`load_base`]): numbered and
/// recorded exactly as `write_tree` writes its rows for a deferred tree
/// (first number 2, `now` the commit's time), so the rows written later
/// (the first change) name the same inodes with the same records.
pub(crate) struct BaseTree {
    pub(crate) nodes: NodeMap,
    /// Regular files: inode → their manifest object (what the content of
    /// a file with no live manifest row is while the tree is deferred).
    pub(crate) files: HashMap<u64, ObjectId>,
    pub(crate) next_ino: u64,
    pub(crate) dirs: u64,
}

/// The time a deferred tree's records take as ctime and birth time: the
/// commit's (the same at every mount and when the rows are written).
pub(crate) fn tree_time(c: &CommitObj) -> (i64, u32) {
    c.time
}

/// Reads commit `c`'s tree into nodes (see [`BaseTree`]). Reads every
/// directory object once and no file object: a file's size, mode, times
/// and object id are in its directory entry, and its blocks (which count
/// its chunks, so a sparse file's holes take none) are left
/// [`BLOCKS_UNKNOWN`] (0 for an empty file), found from its object when a
/// reply or a row first needs them (`Fs::known_blocks`, `store::batch`).
/// Errors: as [`walk_tree`].
pub(crate) fn load_base(load: &mut dyn FnMut(&ObjectId) -> Result<Vec<u8>, String>, c: &CommitObj) -> Result<BaseTree, String> {
    let mut nodes = NodeMap::default();
    let mut files = HashMap::new();
    let mut dirs = 0;
    // The walk hands over one directory's entries together, then the
    // directory itself: its maps are built then, sized once (D68).
    let mut pending: Vec<(Name, u64, u64)> = Vec::new();
    let next_ino = walk_tree(load, c, ROOT + 1, tree_time(c), false, &mut |v| {
        match v {
            Visit::Entry { ino, cookie, en, mut rec, fid, .. } => {
                pending.push((Name::from(&en.name[..]), ino, cookie));
                if let Some(fid) = fid {
                    if rec.size > 0 {
                        rec.blocks = BLOCKS_UNKNOWN;
                    }
                    files.insert(ino, fid);
                }
                let mut n = Node::new(rec);
                if let Some(d) = n.dir.as_mut() {
                    d.dname = en.name.clone().into();
                }
                if let Target::Symlink(t) = &en.target {
                    n.set_symlink(Some(t.clone()));
                }
                for (k, v) in &en.meta.xattrs {
                    n.xattrs_mut().insert(k.clone(), v.clone());
                }
                // A directory met as an entry before its own entries: its
                // node (entries added later) keeps its place.
                nodes.entry(ino).or_insert(Box::new(n));
            }
            Visit::Dir { ino, meta, rec, .. } => {
                dirs += 1;
                let n = nodes.entry(ino).or_insert_with(|| Box::new(Node::new(rec.clone())));
                n.rec = rec;
                for (k, v) in &meta.xattrs {
                    n.xattrs_mut().insert(k.clone(), v.clone());
                }
                let d = n.dir.get_or_insert_with(Default::default);
                d.by_name.reserve(pending.len());
                for (name, child, cookie) in &pending {
                    d.by_name.insert(name.clone(), (*child, *cookie));
                }
                // Cookies come in increasing order: one bulk build.
                let cookies = pending.drain(..).map(|(name, _, cookie)| (cookie, name));
                if d.by_cookie.is_empty() {
                    d.by_cookie = cookies.collect();
                } else {
                    d.by_cookie.extend(cookies);
                }
            }
        }
        Ok(())
    })?;
    Ok(BaseTree { nodes, files, next_ino, dirs })
}

