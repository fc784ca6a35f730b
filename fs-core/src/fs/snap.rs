//! Snapshot commands on a live filesystem: [`Fs::snapshot_commit`],
//! [`Fs::exec_begin`]/[`Fs::exec_end`] (the exec points of `ringfs exec`),
//! [`Fs::snapshot_log`] and [`Fs::snapshot_diff`]. Each first makes the
//! store hold the live tree as it is (changed synced files hashed, the
//! inode table flushed in a group commit), then hands over to
//! [`crate::snap`], which reads only the store's tables.
//!
//! Must not know: the object encoding (`snap::object`), FUSE.

use std::time::Instant;

use redb::Durability;

use crate::fs::{dirty_files, Fs, Inner};
use crate::inode::{batch::Batch, State};
use crate::schema::{dec, InodeRec, LOCAL_DIRENTS, LOCAL_INODES};
use crate::snap::object::Meta;
use crate::snap::point::ExecPoint;
use crate::snap::{self, diff::Change, CommitOptions, CommitReport, DiffReport, LogEntry, Point, SnapError};
use crate::types::{Errno, Result};
use crate::wc::note_bypass;

/// One local-only path a group commit changed while an exec point was
/// pinned: whether it was there before that commit and after it.
#[derive(Clone, Debug)]
pub(crate) struct LocalNote {
    pub(crate) path: Vec<u8>,
    pub(crate) before: bool,
    pub(crate) after: bool,
}

/// `Inner::local_log`: the local-only paths changed while any exec point
/// is pinned, in commit order, and per pinned point (token) where its call
/// began in them and the root directory's attributes then.
#[derive(Default)]
pub(crate) struct LocalLog {
    pub(crate) notes: Vec<LocalNote>,
    pub(crate) calls: std::collections::HashMap<u64, (usize, Meta)>,
}

/// What [`Fs::exec_end`] found: the point after the call, the synced
/// paths that differ from the point before it (path order; the workspace
/// root itself, path `""`, first when its mode, owner, flags or xattrs
/// changed), the local-only paths changed meanwhile (path, still there;
/// one created and removed within the call is not listed), and the
/// phases' times.
#[derive(Clone, Debug)]
pub struct ExecEnd {
    pub point: ExecPoint,
    pub changes: Vec<Change>,
    pub local: Vec<(Vec<u8>, bool)>,
    pub phases: Vec<(&'static str, std::time::Duration)>,
}

impl Fs {
    /// Hashes every synced file changed since it was last stored (in the
    /// calling thread, waiting for files a hash worker has in hand). After a
    /// first commit it looks only where such files can be: inodes the
    /// journal names since that commit, the dirty set, the hash queue, files
    /// being hashed and open files; before it, the whole inode table.
    /// Errors: the first file that could not be stored (EIO).
    pub(crate) fn store_changed(&self) -> Result<()> {
        self.take_bypassed();
        // Where files changed since the last commit can be (all of them
        // before the first commit, or when the journal cannot be read).
        let journaled = snap::journaled_since_commit(&self.inner.store).ok().flatten();
        for round in 0.. {
            let dirty = match &journaled {
                Some(j) => {
                    let st = self.inner.lock();
                    let mut cands: std::collections::HashSet<u64> = j.iter().copied().collect();
                    cands.extend(st.dirty_inodes.iter().copied());
                    cands.extend(st.hash_queued.iter().copied());
                    cands.extend(st.hashing.iter().copied());
                    cands.extend(st.handles.values().map(|h| h.ino));
                    cands.into_iter().filter(|i| st.nodes.get(i).is_some_and(|n| crate::posix::is_reg(n.rec.mode) && !n.local && n.content_gen != n.hashed_gen)).collect()
                }
                None => dirty_files(&self.inner.lock()),
            };
            if dirty.is_empty() {
                break;
            }
            if let Some((_, e)) = self.inner.wc().hash_many(&dirty, true).0.into_iter().next() {
                return Err(e);
            }
            if round > 0 {
                // A worker holds some of them: let it finish.
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            if round > 2000 {
                return Err(Errno::EIO);
            }
        }
        Ok(())
    }

    /// The error of a commit (or exec point) whose changed files could not
    /// be stored: a full disk named as such (the store's disk, what to
    /// free); else the errno (the daemon's log names the file). Nothing was
    /// committed; the live tree keeps every change.
    fn not_stored(&self, e: Errno) -> SnapError {
        let kept = "nothing was committed; the workspace keeps every change";
        match self.inner.store.dir() {
            Some(d) if e == Errno(libc::ENOSPC) => SnapError::Store(format!("{}; {kept}", crate::full_disk(d, "storing the changed files"))),
            _ => SnapError::Store(format!("storing changed files: {e} (the daemon's log names the file); {kept}")),
        }
    }

    /// Takes in writes that bypassed the daemon (passthrough, shared
    /// mappings) to files open for writing now, as fsync does: a working
    /// copy whose size or mtime moved is marked changed.
    fn take_bypassed(&self) {
        let mut st = self.inner.lock();
        let open: Vec<(u64, std::sync::Arc<crate::inode::OpenFile>)> = st
            .handles
            .values()
            .filter(|h| h.flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32)
            .filter_map(|h| h.file.clone().map(|f| (h.ino, f)))
            .collect();
        // Local-only files too: their receipt lists them (`note_local`).
        for (ino, f) in open {
            note_bypass(&mut st, ino, &f);
        }
    }

    /// Makes the store hold the live tree: changed files hashed, the inode
    /// table flushed (non-durably; the snapshot's own commit is durable).
    pub(super) fn settle(&self) -> std::result::Result<[(&'static str, std::time::Duration); 2], SnapError> {
        let t = Instant::now();
        self.store_changed().map_err(|e| self.not_stored(e))?;
        let hash = t.elapsed();
        let t = Instant::now();
        // Nothing to flush and nothing stored non-durably: no transaction
        // (an exec call that changed nothing costs no database commit).
        // (A group commit in flight has drained its batch but not written
        // it yet: wait for it through the writer lock.)
        let idle = {
            let st = self.inner.lock();
            st.dirty_count() == 0 && st.commits_in_flight == 0
        } && !self.inner.store.content_pending.load(std::sync::atomic::Ordering::SeqCst);
        if !idle {
            self.flush_for_snapshot()?;
        }
        Ok([("hash", hash), ("flush", t.elapsed())])
    }

    /// The inode table flushed in a non-durable group commit (the
    /// snapshot's own transaction is the durable one).
    fn flush_for_snapshot(&self) -> std::result::Result<(), SnapError> {
        self.inner.commit(Durability::None, false, None).map_err(|e| SnapError::Store(e.to_string()))?;
        // That commit took the "content stored non-durably" flag without
        // making it durable: the next durable group commit must still run
        // (the snapshot's own transaction may be aborted, nothing changed).
        self.inner.store.content_pending.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// `ringfs commit`: a commit of the synced tree on the current branch
    /// (`main`), including every write that returned before the call began
    /// (docs/SEMANTICS.md "Snapshots"). Costs what changed since the last
    /// commit (the journal since the position it covers), not the size of
    /// the tree; the first commit builds every object. Errors:
    /// [`SnapError::Store`] (a file could not be stored, the transaction
    /// failed: the previous head stays).
    pub fn snapshot_commit(&self, opts: &CommitOptions) -> std::result::Result<CommitReport, SnapError> {
        let (phases, sync) = self.settle_for_commit()?;
        let r = snap::commit_tree(&self.inner.store, opts, phases.to_vec(), Some(&self.inner.snap_dirs));
        // Done by now (the commit's own sync waited for it); joined so that
        // no thread outlives the call holding the store open.
        if let Some(h) = sync {
            let _ = h.join();
        }
        // The commit's own transaction on a full disk: said as such too.
        match (r, self.inner.store.dir()) {
            (Err(SnapError::Store(e)), Some(d)) if crate::says_full(&e) => {
                Err(SnapError::Store(format!("{} ({e}); nothing was committed; the workspace keeps every change", crate::full_disk(d, "writing the commit"))))
            }
            (r, _) => r,
        }
    }

    /// [`Fs::settle`] for a commit: once the changed files are stored, the
    /// open pack's fdatasync starts on a thread of its own, so it runs
    /// while the inode table is flushed and the tree built rather than
    /// after (the commit's own `Packs::sync`, in its write transaction,
    /// still waits for it and syncs anything appended since: durability
    /// is unchanged, the two waits overlap instead of adding up).
    #[allow(clippy::type_complexity)]
    fn settle_for_commit(&self) -> std::result::Result<([(&'static str, std::time::Duration); 2], Option<std::thread::JoinHandle<()>>), SnapError> {
        let t = Instant::now();
        self.store_changed().map_err(|e| self.not_stored(e))?;
        let sync = if self.inner.store.packs.needs_sync() {
            let inner = self.inner.clone();
            // Errors are left for the commit's own sync to meet again.
            std::thread::Builder::new()
                .name("ringfs-packsync".into())
                .spawn(move || {
                    let _ = inner.store.packs.sync();
                })
                .ok()
        } else {
            None
        };
        let hash = t.elapsed();
        let t = Instant::now();
        if let Err(e) = self.flush_for_snapshot() {
            if let Some(h) = sync {
                let _ = h.join();
            }
            return Err(e);
        }
        Ok(([("hash", hash), ("flush", t.elapsed())], sync))
    }

    /// `ringfs log`: the current branch's commits, newest first.
    pub fn snapshot_log(&self) -> std::result::Result<Vec<LogEntry>, SnapError> {
        let rtx = self.inner.store.begin_read().map_err(|e| SnapError::Store(e.to_string()))?;
        snap::log_of(&rtx, &self.inner.store.packs)
    }

    /// `ringfs diff`: `from` and `to` are `live`, a branch name or the start
    /// of a commit id; `from` defaults to the last commit, `to` to `live`.
    /// Errors: [`SnapError::Unknown`], [`SnapError::Ambiguous`],
    /// [`SnapError::NoCommits`] (no default `from`), [`SnapError::Store`].
    pub fn snapshot_diff(&self, from: Option<&str>, to: Option<&str>) -> std::result::Result<DiffReport, SnapError> {
        let (a, b) = {
            let rtx = self.inner.store.begin_read().map_err(|e| SnapError::Store(e.to_string()))?;
            let a = match from {
                Some(n) => snap::resolve(&rtx, &self.inner.store.packs, n)?,
                None => Point::Commit(snap::base_commit(&rtx)?),
            };
            let b = match to {
                Some(n) => snap::resolve(&rtx, &self.inner.store.packs, n)?,
                None => Point::Live,
            };
            (a, b)
        };
        if a == Point::Live || b == Point::Live {
            self.settle()?;
        }
        snap::diff_of(&self.inner.store, a, b, Some(&self.inner.snap_dirs))
    }

    /// `ringfs exec`, before the command: settles the live tree and takes
    /// an exec point of it (`snap::point`), pinned until
    /// [`Fs::exec_end`] or [`Fs::exec_release`] with the token returned.
    /// Costs what changed since the last point or commit (the first point
    /// of a store without commits builds the whole tree once).
    /// Errors: [`SnapError::Store`].
    pub fn exec_begin(&self) -> std::result::Result<(u64, ExecPoint), SnapError> {
        self.settle()?;
        let (mut p, token) = snap::point::take(&self.inner.store, false, true)?;
        let token = token.expect("take pins when asked");
        let mut log = self
            .inner
            .local_log
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        p.local_mark = log.notes.len();
        log.calls.insert(token, (p.local_mark, p.root_meta.clone()));
        Ok((token, p))
    }

    /// The local-only paths changed since the point of `token` was taken,
    /// in path order, each once: (path, still there), leaving out paths
    /// that were not there before the call and are not there after it (a
    /// temporary file). The log is emptied once no exec point uses it.
    fn exec_local_changes(&self, token: u64) -> Vec<(Vec<u8>, bool)> {
        let mut log = self
            .inner
            .local_log
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // path → (there before the call, there after it)
        let mut m: std::collections::BTreeMap<&[u8], (bool, bool)> = std::collections::BTreeMap::new();
        let mark = log.calls.remove(&token).map(|c| c.0).unwrap_or(usize::MAX);
        for n in log.notes.iter().skip(mark) {
            m.entry(&n.path[..]).or_insert((n.before, n.after)).1 = n.after;
        }
        let out = m.into_iter().filter(|(_, (b, a))| *b || *a).map(|(p, (_, a))| (p.to_vec(), a)).collect();
        if log.calls.is_empty() {
            log.notes.clear();
        }
        out
    }

    /// `ringfs exec`, after the command: settles the live tree, takes a
    /// point of it (durable when `durable` and anything changed, so every
    /// change the call made is then durable in the store), and returns
    /// it with the paths that differ from the point of `token` (which is
    /// unpinned), the local-only paths changed meanwhile and the time of
    /// each phase (settle, point, diff): an [`ExecEnd`].
    /// Errors: [`SnapError::Unknown`] for a token not pinned (ended
    /// already, or from another daemon), [`SnapError::Store`].
    pub fn exec_end(&self, token: u64, durable: bool) -> std::result::Result<ExecEnd, SnapError> {
        let store = &self.inner.store;
        let Some(before) = store.pinned(token) else {
            return Err(SnapError::Unknown {
                name: format!("exec point {token}"),
                candidates: Vec::new(),
            });
        };
        let t = Instant::now();
        let r = self.settle();
        let settle = t.elapsed();
        let r = r.and_then(|_| {
            let t = Instant::now();
            let (after, _) = snap::point::take(store, durable, false)?;
            let point = t.elapsed();
            let t = Instant::now();
            let mut changes = snap::point::changes(store, &before, &after.root)?;
            // The root's own attributes: no entry holds them.
            let root = self.inner.local_log.lock().unwrap_or_else(|e| e.into_inner()).calls.get(&token).map(|c| c.1.clone());
            if let Some(c) = root.and_then(|m| snap::diff::root_change(&m, &after.root_meta)) {
                changes.insert(0, c);
            }
            Ok(ExecEnd {
                point: after,
                changes,
                local: Vec::new(),
                phases: vec![("settle", settle), ("point", point), ("diff", t.elapsed())],
            })
        });
        store.unpin(token);
        let local = self.exec_local_changes(token);
        r.map(|e| ExecEnd { local, ..e })
    }

    /// Drops the pin of an exec point whose call will not end (its client
    /// failed); `false` if it was not pinned.
    pub fn exec_release(&self, token: u64) -> bool {
        let r = self.inner.store.unpin(token).is_some();
        self.exec_local_changes(token);
        r
    }

    /// Tests: (root of a from-scratch build of the tables, root of the head
    /// commit), after settling.
    #[cfg(test)]
    pub(crate) fn snapshot_full_root(&self) -> ([u8; 32], [u8; 32]) {
        self.settle().unwrap();
        snap::full_root(&self.inner.store).unwrap()
    }
}

/// Called with each group commit's batch while the inode table is locked
/// (and the store's writer taken, so the tables hold what the commits
/// before it wrote): while an exec point is pinned, appends to
/// `Inner::local_log` the local-only paths the batch changes, each with
/// whether it was there before the batch (its entry in `local_dirents`)
/// and after it. Names: entries named or removed under a local-only
/// directory, or whose child is local-only, or whose path the ignore
/// patterns match; local-only inodes whose record differs from the stored
/// one in more than its atime/ctime (a write, chmod, chown) or whose
/// xattrs changed, named by their directory's path or, for files, by the
/// name the kernel last used ([`State::local_file_path`]). Costs the
/// batch, not the tree.
pub(super) fn note_local(inner: &Inner, st: &State, b: &Batch) {
    if b.loc.is_empty() && b.freed_local.is_empty() && b.dirents.values().all(|v| v.is_some()) {
        return;
    }
    if inner.store.pinned_roots().is_empty() {
        return;
    }
    let join = |dir: u64, name: &[u8]| {
        let d = st.dir_path(dir);
        if d.is_empty() {
            name.to_vec()
        } else {
            [&d[..], b"/", name].concat()
        }
    };
    // The local tables as the commits before this one left them (no
    // table: treated as "was there", the old behaviour).
    let rtx = inner.store.begin_read().ok();
    let dirents = rtx.as_ref().and_then(|t| t.open_table(LOCAL_DIRENTS).ok());
    let inodes = rtx.as_ref().and_then(|t| t.open_table(LOCAL_INODES).ok());
    let had_entry = |p: u64, name: &[u8]| dirents.as_ref().is_none_or(|t| t.get((p, name)).ok().flatten().is_some());
    let mut out: Vec<LocalNote> = Vec::new();
    let mut named = std::collections::HashSet::new();
    for ((p, name), v) in &b.dirents {
        let local = b.loc.contains(p)
            || v.is_some_and(|(c, _)| b.loc.contains(&c))
            || (v.is_none()
                && inner.policy.as_ref().is_some_and(|pol| {
                    pol.matches(&join(*p, name), false) || pol.matches(&join(*p, name), true)
                }));
        if local {
            if let Some((c, _)) = v {
                named.insert(*c);
            }
            out.push(LocalNote { path: join(*p, name), before: had_entry(*p, name), after: v.is_some() });
        }
    }
    // Inodes whose own record or xattrs changed, named or not above.
    let mut touched: Vec<u64> = b.inodes.iter().filter(|(i, v)| v.is_some() && b.loc.contains(i)).map(|(i, _)| *i).collect();
    touched.extend(b.xattrs.keys().map(|(i, _)| *i).filter(|i| b.loc.contains(i)));
    touched.sort_unstable();
    touched.dedup();
    let xattr_changed: std::collections::HashSet<u64> = b.xattrs.keys().map(|(i, _)| *i).collect();
    for ino in touched {
        if named.contains(&ino) {
            continue;
        }
        let Some(n) = st.nodes.get(&ino) else { continue };
        // Changed beyond its atime/ctime since the stored record? (A read
        // moves the atime; an entry added to a directory its mtime.)
        let stored: Option<InodeRec> = inodes.as_ref().and_then(|t| t.get(ino).ok().flatten()).and_then(|g| dec(g.value()).ok());
        let r = &n.rec;
        let changed = xattr_changed.contains(&ino)
            || match &stored {
                None => true,
                Some(o) if n.dir.is_some() => (o.mode, o.uid, o.gid, o.flags) != (r.mode, r.uid, r.gid, r.flags),
                Some(o) => (o.mode, o.uid, o.gid, o.flags, o.size, o.mtime) != (r.mode, r.uid, r.gid, r.flags, r.size, r.mtime),
            };
        if !changed {
            continue;
        }
        let path = if n.dir.is_some() { Some(st.dir_path(ino)) } else { st.local_file_path(ino) };
        if let Some(path) = path {
            out.push(LocalNote { path, before: true, after: true });
        }
    }
    if !out.is_empty() {
        inner
            .local_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .notes
            .extend(out);
    }
}
