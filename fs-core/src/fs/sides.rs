//! The local-only boundary: which side (synced or local-only) a name
//! belongs on by the ignore patterns ([`Inner::local_for`]), and moving an
//! inode and its subtree across it on rename or a pattern change, bytes
//! and records alike ([`Inner::plan_sides`], [`Inner::apply_sides`]).
//!
//! Must not touch: the store's tables (records are rewritten on the new side
//! by the next group commit), FUSE.

use crate::fs::Inner;
use crate::inode::State;
use crate::posix::*;
use crate::types::*;

/// One inode changing sides: (ino, local now, parent, name).
pub(super) type SideMove = (u64, bool, u64, Vec<u8>);

impl Inner {
    /// Is `name` in `parent` local-only (for a new entry of that kind)?
    pub(super) fn local_for(&self, st: &State, parent: u64, name: &[u8], is_dir: bool) -> bool {
        if st.is_local(parent) {
            return true;
        }
        match &self.policy {
            Some(p) => p.matches(&join_path(&st.dir_path(parent), name), is_dir),
            None => false,
        }
    }

    /// The inodes whose side changes if `ino` (named `name` in `parent`)
    /// becomes `local`, with its subtree re-evaluated by path:
    /// (ino, local, parent, name). EXDEV if a file with several links would
    /// change sides (`strict`; otherwise such files are left alone).
    pub(super) fn plan_sides(&self, st: &State, ino: u64, local: bool, parent: u64, name: &[u8], strict: bool) -> Result<Vec<SideMove>> {
        let mut out = Vec::new();
        let start_path = if self.policy.is_some() && !local { join_path(&st.dir_path(parent), name) } else { Vec::new() };
        let mut stack = vec![(ino, local, parent, name.to_vec(), start_path)];
        while let Some((i, local, parent, name, path)) = stack.pop() {
            let Some(n) = st.nodes.get(&i) else { continue };
            if !local && self.host.is_root(i) {
                // A native root's tree is taken into the model afterwards
                // (`import_unmatched_roots`), or at a rename refused (EXDEV).
                continue;
            }
            if n.local != local {
                if n.dir.is_none() && n.rec.nlink > 1 {
                    if strict {
                        return err(libc::EXDEV);
                    }
                    continue;
                }
                out.push((i, local, parent, name.clone()));
            }
            if let Some(d) = &n.dir {
                if !local && self.policy.is_none() && !d.by_name.values().any(|(c, _)| st.is_local(*c)) {
                    continue; // nothing below can change
                }
                for (cname, (c, _)) in &d.by_name {
                    let Some(cn) = st.nodes.get(c) else { continue };
                    let cpath = if local || self.policy.is_none() { Vec::new() } else { join_path(&path, cname) };
                    let cl = local || self.policy.as_ref().map(|p| p.matches(&cpath, cn.dir.is_some())).unwrap_or(false);
                    stack.push((*c, cl, i, cname.to_vec(), cpath));
                }
            }
        }
        Ok(out)
    }

    /// Moves inodes to their new side (see [`Inner::plan_sides`]): their
    /// bytes (renameat between the backing directories; a file stays
    /// where it is if that fails, e.g. across filesystems) and every
    /// record of theirs is rewritten on the new side at the next commit.
    pub(super) fn apply_sides(&self, st: &mut State, plan: &[SideMove]) {
        for (ino, local, parent, name) in plan {
            let (ino, local) = (*ino, *local);
            let Some(n) = st.nodes.get_mut(&ino) else { continue };
            let reg = is_reg(n.rec.mode);
            if reg && n.data_local != local {
                let fname = ino.to_string();
                let (from, to) = (self.data_dir(n.data_local), self.data_dir(local));
                if !from.exists(&fname) {
                    // A synced file with no working copy (a fork's base
                    // file, a restored or chunk-served one, a lazy
                    // clone's) has its bytes only in the store, which keeps
                    // no local-only bytes: written out first, or the file
                    // would read as zeros on its new side (D71). If that
                    // fails it stays synced, bytes and all.
                    if local && !n.data_local {
                        let (size, mtime) = (n.rec.size, n.rec.mtime);
                        if let Err(e) = crate::wc::rebuild(&self.store, &self.dirs.local, ino, || Ok(size), mtime) {
                            tracing::error!("inode {ino} stays synced: its bytes are only in the store and could not be written to the local-only directory: {e:?}");
                            continue;
                        }
                    }
                    n.data_local = local;
                } else if let Err(e) = from.rename_to(&fname, to, &fname) {
                    tracing::warn!("moving the bytes of inode {ino} between {} and {}: {e}; they stay", from.path().display(), to.path().display());
                } else {
                    n.data_local = local;
                }
            }
            n.local = local;
            if reg && !local {
                // Now synced: its content enters the store.
                n.content_gen += 1;
            }
            let xattrs: Vec<(Vec<u8>, Vec<u8>)> = n.xattrs().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let children: Vec<(Vec<u8>, (u64, u64))> =
                n.dir.as_ref().map(|d| d.by_name.iter().map(|(k, v)| (k.to_vec(), *v)).collect()).unwrap_or_default();
            let opens = n.opens;
            st.dirty_inodes.insert(ino);
            st.dirty_inodes.insert(*parent);
            for (k, v) in xattrs {
                st.dirty_xattrs.insert((ino, k), Some(v));
            }
            for (k, v) in children {
                st.dirty_dirents.insert((ino, k), Some(v));
            }
            if let Some(e) = st.child(*parent, name) {
                st.dirty_dirents.insert((*parent, name.clone()), Some(e));
            }
            if local {
                st.hash_queued.remove(&ino);
                st.note_name(ino, *parent, name);
            } else if reg && opens == 0 {
                self.queue_hash(st, ino);
            }
        }
    }
}
