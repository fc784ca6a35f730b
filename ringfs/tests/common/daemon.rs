//! `DaemonMount`: a mountpoint (and store path) in a private temp dir for
//! mounts the test starts itself, outside `TestMount` (with `--daemon`,
//! mount(8), the mount.fuse.ringfs helper, under `ulimit`, ...). On drop, on
//! every path including panics: `ringfs umount --lazy` while it is a ringfs
//! mount, then (a hung or dead daemon) abort the connection and detach it,
//! then remove the temp dir unless something is still mounted there.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{fuse_abort, lazy_umount, mount_at, run_timeout, RINGFS};

pub struct DaemonMount {
    root: Option<tempfile::TempDir>,
    /// The mountpoint (an empty directory).
    pub mp: PathBuf,
    /// A store path inside the temp dir (not created).
    pub store: PathBuf,
}

impl DaemonMount {
    pub fn new(label: &str) -> DaemonMount {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::Builder::new().prefix(&format!("ringfs-{label}-")).tempdir().expect("tempdir");
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mp = root.path().join("mnt");
        std::fs::create_dir(&mp).unwrap();
        let store = root.path().join("store");
        DaemonMount { root: Some(root), mp, store }
    }

    /// The temp dir holding the mountpoint.
    pub fn dir(&self) -> &Path {
        self.root.as_ref().unwrap().path()
    }

    /// The topmost mount at the mountpoint is a ringfs one.
    pub fn is_mounted(&self) -> bool {
        mount_at(&self.mp).is_some_and(|m| m.fstype == "fuse.ringfs")
    }

    /// Unmounts now (see the module doc); true if it was mounted.
    pub fn cleanup(&mut self) -> bool {
        let was = mount_at(&self.mp).is_some();
        for _ in 0..5 {
            let Some(m) = mount_at(&self.mp) else { break };
            if m.fstype == "fuse.ringfs" {
                let _ = run_timeout(Command::new(RINGFS).arg("umount").arg("--lazy").arg(&self.mp), Duration::from_secs(60));
            }
            if let Some(m) = mount_at(&self.mp) {
                fuse_abort(&m.dev);
                lazy_umount(&self.mp);
            }
        }
        was
    }
}

impl Drop for DaemonMount {
    fn drop(&mut self) {
        self.cleanup();
        if let Some(root) = self.root.take() {
            if mount_at(&self.mp).is_some() {
                eprintln!("{} is still mounted; leaving {}", self.mp.display(), root.path().display());
                let _ = root.keep();
            } else if let Err(e) = root.close() {
                eprintln!("could not remove a DaemonMount temp dir: {e}");
            }
        }
    }
}

/// Where mount(8) looks for the helper of type fuse.ringfs.
pub const SBIN_HELPER: &str = "/sbin/mount.fuse.ringfs";

static SBIN_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `/sbin/mount.fuse.ringfs` running the binary under test, for as long as
/// the guard lives (one test at a time in this process). mount(8) runs it
/// for `mount -t fuse.ringfs` and `mount -o remount` of a ringfs mount
/// (without it, fuse3's mount.fuse would try a `ringfs` program in PATH).
pub struct SbinHelper {
    _lock: std::sync::MutexGuard<'static, ()>,
    made: bool,
}

/// Links [`SBIN_HELPER`] to the binary under test unless another helper is
/// installed there (a real install: left alone, None, with a message).
pub fn sbin_helper() -> Option<SbinHelper> {
    let lock = SBIN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let link = Path::new(SBIN_HELPER);
    match std::fs::read_link(link) {
        // Left by an earlier run of these tests: ours to remove.
        Ok(t) if t == Path::new(RINGFS) => return Some(SbinHelper { _lock: lock, made: true }),
        _ if std::fs::symlink_metadata(link).is_ok() => {
            eprintln!("{SBIN_HELPER} exists (a real install?): not touching it; skipping what needs mount(8)");
            return None;
        }
        _ => {}
    }
    std::os::unix::fs::symlink(RINGFS, link).unwrap_or_else(|e| panic!("linking {SBIN_HELPER}: {e}"));
    Some(SbinHelper { _lock: lock, made: true })
}

impl Drop for SbinHelper {
    fn drop(&mut self) {
        if self.made {
            let _ = std::fs::remove_file(SBIN_HELPER);
        }
    }
}
