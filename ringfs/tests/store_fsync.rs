//! fsync and the final commit through real mounts (durable stores): a small
//! write fsynced in a big file survives kill -9 of the daemon (the working
//! copy is the truth until hashed, recovery re-hashes it); a few thousand
//! files never fsynced are all stored by a clean `ringfs umount`, whose
//! progress lines say what it waits for; the ready working copies a clean
//! unmount leaves are taken by the next mount, not trusted after a crash.
//! No timing is asserted.

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

/// `ringfs fsck --store` of the mount's store: its report (asserting exit 0).
fn fsck(m: &TestMount) -> String {
    let o = run_timeout(Command::new(RINGFS).arg("fsck").arg("--store").arg(m.store_dir()), Duration::from_secs(300));
    let (so, se) = out_str(&o);
    assert!(o.status.success(), "ringfs fsck --store {} exited {}:\n{so}\n{se}", m.store_dir().display(), o.status);
    so
}

/// After `o`, a script that printed "fsynced" and wrote what it expects to
/// `$TMPDIR/want`: kill -9 the daemon, mount again, and return that file.
fn killed_after(m: &mut TestMount, o: &std::process::Output) -> String {
    let (so, se) = out_str(o);
    assert!(o.status.success() && so.contains("fsynced"), "{so}{se}");
    m.kill_daemon();
    m.mount_again();
    std::fs::read_to_string(m.host_tmp().join("want")).unwrap()
}

#[test]
fn fsync_of_a_small_write_in_a_big_file_survives_kill_9() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    // 24 MiB of known bytes, stored (closed long enough to be hashed or not:
    // either way the test holds), then 4 KiB in its middle, fsynced, and
    // the daemon killed at once.
    let o = m.sh(
        r#"python3 - <<'PY'
import os, hashlib
data = bytearray(os.urandom(1 << 20)) * 24
with open("big", "wb") as f:
    f.write(data)
fd = os.open("big", os.O_RDWR)
patch = b"P" * 4096
os.pwrite(fd, patch, 17 * (1 << 20) + 123)
os.fsync(fd)
data[17 * (1 << 20) + 123 : 17 * (1 << 20) + 123 + 4096] = patch
open(os.environ["TMPDIR"] + "/want", "w").write(hashlib.sha256(data).hexdigest())
print("fsynced")
PY"#,
    );
    let want = killed_after(&mut m, &o);
    let o = m.sh(r#"sha256sum big | cut -d' ' -f1; stat -c %s big"#);
    let (so, se) = out_str(&o);
    assert!(o.status.success(), "{se}");
    let mut lines = so.lines();
    assert_eq!(lines.next(), Some(want.trim()), "content after kill -9 and remount");
    assert_eq!(lines.next(), Some((24u64 << 20).to_string().as_str()), "size after kill -9 and remount");
    m.unmount_checked();
    // The clean unmount stored the re-hashed working copy: the store holds it.
    let report = fsck(&m);
    assert!(report.contains("clean"), "{report}");
}

#[test]
fn fsync_without_a_commit_keeps_size_and_mtime_and_commits_what_it_must() {
    if raw_mode() {
        return;
    }
    // No group commit in the test's time: the only durable commits are the
    // ones fsync and fsyncdir make.
    let mut m = TestMount::builder(Backend::Store).args(["--commit-interval-ms", "600000"]).mount();
    // `log` is made durable (fsync, then fsync of its directory), then grows
    // and changes in place and is fsynced: only its size and times are
    // pending, and that fsync makes no commit (recovery takes them from the
    // working copy). `stamp` has its mode and times set explicitly while
    // closed, then is fsynced: that fsync must commit.
    let o = m.sh(
        r#"python3 - <<'PY'
import os, hashlib, time
def sync_dir():
    d = os.open(".", os.O_RDONLY); os.fsync(d); os.close(d)
with open("log", "wb") as f:
    f.write(os.urandom(100000)); f.flush(); os.fsync(f.fileno())
open("stamp", "wb").write(b"s")
sync_dir()
time.sleep(1.5)
os.chmod("stamp", 0o600)
os.utime("stamp", (978307200, 978307200))
fd = os.open("stamp", os.O_RDONLY); os.fsync(fd); os.close(fd)
with open("log", "r+b") as f:
    f.seek(5000); f.write(b"X" * 4096)
    f.seek(0, 2); f.write(os.urandom(1 << 20))
    f.flush(); os.fsync(f.fileno())
st = os.stat("log")
want = hashlib.sha256(open("log", "rb").read()).hexdigest()
open(os.environ["TMPDIR"] + "/want", "w").write(f"{want} {st.st_size} {st.st_mtime}")
print("fsynced")
PY"#,
    );
    let want = killed_after(&mut m, &o);
    let want: Vec<&str> = want.split(' ').collect();
    let got = m.sh_ok(r#"sha256sum log | cut -d' ' -f1; stat -c '%s %.3Y' log; stat -c '%a %Y' stamp"#);
    let got: Vec<&str> = got.lines().collect();
    assert_eq!(got[0], want[0], "content of log after kill -9 and remount");
    let (size, mtime) = got[1].split_once(' ').unwrap();
    assert_eq!(size, want[1], "size of log after kill -9 and remount");
    let (mtime, want_mtime): (f64, f64) = (mtime.parse().unwrap(), want[2].parse().unwrap());
    // The working copy's mtime (the host's clock) stands in for ours: the
    // write's time, not the time of the last durable commit 1.5 s before.
    assert!((mtime - want_mtime).abs() < 1.0, "mtime of log after kill -9: {mtime}, before: {want_mtime}");
    assert_eq!(got[2], "600 978307200", "mode and mtime set explicitly, then fsynced");
    m.unmount_checked();
    let report = fsck(&m);
    assert!(report.contains("clean"), "{report}");
}

#[test]
fn final_commit_stores_every_file_and_says_what_it_waits_for() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let n = 3000;
    let o = m.sh(&format!(
        r#"python3 - <<'PY'
import os
for i in range({n}):
    d = "a%d/b%d" % (i // 1000, (i // 100) % 10)
    os.makedirs(d, exist_ok=True)
    with open("%s/f%d.txt" % (d, i), "w") as f:
        f.write("file %d %s\n" % (i, "x" * 90))
PY"#
    ));
    assert!(o.status.success(), "{:?}", out_str(&o));
    m.unmount_checked();
    // Progress lines, if the commit took long enough to print any, name the
    // daemon and what it waits for; never "files still open" (none are).
    for line in m.last_umount_output().lines() {
        assert!(line.starts_with("ringfs: waiting for the daemon (pid "), "{line}");
        assert!(line.contains(": committing"), "{line}");
        assert!(!line.contains("open"), "{line}");
    }
    let report = fsck(&m);
    assert!(report.contains("clean"), "{report}");
    let manifests: u64 = report
        .split(", ")
        .find_map(|p| p.strip_suffix(" manifests").and_then(|x| x.rsplit(' ').next()).and_then(|x| x.parse().ok()))
        .unwrap_or_else(|| panic!("no manifest count in {report}"));
    assert!(manifests >= n, "{manifests} manifests for {n} files: {report}");
    // And they read back after a remount.
    m.mount_again();
    let o = m.sh("cat a2/b9/f2999.txt; find . -name 'f*.txt' | wc -l");
    let (so, _) = out_str(&o);
    assert!(so.starts_with("file 2999 "), "{so}");
    assert_eq!(so.lines().last().map(str::trim), Some("3000"), "{so}");
    m.unmount_checked();
}

/// The empty working copies under `store/wc` that no file of the mount uses
/// (`live`: the inode numbers of the mount's files): the ready pool.
fn ready_files(m: &TestMount, live: &[u64]) -> Vec<u64> {
    let mut out: Vec<u64> = std::fs::read_dir(m.store_dir().join("wc"))
        .unwrap()
        .flatten()
        .filter(|e| e.metadata().map(|md| md.len() == 0).unwrap_or(false))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|i| !live.contains(i))
        .collect();
    out.sort();
    out
}

/// Inode numbers `stat` gives for every entry of `dir` in the mount.
fn inos(m: &TestMount, dir: &str) -> Vec<u64> {
    let o = m.sh(&format!("stat -c %i {dir}/*"));
    let (so, se) = out_str(&o);
    assert!(o.status.success(), "{se}");
    so.lines().map(|l| l.trim().parse().unwrap()).collect()
}

/// D52: the pool's ready working copies outlive a clean unmount (the final
/// commit records them), so the next mount's first create takes one instead
/// of making a file on the request path; after a crash the record is not
/// trusted (recovery removes the empty files) and creates still work.
#[test]
fn ready_working_copies_outlive_a_clean_unmount_and_not_a_crash() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    // Enough creates to empty the first pool (8) and grow it.
    let o = m.sh("mkdir d && for i in $(seq 40); do echo $i > d/f$i; done");
    assert!(o.status.success(), "{}", out_str(&o).1);
    m.remount();
    let live = inos(&m, "d");
    assert_eq!(live.len(), 40);
    let ready = ready_files(&m, &live);
    assert!(!ready.is_empty(), "no ready working copies kept across the unmount");
    // The first create of the new mount takes one of them.
    let o = m.sh(
        r#"python3 - <<'PY'
import os
fd = os.open("d/new", os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"new\n"); os.fsync(fd); os.close(fd)
dfd = os.open("d", os.O_RDONLY); os.fsync(dfd)
print(os.stat("d/new").st_ino)
PY"#,
    );
    let (so, se) = out_str(&o);
    assert!(o.status.success(), "{se}");
    let new: u64 = so.trim().parse().unwrap();
    assert!(ready.contains(&new), "the first create (inode {new}) did not take a ready file of {ready:?}");
    // A crash: the next mount does not trust the record; the unused ready
    // files of the last clean unmount are gone, the fsynced file is intact.
    m.kill_daemon();
    m.mount_again();
    let o = m.sh("cat d/new; for i in $(seq 40); do cat d/f$i; done | wc -l");
    let (so, se) = out_str(&o);
    assert!(o.status.success(), "{se}");
    assert_eq!(so, "new\n40\n");
    let wc = m.store_dir().join("wc");
    for i in ready.iter().filter(|&&i| i != new) {
        assert!(!wc.join(i.to_string()).exists(), "ready file {i} kept after a crash");
    }
    let o = m.sh("echo after > d/after && stat -c %i d/after && cat d/after");
    let (so, se) = out_str(&o);
    assert!(o.status.success(), "{se}");
    let mut l = so.lines();
    let after: u64 = l.next().unwrap().parse().unwrap();
    assert!(!ready.contains(&after), "inode {after} of the crashed mount's ready files reused");
    assert_eq!(l.next(), Some("after"));
    m.unmount_checked();
    let report = fsck(&m);
    assert!(report.contains("clean"), "{report}");
}
