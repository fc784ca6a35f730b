//! The namespace operations of [`Fs`]: lookup and FORGET, creating names
//! (mknod, mkdir, symlink, link; the regular-file half of create is in
//! [`data`](super::data)), removing them (unlink, rmdir), rename and
//! RENAME_EXCHANGE, and reading directories (opendir, readdir,
//! readdirplus, releasedir).
//!
//! Owns: ext4's errnos for names (EEXIST, ENOENT, ENOTDIR, EISDIR,
//! ENOTEMPTY, EINVAL, EXDEV, EMLINK, EPERM for flagged inodes), link
//! counts, readdir cookies and where a stream ends, whiteouts. Must not
//! touch: file bytes or backing files (it asks [`data`](super::data):
//! `new_backing_file`, `finish_free`), the store except through
//! `Inner::commit` (a new native root is committed before the reply).

use redb::Durability;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::fs::Fs;
use crate::host::is_host_id;
use crate::posix::*;
use crate::types::*;
use std::sync::atomic::Ordering;

use crate::inode::{attr_of, fstat_into, Handle, Node, State, BLOCKS_UNKNOWN, POOL_LOCAL, POOL_WC, ROOT};
use crate::schema::{InodeRec, FS_NOATIME_FL, FS_NODUMP_FL};

impl Fs {
    /// lookup: the attributes of `name` in directory `parent`; adds one to
    /// its lookup count. ENOENT, ENOTDIR, ENAMETOOLONG.
    pub fn lookup(&self, _c: &Caller, parent: u64, name: &OsStr) -> Result<Attr> {
        let name = name.as_bytes();
        if self.inner.host.serves(parent) {
            return self.inner.host.lookup(parent, name);
        }
        if name.len() > NAME_MAX {
            return err(libc::ENAMETOOLONG);
        }
        let ino = {
            let mut st = self.inner.lock();
            let p = st.node(parent)?;
            if !is_dir(p.rec.mode) {
                return err(libc::ENOTDIR);
            }
            let ino = match name {
                b"." => parent,
                b".." => p.rec.parent,
                _ => st.child(parent, name).ok_or(Errno(libc::ENOENT))?.0,
            };
            st.node_mut(ino)?.lookups += 1;
            st.note_name(ino, parent, name);
            ino
        };
        self.attr_now(ino)
    }

    /// FORGET: drops `n` from the lookup count; frees the inode when it
    /// also has no links and no open handles.
    pub fn forget(&self, ino: u64, n: u64) {
        if is_host_id(ino) {
            return self.inner.host.forget(ino, n);
        }
        let freed = {
            let mut st = self.inner.lock();
            match st.nodes.get_mut(&ino) {
                Some(node) => node.lookups = node.lookups.saturating_sub(n),
                None => return,
            }
            st.maybe_free(ino)
        };
        self.finish_free(freed);
    }

    /// Creates an inode of `mode` (type bits included) named `name` in
    /// `parent`, owned by the caller (group from a setgid parent).
    pub(super) fn make(&self, c: &Caller, parent: u64, name: &OsStr, mode: u32, rdev: u32, link: Option<Vec<u8>>) -> Result<Attr> {
        self.make_in(c, parent, Some(name), mode, rdev, link, false).map(|x| x.0)
    }

    /// As `make`; with `pooled`, a regular file takes a ready working copy
    /// from the pool when there is one (returned true). Without a name
    /// (O_TMPFILE) the inode has no link and is local-only if `parent` is.
    /// Its mode loses the caller's umask, or follows `parent`'s default ACL
    /// (which it then inherits, see [`Fs::inherit`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn make_in(&self, c: &Caller, parent: u64, name: Option<&OsStr>, mode: u32, rdev: u32, link: Option<Vec<u8>>, pooled: bool) -> Result<(Attr, bool)> {
        let name = name.map(|n| n.as_bytes());
        if let Some(name) = name {
            check_name(name)?;
        }
        let t = now();
        let mut st = self.inner.lock();
        st.live_dir(parent)?;
        if name.is_some_and(|n| is_dot(n) || st.child(parent, n).is_some()) {
            return err(libc::EEXIST);
        }
        let p = st.node(parent)?;
        may_change(p.rec.flags)?;
        let (pgid, psgid, pflags) = (p.rec.gid, p.rec.mode & libc::S_ISGID != 0, p.rec.flags);
        let dir = is_dir(mode);
        let local = match name {
            Some(name) => self.inner.local_for(&st, parent, name, dir),
            None => st.is_local(parent),
        };
        let (mut mode, acls) = Self::inherit(&st, parent, mode, c);
        if dir && psgid {
            mode |= libc::S_ISGID;
        }
        let side = if local { POOL_LOCAL } else { POOL_WC };
        let from_pool = if pooled && is_reg(mode) { self.inner.pools.take(&mut st, side) } else { None };
        let ino = match from_pool {
            Some(i) => i,
            None => st.alloc_ino(),
        };
        let rec = InodeRec {
            mode,
            uid: c.uid,
            gid: if psgid { pgid } else { c.gid },
            size: if dir { 4096 } else { link.as_ref().map(|l| l.len() as u64).unwrap_or(0) },
            blocks: if dir { 8 } else { 0 },
            nlink: if name.is_none() { 0 } else if dir { 2 } else { 1 },
            rdev,
            atime: t,
            mtime: t,
            ctime: t,
            parent: if dir { parent } else { 0 },
            next_cookie: 3,
            btime: t,
            // As ext4 (EXT4_FL_INHERITED): nodump and noatime pass to new inodes.
            flags: pflags & (FS_NODUMP_FL | FS_NOATIME_FL),
        };
        let (m, u, g) = (rec.mode, rec.uid, rec.gid);
        let mut node = Node::new(rec);
        node.set_symlink(link);
        node.lookups = 1;
        node.local = local;
        node.data_local = local;
        for (k, v) in acls {
            st.dirty_xattrs.insert((ino, k.clone()), Some(v.clone()));
            node.xattrs_mut().insert(k, v);
        }
        let root = dir && local && self.inner.native_roots && !st.is_local(parent);
        st.nodes.insert(ino, Box::new(node));
        if root {
            // Under the lock: no request can see the directory before its tree exists.
            if let Err(e) = self.inner.host.create_root(ino, m, u, g) {
                tracing::warn!("native root for inode {ino}: making its tree failed ({e}); served as a plain local-only directory");
            } else {
                // Its inherited ACLs are the tree's (the root is served from there).
                for (k, v) in st.node(ino)?.xattrs() {
                    if let Err(e) = self.inner.host.setxattr(ino, OsStr::from_bytes(k), v, 0) {
                        tracing::warn!("native root for inode {ino}: setting {}: {e}", String::from_utf8_lossy(k));
                    }
                }
            }
        }
        st.touch_inode(ino);
        let Some(name) = name else {
            // O_TMPFILE: no entry, so the directory does not change.
            return Ok((attr_of(ino, st.node(ino)?), from_pool.is_some()));
        };
        st.add_entry(parent, name, ino);
        if dir {
            st.node_mut(parent)?.rec.nlink += 1;
        }
        st.set_mctime(parent, t);
        Ok((attr_of(ino, st.node(ino)?), from_pool.is_some()))
    }

    /// symlink(2): `name` in `parent` pointing at `target`. +1 lookup.
    /// EEXIST, ENOENT, ENOTDIR, ENAMETOOLONG (name > 255 or target > 4095 bytes).
    pub fn symlink(&self, c: &Caller, parent: u64, name: &OsStr, target: &OsStr) -> Result<Attr> {
        let t = target.as_bytes();
        if self.inner.host.serves(parent) {
            return self.inner.host.symlink(c, parent, name.as_bytes(), t);
        }
        if t.len() > SYMLINK_MAX {
            return err(libc::ENAMETOOLONG);
        }
        if t.is_empty() {
            return err(libc::ENOENT);
        }
        self.make(c, parent, name, S_IFLNK | 0o777, 0, Some(t.to_vec()))
    }

    /// mknod(2): regular files (type 0 or S_IFREG), fifos, sockets, and
    /// character/block devices (uid 0 only, else EPERM). +1 lookup.
    /// Directories or unknown types: EINVAL (use mkdir).
    pub fn mknod(&self, c: &Caller, parent: u64, name: &OsStr, mode: u32, rdev: u32) -> Result<Attr> {
        if self.inner.host.serves(parent) {
            let mode = if mode & S_IFMT == 0 { mode | S_IFREG } else { mode };
            return self.inner.host.mknod(c, parent, name.as_bytes(), mode, rdev);
        }
        let ty = mode & S_IFMT;
        let ty = match ty {
            0 => S_IFREG,
            libc::S_IFREG | libc::S_IFIFO | libc::S_IFSOCK => ty,
            libc::S_IFCHR | libc::S_IFBLK => {
                if c.uid != 0 {
                    return err(libc::EPERM);
                }
                ty
            }
            _ => return err(libc::EINVAL),
        };
        let rdev = if ty == libc::S_IFCHR || ty == libc::S_IFBLK { rdev } else { 0 };
        if ty != S_IFREG {
            return self.make(c, parent, name, ty | (mode & 0o7777), rdev, None);
        }
        // A regular file gets its backing file now, as from creat(2), so that
        // a full disk fails the mknod (ENOSPC) rather than every later open.
        let (a, pooled) = self.make_in(c, parent, Some(name), ty | (mode & 0o7777), 0, None, true)?;
        if !pooled {
            if let Err(e) = self.new_backing_file(a.ino, false) {
                self.unmake(parent, name, a.ino);
                return Err(e);
            }
        }
        Ok(a)
    }

    /// Takes back a regular file `make_in` just made as `name` in `parent`
    /// (its name, and the lookup it was given) when its backing file could
    /// not be made.
    pub(super) fn unmake(&self, parent: u64, name: &OsStr, ino: u64) {
        {
            let mut st = self.inner.lock();
            if st.child(parent, name.as_bytes()).map(|(i, _)| i) == Some(ino) {
                st.remove_entry(parent, name.as_bytes());
                if let Ok(n) = st.node_mut(ino) {
                    n.rec.nlink = 0;
                }
                st.touch_inode(ino);
            }
        }
        self.forget(ino, 1);
    }

    /// mkdir(2): +1 lookup; the parent's nlink grows by one.
    ///
    /// An eligible local-only directory (`native_roots` on, its parent
    /// synced) becomes a native root: its contents live in a host tree
    /// (`LOCAL/roots/<ino>`), it is committed durably before the reply, and
    /// the root listener is told so the daemon can bind-mount it.
    pub fn mkdir(&self, c: &Caller, parent: u64, name: &OsStr, mode: u32) -> Result<Attr> {
        if self.inner.host.serves(parent) {
            return self.inner.host.mkdir(c, parent, name.as_bytes(), mode);
        }
        let a = self.make(c, parent, name, S_IFDIR | (mode & 0o7777), 0, None)?;
        if self.inner.host.is_root(a.ino) {
            if let Err(e) = self.inner.commit(Durability::Immediate, true, None) {
                tracing::warn!("committing native root {}: {e}", a.ino);
            }
            self.inner.tell_root(a.ino);
            return self.inner.host.getattr(a.ino);
        }
        Ok(a)
    }

    /// unlink(2): EISDIR for directories, ENOENT, ENOTDIR. The inode lives
    /// on while looked up or open.
    pub fn unlink(&self, _c: &Caller, parent: u64, name: &OsStr) -> Result<()> {
        let name = name.as_bytes();
        if self.inner.host.serves(parent) {
            return self.inner.host.unlink(parent, name);
        }
        check_name(name)?;
        let t = now();
        let freed = {
            let mut st = self.inner.lock();
            if !is_dir(st.node(parent)?.rec.mode) {
                return err(libc::ENOTDIR);
            }
            if is_dot(name) {
                return err(libc::EISDIR);
            }
            let (child, _) = st.child(parent, name).ok_or(Errno(libc::ENOENT))?;
            if is_dir(st.node(child)?.rec.mode) {
                return err(libc::EISDIR);
            }
            may_unlink(st.node(parent)?.rec.flags)?;
            may_unlink(st.node(child)?.rec.flags)?;
            st.remove_entry(parent, name);
            let n = st.node_mut(child)?;
            n.rec.nlink = n.rec.nlink.saturating_sub(1);
            n.rec.ctime = t;
            st.touch_inode(child);
            st.set_mctime(parent, t);
            st.maybe_free(child)
        };
        self.finish_free(freed);
        Ok(())
    }

    /// rmdir(2): ENOTDIR, ENOTEMPTY, EINVAL for ".", ENOENT.
    pub fn rmdir(&self, _c: &Caller, parent: u64, name: &OsStr) -> Result<()> {
        let name = name.as_bytes();
        if self.inner.host.serves(parent) {
            return self.inner.host.rmdir(parent, name);
        }
        check_name(name)?;
        let t = now();
        let freed = {
            let mut st = self.inner.lock();
            if !is_dir(st.node(parent)?.rec.mode) {
                return err(libc::ENOTDIR);
            }
            if name == b"." {
                return err(libc::EINVAL);
            }
            if name == b".." {
                return err(libc::ENOTEMPTY);
            }
            let (child, _) = st.child(parent, name).ok_or(Errno(libc::ENOENT))?;
            let n = st.node(child)?;
            if !is_dir(n.rec.mode) {
                return err(libc::ENOTDIR);
            }
            // As ext4: a flagged directory (or parent) is EPERM before ENOTEMPTY.
            may_unlink(n.rec.flags)?;
            may_unlink(st.node(parent)?.rec.flags)?;
            if !n.dir.as_ref().map(|d| d.by_name.is_empty()).unwrap_or(true) {
                return err(libc::ENOTEMPTY);
            }
            if self.inner.host.is_root(child) {
                // ENOTEMPTY unless its tree is empty (EBUSY comes from the
                // kernel while it is bind-mounted).
                self.inner.host.remove_root(child)?;
            }
            st.remove_entry(parent, name);
            let n = st.node_mut(child)?;
            n.rec.nlink = 0;
            n.rec.ctime = t;
            st.touch_inode(child);
            let p = st.node_mut(parent)?;
            p.rec.nlink = p.rec.nlink.saturating_sub(1);
            st.set_mctime(parent, t);
            st.maybe_free(child)
        };
        self.finish_free(freed);
        Ok(())
    }

    /// Is `anc` an ancestor of (or equal to) directory `d`?
    pub(super) fn is_ancestor(st: &State, anc: u64, mut d: u64) -> bool {
        loop {
            if d == anc {
                return true;
            }
            if d == ROOT {
                return false;
            }
            match st.nodes.get(&d) {
                Some(n) if n.rec.parent != d => d = n.rec.parent,
                _ => return false,
            }
        }
    }

    /// rename(2)/renameat2(2). `flags`: RENAME_NOREPLACE (EEXIST if the
    /// target exists), RENAME_EXCHANGE (swap; ENOENT if either is missing),
    /// RENAME_WHITEOUT (the source name becomes a whiteout, a 0:0 character
    /// device owned by the caller, in the same step; the kernel checks
    /// CAP_MKNOD); EXCHANGE with another flag, or unknown bits: EINVAL. Moving a directory into its
    /// own subtree: EINVAL. Replacing: ENOTDIR / EISDIR on a type
    /// mismatch, ENOTEMPTY for a non-empty directory. Renaming onto another
    /// link of the same inode succeeds and changes nothing.
    pub fn rename(&self, c: &Caller, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr, flags: u32) -> Result<()> {
        const NOREPLACE: u32 = libc::RENAME_NOREPLACE;
        const EXCHANGE: u32 = libc::RENAME_EXCHANGE;
        const WHITEOUT: u32 = libc::RENAME_WHITEOUT;
        if flags & !(NOREPLACE | EXCHANGE | WHITEOUT) != 0 || (flags & EXCHANGE != 0 && flags != EXCHANGE) {
            return err(libc::EINVAL);
        }
        let (name, newname) = (name.as_bytes(), newname.as_bytes());
        let host = &self.inner.host;
        match (host.serves(parent), host.serves(newparent)) {
            (true, true) => return host.rename(parent, name, newparent, newname, flags),
            (false, false) => {}
            // A native root is another filesystem, as it is once bind-mounted.
            _ => return err(libc::EXDEV),
        }
        check_name(name)?;
        check_name(newname)?;
        if is_dot(name) || is_dot(newname) {
            return err(libc::EBUSY);
        }
        {
            let st = self.inner.lock();
            if let Some((src, _)) = st.child(parent, name) {
                if host.is_root(src) && !self.inner.local_for(&st, newparent, newname, true) {
                    // Its contents cannot become synced in place.
                    return err(libc::EXDEV);
                }
                if let Some((dst, _)) = st.child(newparent, newname) {
                    if dst != src && (host.is_root(dst) || (flags & libc::RENAME_EXCHANGE != 0 && host.is_root(src))) {
                        return err(libc::EBUSY);
                    }
                }
            }
        }
        let t = now();
        let freed = {
            let mut st = self.inner.lock();
            if !is_dir(st.node(parent)?.rec.mode) || !is_dir(st.node(newparent)?.rec.mode) {
                return err(libc::ENOTDIR);
            }
            let (src, _) = st.child(parent, name).ok_or(Errno(libc::ENOENT))?;
            let src_dir = is_dir(st.node(src)?.rec.mode);
            let dst = st.child(newparent, newname).map(|x| x.0);
            if st.node(newparent)?.rec.nlink == 0 {
                return err(libc::ENOENT); // a removed directory takes no new entries
            }
            if dst != Some(src) {
                // may_delete() / may_create(): immutable and append-only
                // inodes keep their names; such directories their entries.
                may_unlink(st.node(src)?.rec.flags)?;
                may_unlink(st.node(parent)?.rec.flags)?;
                may_change(st.node(newparent)?.rec.flags)?;
                if let Some(d) = dst {
                    may_unlink(st.node(d)?.rec.flags)?;
                    may_unlink(st.node(newparent)?.rec.flags)?;
                }
            }
            if flags & EXCHANGE != 0 {
                let dst = dst.ok_or(Errno(libc::ENOENT))?;
                if src == dst {
                    return Ok(());
                }
                let dst_dir = is_dir(st.node(dst)?.rec.mode);
                if parent != newparent {
                    if src_dir && Self::is_ancestor(&st, src, newparent) {
                        return err(libc::EINVAL);
                    }
                    if dst_dir && Self::is_ancestor(&st, dst, parent) {
                        return err(libc::EINVAL);
                    }
                }
                let sl = self.inner.local_for(&st, newparent, newname, src_dir);
                let dl = self.inner.local_for(&st, parent, name, dst_dir);
                let mut plan = self.inner.plan_sides(&st, src, sl, newparent, newname, true)?;
                plan.extend(self.inner.plan_sides(&st, dst, dl, parent, name, true)?);
                st.repoint_entry(parent, name, dst);
                st.repoint_entry(newparent, newname, src);
                self.inner.apply_sides(&mut st, &plan);
                if parent != newparent {
                    if src_dir {
                        st.node_mut(src)?.rec.parent = newparent;
                        st.node_mut(parent)?.rec.nlink -= 1;
                        st.node_mut(newparent)?.rec.nlink += 1;
                    }
                    if dst_dir {
                        st.node_mut(dst)?.rec.parent = parent;
                        st.node_mut(newparent)?.rec.nlink -= 1;
                        st.node_mut(parent)?.rec.nlink += 1;
                    }
                }
                st.set_ctime(src, t);
                st.set_ctime(dst, t);
                st.set_mctime(parent, t);
                st.set_mctime(newparent, t);
                return Ok(());
            }
            if src_dir && Self::is_ancestor(&st, src, newparent) {
                return err(libc::EINVAL);
            }
            // Crossing between synced and local-only paths moves the inode
            // (and its subtree) to the other side, atomically under our lock.
            let plan = if dst != Some(src) {
                let sl = self.inner.local_for(&st, newparent, newname, src_dir);
                self.inner.plan_sides(&st, src, sl, newparent, newname, true)?
            } else {
                Vec::new()
            };
            let mut freed = None;
            if let Some(dst) = dst {
                if flags & NOREPLACE != 0 {
                    return err(libc::EEXIST);
                }
                if dst == src {
                    return Ok(()); // same inode: POSIX says do nothing
                }
                let dn = st.node(dst)?;
                let dst_dir = is_dir(dn.rec.mode);
                if src_dir && !dst_dir {
                    return err(libc::ENOTDIR);
                }
                if !src_dir && dst_dir {
                    return err(libc::EISDIR);
                }
                if dst_dir && !dn.dir.as_ref().map(|d| d.by_name.is_empty()).unwrap_or(true) {
                    return err(libc::ENOTEMPTY);
                }
                st.remove_entry(newparent, newname);
                let dn = st.node_mut(dst)?;
                if dst_dir {
                    dn.rec.nlink = 0;
                } else {
                    dn.rec.nlink = dn.rec.nlink.saturating_sub(1);
                }
                dn.rec.ctime = t;
                st.touch_inode(dst);
                if dst_dir {
                    st.node_mut(newparent)?.rec.nlink -= 1;
                }
                freed = Some(dst);
            }
            st.remove_entry(parent, name);
            st.add_entry(newparent, newname, src);
            if src_dir && parent != newparent {
                st.node_mut(src)?.rec.parent = newparent;
                st.node_mut(parent)?.rec.nlink -= 1;
                st.node_mut(newparent)?.rec.nlink += 1;
            }
            st.set_ctime(src, t);
            st.set_mctime(parent, t);
            st.set_mctime(newparent, t);
            self.inner.apply_sides(&mut st, &plan);
            if flags & WHITEOUT != 0 {
                self.whiteout(&mut st, c, parent, name, t);
            }
            freed.and_then(|d| st.maybe_free(d))
        };
        self.finish_free(freed);
        Ok(())
    }

    /// Makes `name` in `parent` a whiteout (what overlayfs reads as "deleted
    /// in this layer"): a character device 0:0, mode 0, owned by the caller
    /// (group from a setgid parent), as ext4's rename does.
    fn whiteout(&self, st: &mut State, c: &Caller, parent: u64, name: &[u8], t: (i64, u32)) {
        let p = &st.nodes[&parent].rec;
        let gid = if p.mode & libc::S_ISGID != 0 { p.gid } else { c.gid };
        let rec = InodeRec { mode: libc::S_IFCHR, uid: c.uid, gid, nlink: 1, atime: t, mtime: t, ctime: t, btime: t, next_cookie: 3, ..Default::default() };
        let local = self.inner.local_for(st, parent, name, false);
        let ino = st.alloc_ino();
        let mut node = Node::new(rec);
        node.local = local;
        node.data_local = local;
        st.nodes.insert(ino, Box::new(node));
        st.touch_inode(ino);
        st.add_entry(parent, name, ino);
    }

    /// link(2): a new name for `ino`. EPERM for directories, EEXIST,
    /// EMLINK beyond 65000 links, ENOENT for an inode without links unless
    /// it is an O_TMPFILE one opened without O_EXCL that never had a name
    /// (which takes the side, synced or local-only, of its first name).
    /// +1 lookup.
    pub fn link(&self, _c: &Caller, ino: u64, newparent: u64, newname: &OsStr) -> Result<Attr> {
        let name = newname.as_bytes();
        match (is_host_id(ino), self.inner.host.serves(newparent)) {
            (true, true) => return self.inner.host.link(ino, newparent, name),
            (false, false) => {}
            _ => return err(libc::EXDEV),
        }
        check_name(name)?;
        let t = now();
        {
            let mut st = self.inner.lock();
            let n = st.node(ino)?;
            if is_dir(n.rec.mode) {
                return err(libc::EPERM);
            }
            // As link(2) of an unlinked file; an O_TMPFILE inode may get a first name.
            let first = n.rec.nlink == 0;
            if first && !n.linkable {
                return err(libc::ENOENT);
            }
            if n.rec.nlink >= LINK_MAX {
                return err(libc::EMLINK);
            }
            may_unlink(n.rec.flags)?; // vfs_link(): no new name for immutable or append-only inodes
            may_change(st.node(newparent)?.rec.flags)?;
            st.live_dir(newparent)?;
            if is_dot(name) || st.child(newparent, name).is_some() {
                return err(libc::EEXIST);
            }
            // One inode lives on one side: no hard links across the boundary.
            // A tmpfile has no other name yet, so it moves to its first name's side.
            let local = self.inner.local_for(&st, newparent, name, false);
            let plan = match (local != st.node(ino)?.local, first) {
                (false, _) => Vec::new(),
                (true, true) => vec![(ino, local, newparent, name.to_vec())],
                (true, false) => return err(libc::EXDEV),
            };
            st.add_entry(newparent, name, ino);
            let n = st.node_mut(ino)?;
            n.rec.nlink += 1;
            n.rec.ctime = t;
            n.lookups += 1;
            n.linkable = false;
            st.touch_inode(ino);
            st.set_mctime(newparent, t);
            self.inner.apply_sides(&mut st, &plan);
        }
        self.attr_now(ino)
    }

    /// opendir(3): a handle for readdir. ENOTDIR.
    pub fn opendir(&self, _c: &Caller, ino: u64) -> Result<u64> {
        if self.inner.host.serves(ino) {
            return self.inner.host.opendir(ino);
        }
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        if !is_dir(n.rec.mode) {
            return err(libc::ENOTDIR);
        }
        n.opens += 1;
        let dir_end = n.rec.next_cookie.max(3);
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        st.handles.insert(fh, Handle { ino, flags: 0, file: None, chunks: None, dir_end });
        Ok(fh)
    }

    /// closedir(3).
    pub fn releasedir(&self, fh: u64) {
        if is_host_id(fh) {
            let _ = self.inner.host.release(fh);
            return;
        }
        let freed = {
            let mut st = self.inner.lock();
            let Some(h) = st.handles.remove(&fh) else { return };
            if let Some(n) = st.nodes.get_mut(&h.ino) {
                n.opens = n.opens.saturating_sub(1);
            }
            st.maybe_free(h.ino)
        };
        self.finish_free(freed);
    }

    /// Collects up to `max` entries of `ino` with cookie > `offset`, each
    /// with its attributes when `plus` (and one lookup taken for it).
    #[allow(clippy::type_complexity)]
    pub(super) fn dir_batch(&self, ino: u64, fh: u64, offset: u64, max: usize, plus: bool) -> Result<Vec<(u64, u64, u32, Vec<u8>, Option<Attr>)>> {
        let mut st = self.inner.lock();
        let next_cookie = st.node(ino)?.rec.next_cookie.max(3);
        // Where this stream ends (see `Handle::dir_end`); a rewind (offset 0)
        // looks at the directory as it is now.
        let end = match st.handles.get_mut(&fh).filter(|h| h.ino == ino) {
            Some(h) => {
                if offset == 0 {
                    h.dir_end = next_cookie;
                }
                h.dir_end
            }
            None => u64::MAX,
        };
        let n = st.node(ino)?;
        let d = n.dir.as_ref().ok_or(Errno(libc::ENOTDIR))?;
        let mut out = Vec::new();
        if offset < 1 {
            out.push((ino, 1, libc::DT_DIR as u32, b".".to_vec(), None));
        }
        if offset < 2 {
            out.push((n.rec.parent, 2, libc::DT_DIR as u32, b"..".to_vec(), None));
        }
        let from = offset.max(2) + 1;
        for (&cookie, name) in d.by_cookie.range(from..end.max(from)) {
            if out.len() >= max {
                break;
            }
            let child = d.by_name[name].0;
            out.push((child, cookie, 0, name.to_vec(), None));
        }
        for e in out.iter_mut().filter(|e| e.1 > 2) {
            if let Some(c) = st.nodes.get_mut(&e.0) {
                e.2 = kind_of(c.rec.mode);
                if plus {
                    c.lookups += 1;
                    e.4 = Some(attr_of(e.0, c));
                }
            }
        }
        if plus {
            for e in out.iter().filter(|e| e.1 > 2) {
                st.note_name(e.0, ino, &e.3);
            }
            drop(st);
            // Files of a fork's deferred tree whose blocks nobody needed yet.
            let unknown: Vec<(u64, u64)> = out.iter().filter_map(|e| e.4.as_ref()).filter(|a| a.blocks == BLOCKS_UNKNOWN).map(|a| (a.ino, a.size)).collect();
            if !unknown.is_empty() {
                let known: std::collections::HashMap<u64, u64> = unknown.iter().map(|f| f.0).zip(self.known_blocks(&unknown)).collect();
                for a in out.iter_mut().filter_map(|e| e.4.as_mut()) {
                    if let Some(&b) = known.get(&a.ino) {
                        a.blocks = b;
                    }
                }
            }
        }
        Ok(out)
    }

    /// readdir(3) from `offset` (0 = start; otherwise the `offset` of the
    /// last entry taken): "." (cookie 1), ".." (2), then children in cookie
    /// order. Cookies stay valid while entries are added or removed. The
    /// stream of handle `fh` (from [`Fs::opendir`]) returns only entries
    /// that existed when it was opened or last read from offset 0: an entry
    /// created or renamed meanwhile has a later cookie and is not returned
    /// (POSIX leaves that unspecified; the stream always ends). `sink`
    /// returns false when full: the entry was not taken and reading stops.
    pub fn readdir(&self, ino: u64, fh: u64, offset: u64, sink: &mut dyn FnMut(&DirEntry) -> bool) -> Result<()> {
        if is_host_id(fh) {
            return self.inner.host.readdir(fh, offset, sink);
        }
        let mut off = offset;
        loop {
            let batch = self.dir_batch(ino, fh, off, 256, false)?;
            if batch.is_empty() {
                return Ok(());
            }
            for (child, cookie, kind, name, _) in &batch {
                if !sink(&DirEntry { ino: *child, offset: *cookie, kind: *kind, name }) {
                    return Ok(());
                }
                off = *cookie;
            }
        }
    }

    /// readdirplus: as [`Fs::readdir`] with each child's attributes (and
    /// +1 lookup for each child the sink took); `None` for "." and "..".
    pub fn readdirplus(&self, ino: u64, fh: u64, offset: u64, sink: &mut dyn FnMut(&DirEntry, Option<&Attr>) -> bool) -> Result<()> {
        if is_host_id(fh) {
            return self.inner.host.readdirplus(fh, offset, sink);
        }
        let mut off = offset;
        loop {
            let batch = self.dir_batch(ino, fh, off, 256, true)?;
            if batch.is_empty() {
                return Ok(());
            }
            let mut it = batch.into_iter();
            while let Some((child, cookie, kind, name, attr)) = it.next() {
                let attr = match attr {
                    Some(_) if self.inner.host.is_root(child) => self.inner.host.getattr(child).ok(),
                    Some(mut a) if is_reg(a.mode) => {
                        let f = self.inner.lock().nodes.get(&child).and_then(|n| n.file.clone());
                        if let Some(f) = f {
                            fstat_into(&f.file, &mut a);
                        }
                        Some(a)
                    }
                    a => a,
                };
                if !sink(&DirEntry { ino: child, offset: cookie, kind, name: &name }, attr.as_ref()) {
                    if attr.is_some() {
                        self.forget(child, 1);
                    }
                    for (c, _, _, _, a) in it {
                        if a.is_some() {
                            self.forget(c, 1);
                        }
                    }
                    return Ok(());
                }
                off = cookie;
            }
        }
    }
}
