//! The sync section end to end at tiny sizes (`--sync-section tiny`, no
//! rows), through real ringfs mounts against Garage when `garage` is on
//! PATH (else file://): every figure is there with its ringfs value and its
//! reference where it has one, targets decided, nothing resent after a
//! restart, the summary and results.md show it, and nothing is left
//! mounted, running or on disk. Timings are never asserted.
//!
//! Needs root, /dev/fuse and a built ringfs binary (RINGFS_BIN, or the
//! `ringfs` next to this test's ringfs-bench, or target/release/ringfs).

use std::process::Command;

use serde_json::Value;

mod common;
use common::*;

const KEYS: &[&str] = &[
    "sync-dedup-overwrite",
    "sync-dedup-prepend",
    "sync-restart-reconcile",
    "sync-restart-resent",
    "sync-restart-mount",
    "sync-raw-download",
    "sync-clone-cmd",
    "sync-clone-ls",
    "sync-clone-read",
    "sync-push-throughput",
    "sync-push-wall",
];

#[test]
fn tiny_sync_section_end_to_end() {
    let Some(ringfs) = can_mount() else { return };
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (base, out) = (tmp.path().join("base"), tmp.path().join("out"));
    std::fs::create_dir_all(&base).unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_ringfs-bench"))
        .args([
            "--profile",
            "smoke",
            "--rows",
            "0",
            "--npm",
            "none",
            "--sync-section",
            "tiny",
            "--no-setup",
            "--seed",
            "3",
        ])
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
    let (stdout, stderr) = (
        String::from_utf8_lossy(&st.stdout),
        String::from_utf8_lossy(&st.stderr),
    );
    assert!(
        st.status.success(),
        "sync section failed: {stdout}\n{stderr}"
    );
    assert!(
        mounts_below(tmp.path()).is_empty(),
        "left mounted: {:?}",
        mounts_below(tmp.path())
    );
    assert_eq!(
        std::fs::read_dir(&base).unwrap().count(),
        0,
        "temp dirs left in {}",
        base.display()
    );

    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let s = &doc["sync"];
    assert_eq!(
        (s["kind"].as_str(), s["profile"].as_str()),
        (Some("sync"), Some("tiny")),
        "{s}"
    );
    assert_eq!(
        s["errors"].as_array().unwrap().len(),
        0,
        "workloads failed: {}",
        s["errors"]
    );
    let server = s["ext4_fs"].as_str().unwrap();
    assert!(
        server.contains("Garage") || server.contains("file://"),
        "{server}"
    );
    let figs = s["figures"].as_array().unwrap();
    let fig = |k: &str| {
        figs.iter()
            .find(|f| f["key"] == k)
            .unwrap_or_else(|| panic!("no figure {k} in {s}"))
    };
    for k in KEYS {
        let f = fig(k);
        if *k != "sync-raw-download" {
            assert!(
                f["ringfs"].as_f64().is_some(),
                "{k} has no ringfs value: {f}"
            );
        }
        if let Some(t) = f["target"].as_object() {
            assert!(t["pass"].is_boolean(), "{k}'s target is undecided: {f}");
        }
    }
    for k in [
        "sync-raw-download",
        "sync-clone-read",
        "sync-push-throughput",
    ] {
        assert!(
            fig(k)["ext4"].as_f64().is_some_and(|x| x > 0.0),
            "{k} has no reference: {}",
            fig(k)
        );
    }
    // A restart of a pushed workspace sends nothing (a count, not a timing).
    assert_eq!(
        fig("sync-restart-resent")["ringfs"].as_f64(),
        Some(0.0),
        "{}",
        fig("sync-restart-resent")
    );
    for needle in ["sync section (tiny", "raw object_store"] {
        assert!(
            stdout.contains(needle),
            "summary lacks {needle:?}:\n{stdout}"
        );
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(
        md.contains("## Sync (issue 14)") && md.contains("| figure | ref | ringfs |"),
        "{md}"
    );
}
