//! fsx (crates.io `fsx`, installed by scripts/setup.sh): at least 100 000 random
//! operations on one file in the mount, with mmap reads/writes, truncate, fallocate,
//! punch hole, copy_file_range, sendfile, fsync and close/reopen enabled. The seed is
//! fixed (override with RINGFS_FSX_SEED) and printed, so any failure replays exactly.
//! msync after each mapwrite is off by default (on ext4 every msync is a disk flush and
//! it dominated the run time; explicit fsync/fdatasync ops still push dirty mapped pages
//! through the daemon); RINGFS_FSX_MSYNC=1 turns it on.

mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const DEFAULT_SEED: u64 = 20261129;

fn fsx_bin() -> PathBuf {
    if let Ok(p) = std::env::var("FSX") {
        return p.into();
    }
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo"));
    let p = home.join("bin/fsx");
    if p.exists() {
        p
    } else {
        PathBuf::from("fsx")
    }
}

const CONFIG: &str = r#"
flen = 262144
nomsyncafterwrite = true
nosizechecks = false
blockmode = false

[opsize]
max = 65536
min = 0
align = 1

[weights]
close_open = 1
read = 10
write = 10
mapread = 5
mapwrite = 5
invalidate = 1
truncate = 3
fsync = 0.2
fdatasync = 0.2
posix_fallocate = 1
punch_hole = 1
sendfile = 1
posix_fadvise = 1
copy_file_range = 2
"#;

fn run(backend: Backend) {
    let m = TestMount::new(backend);
    run_at(&m, &m.p("fsx.testfile"), backend.name());
}

fn run_at(m: &TestMount, target: &Path, label: &str) {
    let target = target.to_path_buf();
    let seed: u64 = std::env::var("RINGFS_FSX_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SEED);
    let ops: u64 = std::env::var("RINGFS_FSX_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000).max(100_000);
    let conf = m.host_tmp().join("fsx.toml");
    let mut config = CONFIG.to_owned();
    if std::env::var("RINGFS_FSX_MSYNC").as_deref() == Ok("1") {
        config = config.replace("nomsyncafterwrite = true", "nomsyncafterwrite = false");
    }
    fs::write(&conf, config).unwrap();
    let artifacts = m.host_tmp().join(format!("fsx-artifacts-{}", label.replace(' ', "-")));
    fs::create_dir(&artifacts).unwrap();
    println!("fsx [{}]: seed {seed}, {ops} operations on {}", label, target.display());
    let t0 = Instant::now();
    let o = run_timeout(
        Command::new(fsx_bin())
            .arg("-N")
            .arg(ops.to_string())
            .arg("-S")
            .arg(seed.to_string())
            .arg("-f")
            .arg(&conf)
            .arg("-P")
            .arg(&artifacts)
            .arg("-q")
            .arg(&target),
        Duration::from_secs(1200),
    );
    let (so, se) = out_str(&o);
    println!("fsx [{}]: exit {} after {:?}", label, o.status, t0.elapsed());
    if !o.status.success() {
        let tail = |s: &str| s.lines().rev().take(60).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
        let log = fs::read_dir(&artifacts)
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path().display().to_string()).collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        panic!(
            "fsx [{}] failed (seed {seed}, {ops} ops; replay: fsx -N {ops} -S {seed} -f fsx.toml FILE)\nartifacts: {log}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            label,
            tail(&so),
            tail(&se)
        );
    }
}

#[test]
fn fsx_memory() {
    run(Backend::Memory);
}

#[test]
fn fsx_store() {
    run(Backend::Store);
}

/// Inside a native root (bind mount) and inside an unrooted one (the same
/// host tree served by the daemon).
#[test]
fn fsx_native_root() {
    if !native_roots_possible() {
        return;
    }
    let m = TestMount::builder(Backend::Store).args(["--ignore", "node_modules", "--ignore", "nm2"]).name("fsx-native-root").mount();
    let dir = make_native_root(&m, "node_modules");
    run_at(&m, &dir.join("fsx.testfile"), "native root");
    let dir2 = make_unrooted_tree(&m, "nm2");
    run_at(&m, &dir2.join("fsx.testfile"), "unrooted tree");
}

