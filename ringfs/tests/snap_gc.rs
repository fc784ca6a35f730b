//! Garbage collection of snapshots through real mounts (issue 13): a
//! deleted file's chunks stay while a branch reaches the commit naming
//! them, and `ringfs gc` frees them once the branch is deleted (refs are
//! edited directly in the unmounted store: `ringfs branch -d` is another
//! change); kill -9 of `ringfs gc --store` at its crash points
//! (`RINGFS_FAILPOINT`, test-only) leaves a store fsck finds clean; gc on a
//! mount while commits run is safe.

mod common;

use common::*;
use redb::{ReadableDatabase, ReadableTable};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// Bytes indexed in the chunk index of an unmounted store.
fn indexed_bytes(store: &std::path::Path) -> u64 {
    let db = redb::Database::open(store.join("store.redb")).unwrap();
    let rtx = db.begin_read().unwrap();
    let idx = rtx.open_table(fs_core::store::CHUNKS).unwrap();
    idx.iter().unwrap().map(|r| r.unwrap().1.value().2 as u64).sum()
}

fn packs_bytes(store: &std::path::Path) -> u64 {
    std::fs::read_dir(store.join("packs")).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum()
}

fn fsck_clean(store: &std::path::Path) {
    let o = ringfs(&["fsck", "--store", store.to_str().unwrap(), "--full"]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck after gc: {out} {err}");
}

/// A store with `big` committed only on branch `exp` (main holds a root
/// commit without it): returns (store, exp's commit id).
fn store_with_branch(m: &mut TestMount) -> (std::path::PathBuf, String) {
    let store = m.store_dir().to_path_buf();
    m.sh_ok("echo keep > small && head -c 3000000 /dev/urandom > big");
    let c1 = json(&["commit", mp(m), "-m", "with big"]);
    let c1 = c1["id"].as_str().unwrap().to_string();
    m.unmount_checked();
    // `exp` takes the commit; `main` starts again (its next commit is a
    // root): the branch and the base the live tree descends from go (the
    // CLI never deletes the checked-out branch; "head moved" would refuse).
    set_ref(&store, "exp", Some(&unhex(&c1)));
    set_ref(&store, "main", None);
    set_ref(&store, "BASE", None);
    m.mount_again();
    m.sh_ok("rm big");
    let c2 = json(&["commit", mp(m), "-m", "without big"]);
    assert_eq!(c2["parent"], Value::Null, "{c2}");
    (store, c1)
}

#[test]
fn gc_frees_what_only_a_deleted_branch_named() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let (store, c1) = store_with_branch(&mut m);
    // `exp` reaches the first commit: gc keeps big, and diff reads it.
    let g = json(&["gc", mp(&m)]);
    assert_eq!(g["snapshots"]["objects_deleted"], 0, "{g}");
    let d = json(&["diff", mp(&m), "exp", "main"]);
    assert!(!c1.is_empty());
    let big = d["changes"].as_array().unwrap().iter().find(|c| c["path"] == "big").cloned().unwrap_or_else(|| panic!("{d}"));
    assert_eq!(big["old"]["size"].as_u64(), Some(3_000_000), "{big}");
    m.unmount_checked();
    assert!(indexed_bytes(&store) >= 3_000_000);
    let before = packs_bytes(&store);
    set_ref(&store, "exp", None);
    m.mount_again();
    let g = json(&["gc", mp(&m)]);
    let s = &g["snapshots"];
    assert!(s["commits_deleted"] == 1 && s["chunk_bytes_freed"].as_u64().unwrap() >= 3_000_000, "{g}");
    // big's manifest was a tree (~370 chunks, D37): its nodes went too
    // (commit, root directory, manifest and ≥ 8 nodes).
    assert!(s["objects_deleted"].as_u64().unwrap() >= 11, "{g}");
    assert_eq!(m.sh_ok("cat small"), "keep\n");
    let o = ringfs(&["gc", mp(&m)]);
    let (out, _) = out_str(&o);
    assert!(o.status.success() && out.contains("0 objects deleted"), "{out}");
    m.unmount_checked();
    let after = packs_bytes(&store);
    assert!(after + 2_900_000 <= before, "the store shrinks: {before} -> {after}");
    assert!(indexed_bytes(&store) < 100_000);
    fsck_clean(&store);
    let log = ringfs(&["log", "--store", store.to_str().unwrap()]);
    assert!(log.status.success() && out_str(&log).0.contains("without big"), "{:?}", out_str(&log));
}

#[test]
fn kill_9_of_gc_at_its_crash_points_leaves_a_clean_store() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let (store, _) = store_with_branch(&mut m);
    m.unmount_checked();
    set_ref(&store, "exp", None);
    let s = store.to_str().unwrap();
    for (point, freed) in [("gc-after-mark", false), ("gc-before-commit", false), ("gc-after-commit", true)] {
        let before = indexed_bytes(&store);
        let o = run_timeout(Command::new(env!("CARGO_BIN_EXE_ringfs")).args(["gc", "--store", s]).env("RINGFS_FAILPOINT", point), Duration::from_secs(60));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(o.status.signal(), Some(libc::SIGKILL), "{point}: {:?}", out_str(&o));
        fsck_clean(&store);
        let after = indexed_bytes(&store);
        if freed {
            assert!(after + 3_000_000 <= before, "{point}: committed ({before} -> {after})");
        } else {
            assert_eq!(after, before, "{point}: nothing changed");
        }
    }
    let g = json(&["gc", "--store", s]);
    assert_eq!(g["snapshots"]["objects_deleted"], 0, "{g}");
    fsck_clean(&store);
    m.mount_again();
    assert_eq!(m.sh_ok("cat small"), "keep\n");
    assert_eq!(json(&["log", mp(&m)])["commits"].as_array().unwrap().len(), 1);
    m.unmount_checked();
}

#[test]
fn gc_while_commits_run_is_safe() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let store = m.store_dir().to_path_buf();
    let path = mp(&m).to_string();
    let gcs = std::thread::spawn({
        let path = path.clone();
        move || {
            for _ in 0..10 {
                let o = ringfs(&["gc", &path]);
                assert!(o.status.success(), "{:?}", out_str(&o));
            }
        }
    });
    for i in 0..10 {
        m.sh_ok(&format!("head -c 200000 /dev/urandom > f{i} && rm -f f{}", i.max(1) - 1));
        json(&["commit", &path, "-m", &format!("c{i}")]);
    }
    gcs.join().unwrap();
    json(&["gc", &path]);
    assert_eq!(json(&["log", &path])["commits"].as_array().unwrap().len(), 10);
    m.unmount_checked();
    fsck_clean(&store);
}

/// The inode of each pack file of a store.
fn pack_inodes(store: &std::path::Path) -> Vec<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut v: Vec<u64> = std::fs::read_dir(store.join("packs"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
        .map(|e| e.metadata().unwrap().ino())
        .collect();
    v.sort();
    v
}

#[test]
fn gc_leaves_packs_a_fork_shares_until_the_other_link_is_gone() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("for i in 1 2 3; do head -c 1000000 /dev/urandom > a$i; done");
    json(&["commit", mp(&m), "-m", "a"]);
    let fork = m.store_dir().parent().unwrap().join("gc-fork");
    json(&["fork", mp(&m), "--new-store", fork.to_str().unwrap(), "--no-mount"]);
    let shared = pack_inodes(&fork);
    assert_eq!(shared, pack_inodes(m.store_dir()), "the fork links the origin's pack");
    // The origin appends to the pack the fork links: dead bytes in the
    // fork's view, which compacting there would copy, not free.
    m.sh_ok("for i in 1 2 3 4 5; do head -c 1000000 /dev/urandom > b$i; done");
    json(&["commit", mp(&m), "-m", "b"]);
    let g = json(&["gc", "--store", fork.to_str().unwrap()]);
    assert_eq!((g["packs_compacted"].as_u64(), g["reclaimed"].as_u64()), (Some(0), Some(0)), "{g}");
    assert_eq!(g["packs_shared_kept"].as_u64(), Some(1), "{g}");
    assert!(g["shared_bytes_after"].as_u64().unwrap() >= 8_000_000, "{g}");
    assert_eq!(pack_inodes(&fork), shared, "gc of the fork kept its link to the shared pack");
    // The origin's gc leaves it too (the fork links it), and says why.
    m.sh_ok("rm b1 b2 b3 b4 b5");
    json(&["commit", mp(&m), "-m", "c"]);
    let o = ringfs(&["gc", mp(&m)]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "{out}{err}");
    m.unmount_checked();
    assert!(pack_inodes(m.store_dir()).contains(&shared[0]), "the origin kept the pack its fork links: {out}");
    fsck_clean(m.store_dir());
    fsck_clean(&fork);
    // The origin gone: the fork is the pack's only store, and its gc now
    // gives the origin's appends back.
    std::fs::remove_dir_all(m.store_dir()).unwrap();
    let g = json(&["gc", "--store", fork.to_str().unwrap()]);
    assert_eq!(g["packs_compacted"].as_u64(), Some(1), "{g}");
    assert!(g["reclaimed"].as_u64().unwrap() >= 4_000_000, "{g}");
    fsck_clean(&fork);
    std::fs::create_dir_all(m.store_dir()).unwrap();
}
