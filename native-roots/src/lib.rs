//! native-roots: bind-mount host directories over directories of a FUSE
//! mount, so that nothing below them reaches the FUSE daemon.
//!
//! The daemon (crate `ringfs`) keeps the contents of a native root in a
//! host directory and serves it itself until [`place`] lands the bind
//! mount; from then on the kernel resolves every path below it on the host
//! filesystem.
//!
//! * **Descriptor-confined placement** ([`place`]): the target is opened
//!   from a descriptor of the FUSE mount's root with `openat2(O_PATH |
//!   O_DIRECTORY | O_NOFOLLOW, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//!   RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`, so no symlink is followed
//!   and no other mount is entered on the way; it must then be a directory
//!   of the FUSE mount (`st_dev`) with the expected inode number (`st_ino`).
//!   The bind is `open_tree(OPEN_TREE_CLONE)` of the source and
//!   `move_mount(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)` onto
//!   that descriptor (mount_setattr(2) family, Linux ≥ 5.2): a process
//!   that swaps the directory for a symlink cannot redirect the mount.
//!   The bind gets the FUSE mount's `nosuid`, `nodev` and `noexec`
//!   (statvfs(3) flags of the mount root; mount_setattr(2) on the detached
//!   tree before it is moved), so a native root is no way around them.
//! * **Detaching** ([`Placed::detach`]) is `umount2(MNT_DETACH)` on the
//!   `/proc/self/fd` link of the mount's own root descriptor, so it always
//!   removes exactly that mount, wherever it is now.
//! * **Stale mounts** of a killed daemon are found in
//!   `/proc/self/mountinfo` by their source ([`stale`]) and detached.
//!
//! Kernel rules that callers document: rmdir(2) and rename(2) of a mount
//! point fail with EBUSY; rename(2) and link(2) across it fail with EXDEV.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::mount::{MoveMountFlags, OpenTreeFlags, UnmountFlags};

/// Why a native root could not be placed or removed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The target path could not be opened below the mount without
    /// following a symlink or crossing a mount (errno from openat2).
    #[error("opening {path} inside the mount (no symlinks, no other mounts): {source}")]
    Target { path: PathBuf, source: std::io::Error },
    /// The target is not the directory we expected (swapped or replaced).
    #[error("{path} is not the expected directory of this mount (st_dev {dev}, st_ino {ino}; wanted st_ino {want}): not mounting")]
    NotOurs { path: PathBuf, dev: u64, ino: u64, want: u64 },
    /// open_tree(2) of the source failed.
    #[error("open_tree {path}: {source}")]
    Source { path: PathBuf, source: std::io::Error },
    /// move_mount(2) failed (EPERM without CAP_SYS_ADMIN, ENOENT if the
    /// directory was removed meanwhile, ENOSYS before Linux 5.2).
    #[error("move_mount onto {path}: {source}")]
    Mount { path: PathBuf, source: std::io::Error },
    /// umount2(2) failed.
    #[error("detaching {path}: {source}")]
    Detach { path: PathBuf, source: std::io::Error },
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// A bind mount placed by [`place`]: the descriptor of its root.
#[derive(Debug)]
pub struct Placed {
    tree: OwnedFd,
    /// Where it was placed, relative to the FUSE mount root (for messages).
    pub path: PathBuf,
}

impl Placed {
    /// Detaches the mount (`umount2(MNT_DETACH)` through the descriptor's
    /// /proc/self/fd link): open files below it keep working, new lookups
    /// reach the directory underneath. EINVAL if it is no longer mounted.
    pub fn detach(self) -> Result<(), Error> {
        let link = format!("/proc/self/fd/{}", self.tree.as_raw_fd());
        rustix::mount::unmount(link.as_str(), UnmountFlags::DETACH)
            .map_err(|e| Error::Detach { path: self.path.clone(), source: e.into() })
    }
}

/// Bind-mounts `source` (a host directory) over the directory `rel`
/// (relative, no `..`) below `mount_root` (a descriptor of the FUSE mount's
/// root directory), after checking that the directory found there is on
/// device `dev` with inode number `ino`. Blocks while the walk's LOOKUPs
/// are answered: never call it from a thread that serves the FUSE mount.
pub fn place(mount_root: BorrowedFd<'_>, rel: &Path, dev: u64, ino: u64, source: &Path) -> Result<Placed, Error> {
    let target = rustix::fs::openat2(
        mount_root,
        rel,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    )
    .map_err(|e| Error::Target { path: rel.to_path_buf(), source: e.into() })?;
    let st = rustix::fs::fstat(&target).map_err(|e| Error::Target { path: rel.to_path_buf(), source: e.into() })?;
    if st.st_dev != dev || st.st_ino != ino || st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(Error::NotOurs { path: rel.to_path_buf(), dev: st.st_dev, ino: st.st_ino, want: ino });
    }
    let tree = rustix::mount::open_tree(
        rustix::fs::CWD,
        source,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(|e| Error::Source { path: source.to_path_buf(), source: e.into() })?;
    same_restrictions(mount_root, &tree).map_err(|e| Error::Source { path: source.to_path_buf(), source: e })?;
    rustix::mount::move_mount(
        tree.as_fd(),
        "",
        target.as_fd(),
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
    .map_err(|e| Error::Mount { path: rel.to_path_buf(), source: e.into() })?;
    Ok(Placed { tree, path: rel.to_path_buf() })
}

/// `struct mount_attr` of mount_setattr(2) (linux/mount.h).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// mount_setattr(2) attribute bits (linux/mount.h).
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// mount_setattr(2) (Linux ≥ 5.12): sets `set` and clears `clr` on the
/// mount at `path` relative to `dirfd` (`flags`: `AT_EMPTY_PATH`,
/// `AT_RECURSIVE` 0x8000, …). Returns the raw result (0, or -1 with
/// errno set); allocates nothing, so a forked child may call it.
pub fn mount_setattr(dirfd: i32, path: &std::ffi::CStr, flags: u32, set: u64, clr: u64) -> i64 {
    let a = MountAttr { attr_set: set, attr_clr: clr, propagation: 0, userns_fd: 0 };
    // SAFETY: a valid C string and an attribute struct of the size passed.
    unsafe { libc::syscall(libc::SYS_mount_setattr, dirfd, path.as_ptr(), flags, &a as *const MountAttr, std::mem::size_of::<MountAttr>()) }
}

/// Gives the detached mount `tree` the `nosuid`, `nodev` and `noexec` of
/// the mount `mount_root` is on (statvfs(3) `ST_NOSUID`, `ST_NODEV`,
/// `ST_NOEXEC`), with [`mount_setattr`] (an older kernel's ENOSYS leaves
/// the bind as it is). Errors: statvfs's, mount_setattr's.
fn same_restrictions(mount_root: BorrowedFd<'_>, tree: &OwnedFd) -> std::io::Result<()> {
    let flags = rustix::fs::fstatvfs(mount_root)?.f_flag;
    let mut set = 0u64;
    for (st, attr) in [
        (rustix::fs::StatVfsMountFlags::NOSUID, MOUNT_ATTR_NOSUID),
        (rustix::fs::StatVfsMountFlags::NODEV, MOUNT_ATTR_NODEV),
        (rustix::fs::StatVfsMountFlags::NOEXEC, MOUNT_ATTR_NOEXEC),
    ] {
        if flags.contains(st) {
            set |= attr;
        }
    }
    if set == 0 || mount_setattr(tree.as_raw_fd(), c"", libc::AT_EMPTY_PATH as u32, set, 0) == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOSYS) {
        return Ok(());
    }
    Err(e)
}

/// Can this process place bind mounts at all? Err: why not, one line.
pub fn available() -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("bind mounts need root (CAP_SYS_ADMIN)".into());
    }
    // open_tree(2) exists from Linux 5.2: probe it on "/" without cloning.
    match rustix::mount::open_tree(rustix::fs::CWD, "/", OpenTreeFlags::OPEN_TREE_CLOEXEC) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("open_tree(2) is not available: {e} (needs Linux 5.2)")),
    }
}

/// One line of `/proc/self/mountinfo` (proc(5)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    /// Mount ID (field 1).
    pub id: u64,
    /// Parent mount ID (field 2).
    pub parent: u64,
    /// Device of the filesystem, `makedev(major, minor)` (field 3).
    pub dev: u64,
    /// The directory of the filesystem mounted here (field 4), unescaped.
    pub root: PathBuf,
    /// Mount point (field 5), unescaped.
    pub mount_point: PathBuf,
    /// Filesystem type after the separator, e.g. `fuse.ringfs`.
    pub fstype: String,
}

/// Undo the octal escapes (`\040` for space, ...) that mountinfo uses.
pub fn unescape(s: &str) -> OsString {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    OsString::from_vec(out)
}

/// Every mount visible in this mount namespace, in mount order.
pub fn mounts() -> std::io::Result<Vec<MountInfo>> {
    Ok(parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// Parses mountinfo text (see [`mounts`]); malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountInfo> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let Some(sep) = f.iter().position(|x| *x == "-") else { continue };
        if f.len() < 5 || sep + 1 >= f.len() {
            continue;
        }
        let (Ok(id), Ok(parent)) = (f[0].parse(), f[1].parse()) else { continue };
        let Some((ma, mi)) = f[2].split_once(':') else { continue };
        let (Ok(ma), Ok(mi)) = (ma.parse::<u32>(), mi.parse::<u32>()) else { continue };
        out.push(MountInfo {
            id,
            parent,
            dev: libc::makedev(ma, mi),
            root: PathBuf::from(unescape(f[3])),
            mount_point: PathBuf::from(unescape(f[4])),
            fstype: f[sep + 1].to_string(),
        });
    }
    out
}

/// The mounts whose source is a directory below `dir` (a host directory of
/// native-root trees): bind mounts left by a daemon that was killed.
/// Deepest mount points first, ready to detach.
pub fn stale(dir: &Path) -> std::io::Result<Vec<MountInfo>> {
    let all = mounts()?;
    let dir = std::fs::canonicalize(dir)?;
    let dev = rustix::fs::stat(&dir)?.st_dev;
    // `dir` as seen from the root of its filesystem: through the mount that holds it.
    let Some(holder) = all
        .iter()
        .filter(|m| m.dev == dev && dir.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len())
    else {
        return Ok(Vec::new());
    };
    let inside = holder.root.join(dir.strip_prefix(&holder.mount_point).unwrap_or(Path::new("")));
    let holder_mp = holder.mount_point.clone();
    let mut v: Vec<MountInfo> = all
        .into_iter()
        .filter(|m| m.dev == dev && m.root != inside && m.root.starts_with(&inside) && m.mount_point != holder_mp)
        .collect();
    v.sort_by_key(|m| std::cmp::Reverse(m.mount_point.as_os_str().as_bytes().len()));
    Ok(v)
}

/// Detaches every stale mount of [`stale`]`(dir)`; returns their mount points.
pub fn detach_stale(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut done = Vec::new();
    for m in stale(dir)? {
        match rustix::mount::unmount(&m.mount_point, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW) {
            Ok(()) => done.push(m.mount_point),
            Err(e) => tracing::warn!("detaching stale native root {}: {e}", m.mount_point.display()),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo_lines() {
        let t = "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n\
                 40 36 0:52 / /a\\040b rw - fuse.ringfs ringfs rw\nbroken line\n";
        let m = parse_mountinfo(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].root, Path::new("/mnt1"));
        assert_eq!(m[0].dev, libc::makedev(98, 0));
        assert_eq!(m[1].mount_point, Path::new("/a b"));
        assert_eq!(m[1].fstype, "fuse.ringfs");
        assert_eq!(m[1].parent, 36);
    }

    #[test]
    fn unescape_octal() {
        assert_eq!(unescape("/a\\040b"), OsString::from("/a b"));
        assert_eq!(unescape("/plain"), OsString::from("/plain"));
        assert_eq!(unescape("/tail\\04"), OsString::from("/tail\\04"));
    }

    #[test]
    fn no_stale_mounts_for_a_fresh_dir() {
        let d = tempfile::tempdir().unwrap();
        assert!(stale(d.path()).unwrap().is_empty());
    }
}
