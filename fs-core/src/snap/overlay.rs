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

/// How the walks read an object: its bytes by id (errors as text).
pub(crate) type Load<'a> = dyn FnMut(&ObjectId) -> Result<Vec<u8>, String> + 'a;

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

/// One directory as [`number_tree`] numbered it: inode `ino` (object `id`,
/// its bytes `bytes`, attributes `meta`, in `parent` under `name`; the
/// root is its own parent with an empty name), its entries numbered from
/// `first` in the object's order (`entries` of them).
pub(crate) struct DirJob {
    pub(crate) ino: u64,
    pub(crate) id: ObjectId,
    pub(crate) bytes: Vec<u8>,
    pub(crate) meta: Meta,
    pub(crate) parent: u64,
    pub(crate) name: Vec<u8>,
    pub(crate) first: u64,
    pub(crate) entries: u64,
}

/// The one numbering of commit `c`'s inodes: the root is inode 1, the
/// others are numbered from `first_ino` in the order this walk meets them
/// (a stack of directories: a directory's entries take consecutive
/// numbers, in name order, when it is taken from the stack; its
/// subdirectories are pushed in that order). Each directory is handed to
/// `job` with `load` once numbered (its object read, only its
/// subdirectories decoded). Returns the next free inode number. Errors: a
/// missing or undecodable directory object, a subdirectory entry that
/// names no object, `job`'s.
pub(crate) fn number_tree(
    load: &mut Load,
    c: &CommitObj,
    first_ino: u64,
    job: &mut dyn FnMut(DirJob, &mut Load) -> Result<(), String>,
) -> Result<u64, String> {
    let mut next = first_ino;
    // (directory inode, its object, its meta, its parent, its name there)
    let mut stack: Vec<(u64, ObjectId, Meta, u64, Vec<u8>)> = vec![(ROOT, c.root, c.root_meta.clone(), ROOT, Vec::new())];
    while let Some((d, id, meta, parent, name)) = stack.pop() {
        let bytes = load(&id)?;
        let (n, subdirs) = dec_dir_subdirs(&bytes).map_err(|x| format!("directory object {}: {x}", hex_id(&id)))?;
        let first = next;
        next += n as u64;
        for (i, en) in subdirs {
            let Target::Object(sub) = en.target else {
                return Err(format!("directory object {}: entry {:?} has a target of the wrong kind", hex_id(&id), String::from_utf8_lossy(&en.name)));
            };
            stack.push((first + i as u64, sub, en.meta, d, en.name));
        }
        job(DirJob { ino: d, id, bytes, meta, parent, name, first, entries: n as u64 }, &mut *load)?;
    }
    Ok(next)
}

/// Decodes directory `job` and hands each of its entries to `visit`, then
/// the directory itself (see [`Visit`]); `now` is every record's ctime and
/// birth time. `files`: read (with its `load`) and decode each regular
/// file's object too, each distinct one once (its map), else only the
/// directory. Errors: an undecodable object, an entry whose target is of
/// the wrong kind, `visit`'s.
pub(crate) fn visit_dir(
    job: DirJob,
    now: (i64, u32),
    mut files: Option<(&mut Load, &mut HashMap<ObjectId, FileObj>)>,
    visit: &mut dyn FnMut(Visit) -> Result<(), String>,
) -> Result<(), String> {
    let DirJob { ino: d, id, bytes, meta, parent, name, first, .. } = job;
    let obj = dec_dir(&bytes).map_err(|x| format!("directory object {}: {x}", hex_id(&id)))?;
    drop(bytes);
    let mut rec = rec_of(EntryKind::Dir, &meta, parent, now);
    for (i, en) in obj.entries.iter().enumerate() {
        let ino = first + i as u64;
        let mut r = rec_of(en.kind, &en.meta, d, now);
        let (mut fid, mut file) = (None, None);
        match (&en.kind, &en.target, files.as_mut()) {
            (EntryKind::Dir, Target::Object(_), _) => rec.nlink += 1,
            (EntryKind::File, Target::Object(id), None) => fid = Some(*id),
            (EntryKind::File, Target::Object(id), Some((load, decoded))) => {
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
            (EntryKind::Symlink, Target::Symlink(_), _) => {}
            (EntryKind::File | EntryKind::Dir | EntryKind::Symlink, _, _) => {
                return Err(format!("directory object {}: entry {:?} has a target of the wrong kind", hex_id(&id), String::from_utf8_lossy(&en.name)));
            }
            _ => {}
        }
        visit(Visit::Entry { dir: d, ino, cookie: 3 + i as u64, en, rec: r, fid, file })?;
    }
    rec.next_cookie = 3 + obj.entries.len() as u64;
    visit(Visit::Dir { ino: d, id, meta: &meta, parent, name: &name, rec })
}

/// Walks commit `c`'s tree in [`number_tree`]'s order and numbering
/// (other inodes from `first_ino`), each directory's entries then the
/// directory handed to `visit` ([`visit_dir`]). `load` gives an object's
/// bytes by id; `now` is every record's ctime and birth time; `files`:
/// read (and decode) each regular file's object too, else only directory
/// objects. Returns the next free inode number. Errors: a missing or
/// undecodable object, an entry whose target is of the wrong kind,
/// `visit`'s.
pub(crate) fn walk_tree(
    load: &mut Load,
    c: &CommitObj,
    first_ino: u64,
    now: (i64, u32),
    files: bool,
    visit: &mut dyn FnMut(Visit) -> Result<(), String>,
) -> Result<u64, String> {
    // Files of equal content share their manifest object: decoded once.
    let mut decoded: HashMap<ObjectId, FileObj> = HashMap::new();
    number_tree(load, c, first_ino, &mut |job, load| visit_dir(job, now, files.then_some((load, &mut decoded)), visit))
}

/// A commit's tree as in-memory nodes ([`load_base`]): numbered and
/// recorded exactly as `write_tree` writes its rows for a deferred tree
/// (first number 2, `now` the commit's time), so the rows written later
/// (the first change) name the same inodes with the same records.
pub(crate) struct BaseTree {
    pub(crate) nodes: NodeMap,
    /// Regular files: inode → their manifest object (what the content of
    /// a file with no live manifest row is while the tree is deferred).
    pub(crate) files: FileMap,
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
///
/// The numbering ([`number_tree`]: reading directory objects, decoding
/// only their subdirectories) runs on the calling thread; each directory
/// is decoded and its nodes and entry maps built ([`visit_dir`]) by
/// whichever of this thread and one helper is free (the helper starts once
/// [`HELPER_AFTER`] entries are queued), and all are put in one node map
/// at the end (D72). Errors: as [`walk_tree`]; a
/// helper that panicked.
pub(crate) fn load_base(load: &mut Load, c: &CommitObj) -> Result<BaseTree, String> {
    use std::sync::{mpsc, Arc, Mutex};
    let now = tree_time(c);
    let (tx, rx) = mpsc::channel::<DirJob>();
    let rx = Arc::new(Mutex::new(rx));
    let drain = |rx: &Mutex<mpsc::Receiver<DirJob>>| -> Result<Built, String> {
        let mut out = Built::default();
        loop {
            // Held only while waiting for the next directory.
            let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
            match next {
                Ok(job) => visit_dir(job, now, None, &mut |v| out.add(v))?,
                Err(_) => return Ok(out),
            }
        }
    };
    let (numbered, parts) = std::thread::scope(|scope| {
        let mut helper = None;
        let mut queued = 0u64;
        let tx = tx; // dropped when the walk ends: the builders then stop
        let numbered = number_tree(load, c, ROOT + 1, &mut |job, _| {
            queued += job.entries;
            tx.send(job).map_err(|_| "the base tree's builder stopped".to_string())?;
            if helper.is_none() && queued >= HELPER_AFTER {
                let rx = Arc::clone(&rx);
                helper = std::thread::Builder::new().name("ringfs-base".into()).spawn_scoped(scope, move || drain(&rx)).ok();
            }
            Ok(())
        });
        drop(tx);
        let mut parts = vec![drain(&rx)];
        if let Some(h) = helper {
            parts.push(h.join().unwrap_or_else(|_| Err("the base tree's builder thread panicked".to_string())));
        }
        (numbered, parts)
    });
    let next_ino = numbered?;
    let parts = parts.into_iter().collect::<Result<Vec<Built>, String>>()?;
    let (mut nodes, mut files, mut dirs) = (NodeMap::default(), FileMap::default(), 0);
    nodes.reserve(parts.iter().map(|p| p.nodes.len() + 1).sum());
    files.reserve(parts.iter().map(|p| p.files.len()).sum());
    let mut dir_parts = Vec::new();
    for p in parts {
        nodes.extend(p.nodes);
        files.extend(p.files);
        dir_parts.push(p.dirs);
    }
    for (ino, rec, xattrs, data) in dir_parts.into_iter().flatten() {
        dirs += 1;
        // Every directory but the root was an entry of its parent: its
        // node (with its name there) is in the map already.
        let n = nodes.entry(ino).or_insert_with(|| Box::new(Node::new(rec.clone())));
        n.rec = rec;
        for (k, v) in xattrs {
            n.xattrs_mut().insert(k, v);
        }
        let d = n.dir.get_or_insert_with(Default::default);
        (d.by_name, d.by_cookie) = (data.by_name, data.by_cookie);
    }
    Ok(BaseTree { nodes, files, next_ino, dirs })
}

/// Entries queued before [`load_base`] starts its helper thread: a small
/// tree is built on the calling thread alone.
const HELPER_AFTER: u64 = 2048;

/// The map type of [`BaseTree::files`].
pub(crate) type FileMap = HashMap<u64, ObjectId, std::hash::BuildHasherDefault<crate::inode::InoHasher>>;

/// What one builder made from its directories: the entries' nodes,
/// regular files' manifest objects, and each directory's record, xattrs
/// and entry maps (put on its node when the parts are joined).
#[derive(Default)]
struct Built {
    /// The current directory's entries so far: (name, inode, cookie).
    names: Vec<(Name, u64, u64)>,
    nodes: Vec<(u64, Box<Node>)>,
    files: Vec<(u64, ObjectId)>,
    dirs: Vec<BuiltDir>,
}

/// A directory as a builder made it: inode, record, xattrs, entry maps.
type BuiltDir = (u64, InodeRec, Vec<(Vec<u8>, Vec<u8>)>, crate::inode::DirData);

impl Built {
    /// One step of [`visit_dir`]: an entry's node (its name kept for its
    /// directory's maps), or a directory's maps from its entries.
    fn add(&mut self, v: Visit) -> Result<(), String> {
        match v {
            Visit::Entry { ino, cookie, en, mut rec, fid, .. } => {
                self.names.push((Name::from(&en.name[..]), ino, cookie));
                if let Some(fid) = fid {
                    if rec.size > 0 {
                        rec.blocks = BLOCKS_UNKNOWN;
                    }
                    self.files.push((ino, fid));
                }
                let mut n = Node::new(rec);
                if let Some(d) = n.dir.as_mut() {
                    d.dname = en.name.as_slice().into();
                }
                if let Target::Symlink(t) = &en.target {
                    n.set_symlink(Some(t.clone()));
                }
                for (k, v) in &en.meta.xattrs {
                    n.xattrs_mut().insert(k.clone(), v.clone());
                }
                self.nodes.push((ino, Box::new(n)));
            }
            Visit::Dir { ino, meta, rec, .. } => {
                let mut data = crate::inode::DirData::default();
                data.by_name.reserve(self.names.len());
                for (name, child, cookie) in &self.names {
                    data.by_name.insert(name.clone(), (*child, *cookie));
                }
                // Cookies come in increasing order: one bulk build.
                data.by_cookie = self.names.drain(..).map(|(name, _, cookie)| (cookie, name)).collect();
                self.dirs.push((ino, rec, meta.xattrs.clone(), data));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(mode: u32, size: u64, xattr: bool) -> Meta {
        let xattrs = if xattr { vec![(b"user.k".to_vec(), b"v".to_vec())] } else { Vec::new() };
        Meta { mode, uid: 1, gid: 2, mtime: (10, 20), size, rdev: 0, flags: 0, xattrs }
    }

    /// Directory `files` files (every 7th with an xattr, every 50th empty),
    /// a symlink and `subs` (already stored) subdirectories; stored in
    /// `objs`, its id returned.
    fn dir(objs: &mut HashMap<ObjectId, Vec<u8>>, tag: &str, files: usize, subs: Vec<(String, ObjectId)>) -> ObjectId {
        let mut entries = Vec::new();
        for i in 0..files {
            let size = if i % 50 == 0 { 0 } else { 100 + i as u64 };
            entries.push(Entry { name: format!("{tag}-f{i:05}").into_bytes(), kind: EntryKind::File, meta: meta(0o644, size, i % 7 == 0), target: Target::Object([i as u8; 32]) });
        }
        entries.push(Entry { name: format!("{tag}-link").into_bytes(), kind: EntryKind::Symlink, meta: meta(0o777, 3, false), target: Target::Symlink(b"abc".to_vec()) });
        for (name, id) in subs {
            entries.push(Entry { name: name.into_bytes(), kind: EntryKind::Dir, meta: meta(0o755, 0, true), target: Target::Object(id) });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let b = enc_dir(&DirObj { entries });
        let id = id_of(&b);
        objs.insert(id, b);
        id
    }

    /// The nodes `load_base` builds (on two threads once the tree is past
    /// HELPER_AFTER entries) are the records, names and numbers of the one
    /// walk `write_tree` writes rows from.
    #[test]
    fn load_base_matches_the_walk() {
        for (per_dir, leaves) in [(5, 2), (700, 6)] {
            let mut objs = HashMap::new();
            let mut top = Vec::new();
            for t in 0..3 {
                let mut subs = Vec::new();
                for l in 0..leaves {
                    subs.push((format!("leaf{l}"), dir(&mut objs, &format!("t{t}l{l}"), per_dir, Vec::new())));
                }
                top.push((format!("top{t}"), dir(&mut objs, &format!("t{t}"), per_dir, subs)));
            }
            let root = dir(&mut objs, "root", 3, top);
            let c = CommitObj { root, root_meta: meta(0o755, 0, true), parents: vec![], time: (30, 40), journal_pos: 0, store_id: 1, author: "a@b".into(), message: "m".into() };
            let mut load = |id: &ObjectId| objs.get(id).cloned().ok_or_else(|| "missing".to_string());
            let mut entries = Vec::new();
            let mut dirs = Vec::new();
            let next = walk_tree(&mut load, &c, ROOT + 1, tree_time(&c), false, &mut |v| {
                match v {
                    Visit::Entry { dir, ino, cookie, en, rec, fid, .. } => entries.push((dir, ino, cookie, en.name.clone(), rec, fid, en.target.clone())),
                    Visit::Dir { ino, rec, .. } => dirs.push((ino, rec)),
                }
                Ok(())
            })
            .unwrap();
            let t = load_base(&mut load, &c).unwrap();
            let total = entries.len() as u64;
            assert!(per_dir < 10 || total > HELPER_AFTER, "the large case runs the helper");
            assert_eq!((t.next_ino, t.nodes.len() as u64, t.dirs), (next, total + 1, dirs.len() as u64));
            let nfiles = entries.iter().filter(|e| e.5.is_some()).count();
            assert_eq!(t.files.len(), nfiles);
            for (d, ino, cookie, name, rec, fid, target) in &entries {
                let n = &t.nodes[ino];
                let mut want = rec.clone();
                if fid.is_some() && rec.size > 0 {
                    want.blocks = BLOCKS_UNKNOWN;
                }
                if n.dir.is_none() {
                    assert_eq!(n.rec, want, "entry {}", String::from_utf8_lossy(name));
                    assert_eq!(t.files.get(ino), fid.as_ref());
                } else {
                    assert_eq!(n.dir.as_ref().unwrap().dname[..], name[..]);
                }
                if let Target::Symlink(s) = target {
                    assert_eq!(n.symlink(), Some(&s[..]));
                }
                let pd = t.nodes[d].dir.as_ref().unwrap();
                assert_eq!(pd.by_name.get(&name[..]), Some(&(*ino, *cookie)));
                assert_eq!(pd.by_cookie.get(cookie).map(|n| &n[..]), Some(&name[..]));
            }
            for (ino, rec) in &dirs {
                let n = &t.nodes[ino];
                assert_eq!(n.rec, *rec);
                assert_eq!(n.xattrs().get(&b"user.k"[..]).map(|v| &v[..]), Some(&b"v"[..]));
                assert_eq!(n.dir.as_ref().unwrap().by_name.len() as u64, rec.next_cookie - 3);
            }
        }
    }
}
