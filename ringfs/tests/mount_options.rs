//! Mount flags and options: nosuid,nodev by default, `--suid`/`--dev` (root
//! only), `-o ro,noexec,noatime,strictatime,…` and ringfs's own options as
//! `-o NAME=VALUE`, unknown options refused, `mount -o remount,ro` and back,
//! the daemon's atime following the mount's flags, and the open files limit
//! the daemon raises at start. mount(8) needs the helper in /sbin
//! (`common::sbin_helper`, linked for the test and removed after).

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

macro_rules! skip_if_raw {
    () => {
        if raw_mode() {
            eprintln!("RINGFS_TEST_RAW_DIR=1: mount option tests need real mounts; skipped");
            return;
        }
    };
}

/// The per-mount options of the topmost mount at `mp` (mountinfo field 6).
fn mount_options(mp: &Path) -> String {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mpb = mp.to_str().unwrap();
    text.lines()
        .rfind(|l| l.split(' ').nth(4) == Some(mpb))
        .map(|l| l.split(' ').nth(5).unwrap().to_string())
        .unwrap_or_default()
}

fn has(opts: &str, o: &str) -> bool {
    opts.split(',').any(|x| x == o)
}

fn status_json(mp: &Path) -> serde_json::Value {
    let o = ringfs(&["status", "--json", mp.to_str().unwrap()]);
    assert!(o.status.success(), "status: {}", out_str(&o).1);
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Waits (5 s at most) until the daemon's atime policy is `want`.
fn wait_atime(mp: &Path, want: &str) {
    let t0 = Instant::now();
    loop {
        let v = status_json(mp);
        if v["mount"]["atime"] == want {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "atime policy is {} (mount options {}), not {want}", v["mount"]["atime"], v["mount"]["options"]);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn default_flags_are_nosuid_nodev_relatime() {
    skip_if_raw!();
    let m = TestMount::new(Backend::Memory);
    let opts = mount_options(m.path());
    for o in ["rw", "nosuid", "nodev", "relatime"] {
        assert!(has(&opts, o), "{o} in {opts}");
    }
    let v = status_json(m.path());
    assert_eq!(v["mount"]["atime"], "relatime");
    assert_eq!(v["mount"]["options"], opts.as_str());
    // A device node does not work on a nodev mount.
    m.sh_ok("mknod null c 1 3");
    let o = m.sh("cat null");
    assert!(!o.status.success(), "opening a device on a nodev mount fails");
}

#[test]
fn o_options_set_flags_and_ringfs_options() {
    skip_if_raw!();
    let m = TestMount::builder(Backend::Memory).args(["-o", "ro,noexec,noatime,ignore=node_modules"]).mount();
    let opts = mount_options(m.path());
    for o in ["ro", "nosuid", "nodev", "noexec", "noatime"] {
        assert!(has(&opts, o), "{o} in {opts}");
    }
    let e = fs::write(m.p("f"), "x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "write on -o ro: {e}");
    let v = status_json(m.path());
    assert_eq!(v["mount"]["atime"], "noatime", "a read-only mount moves no atime");
    assert_eq!(v["local_only"]["patterns"], serde_json::json!(["node_modules"]), "-o ignore=");
    assert_eq!(v["native_roots"]["reason"], "-o ro");
}

#[test]
fn suid_and_dev_flags_honour_set_id_bits_and_devices() {
    skip_if_raw!();
    let m = TestMount::builder(Backend::Memory).args(["--suid", "-o", "dev"]).mount();
    let opts = mount_options(m.path());
    assert!(!has(&opts, "nosuid") && !has(&opts, "nodev"), "{opts}");
    m.sh_ok("mknod null c 1 3 && echo x > null && cat null");
}

/// The superblock options of the topmost mount at `mp` (mountinfo's last field).
fn super_options(mp: &Path) -> String {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mpb = mp.to_str().unwrap();
    text.lines().rfind(|l| l.split(' ').nth(4) == Some(mpb)).and_then(|l| l.rsplit(' ').next()).unwrap_or_default().to_string()
}

/// xfstests generic/003 and fstab lines: the kernel's own options for a
/// FUSE mount are taken (`nodiratime`, `lazytime`, `sync`, `dirsync`,
/// `nosymfollow`, `silent`, `iversion`) and passed on; `mand` (ignored by
/// Linux since 5.15, refused for FUSE) is accepted and ignored, as ext4
/// does. nosymfollow holds (the kernel's), and so does dirsync (the
/// daemon's): a directory made is durable before mkdir returns.
#[test]
fn kernel_mount_options_are_taken() {
    skip_if_raw!();
    let all = "nodiratime,lazytime,sync,dirsync,nosymfollow,silent,iversion,mand";
    let mut m = TestMount::builder(Backend::Store).args(["--commit-interval-ms", "600000", "-o", all]).mount();
    let (opts, sup) = (mount_options(m.path()), super_options(m.path()));
    for o in ["nodiratime", "nosymfollow"] {
        assert!(has(&opts, o), "{o} in {opts}");
    }
    for o in ["lazytime", "sync", "dirsync"] {
        assert!(has(&sup, o), "{o} in {sup}");
    }
    m.sh_ok("echo x > f && ln -s f l");
    let o = m.sh("cat l");
    assert!(!o.status.success() && out_str(&o).1.contains("Too many levels of symbolic links"), "nosymfollow: {:?}", out_str(&o));
    // No commit for ten minutes but what dirsync asks for.
    m.sh_ok("mkdir kept && touch kept/too");
    m.kill_daemon();
    m.mount_again();
    assert!(m.p("kept/too").exists(), "a directory made on a dirsync mount was lost by a crash");
    // The opposites; `ringfs mount -o remount` keeps what it is not told.
    let mp = m.path().to_str().unwrap().to_string();
    let o = ringfs(&["mount", &mp, "-o", "remount,diratime,async"]);
    assert!(o.status.success(), "{}", out_str(&o).1);
    let (opts, sup) = (mount_options(m.path()), super_options(m.path()));
    assert!(!has(&opts, "nodiratime") && has(&opts, "nosymfollow") && !has(&sup, "sync") && has(&sup, "dirsync"), "{opts} / {sup}");
    drop(m);
    // Through mount(8) and the helper, which is silent on success.
    let Some(_helper) = sbin_helper() else { return };
    let d = DaemonMount::new("kopts");
    let o = run_timeout(Command::new("mount").args(["-t", "fuse.ringfs", d.store.to_str().unwrap(), d.mp.to_str().unwrap(), "-o", "nodiratime,lazytime,mand"]), Duration::from_secs(30));
    let (so, se) = out_str(&o);
    assert!(o.status.success() && d.is_mounted(), "mount -t fuse.ringfs -o nodiratime,lazytime,mand: {so}{se}");
    assert_eq!(so, "", "a mount(8) helper prints nothing on success");
    assert!(has(&mount_options(&d.mp), "nodiratime"));
}

/// `umount MNT` (umount(8)) and at once `mount -t fuse.ringfs STORE MNT`:
/// the old daemon is still finishing its final commit; the new mount
/// waits for it (saying so on stderr) instead of failing, and prints
/// nothing on stdout. A mount while a daemon serves the mountpoint still
/// fails at once.
#[test]
fn mount_8_right_after_umount_8_waits_for_the_old_daemon() {
    skip_if_raw!();
    let Some(_helper) = sbin_helper() else { return };
    let d = DaemonMount::new("remount8");
    let (store, mp) = (d.store.to_str().unwrap().to_string(), d.mp.to_str().unwrap().to_string());
    let mount = || run_timeout(Command::new("mount").args(["-t", "fuse.ringfs", &store, &mp]), Duration::from_secs(60));
    for round in 0..3 {
        let o = mount();
        let (so, se) = out_str(&o);
        assert!(o.status.success() && d.is_mounted(), "round {round}: mount -t fuse.ringfs: {so}{se}");
        assert_eq!(so, "", "round {round}: a mount(8) helper prints nothing on success");
        if round > 0 {
            eprintln!("round {round}, mount right after umount: {}", se.trim());
        }
        // Something for the final commit to store (not deduplicated).
        fs::write(d.mp.join(format!("big{round}")), pseudo_random(round as u64, 48 << 20)).unwrap();
        let t0 = Instant::now();
        let o = mount();
        assert!(!o.status.success(), "a second mount while served: {:?}", out_str(&o));
        assert!(t0.elapsed() < Duration::from_secs(10), "a mount of a served mountpoint should fail at once");
        let o = run_timeout(Command::new("umount").arg(&d.mp), Duration::from_secs(60));
        assert!(o.status.success(), "umount: {:?}", out_str(&o));
    }
    let o = mount();
    assert!(o.status.success() && d.is_mounted(), "last mount: {:?}", out_str(&o));
    for round in 0..3u64 {
        assert!(fs::read(d.mp.join(format!("big{round}"))).unwrap() == pseudo_random(round, 48 << 20), "big{round} after the remounts");
    }
}

/// `len` bytes of a xorshift stream seeded by `seed`.
fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

#[test]
fn unknown_and_bad_options_are_refused() {
    skip_if_raw!();
    let d = DaemonMount::new("opts");
    let mp = d.mp.to_str().unwrap();
    for (args, want) in [
        (vec!["-o", "frob"], "unknown mount option `frob`"),
        (vec!["-o", "store"], "needs a value"),
        (vec!["-o", "memory=yes"], "takes no value"),
    ] {
        let mut a = vec!["mount", mp, "--memory"];
        a.extend(args.iter().copied());
        let o = ringfs(&a);
        let (_, se) = out_str(&o);
        assert!(!o.status.success() && se.contains(want), "{args:?}: {se}");
        assert!(!d.is_mounted());
    }
    assert!(!d.store.exists());
}

#[test]
fn suid_dev_and_mount_need_root() {
    skip_if_raw!();
    let d = DaemonMount::new("nonroot");
    let mp = d.mp.to_str().unwrap().to_string();
    let tmp = d.dir().join("tmp");
    fs::create_dir(&tmp).unwrap();
    std::os::unix::fs::chown(&tmp, Some(NOBODY_UID), Some(NOBODY_GID)).unwrap();
    let as_nobody = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args([format!("--reuid={NOBODY_UID}"), format!("--regid={NOBODY_GID}"), "--clear-groups".into(), "--".into(), RINGFS.into()])
            .args(args)
            .env("TMPDIR", &tmp)
            .env_remove("XDG_RUNTIME_DIR");
        run_timeout(&mut c, Duration::from_secs(20))
    };
    for flag in ["--suid", "--dev"] {
        let o = as_nobody(&["mount", &mp, "--memory", flag, "--daemon"]);
        let se = out_str(&o).1;
        assert!(!o.status.success() && se.contains(flag) && se.contains("needs root"), "{flag}: {se}");
    }
    let o = as_nobody(&["mount", &mp, "--store", d.store.to_str().unwrap(), "--daemon"]);
    let se = out_str(&o).1;
    assert!(!o.status.success() && se.contains("needs root") && se.contains("run it as root"), "{se}");
    // Nothing left behind: no store, no log or runtime directory in the temp dir.
    assert!(!d.store.exists());
    assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0, "nothing in TMPDIR");
    assert!(!Path::new(&format!("/tmp/ringfs-{NOBODY_UID}")).exists(), "no runtime dir in /tmp");
    // Root of a user namespace: --suid still needs the initial one.
    let probe = run_timeout(Command::new("unshare").args(["-Ur", "true"]), Duration::from_secs(10));
    if probe.status.success() {
        let o = run_timeout(Command::new("unshare").args(["-Ur", RINGFS, "mount", &mp, "--memory", "--suid"]), Duration::from_secs(20));
        let se = out_str(&o).1;
        assert!(!o.status.success() && se.contains("initial user namespace"), "{se}");
    }
}

#[test]
fn remount_read_only_and_back() {
    skip_if_raw!();
    let Some(_helper) = sbin_helper() else { return };
    let m = TestMount::new(Backend::Memory);
    let mp = m.path().to_str().unwrap().to_string();
    fs::write(m.p("f"), "before").unwrap();
    let o = run_timeout(Command::new("mount").args(["-o", "remount,ro", &mp]), Duration::from_secs(20));
    assert!(o.status.success(), "mount -o remount,ro: {:?}", out_str(&o));
    assert!(has(&mount_options(m.path()), "ro"), "{}", mount_options(m.path()));
    assert_eq!(fs::write(m.p("f"), "x").unwrap_err().raw_os_error(), Some(libc::EROFS));
    assert_eq!(fs::read_to_string(m.p("f")).unwrap(), "before");
    wait_atime(m.path(), "noatime");
    let o = run_timeout(Command::new("mount").args(["-o", "remount,rw", &mp]), Duration::from_secs(20));
    assert!(o.status.success(), "mount -o remount,rw: {:?}", out_str(&o));
    fs::write(m.p("f"), "after").unwrap();
    assert_eq!(fs::read_to_string(m.p("f")).unwrap(), "after");
    wait_atime(m.path(), "relatime");
    let opts = mount_options(m.path());
    assert!(has(&opts, "rw") && has(&opts, "nosuid") && has(&opts, "nodev"), "{opts}");
    // The same through ringfs, and going read-only refused while a file is open for writing.
    let w = fs::OpenOptions::new().append(true).open(m.p("f")).unwrap();
    let o = ringfs(&["mount", &mp, "-o", "remount,ro"]);
    let se = out_str(&o).1;
    assert!(!o.status.success() && se.contains("open for writing") && se.contains("close them"), "{se}");
    drop(w);
    let o = ringfs(&["mount", &mp, "-o", "remount,ro,strictatime"]);
    assert!(o.status.success(), "{}", out_str(&o).1);
    let opts = mount_options(m.path());
    assert!(has(&opts, "ro") && has(&opts, "nosuid") && !has(&opts, "relatime"), "{opts}");
    let o = ringfs(&["mount", &mp, "-o", "remount,rw"]);
    assert!(o.status.success(), "{}", out_str(&o).1);
    wait_atime(m.path(), "strictatime");
    fs::write(m.p("g"), "rw again").unwrap();
}

/// Reads `f` on a fresh mount (nothing cached, so the read reaches the
/// daemon), then mounts again and returns the atime the store kept.
fn atime_after_read(m: &mut TestMount, args: &[&str]) -> i64 {
    m.sh_ok("touch -a -d @1000000000 f");
    m.set_args(args);
    m.remount();
    m.sh_ok("cat f >/dev/null");
    m.set_args(&["--passthrough", "off"]);
    m.remount();
    fs::metadata(m.p("f")).unwrap().atime()
}

#[test]
fn atime_follows_the_mount_option() {
    skip_if_raw!();
    // Reads must reach the daemon: passthrough off.
    let mut m = TestMount::builder(Backend::Store).args(["--passthrough", "off"]).mount();
    fs::write(m.p("f"), "content").unwrap();
    let old = 1_000_000_000;
    assert!(atime_after_read(&mut m, &["--passthrough", "off"]) > old, "relatime moves an old atime");
    assert_eq!(atime_after_read(&mut m, &["--passthrough", "off", "-o", "noatime"]), old, "noatime");
    assert!(atime_after_read(&mut m, &["--passthrough", "off", "-o", "strictatime"]) > old, "strictatime");
    // A remount to noatime through mount(8) reaches the daemon.
    let Some(_helper) = sbin_helper() else { return };
    m.sh_ok("touch -a -d @1000000000 f");
    m.remount();
    let o = run_timeout(Command::new("mount").args(["-o", "remount,noatime", m.path().to_str().unwrap()]), Duration::from_secs(20));
    assert!(o.status.success(), "{:?}", out_str(&o));
    wait_atime(m.path(), "noatime");
    m.sh_ok("cat f >/dev/null");
    m.remount();
    assert_eq!(fs::metadata(m.p("f")).unwrap().atime(), old, "noatime after mount -o remount,noatime");
}

#[test]
fn daemon_raises_its_open_files_limit() {
    skip_if_raw!();
    let d = DaemonMount::new("nofile");
    let mp = d.mp.to_str().unwrap().to_string();
    // Both limits at 20 000 (a common container's): two clients holding
    // 12 000 files each need more in the daemon, which holds one
    // descriptor per open file (LTP creat05 ran out at ~10 000 each).
    let script = format!("ulimit -n 20000; ulimit -S -n 1024; exec {RINGFS} mount {mp} --memory --daemon --log-file {}/log {}", d.dir().display(), env_mount_args().join(" "));
    let o = run_timeout(Command::new("bash").args(["-c", &script]), Duration::from_secs(30));
    assert!(o.status.success() && d.is_mounted(), "mount under ulimit -n 20000/1024: {:?}", out_str(&o));
    let nr_open: u64 = fs::read_to_string("/proc/sys/fs/nr_open").unwrap().trim().parse().unwrap();
    // CAP_SYS_RESOURCE (bit 24 of CapEff), which the daemon inherits,
    // lets it raise its hard limit; some containers' root lacks it.
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let caps = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(|h| u64::from_str_radix(h.trim(), 16).unwrap()).unwrap();
    let v = status_json(&d.mp);
    if caps & (1 << 24) == 0 {
        assert_eq!(v["mount"]["open_files_limit"], 20000, "without CAP_SYS_RESOURCE: the soft limit raised to the hard one");
        eprintln!("no CAP_SYS_RESOURCE here: the daemon cannot go past its hard limit (20 000); the 2 × 12 000 open files part is skipped");
        return;
    }
    assert_eq!(v["mount"]["open_files_limit"], nr_open.max(20000), "as root: raised to fs.nr_open");
    let open = r#"
import os, sys, time
tag = sys.argv[1]
os.mkdir(tag)
fds = [os.open(f"{tag}/f{i}", os.O_CREAT | os.O_WRONLY, 0o600) for i in range(12000)]
open(f"ready-{tag}", "w").close()
t = time.time()
while not all(os.path.exists(f"ready-{x}") for x in "ab"):
    if time.time() - t > 120:
        sys.exit("the other process never got its files open")
    time.sleep(0.05)
print(len(fds))
"#;
    fs::write(d.dir().join("open.py"), open).unwrap();
    let both = format!("ulimit -n 13000; cd {mp} || exit 1; python3 {0}/open.py a > {0}/a.out & a=$!; python3 {0}/open.py b > {0}/b.out & b=$!; wait $a && wait $b", d.dir().display());
    let o = run_timeout(Command::new("bash").args(["-c", &both]), Duration::from_secs(300));
    let outs: Vec<String> = ["a", "b"].iter().map(|t| fs::read_to_string(d.dir().join(format!("{t}.out"))).unwrap_or_default()).collect();
    assert!(o.status.success() && outs.iter().all(|s| s.trim() == "12000"), "two processes opening 12 000 files each: {outs:?} {:?}", out_str(&o));
}
