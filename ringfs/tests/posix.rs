//! POSIX gaps external suites found (xfstests, LTP), each its own test on a
//! `--memory` and a `--store` mount; scripts/test.sh runs this file in every
//! mode of its matrix (passthrough off, everything local-only, /dev/fuse).
//! "Expect" is what ext4 does: `RINGFS_TEST_RAW_DIR=1` checks the tests
//! themselves against the host disk.

mod common;

use common::*;
use std::fs::{self, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::time::{SystemTime, UNIX_EPOCH};

fn python(m: &TestMount, code: &str) -> String {
    m.sh_ok(&format!("python3 - <<'PYEOF'\n{code}\nPYEOF"))
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// xfstests generic/736: a reader that renames every entry it sees (to a
/// temporary name and back) must still reach the end of the directory; each
/// entry is returned once.
fn readdir_ends_while_renaming(m: &mut TestMount) {
    let out = python(
        m,
        r#"
import os
os.mkdir("d"); os.chdir("d")
for i in range(1000): open(str(i), "w").close()
n = 0
seen = set()
for e in os.scandir("."):
    n += 1
    seen.add(e.name)
    if n > 3000: print("readdir never ends"); break
    os.rename(e.name, "T"); os.rename("T", e.name)
print(n, len(seen))
"#,
    );
    assert_eq!(out.trim(), "1000 1000", "entries returned while each is renamed away and back");
    // A new scan sees the directory as it is now.
    let n = fs::read_dir(m.p("d")).unwrap().count();
    assert_eq!(n, 1000);
    // Across directories too: moving each entry out and back ends.
    let out = python(
        m,
        r#"
import os
os.mkdir("e")
n = 0
for e in os.scandir("d"):
    n += 1
    if n > 3000: print("readdir never ends"); break
    os.rename("d/" + e.name, "e/x"); os.rename("e/x", "d/" + e.name)
print(n)
"#,
    );
    assert_eq!(out.trim(), "1000");
}

/// xfstests generic/080 and 215: a write through a shared mapping updates
/// mtime and ctime, seen by stat after the writer is gone (with passthrough
/// the kernel serves the mapping from the working copy).
fn mmap_write_updates_times(m: &mut TestMount) {
    let f = m.p("f");
    fs::write(&f, vec![b'a'; 8192]).unwrap();
    // An old time, cached by a stat.
    let old = 1_000_000_000i64;
    let c = cstr(&f);
    let ts = [libc::timespec { tv_sec: old, tv_nsec: 0 }, libc::timespec { tv_sec: old, tv_nsec: 0 }];
    assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) }, 0);
    assert_eq!(fs::metadata(&f).unwrap().mtime(), old);
    let before = now_secs() - 2;
    // Another process maps, writes, unmaps and exits (as xfs_io -c 'mmap' -c 'mwrite').
    python(
        m,
        r#"
import mmap, os
fd = os.open("f", os.O_RDWR)
mm = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
mm[0:4096] = b"b" * 4096
mm.close()
os.close(fd)
"#,
    );
    let md = fs::metadata(&f).unwrap();
    assert!(md.mtime() >= before, "mtime after a shared-mapping write: {} (written at ≥ {before})", md.mtime());
    assert!(md.ctime() >= before, "ctime after a shared-mapping write: {}", md.ctime());
    assert_eq!(&fs::read(&f).unwrap()[..4096], &[b'b'; 4096][..]);
    // While the mapping is still open, too.
    let out = python(
        m,
        r#"
import mmap, os, time
os.utime("f", (1000000000, 1000000000))
os.stat("f")
fd = os.open("f", os.O_RDWR)
mm = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
mm[0:1] = b"c"
mm.flush()
print(os.stat("f").st_mtime > 1000000000)
mm.close(); os.close(fd)
"#,
    );
    assert_eq!(out.trim(), "True", "mtime seen by stat while the writer still has the mapping");
    if m.backend() == Backend::Store {
        m.remount();
        let md = fs::metadata(&f).unwrap();
        assert!(md.mtime() >= before, "mtime after remount: {}", md.mtime());
        assert_eq!(fs::read(&f).unwrap()[0], b'c');
    }
}

/// D46: a file CREATE just made is empty, so its attributes may be cached
/// while it is open for writing; every way of giving it a size must still
/// show in stat, and so must a write through a shared mapping afterwards
/// (each extension, then the times set old, a mapped store, stat). One
/// process, the descriptor from the create kept open throughout.
fn mmap_write_after_create_updates_times(m: &mut TestMount) {
    let out = python(
        m,
        r#"
import mmap, os
OLD = 1000000000
for how in ["ftruncate", "fallocate", "pwrite", "copy_file_range"]:
    name = "c_" + how
    fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    os.utime(name, (OLD, OLD))
    st = os.stat(name)
    assert (st.st_size, int(st.st_mtime)) == (0, OLD), (how, "fresh", st)
    if how == "ftruncate":
        os.ftruncate(fd, 8192)
    elif how == "fallocate":
        os.posix_fallocate(fd, 0, 8192)
    elif how == "pwrite":
        os.pwrite(fd, b"a" * 8192, 0)
    else:
        src = os.open("src", os.O_CREAT | os.O_RDWR, 0o644)
        os.pwrite(src, b"s" * 8192, 0)
        os.copy_file_range(src, fd, 8192, 0, 0)
        os.close(src)
    st = os.stat(name)
    assert st.st_size == 8192 and int(st.st_mtime) > OLD, (how, "after extending", st)
    os.utime(name, (OLD, OLD))
    assert int(os.stat(name).st_mtime) == OLD, (how, "utime")
    mm = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    mm[0:1] = b"m"
    mm.flush()
    st = os.stat(name)
    assert int(st.st_mtime) > OLD, (how, "mtime after a shared-mapping write", st)
    mm.close()
    os.close(fd)
    with open(name, "rb") as f:
        assert f.read(1) == b"m", how
print("ok")
"#,
    );
    assert_eq!(out.trim(), "ok");
}

fn fallocate(f: &fs::File, mode: i32, off: i64, len: i64) -> std::io::Result<()> {
    if unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// fallocate(2) modes ext4 has: ZERO_RANGE, COLLAPSE_RANGE, INSERT_RANGE
/// work as there — or, where the kernel's FUSE client does not pass a mode
/// on (docs/SEMANTICS.md), fail with EOPNOTSUPP and change nothing.
fn fallocate_modes(m: &mut TestMount) {
    const B: usize = 4096;
    let f = m.p("f");
    let body: Vec<u8> = (0..4 * B).map(|i| (i / B) as u8 + b'A').collect(); // AAAA…BBBB…CCCC…DDDD
    fs::write(&f, &body).unwrap();
    let file = OpenOptions::new().read(true).write(true).open(&f).unwrap();
    let read_all = || fs::read(&f).unwrap();
    let mut supported = Vec::new();
    // ZERO_RANGE: the second block reads zeros, size unchanged.
    match fallocate(&file, libc::FALLOC_FL_ZERO_RANGE, B as i64, B as i64) {
        Ok(()) => {
            let mut want = body.clone();
            want[B..2 * B].fill(0);
            assert_eq!(read_all(), want, "after ZERO_RANGE");
            supported.push("zero");
        }
        Err(e) => {
            assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "ZERO_RANGE: {e}");
            assert_eq!(read_all(), body, "a refused ZERO_RANGE changed the file");
        }
    }
    let now = read_all();
    // COLLAPSE_RANGE: the third block goes, what follows moves up.
    match fallocate(&file, libc::FALLOC_FL_COLLAPSE_RANGE, 2 * B as i64, B as i64) {
        Ok(()) => {
            let mut want = now.clone();
            want.drain(2 * B..3 * B);
            assert_eq!(read_all(), want, "after COLLAPSE_RANGE");
            assert_eq!(file.metadata().unwrap().len(), 3 * B as u64);
            supported.push("collapse");
        }
        Err(e) => {
            assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "COLLAPSE_RANGE: {e}");
            assert_eq!(read_all(), now, "a refused COLLAPSE_RANGE changed the file");
        }
    }
    let now = read_all();
    // INSERT_RANGE: a hole of one block at the start, everything moves down.
    match fallocate(&file, libc::FALLOC_FL_INSERT_RANGE, 0, B as i64) {
        Ok(()) => {
            let mut want = vec![0u8; B];
            want.extend_from_slice(&now);
            assert_eq!(read_all(), want, "after INSERT_RANGE");
            supported.push("insert");
        }
        Err(e) => {
            assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "INSERT_RANGE: {e}");
            assert_eq!(read_all(), now, "a refused INSERT_RANGE changed the file");
        }
    }
    // An unaligned collapse is the host filesystem's EINVAL (or the kernel's EOPNOTSUPP).
    let r = fallocate(&file, libc::FALLOC_FL_COLLAPSE_RANGE, 100, 10);
    assert!(matches!(r.as_ref().map_err(|e| e.raw_os_error()), Err(Some(libc::EINVAL)) | Err(Some(libc::EOPNOTSUPP))), "unaligned collapse: {r:?}");
    let now = read_all();
    drop(file);
    eprintln!("fallocate modes that work here: {supported:?}");
    if m.is_raw() {
        assert_eq!(supported, ["zero", "collapse", "insert"], "ext4 has all three");
    }
    if m.backend() == Backend::Store {
        m.remount();
        assert_eq!(read_all(), now, "contents after remount");
    }
}

/// RENAME_WHITEOUT (overlayfs upper directories, xfstests 078 585): the
/// source name becomes a whiteout, a 0:0 character device.
fn rename_whiteout(m: &mut TestMount) {
    fs::write(m.p("a"), "A").unwrap();
    let (a, b) = (cstr(&m.p("a")), cstr(&m.p("b")));
    let r = unsafe { libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_WHITEOUT) };
    assert_eq!(r, 0, "renameat2(RENAME_WHITEOUT): {}", errno_name(errno()));
    assert_eq!(fs::read_to_string(m.p("b")).unwrap(), "A");
    let w = fs::symlink_metadata(m.p("a")).unwrap();
    assert_eq!(w.mode() & libc::S_IFMT, libc::S_IFCHR, "whiteout is a character device");
    assert_eq!(w.rdev(), 0, "whiteout is 0:0");
    assert_eq!(w.nlink(), 1);
    // EXCHANGE with WHITEOUT is EINVAL; NOREPLACE with it onto a name: EEXIST.
    fs::write(m.p("c"), "C").unwrap();
    let c = cstr(&m.p("c"));
    let r = unsafe { libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, b.as_ptr(), libc::AT_FDCWD, c.as_ptr(), libc::RENAME_WHITEOUT | libc::RENAME_EXCHANGE) };
    assert_eq!((r, errno()), (-1, libc::EINVAL));
    let r = unsafe { libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, b.as_ptr(), libc::AT_FDCWD, c.as_ptr(), libc::RENAME_WHITEOUT | libc::RENAME_NOREPLACE) };
    assert_eq!((r, errno()), (-1, libc::EEXIST));
    // A whiteout can be removed like any device node; the names survive a remount.
    if m.backend() == Backend::Store {
        m.remount();
        assert_eq!(fs::symlink_metadata(m.p("a")).unwrap().mode() & libc::S_IFMT, libc::S_IFCHR);
        assert_eq!(fs::read_to_string(m.p("b")).unwrap(), "A");
    }
    fs::remove_file(m.p("a")).unwrap();
    assert!(!m.p("a").exists());
    // An overlayfs with the workspace as its upper directory deletes a lower
    // file by a whiteout.
    if !m.is_raw() || unsafe { libc::geteuid() } == 0 {
        fs::create_dir_all(m.p("ovl/upper")).unwrap();
        fs::create_dir_all(m.p("ovl/work")).unwrap();
        fs::create_dir_all(m.p("ovl/merged")).unwrap();
        let lower = m.host_tmp().join("lower");
        fs::create_dir_all(&lower).unwrap();
        fs::write(lower.join("gone"), "x").unwrap();
        let o = m.sh(&format!(
            "unshare -m --propagation private sh -c 'mount -t overlay overlay -o lowerdir={},upperdir=ovl/upper,workdir=ovl/work ovl/merged && rm ovl/merged/gone && ls -A ovl/merged && stat -c %F:%t:%T ovl/upper/gone'",
            lower.display()
        ));
        let (out, err) = out_str(&o);
        assert!(o.status.success(), "overlayfs on the workspace: {out} {err}");
        assert!(out.contains("character special file:0:0"), "whiteout in the upper directory: {out}");
    }
}

/// Inode flags (LTP setxattr03; xfstests 079 277 424 545 553 555):
/// `chattr +i` and `+a` work as on ext4 and are enforced: an immutable file
/// takes no write, truncation, attribute change, xattr, rename, link or
/// unlink; an append-only one only appends. Only CAP_LINUX_IMMUTABLE sets
/// them. They survive a remount.
fn inode_flags(m: &mut TestMount) {
    fn deny(m: &TestMount, what: &str, script: &str) {
        let o = m.sh(script);
        let (out, err) = out_str(&o);
        assert!(!o.status.success(), "{what} succeeded on a flagged inode: {out}");
        assert!(err.contains("Operation not permitted"), "{what}: want EPERM, got: {err}");
    }
    m.sh_ok("echo x > f && chattr +i f");
    let l = m.sh_ok("lsattr -d f");
    assert!(l.split_whitespace().next().unwrap().contains('i'), "lsattr: {l}");
    deny(m, "append", "echo y >> f");
    deny(m, "overwrite", "echo y > f");
    deny(m, "truncate", "truncate -s 0 f");
    deny(m, "chmod", "chmod 600 f");
    deny(m, "chown", "chown 1:1 f");
    deny(m, "touch", "touch f");
    deny(m, "setfattr", "setfattr -n user.k -v v f");
    deny(m, "rm", "rm -f f");
    deny(m, "mv", "mv f g");
    deny(m, "ln", "ln f h");
    assert_eq!(m.sh_ok("cat f"), "x\n");
    let o = m.sh_as_nobody("chattr -i f");
    assert!(!o.status.success(), "an unprivileged user cleared immutable");
    if m.backend() == Backend::Store {
        m.remount();
        let l = m.sh_ok("lsattr -d f");
        assert!(l.split_whitespace().next().unwrap().contains('i'), "immutable after remount: {l}");
        deny(m, "append after remount", "echo y >> f");
    }
    m.sh_ok("chattr -i f && echo y >> f && rm f");
    // Append-only.
    m.sh_ok("echo x > a && chattr +a a && echo y >> a");
    assert_eq!(m.sh_ok("cat a"), "x\ny\n");
    deny(m, "overwrite of append-only", "echo z > a");
    deny(m, "truncate of append-only", "truncate -s 0 a");
    deny(m, "rm of append-only", "rm -f a");
    deny(m, "mv of append-only", "mv a b");
    deny(m, "chmod of append-only", "chmod 600 a");
    // Dropping O_APPEND with fcntl or writing through a shared mapping (the
    // kernel checks neither against a FUSE inode's flags) still changes no
    // existing byte: the daemon puts every write at the end.
    let out = python(
        m,
        r#"
import os, fcntl, mmap
fd = os.open("a", os.O_RDWR | os.O_APPEND)
try:
    fcntl.fcntl(fd, fcntl.F_SETFL, 0)
    os.pwrite(fd, b"M", 0)
except OSError as e:
    print("refused", e.errno)
try:
    mm = mmap.mmap(fd, 4, mmap.MAP_SHARED)
    mm[0:1] = b"N"
    mm.flush()
    mm.close()
except (OSError, ValueError) as e:
    print("refused", getattr(e, "errno", e))
os.close(fd)
print(open("a", "rb").read()[:4])
"#,
    );
    assert!(out.trim_end().ends_with("b'x\\ny\\n'"), "append-only bytes changed: {out}");
    m.sh_ok("chattr -a a && rm a");
    // An immutable directory takes no new entries and loses none.
    m.sh_ok("mkdir d && touch d/in && chattr +i d");
    deny(m, "create in immutable dir", "touch d/new");
    deny(m, "mkdir in immutable dir", "mkdir d/sub");
    deny(m, "rm in immutable dir", "rm -f d/in");
    m.sh_ok("chattr -i d && touch d/new && rm -r d");
    // Flags ringfs does not keep are refused, not silently dropped.
    m.sh_ok("touch c");
    let o = m.sh("chattr +c c");
    if !m.is_raw() {
        assert!(!o.status.success(), "chattr +c (compression) reported success");
    }
}

/// xfstests generic/277: setting inode flags moves ctime, through
/// FS_IOC_SETFLAGS (`chattr +A`) and FS_IOC_FSSETXATTR (`xfs_io -c
/// "chattr +A"`), and a stat right after shows it (the kernel's cached
/// attributes are dropped: an ioctl's reply carries none).
fn chattr_moves_ctime(m: &mut TestMount) {
    m.sh_ok("touch f g && stat -c %Z f g >/dev/null");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let out = python(
        m,
        r#"
import os, fcntl, struct
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602
FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR = 0x801c581f, 0x401c5820
def ctime_ns(p):
    return os.stat(p).st_ctime_ns
before = [ctime_ns("f"), ctime_ns("g")]
fd = os.open("f", os.O_RDONLY)
flags = struct.unpack("I", fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 4))[0]
fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("I", flags | 0x80))
os.close(fd)
fd = os.open("g", os.O_RDONLY)
x = bytearray(fcntl.ioctl(fd, FS_IOC_FSGETXATTR, b"\0" * 28))
x[0:4] = struct.pack("I", struct.unpack("I", bytes(x[0:4]))[0] | 0x40)
fcntl.ioctl(fd, FS_IOC_FSSETXATTR, bytes(x))
os.close(fd)
after = [ctime_ns("f"), ctime_ns("g")]
print(before[0], after[0], before[1], after[1])
"#,
    );
    let t: Vec<i64> = out.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert!(t[1] >= t[0] + 1_000_000_000, "FS_IOC_SETFLAGS: ctime {} → {} (want ≥ 1 s later)", t[0], t[1]);
    assert!(t[3] >= t[2] + 1_000_000_000, "FS_IOC_FSSETXATTR: ctime {} → {} (want ≥ 1 s later)", t[2], t[3]);
    assert!(m.sh_ok("lsattr -d f g").lines().all(|l| l.split_whitespace().next().unwrap().contains('A')));
    m.sh_ok("chattr -A f g");
}

/// xfstests generic/478 once got ENOENT opening a file it had just made,
/// under heavy load. Creators make, reopen, read and unlink their own
/// names while other threads stat, open and list the same names and the
/// kernel drops its dentries and inodes (FORGETs racing the creates):
/// a name's owner never sees it missing between its create and its
/// unlink, nobody sees an error but ENOENT, for a few seconds.
fn create_lookup_forget_race(m: &mut TestMount) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;
    let dir = m.p("race");
    fs::create_dir(&dir).unwrap();
    let (creators, names) = (4usize, 8usize);
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let name = move |c: usize, k: usize| format!("c{c}-n{k}");
    let mut threads = Vec::new();
    for c in 0..creators {
        let (dir, stop, counts) = (dir.clone(), stop.clone(), counts.clone());
        threads.push(std::thread::spawn(move || -> Result<(), String> {
            let mut round = 0u64;
            while !stop.load(Relaxed) {
                let k = (round as usize) % names;
                let p = dir.join(name(c, k));
                let body = format!("{c}/{round}");
                let mut f = OpenOptions::new().write(true).create_new(true).open(&p).map_err(|e| format!("create {}: {e}", p.display()))?;
                std::io::Write::write_all(&mut f, body.as_bytes()).map_err(|e| format!("write: {e}"))?;
                drop(f);
                let got = fs::read_to_string(&p).map_err(|e| format!("reopening {} just made (round {round}): {e}", p.display()))?;
                if got != body {
                    return Err(format!("{}: read {got:?}, wrote {body:?}", p.display()));
                }
                fs::metadata(&p).map_err(|e| format!("stat of {} just made: {e}", p.display()))?;
                fs::remove_file(&p).map_err(|e| format!("unlink {}: {e}", p.display()))?;
                round += 1;
                counts[0].fetch_add(1, Relaxed);
            }
            Ok(())
        }));
    }
    for t in 0..3usize {
        let (dir, stop, counts) = (dir.clone(), stop.clone(), counts.clone());
        threads.push(std::thread::spawn(move || -> Result<(), String> {
            let mut i = t;
            while !stop.load(Relaxed) {
                i = i.wrapping_mul(31).wrapping_add(7);
                let p = dir.join(name(i % creators, (i / 7) % names));
                let r = match t {
                    0 => fs::metadata(&p).map(drop),
                    1 => fs::File::open(&p).map(drop),
                    _ => fs::read_dir(&dir).and_then(|d| d.map(|e| e.and_then(|e| e.metadata()).map(drop).or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) })).collect()),
                };
                match r {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(format!("{} by looker {t}: {e}", p.display())),
                    _ => counts[1].fetch_add(1, Relaxed),
                };
            }
            Ok(())
        }));
    }
    // FORGETs: the kernel drops unused dentries and inodes.
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(4) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if fs::write("/proc/sys/vm/drop_caches", "2").is_ok() {
            counts[2].fetch_add(1, Relaxed);
        }
    }
    stop.store(true, Relaxed);
    let errors: Vec<String> = threads.into_iter().filter_map(|t| t.join().unwrap().err()).collect();
    let n: Vec<u64> = counts.iter().map(|c| c.load(Relaxed)).collect();
    // What reached the daemon (the kernel answers most lookups itself).
    let daemon = if m.is_raw() {
        String::new()
    } else {
        let v = json(&["stats", mp(m)]);
        ["CREATE", "LOOKUP", "FORGET", "BATCH_FORGET", "OPEN", "UNLINK"].iter().map(|op| format!(" {op} {}", v["requests"][op]["count"].as_u64().unwrap_or(0))).collect()
    };
    eprintln!("create/lookup/forget race: {} create-reopen-unlink rounds, {} lookups, {} cache drops; daemon saw{daemon}", n[0], n[1], n[2]);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(n[0] > 0 && n[1] > 0);
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "names left behind");
}

/// Files deleted while open, and O_TMPFILE files never named, are freed by
/// the recovery after a crash, as ext4 frees its orphans: their bytes do not
/// come back in lost+found.
fn unlinked_files_stay_gone_after_crash(m: &mut TestMount) {
    if m.backend() != Backend::Store || m.is_raw() {
        return;
    }
    python(
        m,
        r#"
import os, signal, time
fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
os.write(fd, b"t" * 600000)
os.fsync(fd)
g = os.open("doomed", os.O_CREAT | os.O_RDWR, 0o600)
os.write(g, b"d" * 600000)
os.fsync(g)
os.unlink("doomed")
os.fsync(os.open(".", os.O_RDONLY))
time.sleep(1.5)
os.kill(int(os.environ["DAEMON"]), signal.SIGKILL)
"#
        .replace("os.environ[\"DAEMON\"]", &m.daemon_pid().unwrap().to_string())
        .as_str(),
    );
    m.kill_daemon();
    m.mount_again();
    let lost = m.store_dir().join("lost+found");
    let kept: Vec<_> = fs::read_dir(&lost).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(kept.is_empty(), "deleted files came back in lost+found: {kept:?}");
    assert!(!m.p("doomed").exists());
}

/// statx(2) birth time (xfstests 528): set at creation, unchanged by later
/// writes and time changes, kept across a remount.
fn birth_time(m: &mut TestMount) {
    let before = now_secs() - 2;
    m.sh_ok("echo x > f && mkdir d && ln -s f l");
    fn birth(m: &TestMount, p: &str) -> i64 {
        m.sh_ok(&format!("stat -c %W {p}")).trim().parse().unwrap()
    }
    for p in ["f", "d"] {
        let b = birth(m, p);
        assert!(b >= before && b <= now_secs() + 2, "{p}: birth time {b}, created at ≥ {before}");
    }
    let b = birth(m, "f");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    m.sh_ok("echo y >> f && touch -d '2001-01-01' f && chmod 600 f");
    assert_eq!(birth(m, "f"), b, "birth time moved with a write, touch or chmod");
    if m.backend() == Backend::Store {
        m.remount();
        assert_eq!(birth(m, "f"), b, "birth time after remount");
    }
}

both_backends! {
    readdir_ends_while_renaming => readdir_ends_while_renaming_memory, readdir_ends_while_renaming_store;
    mmap_write_updates_times => mmap_write_updates_times_memory, mmap_write_updates_times_store;
    mmap_write_after_create_updates_times => mmap_write_after_create_updates_times_memory, mmap_write_after_create_updates_times_store;
    fallocate_modes => fallocate_modes_memory, fallocate_modes_store;
    rename_whiteout => rename_whiteout_memory, rename_whiteout_store;
    inode_flags => inode_flags_memory, inode_flags_store;
    birth_time => birth_time_memory, birth_time_store;
    chattr_moves_ctime => chattr_moves_ctime_memory, chattr_moves_ctime_store;
    create_lookup_forget_race => create_lookup_forget_race_memory, create_lookup_forget_race_store;
    unlinked_files_stay_gone_after_crash => unlinked_files_stay_gone_after_crash_memory, unlinked_files_stay_gone_after_crash_store;
}
