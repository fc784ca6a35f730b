//! The store section end to end at tiny sizes through real ringfs mounts
//! (`--store-section tiny`, no rows): every figure is there with ext4 and
//! ringfs values, targets decided, SQLite writers succeeded and the database
//! checks ok, the summary, results.md and `report --from` show it, and
//! nothing is left mounted or on disk. Timings are never asserted.
//! Also: a busy mount's unmount is retried, then fails naming the holder.
//!
//! Needs root, /dev/fuse, python3 and a built ringfs binary (RINGFS_BIN, or
//! the `ringfs` next to this test's ringfs-bench, or target/release/ringfs).

use std::process::Command;

use serde_json::Value;

mod common;
use common::*;


const KEYS: &[&str] = &[
    "fsync-1MiB-median",
    "fsync-1MiB-p90",
    "fsync-4MiB-median",
    "sqlite-wall",
    "sqlite-failed",
    "sqlite-integrity",
    "rss-mixed-hwm",
    "rss-mixed-max",
    "rss-mixed-idle",
    "rss-mixed-after",
    "big-write",
    "rss-big-hwm",
    "disk-big-store",
    "disk-big-all",
    "tree-create",
    "umount-final-commit",
    "disk-tree",
    "rss-tree-hwm",
    "rss-tree-after",
];

#[test]
fn tiny_store_section_end_to_end() {
    let Some(ringfs) = can_mount() else { return };
    assert!(Command::new("python3").args(["-c", "import sqlite3"]).status().is_ok_and(|s| s.success()), "python3 with sqlite3 is needed (scripts/setup.sh)");
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let (base, out) = (tmp.path().join("base"), tmp.path().join("out"));
    std::fs::create_dir_all(&base).unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_ringfs-bench"))
        .args(["--profile", "smoke", "--rows", "0", "--npm", "none", "--store-section", "tiny", "--no-setup", "--seed", "3"])
        .arg("--ringfs")
        .arg(&ringfs)
        .arg("--base")
        .arg(&base)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&st.stdout), String::from_utf8_lossy(&st.stderr));
    assert!(st.status.success(), "store section failed: {stdout}\n{stderr}");
    assert!(mounts_below(tmp.path()).is_empty(), "left mounted: {:?}", mounts_below(tmp.path()));
    assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0, "temp dirs left in {}", base.display());

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let s = &doc["store"];
    assert_eq!(s["profile"], "tiny", "{s}");
    assert_eq!(s["errors"].as_array().unwrap().len(), 0, "workloads failed: {}", s["errors"]);
    assert!(s["load"]["before"].as_array().is_some_and(|a| a.len() == 3), "{}", s["load"]);
    let figs = s["figures"].as_array().unwrap();
    let fig = |k: &str| figs.iter().find(|f| f["key"] == k).unwrap_or_else(|| panic!("no figure {k} in {s}"));
    for k in KEYS {
        let f = fig(k);
        assert!(f["ringfs"].as_f64().is_some(), "{k} has no ringfs value: {f}");
        if let Some(t) = f["target"].as_object() {
            assert!(t["pass"].is_boolean(), "{k}'s target is undecided: {f}");
        }
    }
    for k in ["fsync-1MiB-median", "sqlite-wall", "big-write", "disk-tree", "tree-create", "umount-final-commit"] {
        assert!(fig(k)["ext4"].as_f64().is_some_and(|x| x > 0.0), "{k} has no ext4 value: {}", fig(k));
    }
    // Correctness, not speed: no writer failed and the databases check ok on both sides.
    assert_eq!((fig("sqlite-failed")["ext4"].as_f64(), fig("sqlite-failed")["ringfs"].as_f64()), (Some(0.0), Some(0.0)));
    assert_eq!((fig("sqlite-integrity")["ext4"].as_f64(), fig("sqlite-integrity")["ringfs"].as_f64()), (Some(1.0), Some(1.0)));
    assert!(fig("rss-mixed-hwm")["ringfs"].as_f64().unwrap() > 1.0, "{}", fig("rss-mixed-hwm"));

    for needle in ["store section (tiny", "4 KiB write + fsync, 1 MiB file, median", "SQLite: writers that failed", "≤ 128 MiB", "≤ 10 s"] {
        assert!(stdout.contains(needle), "summary lacks {needle:?}:\n{stdout}");
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("## Store (issue 12)") && md.contains("| daemon VmHWM, mixed 8-client load, 3 s |"), "{md}");

    // The report of the run from its results.json shows the same store section.
    let rep = tmp.path().join("rep");
    let st = Command::new(env!("CARGO_BIN_EXE_ringfs-bench")).arg("report").arg("--from").arg(out.join("results.json")).arg("--out").arg(&rep).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let again = String::from_utf8_lossy(&st.stdout);
    let section = |t: &str| t.lines().skip_while(|l| !l.starts_with("store section")).take(KEYS.len()).collect::<Vec<_>>().join("\n");
    assert_eq!(section(&again), section(&stdout));
}

#[test]
fn busy_unmount_is_retried_then_names_the_holder() {
    let Some(ringfs) = can_mount() else { return };
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let features = bench::targets::Features::detect(&ringfs).unwrap();
    let mut inst = bench::targets::Instance::new(&bench::store::default_mode(), &features, tmp.path()).unwrap();
    inst.mount().unwrap();
    let f = std::fs::File::create(inst.root().join("held")).unwrap();
    let err = format!("{:#}", inst.unmount().expect_err("a mount with an open file is busy"));
    assert!(err.contains("busy") && err.contains(&format!("pid {}", std::process::id())), "{err}");
    assert!(err.contains("refused 5 times"), "{err}");
    drop(f);
    inst.unmount().expect("unmounts once the file is closed");
    drop(inst);
    assert!(mounts_below(tmp.path()).is_empty(), "left mounted: {:?}", mounts_below(tmp.path()));
}
