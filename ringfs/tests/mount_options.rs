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
    let script = format!("ulimit -S -n 1024; exec {RINGFS} mount {mp} --memory --daemon --log-file {}/log {}", d.dir().display(), env_mount_args().join(" "));
    let o = run_timeout(Command::new("bash").args(["-c", &script]), Duration::from_secs(30));
    assert!(o.status.success() && d.is_mounted(), "mount under ulimit -n 1024: {:?}", out_str(&o));
    let hard = fs::read_to_string("/proc/self/limits").unwrap();
    let hard: u64 = hard.lines().find(|l| l.starts_with("Max open files")).unwrap().split_whitespace().nth(4).unwrap().parse().unwrap();
    let v = status_json(&d.mp);
    assert_eq!(v["mount"]["open_files_limit"], hard, "raised to the hard limit");
    // 2000 files open at once from a shell with a higher limit.
    let open = format!(
        "ulimit -n 4096; cd {mp} && python3 -c \"fs=[open(f'f{{i}}','w') for i in range(2000)]\n[(f.write('x'), f.flush()) for f in fs]\nrs=[open(f'f{{i}}') for i in range(2000)]\nassert all(r.read()=='x' for r in rs)\nprint(len(fs)+len(rs))\""
    );
    let o = run_timeout(Command::new("bash").args(["-c", &open]), Duration::from_secs(120));
    let (so, se) = out_str(&o);
    assert!(o.status.success() && so.trim() == "4000", "opening 2000 files: {so}{se}");
}
