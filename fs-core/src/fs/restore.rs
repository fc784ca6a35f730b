//! `ringfs restore` on a live filesystem ([`Fs::snapshot_restore`]): the
//! live tree made a commit's, whole or below given paths, through the inode
//! table as unlink, rmdir, mknod/mkdir/symlink and setattr would change it,
//! so lookup counts, open handles, the journal and the next commit stay
//! consistent (docs/SEMANTICS.md "Snapshots", docs/DECISIONS.md D34).
//!
//! A file whose content differs gets a new inode holding the commit's
//! manifest (its chunks are in the store already: references added, no
//! byte copied); its working copy is rebuilt from the chunks at its first
//! open (`wc::Wc::open_wc`). The old inode is unlinked, so open handles
//! keep reading it, as after `rm`. Every change to the inode table is made
//! under one hold of its lock and written by one group commit (durable
//! before the call returns): a crash leaves the tree before or after.
//!
//! Owns: applying [`Step`]s, what is left alone (local-only paths), the
//! cache invalidations the caller must send. Must not know: FUSE (the
//! invalidations are returned), the object encoding beyond the steps.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use redb::Durability;

use crate::fs::Fs;
use crate::inode::{Freed, Node, State, ROOT};
use crate::posix::*;
use crate::live::remove_manifest;
use crate::schema::{bump_chunk_counters, InodeRec};
use crate::snap::object::{hex_id, EntryKind, Meta, ObjectId, Target};
use crate::snap::restore::{clean_path, plan_restore, Inval, RestoreReport, Step};
use crate::snap::{self, Point, SnapError};

fn se<E: std::fmt::Display>(e: E) -> SnapError {
    SnapError::Store(e.to_string())
}

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        name.to_vec()
    } else {
        [prefix, b"/", name].concat()
    }
}

/// The inode at `path` (relative to the root), if every component is there.
fn resolve(st: &State, path: &[u8]) -> Option<u64> {
    let mut ino = ROOT;
    if path.is_empty() {
        return Some(ino);
    }
    for c in path.split(|b| *b == b'/') {
        ino = st.child(ino, c)?.0;
    }
    Some(ino)
}

/// The state of one apply, under the inode-table lock.
struct Apply<'a> {
    fs: &'a Fs,
    st: &'a mut State,
    t: (i64, u32),
    rep: &'a mut RestoreReport,
    freed: Vec<Freed>,
    /// Inodes made by this restore (the kernel knows nothing of them).
    new: HashSet<u64>,
    entries: Vec<(u64, Vec<u8>)>,
    inodes: HashSet<u64>,
    /// Regular files whose attributes were set in place: their working
    /// copies get the commit's mtime after the lock (mtime).
    wc_mtimes: Vec<(u64, (i64, u32))>,
    /// Paths other filesystems are mounted on: kept like local-only ones.
    mounts: &'a HashSet<Vec<u8>>,
}

impl Apply<'_> {
    /// A name of `parent` changed: the kernel's entry and the directory's
    /// attributes (link count, mtime) are stale.
    fn entry_changed(&mut self, parent: u64, name: &[u8]) {
        if !self.new.contains(&parent) {
            self.entries.push((parent, name.to_vec()));
            self.inodes.insert(parent);
        }
        self.st.set_mctime(parent, self.t);
    }

    /// Removes `name` (inode `child`) from `parent`, a directory's entries
    /// first. Local-only inodes are kept, and so is a directory still
    /// holding one. Returns how many names went (0: kept).
    fn remove(&mut self, parent: u64, name: &[u8], child: u64, path: &[u8]) -> u64 {
        let Some(n) = self.st.nodes.get(&child) else { return 0 };
        if n.local || self.mounts.contains(path) {
            self.rep.kept.push(path.to_vec());
            return 0;
        }
        let mut gone = 0;
        let dir = is_dir(n.rec.mode);
        if dir {
            let kids: Vec<(Vec<u8>, u64)> = n.dir.as_ref().map(|d| d.by_name.iter().map(|(k, (c, _))| (k.to_vec(), *c)).collect()).unwrap_or_default();
            for (k, c) in kids {
                gone += self.remove(child, &k, c, &join(path, &k));
            }
            if self.st.nodes.get(&child).and_then(|n| n.dir.as_ref()).is_some_and(|d| !d.by_name.is_empty()) {
                return gone;
            }
        }
        self.st.remove_entry(parent, name);
        let t = self.t;
        if let Ok(n) = self.st.node_mut(child) {
            n.rec.nlink = if dir { 0 } else { n.rec.nlink.saturating_sub(1) };
            n.rec.ctime = t;
        }
        self.st.touch_inode(child);
        if dir {
            if let Ok(p) = self.st.node_mut(parent) {
                p.rec.nlink = p.rec.nlink.saturating_sub(1);
            }
        }
        self.entry_changed(parent, name);
        self.freed.extend(self.st.maybe_free(child));
        gone + 1
    }

    /// Makes `e` as `name` in `parent` (a regular file as inode `ino`, whose
    /// manifest of `size` bytes and `blocks` 512-byte units — its chunks'
    /// pages, holes excluded — the store holds). False: left alone.
    fn add(&mut self, parent: u64, e: &crate::snap::object::Entry, ino: Option<u64>, (size, blocks): (u64, u64), path: &[u8]) -> bool {
        let dir = e.kind == EntryKind::Dir;
        if !self.st.nodes.get(&parent).is_some_and(|p| p.dir.is_some() && p.rec.nlink > 0) || self.fs.inner.local_for(&*self.st, parent, &e.name, dir) {
            self.rep.kept.push(path.to_vec());
            return false;
        }
        if let Some((old, _)) = self.st.child(parent, &e.name) {
            // Made meanwhile, or a directory kept for its local-only entries.
            let had = self.st.nodes.get(&old).map(|n| n.local || n.dir.is_some()).unwrap_or(false);
            if had || self.remove(parent, &e.name, old, path) == 0 {
                self.rep.kept.push(path.to_vec());
                return false;
            }
        }
        let m = &e.meta;
        let (size, blocks) = match e.kind {
            EntryKind::File => (size, blocks),
            EntryKind::Dir => (4096, 8),
            EntryKind::Symlink => (m.size, 0),
            _ => (0, 0),
        };
        let t = self.t;
        let rec = InodeRec {
            mode: e.kind.type_bits() | (m.mode & 0o7777),
            uid: m.uid,
            gid: m.gid,
            size,
            blocks,
            nlink: if dir { 2 } else { 1 },
            rdev: m.rdev,
            atime: t,
            mtime: m.mtime,
            ctime: t,
            parent: if dir { parent } else { 0 },
            next_cookie: 3,
            btime: t,
            flags: m.flags,
        };
        let ino = ino.unwrap_or_else(|| self.st.alloc_ino());
        let mut node = Node::new(rec);
        if let Target::Symlink(l) = &e.target {
            node.set_symlink(Some(l.clone()));
        }
        for (k, v) in &m.xattrs {
            self.st.dirty_xattrs.insert((ino, k.clone()), Some(v.clone()));
            node.xattrs_mut().insert(k.clone(), v.clone());
        }
        self.st.nodes.insert(ino, Box::new(node));
        self.st.touch_inode(ino);
        self.st.add_entry(parent, &e.name, ino);
        if dir {
            if let Ok(p) = self.st.node_mut(parent) {
                p.rec.nlink += 1;
            }
        }
        self.entry_changed(parent, &e.name);
        self.new.insert(ino);
        true
    }

    /// Sets the attributes of `ino` to `m` in place (kind and content stay).
    fn meta(&mut self, ino: u64, m: &Meta) {
        let t = self.t;
        let Ok(n) = self.st.node_mut(ino) else { return };
        if n.local {
            return;
        }
        n.rec.mode = (n.rec.mode & S_IFMT) | (m.mode & 0o7777);
        n.rec.uid = m.uid;
        n.rec.gid = m.gid;
        n.rec.mtime = m.mtime;
        n.rec.flags = m.flags;
        n.rec.ctime = t;
        let reg = is_reg(n.rec.mode);
        let want: HashMap<&[u8], &[u8]> = m.xattrs.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        let gone: Vec<Vec<u8>> = n.xattrs().keys().filter(|k| !want.contains_key(&k[..])).cloned().collect();
        let set: Vec<(Vec<u8>, Vec<u8>)> = m.xattrs.iter().filter(|(k, v)| n.xattrs().get(k) != Some(v)).cloned().collect();
        for k in &gone {
            n.xattrs_mut().remove(k);
        }
        for (k, v) in &set {
            n.xattrs_mut().insert(k.clone(), v.clone());
        }
        for k in gone {
            self.st.dirty_xattrs.insert((ino, k), None);
        }
        for (k, v) in set {
            self.st.dirty_xattrs.insert((ino, k), Some(v));
        }
        self.st.touch_inode(ino);
        if !self.new.contains(&ino) {
            self.inodes.insert(ino);
            if reg {
                self.wc_mtimes.push((ino, m.mtime));
            }
        }
    }

    /// The mounted-on path (of [`Apply::mounts`]) that `path` lies strictly
    /// below, or is when `or_at`.
    fn under_mount(&self, path: &[u8], or_at: bool) -> Option<Vec<u8>> {
        self.mounts.iter().find(|m| (or_at && path == &m[..]) || (path.len() > m.len() && path.starts_with(m) && path[m.len()] == b'/')).cloned()
    }

    /// Applies `steps` in order; `inos` gives the inode numbers (with
    /// stored manifests) of the regular files added, by step index.
    fn run(&mut self, steps: &[Step], inos: &HashMap<usize, u64>, used: &mut HashSet<u64>) {
        for (i, s) in steps.iter().enumerate() {
            let joined;
            let path: &[u8] = match s {
                Step::Remove { dir, name, .. } => {
                    joined = join(dir, name);
                    &joined
                }
                Step::Add { dir, entry, .. } => {
                    joined = join(dir, &entry.name);
                    &joined
                }
                Step::Meta { path, .. } => path,
            };
            // Inside a directory another filesystem is mounted on (and its
            // own attributes): left alone, the mount listed as kept.
            if let Some(m) = self.under_mount(path, matches!(s, Step::Meta { .. })) {
                self.rep.kept.push(m);
                continue;
            }
            match s {
                Step::Remove { dir, name, replaced } => {
                    let Some(p) = resolve(&*self.st, dir) else { continue };
                    let Some((child, _)) = self.st.child(p, name) else { continue };
                    let gone = self.remove(p, name, child, path);
                    self.rep.removed += gone.saturating_sub(*replaced as u64);
                }
                Step::Add { dir, entry, content, replaces } => {
                    let Some(p) = resolve(&*self.st, dir) else {
                        self.rep.kept.push(path.to_vec());
                        continue;
                    };
                    let ino = inos.get(&i).copied();
                    let size = content.as_ref().map(|c| c.size).unwrap_or(0);
                    // A sparse file's holes take no blocks (du, cp --sparse), as in a fork (D60).
                    let blocks = content.as_ref().map(|c| crate::schema::data_blocks(&c.chunks)).unwrap_or(0);
                    if self.add(p, entry, ino, (size, blocks), path) {
                        if let Some(ino) = ino {
                            used.insert(ino);
                        }
                        self.rep.bytes += size;
                        if *replaces {
                            self.rep.rewritten += 1;
                        } else {
                            self.rep.added += 1;
                        }
                    }
                }
                Step::Meta { meta, counted, .. } => {
                    let Some(ino) = resolve(&*self.st, path) else { continue };
                    self.meta(ino, meta);
                    self.rep.changed += *counted as u64;
                }
            }
        }
    }
}

impl Fs {
    /// `ringfs restore`: makes the live tree the tree of `commit` (a branch
    /// name or the start of a commit id), whole, or only at `paths`
    /// (relative to the workspace root; a path absent from the commit is
    /// removed). Files absent from the commit are removed, files whose
    /// content, kind or symlink target differs are replaced by new inodes
    /// (open handles keep the old one, as after `rm`), attributes that
    /// differ are set in place; local-only paths are left alone (listed in
    /// `kept`). Durable when it returns; a crash during it leaves the tree
    /// before or after. Costs what differs between the two trees. The
    /// caller sends [`RestoreReport::invalidations`] to the kernel.
    ///
    /// Errors: [`SnapError::Unknown`], [`SnapError::Ambiguous`],
    /// [`SnapError::NotACommit`] (`live`), [`SnapError::BadPath`],
    /// [`SnapError::Store`] (nothing restored, or, when the durable commit
    /// failed, restored in memory and retried by the group commit).
    pub fn snapshot_restore(&self, commit: &str, paths: &[Vec<u8>]) -> std::result::Result<RestoreReport, SnapError> {
        self.snapshot_restore_keeping(commit, paths, &HashSet::new())
    }

    /// [`Fs::snapshot_restore`], leaving alone the paths in `mounts`
    /// (relative to the root, as bytes: where other filesystems are mounted
    /// in the workspace): nothing at or below them changes and the
    /// directories above them are neither removed nor replaced — the kernel
    /// would detach a mount whose directory entry the restore invalidates —
    /// and they are listed as kept.
    pub fn snapshot_restore_keeping(&self, commit: &str, paths: &[Vec<u8>], mounts: &HashSet<Vec<u8>>) -> std::result::Result<RestoreReport, SnapError> {
        let paths = paths.iter().map(|p| clean_path(p)).collect::<std::result::Result<Vec<_>, _>>()?;
        let id = {
            let rtx = self.inner.store.begin_read().map_err(se)?;
            match snap::resolve(&rtx, &self.inner.store.packs, commit) {
                Ok(Point::Commit(id)) => id,
                Ok(Point::Live) => return Err(SnapError::NotACommit(commit.to_string())),
                // `live` names no commit to restore: not offered here.
                Err(SnapError::Unknown { name, mut candidates }) => {
                    candidates.retain(|c| c != "live");
                    return Err(SnapError::Unknown { name, candidates });
                }
                Err(e) => return Err(e),
            }
        };
        let mut rep = RestoreReport { commit: hex_id(&id), ..Default::default() };
        rep.phases = self.settle()?.to_vec();
        let t = Instant::now();
        let steps = plan_restore(&self.inner.store, &id, &paths).map_err(|e| self.local_only_path(e))?;
        rep.phases.push(("plan", t.elapsed()));
        let t = Instant::now();
        let inos = self.store_manifests(&steps, &id)?;
        if crate::snap::gc::failpoint_armed("restore-after-manifests") {
            // Test-only: the manifests made durable (as any durable commit
            // in between would make them), then killed before the tree's.
            if let Ok(txn) = self.inner.store.begin_write_plain() {
                let _ = txn.commit();
            }
            crate::snap::gc::failpoint("restore-after-manifests");
        }
        rep.phases.push(("manifests", t.elapsed()));
        let t = Instant::now();
        let mut used = HashSet::new();
        let (freed, wc_mtimes) = {
            let mut st = self.inner.lock();
            let mut a = Apply {
                fs: self,
                st: &mut st,
                t: now(),
                rep: &mut rep,
                freed: Vec::new(),
                new: HashSet::new(),
                entries: Vec::new(),
                inodes: HashSet::new(),
                wc_mtimes: Vec::new(),
                mounts,
            };
            a.run(&steps, &inos, &mut used);
            a.rep.kept.sort();
            a.rep.kept.dedup();
            let (entries, inodes, freed, wc_mtimes) = (a.entries, a.inodes, a.freed, a.wc_mtimes);
            rep.invalidations = entries.into_iter().map(|(parent, name)| Inval::Entry { parent, name }).collect();
            let mut inodes: Vec<u64> = inodes.into_iter().collect();
            inodes.sort_unstable();
            rep.invalidations.extend(inodes.into_iter().map(Inval::Inode));
            let files: Vec<(Option<std::sync::Arc<crate::inode::OpenFile>>, u64, (i64, u32))> =
                wc_mtimes.into_iter().map(|(i, m)| (st.nodes.get(&i).and_then(|n| n.file.clone()), i, m)).collect();
            (freed, files)
        };
        rep.phases.push(("apply", t.elapsed()));
        let t = Instant::now();
        self.drop_unused_manifests(&inos, &used);
        // The working copies of freed files are set aside; one group commit
        // holds every change above (they were made under one hold of the
        // lock), durable before those go (`Inner::set_aside`).
        for f in freed {
            self.finish_free(Some(f));
        }
        let durable = self.inner.commit(Durability::Immediate, true, None);
        for (open, ino, mtime) in wc_mtimes {
            let f = match open {
                Some(o) => {
                    crate::wc::set_mtime(&o.file, mtime);
                    *o.seen() = o.file.metadata().ok().map(|m| crate::inode::wc_stamp(&m));
                    continue;
                }
                None => self.inner.data_dir(false).open_rw(&ino.to_string()),
            };
            if let Ok(f) = f {
                crate::wc::set_mtime(&f, mtime);
            }
        }
        rep.phases.push(("durable", t.elapsed()));
        durable.map_err(|e| SnapError::Store(format!("restored, but the durable commit failed ({e}); the group commit retries it, run ringfs restore again to be sure")))?;
        if paths.is_empty() {
            snap::refs::base_after_restore(&self.inner.store, &id)?;
        }
        Ok(rep)
    }

    /// A path the plan found in neither tree that is a local-only path of
    /// the live tree (outside snapshots): said so, instead of "check the
    /// spelling". Other errors as they are.
    fn local_only_path(&self, e: SnapError) -> SnapError {
        let SnapError::BadPath { path, why } = e else { return e };
        let st = self.inner.lock();
        let local = |ino: u64| st.nodes.get(&ino).is_some_and(|n| n.local);
        let mut ino = crate::inode::ROOT;
        for c in path.as_bytes().split(|b| *b == b'/') {
            match st.child(ino, c) {
                Some((i, _)) => ino = i,
                // Below a local-only directory (a native root's contents
                // are the host's, not the daemon's): local-only too.
                None if local(ino) => break,
                None => return SnapError::BadPath { path, why },
            }
        }
        if local(ino) {
            let why = "a local-only path of the live tree (it matches the workspace's ignore globs, or is in a native root): restore leaves local-only paths alone".to_string();
            return SnapError::BadPath { path, why };
        }
        SnapError::BadPath { path, why }
    }

    /// Gives every regular file the plan adds a fresh inode number and
    /// stores the commit's manifest as its content (chunk references
    /// added, no bytes copied), in one transaction: step index → inode.
    /// Errors: a chunk the store lacks (the commit is damaged).
    fn store_manifests(&self, steps: &[Step], commit: &ObjectId) -> std::result::Result<HashMap<usize, u64>, SnapError> {
        let mut inos = HashMap::new();
        {
            let mut st = self.inner.lock();
            for (i, s) in steps.iter().enumerate() {
                if let Step::Add { content: Some(_), .. } = s {
                    inos.insert(i, st.alloc_ino());
                }
            }
        }
        if inos.is_empty() {
            return Ok(inos);
        }
        let store = &self.inner.store;
        let mut txn = store.begin_write().map_err(se)?;
        txn.set_durability(Durability::None).map_err(se)?;
        let mut done = Vec::new();
        for (i, ino) in &inos {
            let Step::Add { dir, entry, content: Some(f), .. } = &steps[*i] else { continue };
            match store.put_content(&txn, *ino, f.size, &f.chunks, |_, _| false).map_err(se)? {
                Some((_, dc, db)) => done.push((*ino, dc, db)),
                None => {
                    let _ = txn.abort();
                    return Err(SnapError::Store(format!(
                        "{} in commit {} names a chunk the store lacks; nothing restored (ringfs fsck --store DIR after unmounting says more)",
                        String::from_utf8_lossy(&join(dir, &entry.name)),
                        &hex_id(commit)[..12]
                    )));
                }
            }
        }
        txn.commit().map_err(se)?;
        for (ino, dc, db) in done {
            store.content_committed(ino, dc, db);
        }
        Ok(inos)
    }

    /// Drops the manifests [`Fs::store_manifests`] stored for files the
    /// apply left alone (local-only now): no inode has them.
    fn drop_unused_manifests(&self, inos: &HashMap<usize, u64>, used: &HashSet<u64>) {
        let unused: Vec<u64> = inos.values().filter(|i| !used.contains(i)).copied().collect();
        if unused.is_empty() {
            return;
        }
        let r = (|| -> std::result::Result<(i64, i64), redb::Error> {
            let txn = self.inner.store.begin_write()?;
            let (mut dc, mut db) = (0i64, 0i64);
            for ino in unused {
                let (c, b) = remove_manifest(&txn, ino)?;
                dc -= c as i64;
                db -= b as i64;
            }
            bump_chunk_counters(&txn, dc, db)?;
            txn.commit()?;
            Ok((dc, db))
        })();
        match r {
            Ok((dc, db)) => self.inner.store.bump_counters(dc, db),
            Err(e) => tracing::warn!("restore: dropping manifests of files left alone: {e} (recovery drops them at the next mount)"),
        }
    }
}
