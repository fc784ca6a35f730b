//! The in-memory inode table: [`Node`]s by inode number (FUSE nodeid),
//! directory contents with their readdir cookies, lookup counts (LOOKUP,
//! CREATE, READDIRPLUS … minus FORGET), open handles, and the sets of what
//! changed since the last group commit.
//!
//! Owns: when an inode is freed ([`State::maybe_free`]: no links, no
//! lookups, no open handles), inode numbers ([`State::alloc_ino`]), and the
//! dirty sets that [`State::drain`] hands to the store as a
//! [`Batch`]. Must not touch: redb, file contents or names on disk
//! (freeing returns a [`Freed`] whose backing file the caller sets aside
//! outside the lock, deleted after the durable commit that records the
//! free, [`State::drop_after_commit`]; the table only reads an open
//! working copy's size and times, [`fstat_into`]), path policy, FUSE.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::sync::{Arc, Mutex, MutexGuard};

pub(crate) mod batch;

use crate::posix::{err, is_dir, is_reg, BLKSIZE, S_IFDIR};
use crate::schema::InodeRec;
use crate::types::{Attr, Errno, Result};
use batch::{Batch, DirentChanges, InodeChange, XattrChanges};

/// The root directory's inode number (FUSE_ROOT_ID).
pub(crate) const ROOT: u64 = 1;

/// `InodeRec::blocks` of a file of a fork's deferred tree whose block
/// count nobody needed yet (D60: the mount reads no file object). Never
/// in a reply nor a row: `Fs::known_blocks` finds it from the file's
/// object before a reply, `store::batch` from the row the tree's writing
/// made before it writes the record.
pub(crate) const BLOCKS_UNKNOWN: u64 = u64::MAX;

/// Pool index: working copies of synced files (`wc/`).
pub(crate) const POOL_WC: usize = 0;
/// Pool index: bytes of local-only files (the local directory).
pub(crate) const POOL_LOCAL: usize = 1;

/// A hasher for inode numbers and small records (the multiply-rotate step
/// of rustc's FxHash): a few instructions per word where the standard
/// SipHash costs tens of nanoseconds, which loading 10 000 inodes at mount
/// pays per node (D48). Inode numbers are ours, not an attacker's, so the
/// hash needs no keying. One word differing changes the result: each step
/// is a bijection of the state for given input.
#[derive(Default, Clone, Copy)]
pub(crate) struct InoHasher(u64);

const FX_K: u64 = 0xf135_7aea_2e62_a9c5;

impl std::hash::Hasher for InoHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(FX_K).rotate_left(26);
    }
    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The map type of [`State::nodes`].
pub(crate) type NodeMap = HashMap<u64, Box<Node>, std::hash::BuildHasherDefault<InoHasher>>;

/// Locks the table; a poisoned lock (a panicked request) is taken over.
pub(crate) fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The record of a fresh store's root: 0755 root:root, now.
pub(crate) fn root_rec() -> InodeRec {
    let t = crate::posix::now();
    InodeRec {
        mode: S_IFDIR | 0o755,
        nlink: 2,
        size: 4096,
        blocks: 8,
        atime: t,
        mtime: t,
        ctime: t,
        parent: ROOT,
        next_cookie: 3,
        btime: t,
        ..Default::default()
    }
}

/// An entry name, stored once and shared by [`DirData::by_name`] and
/// [`DirData::by_cookie`] (one heap allocation per entry).
pub(crate) type Name = Arc<[u8]>;

/// Directory contents: name → (child, cookie) and cookie → name (the same
/// [`Name`] allocation), and the directory's own name in its parent.
#[derive(Default)]
pub(crate) struct DirData {
    pub(crate) by_name: HashMap<Name, (u64, u64)>,
    pub(crate) by_cookie: BTreeMap<u64, Name>,
    /// This directory's name in its parent (for path-based policy; empty
    /// for the root).
    pub(crate) dname: Box<[u8]>,
}

impl DirData {
    /// Adds `name` → (child, cookie) to both maps (replacing an entry of
    /// that name in `by_name`; the caller removes its old cookie).
    pub(crate) fn insert(&mut self, name: &[u8], child: u64, cookie: u64) {
        let n: Name = Arc::from(name);
        self.by_cookie.insert(cookie, n.clone());
        self.by_name.insert(n, (child, cookie));
    }
}

/// The working-copy fd of an open inode, shared by its handles.
pub(crate) struct OpenFile {
    pub(crate) file: File,
    pub(crate) append: Mutex<()>,
    /// The working copy's (mtime, ctime, size) when we last looked: writes
    /// that bypass the daemon (passthrough, shared mmap) change it. Set when
    /// the inode's first handle opens it.
    pub(crate) seen: Mutex<Option<WcStamp>>,
}

impl OpenFile {
    /// A fresh shared fd; `seen` is taken from its metadata now.
    pub(crate) fn new(file: File) -> OpenFile {
        let seen = file.metadata().ok().map(|m| wc_stamp(&m));
        OpenFile { file, append: Mutex::new(()), seen: Mutex::new(seen) }
    }
    /// Locks `seen`; a poisoned lock is taken over.
    pub(crate) fn seen(&self) -> MutexGuard<'_, Option<WcStamp>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a handle served from the store's chunks reads (D67): the file's
/// stored chunks as they were at the open (`gen`: the node's `content_gen`
/// then; once it moves, the working copy is the truth), and the last chunk
/// read, kept for the next read of the same handle.
pub(crate) struct Chunked {
    pub(crate) gen: u64,
    /// Sorted by offset; holes between them read as zeros.
    pub(crate) manifest: Vec<crate::schema::ChunkRef>,
    /// (index in `manifest`, its bytes).
    pub(crate) last: Mutex<Option<(usize, Arc<Vec<u8>>)>>,
}

/// One inode: its persistent record, how it is referenced (lookups, open
/// handles), its kind's contents (directory entries, symlink target),
/// xattrs, and where its content stands (`content_gen` counts changes,
/// `hashed_gen` the last change stored).
pub(crate) struct Node {
    pub(crate) rec: InodeRec,
    pub(crate) lookups: u64,
    pub(crate) opens: u32,
    pub(crate) file: Option<Arc<OpenFile>>,
    pub(crate) dir: Option<Box<DirData>>,
    /// Symlink target and xattrs, allocated when either is set.
    extra: Option<Box<NodeExtra>>,
    pub(crate) content_gen: u64,
    pub(crate) hashed_gen: u64,
    /// A hash worker (or the shutdown) is hashing this inode now: one at a
    /// time; another request for it is queued again (`wc::hash`).
    pub(crate) hashing: bool,
    /// [`meta_key`] of the record a durable commit is known to hold for
    /// this inode (`None`: a new inode, not known, or times set explicitly
    /// since): fsync skips the commit while the record differs from it only
    /// in what recovery takes from the working copy (`fs::data` `Fs::fsync`).
    pub(crate) durable_meta: Option<u64>,
    /// Local-only: metadata in the LOCAL_* tables, never hashed or journaled.
    pub(crate) local: bool,
    /// The bytes live in the local backing directory (else in `wc/`).
    pub(crate) data_local: bool,
    /// An O_TMPFILE inode opened without O_EXCL that has had no name yet:
    /// link(2) may give it one although its link count is 0 (the kernel's
    /// I_LINKABLE).
    pub(crate) linkable: bool,
}

/// The rarely used parts of a [`Node`], kept out of line so that a plain
/// file or directory costs one pointer for them.
#[derive(Default)]
struct NodeExtra {
    symlink: Option<Vec<u8>>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

static NO_XATTRS: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();

/// A digest of the parts of an inode record that recovery after a crash
/// cannot take from the working copy: everything but size, blocks and the
/// times (mode, owner, link count, rdev, parent, birth time, flags). Two
/// records with the same key differ at most in what a data write changes.
pub(crate) fn meta_key(r: &InodeRec) -> u64 {
    use std::hash::Hasher;
    let mut h = InoHasher::default();
    for w in [r.mode as u64, r.uid as u64, r.gid as u64, r.nlink as u64, r.rdev as u64, r.parent, r.btime.0 as u64, r.btime.1 as u64, r.flags as u64] {
        h.write_u64(w);
    }
    h.finish()
}

/// (mtime, ctime, size) of a working copy.
pub(crate) type WcStamp = ((i64, u32), (i64, u32), u64);

/// The [`WcStamp`] of a working copy's metadata.
pub(crate) fn wc_stamp(m: &std::fs::Metadata) -> WcStamp {
    use std::os::unix::fs::MetadataExt;
    ((m.mtime(), m.mtime_nsec() as u32), (m.ctime(), m.ctime_nsec() as u32), m.size())
}

impl Node {
    pub(crate) fn new(rec: InodeRec) -> Node {
        let dir = if is_dir(rec.mode) { Some(Box::default()) } else { None };
        Node {
            rec,
            lookups: 0,
            opens: 0,
            file: None,
            dir,
            extra: None,
            content_gen: 0,
            hashed_gen: 0,
            hashing: false,
            durable_meta: None,
            local: false,
            data_local: false,
            linkable: false,
        }
    }
    /// Symlinks: the target (None for other kinds).
    pub(crate) fn symlink(&self) -> Option<&[u8]> {
        self.extra.as_ref()?.symlink.as_deref()
    }
    /// Sets (or clears) the symlink target.
    pub(crate) fn set_symlink(&mut self, target: Option<Vec<u8>>) {
        match (&mut self.extra, target) {
            (Some(e), t) => e.symlink = t,
            (None, Some(t)) => self.extra = Some(Box::new(NodeExtra { symlink: Some(t), xattrs: BTreeMap::new() })),
            (None, None) => {}
        }
    }
    /// Extended attributes: name → value (empty if none).
    pub(crate) fn xattrs(&self) -> &BTreeMap<Vec<u8>, Vec<u8>> {
        self.extra.as_ref().map(|e| &e.xattrs).unwrap_or(&NO_XATTRS)
    }
    /// Extended attributes, for changing (allocates the side part).
    pub(crate) fn xattrs_mut(&mut self) -> &mut BTreeMap<Vec<u8>, Vec<u8>> {
        &mut self.extra.get_or_insert_with(Box::default).xattrs
    }
    /// Directories: their name in their parent (empty for the root and for
    /// other kinds).
    pub(crate) fn dname(&self) -> &[u8] {
        self.dir.as_ref().map(|d| &d.dname[..]).unwrap_or(b"")
    }
}

/// An open file or directory handle (FUSE `fh`): its inode, open flags and,
/// for regular files, the shared working-copy fd.
pub(crate) struct Handle {
    pub(crate) ino: u64,
    pub(crate) flags: u32,
    pub(crate) file: Option<Arc<OpenFile>>,
    /// A read-only handle of a stored file that had no working copy when it
    /// was opened: served from the store's chunks (D67) until the file gets
    /// a working copy (`Node::file`) or changes.
    pub(crate) chunks: Option<Arc<Chunked>>,
    /// Directory handles: readdir returns only entries whose cookie is
    /// below this one — those that existed when the stream was opened or
    /// last rewound (offset 0). An entry renamed or created during the scan
    /// gets a cookie past it, so a scan ends even when every entry it sees
    /// is renamed away and back (xfstests generic/736). `u64::MAX` for files.
    pub(crate) dir_end: u64,
}

/// The inode table, behind one mutex (`Inner::state`): every node, the
/// inode counter, open handles, and what changed since the last commit.
#[derive(Default)]
pub(crate) struct State {
    /// Boxed: the map's slots stay 16 bytes, so growing it copies little.
    pub(crate) nodes: NodeMap,
    pub(crate) next_ino: u64,
    pub(crate) handles: HashMap<u64, Handle>,
    pub(crate) dirty_inodes: HashSet<u64>,
    pub(crate) dirty_dirents: DirentChanges,
    pub(crate) dirty_xattrs: XattrChanges,
    pub(crate) freed: HashSet<u64>,
    /// Freed local-only inodes (removed from the LOCAL_* tables only).
    pub(crate) freed_local: HashSet<u64>,
    /// Backing files of freed regular files, set aside as
    /// `.doomed-<inode>` (inode, in the local-only directory): deleted only
    /// after a durable commit that records the free (`Inner::commit`,
    /// D76). Until then the store may still name the file, and its working
    /// copy may hold the only copy of bytes an fsync made durable (a file
    /// replaced by a rename before it was hashed): recovery after a crash
    /// puts such a file back, and deletes one whose free is durable.
    pub(crate) drop_after_commit: Vec<(u64, bool)>,
    /// Set-aside backing files whose free a durable commit recorded: the
    /// pool thread deletes them (`wc::pool`).
    pub(crate) unlink_ready: Vec<(u64, bool)>,
    pub(crate) hash_queued: HashSet<u64>,
    /// Inodes a hash worker (or a caller) is hashing now (their `Node::hashing`).
    pub(crate) hashing: HashSet<u64>,
    /// Reserved inode numbers whose (empty) backing file already exists:
    /// `[POOL_WC]` in the working-copy directory, `[POOL_LOCAL]` in the
    /// local-only directory.
    pub(crate) pool: [Vec<u64>; 2],
    /// Group commits that drained a [`Batch`] and have not yet returned
    /// (what they drained is not yet durable).
    pub(crate) commits_in_flight: u32,
    /// Local-only files (not directories, which know their parent): the
    /// last (parent, name) the kernel was given them by (lookup, create,
    /// link, rename, readdirplus), so that a change to such a file's inode
    /// alone (a write, chmod) can be named in `ringfs exec`'s receipt
    /// (`fs::snap::note_local`). A hint: checked against the parent's
    /// entries when used. Dropped when the node is freed.
    pub(crate) local_names: HashMap<u64, (u64, Name)>,
    /// While a fork's tree is deferred (D60): inodes whose atime a read
    /// moved (relatime), kept in memory and not a change of their own;
    /// they are written with the first real change (which writes the tree).
    /// `None` for other stores and after that change.
    pub(crate) lazy_atime: Option<HashSet<u64>>,
}

impl State {
    pub(crate) fn node(&self, ino: u64) -> Result<&Node> {
        self.nodes.get(&ino).map(|n| &**n).ok_or(Errno(libc::ENOENT))
    }
    pub(crate) fn node_mut(&mut self, ino: u64) -> Result<&mut Node> {
        self.nodes.get_mut(&ino).map(|n| &mut **n).ok_or(Errno(libc::ENOENT))
    }
    /// A directory that can receive new entries.
    pub(crate) fn live_dir(&self, ino: u64) -> Result<&Node> {
        let n = self.node(ino)?;
        if !is_dir(n.rec.mode) {
            return err(libc::ENOTDIR);
        }
        if n.rec.nlink == 0 {
            return err(libc::ENOENT);
        }
        Ok(n)
    }
    /// Remembers `parent`/`name` as a name of `ino` when it is a
    /// local-only non-directory ([`State::local_names`]).
    pub(crate) fn note_name(&mut self, ino: u64, parent: u64, name: &[u8]) {
        if self.nodes.get(&ino).is_some_and(|n| n.local && n.dir.is_none()) {
            let known = self.local_names.get(&ino).is_some_and(|(p, n)| *p == parent && &n[..] == name);
            if !known {
                self.local_names.insert(ino, (parent, Arc::from(name)));
            }
        }
    }
    /// The path of local-only file `ino` from [`State::local_names`], if
    /// that name still leads to it.
    pub(crate) fn local_file_path(&self, ino: u64) -> Option<Vec<u8>> {
        let (p, name) = self.local_names.get(&ino)?;
        if self.child(*p, name)?.0 != ino {
            return None;
        }
        let d = self.dir_path(*p);
        Some(if d.is_empty() { name.to_vec() } else { [&d[..], b"/", &name[..]].concat() })
    }
    pub(crate) fn child(&self, parent: u64, name: &[u8]) -> Option<(u64, u64)> {
        self.nodes.get(&parent)?.dir.as_ref()?.by_name.get(name).copied()
    }
    /// Path of directory `dir` relative to the root ("" for the root).
    pub(crate) fn dir_path(&self, mut dir: u64) -> Vec<u8> {
        let mut parts: Vec<&[u8]> = Vec::new();
        while dir != ROOT && parts.len() < 4096 {
            let Some(n) = self.nodes.get(&dir) else { break };
            parts.push(n.dname());
            dir = n.rec.parent;
        }
        parts.reverse();
        parts.join(&b'/')
    }
    pub(crate) fn is_local(&self, ino: u64) -> bool {
        self.nodes.get(&ino).map(|n| n.local).unwrap_or(false)
    }
    pub(crate) fn set_dname(&mut self, child: u64, name: &[u8]) {
        if let Some(c) = self.nodes.get_mut(&child) {
            if let Some(d) = c.dir.as_mut() {
                d.dname = name.into();
            }
        }
    }
    pub(crate) fn touch_inode(&mut self, ino: u64) {
        self.dirty_inodes.insert(ino);
    }
    pub(crate) fn set_ctime(&mut self, ino: u64, t: (i64, u32)) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.rec.ctime = t;
            self.dirty_inodes.insert(ino);
        }
    }
    pub(crate) fn set_mctime(&mut self, ino: u64, t: (i64, u32)) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.rec.mtime = t;
            n.rec.ctime = t;
            self.dirty_inodes.insert(ino);
        }
    }
    /// Links `name` in `parent` to `child` with a fresh cookie.
    pub(crate) fn add_entry(&mut self, parent: u64, name: &[u8], child: u64) -> u64 {
        let p = self.nodes.get_mut(&parent).expect("parent");
        let cookie = p.rec.next_cookie.max(3);
        p.rec.next_cookie = cookie + 1;
        let d = p.dir.as_mut().expect("dir");
        d.insert(name, child, cookie);
        self.dirty_inodes.insert(parent);
        self.dirty_dirents.insert((parent, name.to_vec()), Some((child, cookie)));
        self.set_dname(child, name);
        self.note_name(child, parent, name);
        cookie
    }
    /// Points an existing entry at another child, keeping its cookie.
    pub(crate) fn repoint_entry(&mut self, parent: u64, name: &[u8], child: u64) {
        let d = self.nodes.get_mut(&parent).and_then(|p| p.dir.as_mut()).expect("dir");
        let e = d.by_name.get_mut(name).expect("entry");
        e.0 = child;
        let cookie = e.1;
        self.dirty_dirents.insert((parent, name.to_vec()), Some((child, cookie)));
        self.set_dname(child, name);
        self.note_name(child, parent, name);
    }
    pub(crate) fn remove_entry(&mut self, parent: u64, name: &[u8]) -> Option<(u64, u64)> {
        let d = self.nodes.get_mut(&parent)?.dir.as_mut()?;
        let (child, cookie) = d.by_name.remove(name)?;
        d.by_cookie.remove(&cookie);
        self.dirty_dirents.insert((parent, name.to_vec()), None);
        Some((child, cookie))
    }
    /// Frees `ino` if nothing references it any more (no links, lookups or
    /// open handles): its records go with the next group commit; a regular
    /// file's backing file is for the caller to set aside, outside the lock
    /// (`Fs::finish_free`, D76).
    #[must_use]
    pub(crate) fn maybe_free(&mut self, ino: u64) -> Option<Freed> {
        let n = self.nodes.get(&ino)?;
        if ino == ROOT || n.rec.nlink > 0 || n.lookups > 0 || n.opens > 0 {
            return None;
        }
        let n = self.nodes.remove(&ino).unwrap();
        for name in n.xattrs().keys() {
            self.dirty_xattrs.insert((ino, name.clone()), None);
        }
        self.dirty_inodes.remove(&ino);
        self.hash_queued.remove(&ino);
        self.local_names.remove(&ino);
        if n.local {
            self.freed_local.insert(ino);
        } else {
            self.freed.insert(ino);
        }
        Some(Freed { ino, regular: is_reg(n.rec.mode), data_local: n.data_local })
    }
    pub(crate) fn alloc_ino(&mut self) -> u64 {
        let i = self.next_ino;
        self.next_ino += 1;
        i
    }
    pub(crate) fn dirty_count(&self) -> u64 {
        (self.dirty_inodes.len() + self.dirty_dirents.len() + self.dirty_xattrs.len() + self.freed.len() + self.freed_local.len() + self.hash_queued.len())
            as u64
    }

    /// Takes everything changed since the last group commit as a [`Batch`]
    /// for the store. With `any_local` (local-only records may exist) it
    /// also says which of the inodes named are local-only now, and synced
    /// directories' stored link counts leave out local-only subdirectories
    /// (the store sees only synced ones).
    pub(crate) fn drain(&mut self, any_local: bool) -> Batch {
        let st = self;
        let changed = !(st.dirty_inodes.is_empty() && st.dirty_dirents.is_empty() && st.dirty_xattrs.is_empty() && st.freed.is_empty() && st.freed_local.is_empty());
        if changed {
            if let Some(a) = st.lazy_atime.take() {
                let nodes = &st.nodes;
                st.dirty_inodes.extend(a.into_iter().filter(|i| nodes.contains_key(i)));
            }
        }
        let inodes: Vec<InodeChange> = std::mem::take(&mut st.dirty_inodes)
            .into_iter()
            .map(|i| {
                let v = st.nodes.get(&i).map(|n| {
                    let mut rec = n.rec.clone();
                    if any_local && !n.local {
                        // The store sees only synced subdirectories.
                        if let Some(d) = &n.dir {
                            let local_subdirs =
                                d.by_name.values().filter(|(c, _)| st.nodes.get(c).map(|c| c.local && c.dir.is_some()).unwrap_or(false)).count() as u32;
                            rec.nlink = rec.nlink.saturating_sub(local_subdirs);
                        }
                    }
                    (rec, n.symlink().map(<[u8]>::to_vec))
                });
                (i, v)
            })
            .collect();
        st.shrink_idle();
        let dirents = std::mem::take(&mut st.dirty_dirents);
        let xattrs = std::mem::take(&mut st.dirty_xattrs);
        // Which of the inodes named here are local-only now.
        let mut loc = HashSet::new();
        if any_local {
            let mut mark = |i: u64| {
                if st.nodes.get(&i).map(|n| n.local).unwrap_or(false) {
                    loc.insert(i);
                }
            };
            for (i, _) in &inodes {
                mark(*i);
            }
            for ((p, _), v) in &dirents {
                mark(*p);
                if let Some((c, _)) = v {
                    mark(*c);
                }
            }
            for (i, _) in xattrs.keys() {
                mark(*i);
            }
        }
        Batch {
            inodes,
            dirents,
            xattrs,
            freed: std::mem::take(&mut st.freed),
            freed_local: std::mem::take(&mut st.freed_local),
            loc,
            next_ino: st.next_ino,
            pool: None,
            drops: Vec::new(),
        }
    }

    /// Gives back the memory of tables that grew large and emptied (hash
    /// tables never shrink by themselves): the hash queue, open handles, and
    /// the node table itself after mass deletion (kept at ≥ twice its
    /// length, so that refilling it does not rehash at once).
    fn shrink_idle(&mut self) {
        const SMALL: usize = 1024;
        if self.hash_queued.capacity() > SMALL && self.hash_queued.capacity() > 4 * self.hash_queued.len() {
            self.hash_queued.shrink_to(2 * self.hash_queued.len());
        }
        if self.handles.capacity() > SMALL && self.handles.capacity() > 4 * self.handles.len() {
            self.handles.shrink_to(2 * self.handles.len());
        }
        if self.nodes.capacity() > 16 * SMALL && self.nodes.capacity() > 4 * self.nodes.len() {
            self.nodes.shrink_to(2 * self.nodes.len());
        }
    }

    /// Puts a batch whose commit failed back, so that the next commit
    /// retries it; changes made since it was drained win.
    /// May `fsync` of `ino` skip its durable commit? Yes when nothing is
    /// pending but sizes and times of inodes a durable commit already
    /// holds (by [`meta_key`], `ino` included), i.e. nothing that recovery
    /// after a crash could not take from the working copies: no names,
    /// xattrs, frees, new inodes or other attribute changes, and no
    /// commit in flight whose changes are not yet durable.
    pub(crate) fn only_data_pending(&self, ino: u64) -> bool {
        let durable = |i: &u64| self.nodes.get(i).is_some_and(|n| n.durable_meta == Some(meta_key(&n.rec)));
        self.commits_in_flight == 0
            && self.dirty_dirents.is_empty()
            && self.dirty_xattrs.is_empty()
            && self.freed.is_empty()
            && self.freed_local.is_empty()
            && durable(&ino)
            && self.dirty_inodes.iter().all(durable)
    }

    /// After a durable commit of `drained` (inode, [`meta_key`] at drain
    /// time): those records are what the store holds.
    pub(crate) fn note_durable(&mut self, drained: Vec<(u64, u64)>) {
        for (i, k) in drained {
            if let Some(n) = self.nodes.get_mut(&i) {
                n.durable_meta = Some(k);
            }
        }
    }

    pub(crate) fn put_back(&mut self, b: Batch) {
        for (i, _) in b.inodes {
            if self.nodes.contains_key(&i) {
                self.dirty_inodes.insert(i);
            }
        }
        for (k, v) in b.dirents {
            self.dirty_dirents.entry(k).or_insert(v);
        }
        for (k, v) in b.xattrs {
            self.dirty_xattrs.entry(k).or_insert(v);
        }
        self.freed.extend(b.freed);
        self.freed_local.extend(b.freed_local);
        self.drop_after_commit.extend(b.drops);
    }
}

/// An inode [`State::maybe_free`] removed: its backing file (if `regular`,
/// in the local directory if `data_local`, else `wc/`) is set aside by the
/// caller, outside the lock (`Fs::finish_free`).
#[must_use]
pub(crate) struct Freed {
    pub(crate) ino: u64,
    pub(crate) regular: bool,
    pub(crate) data_local: bool,
}

pub(crate) fn attr_of(ino: u64, n: &Node) -> Attr {
    let r = &n.rec;
    Attr {
        ino,
        size: r.size,
        blocks: r.blocks,
        atime: r.atime.0,
        atime_nsec: r.atime.1,
        mtime: r.mtime.0,
        mtime_nsec: r.mtime.1,
        ctime: r.ctime.0,
        ctime_nsec: r.ctime.1,
        mode: r.mode,
        nlink: r.nlink,
        uid: r.uid,
        gid: r.gid,
        rdev: r.rdev,
        blksize: BLKSIZE,
        btime: (r.btime != (0, 0)).then_some(r.btime),
        flags: r.flags,
    }
}

/// Size, blocks and (if newer, e.g. after passthrough writes) mtime of an
/// open working copy.
pub(crate) fn fstat_into(f: &File, a: &mut Attr) {
    if let Ok(m) = f.metadata() {
        use std::os::unix::fs::MetadataExt;
        a.size = m.size();
        a.blocks = m.blocks();
        let wm = (m.mtime(), m.mtime_nsec() as u32);
        if wm > (a.mtime, a.mtime_nsec) {
            (a.mtime, a.mtime_nsec) = wm;
            if wm > (a.ctime, a.ctime_nsec) {
                (a.ctime, a.ctime_nsec) = wm;
            }
        }
    }
}
