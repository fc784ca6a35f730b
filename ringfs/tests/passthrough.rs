//! FUSE passthrough: `--passthrough auto|on|off`, one backing id per open
//! inode, data that bypasses the daemon, and exact change capture (writes
//! through dd, cp, cat >>, MAP_SHARED stores, sqlite WAL and git reach the
//! store: after a clean unmount, or after fsync and kill -9, the store's
//! manifests are read back chunk by chunk and compared with the bytes that
//! were on the mount).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use redb::ReadableDatabase;

fn status(m: &TestMount) -> serde_json::Value {
    let o = run_timeout(Command::new(RINGFS).args(["status", "--json"]).arg(m.path()), Duration::from_secs(20));
    assert!(o.status.success(), "ringfs status: {}", out_str(&o).1);
    serde_json::from_slice(&o.stdout).expect("status json")
}

fn stats(m: &TestMount) -> serde_json::Value {
    let o = run_timeout(Command::new(RINGFS).args(["stats", "--json"]).arg(m.path()), Duration::from_secs(20));
    assert!(o.status.success(), "ringfs stats: {}", out_str(&o).1);
    serde_json::from_slice(&o.stdout).expect("stats json")
}

/// Passthrough is expected here: root on Linux ≥ 6.9 (tests skip otherwise).
fn passthrough_available(m: &TestMount) -> bool {
    let s = status(m);
    let on = s["features"]["passthrough"]["enabled"].as_bool() == Some(true);
    if !on {
        eprintln!("passthrough unavailable here: {}", s["features"]["passthrough"]["reason"]);
    }
    on
}

/// Every regular file under `dir` in the mount: ino → bytes.
fn snapshot(dir: &Path) -> BTreeMap<u64, (String, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            if md.is_dir() {
                stack.push(e.path());
            } else if md.is_file() {
                out.insert(md.ino(), (e.path().display().to_string(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out
}

/// The content the store holds for `ino` (None: no manifest), read from a
/// store directory no daemon holds.
fn store_contents(store: &Path) -> BTreeMap<u64, Vec<u8>> {
    let db = redb::Database::open(store.join("store.redb")).expect("open store.redb");
    let rtx = db.begin_read().unwrap();
    let ct = rtx.open_table(fs_core::store::CHUNKS).unwrap();
    let mut all = Vec::new();
    fs_core::live::each(&rtx, &mut |k, m| all.push((k, m.unwrap()))).unwrap();
    let mut out = BTreeMap::new();
    for (k, m) in all {
        let mut bytes = Vec::new();
        for c in &m {
            assert_eq!(c.offset, bytes.len() as u64);
            let (pack, offset, len, _) = ct.get(&c.hash[..]).unwrap().expect("chunk present").value();
            let loc = fs_core::store::pack::Loc { pack, offset, len };
            bytes.extend_from_slice(&fs_core::store::pack::read_chunk(&store.join("packs"), loc).expect("chunk in its pack"));
        }
        out.insert(k, bytes);
    }
    out
}

#[track_caller]
fn assert_store_matches(store: &Path, want: &BTreeMap<u64, (String, Vec<u8>)>) {
    let have = store_contents(store);
    for (ino, (path, bytes)) in want {
        let got = have.get(ino).map(|v| v.as_slice()).unwrap_or(&[]);
        assert!(
            got == bytes.as_slice(),
            "{path} (inode {ino}): store holds {} bytes (blake3 {}), mount had {} bytes (blake3 {})",
            got.len(),
            blake3::hash(got).to_hex(),
            bytes.len(),
            blake3::hash(bytes).to_hex()
        );
    }
}

#[test]
fn status_reports_mode_and_reason() {
    if raw_mode() {
        return;
    }
    let m = TestMount::builder(Backend::Memory).arg("--passthrough").arg("off").name("pt-off").mount();
    let s = status(&m);
    assert_eq!(s["features"]["passthrough"]["enabled"], false);
    assert_eq!(s["features"]["passthrough"]["mode"], "off");
    assert!(s["features"]["passthrough"]["reason"].as_str().unwrap().contains("off"));
    let o = run_timeout(Command::new(RINGFS).arg("status").arg(m.path()), Duration::from_secs(20));
    assert!(out_str(&o).0.contains("passthrough:      off (--passthrough off)"), "{}", out_str(&o).0);
    drop(m);
    let m = TestMount::builder(Backend::Memory).name("pt-auto").mount();
    if passthrough_available(&m) {
        assert_eq!(status(&m)["features"]["passthrough"]["mode"], "auto");
        drop(m);
        let m = TestMount::builder(Backend::Memory).arg("--passthrough").arg("on").name("pt-on").mount();
        assert_eq!(status(&m)["features"]["passthrough"]["enabled"], true);
    }
}

/// In a user namespace the kernel negotiates passthrough but refuses backing
/// files (CAP_SYS_ADMIN in the initial namespace): `on` must refuse to
/// mount, `auto` must mount with passthrough off and say why.
#[test]
fn unprivileged_on_refuses_auto_falls_back() {
    if raw_mode() || !env_mount_args().is_empty() {
        return;
    }
    let t = tempfile::Builder::new().prefix("ringfs-pt-userns-").tempdir().unwrap();
    let mp = t.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let probe = run_timeout(Command::new("unshare").args(["-Urm", "true"]), Duration::from_secs(10));
    if !probe.status.success() {
        eprintln!("skipping: no user namespaces here");
        return;
    }
    let script = format!(
        "set -u\n\
         R='{r}'; MP='{mp}'\n\
         $R mount --memory --passthrough on \"$MP\" 2>&1; echo \"on-exit=$?\"\n\
         XDG_RUNTIME_DIR='{run}' $R mount --memory --daemon --passthrough auto \"$MP\" >/dev/null 2>&1 || {{ echo auto-mount-failed; exit 0; }}\n\
         XDG_RUNTIME_DIR='{run}' $R status \"$MP\"\n\
         echo data > \"$MP/f\" && cat \"$MP/f\"\n\
         XDG_RUNTIME_DIR='{run}' $R umount \"$MP\"",
        r = RINGFS,
        mp = mp.display(),
        run = t.path().display()
    );
    let o = run_timeout(Command::new("unshare").args(["-Urm", "bash", "-c", &script]), Duration::from_secs(60));
    let (so, se) = out_str(&o);
    assert!(so.contains("on-exit=1"), "--passthrough on must fail without CAP_SYS_ADMIN:\n{so}\n{se}");
    assert!(so.contains("passthrough is not available") && so.contains("CAP_SYS_ADMIN"), "clear error:\n{so}");
    if so.contains("auto-mount-failed") {
        eprintln!("skipping the auto half: mounting in a user namespace failed here");
        return;
    }
    assert!(so.contains("passthrough:      off (registering a backing file needs CAP_SYS_ADMIN"), "{so}\n{se}");
    assert!(so.contains("data\n"), "{so}");
}

#[test]
fn one_backing_id_per_inode_and_data_bypasses_daemon() {
    if raw_mode() {
        return;
    }
    let m = TestMount::builder(Backend::Memory).name("pt-ids").mount();
    if !passthrough_available(&m) {
        return;
    }
    // Several descriptors on one inode, two inodes: two backing ids.
    let a = std::fs::OpenOptions::new().create(true).write(true).read(true).open(m.p("a")).unwrap();
    let a2 = std::fs::File::open(m.p("a")).unwrap();
    let a3 = std::fs::OpenOptions::new().append(true).open(m.p("a")).unwrap();
    let b = std::fs::File::create(m.p("b")).unwrap();
    assert_eq!(status(&m)["features"]["passthrough"]["backing_ids"], 2);
    drop((a, a2, a3));
    // Releases are asynchronous.
    let mut ids = 2;
    for _ in 0..100 {
        ids = status(&m)["features"]["passthrough"]["backing_ids"].as_u64().unwrap();
        if ids == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(ids, 1, "backing id of a closed after its last release");
    drop(b);
    // 16 MiB written and read back: no data through the daemon.
    let before = stats(&m);
    m.sh_ok("dd if=/dev/urandom of=big bs=1M count=16 status=none && cat big > /dev/null && cmp big big");
    let after = stats(&m);
    let d_in = after["bytes_to_daemon"].as_u64().unwrap() - before["bytes_to_daemon"].as_u64().unwrap();
    let d_out = after["bytes_from_daemon"].as_u64().unwrap() - before["bytes_from_daemon"].as_u64().unwrap();
    assert!(d_in < 1 << 20 && d_out < 1 << 20, "16 MiB went through the daemon: in {d_in} out {d_out}");
    // stat while a writer keeps the file open (size from the backing file).
    m.sh_ok("exec 3>>grow; printf 0123456789 >&3; test $(stat -c %s grow) = 10; printf abc >&3; test $(stat -c %s grow) = 13; exec 3>&-");
}

/// MAP_SHARED stores: a new file filled through a mapping, and a store
/// into a mapping of an existing file (same size: only mtime/ctime move).
const MMAP_PY: &str = r#"
import mmap, os
fd = os.open('mm.bin', os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 1 << 20)
m = mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED)
for i in range(0, 1 << 20, 4096):
    m[i:i+8] = b'%08d' % i
m.flush(); m.close(); os.close(fd)
fd = os.open('dd.bin', os.O_RDWR)
m = mmap.mmap(fd, 8192, mmap.MAP_SHARED)
m[100:110] = b'XXXXXXXXXX'
m.close(); os.close(fd)
"#;

/// Writes by many tools, with passthrough, reach the store exactly.
fn change_capture(args: &[&str], name: &str) {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::builder(Backend::Store).args(args.iter().copied()).name(name).mount();
    let py = m.host_tmp().join("mapped_stores.py");
    std::fs::write(&py, MMAP_PY).unwrap();
    m.sh_ok(&format!(
        "export MMAP_PY='{}'\n\
         set -e\n\
         mkdir w && cd w\n\
         dd if=/dev/urandom of=dd.bin bs=64k count=40 status=none\n\
         dd if=/dev/urandom of=dd.bin bs=4k count=3 seek=7 conv=notrunc status=none\n\
         head -c 3000000 /dev/urandom > src.bin && cp src.bin cp.bin && cp --reflink=never src.bin cp2.bin\n\
         echo first > app.txt; for i in $(seq 1 20); do cat src.bin | head -c 1000 >> app.txt; done\n\
         echo same-size-aaaa > over.txt; printf 'same-size-bbbb\\n' | dd of=over.txt conv=notrunc status=none\n\
         python3 \"$MMAP_PY\"\n\
         sqlite3 db.sqlite 'PRAGMA journal_mode=WAL; CREATE TABLE t(x); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<5000) INSERT INTO t SELECT randomblob(100) FROM c;' >/dev/null\n\
         sqlite3 db.sqlite 'PRAGMA wal_checkpoint(TRUNCATE); UPDATE t SET x = randomblob(50) WHERE rowid % 7 = 0;' >/dev/null\n\
         git init -q -b main repo && cd repo && for i in $(seq 1 30); do echo $i > f$i; done && git add -A && git commit -q -m one && echo more >> f1 && git commit -q -am two && git gc -q && cd ..",
        py.display()
    ));
    let want = snapshot(&m.p("w"));
    assert!(want.len() > 40, "files: {}", want.len());
    m.unmount_checked();
    assert_store_matches(m.store_dir(), &want);
    // fsck clean, and the content survives a remount.
    let o = run_timeout(Command::new(RINGFS).arg("fsck").arg("--store").arg(m.store_dir()), Duration::from_secs(120));
    assert!(o.status.success(), "fsck: {}", out_str(&o).0);
    m.mount_again();
    let again = snapshot(&m.p("w"));
    assert!(again == want, "content after remount differs");
}

#[test]
fn change_capture_passthrough() {
    change_capture(&[], "capture-pt");
}

#[test]
fn change_capture_passthrough_off() {
    change_capture(&["--passthrough", "off"], "capture-nopt");
}

/// fsync through passthrough is durable: kill -9 right after, the bytes come
/// back from the working copy (recovery re-hashes it), and once unmounted
/// cleanly the store alone holds them.
#[test]
fn fsync_reaches_store_before_kill() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::builder(Backend::Store).name("pt-fsync").mount();
    m.sh_ok(
        "set -e\n\
         dd if=/dev/urandom of=a bs=1M count=3 conv=fsync status=none\n\
         python3 -c \"\n\
import os\n\
fd = os.open('b', os.O_RDWR | os.O_CREAT, 0o644)\n\
os.pwrite(fd, b'hello' * 1000, 0)\n\
os.fsync(fd)\n\
os.pwrite(fd, b'HELLO', 0)\n\
os.fdatasync(fd)\n\
os.close(fd)\n\
\"",
    );
    let want = snapshot(m.path());
    m.kill_daemon();
    m.mount_again();
    assert_eq!(snapshot(m.path()), want, "after kill -9 and remount");
    m.unmount_checked();
    assert_store_matches(m.store_dir(), &want);
    m.mount_again();
}

// ---------------------------------------------------------------------------------
// Set-id bits and file capabilities under HANDLE_KILLPRIV_V2
// ---------------------------------------------------------------------------------

/// `security.capability` v2 (VFS_CAP_REVISION_2) granting CAP_NET_BIND_SERVICE.
const CAP_XATTR: &str = "0x0000000200040000000000000000000000000000";

/// In `dir` (relative to the mount): files with set-id bits and a file
/// capability, written, truncated and chowned by root and by nobody, then the
/// modes ext4 leaves. Returns `stat -c '%n %a'` of every file plus whether the
/// capability survived.
fn kill_privs_scenario(m: &TestMount, dir: &str) -> String {
    m.sh_ok(&format!(
        "cd {dir}\n\
         for f in w_suid w_sgid w_sgid_nox w_root tr chown0 race cap cap_suid cap_nobody; do printf data > $f; done\n\
         chmod 4777 w_suid cap_nobody; chmod 2777 w_sgid; chmod 2767 w_sgid_nox; chmod 4777 w_root tr; chmod 4755 chown0 cap_suid\n\
         chown 65534:65534 race; chmod 0777 race\n\
         for f in cap cap_suid cap_nobody; do setfattr -n security.capability -v {CAP_XATTR} $f; done"
    ));
    // nobody (no CAP_FSETID): write, truncate, and a write through a descriptor
    // opened (and written) before the file became setuid.
    m.sh_nobody_ok(&format!(
        "cd {dir}\n\
         dd if=/dev/zero of=w_suid bs=4k count=4 conv=notrunc status=none\n\
         dd if=/dev/zero of=w_sgid bs=4k count=4 conv=notrunc status=none\n\
         dd if=/dev/zero of=w_sgid_nox bs=4k count=4 conv=notrunc status=none\n\
         truncate -s 1 tr\n\
         dd if=/dev/zero of=cap_nobody bs=4k count=1 conv=notrunc status=none\n\
         exec 3<>race; printf x >&3; chmod 4755 race; printf y >&3; exec 3>&-"
    ));
    // root (CAP_FSETID keeps set-id bits on write, also when the write
    // removes a capability; chown(-1, -1) and a capability are removed all the same).
    m.sh_ok(&format!(
        "cd {dir}\n\
         dd if=/dev/zero of=w_root bs=4k count=4 conv=notrunc status=none\n\
         python3 -c \"import os; os.chown('chown0', -1, -1)\"\n\
         printf more >> cap\n\
         printf more >> cap_suid"
    ));
    modes_and_cap(m, dir)
}

fn modes_and_cap(m: &TestMount, dir: &str) -> String {
    m.sh_ok(&format!(
        "cd {dir}\n\
         stat -c '%n %a' w_suid w_sgid w_sgid_nox w_root tr chown0 race cap cap_suid cap_nobody\n\
         for f in cap cap_suid cap_nobody; do getfattr -n security.capability $f >/dev/null 2>&1 && echo $f kept || echo $f removed; done"
    ))
}

/// What ext4 leaves, with one documented deviation (docs/SEMANTICS.md): a
/// setgid file without group-exec written by a non-member keeps S_ISGID on
/// ringfs (kernels ≥ 6.2 clear it on ext4; the daemon cannot see the caller's
/// groups).
fn kill_privs_expected(raw: bool) -> String {
    let sgid_nox = if raw { "767" } else { "2767" };
    format!(
        "w_suid 777\nw_sgid 777\nw_sgid_nox {sgid_nox}\nw_root 4777\ntr 777\nchown0 755\nrace 755\ncap 644\ncap_suid 4755\ncap_nobody 777\n\
         cap removed\ncap_suid removed\ncap_nobody removed\n"
    )
}

fn kill_privs(args: &[&str], name: &str) {
    let mut m = TestMount::builder(Backend::Store).args(args.iter().copied()).name(name).mount();
    std::fs::create_dir(m.p("k")).unwrap();
    let want = kill_privs_expected(m.is_raw());
    assert_eq!(kill_privs_scenario(&m, "k"), want, "[{name}] modes after writes");
    if !m.is_raw() {
        m.remount();
        assert_eq!(modes_and_cap(&m, "k"), want, "[{name}] modes after remount");
    }
}

/// Writes and truncates by a caller without CAP_FSETID clear S_ISUID (and
/// S_ISGID with group-exec), chown(f, -1, -1) clears S_ISUID, a write removes
/// `security.capability` — as on ext4, with the daemon doing it
/// (HANDLE_KILLPRIV_V2), through passthrough and through the daemon.
#[test]
fn kill_privs_passthrough() {
    kill_privs(&[], "killpriv-pt");
}

#[test]
fn kill_privs_passthrough_off() {
    kill_privs(&["--passthrough", "off"], "killpriv-nopt");
}

#[test]
fn kill_privs_local_only() {
    kill_privs(&["--ignore", "/*", "--native-roots", "off"], "killpriv-local");
}

/// The same inside a daemon-served host tree (a native root after `ringfs unroot`).
#[test]
fn kill_privs_unrooted_tree() {
    if !native_roots_possible() {
        return;
    }
    let m = TestMount::builder(Backend::Store).args(["--ignore", "nr"]).name("killpriv-unrooted").mount();
    make_unrooted_tree(&m, "nr");
    assert_eq!(kill_privs_scenario(&m, "nr"), kill_privs_expected(false));
}

/// With HANDLE_KILLPRIV_V2 the kernel marks checked inodes S_NOSEC: a 64 MiB
/// `dd bs=1M` asks the daemon for `security.capability` once, not per write.
#[test]
fn no_capability_lookup_per_write() {
    if raw_mode() {
        return;
    }
    let m = TestMount::builder(Backend::Memory).name("killpriv-nosec").mount();
    let getxattrs = |m: &TestMount| stats(m)["requests"]["GETXATTR"]["count"].as_u64().unwrap_or(0);
    m.sh_ok("printf x > big");
    let before = getxattrs(&m);
    m.sh_ok("dd if=/dev/zero of=big bs=1M count=64 conv=notrunc status=none");
    let n = getxattrs(&m) - before;
    assert!(n <= 2, "GETXATTR requests during 64 writes: {n}");
}
