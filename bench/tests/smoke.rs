//! The CI smoke of the benchmark: REPS=1, two rows, two modes, through a real
//! ringfs mount; checks the progress lines, the summary, the JSON (load
//! averages included), markdown, SVG and PNG shape, and that nothing is left
//! mounted or on disk, also when the run is interrupted with SIGINT.
//!
//! Needs root and /dev/fuse, and a built ringfs binary: RINGFS_BIN, or the
//! `ringfs` next to this test's ringfs-bench (as `cargo test --workspace` builds it),
//! or target/release/ringfs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::*;


fn bench_cmd(ringfs: &Path, base: &Path, out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ringfs-bench"));
    c.args(["--profile", "smoke", "--no-setup", "--seed", "7"]).arg("--ringfs").arg(ringfs).arg("--base").arg(base).arg("--out").arg(out);
    c
}

#[test]
fn smoke_run_shape() {
    let Some(ringfs) = can_mount() else { return };
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let base = tmp.path().join("base");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&base).unwrap();
    let t0 = Instant::now();
    let st = bench_cmd(&ringfs, &base, &out).output().unwrap();
    let stdout = String::from_utf8_lossy(&st.stdout);
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "smoke failed: {stdout}\n{stderr}");
    // The smoke is meant to take well under a minute; allow for debug builds on a loaded CI machine.
    assert!(t0.elapsed() < Duration::from_secs(180), "smoke took {:?}", t0.elapsed());

    // Nothing left behind: no mounts, the per-run temp dir removed.
    assert!(mounts_below(tmp.path()).is_empty(), "left mounted: {:?}", mounts_below(tmp.path()));
    assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0, "temp dirs left in {}", base.display());

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let m = &doc["meta"];
    assert!(m["machine"]["kernel"].is_string() && m["machine"]["cpus"].as_u64().unwrap() >= 1);
    assert!(m["machine"]["loadavg_start"].is_string() && m["machine"]["loadavg_end"].is_string());
    // The load averages before, during (sampled) and after the run.
    let load = &m["load"];
    assert_eq!(load["cores"], m["machine"]["cpus"]);
    assert_eq!(load["before"].as_array().unwrap().len(), 3, "{load}");
    assert_eq!(load["after"].as_array().unwrap().len(), 3, "{load}");
    assert!(load["during"].is_array() && load["interval_s"].as_f64().unwrap() > 0.0, "{load}");
    assert!(doc["noise"]["rows"].as_array().unwrap().len() == 2, "{}", doc["noise"]);
    assert_eq!(m["reps"], 1);
    let targets = doc["targets"].as_array().unwrap();
    let ran: Vec<&str> = targets.iter().filter(|t| t["status"] == "ran").map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ran.len(), 2, "two modes: {ran:?}");
    assert_eq!(ran[0], "raw");
    assert!(ran[1].starts_with("rf-"), "{ran:?}");
    let samples = doc["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 4, "two rows x two modes");
    for s in samples {
        assert_eq!(s["ok"], true, "sample failed: {s}");
        assert!(s["ms"].as_f64().unwrap() > 0.0);
        assert!(s["phases_ms"]["body"].as_f64().unwrap() > 0.0);
        if s["target"] != "raw" {
            let req = &s["counters"]["requests"];
            assert!(req.is_object(), "ringfs sample without request counts: {s}");
            if s["row"] == "01-create" {
                assert!(req["CREATE"].as_u64().unwrap() >= 1000, "{req}");
            }
        } else {
            assert!(s["counters"].is_null());
        }
    }
    let summary = doc["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 4);
    for s in summary {
        assert!(s["median_ms"].as_f64().unwrap() > 0.0);
        if s["target"] == "raw" {
            assert!((s["ratio"].as_f64().unwrap() - 1.0).abs() < 1e-9);
        } else {
            assert!(s["ratio"].as_f64().unwrap() > 0.0);
            assert!(s["requests"].is_object());
        }
    }

    // Progress without a terminal: one line per sample group (a row on both targets), with k/N and an ETA.
    let progress: Vec<&str> = stderr.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(progress.len(), 2, "one line per row, not per sample:\n{stderr}");
    assert!(progress[0].starts_with("[2/4] 01-create · rows rep 1/1 · 2 samples"), "{stderr}");
    assert!(progress[1].starts_with("[4/4] 06-dd") && progress[1].contains("ETA 0s"), "{stderr}");

    // stdout is the one-screen summary.
    assert_eq!(stdout, std::fs::read_to_string(out.join("summary.txt")).unwrap(), "stdout is summary.txt");
    assert!(stdout.lines().count() <= 40, "{stdout}");
    for needle in ["load (1-min average", "noise: one raw-disk sample per row, spread not judged", "1 create 1000 files", "6 dd 64 MiB", "synced"] {
        assert!(stdout.contains(needle), "summary lacks {needle:?}:\n{stdout}");
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    for needle in ["| row | raw disk | ringfs", "| 1 create 1000 files |", "| 6 dd 64 MiB |", "×1.00", "kernel", "load average", "## Noise", "## Targets"] {
        assert!(md.contains(needle), "markdown lacks {needle:?}:\n{md}");
    }
    for name in ["ratios", "ratios-all"] {
        let svg = std::fs::read_to_string(out.join(format!("{name}.svg"))).unwrap();
        assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("create 1000 files"));
        let png = std::fs::read(out.join(format!("{name}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }
}

#[test]
fn sigint_unmounts_and_cleans_up() {
    let Some(ringfs) = can_mount() else { return };
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let base = tmp.path().join("base");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&base).unwrap();
    // Row 2 (1000 stat processes) runs long enough to be interrupted mid-body.
    let mut child = bench_cmd(&ringfs, &base, &out).args(["--rows", "2", "--reps", "3"]).spawn().unwrap();
    let t0 = Instant::now();
    while mounts_below(&base).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(60), "no mount appeared");
        assert!(child.try_wait().unwrap().is_none(), "bench ended before mounting");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signalling the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t1 = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(t1.elapsed() < Duration::from_secs(120), "bench did not stop after SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!st.success(), "an interrupted run is not a success");
    assert!(mounts_below(tmp.path()).is_empty(), "left mounted: {:?}", mounts_below(tmp.path()));
    assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0, "temp dirs left in {}", base.display());
    // What was measured before the interruption is reported, marked as such.
    let md = std::fs::read_to_string(out.join("results.md")).expect("an interrupted run writes its partial table");
    assert!(md.contains("Interrupted during rows"), "{md}");
}
