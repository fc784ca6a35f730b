//! Native roots (`--native-roots auto`, the default): eligible local-only
//! directories bind-mounted from the host disk over their place in the
//! mount. Made by mkdir (npm creating node_modules in a fresh workspace) and
//! found at mount time (also directories an earlier mount kept the flat
//! way); EBUSY for rmdir/rename of the root itself; `ringfs unroot`;
//! teardown at unmount, SIGTERM and after kill -9 (the next mount or
//! `ringfs umount`) leaves nothing in /proc/self/mountinfo; a directory
//! swapped for a symlink never gets a bind mount placed outside.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn status(mp: &Path) -> serde_json::Value {
    let o = run_timeout(Command::new(RINGFS).args(["status", "--json"]).arg(mp), Duration::from_secs(20));
    assert!(o.status.success(), "ringfs status: {}", out_str(&o).1);
    serde_json::from_slice(&o.stdout).expect("status json")
}

fn mount(backend: Backend, args: &[&str], name: &str) -> TestMount {
    TestMount::builder(backend).args(args.iter().copied()).name(name).mount()
}

fn unroot(p: &Path) -> std::process::Output {
    run_timeout(Command::new(RINGFS).arg("unroot").arg(p), Duration::from_secs(20))
}

/// Every regular file below `dir`: relative path → BLAKE3 of its bytes.
fn tree_hashes(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                let bytes = std::fs::read(e.path()).unwrap_or_else(|err| panic!("{}: {err}", e.path().display()));
                out.insert(e.path().strip_prefix(dir).unwrap().to_path_buf(), blake3::hash(&bytes).to_hex().to_string());
            }
        }
    }
    out
}

fn backing_of(mp: &Path, rel: &str) -> PathBuf {
    let s = status(mp);
    let want = mp.join(rel);
    let r = s["native_roots"]["roots"].as_array().unwrap().iter().find(|r| r["path"].as_str() == Some(want.to_str().unwrap()));
    PathBuf::from(r.unwrap_or_else(|| panic!("{rel} not listed in status: {s}"))["backing"].as_str().unwrap())
}

fn errno_of(r: std::io::Result<()>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

#[test]
fn mkdir_makes_a_native_root() {
    if !native_roots_possible() {
        return;
    }
    let mut m = mount(Backend::Store, &["--ignore", "node_modules"], "mkdir-root");
    let nm = make_native_root(&m, "node_modules");
    assert_eq!(std::fs::metadata(&nm).unwrap().ino(), std::fs::metadata(&nm).unwrap().ino());
    // The bind keeps the workspace's nosuid and nodev (a set-uid binary or a
    // device node in a native root is no way around them).
    let restrictions = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: statvfs(3) into a zeroed struct.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0, "statvfs {}", p.display());
        s.f_flag & (libc::ST_NOSUID | libc::ST_NODEV | libc::ST_NOEXEC)
    };
    assert_ne!(restrictions(m.path()) & libc::ST_NOSUID, 0, "the workspace is nosuid");
    assert_eq!(restrictions(&nm), restrictions(m.path()), "the native root's bind has the workspace's nosuid/nodev/noexec");
    m.sh_ok("mkdir -p node_modules/a/b && echo hello > node_modules/a/b/f && ln -s ../x node_modules/l");
    let backing = backing_of(m.path(), "node_modules");
    assert_eq!(std::fs::read(backing.join("a/b/f")).unwrap(), b"hello\n", "the bytes are in the backing tree");
    let st = status(m.path());
    let root = &st["native_roots"]["roots"][0];
    assert_eq!(root["state"], "mounted", "{st}");
    // Nothing below the root reached the daemon: no local-only inodes for it.
    assert_eq!(st["local_only"]["inodes"].as_u64(), Some(1), "{st}");
    // The kernel's rules for a mount point.
    assert_eq!(errno_of(std::fs::remove_dir(&nm)), libc::EBUSY);
    assert_eq!(errno_of(std::fs::rename(&nm, m.p("nm-moved"))), libc::EBUSY);
    assert_eq!(errno_of(std::fs::rename(m.p("node_modules/a/b/f"), m.p("f"))), libc::EXDEV);
    // `rm -rf node_modules/*` empties it; the root stays.
    m.sh_ok("rm -rf node_modules/* && test -z \"$(ls -A node_modules)\"");
    assert!(is_mounted(&nm));
    // A nested ignored directory below a root is not another root.
    m.sh_ok("mkdir -p node_modules/x/node_modules && echo 1 > node_modules/x/node_modules/y");
    assert_eq!(mounts_below(m.path()), vec![nm.clone()]);
    // unroot: the directory stays, served by the daemon, same contents.
    let o = unroot(&nm);
    assert!(o.status.success(), "unroot: {}", out_str(&o).1);
    assert!(!is_mounted(&nm));
    assert_eq!(m.sh_ok("cat node_modules/x/node_modules/y").trim(), "1");
    m.sh_ok("echo served > node_modules/z && mkdir node_modules/d && mv node_modules/z node_modules/d/z");
    assert_eq!(std::fs::read(backing.join("d/z")).unwrap(), b"served\n");
    assert!(status(m.path())["native_roots"]["roots"][0]["state"].as_str().unwrap().starts_with("unrooted"));
    let o = unroot(&m.p("x"));
    assert!(!o.status.success(), "unroot of a non-root must fail");
    // Unrooted and empty: rmdir works through the daemon.
    m.sh_ok("rm -rf node_modules/* && rmdir node_modules && test ! -e node_modules");
    assert!(!backing.exists(), "the backing tree of a removed root goes too");
    m.unmount_checked();
    assert!(mounts_below(m.path()).is_empty());
}

#[test]
fn teardown_leaves_no_mounts() {
    if !native_roots_possible() {
        return;
    }
    let mut m = mount(Backend::Store, &["--ignore", "node_modules"], "teardown");
    let data = |m: &TestMount| m.sh_ok("cat a/node_modules/f b/node_modules/f").replace('\n', " ");
    make_native_root(&m, "a/node_modules");
    make_native_root(&m, "b/node_modules");
    m.sh_ok("echo a > a/node_modules/f && echo b > b/node_modules/f");
    assert_eq!(mounts_below(m.path()).len(), 2);
    // Clean unmount (ringfs umount).
    m.unmount_checked();
    assert!(mounts().iter().all(|e| !e.mount_point.starts_with(m.path())), "nothing left after ringfs umount");
    // Found at mount time: mounted again.
    m.mount_again();
    wait_native_root(&m.p("a/node_modules"));
    wait_native_root(&m.p("b/node_modules"));
    assert_eq!(data(&m), "a b ");
    // SIGTERM.
    let pid = m.daemon_pid().unwrap();
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let t0 = std::time::Instant::now();
    while is_mounted(m.path()) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(mounts().iter().all(|e| !e.mount_point.starts_with(m.path())), "nothing left after SIGTERM");
    m.unmount_checked();
    // kill -9, then `ringfs umount` removes the dead mount and its roots.
    m.mount_again();
    wait_native_root(&m.p("a/node_modules"));
    m.kill_daemon();
    assert!(mounts().iter().all(|e| !e.mount_point.starts_with(m.path())), "nothing left after kill -9 + ringfs umount");
    m.mount_again();
    wait_native_root(&m.p("b/node_modules"));
    assert_eq!(data(&m), "a b ");
}

/// After kill -9, a mount of the same store elsewhere detaches the stale roots.
#[test]
fn next_mount_removes_stale_roots() {
    if !native_roots_possible() {
        return;
    }
    let mut m = mount(Backend::Store, &["--ignore", "node_modules"], "stale");
    make_native_root(&m, "node_modules");
    m.sh_ok("echo x > node_modules/f");
    let pid = m.daemon_pid().unwrap();
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(mounts_below(m.path()).len(), 1, "the dead mount still carries its root");
    let mp2 = m.host_tmp().join("mp2");
    std::fs::create_dir_all(&mp2).unwrap();
    let o = run_timeout(
        Command::new(RINGFS).arg("mount").arg(&mp2).arg("--store").arg(m.store_dir()).args(["--ignore", "node_modules", "--daemon"]),
        Duration::from_secs(30),
    );
    let ok = o.status.success();
    let stale_left = mounts_below(m.path());
    if ok {
        wait_native_root(&mp2.join("node_modules"));
        assert_eq!(std::fs::read(mp2.join("node_modules/f")).unwrap(), b"x\n");
        let o = run_timeout(Command::new(RINGFS).arg("umount").arg(&mp2), Duration::from_secs(60));
        assert!(o.status.success(), "umount mp2: {}", out_str(&o).1);
    }
    m.kill_daemon();
    assert!(ok, "mount of the same store elsewhere: {}", out_str(&o).1);
    assert!(stale_left.is_empty(), "stale native roots left: {stale_left:?}");
    assert!(mounts().iter().all(|e| !e.mount_point.starts_with(&mp2)));
}

/// A local-only directory an earlier mount kept the flat way becomes a native root.
#[test]
fn existing_directory_becomes_a_native_root() {
    if !native_roots_possible() {
        return;
    }
    let mut m = mount(Backend::Store, &["--ignore", "node_modules", "--native-roots", "off"], "migrate");
    m.sh_ok(
        "mkdir -p node_modules/a/b && head -c 300000 /dev/urandom > node_modules/a/b/f && ln node_modules/a/b/f node_modules/hl \
         && ln -s a/b/f node_modules/sym && mkfifo node_modules/p && chmod 2751 node_modules/a && chown 65534:65534 node_modules/a/b/f \
         && touch -d 2001-02-03 node_modules/a/b/f",
    );
    assert!(mounts_below(m.path()).is_empty());
    let before = m.sh_ok("cd node_modules && find . -printf '%p %y %m %U %G %n %s %T@\\n' | sort");
    let hashes = tree_hashes(&m.p("node_modules"));
    m.unmount_checked();
    // The same store, now with native roots (the default).
    m.set_args(&["--ignore", "node_modules"]);
    m.mount_again();
    wait_native_root(&m.p("node_modules"));
    let after = m.sh_ok("cd node_modules && find . -printf '%p %y %m %U %G %n %s %T@\\n' | sort");
    assert_eq!(before, after, "same tree, modes, owners, links, sizes, mtimes");
    assert_eq!(hashes, tree_hashes(&m.p("node_modules")));
    m.unmount_checked();
    let o = run_timeout(Command::new(RINGFS).arg("fsck").arg("--store").arg(m.store_dir()), Duration::from_secs(60));
    assert!(o.status.success(), "fsck: {}", out_str(&o).0);
    m.mount_again();
}

/// npm creates node_modules itself in a fresh workspace; every file is
/// there through the mount and in the backing tree, byte for byte. Then
/// `npm ci` (which empties node_modules) reinstalls it.
#[test]
fn npm_install_express_into_a_fresh_workspace() {
    if !native_roots_possible() {
        return;
    }
    let m = mount(Backend::Store, &["--ignore", "node_modules"], "npm-native");
    let cache = m.host_tmp().join("npm-cache");
    let npm = format!("--cache '{}' --no-audit --no-fund --no-update-notifier --loglevel=error", cache.display());
    let o = m.sh_timeout(
        &format!("mkdir app && cd app && npm init -y >/dev/null && npm install {npm} express@4 && node -e 'require(\"express\"); console.log(\"ok\")'"),
        Duration::from_secs(600),
    );
    assert!(m.check_ok("npm install express", &o).contains("ok"));
    let nm = m.p("app/node_modules");
    wait_native_root(&nm);
    let through = tree_hashes(&nm);
    let backing = tree_hashes(&backing_of(m.path(), "app/node_modules"));
    assert!(through.len() > 100, "express has many files: {}", through.len());
    assert_eq!(through, backing, "every file, through the mount and in the backing tree");
    // Lookups through the daemon below the root: none (it is bind-mounted).
    assert_eq!(status(m.path())["local_only"]["inodes"].as_u64(), Some(1));
    let o = m.sh_timeout(&format!("cd app && npm ci {npm} && node -e 'require(\"express\"); console.log(\"ok\")'"), Duration::from_secs(600));
    assert!(m.check_ok("npm ci", &o).contains("ok"));
    assert!(is_mounted(&nm));
    let again = tree_hashes(&nm);
    assert_eq!(again.keys().collect::<Vec<_>>(), through.keys().collect::<Vec<_>>(), "npm ci installs the same files");
}

/// A process racing to swap the new directory for a symlink to a directory
/// outside the workspace never gets a bind mount placed there.
#[test]
fn symlink_swap_race_never_mounts_outside() {
    if !native_roots_possible() {
        return;
    }
    let m = mount(Backend::Memory, &["--ignore", "node_modules"], "swap-race");
    let outside = m.home().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("precious"), b"keep").unwrap();
    let o = m.sh_timeout(
        &format!(
            "for i in $(seq 200); do mkdir w$i; mkdir w$i/node_modules; rmdir w$i/node_modules 2>/dev/null && ln -s '{}' w$i/node_modules; done; echo done",
            outside.display()
        ),
        Duration::from_secs(300),
    );
    m.check_ok("swap loop", &o);
    std::thread::sleep(Duration::from_millis(500));
    let all = mounts();
    assert!(all.iter().all(|e| e.mount_point != outside && !e.mount_point.starts_with(&outside)), "a mount landed outside");
    for e in all.iter().filter(|e| e.mount_point.starts_with(m.path()) && e.mount_point != m.path()) {
        let meta = std::fs::symlink_metadata(&e.mount_point).unwrap();
        assert!(meta.is_dir(), "{} is a mount on a non-directory", e.mount_point.display());
    }
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"keep");
    let swapped = m.sh_ok("n=0; for i in $(seq 200); do [ -L w$i/node_modules ] && n=$((n+1)); done; echo $n");
    println!("swapped before the mount landed: {} of 200", swapped.trim());
}

/// The daemon-served tree (here after `ringfs unroot`; likewise for a
/// process whose cwd entered the directory before the bind mount landed)
/// shows changes made behind the daemon (through the bind mount, here
/// directly in the backing tree) at once: the kernel caches nothing of it.
#[test]
fn unrooted_tree_sees_changes_made_through_the_host() {
    if !native_roots_possible() {
        return;
    }
    let m = mount(Backend::Memory, &["--ignore", "node_modules"], "unrooted-cache");
    let nm = make_native_root(&m, "node_modules");
    let backing = backing_of(m.path(), "node_modules");
    let o = unroot(&nm);
    assert!(o.status.success(), "unroot: {}", out_str(&o).1);
    m.sh_ok("mkdir node_modules/pkg && echo old > node_modules/pkg/f && cat node_modules/pkg/f && ls node_modules/pkg >/dev/null && stat node_modules/gone 2>/dev/null || true");
    std::fs::remove_dir_all(backing.join("pkg")).unwrap();
    std::fs::create_dir(backing.join("pkg")).unwrap();
    std::fs::write(backing.join("pkg/f"), b"new\n").unwrap();
    std::fs::write(backing.join("gone"), b"here\n").unwrap();
    assert_eq!(m.sh_ok("cat node_modules/pkg/f"), "new\n");
    assert_eq!(m.sh_ok("ls node_modules/pkg"), "f\n");
    assert_eq!(m.sh_ok("cat node_modules/gone"), "here\n");
    assert_eq!(m.sh_ok("stat -c %s node_modules/pkg/f"), "4\n");
}

/// ACL xattrs are not stored as plain xattrs: `cp -p`/`mv` from another
/// filesystem fall back to chmod and keep the mode (synced side).
#[test]
fn copies_from_another_filesystem_keep_their_mode() {
    if raw_mode() {
        return;
    }
    let m = mount(Backend::Memory, &[], "acl-mode");
    let src = m.host_tmp().join("f");
    std::fs::write(&src, b"x").unwrap();
    std::fs::set_permissions(&src, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    m.sh_ok(&format!("cp -p '{}' cp && mv '{}' mvd", src.display(), src.display()));
    for f in ["cp", "mvd"] {
        assert_eq!(std::fs::metadata(m.p(f)).unwrap().mode() & 0o7777, 0o755, "{f}");
    }
}

/// A native root moved (with its parent) below another ignored directory
/// keeps its contents when that directory becomes a native root at mount.
#[test]
fn nested_root_survives_remount() {
    if !native_roots_possible() {
        return;
    }
    let mut m = mount(Backend::Store, &["--ignore", "node_modules"], "nested");
    make_native_root(&m, "proj/node_modules");
    m.sh_ok("echo data > proj/node_modules/f && mkdir x && mv proj x/node_modules && cat x/node_modules/node_modules/f");
    m.unmount_checked();
    m.mount_again();
    wait_native_root(&m.p("x/node_modules"));
    assert_eq!(m.sh_ok("cat x/node_modules/node_modules/f"), "data\n");
}

/// `umount -l` of the workspace (or fusermount -uz) ends the daemon even
/// with native roots mounted: it holds nothing that keeps the mount alive.
#[test]
fn lazy_umount_ends_the_daemon() {
    if !native_roots_possible() {
        return;
    }
    let mut m = mount(Backend::Memory, &["--ignore", "node_modules"], "lazy");
    make_native_root(&m, "node_modules");
    let pid = m.daemon_pid().unwrap() as i32;
    let st = Command::new("umount").arg("-l").arg(m.path()).status().unwrap();
    assert!(st.success());
    let t0 = std::time::Instant::now();
    while unsafe { libc::kill(pid, 0) } == 0 && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ") {
        assert!(t0.elapsed() < Duration::from_secs(20), "the daemon did not end after umount -l");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(mounts().iter().all(|e| !e.mount_point.starts_with(m.path())));
    m.unmount_checked();
}

/// Ignore patterns that stop matching a native root make it synced again
/// at mount: the same tree, now in the store.
#[test]
fn root_becomes_synced_when_patterns_stop_matching() {
    if !native_roots_possible() || env_mount_args().iter().any(|a| a == "--ignore") {
        return;
    }
    let mut m = mount(Backend::Store, &["--ignore", "node_modules"], "unmatch");
    make_native_root(&m, "node_modules");
    m.sh_ok(
        "mkdir -p node_modules/a/b && head -c 300000 /dev/urandom > node_modules/a/b/f && ln node_modules/a/b/f node_modules/hl \
         && ln -s a/b/f node_modules/sym && chmod 2751 node_modules/a && touch -d 2001-02-03 node_modules/a/b/f",
    );
    m.sh_ok("python3 -c \"import os; os.setxattr('node_modules', 'user.d', b'dir'); os.setxattr('node_modules/a/b/f', 'user.k', b'file')\"");
    let before = m.sh_ok("cd node_modules && find . -printf '%p %y %m %U %G %n %s %T@\\n' | sort");
    let hashes = tree_hashes(&m.p("node_modules"));
    m.unmount_checked();
    m.set_args(&["--commit-interval-ms", "100"]);
    m.mount_again();
    assert!(mounts_below(m.path()).is_empty(), "no native root without the pattern");
    let after = m.sh_ok("cd node_modules && find . -printf '%p %y %m %U %G %n %s %T@\\n' | sort");
    assert_eq!(before, after);
    assert_eq!(hashes, tree_hashes(&m.p("node_modules")));
    let t0 = std::time::Instant::now();
    while status(m.path())["store_stats"]["chunks"].as_u64().unwrap_or(0) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(20), "the imported file was not stored");
        std::thread::sleep(Duration::from_millis(100));
    }
    m.unmount_checked();
    let o = run_timeout(Command::new(RINGFS).arg("fsck").arg("--store").arg(m.store_dir()), Duration::from_secs(60));
    assert!(o.status.success(), "fsck: {}", out_str(&o).0);
    m.mount_again();
    assert_eq!(hashes, tree_hashes(&m.p("node_modules")));
    let x = m.sh_ok("python3 -c \"import os; print(os.getxattr('node_modules', 'user.d'), os.getxattr('node_modules/a/b/f', 'user.k'))\"");
    assert_eq!(x.trim(), "b'dir' b'file'", "xattrs kept across the move into the store and a remount");
}

/// A synced directory that a new pattern makes local-only becomes a native
/// root at that mount, and the store keeps nothing of its old synced side.
#[test]
fn synced_directory_becomes_a_native_root_cleanly() {
    if !native_roots_possible() || env_mount_args().iter().any(|a| a == "--ignore") {
        return;
    }
    let mut m = mount(Backend::Store, &[], "synced-to-root");
    m.sh_ok("mkdir -p x/y/target/sub && echo F > x/y/target/sub/f && ln -s sub/f x/y/target/l");
    m.unmount_checked();
    m.set_args(&["--ignore", "**/target"]);
    m.mount_again();
    wait_native_root(&m.p("x/y/target"));
    assert_eq!(m.sh_ok("cat x/y/target/sub/f x/y/target/l"), "F\nF\n");
    m.unmount_checked();
    let o = run_timeout(Command::new(RINGFS).arg("fsck").arg("--store").arg(m.store_dir()), Duration::from_secs(60));
    assert!(o.status.success(), "fsck: {}", out_str(&o).0);
    m.mount_again();
}
