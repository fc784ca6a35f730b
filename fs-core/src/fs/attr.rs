//! The attribute operations of [`Fs`]: getattr (sizes of open files from
//! their working copies), setattr (chmod, chown, truncate, utimensat, and
//! the kernel's remove-privileges requests), readlink, statfs.
//!
//! Owns: which attributes a change touches (ctime, the working copy's mtime
//! kept in step). Must not touch: names, the store.


use std::os::unix::ffi::OsStrExt;

use crate::fs::Fs;
use crate::host::is_host_id;
use crate::posix::*;
use crate::types::*;
use crate::inode::{attr_of, fstat_into, wc_stamp, BLOCKS_UNKNOWN};
use crate::wc::{note_bypass, set_mtime};

impl Fs {
    pub(super) fn attr_now(&self, ino: u64) -> Result<Attr> {
        if self.inner.host.is_root(ino) {
            return self.inner.host.getattr(ino);
        }
        let (mut a, f) = {
            let st = self.inner.lock();
            let n = st.node(ino)?;
            (attr_of(ino, n), n.file.clone())
        };
        if let Some(f) = f {
            fstat_into(&f.file, &mut a);
        }
        if a.blocks == BLOCKS_UNKNOWN {
            a.blocks = self.known_blocks(&[(ino, a.size)])[0];
        }
        Ok(a)
    }

    /// The block counts of `files` (inode, size) whose nodes said
    /// [`BLOCKS_UNKNOWN`] (files of a fork's deferred tree, D60), in their
    /// order: read from their objects with the state lock released, then
    /// kept in the nodes (unless a change set them meanwhile: that value
    /// is returned). A count neither the object nor a row gives (a damaged
    /// store, logged) is the size's 512-byte units and is not kept.
    pub(super) fn known_blocks(&self, files: &[(u64, u64)]) -> Vec<u64> {
        let inos: Vec<u64> = files.iter().map(|f| f.0).collect();
        let found = self.inner.store.base_blocks(&inos);
        let mut st = self.inner.lock();
        files
            .iter()
            .zip(found)
            .map(|(&(ino, size), b)| match (st.nodes.get_mut(&ino), b) {
                (Some(n), _) if n.rec.blocks != BLOCKS_UNKNOWN => n.rec.blocks,
                (Some(n), Some(b)) => {
                    n.rec.blocks = b;
                    b
                }
                (_, b) => b.unwrap_or(size.div_ceil(512)),
            })
            .collect()
    }

    /// stat(2) of an inode. Regular files that are open report the size
    /// and allocated blocks of their working copy.
    pub fn getattr(&self, ino: u64, _fh: Option<u64>) -> Result<Attr> {
        if is_host_id(ino) {
            return self.inner.host.getattr(ino);
        }
        self.attr_now(ino)
    }

    /// chmod(2), chown(2), truncate(2)/ftruncate(2), utimensat(2). With
    /// `s.fh` a size change acts on that handle's working copy. Size on a
    /// directory: EISDIR; on other non-regular files: EINVAL. chmod also
    /// updates an access ACL (as ext4's `posix_acl_chmod`).
    pub fn setattr(&self, _c: &Caller, ino: u64, s: &SetAttr) -> Result<Attr> {
        if self.inner.host.serves(ino) {
            return self.inner.host.setattr(ino, s);
        }
        let t = now();
        {
            // notify_change(): an immutable inode takes no change, an
            // append-only one no size, mode, owner or explicit time.
            let flags = self.inner.lock().node(ino)?.rec.flags;
            let times = [s.atime, s.mtime];
            if s.size.is_some() || s.mode.is_some() || s.uid.is_some() || s.gid.is_some() || times.iter().any(|t| matches!(t, Some(SetTime::At(..)))) {
                may_unlink(flags)?;
            }
            if times.iter().any(Option::is_some) {
                may_change(flags)?;
            }
        }
        if let Some(size) = s.size {
            let (file, mode) = {
                let st = self.inner.lock();
                let n = st.node(ino)?;
                let f = match s.fh.and_then(|fh| st.handles.get(&fh)) {
                    Some(h) if h.ino == ino => h.file.clone(),
                    _ => n.file.clone(),
                };
                (f, n.rec.mode)
            };
            if is_dir(mode) {
                return err(libc::EISDIR);
            }
            if !is_reg(mode) {
                return err(libc::EINVAL);
            }
            if size > i64::MAX as u64 {
                return err(libc::EFBIG);
            }
            let blocks = match &file {
                Some(f) => {
                    f.file.set_len(size)?;
                    f.file.metadata().map(|m| std::os::unix::fs::MetadataExt::blocks(&m)).unwrap_or(0)
                }
                None => {
                    let f = self.inner.open_wc(ino)?;
                    f.set_len(size)?;
                    f.metadata().map(|m| std::os::unix::fs::MetadataExt::blocks(&m)).unwrap_or(0)
                }
            };
            let mut st = self.inner.lock();
            let n = st.node_mut(ino)?;
            n.rec.size = size;
            n.rec.blocks = blocks;
            n.rec.mtime = t;
            n.rec.ctime = t;
            n.content_gen += 1;
            let opens = n.opens;
            st.touch_inode(ino);
            if opens == 0 {
                self.inner.queue_hash(&mut st, ino);
            }
        }
        let mut st = self.inner.lock();
        if s.mtime.is_some() {
            // Take in bypassing writes before our futimens below hides them.
            if let Some(f) = st.node(ino)?.file.clone() {
                note_bypass(&mut st, ino, &f);
            }
        }
        let n = st.node_mut(ino)?;
        let mut changed = s.size.is_some();
        if let Some(m) = s.mode {
            n.rec.mode = (n.rec.mode & S_IFMT) | (m & 0o7777);
            changed = true;
        }
        if let Some(u) = s.uid {
            n.rec.uid = u;
            changed = true;
        }
        if let Some(g) = s.gid {
            n.rec.gid = g;
            changed = true;
        }
        if s.kill_suidgid {
            n.rec.mode = killed_privs(n.rec.mode);
            changed = true;
        }
        let pick = |x: SetTime| match x {
            SetTime::Now => t,
            SetTime::At(s, ns) => (s, ns),
        };
        if let Some(a) = s.atime {
            n.rec.atime = pick(a);
            changed = true;
        }
        let mut closed_wc = None;
        if let Some(m) = s.mtime {
            n.rec.mtime = pick(m);
            changed = true;
            // Keep the working copy's mtime in step, so that only writes
            // that bypass us make it newer than ours, and recovery after a
            // crash can take it from there (docs/SEMANTICS.md, "Durability").
            if let Some(f) = &n.file {
                set_mtime(&f.file, n.rec.mtime);
                *f.seen() = f.file.metadata().ok().map(|m| wc_stamp(&m));
            } else if is_reg(n.rec.mode) {
                closed_wc = Some((n.data_local, n.rec.mtime));
            }
        }
        if s.atime.is_some() || s.mtime.is_some() || s.ctime.is_some() {
            // Times set explicitly are not what a write sets: fsync commits.
            n.durable_meta = None;
        }
        if let Some(c) = s.ctime {
            n.rec.ctime = c;
        } else if changed {
            n.rec.ctime = t;
        }
        if s.mode.is_some() {
            Self::acl_chmod(&mut st, ino);
        }
        st.touch_inode(ino);
        drop(st);
        if let Some((data_local, t)) = closed_wc {
            // A file not open: its working copy (if it has one yet) in step too.
            if let Ok(f) = self.inner.data_dir(data_local).open_ro(&ino.to_string()) {
                set_mtime(&f, t);
            }
        }
        self.attr_now(ino)
    }

    /// What a write by a caller without CAP_FSETID does to the mode of
    /// `ino` (`file_remove_privs`, fs/inode.c): clears S_ISUID, and S_ISGID
    /// if S_IXGRP is set, of a non-directory, and then updates ctime.
    /// Nothing (not even ctime) when neither bit would change. Errors:
    /// ENOENT for an unknown inode.
    pub fn kill_suidgid(&self, ino: u64) -> Result<()> {
        if self.inner.host.serves(ino) {
            return self.inner.host.kill_suidgid(ino);
        }
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        let mode = killed_privs(n.rec.mode);
        if mode != n.rec.mode {
            n.rec.mode = mode;
            n.rec.ctime = now();
            st.touch_inode(ino);
        }
        Ok(())
    }

    /// FS_IOC_GETFLAGS (ioctl_iflags(2), lsattr): the inode's flags.
    pub fn get_flags(&self, ino: u64) -> Result<u32> {
        if self.inner.host.serves(ino) {
            return self.inner.host.get_flags(ino);
        }
        Ok(self.inner.lock().node(ino)?.rec.flags)
    }

    /// FS_IOC_SETFLAGS (chattr): replaces the inode's flags and updates
    /// ctime, also when the flags stay as they were (as ext4 does). EOPNOTSUPP for a flag ringfs does not keep
    /// ([`crate::store::KEPT_FLAGS`]: immutable, append-only, nodump,
    /// noatime). Who may set immutable and append-only (CAP_LINUX_IMMUTABLE)
    /// is checked by the kernel; fs-core enforces what they mean.
    pub fn set_flags(&self, ino: u64, flags: u32) -> Result<()> {
        if self.inner.host.serves(ino) {
            return self.inner.host.set_flags(ino, flags);
        }
        if flags & !crate::schema::KEPT_FLAGS != 0 {
            return err(libc::EOPNOTSUPP);
        }
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        n.rec.flags = flags;
        n.rec.ctime = now();
        st.touch_inode(ino);
        Ok(())
    }

    /// readlink(2): the target bytes. EINVAL if not a symlink.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        if is_host_id(ino) {
            return self.inner.host.readlink(ino);
        }
        let st = self.inner.lock();
        st.node(ino)?.symlink().map(<[u8]>::to_vec).ok_or(Errno(libc::EINVAL))
    }

    /// statfs(2): space from the host filesystem holding the store, inode
    /// counts from ours.
    pub fn statfs(&self) -> StatFs {
        let inodes = self.inner.lock().nodes.len() as u64;
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let p = std::ffi::CString::new(self.inner.dirs.wc_dir.as_os_str().as_bytes()).unwrap_or_default();
        let ok = unsafe { libc::statvfs(p.as_ptr(), &mut s) } == 0;
        if !ok {
            return StatFs { bsize: BLKSIZE, frsize: BLKSIZE, namelen: NAME_MAX as u32, files: inodes, ..Default::default() };
        }
        StatFs {
            blocks: s.f_blocks as u64,
            bfree: s.f_bfree as u64,
            bavail: s.f_bavail as u64,
            files: inodes + s.f_ffree as u64,
            ffree: s.f_ffree as u64,
            bsize: s.f_bsize as u32,
            namelen: NAME_MAX as u32,
            frsize: s.f_frsize as u32,
        }
    }
}
