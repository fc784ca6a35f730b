//! The snapshots section end to end at tiny sizes through real ringfs mounts
//! (`--snap-section tiny`, no rows): every figure is there with its git and
//! ringfs values, targets decided, the summary and results.md show it, and
//! nothing is left mounted or on disk. Timings are never asserted; the
//! dedup figures' sizes are only checked to be there.
//!
//! Needs root, /dev/fuse, git and a built ringfs binary (RINGFS_BIN, or the
//! `ringfs` next to this test's ringfs-bench, or target/release/ringfs).

use std::process::Command;

use serde_json::Value;

mod common;
use common::*;

const KEYS: &[&str] = &[
    "snap-first-commit",
    "snap-commit-1",
    "snap-commit-1-wall",
    "snap-commit-10",
    "snap-restore-10",
    "snap-diff-100",
    "snap-fork",
    "snap-fork-disk",
    "snap-fork-mount",
    "snap-fork-disk-mounted",
    "snap-fork-remount",
    "snap-dedup-overwrite",
    "snap-dedup-prepend",
];

#[test]
fn tiny_snapshots_section_end_to_end() {
    let Some(ringfs) = can_mount() else { return };
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (base, out) = (tmp.path().join("base"), tmp.path().join("out"));
    std::fs::create_dir_all(&base).unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_ringfs-bench"))
        .args(["--profile", "smoke", "--rows", "0", "--npm", "none", "--snap-section", "tiny", "--no-setup", "--seed", "3"])
        .arg("--ringfs")
        .arg(&ringfs)
        .arg("--base")
        .arg(&base)
        .arg("--out")
        .arg(&out)
        .arg("--timeout")
        .arg("120")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&st.stdout), String::from_utf8_lossy(&st.stderr));
    assert!(st.status.success(), "snapshots section failed: {stdout}\n{stderr}");
    assert!(mounts_below(tmp.path()).is_empty(), "left mounted: {:?}", mounts_below(tmp.path()));
    assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0, "temp dirs left in {}", base.display());

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let s = &doc["snapshots"];
    assert_eq!((s["kind"].as_str(), s["profile"].as_str()), (Some("snapshots"), Some("tiny")), "{s}");
    assert_eq!(s["errors"].as_array().unwrap().len(), 0, "workloads failed: {}", s["errors"]);
    let figs = s["figures"].as_array().unwrap();
    let fig = |k: &str| figs.iter().find(|f| f["key"] == k).unwrap_or_else(|| panic!("no figure {k} in {s}"));
    for k in KEYS {
        let f = fig(k);
        assert!(f["ringfs"].as_f64().is_some(), "{k} has no ringfs value: {f}");
        if let Some(t) = f["target"].as_object() {
            assert!(t["pass"].is_boolean(), "{k}'s target is undecided: {f}");
        }
    }
    for k in ["snap-first-commit", "snap-commit-1", "snap-diff-100", "snap-restore-10", "snap-fork"] {
        assert!(fig(k)["ext4"].as_f64().is_some_and(|x| x > 0.0), "{k} has no git value: {}", fig(k));
    }
    for needle in ["snapshots section (tiny", "commit after changing 1 of 300 files", "git/cp -a"] {
        assert!(stdout.contains(needle), "summary lacks {needle:?}:\n{stdout}");
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("## Snapshots (issue 13)") && md.contains("| figure | git / cp -a | ringfs |"), "{md}");
}
