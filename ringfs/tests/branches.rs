//! Branches and forks through real mounts (issue 13, DECISIONS D35):
//! `ringfs branch` create/move/list/delete and its refusals; `ringfs fork`
//! of a mount (the head, @BRANCH, @COMMIT) and of an unmounted store, the
//! fork and its origin mounted at once and independent, both fsck clean;
//! a fork reading every file after its origin's store is gone (shared
//! packs); `mount --branch` (switch, and refused when the live tree has
//! uncommitted changes); `mount --at COMMIT --read-only` (EROFS, nothing
//! left after unmount); "head moved" refused with the ref unchanged; a
//! fork killed before it is in place leaves nothing under its name.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `ringfs ARGS`, which must fail with one line on stderr containing `want`.
fn refused(args: &[&str], want: &str) -> String {
    let o = ringfs(args);
    let (out, err) = out_str(&o);
    assert!(!o.status.success(), "ringfs {args:?} succeeded: {out}");
    assert!(err.contains(want), "ringfs {args:?}: wanted {want:?} in: {err}");
    // A foreground mount may log before it fails; the refusal is its last line.
    if args[0] != "mount" {
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    err
}

/// A workspace `ringfs fork --to` mounted: unmounted when dropped (before
/// the [`TestMount`] whose temporary directory holds it).
struct Extra(PathBuf);

impl Drop for Extra {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = run_timeout(std::process::Command::new(RINGFS).arg("umount").arg(&self.0), Duration::from_secs(30));
        }
        if is_mounted(&self.0) {
            eprintln!("{} still mounted", self.0.display());
        }
    }
}

impl Extra {
    fn unmount(&self) {
        let o = run_timeout(std::process::Command::new(RINGFS).arg("umount").arg(&self.0), Duration::from_secs(30));
        assert!(o.status.success(), "umount {}: {:?}", self.0.display(), out_str(&o));
    }
}

/// A new empty directory beside the mount's store.
fn dir_beside(m: &TestMount, name: &str) -> PathBuf {
    let d = m.store_dir().parent().unwrap().join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fsck_clean(store: &Path, full: bool) {
    let mut a = vec!["fsck", "--store", s(store)];
    if full {
        a.push("--full");
    }
    let o = ringfs(&a);
    assert!(o.status.success(), "fsck {}: {:?}", store.display(), out_str(&o));
}

fn branches(args: &[&str]) -> Vec<(String, String, bool)> {
    let mut a = vec!["branch"];
    a.extend_from_slice(args);
    a.push("--list");
    let v = json(&a);
    v["branches"].as_array().unwrap().iter().map(|b| (b["name"].as_str().unwrap().into(), b["head"].as_str().unwrap().into(), b["current"].as_bool().unwrap())).collect()
}

#[test]
fn branch_create_move_list_delete_and_refusals() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    refused(&["branch", mp(&m), "early"], "no commits yet");
    m.sh_ok("echo one > a");
    let c1 = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    m.sh_ok("echo two > a");
    let c2 = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    json(&["branch", mp(&m), "feature/x"]);
    json(&["branch", mp(&m), "old", &c1[..10]]);
    assert_eq!(
        branches(&[mp(&m)]),
        [("feature/x".into(), c2.clone(), false), ("main".into(), c2.clone(), true), ("old".into(), c1.clone(), false)]
    );
    refused(&["branch", mp(&m), "old"], "already exists");
    let v = json(&["branch", mp(&m), "old", "main", "--force"]);
    assert!(v["done"].as_str().unwrap().contains("moved"), "{v}");
    for bad in ["HEAD", "live", "a b", "x..y", "x.lock", "abcd1234", "d7e", "7", "x/", "ctl\u{1}"] {
        refused(&["branch", mp(&m), bad], "not a usable branch name");
    }
    refused(&["branch", mp(&m), "--", "-x"], "not a usable branch name");
    refused(&["branch", mp(&m), "nope", "0123dead"], "no commit or branch named");
    refused(&["branch", mp(&m), "-d", "main"], "checked out");
    refused(&["branch", mp(&m), "-d", "nosuch"], "no commit or branch named");
    json(&["branch", mp(&m), "-d", "feature/x"]);
    // --store: refused while a daemon holds it, then on the unmounted store.
    let store = m.store_dir().to_path_buf();
    refused(&["branch", "--store", s(&store), "y"], "in use by a running daemon");
    m.unmount_checked();
    json(&["branch", "--store", s(&store), "y", &c1]);
    assert_eq!(branches(&["--store", s(&store)]).iter().map(|b| b.0.as_str()).collect::<Vec<_>>(), ["main", "old", "y"]);
    fsck_clean(&store, false);
}

#[test]
fn forks_are_independent_share_packs_and_fsck_clean() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir -p src/lib && echo one > src/a && head -c 700000 /dev/urandom > src/lib/big && ln -s a src/l && mkfifo src/p && setfattr -n user.k -v v src/a");
    let c1 = json(&["commit", mp(&m), "-m", "one"])["id"].as_str().unwrap().to_string();
    m.sh_ok("echo two > src/a && echo b > src/b");
    json(&["commit", mp(&m), "-m", "two"]);
    json(&["branch", mp(&m), "old", &c1]);
    let big = std::fs::read(m.p("src/lib/big")).unwrap();

    // The head, mounted by the fork command (default store beside the origin's).
    let to2 = dir_beside(&m, "m2");
    let _x2 = Extra(to2.clone());
    let f2 = json(&["fork", mp(&m), "--to", s(&to2)]);
    assert_eq!((f2["branch"].as_str(), f2["files"].as_u64()), (Some("main"), Some(3)), "{f2}");
    assert_eq!(PathBuf::from(f2["store"].as_str().unwrap()), PathBuf::from(format!("{}.fork-m2", m.store_dir().display())));
    assert!(f2["new_bytes"].as_u64().unwrap() < 1 << 20, "{f2}");
    assert_eq!(std::fs::read_to_string(to2.join("src/a")).unwrap(), "two\n");
    assert_eq!(std::fs::read(to2.join("src/lib/big")).unwrap(), big);
    assert_eq!(std::fs::read_link(to2.join("src/l")).unwrap(), Path::new("a"));
    let o = std::process::Command::new("getfattr").args(["--only-values", "-n", "user.k"]).arg(to2.join("src/a")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "v");
    // @BRANCH into a given store, and @COMMIT (a start of its id).
    let to3 = dir_beside(&m, "m3");
    let _x3 = Extra(to3.clone());
    let st3 = m.store_dir().parent().unwrap().join("s3");
    let f3 = json(&["fork", &format!("{}@old", mp(&m)), "--to", s(&to3), "--new-store", s(&st3)]);
    assert_eq!((f3["branch"].as_str(), f3["commit"].as_str()), (Some("old"), Some(c1.as_str())), "{f3}");
    assert_eq!(std::fs::read_to_string(to3.join("src/a")).unwrap(), "one\n");
    assert!(!to3.join("src/b").exists());
    // A non-empty NEWMNT: refused, unless -o nonempty (as for mount).
    let to5 = dir_beside(&m, "m5");
    std::fs::write(to5.join("hidden"), "h").unwrap();
    let st5 = m.store_dir().parent().unwrap().join("s5");
    refused(&["fork", mp(&m), "--to", s(&to5), "--new-store", s(&st5)], "is not empty");
    let x5 = Extra(to5.clone());
    json(&["fork", mp(&m), "--to", s(&to5), "--new-store", s(&st5), "-o", "nonempty"]);
    assert_eq!(std::fs::read_to_string(to5.join("src/a")).unwrap(), "two\n");
    x5.unmount();
    let st4 = m.store_dir().parent().unwrap().join("s4");
    let f4 = json(&["fork", &format!("{}@{}", mp(&m), &c1[..12]), "--new-store", s(&st4), "--no-mount"]);
    assert_eq!((f4["branch"].as_str(), f4["mounted"].is_null()), (Some("main"), true), "{f4}");

    // The tree written from the objects builds back to the same objects:
    // nothing to diff or commit.
    for to in [&to2, &to3] {
        assert_eq!(json(&["diff", s(to)])["changes"].as_array().unwrap().len(), 0);
        assert_eq!(json(&["commit", s(to)])["created"], false);
    }
    // Independent: writes in one never show in another.
    m.sh_ok("echo origin > src/a && echo o > only-origin");
    std::fs::write(to2.join("src/a"), "fork\n").unwrap();
    std::fs::write(to2.join("only-fork"), "f").unwrap();
    assert_eq!(std::fs::read_to_string(m.p("src/a")).unwrap(), "origin\n");
    assert!(!m.p("only-fork").exists() && !to2.join("only-origin").exists() && !to3.join("only-fork").exists());
    assert_eq!(std::fs::read_to_string(to3.join("src/a")).unwrap(), "one\n");
    // A fork commits on its own history, starting from the fork's commit.
    let fc = json(&["commit", s(&to2), "-m", "in the fork"]);
    assert_eq!(fc["parent"], f2["commit"], "{fc}");
    let oc = json(&["commit", mp(&m), "-m", "in the origin"]);
    assert_ne!(oc["id"], fc["id"]);
    _x2.unmount();
    _x3.unmount();
    fsck_clean(Path::new(f2["store"].as_str().unwrap()), false);
    fsck_clean(&st3, false);

    // The origin gone whole: the never-mounted fork still reads every
    // file from the packs it shares (hard links).
    m.sh_ok("rm -rf src");
    json(&["commit", mp(&m), "-m", "gone"]);
    assert!(ringfs(&["gc", mp(&m)]).status.success());
    m.unmount_checked();
    fsck_clean(m.store_dir(), false);
    std::fs::remove_dir_all(m.store_dir()).unwrap();
    fsck_clean(&st4, true);
    let to4 = dir_beside(&m, "m4");
    let x4 = Extra(to4.clone());
    let o = ringfs(&["mount", s(&to4), "--store", s(&st4), "--daemon"]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    assert_eq!(std::fs::read_to_string(to4.join("src/a")).unwrap(), "one\n");
    assert_eq!(std::fs::read(to4.join("src/lib/big")).unwrap(), big);
    x4.unmount();
    fsck_clean(&st4, true);
    // The origin's store must exist again for the harness's cleanup.
    std::fs::create_dir_all(m.store_dir()).unwrap();
}

#[test]
fn fork_of_an_unmounted_store_and_a_killed_fork() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir d && for i in $(seq 1 50); do echo $i > d/f$i; done");
    json(&["commit", mp(&m)]);
    let store = m.store_dir().to_path_buf();
    let new = store.parent().unwrap().join("forked");
    refused(&["fork", "--store", s(&store), "--new-store", s(&new), "--no-mount"], "in use by a running daemon");
    m.unmount_checked();
    // Killed (abort, as kill -9) with the new store built but not in place.
    let o = run_timeout(
        std::process::Command::new(RINGFS).args(["fork", "--store", s(&store), "--new-store", s(&new), "--no-mount"]).env("RINGFS_TEST_DIE_IN_FORK", "1"),
        Duration::from_secs(30),
    );
    assert!(!o.status.success());
    assert!(!new.exists(), "a killed fork left {}", new.display());
    let left: Vec<_> = std::fs::read_dir(store.parent().unwrap()).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.contains("forking")).collect();
    assert_eq!(left.len(), 1, "{left:?}");
    // Bad places are refused before anything is made.
    refused(&["fork", "--store", s(&store), "--new-store", s(&store), "--no-mount"], "is not empty");
    refused(&["fork", "--store", &format!("{}@nosuch", s(&store)), "--new-store", s(&new), "--no-mount"], "no commit or branch named");
    assert!(!new.exists());
    let f = json(&["fork", "--store", s(&store), "--new-store", s(&new), "--no-mount"]);
    assert_eq!(f["files"].as_u64(), Some(50), "{f}");
    let left = std::fs::read_dir(store.parent().unwrap()).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().contains("forking")).count();
    assert_eq!(left, 0, "the killed fork's leftovers are swept by the next fork");
    fsck_clean(&new, true);
    fsck_clean(&store, false);
}

#[test]
fn mount_branch_switches_and_refuses_uncommitted_changes() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("echo one > a && mkdir d && echo x > d/x");
    let c1 = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    json(&["branch", mp(&m), "exp"]);
    m.sh_ok("echo two > a && rm -r d && echo n > new");
    let c2 = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    m.unmount_checked();
    m.set_args(&["--branch", "exp"]);
    m.mount_again();
    assert_eq!(std::fs::read_to_string(m.p("a")).unwrap(), "one\n");
    assert_eq!(std::fs::read_to_string(m.p("d/x")).unwrap(), "x\n");
    assert!(!m.p("new").exists());
    assert!(branches(&[mp(&m)]).contains(&("exp".into(), c1.clone(), true)));
    // Commits go to exp now.
    m.sh_ok("echo three > a");
    let c3 = json(&["commit", mp(&m)]);
    assert_eq!((c3["branch"].as_str(), c3["parent"].as_str()), (Some("exp"), Some(c1.as_str())), "{c3}");
    // Uncommitted changes: switching back is refused, nothing changes.
    m.sh_ok("echo dirty > a");
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    let to = dir_beside(&m, "other");
    refused(&["mount", s(&to), "--store", s(&store), "--branch", "main"], "changes a switch would lose");
    refused(&["mount", s(&to), "--store", s(&store), "--branch", "nosuch"], "no commit or branch named");
    m.set_args(&[]);
    m.mount_again();
    assert_eq!(std::fs::read_to_string(m.p("a")).unwrap(), "dirty\n");
    json(&["commit", mp(&m)]);
    m.unmount_checked();
    m.set_args(&["--branch", "main"]);
    m.mount_again();
    assert_eq!(std::fs::read_to_string(m.p("a")).unwrap(), "two\n");
    assert_eq!(std::fs::read_to_string(m.p("new")).unwrap(), "n\n");
    assert!(!m.p("d").exists());
    assert!(branches(&[mp(&m)]).contains(&("main".into(), c2, true)));
    m.unmount_checked();
    fsck_clean(&store, false);
}

#[test]
fn mount_at_commit_read_only_and_head_moved() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("echo one > a");
    let c1 = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    m.sh_ok("echo two > a");
    let c2 = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    // Head moved: the branch moved back under the workspace.
    json(&["branch", mp(&m), "main", &c1, "--force"]);
    m.sh_ok("echo three > a");
    let err = refused(&["commit", mp(&m)], "head moved");
    assert!(err.contains(&c1) && err.contains(&c2), "{err}");
    // What no commit has: diff against the base, not the moved head.
    let d = json(&["diff", mp(&m)]);
    assert_eq!(d["from"].as_str(), Some(c2.as_str()), "{d}");
    assert_eq!(d["changes"].as_array().map(|c| c.len()), Some(1), "{d}");
    assert_eq!(branches(&[mp(&m)]), [("main".into(), c1.clone(), true)]);
    // The way out the message names: the branch back to the base, commit.
    json(&["branch", mp(&m), "main", &c2, "--force"]);
    let c3 = json(&["commit", mp(&m)]);
    assert_eq!(c3["parent"].as_str(), Some(c2.as_str()));
    // The other way out: drop the work and take the moved head's tree; a
    // whole-tree restore to the branch head makes it the base.
    json(&["branch", mp(&m), "main", &c1, "--force"]);
    m.sh_ok("echo four > a");
    refused(&["commit", mp(&m)], "head moved");
    json(&["restore", mp(&m), "main"]);
    assert_eq!(m.sh_ok("cat a").trim(), "one");
    m.sh_ok("echo five > a");
    let c4 = json(&["commit", mp(&m)]);
    assert_eq!(c4["parent"].as_str(), Some(c1.as_str()), "{c4}");
    // A restore to an older commit keeps the base: the next commit reverts on top of the head.
    json(&["restore", mp(&m), &c2]);
    let c5 = json(&["commit", mp(&m)]);
    assert_eq!(c5["parent"], c4["id"], "{c5}");
    assert_eq!(m.sh_ok("cat a").trim(), "two");
    m.unmount_checked();

    let store = m.store_dir().to_path_buf();
    let to = dir_beside(&m, "at");
    let x = Extra(to.clone());
    refused(&["mount", s(&to), "--store", s(&store), "--at", &c1], "--read-only");
    let o = ringfs(&["mount", s(&to), "--store", s(&store), "--at", &c1[..8], "--read-only", "--daemon"]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    assert_eq!(std::fs::read_to_string(to.join("a")).unwrap(), "one\n");
    let e = std::fs::write(to.join("b"), "x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    // It stays a view: what would change the temporary copy (and be lost
    // with it at unmount) is refused, naming the fork that keeps it.
    let fix = format!("ringfs fork --store {}@{}", store.display(), &c1[..16]);
    let e = refused(&["mount", s(&to), "-o", "remount,rw"], "cannot be remounted read-write");
    assert!(e.contains(&fix), "{e}");
    for args in [vec!["commit", s(&to), "--allow-empty"], vec!["branch", s(&to), "kept"], vec!["gc", s(&to)], vec!["restore", s(&to), &c2]] {
        let e = refused(&args, "is refused there");
        assert!(e.contains(&fix), "{args:?}: {e}");
    }
    assert_eq!(branches(&[s(&to)]).len(), 1, "listing branches is a read");
    // Remounted read-write behind ringfs's back (mount(2) directly): the
    // daemon puts it back read-only.
    let mut opts = fuse_uring::session::MountOptions::default();
    opts.read_only = false;
    let _ = fuse_uring::session::remount(&to, &opts);
    // Refused by the daemon too, whatever the flags are at this moment.
    for (what, r) in [("a new file", std::fs::write(to.join("c"), "x")), ("a's content", std::fs::OpenOptions::new().write(true).open(to.join("a")).map(|_| ()))] {
        assert_eq!(r.expect_err(what).raw_os_error(), Some(libc::EROFS), "{what}");
    }
    let ro = || std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().any(|l| l.split(' ').nth(4) == Some(s(&to)) && l.split(' ').nth(5).is_some_and(|o| o.split(',').any(|f| f == "ro")));
    for _ in 0..100 {
        if ro() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ro(), "the --at view was left read-write");
    x.unmount();
    // The daemon removes its temporary store as it exits.
    let at_left = || -> Vec<String> { std::fs::read_dir(store.parent().unwrap()).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.contains(".at-")).collect() };
    for _ in 0..100 {
        if at_left().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(at_left().is_empty(), "{:?}", at_left());
    // The store's own live tree is untouched.
    m.mount_again();
    assert_eq!(std::fs::read_to_string(m.p("a")).unwrap(), "two\n");
    m.unmount_checked();
    fsck_clean(&store, false);
}
