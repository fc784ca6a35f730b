//! Stores private to their owner (issue 36 item 2, DECISIONS D87): every
//! kind of store a command makes — a mount's new store, a `--memory`
//! mount's packs, a fork (`STORE.fork-NAME`, its packs hard-linked), a
//! clone from a `file://` remote (lazy and eager), a salvage, the `file://`
//! remote itself — has no directory or file with group or other bits (the
//! files of the workspace below `wc/` keep their own modes), and user
//! nobody cannot read a word of it; a store made open by an earlier
//! version is reported by `fsck`, made private at its next mount or
//! `--store` command with one line saying so, and not again; the runtime
//! files (`/run/ringfs`: sockets, claims, logs) are root's alone.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const SECRET: &str = "topsecret-3f9a1c";

/// Directories of a store whose contents are the user's files.
const USER_TREES: [&str; 2] = ["wc", "local"];

/// Every directory and file of `dir` (the root included, the contents of
/// `wc/` and `local/` at the top not) with group or other bits: (path
/// relative to `dir`, mode).
fn open_entries(dir: &Path) -> Vec<(String, u32)> {
    fn walk(root: &Path, d: &Path, top: bool, out: &mut Vec<(String, u32)>) {
        for e in std::fs::read_dir(d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if !(m.is_dir() || m.is_file()) {
                continue;
            }
            if m.mode() & 0o077 != 0 {
                out.push((e.path().strip_prefix(root).unwrap().display().to_string(), m.mode() & 0o7777));
            }
            let user = top && USER_TREES.iter().any(|t| e.file_name() == *t);
            if m.is_dir() && !user {
                walk(root, &e.path(), false, out);
            }
        }
    }
    let mut out = Vec::new();
    let m = std::fs::metadata(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    if m.mode() & 0o077 != 0 {
        out.push((".".into(), m.mode() & 0o7777));
    }
    walk(dir, dir, true, &mut out);
    out
}

#[track_caller]
fn assert_private(what: &str, dir: &Path) {
    let open = open_entries(dir);
    assert!(open.is_empty(), "{what} {}: entries open to other users: {open:?}", dir.display());
}

/// `ARGV` run as uid/gid 65534 with no supplementary groups.
fn as_nobody(argv: &[&str]) -> Output {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).args(argv);
    run_timeout(&mut c, Duration::from_secs(60))
}

/// User nobody finds no trace of the secret under `dir`, and is refused
/// (not just unlucky): grep exits 2 with "Permission denied".
#[track_caller]
fn nobody_cannot_read(what: &str, dir: &Path) {
    let o = as_nobody(&["grep", "-rl", SECRET, s(dir)]);
    let (out, err) = out_str(&o);
    assert!(out.trim().is_empty(), "{what}: nobody read the secret in {out}");
    assert_eq!(o.status.code(), Some(2), "{what}: grep as nobody: {out} {err}");
    assert!(err.contains("Permission denied"), "{what}: {err}");
}

/// `ringfs ARGS --json`; must succeed.
fn rj(args: &[&str]) -> serde_json::Value {
    json(args)
}

/// The workspace files: a 0600 secret and a 0644 file, committed.
fn fill(m: &TestMount) {
    m.sh_ok(&format!(
        "mkdir -p src && printf '{SECRET}\\n' > src/secret && chmod 600 src/secret && echo open > src/open && chmod 644 src/open && head -c 300000 /dev/urandom > src/big"
    ));
    rj(&["commit", mp(m), "-m", "one"]);
}

/// The user's files keep their modes, in the mount and in the working copies.
#[track_caller]
fn user_modes_kept(m: &TestMount) {
    let mode = |p: PathBuf| std::fs::metadata(&p).unwrap().mode() & 0o7777;
    assert_eq!((mode(m.p("src/secret")), mode(m.p("src/open"))), (0o600, 0o644));
}

/// A mount's new store, a fork of it (mounted, under the default name
/// `STORE.fork-NAME`), a `file://` remote it pushes to, lazy and eager
/// clones of that remote, and a salvage of the store: all private, and
/// nobody reads none of them.
#[test]
fn every_kind_of_store_is_private() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let base = m.store_dir().parent().unwrap().to_path_buf();
    let store = m.store_dir().to_path_buf();
    fill(&m);
    user_modes_kept(&m);
    assert_private("new store", &store);
    nobody_cannot_read("new store", &store);

    // A fork, mounted: its packs are the origin's, hard-linked.
    let fm = base.join("fm");
    std::fs::create_dir(&fm).unwrap();
    let _g = MountGuard(fm.clone());
    let o = ringfs(&["fork", mp(&m), "--to", s(&fm)]);
    assert!(o.status.success(), "fork: {:?}", out_str(&o));
    let fork = PathBuf::from(format!("{}.fork-fm", store.display()));
    assert!(fork.join("store.redb").is_file(), "no fork at {}", fork.display());
    assert_private("fork", &fork);
    nobody_cannot_read("fork", &fork);
    let o = ringfs(&["umount", s(&fm)]);
    assert!(o.status.success(), "umount fork: {:?}", out_str(&o));

    // A file:// remote made by `remote add`, pushed to.
    let remote = base.join("remote");
    rj(&["remote", "add", mp(&m), "origin", &file_url(&remote)]);
    rj(&["push", mp(&m)]);
    assert_private("store with a remote", &store);
    assert_private("file:// remote", &remote);
    nobody_cannot_read("file:// remote", &remote);

    // Clones, lazy and eager.
    for (name, extra) in [("lazy", None), ("eager", Some("--eager"))] {
        let cs = base.join(format!("clone-{name}"));
        let mut a = vec!["clone", file_url(&remote).leak() as &str, "--store", s(&cs)];
        a.extend(extra);
        rj(&a);
        assert_private(name, &cs);
        nobody_cannot_read(name, &cs);
    }

    // A salvage of the unmounted store.
    m.unmount_checked();
    let to = base.join("salvaged");
    let o = ringfs(&["salvage", "--store", s(&store), "--to", s(&to)]);
    assert!(o.status.success(), "salvage: {:?}", out_str(&o));
    assert_private("salvaged store", &to);
    nobody_cannot_read("salvaged store", &to);
    m.mount_again();
    user_modes_kept(&m);
}

/// A clone's staging directory (bundles fetched so far, kept when the
/// clone is cut short) is private too.
#[test]
fn a_clones_staging_is_private() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let base = m.store_dir().parent().unwrap().to_path_buf();
    m.sh_ok(&format!("for i in 1 2 3 4 5 6; do head -c 300000 /dev/urandom > f$i; done; printf '{SECRET}\\n' > secret; chmod 600 secret"));
    rj(&["commit", mp(&m)]);
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    let remote = base.join("remote");
    rj(&["remote", "add", "--store", s(&store), "r", &file_url(&remote)]);
    let mut c = Command::new(RINGFS);
    c.args(["push", "--store", s(&store)]).env("RINGFS_TEST_BUNDLE_MAX", "262144");
    let o = run_timeout(&mut c, Duration::from_secs(120));
    assert!(o.status.success(), "push: {:?}", out_str(&o));
    let cs = base.join("clone");
    let mut c = Command::new(RINGFS);
    c.args(["clone", &file_url(&remote), "--store", s(&cs), "--eager"]).env("RINGFS_FAILPOINT", "bundle-fetched");
    let o = run_timeout(&mut c, Duration::from_secs(120));
    assert!(!o.status.success(), "the failpoint did not stop the clone: {:?}", out_str(&o));
    let staging = base.join(".clone.clone-staging");
    assert!(staging.is_dir(), "no staging left at {}", staging.display());
    assert_private("clone staging", &staging);
    nobody_cannot_read("clone staging", &staging);
    m.mount_again();
}

/// A `--memory` mount's pack directory and packs (in the daemon's
/// temporary directories) are private.
#[test]
fn a_memory_stores_packs_are_private() {
    if raw_mode() {
        return;
    }
    let m = TestMount::new(Backend::Memory);
    fill(&m);
    let pid = m.daemon_pid().expect("the daemon runs in the foreground");
    let (mut dirs, mut roots): (Vec<PathBuf>, Vec<PathBuf>) = (Vec::new(), Vec::new());
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten() {
        let Ok(t) = std::fs::read_link(e.path()) else { continue };
        let name = t.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if t.extension().is_some_and(|x| x == "pack") {
            dirs.extend(t.parent().map(Path::to_path_buf));
        } else if name.starts_with("ringfs-wc-") || name.starts_with("ringfs-local-") {
            roots.push(t);
        }
    }
    dirs.dedup();
    assert!(!dirs.is_empty(), "no open pack file found in /proc/{pid}/fd");
    for d in &dirs {
        assert_private("memory store packs", d);
        nobody_cannot_read("memory store packs", d);
    }
    // The working copies' roots (the files in them keep the user's modes).
    assert!(!roots.is_empty(), "no working-copy directory open in /proc/{pid}/fd");
    for d in &roots {
        let mode = std::fs::metadata(d).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o700, "{}", d.display());
        nobody_cannot_read("memory store working copies", d);
    }
    user_modes_kept(&m);
}

/// Opens the store as an earlier version left it: directories 0755 and
/// files 0644 (the workspace files below `wc/` untouched).
fn make_open(dir: &Path) {
    fn walk(d: &Path, top: bool) {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let user = top && USER_TREES.iter().any(|t| e.file_name() == *t);
            if m.is_dir() && user {
                std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            } else if m.is_dir() {
                walk(&e.path(), false);
            } else if m.is_file() {
                std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
    }
    walk(dir, true);
    assert!(!open_entries(dir).is_empty());
}

const FIXED: &str = "was readable by others (mode 0755): made private";

/// A store an earlier version left open: `fsck` reports it (exit 1, with
/// the fix); the next mount makes it private and says so once in its log,
/// the mount after says nothing; a `--store` command does the same.
#[test]
fn an_open_store_is_reported_then_made_private_once() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    fill(&m);
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    make_open(&store);

    let o = ringfs(&["fsck", "--store", s(&store)]);
    let (out, err) = out_str(&o);
    assert_eq!(o.status.code(), Some(1), "fsck of an open store: {out} {err}");
    assert!(out.contains("permissions: other users can read the store (mode 0755;"), "{out}");
    assert!(out.contains("mount it once with this ringfs") && out.contains(&format!("chmod 700 {}", store.display())), "{out}");
    assert!(!out.contains("ringfs salvage"), "an open store is no damage: {out}");
    assert!(open_entries(&store).len() > 3, "fsck changed nothing");

    m.mount_again();
    let log = m.daemon_log();
    assert_eq!(log.matches(FIXED).count(), 1, "{log}");
    assert!(log.contains(&format!("store {} {FIXED}", store.display())), "{log}");
    assert_private("store after its mount", &store);
    nobody_cannot_read("store after its mount", &store);
    user_modes_kept(&m);
    m.unmount_checked();
    m.mount_again();
    assert_eq!(m.daemon_log().matches(FIXED).count(), 1, "said again: {}", m.daemon_log());
    m.unmount_checked();
    let o = ringfs(&["fsck", "--store", s(&store)]);
    assert!(o.status.success(), "fsck after: {:?}", out_str(&o));

    // A --store command that writes to the store (a branch made offline).
    make_open(&store);
    let o = ringfs(&["branch", "--store", s(&store), "side"]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "branch --store: {out} {err}");
    assert_eq!(err.matches(FIXED).count(), 1, "{err}");
    assert_private("store after branch --store", &store);
    m.mount_again();
}

/// The runtime files of a `--daemon` mount: `/run/ringfs` 0700, its
/// socket, claim and log 0600.
#[test]
fn runtime_files_are_roots_alone() {
    if raw_mode() || !rustix::process::geteuid().is_root() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (mnt, store) = (t.path().join("mnt"), t.path().join("store"));
    std::fs::create_dir(&mnt).unwrap();
    let _g = MountGuard(mnt.clone());
    let o = ringfs(&["mount", s(&mnt), "--store", s(&store), "--daemon"]);
    assert!(o.status.success(), "mount: {:?}", out_str(&o));
    let run = Path::new("/run/ringfs");
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).mode() & 0o7777;
    assert_eq!(mode(run), 0o700, "{}", run.display());
    let mut seen = Vec::new();
    let mnt_c = mnt.canonicalize().unwrap();
    let id = &blake3::hash(mnt_c.as_os_str().as_encoded_bytes()).to_hex()[..16];
    for ext in ["sock", "claim", "log"] {
        let p = run.join(format!("{id}.{ext}"));
        if p.exists() {
            assert_eq!(mode(&p) & 0o077, 0, "{} mode {:o}", p.display(), mode(&p));
            seen.push(ext);
        }
    }
    assert!(seen.contains(&"sock") && seen.contains(&"log"), "found only {seen:?} for {}", mnt_c.display());
    assert_private("store", &store);
    let o = ringfs(&["umount", s(&mnt)]);
    assert!(o.status.success(), "umount: {:?}", out_str(&o));
}
