//! POSIX limits and mode helpers shared by every part of fs-core: the
//! daemon-served tree ([`crate::fs`]) and the native-root host trees
//! ([`crate::host`]) alike.
//!
//! Owns: the limits of `limits.h` / ext4 that fs-core enforces (NAME_MAX,
//! PATH of a symlink, LINK_MAX, xattr sizes), file-type tests on `st_mode`,
//! name checks, the clock, what a remove-privileges request does to a mode,
//! and the inode flags (linux/fs.h `FS_*_FL`) with what immutable and
//! append-only forbid. Imports nothing of the crate but its error type.
//! Must not touch: the inode table, the store, any file.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::types::{Errno, Result};

/// The inode flags (linux/fs.h `FS_*_FL`) ringfs keeps and reports; it
/// enforces immutable and append-only itself (docs/SEMANTICS.md).
pub const KEPT_FLAGS: u32 = FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL;
/// `FS_IMMUTABLE_FL`: no change to the inode, its data or its names.
pub const FS_IMMUTABLE_FL: u32 = 0x10;
/// `FS_APPEND_FL`: writes only at the end; no truncate, unlink or rename.
pub const FS_APPEND_FL: u32 = 0x20;
/// `FS_NODUMP_FL` (kept, not acted on).
pub const FS_NODUMP_FL: u32 = 0x40;
/// `FS_NOATIME_FL`: reads do not move atime.
pub const FS_NOATIME_FL: u32 = 0x80;

/// NAME_MAX: the longest name of a directory entry, in bytes (ext4's 255).
pub(crate) const NAME_MAX: usize = 255;
/// The longest symlink target, in bytes (PATH_MAX − 1).
pub(crate) const SYMLINK_MAX: usize = 4095;
/// The most hard links an inode may have (ext4's EXT4_LINK_MAX).
pub(crate) const LINK_MAX: u32 = 65000;
/// XATTR_NAME_MAX (linux/limits.h).
pub(crate) const XATTR_NAME_MAX: usize = 255;
/// XATTR_SIZE_MAX (linux/limits.h): the largest value, in bytes.
pub(crate) const XATTR_SIZE_MAX: usize = 65536;
/// `st_blksize` reported for every inode.
pub(crate) const BLKSIZE: u32 = 4096;

pub(crate) const S_IFMT: u32 = libc::S_IFMT;
pub(crate) const S_IFDIR: u32 = libc::S_IFDIR;
pub(crate) const S_IFREG: u32 = libc::S_IFREG;
pub(crate) const S_IFLNK: u32 = libc::S_IFLNK;

/// The wall clock as (seconds, nanoseconds) since the epoch.
pub(crate) fn now() -> (i64, u32) {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_secs() as i64, d.subsec_nanos())
}

/// `Err(Errno(e))`.
/// pread(2) of up to `size` bytes of `f` at `offset`, repeated until that
/// many are read or end of file (EINTR retried): fewer only at its end.
/// Errors: the read's, as an errno.
pub(crate) fn pread_full(f: &std::fs::File, offset: u64, size: u32) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; size as usize];
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

pub(crate) fn err<T>(e: i32) -> Result<T> {
    Err(Errno(e))
}

pub(crate) fn is_dir(mode: u32) -> bool {
    mode & S_IFMT == S_IFDIR
}

pub(crate) fn is_reg(mode: u32) -> bool {
    mode & S_IFMT == S_IFREG
}

/// The `DT_*` type of a mode, as readdir reports it (`S_IFMT >> 12`).
pub(crate) fn kind_of(mode: u32) -> u32 {
    (mode & S_IFMT) >> 12
}

/// `mode` after a remove-privileges request: S_ISUID cleared, and S_ISGID
/// if S_IXGRP is set (a setgid file without group-exec is a mandatory-locking
/// marker, kept as Linux keeps it); directories unchanged.
pub(crate) fn killed_privs(mode: u32) -> u32 {
    if is_dir(mode) {
        return mode;
    }
    let mut m = mode & !libc::S_ISUID;
    if m & libc::S_IXGRP != 0 {
        m &= !libc::S_ISGID;
    }
    m
}

/// A name for a new directory entry: ENOENT if empty, ENAMETOOLONG over
/// NAME_MAX, EINVAL with a '/' or NUL.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return err(libc::ENOENT);
    }
    if name.len() > NAME_MAX {
        return err(libc::ENAMETOOLONG);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return err(libc::EINVAL);
    }
    Ok(())
}

/// EPERM if an inode with inode flags `flags` is immutable: its data,
/// attributes, xattrs and (for a directory) entries do not change.
pub(crate) fn may_change(flags: u32) -> Result<()> {
    if flags & FS_IMMUTABLE_FL != 0 {
        return err(libc::EPERM);
    }
    Ok(())
}

/// EPERM if an inode with `flags` is immutable or append-only: it keeps its
/// names (no unlink, rename or new link) and its xattrs; a directory keeps
/// its entries (may_delete(), fs/namei.c).
pub(crate) fn may_unlink(flags: u32) -> Result<()> {
    if flags & (FS_IMMUTABLE_FL | FS_APPEND_FL) != 0 {
        return err(libc::EPERM);
    }
    Ok(())
}

/// EPERM if open(2) `open_flags` may not open an inode with `flags`: an
/// immutable file for writing or truncation, an append-only one for
/// writing without O_APPEND or with O_TRUNC (may_open(), fs/namei.c).
pub(crate) fn may_open(flags: u32, open_flags: u32) -> Result<()> {
    let o = open_flags as i32;
    let writes = o & libc::O_ACCMODE != libc::O_RDONLY || o & libc::O_TRUNC != 0;
    if writes && flags & FS_IMMUTABLE_FL != 0 {
        return err(libc::EPERM);
    }
    if flags & FS_APPEND_FL != 0 && ((o & libc::O_ACCMODE != libc::O_RDONLY && o & libc::O_APPEND == 0) || o & libc::O_TRUNC != 0) {
        return err(libc::EPERM);
    }
    Ok(())
}

/// "." or "..".
pub(crate) fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// `dir/name` ("name" when `dir` is the root's empty path).
pub(crate) fn join_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}
