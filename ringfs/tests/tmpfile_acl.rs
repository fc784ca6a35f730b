//! O_TMPFILE and POSIX ACLs on real mounts: the POSIX-gaps reproductions
//! (fsprobe, LTP openat03/open14, setfacl) made assertions. Each runs on a
//! `--memory` and a `--store` mount, in a synced directory, a local-only
//! one (`--ignore cache --native-roots off`) and a native root's host tree
//! served by the daemon; scripts/test.sh runs this file again on /dev/fuse,
//! without passthrough and with everything local-only. ACL scripts run the
//! same commands on the host's ext4 (the harness's host directory) and
//! compare what getfacl, stat and an unprivileged reader see.
//! `RINGFS_TEST_RAW_DIR=1` runs it all against a plain directory.

mod common;

use common::*;
use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// The workspace directories the tests use: `synced` and `cache` (local-only).
const DIRS: [&str; 2] = ["synced", "cache"];

fn mount(backend: Backend, name: &str) -> TestMount {
    TestMount::builder(backend)
        .args(["--ignore", "cache", "--native-roots", "off", "--commit-interval-ms", "100"])
        .name(name)
        .mount()
}

/// A mount whose `cache` is a native root (`rooted`: bind-mounted; else
/// unrooted, its host tree served by the daemon). None where native roots
/// cannot be made (raw mode, `--native-roots off` in the environment).
fn mount_root(backend: Backend, name: &str, rooted: bool) -> Option<TestMount> {
    if !native_roots_possible() {
        return None;
    }
    let m = TestMount::builder(backend).args(["--ignore", "cache", "--commit-interval-ms", "100"]).name(name).mount();
    fs::create_dir(m.p("synced")).unwrap();
    if rooted {
        make_native_root(&m, "cache");
    } else {
        make_unrooted_tree(&m, "cache");
    }
    Some(m)
}

fn status(m: &TestMount) -> serde_json::Value {
    let o = run_timeout(Command::new(RINGFS).args(["status", "--json"]).arg(m.path()), Duration::from_secs(20));
    assert!(o.status.success(), "ringfs status: {}", out_str(&o).1);
    serde_json::from_slice(&o.stdout).expect("status json")
}

/// Live inodes the daemon holds.
fn inodes(m: &TestMount) -> u64 {
    status(m)["store_stats"]["inodes"].as_u64().unwrap()
}

/// Inodes reachable by name from the mount's root (itself included).
fn reachable(m: &TestMount) -> u64 {
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![m.path().to_path_buf()];
    seen.insert(fs::symlink_metadata(m.path()).unwrap().ino());
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = fs::symlink_metadata(e.path()).unwrap();
            seen.insert(md.ino());
            if md.is_dir() {
                stack.push(e.path());
            }
        }
    }
    seen.len() as u64
}

fn fsck(m: &TestMount) {
    let o = run_timeout(Command::new(RINGFS).arg("fsck").arg("--store").arg(m.store_dir()), Duration::from_secs(120));
    let (so, se) = out_str(&o);
    assert!(o.status.success(), "ringfs fsck: {so}{se}");
}

fn fstat(fd: i32) -> libc::stat {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0, "fstat: {}", errno_name(errno()));
    st
}

fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn open_tmpfile(dir: &Path, flags: i32, mode: u32) -> Result<fs::File, i32> {
    let cd = cstr(dir);
    let fd = unsafe { libc::open(cd.as_ptr(), libc::O_TMPFILE | flags, mode) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(unsafe { fs::File::from_raw_fd(fd) })
    }
}

/// linkat(fd, "", AT_FDCWD, to, AT_EMPTY_PATH), or through /proc/self/fd (AT_SYMLINK_FOLLOW).
fn link_fd(f: &fs::File, to: &Path, proc: bool) -> Result<(), i32> {
    use std::os::fd::AsRawFd;
    let t = cstr(to);
    let r = if proc {
        let p = CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
        unsafe { libc::linkat(libc::AT_FDCWD, p.as_ptr(), libc::AT_FDCWD, t.as_ptr(), libc::AT_SYMLINK_FOLLOW) }
    } else {
        unsafe { libc::linkat(f.as_raw_fd(), c"".as_ptr(), libc::AT_FDCWD, t.as_ptr(), libc::AT_EMPTY_PATH) }
    };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

// ---------------------------------------------------------------------------------
// O_TMPFILE
// ---------------------------------------------------------------------------------

/// In `dir` (empty): an O_TMPFILE file is unnamed (nlink 0, no entry),
/// readable and writable; linkat (AT_EMPTY_PATH and /proc/self/fd) names
/// it; O_EXCL makes it unlinkable (ENOENT), as is an unlinked regular
/// file; one closed without a name leaves nothing.
fn tmpfile_checks(dir: &Path) {
    use std::os::fd::AsRawFd;
    let mut f = open_tmpfile(dir, libc::O_RDWR, 0o600).unwrap_or_else(|e| panic!("O_TMPFILE in {}: {}", dir.display(), errno_name(e)));
    f.write_all(b"first ").unwrap();
    let st = fstat(f.as_raw_fd());
    assert_eq!((st.st_nlink, st.st_mode), (0, libc::S_IFREG | 0o600), "an unnamed regular file");
    assert_eq!(names(dir), Vec::<String>::new(), "no entry before linkat");
    link_fd(&f, &dir.join("a"), false).unwrap_or_else(|e| panic!("linkat AT_EMPTY_PATH: {}", errno_name(e)));
    assert_eq!(fstat(f.as_raw_fd()).st_nlink, 1);
    assert_eq!(fs::metadata(dir.join("a")).unwrap().ino(), st.st_ino);
    f.write_all(b"second").unwrap();
    drop(f);
    assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "first second");

    let mut g = open_tmpfile(dir, libc::O_WRONLY, 0o644).unwrap();
    g.write_all(b"via proc").unwrap();
    link_fd(&g, &dir.join("b"), true).unwrap_or_else(|e| panic!("linkat /proc/self/fd: {}", errno_name(e)));
    assert_eq!(link_fd(&g, &dir.join("b"), true), Err(libc::EEXIST));
    drop(g);
    assert_eq!(fs::read_to_string(dir.join("b")).unwrap(), "via proc");

    let x = open_tmpfile(dir, libc::O_RDWR | libc::O_EXCL, 0o600).unwrap();
    assert_eq!(link_fd(&x, &dir.join("x"), true), Err(libc::ENOENT), "O_EXCL: never linkable");
    drop(x);
    fs::write(dir.join("u"), "u").unwrap();
    let u = fs::File::open(dir.join("u")).unwrap();
    fs::remove_file(dir.join("u")).unwrap();
    assert_eq!(link_fd(&u, &dir.join("u2"), true), Err(libc::ENOENT), "an unlinked file stays unlinked");
    drop(u);
    let mut junk = open_tmpfile(dir, libc::O_RDWR, 0o600).unwrap();
    junk.write_all(&[7u8; 100_000]).unwrap();
    junk.sync_all().unwrap();
    drop(junk);
    assert_eq!(names(dir), vec!["a", "b"], "unnamed files leave nothing");
    let mut s = String::new();
    fs::File::open(dir.join("b")).unwrap().read_to_string(&mut s).unwrap();
    assert_eq!(s, "via proc");
}

fn tmpfile_case(backend: Backend) {
    let mut m = mount(backend, &format!("tmpfile-{}", backend.name()));
    for d in DIRS {
        fs::create_dir(m.p(d)).unwrap();
        tmpfile_checks(&m.p(d));
    }
    let local = (!m.is_raw()).then(|| PathBuf::from(status(&m)["local_only"]["dir"].as_str().unwrap()));
    let backed_locally = |p: &Path| local.as_ref().map(|l| l.join(fs::metadata(p).unwrap().ino().to_string()).exists());
    assert_eq!(backed_locally(&m.p("cache/a")), local.as_ref().map(|_| true), "a tmpfile in a local-only directory is local-only");
    if backed_locally(&m.p("synced/a")) == Some(false) {
        // Linked into a local-only directory from a synced one: it moves there.
        let t = open_tmpfile(&m.p("synced"), libc::O_RDWR, 0o600).unwrap();
        link_fd(&t, &m.p("cache/moved"), false).unwrap();
        assert_eq!(link_fd(&t, &m.p("synced/back"), false), Err(libc::EXDEV), "a named file stays on its side");
        drop(t);
        assert_eq!(backed_locally(&m.p("cache/moved")), Some(true), "its bytes moved to the local-only directory");
    }
    if backend == Backend::Store {
        m.remount();
        for d in DIRS {
            assert_eq!(names(&m.p(d)).into_iter().filter(|n| n != "moved").collect::<Vec<_>>(), vec!["a", "b"]);
            assert_eq!(fs::read_to_string(m.p(d).join("a")).unwrap(), "first second");
        }
        if !m.is_raw() {
            assert_eq!(inodes(&m), reachable(&m), "no unnamed inode came back");
        }
    }
}

#[test]
fn o_tmpfile_memory() {
    tmpfile_case(Backend::Memory);
}

#[test]
fn o_tmpfile_store() {
    tmpfile_case(Backend::Store);
}

/// In a native root's tree served by the daemon: the host's O_TMPFILE.
#[test]
fn o_tmpfile_in_host_tree() {
    let Some(m) = mount_root(Backend::Memory, "tmpfile-host", false) else { return };
    tmpfile_checks(&m.p("cache"));
}

/// An unnamed file fsynced (its bytes stored) when the daemon is killed
/// does not come back: recovery frees it, fsck is clean.
#[test]
fn o_tmpfile_after_crash() {
    if raw_mode() {
        return;
    }
    let mut m = mount(Backend::Store, "tmpfile-crash");
    for d in DIRS {
        fs::create_dir(m.p(d)).unwrap();
    }
    let mut held = Vec::new();
    for d in DIRS {
        let mut f = open_tmpfile(&m.p(d), libc::O_RDWR, 0o600).unwrap();
        f.write_all(&[b'z'; 300_000]).unwrap();
        f.sync_all().unwrap();
        held.push(f);
        let mut g = open_tmpfile(&m.p(d), libc::O_RDWR, 0o600).unwrap();
        g.write_all(b"named").unwrap();
        link_fd(&g, &m.p(d).join("named"), false).unwrap();
        g.sync_all().unwrap();
        held.push(g);
    }
    m.kill_daemon();
    drop(held);
    fsck(&m);
    m.mount_again();
    assert_eq!(inodes(&m), reachable(&m), "no unnamed inode came back");
    for d in DIRS {
        assert_eq!(names(&m.p(d)), vec!["named"]);
        assert_eq!(fs::read_to_string(m.p(d).join("named")).unwrap(), "named");
    }
    m.unmount_checked();
    fsck(&m);
    m.mount_again();
}

// ---------------------------------------------------------------------------------
// POSIX ACLs
// ---------------------------------------------------------------------------------

/// One step of an ACL scenario: a root script (`cd` into the directory
/// under test first), or a read or append by `nobody` of a path in it.
enum Step<'a> {
    Root(&'a str),
    NobodyReads(&'a str),
    NobodyAppends(&'a str),
    NobodyRuns(&'a str),
    /// Remount (durable store only; nothing on ext4).
    Remount,
}

fn outcome(o: &Output) -> String {
    let (so, se) = out_str(o);
    if o.status.success() {
        format!("ok: {so}")
    } else {
        // The message is the tool's; the failure is what matters.
        let denied = se.contains("Permission denied");
        format!("failed (permission denied: {denied}): {so}")
    }
}

/// Runs `steps` in `dir` (`$D` in scripts), as root or as nobody, and
/// collects what each one printed or whether it was refused.
fn run_steps(m: &mut TestMount, dir: &Path, steps: &[Step<'_>]) -> Vec<String> {
    let mut out = Vec::new();
    let d = dir.display().to_string();
    for (i, s) in steps.iter().enumerate() {
        let r = match s {
            Step::Root(script) => {
                let o = m.sh(&format!("cd '{d}'\nD='{d}'\n{script}"));
                m.check_ok(script, &o)
            }
            Step::NobodyReads(p) => outcome(&m.sh_as_nobody(&format!("cat '{d}/{p}'"))),
            Step::NobodyAppends(p) => outcome(&m.sh_as_nobody(&format!("echo more >> '{d}/{p}'"))),
            Step::NobodyRuns(script) => outcome(&m.sh_as_nobody(&format!("cd '{d}'\n{script}"))),
            Step::Remount => {
                if m.backend() == Backend::Store && dir.starts_with(m.path()) {
                    m.remount();
                }
                String::new()
            }
        };
        out.push(format!("step {i}: {r}"));
    }
    out
}

/// The scenario in the workspace directory `rel` and in a fresh directory on
/// the host's ext4: every step must give the same result.
fn same_as_ext4(m: &mut TestMount, rel: &str, steps: &[Step<'_>]) {
    let ours = m.p(rel);
    fs::create_dir_all(&ours).unwrap();
    let reference = m.host_tmp().join(format!("ext4-{}", rel.replace('/', "-")));
    fs::create_dir(&reference).unwrap();
    let want = run_steps(m, &reference, steps);
    let got = run_steps(m, &ours, steps);
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(g, w, "in {rel}: ringfs (left) differs from ext4 (right)");
    }
}

/// setfacl grants nobody read on a 0600 file; chmod moves the mask; the
/// mask limits the named entry; `setfacl -b` gives the mode back.
const ACL_READ: &[Step<'static>] = &[
    Step::Root("printf secret > f\nchmod 600 f\ngetfacl f\nls -l f | cut -d' ' -f1"),
    Step::NobodyReads("f"),
    Step::Root("setfacl -m u:nobody:r f\ngetfacl f\nstat -c %a f\nls -l f | cut -d' ' -f1\ngetfattr -d -m - f | sort"),
    Step::NobodyReads("f"),
    Step::NobodyAppends("f"),
    Step::Remount,
    Step::Root("getfacl f\nstat -c %a f"),
    Step::NobodyReads("f"),
    Step::Root("chmod 640 f\ngetfacl f"),
    Step::Root("chmod 600 f\ngetfacl f\nstat -c %a f"),
    Step::NobodyReads("f"),
    Step::Root("setfacl -m m::r f\ngetfacl f\nstat -c %a f"),
    Step::NobodyReads("f"),
    Step::Root("setfacl -m u::rwx,g::r,o::r f\ngetfacl f\nstat -c %a f"),
    Step::Root("setfacl -b f\ngetfacl f\nstat -c %a f\nls -l f | cut -d' ' -f1\ngetfattr -d -m - f | sort"),
    Step::NobodyReads("f"),
    Step::Root("setfacl -m u:nobody:rw f\nsetfacl -m u::rw,g::---,o::--- f\ngetfacl f\nsetfacl -x u:nobody f\ngetfacl f\nstat -c %a f"),
];

/// Default ACLs: what files, directories, fifos, O_CREAT with a mode and
/// O_TMPFILE get in a directory that has one (the umask ignored) and in
/// one that has none (the umask applies); nobody writes where it is granted.
const ACL_DEFAULT: &[Step<'static>] = &[
    Step::Root(
        "mkdir d e\n\
         setfacl -d -m u:nobody:rwx d\n\
         setfacl -d -m g::rx,o::- d\n\
         getfacl d\n\
         touch d/f\n\
         mkdir d/sub\n\
         touch d/sub/g\n\
         mkfifo d/p\n\
         ln -s f d/l\n\
         python3 -c 'import os; os.close(os.open(\"d/x\", os.O_CREAT | os.O_WRONLY, 0o640))'\n\
         python3 -c 'import os; fd = os.open(\"d\", os.O_TMPFILE | os.O_WRONLY, 0o666); os.link(\"/proc/self/fd/%d\" % fd, \"t\", dst_dir_fd=os.open(\"d\", os.O_RDONLY))'\n\
         touch e/plain\n\
         (umask 077; touch e/private; mkdir e/pdir)\n\
         (umask 0; mkdir e/open)\n\
         find d e ! -type l | sort | xargs getfacl\n\
         find d e | sort | xargs stat -c '%n %A'",
    ),
    Step::NobodyAppends("d/f"),
    Step::NobodyAppends("d/sub/g"),
    Step::NobodyAppends("e/plain"),
    Step::NobodyRuns("touch d/sub/by-nobody\nstat -c '%U %G %a' d/sub/by-nobody\ngetfacl d/sub/by-nobody"),
    Step::Remount,
    Step::Root("find d e ! -type l | sort | xargs getfacl\nsetfacl -k d\ngetfacl d\ntouch d/after\ngetfacl d/after"),
];

/// The kernel's ACL_KILL_SGID: an owner outside the file's group (no
/// CAP_FSETID) who sets an ACL loses S_ISGID; root keeps it.
const ACL_SGID: &[Step<'static>] = &[
    Step::Root("touch f r\nchown nobody:root f\nchmod 2770 f r\nstat -c %a f r"),
    Step::NobodyRuns("setfacl -m u:nobody:rwx f"),
    Step::Root("setfacl -m u:nobody:rwx r\nstat -c %a f r\ngetfacl f r"),
];

fn acl_case(backend: Backend, steps: &[Step<'static>]) {
    let mut m = mount(backend, &format!("acl-{}", backend.name()));
    for d in DIRS {
        same_as_ext4(&mut m, d, steps);
    }
}

#[test]
fn acl_grants_read_memory() {
    acl_case(Backend::Memory, ACL_READ);
}

#[test]
fn acl_grants_read_store() {
    acl_case(Backend::Store, ACL_READ);
}

#[test]
fn acl_default_inherited_memory() {
    acl_case(Backend::Memory, ACL_DEFAULT);
}

#[test]
fn acl_default_inherited_store() {
    acl_case(Backend::Store, ACL_DEFAULT);
}

#[test]
fn acl_kills_sgid_memory() {
    acl_case(Backend::Memory, ACL_SGID);
}

#[test]
fn acl_kills_sgid_store() {
    acl_case(Backend::Store, ACL_SGID);
}

/// In a native root's tree served by the daemon: the host's ACLs, with the
/// same semantics. (A memory store: a remount would bind-mount the tree,
/// and the kernel's ext4 would answer from then on.)
#[test]
fn acl_in_host_tree() {
    let Some(mut m) = mount_root(Backend::Memory, "acl-host", false) else { return };
    same_as_ext4(&mut m, "cache/read", ACL_READ);
    same_as_ext4(&mut m, "cache/default", ACL_DEFAULT);
    same_as_ext4(&mut m, "cache/sgid", ACL_SGID);
}

/// `cp -p` and `mv` keep ACLs across the local-only boundary, both ways,
/// also from and to another filesystem (the host's).
const ACL_ACROSS: &str = "mkdir -p synced cache\n\
     printf a > synced/a\n\
     setfacl -m u:nobody:rw synced/a\n\
     printf b > cache/b\n\
     setfacl -m u:nobody:r,m::rwx cache/b\n\
     mkdir synced/dd\n\
     setfacl -d -m u:nobody:rx synced/dd\n\
     touch synced/dd/x\n\
     printf h > \"$H/h\"\n\
     setfacl -m u:nobody:rwx \"$H/h\"\n\
     cp -p synced/a cache/a-copy\n\
     cp -p cache/b synced/b-copy\n\
     mv synced/a cache/a\n\
     mv cache/b synced/b\n\
     mv synced/dd cache/dd\n\
     cp -p \"$H/h\" synced/h\n\
     mv synced/h cache/h\n\
     mv cache/h \"$H/h-back\"\n\
     getfacl \"$H/h-back\" 2>/dev/null | tail -n +2\n\
     find synced cache ! -type l | sort | xargs getfacl";

fn across_case(m: &mut TestMount) {
    let h = m.host_tmp().join("other-fs");
    fs::create_dir_all(&h).unwrap();
    let script = format!("H='{}'\n{ACL_ACROSS}", h.display());
    let reference = m.host_tmp().join("ext4-across");
    fs::create_dir(&reference).unwrap();
    let want = m.sh_ok(&format!("cd '{}'\n{script}", reference.display()));
    fs::remove_file(h.join("h-back")).unwrap();
    fs::remove_file(h.join("h")).unwrap();
    let got = m.sh_ok(&script);
    assert_eq!(got, want, "ringfs (left) differs from ext4 (right)");
}

#[test]
fn acl_kept_across_boundary_memory() {
    let mut m = mount(Backend::Memory, "acl-across-memory");
    across_case(&mut m);
}

#[test]
fn acl_kept_across_boundary_store() {
    let mut m = mount(Backend::Store, "acl-across-store");
    across_case(&mut m);
    m.remount();
    let after = m.sh_ok("find synced cache ! -type l | sort | xargs getfacl");
    assert!(after.contains("user:nobody:rw-") && after.contains("default:user:nobody:r-x"), "{after}");
}

/// With `cache` a bind-mounted native root (the default for local-only
/// directories): `mv` copies across it, ACLs included.
#[test]
fn acl_kept_across_native_root() {
    let Some(mut m) = mount_root(Backend::Store, "acl-across-root", true) else { return };
    across_case(&mut m);
}
