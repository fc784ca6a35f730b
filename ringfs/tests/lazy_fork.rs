//! Forks with a deferred tree (issue 13, DECISIONS D54) through real
//! mounts: a fork writes no per-file rows (its store names the commit;
//! the tree's rows are written at its first mount), and the fork then
//! reads every file and stat of a few hundred files as the origin's
//! commit; writes, renames, unlinks and mkdir in either never show in the
//! other; a commit in the fork diffs to exactly what changed; a restore
//! to its base; kill -9 of its daemon after fsynced writes loses nothing;
//! fsck is clean on both stores, the never-mounted fork included; the
//! origin's gc (after deleting everything) leaves the fork whole — the
//! fork holds what it needs (its own object and chunk index rows, and
//! hard links to the packs); a never-mounted fork mounted on another of
//! its branches (the switch writes the deferred tree first).

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn fsck_clean(store: &Path) {
    let o = ringfs(&["fsck", "--store", s(store), "--full"]);
    assert!(o.status.success(), "fsck {}: {:?}", store.display(), out_str(&o));
}

/// Path → (kind and mode, uid, gid, size for files and links, mtime in ns)
/// of everything below `root`.
fn stats(root: &Path) -> BTreeMap<String, (u32, u32, u32, u64, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == "lost+found" {
                continue;
            }
            let size = if m.is_dir() { 0 } else { m.size() };
            out.insert(rel, (m.mode(), m.uid(), m.gid(), size, m.mtime() * 1_000_000_000 + m.mtime_nsec()));
            if m.is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

/// (inodes, directory entries, manifests) rows of an unmounted store, as
/// fsck counts them.
fn rows(store: &Path) -> (u64, u64, u64) {
    let o = ringfs(&["fsck", "--store", s(store)]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck {}: {out} {err}", store.display());
    let line = out.lines().find(|l| l.starts_with("store ") && l.contains(" inode")).unwrap_or_else(|| panic!("no counts in fsck's report: {out}"));
    let n = |word: &str| -> u64 {
        let before = &line[..line.find(word).unwrap_or_else(|| panic!("{word} in {line}"))];
        before.trim_end().rsplit([' ', ',']).next().unwrap().parse().unwrap()
    };
    // Singular or plural ("1 inode", "2 inodes").
    (n(" inode"), n(" directory entr"), n(" manifest"))
}

fn changes(v: &serde_json::Value) -> BTreeMap<String, String> {
    v["changes"].as_array().unwrap().iter().map(|c| (c["path"].as_str().unwrap().to_string(), c["change"].as_str().unwrap().to_string())).collect()
}

#[test]
fn lazy_fork_reads_as_its_commit_stays_independent_and_survives_kill() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    // 300 small files in 10 directories (a few modes), a nested directory,
    // larger files of several chunks, an empty file, a symlink, an xattr.
    m.sh_ok(
        "for d in $(seq 0 9); do mkdir -p d$d/sub; for i in $(seq 0 29); do echo \"file $d $i\" > d$d/f$i; done; done \
         && chmod 600 d1/f1 && chmod 755 d2/f2 && chmod 700 d3 && touch -d '2001-02-03 04:05:06' d4/f4 \
         && head -c 3000000 /dev/urandom > d5/big && head -c 70000 /dev/urandom > d6/sub/mid && : > d7/empty \
         && ln -s ../d0/f0 d8/link && setfattr -n user.k -v val d9/f9",
    );
    let base = json(&["commit", mp(&m), "-m", "base"])["id"].as_str().unwrap().to_string();
    let want_tree = tree(m.path());
    let want_stats = stats(m.path());

    // The fork's store at the place of a second mount's (same filesystem).
    let mut f = TestMount::new(Backend::Store);
    f.unmount_checked();
    std::fs::remove_dir_all(f.store_dir()).unwrap();
    let r = json(&["fork", mp(&m), "--new-store", s(f.store_dir()), "--no-mount"]);
    assert_eq!((r["files"].as_u64(), r["commit"].as_str()), (Some(303), Some(base.as_str())), "{r}");
    assert!(r["new_bytes"].as_u64().unwrap() < 1 << 20, "{r}");
    // Never mounted: its tables hold the root only, and fsck accepts that.
    fsck_clean(f.store_dir());
    f.mount_again();
    assert_eq!(tree(f.path()), want_tree);
    assert_eq!(stats(f.path()), want_stats);
    let o = std::process::Command::new("getfattr").args(["--only-values", "-n", "user.k"]).arg(f.p("d9/f9")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "val");
    // Nothing to commit or diff: the tree written builds to the same objects.
    assert_eq!(json(&["diff", mp(&f)])["changes"].as_array().unwrap().len(), 0);

    // Independent both ways.
    f.sh_ok("echo changed > d0/f1 && mv d1/f2 d2/moved && rm d3/f3 && mkdir d4/new && echo n > d4/new/x && rm -r d6/sub && sync");
    m.sh_ok("echo origin > d0/f5 && rm d5/big && mkdir only-origin && sync");
    assert_eq!(std::fs::read_to_string(m.p("d0/f1")).unwrap(), "file 0 1\n");
    assert!(m.p("d1/f2").exists() && m.p("d3/f3").exists() && !m.p("d4/new").exists() && m.p("d6/sub/mid").exists());
    assert_eq!(std::fs::read_to_string(f.p("d0/f5")).unwrap(), "file 0 5\n");
    assert!(f.p("d5/big").exists() && !f.p("only-origin").exists());
    assert_eq!(std::fs::read(f.p("d5/big")).unwrap(), want_tree["d5/big"]);

    // A commit in the fork: its diff names exactly what changed.
    let c = json(&["commit", mp(&f), "-m", "fork work"]);
    assert_eq!(c["parent"].as_str(), Some(base.as_str()), "{c}");
    let d = changes(&json(&["diff", mp(&f), &base, c["id"].as_str().unwrap()]));
    let want: BTreeMap<String, String> = [
        ("d0/f1", "modified"),
        ("d1/f2", "removed"),
        ("d2/moved", "added"),
        ("d3/f3", "removed"),
        ("d4/new", "added"),
        ("d4/new/x", "added"),
        ("d6/sub", "removed"),
        ("d6/sub/mid", "removed"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(d, want);

    // kill -9 after fsynced writes: nothing fsynced is lost.
    f.sh_ok("printf durable > d7/empty && sync d7/empty && echo more > d8/new && sync d8/new && mv d9/f8 d9/f8b && sync d9");
    f.kill_daemon();
    f.mount_again();
    assert_eq!(std::fs::read_to_string(f.p("d7/empty")).unwrap(), "durable");
    assert_eq!(std::fs::read_to_string(f.p("d8/new")).unwrap(), "more\n");
    assert!(f.p("d9/f8b").exists() && !f.p("d9/f8").exists());
    assert_eq!(std::fs::read_to_string(f.p("d0/f1")).unwrap(), "changed\n");

    // Restore to the base: the origin's commit again, byte for byte.
    let o = ringfs(&["restore", mp(&f), &base]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    assert_eq!(tree(f.path()), want_tree);

    // The origin drops everything and collects: the fork keeps its files.
    m.sh_ok("rm -rf d0 d1 d2 d3 d4 d5 d6 d7 d8 d9");
    json(&["commit", mp(&m), "-m", "all gone"]);
    assert!(ringfs(&["gc", mp(&m)]).status.success());
    f.remount();
    assert_eq!(tree(f.path()), want_tree);
    f.unmount_checked();
    m.unmount_checked();
    fsck_clean(f.store_dir());
    fsck_clean(m.store_dir());
}

/// A fork mounted and read but never changed (its tree still deferred),
/// then mounted on another of its branches: the switch writes the
/// deferred tree first (in its own transaction) and then the branch's; the
/// tree is the branch's, fsck clean.
#[test]
fn never_mounted_fork_mounted_on_another_branch() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir d && for i in $(seq 1 40); do echo $i > d/f$i; done && echo one > a");
    let c1 = json(&["commit", mp(&m), "-m", "one"])["id"].as_str().unwrap().to_string();
    let t1 = tree(m.path());
    m.sh_ok("echo two > a && rm d/f1 && echo new > b");
    json(&["commit", mp(&m), "-m", "two"]);
    let mut f = TestMount::new(Backend::Store);
    f.unmount_checked();
    std::fs::remove_dir_all(f.store_dir()).unwrap();
    json(&["fork", mp(&m), "--new-store", s(f.store_dir()), "--no-mount"]);
    // Mounted once and read, never changed (D60: still deferred, with
    // working copies of its files): the switch writes the tree, then drops it.
    let t2 = tree(m.path());
    f.mount_again();
    assert_eq!(tree(f.path()), t2);
    f.unmount_checked();
    assert_eq!(rows(f.store_dir()), (1, 0, 0));
    json(&["branch", "--store", s(f.store_dir()), "old", &c1]);
    f.set_args(&["--branch", "old"]);
    f.mount_again();
    assert_eq!(tree(f.path()), t1);
    f.unmount_checked();
    fsck_clean(f.store_dir());
    m.unmount_checked();
}

/// D59: `ringfs salvage` of a never-mounted fork refused (exit 2, nothing
/// created at --to, the fix named) instead of building an empty workspace
/// and reporting it whole; the fork itself then mounts with its tree.
#[test]
fn salvage_of_a_never_mounted_fork_is_refused_not_emptied() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir d && echo one > d/a && echo two > b");
    json(&["commit", mp(&m), "-m", "one"]);
    let t = tree(m.path());
    let mut f = TestMount::new(Backend::Store);
    f.unmount_checked();
    std::fs::remove_dir_all(f.store_dir()).unwrap();
    json(&["fork", mp(&m), "--new-store", s(f.store_dir()), "--no-mount"]);
    let to = f.store_dir().with_extension("salvaged");
    let o = ringfs(&["salvage", "--store", s(f.store_dir()), "--to", s(&to)]);
    let (out, err) = out_str(&o);
    assert_eq!(o.status.code(), Some(2), "salvage of a never-mounted fork: {out} {err}");
    assert!(err.contains("never mounted") && err.contains("ringfs mount"), "the refusal names the fix: {err}");
    assert!(!to.exists() || std::fs::read_dir(&to).unwrap().next().is_none(), "nothing built at --to");
    let _ = std::fs::remove_dir_all(&to);
    f.mount_again();
    assert_eq!(tree(f.path()), t);
    f.unmount_checked();
    fsck_clean(f.store_dir());
    m.unmount_checked();
}

/// D59 finding 3: a sparse file written from a commit (a fork's first
/// mount) counts the blocks its data takes, not its size, before and after
/// its working copy is restored and after a remount (`du`, `cp --sparse`).
/// D60: the mount reads no file object, so the count is found when first
/// needed — a listing's attributes (readdirplus where the kernel uses it)
/// or a stat — and the rows written by the first change (a chmod of
/// another file) hold it too (a remount serves them).
#[test]
fn sparse_file_of_a_fork_keeps_its_holes_in_st_blocks() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("truncate -s 64M sparse && printf x | dd of=sparse bs=1 seek=33554432 conv=notrunc status=none && cp sparse sparse2 && echo hi > other");
    json(&["commit", mp(&m), "-m", "sparse"]);
    let mut f = TestMount::new(Backend::Store);
    f.unmount_checked();
    std::fs::remove_dir_all(f.store_dir()).unwrap();
    json(&["fork", mp(&m), "--new-store", s(f.store_dir()), "--no-mount"]);
    f.mount_again();
    // `ls -s` prints each file's blocks (KiB) from the listing's attributes.
    let ls = f.sh_ok("ls -s1 --block-size=1K");
    let kib = |name: &str| -> u64 {
        let l = ls.lines().find(|l| l.ends_with(&format!(" {name}"))).unwrap_or_else(|| panic!("{name} in {ls}"));
        l.split_whitespace().next().unwrap().parse().unwrap()
    };
    assert!(kib("sparse") < 1024 && kib("sparse2") < 1024 && kib("other") > 0, "a listing before any stat or open: {ls}");
    let p2 = f.path().join("sparse2");
    assert!(std::fs::metadata(&p2).unwrap().blocks() < 2048, "a stat before any open");
    let p = f.path().join("sparse");
    let md = std::fs::metadata(&p).unwrap();
    assert_eq!(md.len(), 64 << 20);
    assert!(md.blocks() < 2048, "before the first open: {} blocks for 1 written byte", md.blocks());
    let b = std::fs::read(&p).unwrap();
    assert_eq!((b.len(), b[33554432]), (64 << 20, b'x'));
    assert!(std::fs::metadata(&p).unwrap().blocks() < 2048, "after a read");
    f.unmount_checked();
    f.mount_again();
    assert!(std::fs::metadata(&p).unwrap().blocks() < 2048, "after a remount");
    // The first change writes the rows (from the objects); sparse2's
    // record is written again by the chmod's group commit.
    f.sh_ok("chmod 600 other sparse2");
    f.unmount_checked();
    assert!(rows(f.store_dir()).0 > 1, "the first change wrote the tree's rows");
    f.mount_again();
    for q in [&p, &p2] {
        let md = std::fs::metadata(q).unwrap();
        assert!(md.len() == 64 << 20 && md.blocks() < 2048, "{} from the rows: {} blocks", q.display(), md.blocks());
    }
    assert_eq!(std::fs::metadata(&p2).unwrap().mode() & 0o777, 0o600);
    f.unmount_checked();
    fsck_clean(f.store_dir());
    m.unmount_checked();
}

/// D60: a fork's mounts serve its tree from the commit's objects and write
/// no per-file rows until its first change. Counted with fsck: the fork's
/// tables hold the root's record only after a first mount that read every
/// file and stat, after a second mount, after a fork of it (mounted too)
/// and after the origin's gc of everything; then a write to a base file
/// and a chmod, fsynced, survive kill -9 (the first change writes the
/// tree); a commit diffs from the base to exactly those two; a restore to
/// the base gives the commit's tree; fsck --full clean on every store.
#[test]
fn mounts_of_a_fork_write_no_rows_until_its_first_change() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok(
        "for d in $(seq 0 3); do mkdir -p d$d/sub; for i in $(seq 0 49); do echo \"file $d $i\" > d$d/f$i; done; done \
         && echo deep > d0/sub/x && ln -s ../d1/f1 d2/link && setfattr -n user.k -v val d3/f3 && head -c 200000 /dev/urandom > d1/big",
    );
    let base = json(&["commit", mp(&m), "-m", "base"])["id"].as_str().unwrap().to_string();
    let want_tree = tree(m.path());
    let want_stats = stats(m.path());
    let mut f = TestMount::new(Backend::Store);
    f.unmount_checked();
    std::fs::remove_dir_all(f.store_dir()).unwrap();
    json(&["fork", mp(&m), "--new-store", s(f.store_dir()), "--no-mount"]);
    assert_eq!(rows(f.store_dir()), (1, 0, 0), "a fork writes the root's record only");

    // First mount: every file read, every stat as the commit's.
    f.mount_again();
    assert_eq!(tree(f.path()), want_tree);
    assert_eq!(stats(f.path()), want_stats);
    let o = std::process::Command::new("getfattr").args(["--only-values", "-n", "user.k"]).arg(f.p("d3/f3")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "val");
    f.unmount_checked();
    assert_eq!(rows(f.store_dir()), (1, 0, 0), "the first mount and the reads wrote no rows");
    fsck_clean(f.store_dir());
    // The same tree when the mount reads it after a full check (`--check`:
    // every table read first, the tree read afterwards, not beside the
    // check as above: D70), with the mount's other arguments.
    {
        let chk = DaemonMount::new("fork-check");
        let mut args: Vec<String> = ["mount", s(&chk.mp), "--store", s(f.store_dir()), "--daemon", "--check"].map(String::from).to_vec();
        args.extend(env_mount_args());
        let o = ringfs(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(o.status.success(), "{:?}", out_str(&o));
        assert_eq!(tree(&chk.mp), want_tree);
        assert_eq!(stats(&chk.mp), want_stats);
        let o = ringfs(&["umount", s(&chk.mp)]);
        assert!(o.status.success(), "{:?}", out_str(&o));
    }
    assert_eq!(rows(f.store_dir()), (1, 0, 0), "the checked mount wrote no rows");
    // Second mount (its working copies are there now).
    f.mount_again();
    assert_eq!(tree(f.path()), want_tree);
    // A fork of the mounted, never-changed fork.
    let mut g = TestMount::new(Backend::Store);
    g.unmount_checked();
    std::fs::remove_dir_all(g.store_dir()).unwrap();
    json(&["fork", mp(&f), "--new-store", s(g.store_dir()), "--no-mount"]);
    g.mount_again();
    assert_eq!(tree(g.path()), want_tree);
    g.unmount_checked();
    fsck_clean(g.store_dir());
    // The origin drops everything and collects: the fork still reads whole.
    m.sh_ok("rm -rf d0 d1 d2 d3");
    json(&["commit", mp(&m), "-m", "all gone"]);
    assert!(ringfs(&["gc", mp(&m)]).status.success());
    f.remount();
    assert_eq!(tree(f.path()), want_tree);
    f.unmount_checked();
    assert_eq!(rows(f.store_dir()), (1, 0, 0), "remounts wrote no rows");

    // The first change (fsynced), then kill -9: it survives.
    f.mount_again();
    f.sh_ok("echo changed > d0/f1 && sync d0/f1 && chmod 600 d1/f2 && sync d1/f2");
    f.kill_daemon();
    f.mount_again();
    assert_eq!(std::fs::read_to_string(f.p("d0/f1")).unwrap(), "changed\n");
    assert_eq!(std::fs::metadata(f.p("d1/f2")).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(std::fs::read(f.p("d1/big")).unwrap(), want_tree["d1/big"]);
    let c = json(&["commit", mp(&f), "-m", "fork work"]);
    assert_eq!(c["parent"].as_str(), Some(base.as_str()), "{c}");
    let d = changes(&json(&["diff", mp(&f), &base, c["id"].as_str().unwrap()]));
    let want: BTreeMap<String, String> = [("d0/f1", "modified"), ("d1/f2", "modified")].into_iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    assert_eq!(d, want);
    let o = ringfs(&["restore", mp(&f), &base]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    assert_eq!(tree(f.path()), want_tree);
    f.unmount_checked();
    assert!(rows(f.store_dir()).0 > 200, "the first change wrote the tree's rows");
    fsck_clean(f.store_dir());
    m.unmount_checked();
    fsck_clean(m.store_dir());
}

/// D64: the read-only commands a user runs on a never-changed fork — `diff`
/// against live, `branch --list` (text and JSON), `log`, `status` — write none of its
/// tree's rows (D60: a read-only session writes nothing); `branch --list`
/// used to take a write transaction, which wrote the whole tree. A branch
/// created afterwards is listed, and fsck --full is clean.
#[test]
fn read_only_commands_on_a_fork_write_no_rows() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir -p d && for i in $(seq 0 19); do echo \"file $i\" > d/f$i; done");
    let base = json(&["commit", mp(&m), "-m", "base"])["id"].as_str().unwrap().to_string();
    let mut f = TestMount::new(Backend::Store);
    f.unmount_checked();
    std::fs::remove_dir_all(f.store_dir()).unwrap();
    json(&["fork", mp(&m), "--new-store", s(f.store_dir()), "--no-mount"]);
    f.mount_again();
    // Diffs against live compare with the base commit the tree still is.
    assert_eq!(json(&["diff", mp(&f)])["changes"].as_array().unwrap().len(), 0);
    assert_eq!(json(&["diff", mp(&f), "live", &base])["changes"].as_array().unwrap().len(), 0);
    let o = ringfs(&["branch", mp(&f), "--list"]);
    let (out, err) = out_str(&o);
    assert!(o.status.success() && out.contains("main"), "branch --list: {out} {err}");
    let v = json(&["branch", mp(&f), "--list"]);
    assert!(v.to_string().contains("\"main\""), "branch --list --json: {v}");
    json(&["log", mp(&f)]);
    json(&["status", mp(&f)]);
    f.unmount_checked();
    assert_eq!(rows(f.store_dir()), (1, 0, 0), "diff, branch --list, log and status wrote rows");
    f.mount_again();
    let o = ringfs(&["branch", mp(&f), "exp"]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    let v = json(&["branch", mp(&f), "--list"]);
    assert!(v.to_string().contains("\"exp\""), "the new branch listed: {v}");
    assert_eq!(std::fs::read_to_string(f.p("d/f7")).unwrap(), "file 7\n");
    f.unmount_checked();
    fsck_clean(f.store_dir());
    m.unmount_checked();
}

/// D71 (a new user's finding): objects are checked against their ids when
/// read. One flipped byte in a directory object of a never-mounted fork's
/// own copy of its pack: the fork's mount is refused naming the object as
/// damaged and `ringfs fsck` (it used to serve the damaged entry: a changed
/// mode, a shifted size); the same damage in the origin's pack: `fork` and
/// `mount --at` refuse instead of copying it; the origin's mounted live
/// tree (its own rows) still reads.
#[test]
fn damaged_objects_are_refused_not_served() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir -p sub && echo one > a.txt && echo two > sub/b.txt && echo three > other.txt");
    let base = json(&["commit", mp(&m), "-m", "base"])["id"].as_str().unwrap().to_string();
    m.unmount_checked();
    let mut f = TestMount::new(Backend::Store);
    f.unmount_checked();
    std::fs::remove_dir_all(f.store_dir()).unwrap();
    json(&["fork", "--store", s(m.store_dir()), "--new-store", s(f.store_dir()), "--no-mount"]);
    // The first directory object's bytes, in a pack of the given store
    // (the fork's: its link broken first, so the origin keeps its bytes).
    let flip = |store: &Path, own: bool| {
        for e in std::fs::read_dir(store.join("packs")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().and_then(|x| x.to_str()) != Some("pack") {
                continue;
            }
            let mut b = std::fs::read(&p).unwrap();
            let Some(at) = b.windows(6).position(|w| &w[..4] == b"RFSO" && w[5] == 2) else { continue };
            b[at + 12] ^= 0x20;
            if own {
                std::fs::remove_file(&p).unwrap();
            }
            std::fs::write(&p, &b).unwrap();
            return;
        }
        panic!("no directory object in {}", store.display());
    };
    flip(f.store_dir(), true);
    let files = |d: &Path| -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_file()).map(|p| (p.display().to_string(), std::fs::read(&p).unwrap())).collect();
        v.sort();
        v
    };
    let before = files(f.store_dir());
    let o = ringfs(&[&["mount", s(&f.path()), "--store", s(f.store_dir()), "--daemon"][..], &env_mount_args().iter().map(String::as_str).collect::<Vec<_>>()].concat());
    let (_, err) = out_str(&o);
    if o.status.success() {
        let _ = ringfs(&["umount", s(&f.path())]);
        panic!("a fork with a damaged directory object was mounted");
    }
    assert!(err.contains("is damaged") && err.contains("ringfs fsck"), "{err}");
    // Refused by the check, before the read-write open (D72): the
    // database and the lock file are as they were.
    assert!(before == files(f.store_dir()), "the refused mount changed the fork's store.redb or ringfs.lock");
    // The origin is untouched by that; damage in its own pack now.
    m.mount_again();
    assert_eq!(std::fs::read_to_string(m.p("sub/b.txt")).unwrap(), "two\n");
    m.unmount_checked();
    flip(m.store_dir(), false);
    let g = tempfile::tempdir().unwrap();
    let o = ringfs(&["fork", "--store", s(m.store_dir()), "--new-store", s(&g.path().join("g")), "--no-mount"]);
    let (_, err) = out_str(&o);
    assert!(!o.status.success() && err.contains("is damaged"), "{err}");
    assert!(!g.path().join("g").exists(), "nothing left of the refused fork");
    let at = DaemonMount::new("damaged-at");
    let o = ringfs(&["mount", s(&at.mp), "--store", s(m.store_dir()), "--at", &base, "--read-only", "--daemon"]);
    let (_, err) = out_str(&o);
    assert!(!o.status.success() && err.contains("is damaged"), "{err}");
    // The live tree is the origin's own rows: it still mounts and reads.
    m.mount_again();
    assert_eq!(std::fs::read_to_string(m.p("a.txt")).unwrap(), "one\n");
}
