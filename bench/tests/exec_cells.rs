//! `ringfs-exec-bench --cells` end to end, tiny: cells 1 and 9 at REPS=1 on
//! the four candidates (plain host, setpriv, ringfs exec, ringfs exec
//! --sandbox) through real mounts. Checks the tables, the JSON (every
//! sample verified; the receipts' changed paths against what the cells do;
//! the commit; mount/unmount times; store and working-copy bytes), and that
//! nothing is left mounted or on disk. Bounded: the run is interrupted
//! (SIGTERM: it cleans up) after 55 s.
//!
//! Needs root, /dev/fuse and setpriv, and a built ringfs binary (RINGFS_BIN,
//! or the one beside this test's binaries); skips otherwise.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::*;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ringfs-exec-bench"))
}

#[test]
fn cells_mode_runs_tiny_end_to_end() {
    let Some(ringfs) = can_mount() else { return };
    if !std::path::Path::new("/usr/bin/setpriv").exists()
        && !std::path::Path::new("/bin/setpriv").exists()
    {
        eprintln!("skipping: setpriv is not installed");
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    let json = tmp.path().join("cells.json");

    // A cell that does not exist is refused before anything is made.
    let o = bench()
        .args(["--cells", "--rows", "13"])
        .arg("--ringfs")
        .arg(&ringfs)
        .arg("--base")
        .arg(&base)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cells are 1 to 12"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0);

    let t0 = Instant::now();
    let mut child = bench()
        .args([
            "--cells",
            "--rows",
            "1,9",
            "--reps",
            "1",
            "--seed",
            "7",
            "--timeout",
            "50",
        ])
        .arg("--ringfs")
        .arg(&ringfs)
        .arg("--base")
        .arg(&base)
        .arg("--json")
        .arg(&json)
        .env("FSBENCH_PLAIN_PROGRESS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut overran = false;
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(55) && !overran {
            // SAFETY: kill(2) on our own child; SIGTERM lets it unmount and clean up.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            overran = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Nothing left behind, on every path.
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
    assert!(
        !overran,
        "the tiny cells run took over 55 s: {stdout}\n{stderr}"
    );
    assert!(out.status.success(), "cells run failed: {stdout}\n{stderr}");

    // The tables: counts first, then times, with the load.
    for want in [
        "Counts",
        "Times",
        "ringfs detail",
        "| 01-create |",
        "| 09-read |",
        "load before",
        "ringfs exec --commit",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in\n{stdout}");
    }
    assert!(stdout.find("Counts").unwrap() < stdout.find("Times").unwrap());

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["meta"]["reps"], 1);
    assert_eq!(
        doc["meta"]["load_before"].as_array().map(Vec::len),
        Some(3),
        "{}",
        doc["meta"]
    );
    assert_eq!(
        doc["meta"]["load_after"].as_array().map(Vec::len),
        Some(3),
        "{}",
        doc["meta"]
    );
    assert_eq!(doc["counts"].as_array().unwrap().len(), 2);
    let samples = doc["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 8, "2 cells × 4 candidates");
    for row in ["01-create", "09-read"] {
        let mut targets: Vec<&str> = samples
            .iter()
            .filter(|s| s["row"] == row)
            .map(|s| s["target"].as_str().unwrap())
            .collect();
        targets.sort();
        assert_eq!(
            targets,
            ["exec", "exec-sandbox", "host", "setpriv"],
            "{row}"
        );
    }
    for s in samples {
        let (row, target) = (s["row"].as_str().unwrap(), s["target"].as_str().unwrap());
        let what = format!("{row} on {target}: {s:#}");
        assert_eq!(s["ok"], true, "{what}");
        assert_eq!(s["section"], "cells", "{what}");
        assert!(
            s["warm_mount_ms"].is_number() && s["unmount_ms"].is_number(),
            "{what}"
        );
        assert!(
            s["info"].get("warm_run").is_none(),
            "the untimed run failed: {what}"
        );
        let e = &s["exec"];
        assert_eq!(e["candidate"], target);
        assert!(
            e["wall_ms"].as_f64().unwrap() > 0.0 && e["command_ms"].as_f64().unwrap() > 0.0,
            "{what}"
        );
        let wc = e["wc_bytes"].as_u64().unwrap();
        if row == "09-read" {
            assert_eq!(wc, 64 << 20, "{what}");
        } else {
            // f1..f1000 holding 1..1000 and a newline.
            let want: u64 = (1..=1000u64).map(|i| i.to_string().len() as u64 + 1).sum();
            assert_eq!(wc, want, "{what}");
        }
        if target.starts_with("exec") {
            let r = &e["receipt"];
            assert_eq!(r["exit_code"], 0, "{what}");
            assert!(r["commit"].is_string(), "--commit made a commit: {what}");
            assert!(r["time"]["commit_ms"].as_f64().unwrap() > 0.0, "{what}");
            assert!(
                s["mount_ms"].as_f64().unwrap() > 0.0,
                "a fresh mount for the timed run: {what}"
            );
            let ch = &r["changes"];
            let (added, modified, removed) = (
                ch["added"].as_u64().unwrap(),
                ch["modified"].as_u64().unwrap(),
                ch["removed"].as_u64().unwrap(),
            );
            if row == "09-read" {
                // A pure read of the committed base file changes nothing.
                assert_eq!((added, modified, removed), (0, 0, 0), "{what}");
                assert!(e["store_bytes"].as_u64().unwrap() >= 64 << 20, "{what}");
            } else {
                assert_eq!((added, modified, removed), (1000, 0, 0), "{what}");
                assert!(
                    r["requests"]["by_opcode"]["CREATE"].as_u64().unwrap_or(0) >= 1000,
                    "{what}"
                );
            }
            assert!(
                r["requests"]["total"].as_u64().unwrap() > 0 || row == "09-read",
                "{what}"
            );
        } else {
            assert!(e.get("receipt").is_none(), "{what}");
        }
    }
}
