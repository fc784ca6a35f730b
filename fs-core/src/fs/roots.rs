//! Native roots as the inode table sees them: serving the trees found at
//! mount, making local-only directories kept the flat way native roots
//! ([`Inner::migrate_flat_roots`]), taking back into the store the roots
//! the ignore patterns no longer match ([`Inner::import_unmatched_roots`]),
//! the root listener, and the list `ringfs status` shows. The host trees
//! themselves are [`crate::host`]'s.
//!
//! Owns: moving a subtree between the model and a host tree. Must not
//! touch: FUSE, the bind mounts (the `native-roots` crate places them when
//! the listener is told), the host tree's own requests (`host.rs`).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::Durability;

use crate::fs::{Fs, Inner};
use crate::inode::{Node, ROOT};
use crate::posix::*;
use crate::schema::InodeRec;
use crate::types::*;

impl Inner {
    /// Serves every native root found on disk whose directory is still a
    /// live local-only directory; an orphaned tree is left alone (warned).
    pub(super) fn attach_roots(&self) {
        let st = self.lock();
        for ino in self.host.on_disk() {
            let ok = st.nodes.get(&ino).map(|n| is_dir(n.rec.mode) && n.local && n.rec.nlink > 0).unwrap_or(false);
            let empty = st.nodes.get(&ino).and_then(|n| n.dir.as_ref()).map(|d| d.by_name.is_empty()).unwrap_or(true);
            if !ok || !empty {
                tracing::warn!("native root tree {} has no local-only directory in the workspace; left as is", self.host.root_path(ino).display());
                continue;
            }
            if let Err(e) = self.host.attach_root(ino) {
                tracing::warn!("native root tree {}: {e}", self.host.root_path(ino).display());
            }
        }
    }

    /// Makes every eligible local-only directory kept the flat way (by an
    /// earlier mount with native roots off, or one that the ignore patterns
    /// made local-only) a native root: its subtree is rebuilt as a host
    /// tree in `roots/<ino>.new` (file data hard-linked, else copied), renamed
    /// into place, then removed from the model and committed. On any error
    /// the directory stays as it was (warned).
    pub(super) fn migrate_flat_roots(&self) {
        let cands: Vec<u64> = {
            let st = self.lock();
            let mut v: Vec<u64> = st
                .nodes
                .iter()
                .filter(|(i, n)| **i != ROOT && n.local && n.dir.is_some() && n.rec.nlink > 0 && !st.is_local(n.rec.parent) && !self.host.is_root(**i))
                .map(|(i, _)| *i)
                .collect();
            v.sort_unstable();
            v
        };
        let mut done = 0;
        for ino in cands {
            match self.migrate_one(ino) {
                Ok(()) => done += 1,
                Err(e) => tracing::warn!("local-only directory inode {ino} stays served by the daemon: making it a native root failed: {e}"),
            }
        }
        if done > 0 {
            tracing::info!("{done} local-only directories became native roots");
            if let Err(e) = self.commit(Durability::Immediate, true, None) {
                tracing::warn!("committing migrated native roots: {e}");
            }
        }
    }

    pub(super) fn migrate_one(&self, root: u64) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let mut st = self.lock();
        // The subtree, parents before children: (ino, parent, name).
        let mut order: Vec<(u64, u64, Vec<u8>)> = Vec::new();
        let mut stack = vec![root];
        let mut links: HashMap<u64, u32> = HashMap::new();
        while let Some(d) = stack.pop() {
            let Some(dd) = st.nodes.get(&d).and_then(|n| n.dir.as_ref()) else { continue };
            for (name, (c, _)) in &dd.by_name {
                order.push((*c, d, name.to_vec()));
                match st.nodes.get(c) {
                    Some(n) if n.dir.is_some() => stack.push(*c),
                    Some(_) => *links.entry(*c).or_default() += 1,
                    None => return Err(std::io::Error::other(format!("dangling entry to inode {c}"))),
                }
            }
        }
        for (c, k) in &links {
            if st.nodes[c].rec.nlink != *k {
                return Err(std::io::Error::other(format!("inode {c} has hard links outside the directory")));
            }
            if st.nodes[c].lookups > 0 || st.nodes[c].opens > 0 {
                return Err(std::io::Error::other("in use"));
            }
            // A file whose bytes are only in the store (it stayed synced
            // when they could not be written out, D71): the host tree would
            // get zeros in their place, and the model forgets the file.
            let n = &st.nodes[c];
            if !n.local || (is_reg(n.rec.mode) && n.rec.size > 0 && !self.data_dir(n.data_local).exists(&c.to_string())) {
                return Err(std::io::Error::other(format!("the bytes of inode {c} are not on this disk (only in the store)")));
            }
        }
        let final_dir = self.host.root_path(root);
        let tmp = final_dir.with_extension("new");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        if final_dir.exists() {
            // A tree renamed into place before a crash, the model not yet committed: redo.
            std::fs::remove_dir_all(&final_dir)?;
        }
        let mut nested: Vec<(u64, PathBuf)> = Vec::new();
        let build = (|| -> std::io::Result<()> {
            std::fs::create_dir(&tmp)?;
            let mut paths: HashMap<u64, PathBuf> = HashMap::from([(root, tmp.clone())]);
            let mut first: HashMap<u64, PathBuf> = HashMap::new();
            for (c, parent, name) in &order {
                let path = paths[parent].join(OsStr::from_bytes(name));
                let n = &st.nodes[c];
                let mode = n.rec.mode;
                if self.host.is_root(*c) {
                    // A native root moved below this directory: its tree moves in last.
                    nested.push((*c, path));
                    continue;
                }
                match mode & S_IFMT {
                    S_IFDIR => {
                        std::fs::create_dir(&path)?;
                        paths.insert(*c, path.clone());
                    }
                    libc::S_IFREG => {
                        if let Some(p) = first.get(c) {
                            std::fs::hard_link(p, &path)?;
                            continue;
                        }
                        let src = self.data_dir(n.data_local).path().join(c.to_string());
                        if std::fs::hard_link(&src, &path).is_err() {
                            if src.exists() {
                                std::fs::copy(&src, &path)?;
                            } else {
                                std::fs::File::create(&path)?.set_len(n.rec.size)?;
                            }
                        }
                        first.insert(*c, path.clone());
                    }
                    libc::S_IFLNK => {
                        let t = n.symlink().map(<[u8]>::to_vec).unwrap_or_default();
                        std::os::unix::fs::symlink(OsStr::from_bytes(&t), &path)?;
                    }
                    _ => {
                        let cp = std::ffi::CString::new(path.as_os_str().as_bytes())?;
                        if unsafe { libc::mknod(cp.as_ptr(), mode, n.rec.rdev as libc::dev_t) } != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                }
            }
            // Owners, modes, xattrs and times, children before parents.
            let meta = |ino: u64, path: &Path| -> std::io::Result<()> {
                let n = &st.nodes[&ino];
                let cp = std::ffi::CString::new(path.as_os_str().as_bytes())?;
                let lnk = n.rec.mode & S_IFMT == libc::S_IFLNK;
                unsafe {
                    if libc::lchown(cp.as_ptr(), n.rec.uid, n.rec.gid) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if !lnk && libc::chmod(cp.as_ptr(), n.rec.mode & 0o7777) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    for (k, v) in n.xattrs() {
                        let kc = std::ffi::CString::new(k.clone())?;
                        libc::lsetxattr(cp.as_ptr(), kc.as_ptr(), v.as_ptr().cast(), v.len(), 0);
                    }
                    let ts = [
                        libc::timespec { tv_sec: n.rec.atime.0, tv_nsec: n.rec.atime.1 as i64 },
                        libc::timespec { tv_sec: n.rec.mtime.0, tv_nsec: n.rec.mtime.1 as i64 },
                    ];
                    libc::utimensat(libc::AT_FDCWD, cp.as_ptr(), ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW);
                }
                Ok(())
            };
            let mut by_path: Vec<(u64, PathBuf)> = Vec::new();
            let mut paths2: HashMap<u64, PathBuf> = HashMap::from([(root, tmp.clone())]);
            for (c, parent, name) in &order {
                let path = paths2[parent].join(OsStr::from_bytes(name));
                if st.nodes[c].dir.is_some() {
                    paths2.insert(*c, path.clone());
                }
                by_path.push((*c, path));
            }
            for (c, path) in by_path.iter().rev() {
                if !self.host.is_root(*c) {
                    meta(*c, path)?;
                }
            }
            meta(root, &tmp)?;
            // Nested roots' trees move in (and back out if anything fails).
            let mut moved: Vec<&(u64, PathBuf)> = Vec::new();
            for n in &nested {
                if let Err(e) = std::fs::rename(self.host.root_path(n.0), &n.1) {
                    for m in moved {
                        let _ = std::fs::rename(&m.1, self.host.root_path(m.0));
                    }
                    return Err(e);
                }
                moved.push(n);
            }
            if let Err(e) = std::fs::rename(&tmp, &final_dir) {
                for m in moved {
                    let _ = std::fs::rename(&m.1, self.host.root_path(m.0));
                }
                return Err(e);
            }
            Ok(())
        })();
        if let Err(e) = build {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        for (c, _) in &nested {
            self.host.detach_root(*c);
        }
        // The model forgets the subtree; its flat data files are set aside
        // and go after the next durable commit (`Inner::set_aside`).
        let mut freed = Vec::new();
        for (c, parent, name) in order.iter().rev() {
            st.remove_entry(*parent, name);
            if let Some(n) = st.nodes.get_mut(c) {
                n.rec.nlink = 0;
            }
            freed.extend(st.maybe_free(*c));
            // It may still have synced records (made local-only by a pattern
            // change at this mount, not committed yet): drop those too.
            st.freed.insert(*c);
        }
        if let Some(n) = st.nodes.get_mut(&root) {
            n.rec.nlink = 2;
            st.dirty_inodes.insert(root);
        }
        drop(st);
        for f in freed.into_iter().filter(|f| f.regular) {
            self.set_aside(f.ino, f.data_local);
        }
        self.host.attach_root(root).map_err(|e| std::io::Error::from_raw_os_error(e.0))
    }

    /// Native roots whose path the ignore patterns no longer match become
    /// synced again: their host tree is taken into the model (file data
    /// hard-linked, else copied, into working copies, queued for hashing),
    /// then removed. On any error the root stays as it was (warned).
    pub(super) fn import_unmatched_roots(&self) {
        let cands: Vec<(u64, Vec<u8>)> = {
            let st = self.lock();
            self.host
                .roots()
                .into_iter()
                .filter_map(|i| {
                    let n = st.nodes.get(&i)?;
                    let (parent, name) = (n.rec.parent, n.dname().to_vec());
                    (n.rec.nlink > 0 && !self.local_for(&st, parent, &name, true)).then_some((i, name))
                })
                .collect()
        };
        let mut done = false;
        for (ino, name) in cands {
            match self.import_one(ino) {
                Ok(files) => {
                    done = true;
                    tracing::info!("native root {} no longer matches the ignore patterns: {files} files are synced now", String::from_utf8_lossy(&name));
                }
                Err(e) => tracing::warn!("native root inode {ino} no longer matches the ignore patterns but stays local-only: {e}"),
            }
        }
        if done {
            if let Err(e) = self.commit(Durability::Immediate, true, None) {
                tracing::warn!("committing imported native roots: {e}");
            }
        }
    }

    pub(super) fn import_one(&self, root: u64) -> std::io::Result<usize> {
        use std::os::unix::fs::MetadataExt;
        let top = self.host.root_path(root);
        let ts = |s: i64, ns: i64| (s, ns as u32);
        let rec_of = |m: &std::fs::Metadata, parent: u64| InodeRec {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            size: if m.is_dir() { 4096 } else { m.size() },
            blocks: if m.is_dir() { 8 } else { m.blocks() },
            nlink: if m.is_dir() { 2 } else { 0 },
            rdev: m.rdev() as u32,
            atime: ts(m.atime(), m.atime_nsec()),
            mtime: ts(m.mtime(), m.mtime_nsec()),
            ctime: ts(m.ctime(), m.ctime_nsec()),
            parent: if m.is_dir() { parent } else { 0 },
            next_cookie: 3,
            btime: m.created().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| (d.as_secs() as i64, d.subsec_nanos())).unwrap_or((0, 0)),
            flags: 0,
        };
        let xattrs_of = |p: &Path| -> BTreeMap<Vec<u8>, Vec<u8>> {
            let mut out = BTreeMap::new();
            let Ok(cp) = std::ffi::CString::new(p.as_os_str().as_bytes()) else { return out };
            let mut names = vec![0u8; 65536];
            let n = unsafe { libc::llistxattr(cp.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
            if n <= 0 {
                return out;
            }
            for k in names[..n as usize].split(|b| *b == 0).filter(|k| !k.is_empty()) {
                let Ok(kc) = std::ffi::CString::new(k) else { continue };
                let mut v = vec![0u8; 65536];
                let r = unsafe { libc::lgetxattr(cp.as_ptr(), kc.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
                if r >= 0 {
                    v.truncate(r as usize);
                    out.insert(k.to_vec(), v);
                }
            }
            out
        };
        let mut st = self.lock();
        // Build every node first; nothing enters the model until all data is linked.
        let mut made: Vec<(u64, Node)> = Vec::new();
        let mut entries: Vec<(u64, Vec<u8>, u64)> = Vec::new();
        let mut by_host: HashMap<u64, u64> = HashMap::new();
        let mut linked: Vec<u64> = Vec::new();
        let mut stack = vec![(top.clone(), root)];
        let r = (|| -> std::io::Result<()> {
            while let Some((dir, dino)) = stack.pop() {
                for e in std::fs::read_dir(&dir)? {
                    let e = e?;
                    let path = e.path();
                    let m = std::fs::symlink_metadata(&path)?;
                    let name = e.file_name().as_bytes().to_vec();
                    if !m.is_dir() {
                        if let Some(&i) = by_host.get(&m.ino()) {
                            entries.push((dino, name, i));
                            continue;
                        }
                    }
                    let ino = st.alloc_ino();
                    let mut node = Node::new(rec_of(&m, dino));
                    *node.xattrs_mut() = xattrs_of(&path);
                    if m.is_dir() {
                        node.dir = Some(Box::default());
                        stack.push((path, ino));
                    } else if m.file_type().is_symlink() {
                        node.set_symlink(Some(std::fs::read_link(&path)?.as_os_str().as_bytes().to_vec()));
                    } else if m.is_file() {
                        let wc = self.dirs.wc.path().join(ino.to_string());
                        if std::fs::hard_link(&path, &wc).is_err() {
                            std::fs::copy(&path, &wc)?;
                        }
                        linked.push(ino);
                        node.content_gen = 1;
                        by_host.insert(m.ino(), ino);
                    }
                    entries.push((dino, name, ino));
                    made.push((ino, node));
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            for i in linked {
                let _ = self.dirs.wc.unlink(&i.to_string());
            }
            return Err(e);
        }
        let root_meta = std::fs::symlink_metadata(&top)?;
        let files = linked.len();
        for (i, n) in made {
            for (k, v) in n.xattrs() {
                st.dirty_xattrs.insert((i, k.clone()), Some(v.clone()));
            }
            st.nodes.insert(i, Box::new(n));
            st.dirty_inodes.insert(i);
        }
        let root_xattrs = xattrs_of(&top);
        // Parents before children: entries were collected top-down.
        for (p, name, c) in &entries {
            st.add_entry(*p, name, *c);
            if let Some(n) = st.nodes.get_mut(c) {
                if n.dir.is_some() {
                    if let Some(pn) = st.nodes.get_mut(p) {
                        pn.rec.nlink += 1;
                    }
                } else {
                    n.rec.nlink += 1;
                }
            }
        }
        let mut entry = None;
        if let Some(n) = st.nodes.get_mut(&root) {
            let m = rec_of(&root_meta, n.rec.parent);
            (n.rec.mode, n.rec.uid, n.rec.gid, n.rec.atime, n.rec.mtime, n.rec.ctime) = (m.mode, m.uid, m.gid, m.atime, m.mtime, m.ctime);
            n.local = false;
            n.data_local = false;
            *n.xattrs_mut() = root_xattrs.clone();
            entry = Some((n.rec.parent, n.dname().to_vec()));
        }
        for (k, v) in root_xattrs {
            st.dirty_xattrs.insert((root, k), Some(v));
        }
        st.dirty_inodes.insert(root);
        if let Some((p, name)) = entry {
            // Its own name moves to the synced tables; the parent's stored
            // link count now counts it.
            st.repoint_entry(p, &name, root);
            st.dirty_inodes.insert(p);
        }
        self.host.detach_root(root);
        for i in &linked {
            self.queue_hash(&mut st, *i);
        }
        drop(st);
        if let Err(e) = std::fs::remove_dir_all(&top) {
            tracing::warn!("removing the imported native root tree {}: {e}", top.display());
        }
        Ok(files)
    }
}

impl Fs {
    /// Sets the function told the inode of every native root made from now
    /// on by mkdir (see [`Fs::mkdir`]); it must not block on the mount.
    pub fn set_root_listener(&self, f: impl Fn(u64) + Send + Sync + 'static) {
        *self.inner.root_listener.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(f));
    }

    /// The native roots that are live directories of the workspace, by inode.
    pub fn native_roots(&self) -> Vec<NativeRoot> {
        let st = self.inner.lock();
        self.inner
            .host
            .roots()
            .into_iter()
            .filter(|i| st.nodes.get(i).map(|n| n.rec.nlink > 0).unwrap_or(false))
            .map(|ino| NativeRoot {
                ino,
                path: PathBuf::from(OsStr::from_bytes(&st.dir_path(ino)).to_os_string()),
                backing: self.inner.host.root_path(ino),
            })
            .collect()
    }
}
