//! Mountpoint checks and `/proc/self/mountinfo` lookups (proc(5)).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// One line of `/proc/self/mountinfo` that we care about.
#[derive(Debug, Clone)]
pub struct MountEntry {
    /// Mount point, unescaped (field 5).
    pub mount_point: PathBuf,
    /// Filesystem type after the separator, e.g. `fuse.ringfs`.
    pub fstype: String,
}

/// All mounts visible in this mount namespace, in mount order
/// (parsed by [`native_roots::mounts`]).
pub fn mounts() -> Result<Vec<MountEntry>> {
    let all = native_roots::mounts().context("reading /proc/self/mountinfo")?;
    Ok(all.into_iter().map(|m| MountEntry { mount_point: m.mount_point, fstype: m.fstype }).collect())
}

/// The topmost mount whose mount point is exactly `path`, if any.
pub fn mount_at(path: &Path) -> Result<Option<MountEntry>> {
    Ok(mounts()?.into_iter().rev().find(|m| m.mount_point == path))
}

/// Whether the topmost mount at `path` is a ringfs FUSE mount.
pub fn is_ringfs_mount(path: &Path) -> Result<bool> {
    Ok(mount_at(path)?.is_some_and(|m| m.fstype == "fuse.ringfs"))
}

/// Resolve a mountpoint given on the command line to an absolute path
/// without following the last component into a (possibly dead) FUSE mount:
/// the parent is canonicalized, the name appended.
pub fn absolute(path: &Path) -> Result<PathBuf> {
    let abs = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir()?.join(path) };
    let name = abs.file_name().map(|n| n.to_owned());
    let parent = abs.parent().map(|p| p.to_path_buf());
    match (parent, name) {
        (Some(parent), Some(name)) => {
            let parent = parent
                .canonicalize()
                .with_context(|| format!("mountpoint {}: its parent directory {} does not exist", abs.display(), parent.display()))?;
            Ok(parent.join(name))
        }
        _ => Ok(abs),
    }
}

/// Check that `path` can be mounted on: it exists, is a directory, and is not
/// already a mount point. Returns the absolute path. Errors are one line that
/// names the problem and the fix.
pub fn check_mountable(path: &Path) -> Result<PathBuf> {
    let abs = absolute(path)?;
    let meta = match std::fs::metadata(&abs) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("mountpoint {} does not exist: create it first (mkdir -p {})", abs.display(), abs.display())
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            bail!(
                "mountpoint {} is a dead ringfs mount (its daemon is gone): run `ringfs umount {}` first",
                abs.display(),
                abs.display()
            )
        }
        Err(e) => bail!("mountpoint {}: {e}", abs.display()),
    };
    if !meta.is_dir() {
        bail!("mountpoint {} is not a directory: mount on an empty directory", abs.display());
    }
    if let Some(m) = mount_at(&abs)? {
        if m.fstype == "fuse.ringfs" {
            bail!("mountpoint {} is already a ringfs mount: unmount it first with `ringfs umount {}`", abs.display(), abs.display());
        }
        bail!("mountpoint {} is already a mount point ({}): choose another directory or unmount it first", abs.display(), m.fstype);
    }
    Ok(abs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_a_mount() {
        assert!(mount_at(Path::new("/")).unwrap().is_some());
    }
}
