//! Local-only paths (`--ignore GLOB`, RINGFS_IGNORE, `--local-dir`):
//! gitignore semantics, nothing local-only enters the store or journal
//! (`npm install express` into an ignored node_modules), confinement of
//! the daemon to its backing directories (planted symlinks), renames across
//! the boundary (files and populated directories, both ways, atomic), and
//! hard links across it (EXDEV).

mod common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use redb::{ReadableDatabase, ReadableTable};

fn status(mp: &Path) -> serde_json::Value {
    let o = run_timeout(Command::new(RINGFS).args(["status", "--json"]).arg(mp), Duration::from_secs(20));
    assert!(o.status.success(), "ringfs status: {}", out_str(&o).1);
    serde_json::from_slice(&o.stdout).expect("status json")
}

/// (chunks, chunk bytes, journal position) of a mount.
fn store_counters(m: &TestMount) -> (u64, u64, u64) {
    let s = status(m.path());
    let st = &s["store_stats"];
    (st["chunks"].as_u64().unwrap(), st["chunk_bytes"].as_u64().unwrap(), st["journal_position"].as_u64().unwrap())
}

/// Waits until nothing is dirty (hashes done, group commit written).
fn settle(m: &TestMount) {
    for _ in 0..200 {
        if status(m.path())["store_stats"]["dirty"].as_u64() == Some(0) {
            // One more interval so a commit that drained last is on disk.
            std::thread::sleep(Duration::from_millis(150));
            if status(m.path())["store_stats"]["dirty"].as_u64() == Some(0) {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("store still dirty after 10 s");
}

fn local_dir(m: &TestMount) -> PathBuf {
    PathBuf::from(status(m.path())["local_only"]["dir"].as_str().unwrap())
}

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).ino()
}

/// Is the regular file at `rel` backed by the local-only directory?
fn backed_locally(m: &TestMount, rel: &str) -> bool {
    local_dir(m).join(ino(&m.p(rel)).to_string()).exists()
}

fn mount(backend: Backend, args: &[&str], name: &str) -> TestMount {
    // The daemon's own local-only side (native roots: tests/native_roots.rs).
    TestMount::builder(backend).args(args.iter().copied()).args(["--native-roots", "off", "--commit-interval-ms", "100"]).name(name).mount()
}

#[test]
fn gitignore_semantics() {
    if raw_mode() {
        return;
    }
    let m = mount(
        Backend::Store,
        &["--ignore", "node_modules", "--ignore", "/dist", "--ignore", "**/target", "--ignore", "*.log", "--ignore", "!keep.log"],
        "ignore-semantics",
    );
    m.sh_ok(
        "set -e\n\
         mkdir -p a/b/node_modules/x node_modules dist sub/dist p/q/target target src\n\
         for f in a/b/node_modules/x/f node_modules/f dist/f sub/dist/f p/q/target/f target/f src/f foo.log src/bar.log keep.log src/keep.log src/main.rs; do echo $f > $f; done",
    );
    for (rel, local) in [
        ("a/b/node_modules/x/f", true),
        ("node_modules/f", true),
        ("dist/f", true),
        ("sub/dist/f", false),
        ("p/q/target/f", true),
        ("target/f", true),
        ("src/f", false),
        ("foo.log", true),
        ("src/bar.log", true),
        ("keep.log", false),
        ("src/keep.log", false),
        ("src/main.rs", false),
    ] {
        assert_eq!(backed_locally(&m, rel), local, "{rel} local-only?");
        assert_eq!(std::fs::read_to_string(m.p(rel)).unwrap(), format!("{rel}\n"));
    }
    let s = status(m.path());
    assert_eq!(s["local_only"]["patterns"].as_array().unwrap().len(), 5);
}

#[test]
fn invalid_pattern_is_a_clear_startup_error() {
    if raw_mode() {
        return;
    }
    let t = tempfile::Builder::new().prefix("ringfs-ignore-").tempdir().unwrap();
    let mp = t.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let o = run_timeout(Command::new(RINGFS).args(["mount", "--memory", "--ignore", "ok", "--ignore", "bad[z"]).arg(&mp), Duration::from_secs(20));
    let (_, se) = out_str(&o);
    assert!(!o.status.success());
    assert!(se.contains("invalid ignore pattern `bad[z`"), "{se}");
    let o = run_timeout(Command::new(RINGFS).args(["mount", "--memory"]).arg(&mp).env("RINGFS_IGNORE", "node_modules\nx[,y"), Duration::from_secs(20));
    let (_, se) = out_str(&o);
    assert!(!o.status.success());
    assert!(se.contains("invalid ignore pattern `x[`"), "{se}");
    assert!(!is_mounted(&mp));
}

#[test]
fn ringfs_ignore_environment() {
    if raw_mode() {
        return;
    }
    let t = tempfile::Builder::new().prefix("ringfs-ignore-env-").tempdir().unwrap();
    let mp = t.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let o = run_timeout(
        Command::new(RINGFS)
            .args(["mount", "--memory", "--daemon", "--ignore", "*.tmp"])
            .arg(&mp)
            .env("RINGFS_IGNORE", "node_modules,/dist\nbuild/\n"),
        Duration::from_secs(20),
    );
    assert!(o.status.success(), "{}", out_str(&o).1);
    let s = status(&mp);
    let _ = run_timeout(Command::new(RINGFS).arg("umount").arg(&mp), Duration::from_secs(60));
    let pats: Vec<&str> = s["local_only"]["patterns"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(pats, ["*.tmp", "node_modules", "/dist", "build/"]);
    assert!(!is_mounted(&mp));
}

/// Content of every synced file in the store (read after unmount).
fn store_manifest_inos(store: &Path) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    let db = redb::Database::open(store.join("store.redb")).expect("open store.redb");
    let rtx = db.begin_read().unwrap();
    let keys = |t: redb::ReadOnlyTable<u64, &[u8]>| t.iter().unwrap().map(|r| r.unwrap().0.value()).collect::<Vec<u64>>();
    (
        keys(rtx.open_table(fs_core::store::INODES).unwrap()),
        keys(rtx.open_table(fs_core::store::LIVE_ROOTS).unwrap()),
        keys(rtx.open_table(fs_core::store::LOCAL_INODES).unwrap()),
    )
}

#[test]
fn rename_across_the_boundary() {
    if raw_mode() {
        return;
    }
    let mut m = mount(Backend::Store, &["--ignore", "node_modules"], "cross-rename");
    m.sh_ok(
        "set -e\n\
         mkdir node_modules syn\n\
         head -c 300000 /dev/urandom > syn/file && cp syn/file $HOME/file.ref\n\
         mkdir -p pkg/lib/deep && echo a > pkg/a && head -c 200000 /dev/urandom > pkg/lib/deep/b && ln -s a pkg/link\n\
         setfattr -n user.k -v v pkg/a 2>/dev/null || true\n\
         cp -a pkg $HOME/pkg.ref",
    );
    settle(&m);
    let (c0, b0, j0) = store_counters(&m);
    assert!(c0 > 0 && b0 >= 500000, "synced content stored: {c0} {b0}");
    let f_ino = ino(&m.p("syn/file"));
    // A file and a populated directory into node_modules: local-only.
    m.sh_ok("mv syn/file node_modules/file && mv pkg node_modules/pkg");
    assert!(backed_locally(&m, "node_modules/file") && backed_locally(&m, "node_modules/pkg/lib/deep/b"));
    assert_eq!(ino(&m.p("node_modules/file")), f_ino, "same inode after the move");
    m.sh_ok("cmp node_modules/file $HOME/file.ref && diff -r node_modules/pkg $HOME/pkg.ref && test \"$(readlink node_modules/pkg/link)\" = a");
    settle(&m);
    let (c1, b1, j1) = store_counters(&m);
    assert!(c1 < c0 && b1 < 1000, "content left the store: {c0}/{b0} -> {c1}/{b1}");
    assert!(j1 > j0, "the journal records the disappearance");
    // Local-only survives a remount (metadata in local tables, bytes in the local dir).
    m.remount();
    m.sh_ok("cmp node_modules/file $HOME/file.ref && diff -r node_modules/pkg $HOME/pkg.ref");
    assert!(backed_locally(&m, "node_modules/file"));
    // Back to the synced side: content re-enters the store.
    m.sh_ok("mv node_modules/file syn/file && mv node_modules/pkg pkg2");
    assert!(!backed_locally(&m, "syn/file") && !backed_locally(&m, "pkg2/lib/deep/b"));
    m.sh_ok("cmp syn/file $HOME/file.ref && diff -r pkg2 $HOME/pkg.ref");
    settle(&m);
    let (c2, b2, j2) = store_counters(&m);
    assert_eq!((c2, b2), (c0, b0), "the same content is stored again");
    assert!(j2 > j1);
    // RENAME_EXCHANGE across the boundary.
    m.sh_ok("echo s > syn/x && mkdir -p node_modules && echo l > node_modules/x");
    let o = m.sh("python3 -c \"import ctypes,os; l=ctypes.CDLL(None,use_errno=True); r=l.renameat2(-100,b'syn/x',-100,b'node_modules/x',2); exit(0 if r==0 else ctypes.get_errno())\"");
    if o.status.success() {
        assert_eq!(std::fs::read_to_string(m.p("syn/x")).unwrap(), "l\n");
        assert!(!backed_locally(&m, "syn/x") && backed_locally(&m, "node_modules/x"));
    }
    // Hard links across the boundary: EXDEV (documented); within a side: fine.
    let o = m.sh("ln syn/file node_modules/hl");
    assert!(!o.status.success() && out_str(&o).1.contains("Invalid cross-device link"), "{:?}", out_str(&o));
    m.sh_ok("ln syn/file syn/hl && ln node_modules/x node_modules/hl2");
    // Atomic as other processes see it: every successful read is whole.
    m.sh_ok(
        "head -c 100000 /dev/urandom > syn/atom && want=$(md5sum < syn/atom)\n\
         ( for i in $(seq 1 100); do mv syn/atom node_modules/atom; mv node_modules/atom syn/atom; done ) & pid=$!\n\
         bad=0; while kill -0 $pid 2>/dev/null; do for p in syn/atom node_modules/atom; do\n\
           h=$(md5sum < $p 2>/dev/null) || continue; [ \"$h\" = \"$want\" ] || bad=1; done; done\n\
         wait $pid; test $bad = 0 && test \"$(md5sum < syn/atom)\" = \"$want\"",
    );
    let synced_ino = ino(&m.p("syn/file"));
    let local_ino = ino(&m.p("node_modules/x"));
    m.unmount_checked();
    let (inodes, manifests, local_inodes) = store_manifest_inos(m.store_dir());
    assert!(inodes.contains(&synced_ino) && manifests.contains(&synced_ino));
    assert!(!inodes.contains(&local_ino) && !manifests.contains(&local_ino) && local_inodes.contains(&local_ino));
    let o = run_timeout(Command::new(RINGFS).arg("fsck").arg("--store").arg(m.store_dir()), Duration::from_secs(120));
    assert!(o.status.success(), "fsck: {}", out_str(&o).0);
    m.mount_again();
}

#[test]
fn npm_install_express_leaves_the_store_unchanged() {
    if raw_mode() {
        return;
    }
    let m = mount(Backend::Store, &["--ignore", "node_modules"], "npm-express");
    let cache = m.host_tmp().join("npm-cache");
    m.sh_ok("mkdir app && cd app && npm init -y >/dev/null && mkdir node_modules && cat package.json >/dev/null");
    settle(&m);
    let before = store_counters(&m);
    let o = m.sh_timeout(
        &format!(
            "cd app && npm install --cache '{}' --no-save --no-package-lock --no-audit --no-fund --no-update-notifier --loglevel=error express@4\n\
             node -e 'const e = require(\"express\"); if (typeof e !== \"function\") process.exit(1); console.log(\"ok\")'\n\
             find node_modules -type f | wc -l",
            cache.display()
        ),
        Duration::from_secs(600),
    );
    let out = m.check_ok("npm install express", &o);
    assert!(out.contains("ok"), "{out}");
    let files: u64 = out.lines().last().unwrap().trim().parse().unwrap();
    assert!(files > 100, "express has many files: {files}");
    settle(&m);
    let after = store_counters(&m);
    assert_eq!(before, after, "(chunks, chunk bytes, journal position) before and after npm install");
    assert!(status(m.path())["local_only"]["inodes"].as_u64().unwrap() > 100);
}

/// Symlinks planted in the backing directories never lead the daemon out.
#[test]
fn planted_symlinks_stay_confined() {
    if raw_mode() {
        return;
    }
    let m = mount(Backend::Store, &["--ignore", "node_modules"], "confine");
    let outside = m.home().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let secret = outside.join("secret");
    let passwd_before = std::fs::read("/etc/passwd").unwrap();
    let local = local_dir(&m);
    let wc = m.store_dir().join("wc");
    // Relative targets that climb out of the backing directory.
    let rel_up = {
        let depth = local.components().count() - 1;
        format!("{}{}", "../".repeat(depth), secret.strip_prefix("/").unwrap().display())
    };
    let targets: Vec<(String, bool)> = vec![
        (secret.display().to_string(), true),
        ("/etc/passwd".into(), false),
        (rel_up.clone(), true),
        ("..".into(), false),
        ("../store.redb".into(), false),
    ];
    for (i, (target, is_secret)) in targets.iter().enumerate() {
        for side in ["node_modules", "syn"] {
            std::fs::write(&secret, b"SECRET").unwrap();
            std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
            let rel = format!("{side}/f{i}");
            m.sh_ok(&format!("mkdir -p {side} && echo data > {rel}"));
            std::thread::sleep(Duration::from_millis(100)); // the release is asynchronous
            let dir = if side == "node_modules" { &local } else { &wc };
            let backing = dir.join(ino(&m.p(&rel)).to_string());
            assert!(backing.exists(), "{} backs {rel}", backing.display());
            std::fs::remove_file(&backing).unwrap();
            std::os::unix::fs::symlink(target, &backing).unwrap();
            // Read, write, chmod, truncate, unlink through the mount.
            let o = m.sh(&format!("cat {rel}"));
            assert!(!out_str(&o).0.contains("SECRET") && !out_str(&o).0.contains("root:"), "{rel} -> {target}: read leaked {:?}", out_str(&o).0);
            let _ = m.sh(&format!("echo evil >> {rel}; echo evil > {rel}; chmod 600 {rel}; truncate -s 0 {rel}; setfattr -n user.x -v y {rel} 2>/dev/null"));
            let _ = m.sh(&format!("rm -f {rel}"));
            if *is_secret {
                assert_eq!(std::fs::read(&secret).unwrap(), b"SECRET", "{rel} -> {target}: written outside");
                assert_eq!(std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777, 0o644, "{rel} -> {target}: chmod outside");
            }
            assert!(secret.exists(), "{rel} -> {target}: unlinked outside");
            assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd_before);
            assert!(m.store_dir().join("store.redb").exists());
            let _ = std::fs::remove_file(&backing);
        }
    }
    // A directory planted as a file's backing entry is not followed either.
    m.sh_ok("echo x > node_modules/g");
    std::thread::sleep(Duration::from_millis(100));
    let backing = local.join(ino(&m.p("node_modules/g")).to_string());
    std::fs::remove_file(&backing).unwrap();
    std::os::unix::fs::symlink(&outside, &backing).unwrap();
    let _ = m.sh("cat node_modules/g; echo y > node_modules/g; rm -f node_modules/g");
    assert_eq!(std::fs::read(&secret).unwrap(), b"SECRET");
    let _ = std::fs::remove_file(&backing);
}

/// `--ignore '/*'`: everything below the root is local-only; nothing is
/// chunked, and it all survives a remount.
#[test]
fn everything_local_only() {
    if raw_mode() {
        return;
    }
    let mut m = mount(Backend::Store, &["--ignore", "/*"], "all-local");
    m.sh_ok("mkdir -p d/e && head -c 2000000 /dev/urandom > d/e/big && cp d/e/big top && echo hi > d/small && ln -s small d/l");
    settle(&m);
    let (c, b, _) = store_counters(&m);
    assert_eq!((c, b), (0, 0), "no chunks stored");
    m.remount();
    m.sh_ok("cmp d/e/big top && test \"$(cat d/small)\" = hi && test \"$(readlink d/l)\" = small");
    assert!(backed_locally(&m, "top"));
}

fn settled_status(mp: &Path) -> serde_json::Value {
    for _ in 0..200 {
        if status(mp)["store_stats"]["dirty"].as_u64() == Some(0) {
            std::thread::sleep(Duration::from_millis(300));
            return status(mp);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("store still dirty");
}

/// Changing the patterns between mounts moves inodes to their new side.
#[test]
fn changed_patterns_apply_at_mount() {
    if raw_mode() || !env_mount_args().is_empty() {
        return;
    }
    let t = tempfile::Builder::new().prefix("ringfs-repattern-").tempdir().unwrap();
    let (mp, store) = (t.path().join("mnt"), t.path().join("store"));
    std::fs::create_dir(&mp).unwrap();
    let mount = |extra: &[&str]| {
        let o = run_timeout(
            Command::new(RINGFS).args(["mount", "--daemon", "--native-roots", "off", "--commit-interval-ms", "100", "--store"]).arg(&store).arg(&mp).args(extra),
            Duration::from_secs(30),
        );
        assert!(o.status.success(), "mount: {}", out_str(&o).1);
    };
    let umount = || {
        let o = run_timeout(Command::new(RINGFS).arg("umount").arg(&mp), Duration::from_secs(60));
        assert!(o.status.success(), "umount: {}", out_str(&o).1);
    };
    mount(&[]);
    std::fs::create_dir_all(mp.join("build/x")).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(mp.join("build/x/f"), &data).unwrap();
    let i = ino(&mp.join("build/x/f"));
    umount();
    mount(&["--ignore", "build"]);
    let ok = std::fs::read(mp.join("build/x/f")).ok() == Some(data.clone()) && store.join("local").join(i.to_string()).exists();
    let s = settled_status(&mp);
    umount();
    assert!(ok, "build/x/f moved to the local side, content intact");
    assert_eq!(s["store_stats"]["chunks"], 0, "its chunks left the store");
    mount(&[]);
    let back = std::fs::read(mp.join("build/x/f")).ok() == Some(data.clone()) && store.join("wc").join(i.to_string()).exists();
    let s = settled_status(&mp);
    umount();
    assert!(back, "and back to the synced side");
    assert!(s["store_stats"]["chunks"].as_u64().unwrap() > 0);
    let o = run_timeout(Command::new(RINGFS).arg("fsck").arg("--store").arg(&store), Duration::from_secs(60));
    assert!(o.status.success(), "fsck: {}", out_str(&o).0);
}

/// D71 (a new user's finding): a synced file with no working copy — a
/// fork's base file, a file `restore` wrote back as a manifest — has its
/// bytes only in the store. Moved to the local-only side (patterns changed
/// at mount, a rename into an ignored directory), it used to become zeros
/// or empty there, and the next commit recorded that. Now its bytes are
/// written out first: contents equal after each move, back on the synced
/// side, and in a commit (no change against the base).
#[test]
fn files_without_a_working_copy_keep_their_bytes_across_the_boundary() {
    if raw_mode() {
        return;
    }
    let mut extra = env_mount_args();
    extra.extend(["--native-roots", "off", "--commit-interval-ms", "100"].map(String::from));
    let mount = |d: &DaemonMount, args: &[&str]| {
        let o = run_timeout(Command::new(RINGFS).args(["mount", "--daemon", "--store"]).arg(&d.store).arg(&d.mp).args(&extra).args(args), Duration::from_secs(30));
        assert!(o.status.success(), "mount: {}", out_str(&o).1);
    };
    let umount = |d: &DaemonMount| {
        let o = run_timeout(Command::new(RINGFS).arg("umount").arg(&d.mp), Duration::from_secs(60));
        assert!(o.status.success(), "umount: {}", out_str(&o).1);
    };
    let run = |args: &[&str]| {
        let o = run_timeout(Command::new(RINGFS).args(args), Duration::from_secs(60));
        assert!(o.status.success(), "ringfs {args:?}: {}", out_str(&o).1);
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap_or_default()
    };
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let files: Vec<(&str, Vec<u8>)> = vec![("d/e1/a.txt", b"hello\n".to_vec()), ("x.bin", big.clone()), ("keep.txt", b"kept\n".to_vec()), ("r.txt", b"restored\n".to_vec())];
    let o = DaemonMount::new("nowc-origin");
    mount(&o, &["--ignore", "ign"]);
    std::fs::create_dir_all(o.mp.join("d/e1")).unwrap();
    for (p, b) in &files {
        std::fs::write(o.mp.join(p), b).unwrap();
    }
    let base = run(&["commit", o.mp.to_str().unwrap(), "-m", "base", "--json"])["id"].as_str().unwrap().to_string();
    // A rename into an ignored directory of a file `restore` wrote back.
    std::fs::write(o.mp.join("r.txt"), b"changed\n").unwrap();
    run(&["restore", o.mp.to_str().unwrap(), &base]);
    std::fs::create_dir(o.mp.join("ign")).unwrap();
    std::fs::rename(o.mp.join("r.txt"), o.mp.join("ign/r.txt")).unwrap();
    let moved = std::fs::read(o.mp.join("ign/r.txt")).unwrap();
    umount(&o);
    assert_eq!(moved, b"restored\n", "a restored file renamed into an ignored directory");

    // A fork's base files moved by patterns at its first mount, and back.
    let f = DaemonMount::new("nowc-fork");
    run(&["fork", "--store", o.store.to_str().unwrap(), "--new-store", f.store.to_str().unwrap(), "--no-mount", "--json"]);
    mount(&f, &["--ignore", "e1", "--ignore", "*.bin"]);
    let local: Vec<Option<Vec<u8>>> = files[..3].iter().map(|(p, _)| std::fs::read(f.mp.join(p)).ok()).collect();
    let local_side = f.store.join("local").join(ino(&f.mp.join("x.bin")).to_string()).exists();
    umount(&f);
    for ((p, b), got) in files[..3].iter().zip(&local) {
        assert_eq!(got.as_deref(), Some(&b[..]), "{p} with the patterns");
    }
    assert!(local_side, "x.bin's bytes are on the local-only side");
    mount(&f, &[]);
    let back: Vec<Option<Vec<u8>>> = files[..3].iter().map(|(p, _)| std::fs::read(f.mp.join(p)).ok()).collect();
    let c = run(&["commit", f.mp.to_str().unwrap(), "-m", "back", "--json"]);
    let d = run(&["diff", f.mp.to_str().unwrap(), &base, c["id"].as_str().unwrap_or("live"), "--json"]);
    umount(&f);
    for ((p, b), got) in files[..3].iter().zip(&back) {
        assert_eq!(got.as_deref(), Some(&b[..]), "{p} back on the synced side");
    }
    let changed: Vec<&str> = d["changes"].as_array().map(|a| a.iter().filter_map(|c| c["path"].as_str()).collect()).unwrap_or_default();
    assert!(changed.is_empty(), "the fork's commit equals its base: {d}");
    for s in [&o.store, &f.store] {
        let o = run_timeout(Command::new(RINGFS).arg("fsck").arg("--store").arg(s), Duration::from_secs(60));
        assert!(o.status.success(), "fsck: {}", out_str(&o).0);
    }
}
