//! Extended attributes of [`Fs`]: setxattr, getxattr, listxattr,
//! removexattr (setxattr(2) flags, ENODATA, ERANGE, E2BIG); POSIX ACL names
//! are refused with EOPNOTSUPP. Must not touch: file bytes, the store.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::fs::Fs;
use crate::posix::*;
use crate::types::*;

impl Fs {
    /// setxattr(2). `flags`: XATTR_CREATE (EEXIST if present), XATTR_REPLACE
    /// (ENODATA if absent). Names over 255 bytes or empty: ERANGE; values
    /// over 64 KiB: E2BIG. POSIX ACLs (`system.posix_acl_*`): EOPNOTSUPP.
    pub fn setxattr(&self, _c: &Caller, ino: u64, name: &OsStr, value: &[u8], flags: u32) -> Result<()> {
        if self.inner.host.serves(ino) {
            return self.inner.host.setxattr(ino, name, value, flags);
        }
        let name = name.as_bytes();
        if name.starts_with(b"system.posix_acl_") {
            // No POSIX ACLs: storing one as a plain xattr would not change the
            // mode (cp -p / mv set the mode that way and fall back to chmod).
            return err(libc::EOPNOTSUPP);
        }
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return err(libc::ERANGE);
        }
        if value.len() > XATTR_SIZE_MAX {
            return err(libc::E2BIG);
        }
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        may_unlink(n.rec.flags)?; // xattr_permission(): not on immutable or append-only inodes
        let exists = n.xattrs.contains_key(name);
        if flags as i32 & libc::XATTR_CREATE != 0 && exists {
            return err(libc::EEXIST);
        }
        if flags as i32 & libc::XATTR_REPLACE != 0 && !exists {
            return err(libc::ENODATA);
        }
        n.xattrs.insert(name.to_vec(), value.to_vec());
        n.rec.ctime = now();
        st.touch_inode(ino);
        st.dirty_xattrs.insert((ino, name.to_vec()), Some(value.to_vec()));
        Ok(())
    }

    /// getxattr(2): `size` 0 asks for the length; ENODATA if absent,
    /// ERANGE if `size` is too small.
    pub fn getxattr(&self, ino: u64, name: &OsStr, size: u32) -> Result<XattrValue> {
        if self.inner.host.serves(ino) {
            return self.inner.host.getxattr(ino, name, size);
        }
        let st = self.inner.lock();
        let v = st.node(ino)?.xattrs.get(name.as_bytes()).ok_or(Errno(libc::ENODATA))?;
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
        for k in st.node(ino)?.xattrs.keys() {
            out.extend_from_slice(k);
            out.push(0);
        }
        sized(out, size)
    }

    /// removexattr(2): ENODATA if absent.
    pub fn removexattr(&self, _c: &Caller, ino: u64, name: &OsStr) -> Result<()> {
        if self.inner.host.serves(ino) {
            return self.inner.host.removexattr(ino, name);
        }
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        may_unlink(n.rec.flags)?;
        if n.xattrs.remove(name.as_bytes()).is_none() {
            return err(libc::ENODATA);
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
