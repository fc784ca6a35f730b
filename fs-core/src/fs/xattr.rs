//! Extended attributes of [`Fs`]: setxattr, getxattr, listxattr,
//! removexattr (setxattr(2) flags, ENODATA, ERANGE, E2BIG), and POSIX ACLs,
//! which are stored as their xattrs (`system.posix_acl_access`,
//! `system.posix_acl_default`) and enforced by the kernel (FUSE_POSIX_ACL):
//! here the mode follows an access ACL as on ext4 ([`crate::acl`]), chmod
//! updates it ([`Fs::acl_chmod`]), and a new inode inherits its directory's
//! default ACL ([`Fs::inherit`]). Must not touch: file bytes, the store.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::acl::{self, Acl};
use crate::fs::Fs;
use crate::inode::{Node, State};
use crate::posix::*;
use crate::types::*;

/// A new inode's xattrs: (name, value).
pub(super) type NewXattrs = Vec<(Vec<u8>, Vec<u8>)>;

impl Fs {
    /// setxattr(2). `flags`: XATTR_CREATE (EEXIST if present), XATTR_REPLACE
    /// (ENODATA if absent), [`XATTR_ACL_KILL_SGID`]. Names over 255 bytes or
    /// empty: ERANGE; values over 64 KiB: E2BIG. An access ACL sets the
    /// mode's permission bits (the group bits from its mask) and is stored
    /// only if it says more than the mode can; a default ACL only on a
    /// directory (EACCES); an invalid ACL: EINVAL.
    pub fn setxattr(&self, _c: &Caller, ino: u64, name: &OsStr, value: &[u8], flags: u32) -> Result<()> {
        if self.inner.host.serves(ino) {
            return self.inner.host.setxattr(ino, name, value, flags);
        }
        let name = name.as_bytes();
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return err(libc::ERANGE);
        }
        if value.len() > XATTR_SIZE_MAX {
            return err(libc::E2BIG);
        }
        let acl = if acl::is_acl(name) { Some(Acl::parse(value)?) } else { None };
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        may_unlink(n.rec.flags)?; // xattr_permission(): not on immutable or append-only inodes
        let exists = n.xattrs().contains_key(name);
        if flags as i32 & libc::XATTR_CREATE != 0 && exists {
            return err(libc::EEXIST);
        }
        if flags as i32 & libc::XATTR_REPLACE != 0 && !exists {
            return err(libc::ENODATA);
        }
        let stored = match acl {
            None => Some(value.to_vec()),
            Some(a) => Self::acl_set(n, name, a, flags & XATTR_ACL_KILL_SGID != 0)?,
        };
        match &stored {
            Some(v) => n.xattrs_mut().insert(name.to_vec(), v.clone()),
            None => n.xattrs_mut().remove(name),
        };
        n.rec.ctime = now();
        st.touch_inode(ino);
        if stored.is_some() || exists {
            st.dirty_xattrs.insert((ino, name.to_vec()), stored);
        }
        Ok(())
    }

    /// What setting ACL `a` as `name` does to node `n`: its value to store
    /// (None: an access ACL the mode says in full, not stored, as ext4's
    /// `posix_acl_update_mode`), the access ACL's mode, S_ISGID cleared with
    /// `kill_sgid`.
    fn acl_set(n: &mut Node, name: &[u8], a: Acl, kill_sgid: bool) -> Result<Option<Vec<u8>>> {
        let mode = n.rec.mode;
        if mode & S_IFMT == S_IFLNK {
            return err(libc::EOPNOTSUPP);
        }
        if name == acl::DEFAULT {
            return if is_dir(mode) { Ok(Some(a.encode())) } else { err(libc::EACCES) };
        }
        let (mut mode, not_equiv) = a.equiv_mode(mode);
        if kill_sgid {
            mode &= !libc::S_ISGID;
        }
        n.rec.mode = mode;
        Ok(not_equiv.then(|| a.encode()))
    }

    /// chmod of a node with an access ACL: the ACL's owner, mask (or
    /// group) and other entries take the new mode's bits
    /// (`posix_acl_chmod`), as ext4's setattr does.
    pub(super) fn acl_chmod(st: &mut State, ino: u64) {
        let Some(n) = st.nodes.get_mut(&ino) else { return };
        let Some(mut a) = n.xattrs().get(acl::ACCESS).and_then(|v| Acl::parse(v).ok()) else { return };
        a.chmod(n.rec.mode);
        let v = a.encode();
        n.xattrs_mut().insert(acl::ACCESS.to_vec(), v.clone());
        st.dirty_xattrs.insert((ino, acl::ACCESS.to_vec()), Some(v));
    }

    /// The mode and ACLs of a new inode of `mode` (type bits included) in
    /// directory `parent` (`posix_acl_create`): with a default ACL there,
    /// the ACL narrows the mode and becomes the access ACL (unless the mode
    /// then says it all) and, for a directory, its default ACL too; the
    /// umask does not apply. Without one, the caller's umask is cleared.
    /// Symlinks keep their mode.
    pub(super) fn inherit(st: &State, parent: u64, mode: u32, c: &Caller) -> (u32, NewXattrs) {
        if mode & S_IFMT == S_IFLNK {
            return (mode, Vec::new());
        }
        let default = st.nodes.get(&parent).and_then(|p| p.xattrs().get(acl::DEFAULT));
        let Some((raw, mut a)) = default.and_then(|v| Acl::parse(v).ok().map(|a| (v.clone(), a))) else {
            return (mode & !(c.umask & 0o777), Vec::new());
        };
        let (mode, store) = a.create_masq(mode);
        let mut out = Vec::new();
        if store {
            out.push((acl::ACCESS.to_vec(), a.encode()));
        }
        if is_dir(mode) {
            out.push((acl::DEFAULT.to_vec(), raw));
        }
        (mode, out)
    }

    /// getxattr(2): `size` 0 asks for the length; ENODATA if absent,
    /// ERANGE if `size` is too small.
    pub fn getxattr(&self, ino: u64, name: &OsStr, size: u32) -> Result<XattrValue> {
        if self.inner.host.serves(ino) {
            return self.inner.host.getxattr(ino, name, size);
        }
        let st = self.inner.lock();
        let v = st.node(ino)?.xattrs().get(name.as_bytes()).ok_or(Errno(libc::ENODATA))?;
        sized(v.clone(), size)
    }

    /// listxattr(2): NUL-terminated names; `size` 0 asks for the length;
    /// ERANGE if too small. No attributes: an empty list.
    pub fn listxattr(&self, ino: u64, size: u32) -> Result<XattrValue> {
        if self.inner.host.serves(ino) {
            return self.inner.host.listxattr(ino, size);
        }
        let st = self.inner.lock();
        let mut out = Vec::new();
        for k in st.node(ino)?.xattrs().keys() {
            out.extend_from_slice(k);
            out.push(0);
        }
        sized(out, size)
    }

    /// removexattr(2): ENODATA if absent, except for an ACL, whose removal
    /// always succeeds (as ext4's); removing the access ACL leaves the mode.
    pub fn removexattr(&self, _c: &Caller, ino: u64, name: &OsStr) -> Result<()> {
        if self.inner.host.serves(ino) {
            return self.inner.host.removexattr(ino, name);
        }
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        may_unlink(n.rec.flags)?;
        if n.xattrs_mut().remove(name.as_bytes()).is_none() {
            return if acl::is_acl(name.as_bytes()) { Ok(()) } else { err(libc::ENODATA) };
        }
        n.rec.ctime = now();
        st.touch_inode(ino);
        st.dirty_xattrs.insert((ino, name.as_bytes().to_vec()), None);
        Ok(())
    }
}

/// A value for a getxattr/listxattr of `size` bytes: its length if 0,
/// ERANGE if too small.
fn sized(v: Vec<u8>, size: u32) -> Result<XattrValue> {
    if size == 0 {
        Ok(XattrValue::Size(v.len() as u32))
    } else if (size as usize) < v.len() {
        err(libc::ERANGE)
    } else {
        Ok(XattrValue::Data(v))
    }
}
