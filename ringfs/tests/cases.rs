//! Field cases C01..C35 from ../shared/cases/CASES.md, each its own test, each on a
//! `--memory` and a `--store` mount. "Expect" is what ext4 does: run with
//! `RINGFS_TEST_RAW_DIR=1` to check the tests themselves against the host disk.

mod common;

use common::*;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// ---------------------------------------------------------------------------------
// small syscall helpers
// ---------------------------------------------------------------------------------

fn renameat2(a: &Path, b: &Path, flags: u32) -> Result<(), i32> {
    let (ca, cb) = (cstr(a), cstr(b));
    let r = unsafe {
        libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, ca.as_ptr(), libc::AT_FDCWD, cb.as_ptr(), flags)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

fn read(p: &Path) -> Vec<u8> {
    fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn read_s(p: &Path) -> String {
    String::from_utf8(read(p)).unwrap()
}

fn ino(p: &Path) -> u64 {
    fs::symlink_metadata(p).unwrap_or_else(|e| panic!("lstat {}: {e}", p.display())).ino()
}

/// Expect an io::Result to fail with exactly `want`.
#[track_caller]
fn expect_errno<T: std::fmt::Debug>(r: std::io::Result<T>, want: i32, what: &str) {
    match r {
        Ok(v) => panic!("{what}: expected {} but it succeeded ({v:?})", errno_name(want)),
        Err(e) => {
            let got = e.raw_os_error().unwrap_or(0);
            assert_eq!(got, want, "{what}: expected {} got {} ({e})", errno_name(want), errno_name(got));
        }
    }
}

fn cvt(r: libc::c_int) -> std::io::Result<libc::c_int> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cvt64(r: i64) -> std::io::Result<i64> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn fstat(fd: i32) -> libc::stat {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0, "fstat: {}", errno_name(errno()));
    st
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn list_dir(p: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(p).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn python(m: &TestMount, code: &str) -> String {
    m.sh_ok(&format!("python3 - <<'PYEOF'\n{code}\nPYEOF"))
}

fn python_nobody(m: &TestMount, code: &str) -> String {
    m.sh_nobody_ok(&format!("python3 - <<'PYEOF'\n{code}\nPYEOF"))
}

fn remount_if_store(m: &mut TestMount) -> bool {
    if m.backend() == Backend::Store {
        m.remount();
        true
    } else {
        false
    }
}

// ---------------------------------------------------------------------------------
// Rename
// ---------------------------------------------------------------------------------

fn c01(m: &mut TestMount) {
    let (a, b, c) = (m.p("a"), m.p("b"), m.p("c"));
    fs::write(&a, "A").unwrap();
    fs::write(&b, "B").unwrap();
    let (ia, ib) = (ino(&a), ino(&b));
    renameat2(&a, &b, libc::RENAME_EXCHANGE).unwrap_or_else(|e| panic!("RENAME_EXCHANGE: {}", errno_name(e)));
    assert_eq!(read_s(&a), "B");
    assert_eq!(read_s(&b), "A");
    assert_eq!((ino(&a), ino(&b)), (ib, ia), "exchange swaps inodes");

    // NOREPLACE onto an existing name: EEXIST, nothing changed.
    assert_eq!(renameat2(&a, &b, libc::RENAME_NOREPLACE), Err(libc::EEXIST), "NOREPLACE onto existing");
    assert_eq!(read_s(&a), "B");
    assert_eq!(read_s(&b), "A");
    // NOREPLACE onto a free name works.
    renameat2(&a, &c, libc::RENAME_NOREPLACE).unwrap();
    assert!(!a.exists());
    assert_eq!(read_s(&c), "B");
    // EXCHANGE with a missing target: ENOENT, nothing changed.
    assert_eq!(renameat2(&c, &a, libc::RENAME_EXCHANGE), Err(libc::ENOENT), "EXCHANGE with missing target");
    assert_eq!(read_s(&c), "B");
    // EXCHANGE a file with a directory (different types) across directories.
    fs::create_dir(m.p("d")).unwrap();
    fs::write(m.p("d/inner"), "I").unwrap();
    renameat2(&c, &m.p("d"), libc::RENAME_EXCHANGE).unwrap();
    assert!(m.p("c").is_dir());
    assert_eq!(read_s(&m.p("c/inner")), "I");
    assert_eq!(read_s(&m.p("d")), "B");
    // Both flags together are invalid.
    assert_eq!(
        renameat2(&b, &m.p("d"), libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE),
        Err(libc::EINVAL),
        "EXCHANGE|NOREPLACE"
    );
    if remount_if_store(m) {
        assert_eq!(read_s(&m.p("b")), "A");
        assert_eq!(read_s(&m.p("d")), "B");
        assert_eq!(read_s(&m.p("c/inner")), "I");
    }
}

fn c02(m: &mut TestMount) {
    let out = m.sh_ok(
        "touch f1; ln f1 L; rm L; touch f2; i2=$(stat -c %i f2); ln f1 L; mv f2 L\n\
         test ! -e f2\n\
         echo \"$i2 $(stat -c %i L) $(stat -c %h f1) $(stat -c %h L)\"",
    );
    let v: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(v[0], v[1], "L must be f2's inode");
    assert_eq!(v[2], "1", "f1 link count back to 1");
    assert_eq!(v[3], "1", "L (ex-f2) link count 1");
    if remount_if_store(m) {
        let out = m.sh_ok("echo $(stat -c %i L) $(stat -c %h f1)");
        let w: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(w[0], v[1]);
        assert_eq!(w[1], "1");
    }
}

fn c03(m: &mut TestMount) {
    m.sh_ok(
        "git init -q r && cd r && git commit -q --allow-empty -m x\n\
         test \"$(git log --oneline | wc -l)\" = 1\n\
         git commit -q --allow-empty -m y\n\
         test \"$(git rev-list --count HEAD)\" = 2\n\
         git fsck --no-progress 2>&1\n\
         ! ls .git/*.lock 2>/dev/null",
    );
    // The same pattern by hand: write a temp file, rename over the target, repeatedly.
    for i in 0..20 {
        fs::write(m.p("t.tmp"), format!("v{i}")).unwrap();
        fs::rename(m.p("t.tmp"), m.p("t")).unwrap();
        assert_eq!(read_s(&m.p("t")), format!("v{i}"));
    }
    assert!(!m.p("t.tmp").exists());
    if remount_if_store(m) {
        assert_eq!(read_s(&m.p("t")), "v19");
        m.sh_ok("cd r && test \"$(git rev-list --count HEAD)\" = 2 && git fsck --no-progress");
    }
}

fn c04(m: &mut TestMount) {
    m.sh_ok(
        "mkdir -p a/node_modules/x; echo data > a/node_modules/x/f; mv a/node_modules b\n\
         test -f b/x/f && test \"$(cat b/x/f)\" = data && test ! -e a/node_modules\n\
         ls b/x >/dev/null",
    );
    // Directly with rename(2): never EXDEV inside one mount, between paths that may be
    // synced (src) and local-only (node_modules, target, .venv) in either direction.
    let pairs = [
        ("src/d", "node_modules/d"),
        ("node_modules/d", "src/d2"),
        ("src/d2", "target/deep/d3"),
        ("target/deep/d3", ".venv/d4"),
        (".venv/d4", "top"),
    ];
    fs::create_dir_all(m.p("src/d/sub")).unwrap();
    fs::write(m.p("src/d/sub/file"), "payload").unwrap();
    for dir in ["node_modules", "target/deep", ".venv"] {
        fs::create_dir_all(m.p(dir)).unwrap();
    }
    for (from, to) in pairs {
        fs::rename(m.p(from), m.p(to)).unwrap_or_else(|e| panic!("rename {from} -> {to}: {e}"));
        // Lookups through the new name work at once; the old name is gone.
        assert_eq!(read_s(&m.p(&format!("{to}/sub/file"))), "payload", "after {from} -> {to}");
        assert!(!m.p(from).exists(), "{from} still exists");
        assert_eq!(list_dir(&m.p(&format!("{to}/sub"))), vec!["file"]);
    }
    // A file across the same boundaries.
    fs::write(m.p("node_modules/pkg.json"), "{}").unwrap();
    fs::rename(m.p("node_modules/pkg.json"), m.p("src/pkg.json")).unwrap();
    fs::rename(m.p("src/pkg.json"), m.p("target/pkg.json")).unwrap();
    assert_eq!(read_s(&m.p("target/pkg.json")), "{}");
    if remount_if_store(m) {
        assert_eq!(read_s(&m.p("top/sub/file")), "payload");
        assert_eq!(read_s(&m.p("b/x/f")), "data\n");
    }
}

// ---------------------------------------------------------------------------------
// Open, unlink, permissions at open time
// ---------------------------------------------------------------------------------

fn c05(m: &mut TestMount) {
    for i in 0..5 {
        let p = m.p(&format!("gone{i}"));
        let mut f = File::create(&p).unwrap();
        f.write_all(&vec![b'z'; 1000 * (i + 1)]).unwrap();
        drop(f);
        fs::remove_file(&p).unwrap();
    }
    // Also: written, fsynced, closed, unlinked.
    {
        let mut f = File::create(m.p("synced")).unwrap();
        f.write_all(b"x").unwrap();
        f.sync_all().unwrap();
    }
    fs::remove_file(m.p("synced")).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    for i in 0..5 {
        expect_errno(fs::metadata(m.p(&format!("gone{i}"))), libc::ENOENT, "stat of removed file");
    }
    expect_errno(fs::metadata(m.p("synced")), libc::ENOENT, "stat of removed fsynced file");
    assert!(list_dir(m.path()).iter().all(|n| !n.starts_with("gone") && n != "synced"));
    let o = m.sh("ls gone0");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("No such file"), "{o:?}");
    if remount_if_store(m) {
        let names = list_dir(m.path());
        assert!(names.iter().all(|n| !n.starts_with("gone") && n != "synced"), "came back: {names:?}");
    }
}

fn c06(m: &mut TestMount) {
    let dir = m.p("d");
    fs::create_dir(&dir).unwrap();
    let p = dir.join("f");
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&p).unwrap();
    let fd = f.as_raw_fd();
    (&f).write_all(b"hello").unwrap();
    fs::remove_file(&p).unwrap();
    let st = fstat(fd);
    assert_eq!(st.st_nlink, 0, "nlink of unlinked open file");
    assert_eq!(st.st_size, 5);
    f.set_len(3).unwrap();
    cvt(unsafe { libc::fchmod(fd, 0o600) }).expect("fchmod on unlinked fd");
    let st = fstat(fd);
    assert_eq!(st.st_mode & 0o7777, 0o600);
    assert_eq!(st.st_size, 3);
    let mut buf = [0u8; 16];
    let n = f.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"hel");
    assert_eq!(list_dir(&dir), Vec::<String>::new(), "ls -A of the parent");
    let ls = m.sh_ok("ls -A d");
    assert_eq!(ls, "");
    fs::remove_dir(&dir).expect("rmdir of the emptied parent while the fd is open");
    // The fd still works after its directory is gone.
    f.write_at(b"LO", 3).unwrap();
    let n = f.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"helLO");
    drop(f);
    assert!(!dir.exists());
    if remount_if_store(m) {
        assert!(!m.p("d").exists());
        assert_eq!(list_dir(m.path()), Vec::<String>::new());
    }
}

fn c07(m: &mut TestMount) {
    let dir = m.p("tmpdir");
    fs::create_dir(&dir).unwrap();
    let cd = cstr(&dir);
    let fd = unsafe { libc::open(cd.as_ptr(), libc::O_TMPFILE | libc::O_RDWR, 0o600) };
    assert!(fd >= 0, "O_TMPFILE: {}", errno_name(errno()));
    let f = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    (&f).write_all(b"tmpfile data").unwrap();
    assert_eq!(fstat(fd).st_nlink, 0);
    assert_eq!(list_dir(&dir), Vec::<String>::new(), "O_TMPFILE is invisible before linkat");
    let proc_path = CString::new(format!("/proc/self/fd/{fd}")).unwrap();
    let target = cstr(&dir.join("linked"));
    cvt(unsafe {
        libc::linkat(libc::AT_FDCWD, proc_path.as_ptr(), libc::AT_FDCWD, target.as_ptr(), libc::AT_SYMLINK_FOLLOW)
    })
    .expect("linkat of O_TMPFILE");
    assert_eq!(fstat(fd).st_nlink, 1);
    drop(f);
    assert_eq!(read_s(&dir.join("linked")), "tmpfile data");
    // A second O_TMPFILE closed without linkat leaves nothing behind.
    let fd2 = unsafe { libc::open(cd.as_ptr(), libc::O_TMPFILE | libc::O_WRONLY, 0o600) };
    assert!(fd2 >= 0, "second O_TMPFILE: {}", errno_name(errno()));
    unsafe {
        libc::write(fd2, b"junk".as_ptr() as *const _, 4);
        libc::close(fd2);
    }
    assert_eq!(list_dir(&dir), vec!["linked"]);
    if remount_if_store(m) {
        assert_eq!(read_s(&m.p("tmpdir/linked")), "tmpfile data");
        assert_eq!(list_dir(&m.p("tmpdir")), vec!["linked"]);
    }
}

fn c08(m: &mut TestMount) {
    m.nobody_dir("u");
    python_nobody(
        m,
        r#"
import os
os.chdir("u")
fd = os.open("obj", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
assert os.write(fd, b"blob 4\0data") == 11
os.fsync(fd)
os.close(fd)
st = os.stat("obj")
assert st.st_mode & 0o777 == 0o444, oct(st.st_mode)
assert open("obj", "rb").read() == b"blob 4\0data"
# O_CREAT|O_RDWR with 0444 too (tar, cp --preserve)
fd = os.open("obj2", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o400)
os.write(fd, b"abc"); os.lseek(fd, 0, 0)
assert os.read(fd, 3) == b"abc"
os.close(fd)
# Re-opening for write is refused once it is read-only (not root).
try:
    os.open("obj", os.O_WRONLY)
    raise SystemExit("reopen of 0444 file for writing succeeded")
except PermissionError:
    pass
"#,
    );
    // git writes loose objects exactly this way; tar extracts read-only files so.
    m.sh_nobody_ok(
        "cd u && git init -q g && cd g && echo hi > f && git add f && git commit -q -m m && git fsck --no-progress\n\
         cd .. && mkdir src && echo ro > src/ro && chmod 0444 src/ro && tar cf t.tar src && mkdir x && tar xf t.tar -C x\n\
         test \"$(cat x/src/ro)\" = ro && test \"$(stat -c %a x/src/ro)\" = 444",
    );
    if remount_if_store(m) {
        assert_eq!(read(&m.p("u/obj")), b"blob 4\0data");
        assert_eq!(fs::metadata(m.p("u/obj")).unwrap().mode() & 0o777, 0o444);
    }
}

fn c09(m: &mut TestMount) {
    m.nobody_dir("u");
    // As the owner (not root): rights checked at open time stay with the fd.
    python_nobody(
        m,
        r#"
import os
os.chdir("u")
fd = os.open("f", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
assert os.write(fd, b"0123456789") == 10
os.chmod("f", 0o444)
os.ftruncate(fd, 4)
os.fchmod(fd, 0o400)
st = os.fstat(fd)
assert st.st_size == 4, st
assert st.st_mode & 0o777 == 0o400, oct(st.st_mode)
assert os.pwrite(fd, b"ab", 0) == 2
os.close(fd)
assert open("f", "rb").read() == b"ab23"
"#,
    );
    // Same as root through the fd, in-process.
    let p = m.p("r");
    let f = OpenOptions::new().read(true).write(true).create(true).open(&p).unwrap();
    (&f).write_all(b"0123456789").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o444)).unwrap();
    f.set_len(6).unwrap();
    cvt(unsafe { libc::fchmod(f.as_raw_fd(), 0o640) }).unwrap();
    assert_eq!(fstat(f.as_raw_fd()).st_size, 6);
    drop(f);
    let md = fs::metadata(&p).unwrap();
    assert_eq!(md.mode() & 0o777, 0o640);
    assert_eq!(md.len(), 6);
    if remount_if_store(m) {
        assert_eq!(read(&m.p("u/f")), b"ab23");
        assert_eq!(fs::metadata(m.p("u/f")).unwrap().mode() & 0o777, 0o400);
    }
}

fn c10(m: &mut TestMount) {
    m.nobody_dir("u");
    m.sh_nobody_ok("cd u && echo foo >t; chmod a-w t; cp t t2; test \"$(cat t2)\" = foo");
    python_nobody(
        m,
        r#"
import os
os.chdir("u")
data = os.urandom(300000)
with open("big", "wb") as f: f.write(data)
os.chmod("big", 0o444)
src = os.open("big", os.O_RDONLY)
dst = os.open("copy", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
off = 0
while off < len(data):
    n = os.copy_file_range(src, dst, len(data) - off, off, off)
    assert n > 0, n
    off += n
os.close(src); os.close(dst)
assert open("copy", "rb").read() == data
"#,
    );
    m.sh_nobody_ok("cd u && cp big big2 && cmp big big2 && cp --reflink=auto t t3 && test \"$(cat t3)\" = foo");
    if remount_if_store(m) {
        assert_eq!(read_s(&m.p("u/t2")), "foo\n");
        assert_eq!(read(&m.p("u/copy")), read(&m.p("u/big")));
    }
}

fn c11(m: &mut TestMount) {
    m.sh_ok(
        "git init -q r && test \"$(stat -c %a r/.git/config)\" = 644 && git -C r config core.bare | grep -q false\n\
         git -C r config user.x y && test \"$(git -C r config user.x)\" = y",
    );
    let p = m.p("f");
    fs::write(&p, "x").unwrap();
    for mode in [0o640, 0o755, 0o600, 0o4755, 0o2750, 0o1777, 0o000, 0o644] {
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, mode, "mode {mode:o}");
    }
    fs::set_permissions(&p, fs::Permissions::from_mode(0o751)).unwrap();
    // As a non-root owner.
    m.nobody_dir("u");
    m.sh_nobody_ok("cd u && touch g && chmod 0604 g && test \"$(stat -c %a g)\" = 604 && mkdir dd && chmod 0700 dd && test \"$(stat -c %a dd)\" = 700");
    let check = |m: &TestMount| {
        assert_eq!(fs::metadata(m.p("f")).unwrap().mode() & 0o7777, 0o751);
        assert_eq!(fs::metadata(m.p("u/g")).unwrap().mode() & 0o7777, 0o604);
        assert_eq!(fs::metadata(m.p("u/dd")).unwrap().mode() & 0o7777, 0o700);
    };
    check(m);
    if remount_if_store(m) {
        check(m);
        m.sh_ok("test \"$(git -C r config user.x)\" = y");
    }
}

fn c12(m: &mut TestMount) {
    let p = m.p("w");
    fs::write(&p, "contents").unwrap();
    let f = OpenOptions::new().read(true).custom_flags(libc::O_TRUNC).open(&p).expect("open(O_RDONLY|O_TRUNC)");
    drop(f);
    assert_eq!(fs::metadata(&p).unwrap().len(), 0, "Linux/ext4 truncates on O_RDONLY|O_TRUNC");
    // Non-root: allowed on a file it may write, EACCES on one it may not.
    m.nobody_dir("u");
    python_nobody(
        m,
        r#"
import os
os.chdir("u")
open("mine", "w").write("abc")
fd = os.open("mine", os.O_RDONLY | os.O_TRUNC); os.close(fd)
assert os.stat("mine").st_size == 0
open("ro", "w").write("abc"); os.chmod("ro", 0o444)
try:
    os.open("ro", os.O_RDONLY | os.O_TRUNC)
    raise SystemExit("O_TRUNC on a read-only file succeeded")
except PermissionError:
    pass
assert os.stat("ro").st_size == 3
"#,
    );
}

fn c13(m: &mut TestMount) {
    m.nobody_dir("u");
    let out = m.sh_nobody_ok(
        "cd u && touch f && mkdir d && mkfifo p && ln -s f s\n\
         python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.bind(\"sock\")'\n\
         for x in f d p s sock; do echo \"$x $(stat -c '%u %g' $x)\"; done",
    );
    for line in out.lines() {
        let v: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((v[1], v[2]), ("65534", "65534"), "owner of {}", v[0]);
    }
    assert_eq!(out.lines().count(), 5);
    // Setgid directories pass their group on (and the bit to subdirectories).
    let sg = m.p("sg");
    fs::create_dir(&sg).unwrap();
    std::os::unix::fs::chown(&sg, Some(0), Some(4242)).unwrap();
    fs::set_permissions(&sg, fs::Permissions::from_mode(0o2777)).unwrap();
    assert_eq!(fs::metadata(&sg).unwrap().mode() & 0o7777, 0o2777);
    let out = m.sh_nobody_ok(
        "cd sg && touch f && mkdir d && mkfifo p && ln -s f s\n\
         for x in f d p s; do echo \"$x $(stat -c '%u %g %a' $x)\"; done",
    );
    for line in out.lines() {
        let v: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((v[1], v[2]), ("65534", "4242"), "owner/group of sg/{}", v[0]);
        if v[0] == "d" {
            assert!(v[3].starts_with('2') && v[3].len() == 4, "subdir of setgid dir keeps S_ISGID: {}", v[3]);
        }
    }
    // Root creating files: root-owned.
    fs::write(m.p("rootfile"), "").unwrap();
    let md = fs::metadata(m.p("rootfile")).unwrap();
    assert_eq!((md.uid(), md.gid()), (0, 0));
    if remount_if_store(m) {
        let md = fs::metadata(m.p("sg/f")).unwrap();
        assert_eq!((md.uid(), md.gid()), (65534, 4242));
        let md = fs::symlink_metadata(m.p("u/s")).unwrap();
        assert_eq!((md.uid(), md.gid()), (65534, 65534));
    }
}

// ---------------------------------------------------------------------------------
// Identity
// ---------------------------------------------------------------------------------

fn c14(m: &mut TestMount) {
    let out = m.sh_ok("echo 1 >a; ln a b; echo 2 >>b; cat a");
    assert_eq!(out, "1\n2\n");
    assert_eq!(ino(&m.p("a")), ino(&m.p("b")));
    assert_eq!(fs::metadata(m.p("a")).unwrap().nlink(), 2);
    if remount_if_store(m) {
        assert_eq!(ino(&m.p("a")), ino(&m.p("b")));
        assert_eq!(fs::metadata(m.p("b")).unwrap().nlink(), 2);
        assert_eq!(read_s(&m.p("b")), "1\n2\n");
    }
    let out = m.sh_ok("chmod 600 b; stat -c %a a; rm b; stat -c %h a");
    assert_eq!(out, "600\n1\n");
    // pnpm/bun/cargo pattern: many links to one file across directories, as non-root.
    m.nobody_dir("u");
    m.sh_nobody_ok(
        "cd u && mkdir -p store pkg1/lib pkg2/lib && echo content > store/x\n\
         for i in $(seq 1 20); do ln store/x pkg1/lib/x$i; ln store/x pkg2/lib/x$i; done\n\
         test \"$(stat -c %h store/x)\" = 41\n\
         echo more >> pkg2/lib/x7 && grep -q more pkg1/lib/x3 && grep -q more store/x\n\
         rm pkg1/lib/x1 && test \"$(stat -c %h store/x)\" = 40",
    );
    if remount_if_store(m) {
        assert_eq!(fs::metadata(m.p("u/store/x")).unwrap().nlink(), 40);
        assert_eq!(ino(&m.p("u/store/x")), ino(&m.p("u/pkg2/lib/x20")));
    }
}

fn c15(m: &mut TestMount) {
    fs::create_dir(m.p("dir")).unwrap();
    fs::write(m.p("dir/f"), "x").unwrap();
    let (idir, ifile) = (ino(&m.p("dir")), ino(&m.p("dir/f")));
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(ino(&m.p("dir/f")), ifile, "same inode over time");
    // ls -i agrees with stat.
    let ls = m.sh_ok("ls -i dir/f | awk '{print $1}'");
    assert_eq!(ls.trim(), ifile.to_string());
    fs::rename(m.p("dir/f"), m.p("g")).unwrap();
    assert_eq!(ino(&m.p("g")), ifile, "same inode after rename");
    fs::rename(m.p("dir"), m.p("dir2")).unwrap();
    assert_eq!(ino(&m.p("dir2")), idir);
    fs::hard_link(m.p("g"), m.p("dir2/h")).unwrap();
    assert_eq!(ino(&m.p("dir2/h")), ifile);
    // readdir d_ino matches stat.
    let ls = m.sh_ok("ls -i dir2 | awk '{print $1}'");
    assert_eq!(ls.trim(), ifile.to_string());
    // Inode numbers are distinct across live files.
    let mut seen = std::collections::HashSet::new();
    for i in 0..50 {
        fs::write(m.p(&format!("n{i}")), "").unwrap();
        assert!(seen.insert(ino(&m.p(&format!("n{i}")))), "duplicate inode number");
    }
    assert!(!seen.contains(&ifile) && !seen.contains(&idir));
    if remount_if_store(m) {
        assert_eq!(ino(&m.p("g")), ifile, "same inode after remount");
        assert_eq!(ino(&m.p("dir2/h")), ifile);
        assert_eq!(ino(&m.p("dir2")), idir);
        let ls = m.sh_ok("ls -i g | awk '{print $1}'");
        assert_eq!(ls.trim(), ifile.to_string());
    }
}

// ---------------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------------

fn c16(m: &mut TestMount) {
    const T2021: i64 = 1622548800; // 2021-06-01 12:00:00 UTC
    m.sh_ok("touch -d '2021-06-01 12:00 UTC' f; touch -a f");
    let check = |m: &TestMount| {
        let md = fs::metadata(m.p("f")).unwrap();
        assert_eq!(md.mtime(), T2021, "mtime unchanged by touch -a");
        assert!((md.atime() - now_secs()).abs() < 300, "atime is now: {}", md.atime());
        assert!(md.ctime() > 1_600_000_000, "ctime plausible: {}", md.ctime());
    };
    check(m);
    // utimensat: atime OMIT, mtime NOW.
    let p = cstr(&m.p("g"));
    fs::write(m.p("g"), "").unwrap();
    let set = [
        libc::timespec { tv_sec: 1_000_000_000, tv_nsec: 5 },
        libc::timespec { tv_sec: 1_100_000_000, tv_nsec: 7 },
    ];
    cvt(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), set.as_ptr(), 0) }).unwrap();
    let md = fs::metadata(m.p("g")).unwrap();
    assert_eq!((md.atime(), md.mtime()), (1_000_000_000, 1_100_000_000));
    let ts = [
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
    ];
    cvt(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), ts.as_ptr(), 0) }).unwrap();
    let md = fs::metadata(m.p("g")).unwrap();
    assert_eq!(md.atime(), 1_000_000_000, "UTIME_OMIT keeps atime");
    assert!((md.mtime() - now_secs()).abs() < 300, "UTIME_NOW sets mtime to now: {}", md.mtime());
    // Both OMIT: nothing changes. futimens through an fd.
    let f = OpenOptions::new().write(true).open(m.p("g")).unwrap();
    let ts = [
        libc::timespec { tv_sec: 1_200_000_000, tv_nsec: 0 },
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
    ];
    let before = fs::metadata(m.p("g")).unwrap().mtime();
    cvt(unsafe { libc::futimens(f.as_raw_fd(), ts.as_ptr()) }).unwrap();
    drop(f);
    let md = fs::metadata(m.p("g")).unwrap();
    assert_eq!(md.atime(), 1_200_000_000);
    assert_eq!(md.mtime(), before);
    // A fresh file never has a 1970 or 2004 timestamp.
    fs::write(m.p("h"), "x").unwrap();
    let md = fs::metadata(m.p("h")).unwrap();
    for t in [md.atime(), md.mtime(), md.ctime()] {
        assert!((t - now_secs()).abs() < 300, "new file time {t}");
    }
    // Nanoseconds survive.
    m.sh_ok("touch -d '2022-02-02 02:02:02.123456789 UTC' ns");
    assert_eq!(fs::metadata(m.p("ns")).unwrap().mtime_nsec(), 123456789);
    if remount_if_store(m) {
        check(m);
        let md = fs::metadata(m.p("g")).unwrap();
        assert_eq!(md.atime(), 1_200_000_000);
        assert_eq!(fs::metadata(m.p("ns")).unwrap().mtime_nsec(), 123456789);
    }
}

// ---------------------------------------------------------------------------------
// Locks and sqlite
// ---------------------------------------------------------------------------------

fn c17(m: &mut TestMount) {
    m.sh_ok(
        "sqlite3 t.db 'create table t(x); insert into t values(1)'\n\
         test \"$(sqlite3 t.db 'select * from t')\" = 1",
    );
    // POSIX byte-range locks conflict across processes and not across ranges.
    python(
        m,
        r#"
import fcntl, os, subprocess, sys
fd = os.open("locks", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"\0" * 100)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
child = r'''
import fcntl, os, sys, errno
fd = os.open("locks", os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 5)
    sys.exit("overlapping lock granted")
except OSError as e:
    assert e.errno in (errno.EAGAIN, errno.EACCES), e
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 20)   # disjoint range: fine
fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 10, 40)
import struct
# F_GETLK reports the holder's pid
lk = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 10, 0)
r = fcntl.fcntl(fd, fcntl.F_GETLK, lk)
t, w, s, l, pid = struct.unpack("hhqqi", r)
assert t == fcntl.F_WRLCK and pid == int(sys.argv[1]), (t, pid)
print("child ok")
'''
r = subprocess.run([sys.executable, "-c", child, str(os.getpid())], capture_output=True, text=True)
assert r.returncode == 0 and "child ok" in r.stdout, (r.stdout, r.stderr)
fcntl.lockf(fd, fcntl.LOCK_UN, 10, 0)
r = subprocess.run([sys.executable, "-c", "import fcntl,os; fd=os.open('locks',os.O_RDWR); fcntl.lockf(fd, fcntl.LOCK_EX|fcntl.LOCK_NB, 10, 0)"])
assert r.returncode == 0
"#,
    );
    if remount_if_store(m) {
        m.sh_ok("test \"$(sqlite3 t.db 'select * from t')\" = 1");
    }
}

fn c18(m: &mut TestMount) {
    m.sh_ok(
        "touch l\n\
         exec 9>l; flock -x 9\n\
         if flock -n l true; then echo 'flock -n succeeded while held' >&2; exit 1; fi\n\
         flock -u 9\n\
         flock -n l true\n\
         exec 9>&-",
    );
    // Two open file descriptions in one process conflict too.
    let a = File::create(m.p("l2")).unwrap();
    let b = File::open(m.p("l2")).unwrap();
    cvt(unsafe { libc::flock(a.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }).unwrap();
    let r = unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert!(r < 0 && errno() == libc::EWOULDBLOCK, "second flock: r={r} {}", errno_name(errno()));
    let r = unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    assert!(r < 0, "shared flock while exclusive held");
    cvt(unsafe { libc::flock(a.as_raw_fd(), libc::LOCK_UN) }).unwrap();
    cvt(unsafe { libc::flock(b.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) }).unwrap();
    cvt(unsafe { libc::flock(a.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) }).unwrap();
    drop(a);
    drop(b);
    // cargo build in the mount (cargo locks its target dir with flock).
    m.sh_ok(
        "cargo new -q --vcs none hello 2>&1 && cd hello && cargo build -q --offline 2>&1 && ./target/debug/hello | grep -q 'Hello, world'",
    );
}

fn c19(m: &mut TestMount) {
    let out = python(
        m,
        r#"
import sqlite3, subprocess, sys
db = "two.db"
c = sqlite3.connect(db); c.execute("create table t(w int, i int)"); c.commit(); c.close()
writer = r'''
import sqlite3, sys
w = int(sys.argv[1])
c = sqlite3.connect("two.db", timeout=60, isolation_level=None)
c.execute("pragma busy_timeout=60000")
for i in range(1000):
    c.execute("begin immediate")
    c.execute("insert into t values(?, ?)", (w, i))
    c.execute("commit")
c.close()
'''
ps = [subprocess.Popen([sys.executable, "-c", writer, str(w)]) for w in (1, 2)]
rc = [p.wait() for p in ps]
assert rc == [0, 0], rc
c = sqlite3.connect(db)
n = c.execute("select count(*) from t").fetchone()[0]
ok = c.execute("pragma integrity_check").fetchone()[0]
per = c.execute("select w, count(distinct i) from t group by w order by w").fetchall()
print(n, ok, per)
"#,
    );
    assert_eq!(out.trim(), "2000 ok [(1, 1000), (2, 1000)]");
    if remount_if_store(m) {
        let o = m.sh_ok("sqlite3 two.db 'select count(*) from t; pragma integrity_check'");
        assert_eq!(o, "2000\nok\n");
    }
}

fn c20(m: &mut TestMount) {
    let out = python(
        m,
        r#"
import sqlite3, subprocess, sys, os
a = sqlite3.connect("wal.db", isolation_level=None)
assert a.execute("pragma journal_mode=wal").fetchone()[0] == "wal"
a.execute("create table t(x)")
b = sqlite3.connect("wal.db", isolation_level=None)
a.execute("insert into t values(1)")
assert b.execute("select count(*) from t").fetchone()[0] == 1
assert os.path.exists("wal.db-shm") and os.path.exists("wal.db-wal")
# b reads inside a transaction while a writes: snapshot isolation via the -shm index.
b.execute("begin")
assert b.execute("select count(*) from t").fetchone()[0] == 1
for i in range(100):
    a.execute("insert into t values(?)", (i,))
assert b.execute("select count(*) from t").fetchone()[0] == 1
b.execute("commit")
assert b.execute("select count(*) from t").fetchone()[0] == 101
b.execute("insert into t values(-1)")
assert a.execute("select count(*) from t").fetchone()[0] == 102
# A second process sees the data and writes too.
r = subprocess.run([sys.executable, "-c",
    "import sqlite3; c=sqlite3.connect('wal.db', isolation_level=None); c.execute('pragma busy_timeout=10000'); "
    "assert c.execute('select count(*) from t').fetchone()[0]==102; c.execute('insert into t values(7)'); print('ok')"],
    capture_output=True, text=True)
assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr)
assert a.execute("select count(*) from t").fetchone()[0] == 103
a.execute("pragma wal_checkpoint(truncate)")
print(a.execute("pragma integrity_check").fetchone()[0], b.execute("select count(*) from t").fetchone()[0])
b.close(); a.close()
"#,
    );
    assert_eq!(out.trim(), "ok 103");
    m.sh_ok("test \"$(sqlite3 wal.db 'pragma journal_mode; select count(*) from t')\" = \"$(printf 'wal\\n103')\"");
    if remount_if_store(m) {
        let o = m.sh_ok("sqlite3 wal.db 'select count(*) from t; pragma integrity_check'");
        assert_eq!(o, "103\nok\n");
    }
}

// ---------------------------------------------------------------------------------
// mmap, direct I/O
// ---------------------------------------------------------------------------------

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8)).collect()
}

fn c21(m: &mut TestMount) {
    let p = m.p("mapped");
    let f = OpenOptions::new().read(true).write(true).create(true).open(&p).unwrap();
    f.set_len(3 * 4096 + 100).unwrap();
    let data = pattern(3 * 4096 + 100, 7);
    {
        let mut map = unsafe { memmap2::MmapOptions::new().map_mut(&f) }.expect("MAP_SHARED rw");
        map.copy_from_slice(&data);
        // Coherence before msync: pread through the same and another fd sees it.
        let mut buf = vec![0u8; data.len()];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert!(buf == data, "pread on the mapping fd sees mmap writes");
        let g = File::open(&p).unwrap();
        let mut buf2 = vec![0u8; data.len()];
        g.read_exact_at(&mut buf2, 0).unwrap();
        assert!(buf2 == data, "pread via another fd sees mmap writes");
        // And the other way round: pwrite is visible in the mapping.
        f.write_all_at(b"PWRITE", 4096).unwrap();
        assert_eq!(&map[4096..4102], b"PWRITE");
        map.flush().expect("msync");
    }
    drop(f);
    let mut expect = data.clone();
    expect[4096..4102].copy_from_slice(b"PWRITE");
    assert!(read(&p) == expect, "content after msync+close");
    // A second process sees it.
    let o = m.sh_ok("sha256sum mapped | cut -c1-64");
    let o2 = m.sh_ok("cat mapped | sha256sum | cut -c1-64");
    assert_eq!(o, o2);
    if remount_if_store(m) {
        assert!(read(&m.p("mapped")) == expect, "content in the store after remount");
    }
}

fn c22(m: &mut TestMount) {
    // Written through write(2), then mapped shared read-only and read-write.
    let p = m.p("obj.o");
    fs::write(&p, pattern(10000, 3)).unwrap();
    let f = File::open(&p).unwrap();
    let map = unsafe { memmap2::Mmap::map(&f) }.expect("MAP_SHARED read-only map of a regular file");
    assert!(map[..] == pattern(10000, 3)[..]);
    drop(map);
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let mut map = unsafe { memmap2::MmapMut::map_mut(&f) }.expect("MAP_SHARED rw map");
    map[0] = b'!';
    map.flush().unwrap();
    drop(map);
    assert_eq!(read(&p)[0], b'!');
    // A just-created file, still open for writing by another fd.
    let w = File::create(m.p("fresh")).unwrap();
    (&w).write_all(&[1u8; 8192]).unwrap();
    let r = OpenOptions::new().read(true).write(true).open(m.p("fresh")).unwrap();
    let map = unsafe { memmap2::MmapMut::map_mut(&r) }.expect("map while another writer is open");
    assert_eq!(map[8191], 1);
    drop(map);
    drop(w);
    // exec of a binary copied into the mount (the loader maps it privately).
    fs::copy("/bin/true", m.p("true")).unwrap();
    fs::set_permissions(m.p("true"), fs::Permissions::from_mode(0o755)).unwrap();
    m.sh_ok("./true");
    // Native toolchain: compile and link with cc inside the mount when available.
    m.sh_ok(
        "if command -v cc >/dev/null; then printf 'int main(void){return 0;}\\n' > x.c && cc -o x x.c && ./x; fi",
    );
}

fn c23(m: &mut TestMount) {
    let out = m.sh_ok(
        "fio --name=c23 --filename=fio.dat --rw=randwrite --bs=4k --size=16m --direct=1 \
         --verify=crc32c --do_verify=1 --verify_fatal=1 --ioengine=psync --randseed=1234 2>&1",
    );
    assert!(out.contains("err= 0"), "fio output:\n{out}");
    assert_eq!(fs::metadata(m.p("fio.dat")).unwrap().len(), 16 << 20);
    // Aligned O_DIRECT from the application, by hand: write then read back.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .custom_flags(libc::O_DIRECT)
        .open(m.p("direct"))
        .expect("open O_DIRECT");
    let layout = std::alloc::Layout::from_size_align(65536, 4096).unwrap();
    let buf = unsafe { std::slice::from_raw_parts_mut(std::alloc::alloc_zeroed(layout), 65536) };
    buf.copy_from_slice(&pattern(65536, 9));
    assert_eq!(f.write_at(buf, 4096).unwrap(), 65536);
    buf.fill(0);
    assert_eq!(f.read_at(buf, 4096).unwrap(), 65536);
    assert!(buf[..] == pattern(65536, 9)[..]);
    unsafe { std::alloc::dealloc(buf.as_mut_ptr(), layout) };
    drop(f);
    let all = read(&m.p("direct"));
    assert_eq!(all.len(), 4096 + 65536);
    assert!(all[..4096].iter().all(|&b| b == 0));
    assert!(all[4096..] == pattern(65536, 9)[..]);
}

// ---------------------------------------------------------------------------------
// Sparse files, seek, fallocate
// ---------------------------------------------------------------------------------

fn c24(m: &mut TestMount) {
    m.sh_ok("truncate -s 1G f");
    let md = fs::metadata(m.p("f")).unwrap();
    assert_eq!(md.len(), 1 << 30);
    assert!(md.blocks() < 2048, "few blocks used: {}", md.blocks());
    let f = File::open(m.p("f")).unwrap();
    let mut buf = vec![1u8; 65536];
    for off in [0u64, 4096, 1 << 20, 512 << 20, (1 << 30) - 65536] {
        f.read_exact_at(&mut buf, off).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "zeros at {off}");
    }
    let n = f.read_at(&mut buf, (1 << 30) - 10).unwrap();
    assert_eq!(n, 10);
    let du: u64 = m.sh_ok("du -k f | cut -f1").trim().parse().unwrap();
    assert!(du < 1024, "du -k of a 1 GiB sparse file: {du}");
    drop(f);
    // Extend a file with data, then truncate up: old data kept, the rest zeros.
    fs::write(m.p("g"), b"head").unwrap();
    OpenOptions::new().write(true).open(m.p("g")).unwrap().set_len(100 << 20).unwrap();
    let g = File::open(m.p("g")).unwrap();
    let mut b4 = [0u8; 8];
    g.read_exact_at(&mut b4, 0).unwrap();
    assert_eq!(&b4, b"head\0\0\0\0");
    drop(g); // an open file would keep the mount busy across the remount
    if remount_if_store(m) {
        let md = fs::metadata(m.p("f")).unwrap();
        assert_eq!(md.len(), 1 << 30);
        assert!(md.blocks() < 2048, "few blocks used after remount: {}", md.blocks());
        assert_eq!(fs::metadata(m.p("g")).unwrap().len(), 100 << 20);
    }
}

fn c25(m: &mut TestMount) {
    let p = m.p("holey");
    fs::write(&p, vec![b'x'; 12288]).unwrap();
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let r = unsafe {
        libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 4096, 4096)
    };
    let content = {
        let mut v = vec![0u8; 12288];
        f.read_exact_at(&mut v, 0).unwrap();
        v
    };
    assert_eq!(fs::metadata(&p).unwrap().len(), 12288, "size unchanged");
    let mut expect = vec![b'x'; 12288];
    if r == 0 {
        expect[4096..8192].fill(0);
        assert!(content == expect, "middle reads zeros after punch");
    } else {
        let e = errno();
        assert_eq!(e, libc::EOPNOTSUPP, "punch hole: success or EOPNOTSUPP, got {}", errno_name(e));
        assert!(content == expect, "nothing changed after EOPNOTSUPP");
    }
    drop(f);
    // The util-linux tool, on a second file, through a fresh open and read.
    fs::write(m.p("h2"), vec![b'y'; 12288]).unwrap();
    let o = m.sh("fallocate -p -o 4096 -l 4096 h2");
    let c2 = read(&m.p("h2"));
    assert_eq!(c2.len(), 12288);
    if o.status.success() {
        assert!(c2[..4096].iter().all(|&b| b == b'y') && c2[4096..8192].iter().all(|&b| b == 0) && c2[8192..].iter().all(|&b| b == b'y'));
    } else {
        assert!(c2.iter().all(|&b| b == b'y'), "fallocate -p failed, nothing may change");
        assert_ne!(r, 0, "syscall punched but the tool failed: {o:?}");
    }
    // Plain fallocate (mode 0) extends and reads zeros.
    let f = OpenOptions::new().read(true).write(true).create(true).open(m.p("prealloc")).unwrap();
    let r0 = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 1 << 20) };
    if r0 == 0 {
        assert_eq!(f.metadata().unwrap().len(), 1 << 20);
        let mut b = vec![1u8; 4096];
        f.read_exact_at(&mut b, 500_000).unwrap();
        assert!(b.iter().all(|&x| x == 0));
    } else {
        let e = errno();
        assert_eq!(e, libc::EOPNOTSUPP, "fallocate(0): {}", errno_name(e));
    }
    drop(f);
    if remount_if_store(m) {
        assert!(read(&m.p("holey")) == expect);
        assert!(read(&m.p("h2")) == c2);
    }
}

fn c26(m: &mut TestMount) {
    const MIB: i64 = 1 << 20;
    let f = OpenOptions::new().read(true).write(true).create(true).open(m.p("sparse")).unwrap();
    let fd = f.as_raw_fd();
    f.write_all_at(&[b'd'; 4096], MIB as u64).unwrap();
    let data = cvt64(unsafe { libc::lseek(fd, 0, libc::SEEK_DATA) })
        .unwrap_or_else(|e| panic!("SEEK_DATA on the writing fd: {e}"));
    assert!(data == MIB || data == 0, "SEEK_DATA -> {data}");
    let hole = cvt64(unsafe { libc::lseek(fd, 0, libc::SEEK_HOLE) }).unwrap();
    assert!(hole == 0 || hole == MIB + 4096, "SEEK_HOLE(0) -> {hole}");
    let hole = cvt64(unsafe { libc::lseek(fd, MIB, libc::SEEK_HOLE) }).unwrap();
    assert_eq!(hole, MIB + 4096, "SEEK_HOLE(1 MiB) is EOF");
    // Past EOF: ENXIO is the correct answer there.
    let r = unsafe { libc::lseek(fd, MIB + 4096, libc::SEEK_DATA) };
    assert!(r < 0 && errno() == libc::ENXIO, "SEEK_DATA at EOF: {r}");
    // SEEK_CUR/SEEK_END still plain.
    assert_eq!(cvt64(unsafe { libc::lseek(fd, 0, libc::SEEK_END) }).unwrap(), MIB + 4096);
    // After fsync and on a fresh fd.
    f.sync_all().unwrap();
    let data2 = cvt64(unsafe { libc::lseek(fd, 0, libc::SEEK_DATA) }).unwrap();
    assert!(data2 == MIB || data2 == 0);
    drop(f);
    let g = File::open(m.p("sparse")).unwrap();
    let d3 = cvt64(unsafe { libc::lseek(g.as_raw_fd(), 0, libc::SEEK_DATA) }).unwrap();
    assert!(d3 == MIB || d3 == 0);
    // Data at the start: SEEK_DATA(0) is 0.
    let h = OpenOptions::new().read(true).write(true).create(true).open(m.p("dense")).unwrap();
    h.write_all_at(b"abc", 0).unwrap();
    assert_eq!(cvt64(unsafe { libc::lseek(h.as_raw_fd(), 0, libc::SEEK_DATA) }).unwrap(), 0);
    assert_eq!(cvt64(unsafe { libc::lseek(h.as_raw_fd(), 0, libc::SEEK_HOLE) }).unwrap(), 3);
    let mut hh = &h;
    hh.seek(SeekFrom::Start(1)).unwrap();
    let mut s = String::new();
    hh.read_to_string(&mut s).unwrap();
    assert_eq!(s, "bc");
}

// ---------------------------------------------------------------------------------
// xattrs
// ---------------------------------------------------------------------------------

fn getxattr(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let cp = cstr(p);
    let cn = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    let r = unsafe { libc::getxattr(cp.as_ptr(), cn.as_ptr(), buf.as_mut_ptr() as *mut _, buf.len()) };
    if r < 0 {
        Err(errno())
    } else {
        buf.truncate(r as usize);
        Ok(buf)
    }
}

fn listxattr(p: &Path, follow: bool) -> Result<Vec<String>, i32> {
    let cp = cstr(p);
    let size = unsafe {
        if follow {
            libc::listxattr(cp.as_ptr(), std::ptr::null_mut(), 0)
        } else {
            libc::llistxattr(cp.as_ptr(), std::ptr::null_mut(), 0)
        }
    };
    if size < 0 {
        return Err(errno());
    }
    let mut buf = vec![0u8; size as usize + 1];
    let r = unsafe {
        if follow {
            libc::listxattr(cp.as_ptr(), buf.as_mut_ptr() as *mut _, buf.len())
        } else {
            libc::llistxattr(cp.as_ptr(), buf.as_mut_ptr() as *mut _, buf.len())
        }
    };
    if r < 0 {
        return Err(errno());
    }
    buf.truncate(r as usize);
    Ok(buf.split(|&b| b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect())
}

/// Attributes a file system may legitimately list on every inode (LSMs, ACL-less systems).
fn user_visible(names: Vec<String>) -> Vec<String> {
    names.into_iter().filter(|n| !n.starts_with("security.")).collect()
}

fn c27(m: &mut TestMount) {
    let f = m.p("f");
    fs::write(&f, "x").unwrap();
    assert_eq!(getxattr(&f, "user.nope"), Err(libc::ENODATA), "missing attribute");
    let o = m.sh("getfattr -n user.nope f");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("No such attribute"), "{o:?}");
    let cf = cstr(&f);
    let cn = CString::new("user.nope").unwrap();
    let r = unsafe { libc::removexattr(cf.as_ptr(), cn.as_ptr()) };
    assert!(r < 0 && errno() == libc::ENODATA, "removexattr of a missing name: {}", errno_name(errno()));
    // Set/get/list/replace/create semantics.
    m.sh_ok("setfattr -n user.a -v hello f && setfattr -n user.b -v 0x00ff f");
    assert_eq!(getxattr(&f, "user.a").unwrap(), b"hello");
    assert_eq!(getxattr(&f, "user.b").unwrap(), vec![0u8, 0xff]);
    let cv = b"v";
    let ca = CString::new("user.a").unwrap();
    let cz = CString::new("user.z").unwrap();
    let r = unsafe { libc::setxattr(cf.as_ptr(), ca.as_ptr(), cv.as_ptr() as *const _, 1, libc::XATTR_CREATE) };
    assert!(r < 0 && errno() == libc::EEXIST, "XATTR_CREATE on existing");
    let r = unsafe { libc::setxattr(cf.as_ptr(), cz.as_ptr(), cv.as_ptr() as *const _, 1, libc::XATTR_REPLACE) };
    assert!(r < 0 && errno() == libc::ENODATA, "XATTR_REPLACE on missing: {}", errno_name(errno()));
    // Too small a buffer: ERANGE; size query: length.
    let mut small = [0u8; 2];
    let r = unsafe { libc::getxattr(cf.as_ptr(), ca.as_ptr(), small.as_mut_ptr() as *mut _, 2) };
    assert!(r < 0 && errno() == libc::ERANGE, "ERANGE on small buffer");
    let r = unsafe { libc::getxattr(cf.as_ptr(), ca.as_ptr(), std::ptr::null_mut(), 0) };
    assert_eq!(r, 5);
    let mut names = user_visible(listxattr(&f, true).unwrap());
    names.sort();
    assert_eq!(names, vec!["user.a", "user.b"]);
    // cp -a preserves them; ls -l works.
    m.sh_ok("cp -a f g && test \"$(getfattr --only-values -n user.a g)\" = hello && ls -l f g >/dev/null");
    m.sh_ok("mkdir d && cp -a d d2 && touch plain && cp -a plain plain2 && ls -la >/dev/null");
    m.sh_ok("setfattr -x user.b f && ! getfattr -n user.b f 2>/dev/null");
    assert_eq!(getxattr(&f, "user.b"), Err(libc::ENODATA));
    if remount_if_store(m) {
        assert_eq!(getxattr(&m.p("f"), "user.a").unwrap(), b"hello");
        assert_eq!(getxattr(&m.p("g"), "user.a").unwrap(), b"hello");
        assert_eq!(getxattr(&m.p("f"), "user.b"), Err(libc::ENODATA));
    }
}

fn c28(m: &mut TestMount) {
    fs::write(m.p("f"), "x").unwrap();
    fs::create_dir(m.p("d")).unwrap();
    std::os::unix::fs::symlink("f", m.p("s")).unwrap();
    for (name, follow) in [("f", true), ("d", true), ("s", false), ("s", true)] {
        let r = listxattr(&m.p(name), follow);
        assert_eq!(r.map(user_visible), Ok(vec![]), "listxattr of {name} (follow={follow})");
    }
    // Also after setting and removing one.
    m.sh_ok("setfattr -n user.t -v 1 f && setfattr -x user.t f");
    assert_eq!(listxattr(&m.p("f"), true).map(user_visible), Ok(vec![]));
    let o = m.sh_ok("getfattr -d f d; echo rc=$?");
    assert!(o.contains("rc=0"));
    // As non-root too.
    m.nobody_dir("u");
    python_nobody(m, "import os\nos.chdir('u')\nopen('x','w').close()\nassert [a for a in os.listxattr('x') if not a.startswith('security.')] == []");
}

// ---------------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------------

fn c29(m: &mut TestMount) {
    fn nl_of(m: &TestMount, p: &str) -> u64 {
        fs::metadata(m.p(p)).unwrap().nlink()
    }
    fs::create_dir(m.p("d")).unwrap();
    let ok = |n: u64, subdirs: u64| n == 1 || n == 2 + subdirs;
    assert!(ok(nl_of(m, "d"), 0), "empty dir nlink {}", nl_of(m, "d"));
    for s in ["a", "b", "c"] {
        fs::create_dir(m.p(&format!("d/{s}"))).unwrap();
    }
    fs::write(m.p("d/file"), "").unwrap();
    assert!(ok(nl_of(m, "d"), 3), "nlink {}", nl_of(m, "d"));
    fs::remove_dir(m.p("d/c")).unwrap();
    assert!(ok(nl_of(m, "d"), 2), "after rmdir: {}", nl_of(m, "d"));
    fs::rename(m.p("d/b"), m.p("b2")).unwrap();
    assert!(ok(nl_of(m, "d"), 1), "after moving a subdir out: {}", nl_of(m, "d"));
    let root_subdirs = list_dir(m.path()).iter().filter(|n| m.p(n).is_dir()).count() as u64;
    assert!(ok(nl_of(m, ""), root_subdirs), "root nlink {}", nl_of(m, ""));
    // find finds every directory (it relies on nlink unless it is 1).
    m.sh_ok("mkdir -p t/a/b/c t/a/d t/e/f/g t/h && for i in 1 2 3; do mkdir t/e/f/g/x$i; touch t/e/f/g/x$i/file; done");
    let out = m.sh_ok("find t -type d | sort");
    assert_eq!(out.lines().count(), 12, "find output:\n{out}");
    let out = m.sh_ok("find t -type f | wc -l");
    assert_eq!(out.trim(), "3");
    if remount_if_store(m) {
        assert!(ok(nl_of(m, "d"), 1));
        let out = m.sh_ok("find t -type d | wc -l");
        assert_eq!(out.trim(), "12");
    }
}

fn c30(m: &mut TestMount) {
    fs::write(m.p("f"), vec![b'a'; 10000]).unwrap();
    let md = fs::metadata(m.p("f")).unwrap();
    assert!(md.blocks() >= 8, "st_blocks after write: {}", md.blocks());
    {
        let f = OpenOptions::new().write(true).open(m.p("f")).unwrap();
        f.sync_all().unwrap();
    }
    let du: u64 = m.sh_ok("du -k f | cut -f1").trim().parse().unwrap();
    assert!(du > 0, "du of a non-empty file");
    fs::write(m.p("big"), vec![b'b'; 3 << 20]).unwrap();
    let md = fs::metadata(m.p("big")).unwrap();
    assert!(md.blocks() * 512 >= 3 << 20, "st_blocks {} for 3 MiB", md.blocks());
    let du: u64 = m.sh_ok("du -sk . | cut -f1").trim().parse().unwrap();
    assert!(du >= 3 * 1024, "du -sk of the tree: {du}");
    fs::write(m.p("empty"), "").unwrap();
    assert_eq!(fs::metadata(m.p("empty")).unwrap().blocks(), 0);
    if remount_if_store(m) {
        assert!(fs::metadata(m.p("f")).unwrap().blocks() >= 8);
        assert!(fs::metadata(m.p("big")).unwrap().blocks() * 512 >= 3 << 20);
    }
}

fn c31(m: &mut TestMount) {
    // Operations a FUSE server may not implement. Whatever the answer, never EIO, and
    // the file system keeps working.
    let p = m.p("f");
    fs::write(&p, vec![b'q'; 65536]).unwrap();
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let fd = f.as_raw_fd();
    let mut results: Vec<(&str, i64, i32)> = Vec::new();
    fn rec(results: &mut Vec<(&'static str, i64, i32)>, name: &'static str, r: i64) {
        let e = if r < 0 { errno() } else { 0 };
        results.push((name, r, e));
    }
    let mut flags: libc::c_long = 0;
    rec(&mut results, "FS_IOC_GETFLAGS", unsafe { libc::ioctl(fd, libc::FS_IOC_GETFLAGS as _, &mut flags) } as i64);
    let mut blk: libc::c_int = 0;
    rec(&mut results, "FIBMAP", unsafe { libc::ioctl(fd, 1 /* FIBMAP */, &mut blk) } as i64);
    let mut fiemap = [0u64; 16]; // struct fiemap header (32 bytes) + room
    fiemap[1] = u64::MAX; // fm_length
    rec(&mut results, "FS_IOC_FIEMAP", unsafe { libc::ioctl(fd, 0xC020660B_u32 as _, fiemap.as_mut_ptr()) } as i64);
    rec(&mut results, "FIONREAD", unsafe {
        let mut n: libc::c_int = 0;
        libc::ioctl(fd, libc::FIONREAD as _, &mut n)
    } as i64);
    rec(&mut results, "syncfs", unsafe { libc::syncfs(fd) } as i64);
    rec(&mut results, "fdatasync", unsafe { libc::fdatasync(fd) } as i64);
    rec(&mut results, "sync_file_range", unsafe { libc::sync_file_range(fd, 0, 4096, libc::SYNC_FILE_RANGE_WRITE) } as i64);
    rec(&mut results, "readahead", unsafe { libc::readahead(fd, 0, 65536) } as i64);
    rec(&mut results, "fallocate ZERO_RANGE", unsafe { libc::fallocate(fd, libc::FALLOC_FL_ZERO_RANGE, 0, 4096) } as i64);
    rec(&mut results, "fallocate COLLAPSE_RANGE", unsafe { libc::fallocate(fd, libc::FALLOC_FL_COLLAPSE_RANGE, 4096, 4096) } as i64);
    rec(&mut results, "fallocate INSERT_RANGE", unsafe { libc::fallocate(fd, libc::FALLOC_FL_INSERT_RANGE, 4096, 4096) } as i64);
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN | libc::POLLOUT, revents: 0 };
    rec(&mut results, "poll", unsafe { libc::poll(&mut pfd, 1, 100) } as i64);
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let cp = cstr(&p);
    rec(&mut results, "statx BTIME", unsafe {
        libc::statx(libc::AT_FDCWD, cp.as_ptr(), libc::AT_STATX_FORCE_SYNC, libc::STATX_ALL | libc::STATX_BTIME, &mut stx)
    } as i64);
    let g = File::create(m.p("g")).unwrap();
    let mut off_in: i64 = 0;
    let mut off_out: i64 = 0;
    rec(&mut results, "copy_file_range", unsafe {
        libc::copy_file_range(fd, &mut off_in, g.as_raw_fd(), &mut off_out, 8192, 0)
    } as i64);
    let cd = cstr(m.path());
    let dfd = unsafe { libc::open(cd.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    rec(&mut results, "fsync(dir)", unsafe { libc::fsync(dfd) } as i64);
    rec(&mut results, "ioctl(dir)", unsafe { libc::ioctl(dfd, libc::FS_IOC_GETFLAGS as _, &mut flags) } as i64);
    unsafe { libc::close(dfd) };
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    rec(&mut results, "statfs", unsafe { libc::statfs(cd.as_ptr(), &mut sfs) } as i64);
    drop(g);
    // posix_fadvise returns the error number instead of setting errno.
    let fr = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
    results.push(("posix_fadvise", if fr == 0 { 0 } else { -1 }, fr));
    drop(f);
    for (name, r, e) in &results {
        eprintln!("  {name:28} -> {r} {}", if *r < 0 { errno_name(*e) } else { String::new() });
    }
    let eio: Vec<_> = results.iter().filter(|(_, r, e)| *r < 0 && *e == libc::EIO).collect();
    assert!(eio.is_empty(), "EIO from: {eio:?}");
    // Must-work ones.
    for must in ["syncfs", "fdatasync", "statx BTIME", "copy_file_range", "fsync(dir)", "statfs", "poll"] {
        let (_, r, e) = results.iter().find(|x| x.0 == must).unwrap();
        assert!(*r >= 0, "{must} failed: {}", errno_name(*e));
    }
    assert!(sfs.f_bsize > 0 && sfs.f_blocks > 0, "statfs plausible: bsize {} blocks {}", sfs.f_bsize, sfs.f_blocks);
    // Still working.
    fs::write(m.p("after"), "fine").unwrap();
    assert_eq!(read_s(&m.p("after")), "fine");
    m.sh_ok("ls -la >/dev/null && stat -f . >/dev/null && df . >/dev/null");
}

fn c32(m: &mut TestMount) {
    fs::create_dir_all(m.p("d/sub")).unwrap();
    fs::write(m.p("file"), "x").unwrap();
    fs::create_dir(m.p("empty")).unwrap();
    fs::create_dir(m.p("full")).unwrap();
    fs::write(m.p("full/x"), "").unwrap();
    expect_errno(File::open(m.p("missing")), libc::ENOENT, "open missing");
    expect_errno(File::open(m.p("nodir/missing")), libc::ENOENT, "open in missing dir");
    expect_errno(fs::create_dir(m.p("d")), libc::EEXIST, "mkdir existing");
    expect_errno(OpenOptions::new().write(true).create_new(true).open(m.p("file")), libc::EEXIST, "O_EXCL existing");
    expect_errno(std::os::unix::fs::symlink("x", m.p("file")), libc::EEXIST, "symlink over existing");
    expect_errno(fs::hard_link(m.p("file"), m.p("d")), libc::EEXIST, "link over existing");
    expect_errno(fs::remove_dir(m.p("d")), libc::ENOTEMPTY, "rmdir non-empty");
    expect_errno(File::open(m.p("file/x")), libc::ENOTDIR, "file as dir component");
    expect_errno(fs::create_dir(m.p("file/x")), libc::ENOTDIR, "mkdir under a file");
    expect_errno(fs::remove_dir(m.p("file")), libc::ENOTDIR, "rmdir of a file");
    expect_errno(fs::read_dir(m.p("file")), libc::ENOTDIR, "opendir of a file");
    expect_errno(OpenOptions::new().write(true).open(m.p("d")), libc::EISDIR, "open dir for writing");
    expect_errno(fs::remove_file(m.p("d")), libc::EISDIR, "unlink of a dir");
    expect_errno(fs::rename(m.p("file"), m.p("empty")), libc::EISDIR, "rename file over dir");
    expect_errno(fs::rename(m.p("empty"), m.p("file")), libc::ENOTDIR, "rename dir over file");
    let r = fs::rename(m.p("d"), m.p("full"));
    let e = r.unwrap_err().raw_os_error().unwrap();
    assert!(e == libc::ENOTEMPTY || e == libc::EEXIST, "rename dir over non-empty dir: {}", errno_name(e));
    expect_errno(fs::rename(m.p("d"), m.p("d/sub/inside")), libc::EINVAL, "rename dir into itself");
    expect_errno(fs::rename(m.p("missing"), m.p("x")), libc::ENOENT, "rename missing");
    expect_errno(fs::write(m.p(&"n".repeat(256)), ""), libc::ENAMETOOLONG, "name too long");
    fs::write(m.p(&"n".repeat(255)), "").expect("255-byte name");
    expect_errno(fs::read_link(m.p("file")), libc::EINVAL, "readlink of a non-symlink");
    // EXDEV only across mounts: to a tmpfs (or any other file system) on the host.
    let other = ["/dev/shm", "/run"]
        .iter()
        .map(Path::new)
        .find(|p| {
            p.is_dir()
                && fs::metadata(p).map(|md| md.dev() != fs::metadata(m.path()).unwrap().dev()).unwrap_or(false)
                && tempfile::tempfile_in(p).is_ok()
        })
        .map(|p| p.to_path_buf());
    if let Some(o) = other {
        // Unique per test (the memory and store variants run in parallel).
        let tag = m.path().parent().unwrap().file_name().unwrap().to_string_lossy().into_owned();
        let probe = o.join(format!(".ringfs-probe-{tag}"));
        fs::write(&probe, "").unwrap();
        expect_errno(fs::rename(m.p("file"), &probe), libc::EXDEV, "rename across mounts");
        expect_errno(fs::hard_link(m.p("file"), o.join(format!(".ringfs-link-{tag}"))), libc::EXDEV, "link across mounts");
        let _ = fs::remove_file(&probe);
        // mv falls back to copy+unlink on EXDEV.
        m.sh_ok(&format!("echo moved > mv-src && mv mv-src '{}' && test ! -e mv-src && rm '{}'", probe.display(), probe.display()));
    }
    // EACCES for a non-root user, never EIO.
    fs::write(m.p("secret"), "s").unwrap();
    fs::set_permissions(m.p("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::create_dir(m.p("locked")).unwrap();
    fs::set_permissions(m.p("locked"), fs::Permissions::from_mode(0o700)).unwrap();
    python_nobody(
        m,
        r#"
import os, errno
def expect(f, e, what):
    try:
        f()
    except OSError as x:
        assert x.errno == e, (what, x)
        return
    raise SystemExit(what + ": succeeded")
expect(lambda: open("secret"), errno.EACCES, "read 0600 root file")
expect(lambda: os.listdir("locked"), errno.EACCES, "list 0700 root dir")
expect(lambda: os.stat("locked/x"), errno.EACCES, "search 0700 root dir")
expect(lambda: open("newfile", "w"), errno.EACCES, "create in root's 0755 dir")
expect(lambda: os.mkdir("newdir"), errno.EACCES, "mkdir in root's 0755 dir")
expect(lambda: os.unlink("file"), errno.EACCES, "unlink in root's dir")
expect(lambda: os.chmod("file", 0o777), errno.EPERM, "chmod of another's file")
expect(lambda: os.chown("file", 65534, 65534), errno.EPERM, "chown of another's file")
"#,
    );
}

// ---------------------------------------------------------------------------------
// Special files and toolchains
// ---------------------------------------------------------------------------------

fn c33(m: &mut TestMount) {
    use std::os::unix::net::{UnixListener, UnixStream};
    // A short relative path keeps sun_path well under 108 bytes; cwd into the mount.
    let sock = m.p("s.sock");
    let listener = UnixListener::bind(&sock).expect("bind in the mount");
    let md = fs::symlink_metadata(&sock).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_socket(&md.file_type()));
    let t = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).unwrap();
        s.write_all(&b).unwrap();
    });
    let mut c = UnixStream::connect(&sock).expect("connect");
    c.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ping");
    t.join().unwrap();
    // Datagram socket too, and connect to a stale socket file: ECONNREFUSED.
    drop(c);
    // Another test thread forking at the moment the listener was created
    // holds a copy of it until its exec closes it (CLOEXEC): retry briefly.
    let t0 = std::time::Instant::now();
    let r = loop {
        match UnixStream::connect(&sock) {
            Ok(_) if t0.elapsed() < Duration::from_secs(2) => std::thread::sleep(Duration::from_millis(20)),
            r => break r,
        }
    };
    assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ECONNREFUSED));
    fs::remove_file(&sock).unwrap();
    // Fifo.
    m.sh_ok("mkfifo p && test -p p");
    let fifo = m.p("p");
    let w = std::thread::spawn(move || {
        let mut f = OpenOptions::new().write(true).open(&fifo).unwrap();
        f.write_all(b"through the fifo").unwrap();
    });
    let mut s = String::new();
    File::open(m.p("p")).unwrap().read_to_string(&mut s).unwrap();
    w.join().unwrap();
    assert_eq!(s, "through the fifo");
    m.sh_ok("(echo via-shell > p &) ; test \"$(cat p)\" = via-shell");
    // Python's socketserver style: bind, listen, connect from another process.
    m.sh_ok(
        "python3 -c 'import socket,os,subprocess,sys\ns=socket.socket(socket.AF_UNIX); s.bind(\"py.sock\"); s.listen(1)\n\
         p=subprocess.Popen([sys.executable,\"-c\",\"import socket; c=socket.socket(socket.AF_UNIX); c.connect(\\\"py.sock\\\"); c.sendall(b\\\"hi\\\")\"])\n\
         c,_=s.accept(); assert c.recv(2)==b\"hi\"; assert p.wait()==0'",
    );
    if remount_if_store(m) {
        let md = fs::symlink_metadata(m.p("p")).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&md.file_type()));
    }
}

fn c34(m: &mut TestMount) {
    m.sh_ok("python3 -m venv $M/.venv && $M/.venv/bin/python -c 'import sys; assert sys.prefix != sys.base_prefix'");
    m.sh_ok("$M/.venv/bin/python -m pip --version >/dev/null && . $M/.venv/bin/activate && python -c 'import sqlite3, json, ssl'");
    if remount_if_store(m) {
        m.sh_ok("$M/.venv/bin/python -c 'import sys; print(sys.prefix)' | grep -q .venv");
    }
}

fn c35(m: &mut TestMount) {
    let mp = m.path().display().to_string();
    let base = Path::new(&mp).file_name().unwrap().to_string_lossy().into_owned();
    let t = Duration::from_secs(30);
    // The mountpoint looked up from inside: absolute path, via .., via /proc/self/cwd.
    fs::create_dir(m.p("inner")).unwrap();
    let o = m.sh_timeout(
        &format!(
            "cd inner && stat \"$M\" >/dev/null && stat ../../{base} >/dev/null && ls \"$M\" >/dev/null \
             && stat /proc/self/cwd/.. >/dev/null && test \"$(cd ../.. && pwd)\" = \"$(dirname \"$M\")\" \
             && cd \"$M/inner\" && realpath . | grep -q inner"
        ),
        t,
    );
    m.check_ok("lookup of the mountpoint from inside", &o);
    // A symlink to the mountpoint inside the mount: traversal terminates (ELOOP bound).
    std::os::unix::fs::symlink(&mp, m.p("self")).unwrap();
    let o = m.sh_timeout("stat self/self/self/inner >/dev/null\ntimeout 20 find -L . -maxdepth 6 >/dev/null 2>&1 || true", t);
    m.check_ok("self symlink", &o);
    let o = m.sh_timeout("timeout 20 find . | wc -l", t);
    let n: usize = m.check_ok("find", &o).trim().parse().unwrap();
    assert!(n < 10, "find does not recurse into the mount through itself ({n} entries)");
    // A sandbox that also sees the host tree: a private mount namespace with / bound
    // under a host directory (like bwrap --bind / /host), then look the mountpoint up
    // through that bind and from a chroot into it.
    let host_root = m.host_tmp().join("hostroot");
    fs::create_dir(&host_root).unwrap();
    let hr = host_root.display();
    let o = m.sh_timeout(
        &format!(
            "unshare -m --propagation private bash -c '\n\
               set -e\n\
               mount --rbind / {hr}\n\
               stat {hr}{mp} >/dev/null\n\
               ls {hr}{mp} >/dev/null\n\
               cd {hr}{mp}/inner && stat {hr}{mp} >/dev/null && stat {mp} >/dev/null && cd /\n\
               chroot {hr} stat {mp} >/dev/null\n\
               chroot {hr} ls {mp}/inner >/dev/null\n\
               echo sandbox-ok'"
        ),
        Duration::from_secs(60),
    );
    let so = m.check_ok("sandbox lookup", &o);
    assert!(so.contains("sandbox-ok"));
    // The private namespace is gone with its process: nothing is left mounted there.
    assert!(!is_mounted(&host_root), "bind of / left behind");
    // The mount still answers.
    fs::write(m.p("alive"), "yes").unwrap();
    assert_eq!(read_s(&m.p("alive")), "yes");
}

both_backends! {
    c01 => c01_exchange_and_noreplace_memory, c01_exchange_and_noreplace_store;
    c02 => c02_rename_over_relinked_name_memory, c02_rename_over_relinked_name_store;
    c03 => c03_temp_file_then_rename_memory, c03_temp_file_then_rename_store;
    c04 => c04_rename_populated_directory_memory, c04_rename_populated_directory_store;
    c05 => c05_closed_then_unlinked_stays_gone_memory, c05_closed_then_unlinked_stays_gone_store;
    c06 => c06_unlinked_but_open_memory, c06_unlinked_but_open_store;
    c07 => c07_o_tmpfile_memory, c07_o_tmpfile_store;
    c08 => c08_create_readonly_write_new_fd_memory, c08_create_readonly_write_new_fd_store;
    c09 => c09_fd_keeps_its_rights_memory, c09_fd_keeps_its_rights_store;
    c10 => c10_cp_of_readonly_file_memory, c10_cp_of_readonly_file_store;
    c11 => c11_owner_chmod_persists_memory, c11_owner_chmod_persists_store;
    c12 => c12_open_rdonly_trunc_memory, c12_open_rdonly_trunc_store;
    c13 => c13_new_files_belong_to_caller_memory, c13_new_files_belong_to_caller_store;
    c14 => c14_hard_links_one_inode_memory, c14_hard_links_one_inode_store;
    c15 => c15_stable_inode_numbers_memory, c15_stable_inode_numbers_store;
    c16 => c16_utime_omit_now_memory, c16_utime_omit_now_store;
    c17 => c17_posix_locks_memory, c17_posix_locks_store;
    c18 => c18_flock_memory, c18_flock_store;
    c19 => c19_two_sqlite_writers_memory, c19_two_sqlite_writers_store;
    c20 => c20_sqlite_wal_memory, c20_sqlite_wal_store;
    c21 => c21_shared_mmap_coherence_memory, c21_shared_mmap_coherence_store;
    c22 => c22_no_blanket_direct_io_memory, c22_no_blanket_direct_io_store;
    c23 => c23_aligned_o_direct_memory, c23_aligned_o_direct_store;
    c24 => c24_truncate_up_memory, c24_truncate_up_store;
    c25 => c25_punch_hole_memory, c25_punch_hole_store;
    c26 => c26_seek_data_hole_memory, c26_seek_data_hole_store;
    c27 => c27_missing_xattr_enodata_memory, c27_missing_xattr_enodata_store;
    c28 => c28_listxattr_empty_memory, c28_listxattr_empty_store;
    c29 => c29_dir_nlink_memory, c29_dir_nlink_store;
    c30 => c30_st_blocks_memory, c30_st_blocks_store;
    c31 => c31_unknown_opcodes_enosys_memory, c31_unknown_opcodes_enosys_store;
    c32 => c32_precise_errnos_memory, c32_precise_errnos_store;
    c33 => c33_unix_sockets_and_fifos_memory, c33_unix_sockets_and_fifos_store;
    c34 => c34_python_venv_memory, c34_python_venv_store;
    c35 => c35_mount_never_recurses_memory, c35_mount_never_recurses_store;
}
