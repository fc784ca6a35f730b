//! `ringfs restore` through real mounts (issue 13): the live tree becomes a
//! commit's byte for byte (modes, owners, mtimes, xattrs, symlinks, empty
//! and multi-chunk files), files and directories made after the commit go,
//! `--path` restores subsets, an open descriptor keeps the bytes it had,
//! nothing the kernel cached is stale afterwards (both transports,
//! passthrough on and off), local-only paths are left alone, a commit right
//! after finds nothing changed, fsck is clean, and kill -9 during a restore
//! leaves the tree before or after it (never a mix), a store that fsck
//! finds clean, and a second restore finishes.

mod common;

use common::*;
use serde_json::Value;

fn n(v: &Value, a: &str, b: &str) -> u64 {
    v[a][b].as_u64().unwrap_or_else(|| panic!("{a}.{b} in {v}"))
}

/// A listing of the tree below the mountpoint through the kernel, one line
/// per path: kind and mode, owner, mtime in ns, size and SHA-256 of files,
/// symlink targets, xattrs. Paths given after the root are left out.
const DUMP: &str = r#"
import os, sys, hashlib, stat
def line(p, rel):
    st = os.lstat(p)
    s = f"{rel} mode={st.st_mode:o} uid={st.st_uid} gid={st.st_gid} mtime={st.st_mtime_ns}"
    if stat.S_ISREG(st.st_mode):
        with open(p, "rb") as f:
            s += f" size={st.st_size} sha={hashlib.sha256(f.read()).hexdigest()}"
    elif stat.S_ISLNK(st.st_mode):
        s += f" -> {os.readlink(p)}"
    for x in sorted(os.listxattr(p, follow_symlinks=False)):
        s += f" {x}={os.getxattr(p, x, follow_symlinks=False).hex()}"
    return s
root, skip = sys.argv[1], set(sys.argv[2:])
out = [line(root, ".")]
for dp, dns, fns in os.walk(root):
    dns[:] = [d for d in dns if os.path.relpath(os.path.join(dp, d), root) not in skip]
    for n in dns + fns:
        p = os.path.join(dp, n)
        rel = os.path.relpath(p, root)
        if rel not in skip:
            out.append(line(p, rel))
print("\n".join(sorted(out)))
"#;

fn dump(m: &TestMount, skip: &[&str]) -> String {
    let script = m.host_tmp().join("dump.py");
    std::fs::write(&script, DUMP).unwrap();
    m.sh_ok(&format!("python3 {} \"$M\" {}", script.display(), skip.join(" ")))
}

/// A tree with every kind of thing a commit keeps.
const TREE: &str = "mkdir -p src/lib docs deep/a/b && echo one > src/a.txt && echo two > src/lib/b.txt && printf readme > docs/README \
    && ln -s a.txt src/link && : > empty && head -c 3500000 /dev/urandom > big && echo deep > deep/a/b/f \
    && chmod 600 src/lib/b.txt && chmod 750 docs && setfattr -n user.tag -v blue src/a.txt && setfattr -n user.dir -v d deep \
    && mkfifo src/fifo && touch -d '2020-01-02 03:04:05.123456789' src/a.txt && touch -h -d '2019-05-05' src/link";

/// Changes of every kind after the commit: removed, modified, new files and
/// directories, attributes, symlink retargeted, kinds changed.
const CHANGES: &str = "rm docs/README && echo changed > src/a.txt && mkdir -p new/sub && echo n > new/sub/f && echo x >> big \
    && chmod 644 src/lib/b.txt && setfattr -x user.tag src/a.txt 2>/dev/null; setfattr -n user.tag -v red src/lib/b.txt \
    && ln -sfn elsewhere src/link && rm empty && mkdir empty && rm -r deep/a/b && echo file > deep/a/b && touch docs && echo 1 > top";

#[test]
fn restore_brings_back_the_commit_exactly_in_every_mode() {
    if raw_mode() {
        return; // about ringfs's own store
    }
    for args in [&[][..], &["--passthrough", "off"][..], &["--transport", "dev"][..]] {
        let mut m = TestMount::builder(Backend::Store).args(args.iter().copied()).name(format!("restore {args:?}")).mount();
        m.sh_ok(TREE);
        let before = dump(&m, &[]);
        let c1 = json(&["commit", mp(&m), "-m", "c1"]);
        let id = c1["id"].as_str().unwrap().to_string();
        m.sh_ok(CHANGES);
        // Everything cached in the kernel: entries, attributes, pages.
        let changed = dump(&m, &[]);
        assert_ne!(changed, before);
        m.sh_ok("ls -laR . > /dev/null && cat src/a.txt big new/sub/f > /dev/null && stat src/link empty deep/a/b > /dev/null");
        // An open descriptor on a file the restore rewrites, read after it.
        let out = m.sh_ok(&format!(
            "python3 -c 'import os, subprocess\nfd = os.open(\"src/a.txt\", os.O_RDONLY)\nr = subprocess.run([\"{RINGFS}\", \"restore\", \"{}\", \"{}\", \"--json\"], capture_output=True, text=True)\nprint(r.stdout)\nprint(\"FD:\" + os.pread(fd, 100, 0).decode().strip())\nprint(\"PATH:\" + open(\"src/a.txt\").read().strip())'",
            mp(&m),
            &id[..10]
        ));
        let (doc, rest) = out.split_once("FD:").unwrap_or_else(|| panic!("{out}"));
        let r: Value = serde_json::from_str(doc.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert!(rest.starts_with("changed\nPATH:one"), "the open descriptor keeps the old inode, the path is the commit's: {rest} ({args:?})");
        assert_eq!(r["commit"].as_str(), Some(id.as_str()), "{r}");
        // Added back: docs/README, empty (a file again), deep/a/b (a
        // directory again) and deep/a/b/f; removed: new, new/sub,
        // new/sub/f, top and the directory `empty`; rewritten: src/a.txt,
        // big, src/link and the kinds changed.
        assert!(n(&r, "paths", "removed") >= 4 && n(&r, "paths", "rewritten") >= 4 && n(&r, "paths", "changed") >= 1, "{r} ({args:?})");
        assert!(r["bytes"].as_u64().unwrap() >= 3_500_000, "{r}");
        for p in ["hash", "flush", "plan", "manifests", "apply", "durable", "invalidate"] {
            assert!(r["phases_ms"][p].is_number(), "phase {p} in {r}");
        }
        // Through the kernel right after: nothing stale, byte for byte.
        assert_eq!(dump(&m, &[]), before, "after restore ({args:?})");
        let d = json(&["diff", mp(&m)]);
        assert_eq!(d["changes"].as_array().unwrap().len(), 0, "{d}");
        assert_eq!(json(&["commit", mp(&m)])["created"], false, "restore then commit: nothing changed ({args:?})");
        // Restoring what is there changes nothing.
        let again = json(&["restore", mp(&m), "main"]);
        assert_eq!((n(&again, "paths", "added"), n(&again, "paths", "removed"), n(&again, "paths", "rewritten"), n(&again, "paths", "changed")), (0, 0, 0, 0), "{again}");
        // And survives a remount (the working copies are rebuilt from chunks).
        m.remount();
        assert_eq!(dump(&m, &[]), before, "after remount ({args:?})");
        m.unmount_checked();
        let o = ringfs(&["fsck", "--store", m.store_dir().to_str().unwrap()]);
        assert!(o.status.success(), "fsck after restore: {:?}", out_str(&o));
    }
}

#[test]
fn restore_paths_and_errors() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir -p a/sub b && echo 1 > a/x && echo 2 > a/sub/y && echo 3 > b/z && echo 4 > keep");
    let c1 = json(&["commit", mp(&m)]);
    let id = c1["id"].as_str().unwrap().to_string();
    m.sh_ok("echo one > a/x && rm a/sub/y && echo new > a/sub/new && echo three > b/z && echo four > keep && echo late > late");
    // A file, a directory (its new file goes, its deleted file comes back),
    // a path only in the live tree (removed), by absolute path too.
    let late = m.p("late");
    let r = json(&["restore", mp(&m), &id, "--path", "a/x", "--path", "a/sub/", "--path", late.to_str().unwrap()]);
    assert_eq!((n(&r, "paths", "added"), n(&r, "paths", "removed"), n(&r, "paths", "rewritten")), (1, 2, 1), "{r}");
    assert_eq!(m.sh_ok("cat a/x a/sub/y b/z keep; ls a/sub; test -e late || echo no-late"), "1\n2\nthree\nfour\ny\nno-late\n");
    // Errors: one line naming the problem and the fix; nothing restored.
    for (args, want) in [
        (vec!["--path", "nosuch"], "in neither the live tree nor commit"),
        (vec!["--path", "../etc"], "\"..\" is not allowed"),
        (vec!["--path", "/"], "not below the mountpoint"),
    ] {
        let mut a = vec!["restore", mp(&m), &id];
        a.extend(args);
        let o = ringfs(&a);
        let (out, err) = out_str(&o);
        assert!(!o.status.success() && err.contains(want) && err.trim().lines().count() == 1, "{a:?}: {out} {err}");
    }
    for (name, want) in [("nosuch", "known: main"), ("live", "restore needs a commit")] {
        let o = ringfs(&["restore", mp(&m), name]);
        let (_, err) = out_str(&o);
        assert!(!o.status.success() && err.contains(want) && err.trim().lines().count() == 1, "{err}");
        // `live` is no commit to restore, so it is not offered.
        assert!(!err.contains("live,"), "{err}");
    }
    assert_eq!(m.sh_ok("cat b/z keep"), "three\nfour\n");
    // Text output.
    let o = ringfs(&["restore", mp(&m), "main"]);
    let (out, err) = out_str(&o);
    assert!(o.status.success() && out.contains("restored commit") && out.contains("2 rewritten"), "{out} {err}");
    assert_eq!(m.sh_ok("cat b/z keep"), "3\n4\n");
    // A read-only mount takes no restore.
    m.sh_ok("echo five > keep");
    let o = ringfs(&["mount", mp(&m), "-o", "remount,ro"]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    let o = ringfs(&["restore", mp(&m), "main"]);
    let (_, err) = out_str(&o);
    assert!(!o.status.success() && err.contains("mounted read-only") && err.contains("remount,rw"), "{err}");
    assert_eq!(m.sh_ok("cat keep"), "five\n");
    let o = ringfs(&["mount", mp(&m), "-o", "remount,rw"]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    m.unmount_checked();
}

#[test]
fn restore_leaves_local_only_paths_alone() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::builder(Backend::Store).args(["--ignore", "node_modules", "--ignore", "*.log"]).name("restore-local").mount();
    m.sh_ok("mkdir -p node_modules/dep src && echo x > node_modules/dep/index.js && echo y > build.log && echo z > src/app.js");
    let c1 = json(&["commit", mp(&m)]);
    m.sh_ok("echo more > node_modules/dep/other.js && echo more >> build.log && mkdir gen && echo g > gen/out.js && echo log > gen/run.log && echo w > src/app.js");
    let r = json(&["restore", mp(&m), c1["id"].as_str().unwrap()]);
    // gen/out.js goes; gen stays for its local-only gen/run.log.
    let kept: Vec<&str> = r["kept"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(kept, ["gen/run.log"], "{r}");
    assert_eq!(m.sh_ok("cat src/app.js build.log node_modules/dep/index.js node_modules/dep/other.js gen/run.log; ls gen"), "z\ny\nmore\nx\nmore\nlog\nrun.log\n");
    // --path of a local-only path says so (not "check the spelling").
    for p in ["build.log", "node_modules/dep/index.js"] {
        let o = ringfs(&["restore", mp(&m), c1["id"].as_str().unwrap(), "--path", p]);
        let (out, err) = out_str(&o);
        assert!(!o.status.success() && err.contains("a local-only path"), "{p}: {out}{err}");
    }
    m.unmount_checked();
}

#[test]
fn kill_9_during_a_restore_then_restore_again() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir -p t && for i in $(seq 1 300); do echo file $i > t/f$i; done && head -c 600000 /dev/urandom > t/big");
    let want = dump(&m, &[]);
    let c1 = json(&["commit", mp(&m)]);
    let id = c1["id"].as_str().unwrap().to_string();
    let mut outcomes = Vec::new();
    for (round, delay_ms) in [(0, 20u64), (1, 60)] {
        m.sh_ok(&format!("rm -r t && mkdir -p t u && for i in $(seq 1 300); do echo other {round} $i > u/g$i; done && echo x > t/f1"));
        // Durable (a commit is), so a crash can only leave this or the restore's result.
        json(&["commit", mp(&m)]);
        let pre = dump(&m, &[]);
        let mut child = std::process::Command::new(RINGFS)
            .args(["restore", mp(&m), &id])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        m.kill_daemon();
        let _ = wait_timeout(&mut child, std::time::Duration::from_secs(30));
        let _ = child.kill();
        let _ = child.wait();
        let o = ringfs(&["fsck", "--store", m.store_dir().to_str().unwrap()]);
        let (out, err) = out_str(&o);
        assert!(o.status.success(), "fsck after kill -9 during restore (round {round}): {out} {err}");
        m.mount_again();
        let mid = dump(&m, &[]);
        assert!(mid == pre || mid == want, "kill -9 during a restore left a mix of the two trees (round {round}):\n{mid}");
        outcomes.push(if mid == want { "after" } else { "before" });
        json(&["restore", mp(&m), &id]);
        assert_eq!(dump(&m, &[]), want, "restore again after kill -9 (round {round})");
    }
    eprintln!("kill -9 during restore left the tree: {outcomes:?}");
    m.unmount_checked();
    let o = ringfs(&["fsck", "--store", m.store_dir().to_str().unwrap()]);
    assert!(o.status.success(), "{:?}", out_str(&o));
}

/// The kernel keeps directory listings (FOPEN_CACHE_DIR, D42); a restore
/// changes directories behind its back and must leave no listing stale:
/// directories listed (and so cached) before the restore list the commit's
/// entries after it.
#[test]
fn restore_refreshes_cached_directory_listings() {
    if raw_mode() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir -p d/sub && echo 1 > d/a && echo 2 > d/sub/b");
    let id = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    m.sh_ok("rm d/a && echo 3 > d/c && mkdir d/new && rm d/sub/b && echo 4 > d/sub/e");
    // Listed twice: the second listing comes from the kernel's cache.
    assert_eq!(m.sh_ok("ls d; ls d; ls d/sub; ls d/sub"), "c\nnew\nsub\nc\nnew\nsub\ne\ne\n");
    json(&["restore", mp(&m), &id]);
    assert_eq!(m.sh_ok("ls d; ls d/sub; ls -a d | wc -l"), "a\nsub\nb\n4\n");
    // A path restore of one directory too.
    m.sh_ok("echo 5 > d/sub/late");
    assert_eq!(m.sh_ok("ls d/sub; ls d/sub"), "b\nlate\nb\nlate\n");
    json(&["restore", mp(&m), &id, "--path", "d/sub"]);
    assert_eq!(m.sh_ok("ls d/sub"), "b\n");
}

/// D64: a restored sparse file's `st_blocks` counts its chunks' pages, not
/// its size (as a fork's base file does, D60): `du` and `ls -s` of a 64 MiB
/// file with one written byte say a few KiB before any open, after a read
/// and after a remount, and fsck is clean.
#[test]
fn restored_sparse_file_keeps_its_holes_in_st_blocks() {
    use std::os::unix::fs::MetadataExt;
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("truncate -s 64M sparse && printf x | dd of=sparse bs=1 seek=33554432 conv=notrunc status=none && echo hi > other");
    let c1 = json(&["commit", mp(&m), "-m", "sparse"]);
    let id = c1["id"].as_str().unwrap().to_string();
    m.sh_ok("truncate -s 100 sparse && rm other");
    json(&["commit", mp(&m), "-m", "cut"]);
    json(&["restore", mp(&m), &id]);
    let p = m.path().join("sparse");
    let blocks = |when: &str| {
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!(md.len(), 64 << 20, "{when}");
        assert!(md.blocks() < 2048, "{when}: {} blocks for 1 written byte", md.blocks());
    };
    blocks("after the restore, before any open");
    let du = m.sh_ok("du -k sparse");
    assert!(du.split_whitespace().next().unwrap().parse::<u64>().unwrap() < 1024, "du after the restore: {du}");
    let b = std::fs::read(&p).unwrap();
    assert_eq!((b.len(), b[33554432]), (64 << 20, b'x'));
    blocks("after a read");
    assert!(std::fs::metadata(m.path().join("other")).unwrap().blocks() > 0, "a small restored file has its block");
    m.unmount_checked();
    m.mount_again();
    blocks("after a remount");
    m.unmount_checked();
    let o = ringfs(&["fsck", "--store", m.store_dir().to_str().unwrap(), "--full"]);
    assert!(o.status.success(), "{:?}", out_str(&o));
}

/// A restore writes its new files' manifests first (non-durable) and the
/// tree in one durable commit after; a crash between them with the
/// manifests made durable by another commit (RINGFS_FAILPOINT, test-only)
/// leaves manifests of inodes that do not exist: fsck notes them (exit 0,
/// not damage), the next mount drops them and serves the tree as it was
/// before the restore (a fresh user saw fsck call this damage).
#[test]
fn crash_after_a_restores_manifests_is_noted_by_fsck_and_dropped_by_mount() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::builder(Backend::Store).env("RINGFS_FAILPOINT", "restore-after-manifests").mount();
    m.sh_ok("mkdir -p t && for i in $(seq 1 50); do echo file $i > t/f$i; done");
    let id = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    m.sh_ok("rm -r t && echo y > other");
    json(&["commit", mp(&m)]);
    let pre = dump(&m, &[]);
    let o = ringfs(&["restore", mp(&m), &id]);
    assert!(!o.status.success(), "the daemon was to die at the failpoint: {:?}", out_str(&o));
    m.kill_daemon();
    let o = ringfs(&["fsck", "--store", m.store_dir().to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck after the crash: {out} {err}");
    assert!(out.contains("50 manifest(s) of inodes nothing holds") && out.contains("next mount drops them"), "{out}");
    m.mount_again();
    assert_eq!(dump(&m, &[]), pre, "the tree as before the restore");
    m.unmount_checked();
    let o = ringfs(&["fsck", "--store", m.store_dir().to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success() && !out.contains("manifest(s) of inodes"), "{out} {err}");
}

/// A directory another filesystem is mounted on (here a fork's workspace)
/// is left alone by a restore that would remove it — the kernel would
/// detach the mount with the entry — and listed as kept; once unmounted,
/// the same restore removes it.
#[test]
fn restore_keeps_a_directory_with_a_mount_on_it() {
    if raw_mode() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    m.sh_ok("echo a > a");
    let c0 = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    m.sh_ok("mkdir sub");
    let sub = m.p("sub");
    let fork_store = m.host_tmp().join("nested-fork");
    let nested = MountGuard(sub.clone());
    json(&["fork", mp(&m), "--to", sub.to_str().unwrap(), "--new-store", fork_store.to_str().unwrap()]);
    assert!(is_mounted(&sub));
    json(&["commit", mp(&m), "-m", "with a mount on sub"]);
    let r = json(&["restore", mp(&m), &c0]);
    let kept: Vec<&str> = r["kept"].as_array().unwrap().iter().filter_map(|k| k.as_str()).collect();
    assert_eq!(kept, ["sub"], "{r}");
    assert!(is_mounted(&sub), "the restore detached the mount on sub");
    assert_eq!(std::fs::read_to_string(sub.join("a")).unwrap(), "a\n", "the fork's tree still served");
    let o = run_timeout(std::process::Command::new(RINGFS).arg("umount").arg(&sub), std::time::Duration::from_secs(30));
    assert!(o.status.success(), "{:?}", out_str(&o));
    drop(nested);
    let r = json(&["restore", mp(&m), &c0]);
    assert_eq!(r["paths"]["removed"].as_u64(), Some(1), "{r}");
    assert!(!m.p("sub").exists());

    // A directory in both trees with a bind mount on it: nothing below it
    // changes (the daemon's entries under the mount stay as they were).
    m.sh_ok("mkdir d && echo one > d/f1");
    let c1 = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    m.sh_ok("rm d/f1 && echo two > d/f2");
    json(&["commit", mp(&m)]);
    let src = m.host_tmp().join("bind-src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("b"), "b").unwrap();
    let d = m.p("d");
    let bind = MountGuard(d.clone());
    let o = std::process::Command::new("mount").arg("--bind").arg(&src).arg(&d).output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let r = json(&["restore", mp(&m), &c1]);
    let kept: Vec<&str> = r["kept"].as_array().unwrap().iter().filter_map(|k| k.as_str()).collect();
    assert_eq!(kept, ["d"], "{r}");
    assert!(is_mounted(&d));
    drop(bind);
    assert_eq!(m.sh_ok("ls d"), "f2\n", "the restore changed what is under the mount");
}
