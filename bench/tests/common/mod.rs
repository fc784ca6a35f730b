//! Helpers shared by the bench crate's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The ringfs binary to test: `RINGFS_BIN`, else one built beside ringfs-bench.
pub fn ringfs_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("RINGFS_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_ringfs-bench"));
    let dir = exe.parent().unwrap();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    [dir.join("ringfs"), dir.parent().unwrap().join("release/ringfs"), repo.join("target/release/ringfs"), repo.join("target/debug/ringfs")]
        .into_iter()
        .find(|p| p.is_file())
}

/// Root and /dev/fuse present: the ringfs binary; else None (the test skips).
pub fn can_mount() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/dev/fuse").exists() {
        eprintln!("skipping: needs root and /dev/fuse");
        return None;
    }
    let bin = ringfs_bin();
    assert!(bin.is_some(), "no ringfs binary: build it (cargo build -p ringfs) or set RINGFS_BIN");
    bin
}

/// Mountpoints at or below `dir` (from /proc/self/mountinfo).
pub fn mounts_below(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().filter_map(|l| l.split(' ').nth(4)).filter(|mp| Path::new(mp).starts_with(dir)).map(str::to_string).collect()
}
