//! Snapshots through real mounts (issue 13, first cut): `ringfs commit`,
//! `ringfs log` and `ringfs diff` (on a mount and `--store` on an
//! unmounted store); a deleted file's chunks survive gc while a commit names
//! them; the changed-since-commit state survives kill -9 of the daemon; a
//! commit with nothing changed makes none; the `--json` shapes.

mod common;

use common::*;
use serde_json::Value;

fn n(v: &Value, a: &str, b: &str) -> u64 {
    v[a][b].as_u64().unwrap_or_else(|| panic!("{a}.{b} in {v}"))
}

/// (path, change) of a diff document.
fn changes(v: &Value) -> Vec<(String, String)> {
    v["changes"].as_array().unwrap().iter().map(|c| (c["path"].as_str().unwrap().to_string(), c["change"].as_str().unwrap().to_string())).collect()
}

#[test]
fn commit_modify_commit_diff_log() {
    if raw_mode() {
        return; // about ringfs's own store
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir -p src/lib docs && echo one > src/a.txt && echo two > src/lib/b.txt && echo readme > docs/README && ln -s a.txt src/link");
    let c1 = json(&["commit", mp(&m), "-m", "first"]);
    assert_eq!(c1["created"], true, "{c1}");
    assert_eq!(c1["parent"], Value::Null);
    assert_eq!(c1["branch"], "main");
    assert_eq!(c1["id"].as_str().unwrap().len(), 64);
    // src, src/lib, docs, three files and a symlink.
    assert_eq!((n(&c1, "paths", "added"), n(&c1, "paths", "modified"), n(&c1, "paths", "removed")), (7, 0, 0), "{c1}");
    assert!(n(&c1, "objects", "new") >= 7, "{c1}");
    for p in ["hash", "flush", "build", "diff", "write", "durable"] {
        assert!(c1["phases_ms"][p].is_number(), "phase {p} in {c1}");
    }
    assert!(c1["total_ms"].is_number() && c1["journal_position"].is_u64(), "{c1}");

    m.sh_ok("echo more >> src/a.txt && rm docs/README && echo new > src/lib/c.txt && chmod 600 src/lib/b.txt");
    let d = json(&["diff", mp(&m)]);
    assert_eq!(d["to"], "live");
    assert_eq!(d["from"], c1["id"]);
    assert_eq!(
        changes(&d),
        [("docs/README", "removed"), ("src/a.txt", "modified"), ("src/lib/b.txt", "modified"), ("src/lib/c.txt", "added")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    let a = &d["changes"][1];
    assert_eq!((a["old"]["size"].as_u64(), a["new"]["size"].as_u64(), a["new"]["kind"].as_str()), (Some(4), Some(9), Some("file")), "{a}");
    let b = &d["changes"][2];
    assert_eq!((b["old"]["mode"].as_str(), b["new"]["mode"].as_str()), (Some("0644"), Some("0600")), "{b}");
    assert_eq!(d["changes"][0]["new"], Value::Null);

    let c2 = json(&["commit", mp(&m), "-m", "second"]);
    assert_eq!(c2["parent"], c1["id"]);
    assert_eq!((n(&c2, "paths", "added"), n(&c2, "paths", "modified"), n(&c2, "paths", "removed")), (1, 2, 1), "{c2}");
    // Only what changed is built again: the docs and src/lib paths and the root.
    assert!(n(&c2, "objects", "new") <= 8, "{c2}");

    let log = json(&["log", mp(&m)]);
    let ids: Vec<&str> = log["commits"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [c2["id"].as_str().unwrap(), c1["id"].as_str().unwrap()]);
    assert_eq!(log["commits"][0]["message"], "second");
    assert_eq!(log["commits"][0]["parents"][0], c1["id"]);
    assert!(log["commits"][1]["author"].as_str().unwrap().contains('@'));

    // Two commits by a unique start of their ids, and by branch name.
    let short = &c1["id"].as_str().unwrap()[..10];
    let d12 = json(&["diff", mp(&m), short, "main"]);
    assert_eq!(changes(&d12), changes(&d));
    assert_eq!(changes(&json(&["diff", mp(&m), "main", "live"])), Vec::<(String, String)>::new());
    // Text output: one line per path.
    let o = ringfs(&["diff", mp(&m), short, "main"]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "{out} {err}");
    assert!(out.contains("D  docs/README") && out.contains("A  src/lib/c.txt") && out.contains("M  src/a.txt"), "{out}");
    let o = ringfs(&["log", mp(&m)]);
    let (out, _) = out_str(&o);
    assert!(out.contains(&format!("commit {}", c2["id"].as_str().unwrap())) && out.contains("    second"), "{out}");

    // Unknown names: one line naming the candidates.
    let o = ringfs(&["diff", mp(&m), "nosuch"]);
    let (out, err) = out_str(&o);
    assert!(!o.status.success(), "{out}");
    assert!(err.contains("no commit or branch named \"nosuch\"") && err.contains("main") && err.contains("live"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    m.unmount_checked();
    let o = ringfs(&["fsck", "--store", m.store_dir().to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck: {out} {err}");
    assert!(out.contains("snapshot objects"), "{out}");
}

#[test]
fn nothing_changed_makes_no_commit_and_first_diff_needs_a_commit() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let o = ringfs(&["diff", mp(&m)]);
    let (_, err) = out_str(&o);
    assert!(!o.status.success() && err.contains("no commits yet"), "{err}");
    let log = json(&["log", mp(&m)]);
    assert_eq!(log["commits"].as_array().unwrap().len(), 0);
    m.sh_ok("echo x > f");
    let c1 = json(&["commit", mp(&m)]);
    let c2 = json(&["commit", mp(&m)]);
    assert_eq!(c2["created"], false, "{c2}");
    assert_eq!(c2["id"], c1["id"]);
    let o = ringfs(&["commit", mp(&m)]);
    let (out, _) = out_str(&o);
    assert!(o.status.success() && out.contains("nothing changed since commit"), "{out}");
    // A change undone is no change.
    m.sh_ok("echo y > g && rm g");
    assert_eq!(json(&["commit", mp(&m)])["created"], false);
    let c3 = json(&["commit", mp(&m), "--allow-empty", "-m", "checkpoint"]);
    assert_eq!(c3["created"], true);
    assert_eq!(c3["parent"], c1["id"]);
    assert_eq!(json(&["log", mp(&m)])["commits"].as_array().unwrap().len(), 2);
    m.unmount_checked();
}

#[test]
fn deleted_file_keeps_its_chunks_while_a_commit_names_them() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let store = m.store_dir().to_path_buf();
    // Several chunks of incompressible bytes.
    m.sh_ok("head -c 3000000 /dev/urandom > big && echo keep > small");
    let c1 = json(&["commit", mp(&m), "-m", "with big"]);
    m.sh_ok("rm big && echo changed > small");
    let o = ringfs(&["gc", mp(&m)]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    let d = json(&["diff", mp(&m)]);
    let big = d["changes"].as_array().unwrap().iter().find(|c| c["path"] == "big").cloned().unwrap_or_else(|| panic!("{d}"));
    assert_eq!((big["change"].as_str(), big["old"]["size"].as_u64()), (Some("removed"), Some(3_000_000)), "{big}");
    json(&["commit", mp(&m), "-m", "without big"]);
    m.unmount_checked();
    let o = ringfs(&["gc", "--store", store.to_str().unwrap()]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    let o = ringfs(&["fsck", "--store", store.to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck counts the commit's references: {out} {err}");
    // The chunks of `big` are still indexed, each referenced (by the first
    // commit's manifest object only), and their bytes are in the packs.
    let db = redb::Database::open(store.join("store.redb")).unwrap();
    let rtx = db.begin_read().unwrap();
    use redb::{ReadableDatabase, ReadableTable};
    let idx = rtx.open_table(fs_core::store::CHUNKS).unwrap();
    let mut bytes = 0u64;
    for r in idx.iter().unwrap() {
        let (_, v) = r.unwrap();
        let (_, _, len, refs) = v.value();
        assert!(refs >= 1);
        bytes += len as u64;
    }
    assert!(bytes >= 3_000_000, "the deleted file's chunks are kept ({bytes} bytes indexed)");
    assert!(c1["id"].is_string());
}

#[test]
fn changes_since_the_last_commit_survive_kill_9() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir d && echo one > d/a && echo two > d/b");
    let c1 = json(&["commit", mp(&m)]);
    // Changes made durable (fsync of the file and the directory), then the daemon dies.
    m.sh_ok("echo three > d/c && echo one-more >> d/a && python3 -c 'import os\nfor p in [\"d/a\", \"d/c\", \"d\"]:\n    fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.close(fd)'");
    m.kill_daemon();
    m.mount_again();
    let d = json(&["diff", mp(&m)]);
    assert_eq!(changes(&d), [("d/a", "modified"), ("d/c", "added")].map(|(a, b)| (a.to_string(), b.to_string())), "{d}");
    let c2 = json(&["commit", mp(&m)]);
    assert_eq!(c2["parent"], c1["id"]);
    assert_eq!((n(&c2, "paths", "added"), n(&c2, "paths", "modified")), (1, 1), "{c2}");
    // A commit is durable when the command returns: kill -9 right after it.
    m.kill_daemon();
    m.mount_again();
    let log = json(&["log", mp(&m)]);
    assert_eq!(log["commits"][0]["id"], c2["id"]);
    assert_eq!(changes(&json(&["diff", mp(&m)])), Vec::<(String, String)>::new());
    m.unmount_checked();
}

#[test]
fn log_of_an_unmounted_store() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let store = m.store_dir().to_str().unwrap().to_string();
    m.sh_ok("echo a > a");
    let c1 = json(&["commit", mp(&m), "-m", "a"]);
    // While the daemon holds the store, --store says to use the mountpoint.
    let o = ringfs(&["log", "--store", &store]);
    let (_, err) = out_str(&o);
    assert!(!o.status.success() && err.contains("in use by a running daemon"), "{err}");
    m.unmount_checked();
    let log = json(&["log", "--store", &store]);
    assert_eq!(log["commits"][0]["id"], c1["id"]);
    assert_eq!(log["commits"][0]["message"], "a");
    let o = ringfs(&["log", "--store", &store]);
    let (out, _) = out_str(&o);
    assert!(out.contains(&format!("commit {}", c1["id"].as_str().unwrap())), "{out}");
    // Nothing was written: fsck finds it clean and shut down cleanly.
    let o = ringfs(&["fsck", "--store", &store]);
    assert!(o.status.success(), "{:?}", out_str(&o));
}

/// `ringfs diff --store DIR FROM TO` on an unmounted store (read-only):
/// the same changes as through the daemon; `total_ms` in both; `live` and
/// a single name refused with the way out.
#[test]
fn diff_of_an_unmounted_store_and_its_time() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let store = m.store_dir().to_str().unwrap().to_string();
    m.sh_ok("echo a > a");
    let c1 = json(&["commit", mp(&m), "-m", "a"]);
    m.sh_ok("echo b > b && rm a");
    let c2 = json(&["commit", mp(&m), "-m", "b"]);
    let (i1, i2) = (c1["id"].as_str().unwrap().to_string(), c2["id"].as_str().unwrap().to_string());
    let mounted = json(&["diff", mp(&m), &i1[..10], &i2]);
    assert!(mounted["total_ms"].is_number(), "{mounted}");
    m.unmount_checked();
    let d = json(&["diff", "--store", &store, &i1[..10], "main"]);
    assert_eq!(changes(&d), changes(&mounted));
    assert_eq!(changes(&d), [("a", "removed"), ("b", "added")].map(|(a, b)| (a.to_string(), b.to_string())));
    assert_eq!((d["from"].as_str(), d["to"].as_str()), (Some(i1.as_str()), Some(i2.as_str())));
    assert!(d["total_ms"].is_number(), "{d}");
    for (args, want) in [(vec!["main"], "takes two commits"), (vec!["main", "live"], "needs the mounted workspace")] {
        let mut a = vec!["diff", "--store", store.as_str()];
        a.extend(args);
        let o = ringfs(&a);
        let (_, err) = out_str(&o);
        assert!(!o.status.success() && err.contains(want), "{a:?}: {err}");
    }
    let o = ringfs(&["fsck", "--store", &store]);
    assert!(o.status.success(), "{:?}", out_str(&o));
}

#[test]
fn commit_sees_writes_to_a_file_still_open() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("echo a > f");
    let c1 = json(&["commit", mp(&m)]);
    // Written (through passthrough when it is on) and still open while the
    // commit runs.
    let out = m.sh_ok(&format!(
        "python3 -c 'import os, subprocess\nfd = os.open(\"f\", os.O_WRONLY | os.O_APPEND)\nos.write(fd, b\"more bytes\\n\")\nprint(subprocess.run([\"{RINGFS}\", \"commit\", \"{}\", \"--json\"], capture_output=True, text=True).stdout)\nos.close(fd)'",
        mp(&m)
    ));
    let c2: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(c2["parent"], c1["id"], "{c2}");
    assert_eq!(n(&c2, "paths", "modified"), 1, "{c2}");
    let d = json(&["diff", mp(&m), c1["id"].as_str().unwrap(), "main"]);
    assert_eq!(d["changes"][0]["new"]["size"].as_u64(), Some(13), "{d}");
    // Closed: the live tree is what was committed.
    assert_eq!(changes(&json(&["diff", mp(&m)])), Vec::<(String, String)>::new());
    m.unmount_checked();
}

#[test]
fn local_only_paths_and_native_roots_are_left_out() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::builder(Backend::Store).args(["--ignore", "node_modules", "--ignore", "*.log"]).name("snap-local").mount();
    if native_roots_possible() {
        make_native_root(&m, "node_modules");
    } else {
        m.sh_ok("mkdir node_modules");
    }
    m.sh_ok("mkdir -p node_modules/dep && echo x > node_modules/dep/index.js && echo y > build.log && echo z > app.js");
    let c = json(&["commit", mp(&m)]);
    assert_eq!((n(&c, "paths", "added"), n(&c, "paths", "modified")), (1, 0), "only app.js: {c}");
    m.sh_ok("echo more > node_modules/dep/other.js && echo more >> build.log");
    assert_eq!(changes(&json(&["diff", mp(&m)])), Vec::<(String, String)>::new());
    assert_eq!(json(&["commit", mp(&m)])["created"], false);
    m.unmount_checked();
}

/// A 1 500-level directory chain (D72: the daemon's control thread
/// overflowed its 2 MiB stack at ~700 levels in commit and diff, killing
/// the daemon): commit, diff against live, a commit, restore and a fork
/// all work, and the restored tree is the first commit's.
#[test]
fn deep_directory_chains_commit_diff_restore_and_fork() {
    if raw_mode() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    let depth = 1500;
    let mut p = m.path().to_path_buf();
    for i in 0..depth {
        p.push("c");
        std::fs::create_dir(&p).unwrap();
        if i % 100 == 0 {
            std::fs::write(p.join("f"), i.to_string()).unwrap();
        }
    }
    let deepest = p.clone();
    let c1 = json(&["commit", mp(&m), "-m", "deep"]);
    assert_eq!(n(&c1, "paths", "added"), depth + 15, "{c1}");
    std::fs::write(deepest.join("new"), b"x").unwrap();
    let d = json(&["diff", mp(&m)]);
    let ch = changes(&d);
    assert_eq!(ch.len(), 1, "{d}");
    assert!(ch[0].0.ends_with("/c/new") && ch[0].1 == "added", "{ch:?}");
    json(&["commit", mp(&m), "-m", "more"]);
    let id = c1["id"].as_str().unwrap();
    let r = ringfs(&["restore", mp(&m), id]);
    assert!(r.status.success(), "{:?}", out_str(&r));
    assert!(!deepest.join("new").exists() && deepest.is_dir());
    let g = tempfile::tempdir().unwrap();
    let to = g.path().join("fork");
    std::fs::create_dir(&to).unwrap();
    let o = ringfs(&["fork", mp(&m), "--to", to.to_str().unwrap(), "--new-store", g.path().join("store").to_str().unwrap()]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    let mut q = to.clone();
    let mut levels = 0;
    while q.join("c").is_dir() {
        q.push("c");
        levels += 1;
    }
    let read = std::fs::read_to_string(to.join("c").join("f"));
    let u = ringfs(&["umount", to.to_str().unwrap()]);
    assert!(u.status.success(), "{:?}", out_str(&u));
    assert_eq!((levels, read.unwrap()), (depth, "0".to_string()));
}
