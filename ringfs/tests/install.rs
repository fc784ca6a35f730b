//! `ringfs install` (binary, mount(8) helper, systemd unit, completions,
//! man pages), the helper mount.fuse.ringfs on its own and through mount(8)
//! and an fstab line, the unit checked by `systemd-analyze verify`, and the
//! sd_notify protocol the unit relies on (READY=1, STOPPING=1 on SIGTERM).
//!
//! The mount(8) test needs the helper in /sbin, where mount(8) looks:
//! `common::sbin_helper` links /sbin/mount.fuse.ringfs to the binary under
//! test for the duration of the test and removes the link afterwards (an
//! existing one, say from a real install, is left alone and the test skipped).

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

macro_rules! skip_if_raw {
    () => {
        if raw_mode() {
            eprintln!("RINGFS_TEST_RAW_DIR=1: install tests need the real binary; skipped");
            return;
        }
    };
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn install_to(prefix: &Path) {
    let o = ringfs(&["install", "--prefix", &s(prefix)]);
    assert!(o.status.success(), "ringfs install: {:?}", out_str(&o));
}

#[test]
fn install_puts_everything_under_the_prefix() {
    skip_if_raw!();
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("usr");
    install_to(&p);
    install_to(&p); // again: replaces what is there
    let bin = p.join("bin/ringfs");
    assert_eq!(fs::read(&bin).unwrap(), fs::read(RINGFS).unwrap(), "the binary");
    assert_eq!(fs::metadata(&bin).unwrap().permissions().mode() & 0o777, 0o755);
    assert_eq!(fs::read_link(p.join("sbin/mount.fuse.ringfs")).unwrap(), bin, "the helper links to the binary");
    let unit = fs::read_to_string(p.join("lib/systemd/system/ringfs@.service")).unwrap();
    assert!(unit.contains(&format!("ExecStart={} mount %f $RINGFS_ARGS", bin.display())), "{unit}");
    assert_eq!(unit.replace(&s(&bin), "/usr/local/bin/ringfs"), fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/ringfs@.service")).unwrap());
    // Completions.
    let bash = p.join("share/bash-completion/completions/ringfs");
    let o = run_timeout(Command::new("bash").arg("-c").arg(format!("source {} && complete -p ringfs", bash.display())), Duration::from_secs(10));
    assert!(o.status.success(), "bash completion loads: {:?}", out_str(&o));
    assert!(fs::read_to_string(p.join("share/zsh/site-functions/_ringfs")).unwrap().starts_with("#compdef ringfs"));
    assert!(fs::read_to_string(p.join("share/fish/vendor_completions.d/ringfs.fish")).unwrap().contains("complete -c ringfs"));
    let o = ringfs(&["completions", "bash"]);
    assert_eq!(o.stdout, fs::read(&bash).unwrap(), "ringfs completions bash is what was installed");
    // Man pages.
    for (page, want) in [("man1/ringfs.1", "umount"), ("man1/ringfs-mount.1", "nonempty"), ("man1/ringfs-umount.1", "lazy"), ("man8/mount.fuse.ringfs.8", "fstab")] {
        let path = p.join("share/man").join(page);
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(text.starts_with(".TH") || text.contains("\n.TH"), "{page} is a man page");
        assert!(text.contains(want), "{page} mentions {want}");
        if Path::new("/usr/bin/man").exists() {
            let o = run_timeout(Command::new("man").arg("-l").arg(&path).env("MANPAGER", "cat").env("MANWIDTH", "80"), Duration::from_secs(20));
            assert!(o.status.success() && !o.stdout.is_empty(), "man -l {page}: {:?}", out_str(&o).1);
        }
    }
}

#[test]
fn systemd_unit_verifies() {
    skip_if_raw!();
    let Some(analyze) = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"].into_iter().find(|p| Path::new(p).exists()) else {
        eprintln!("systemd-analyze not installed: skipping the systemd unit check");
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("usr");
    install_to(&p);
    let dir = p.join("lib/systemd/system");
    // The template, and an instance of it as systemctl would name it.
    fs::copy(dir.join("ringfs@.service"), dir.join("ringfs@work-ws.service")).unwrap();
    for unit in ["ringfs@.service", "ringfs@work-ws.service"] {
        let o = run_timeout(Command::new(analyze).args(["verify", "--man=no"]).arg(dir.join(unit)), Duration::from_secs(60));
        let (so, se) = out_str(&o);
        assert!(o.status.success(), "systemd-analyze verify {unit}: {so}{se}");
        let warnings: Vec<&str> = se.lines().filter(|l| l.contains("ringfs@")).collect();
        assert!(warnings.is_empty(), "systemd-analyze verify {unit} warns: {se}");
    }
}

/// The pid of the daemon serving `mp`, from `ringfs status --json`.
fn daemon_pid(mp: &Path) -> i32 {
    let o = ringfs(&["status", "--json", &s(mp)]);
    assert!(o.status.success(), "status: {}", out_str(&o).1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["pid"].as_i64().unwrap() as i32
}

/// umount(8) of `mp`, then waits until the daemon `pid` has exited.
fn umount_8(mp: &Path, pid: i32) {
    let o = run_timeout(Command::new("umount").arg(mp), Duration::from_secs(30));
    assert!(o.status.success(), "umount: {:?}", out_str(&o));
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the daemon {pid} did not exit after umount");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mount_fields(mp: &Path) -> (String, String) {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = text.lines().rfind(|l| l.split(' ').nth(4) == Some(&s(mp))).unwrap_or_else(|| panic!("{} not mounted", mp.display())).to_string();
    let (pre, post) = line.split_once(" - ").unwrap();
    (pre.split(' ').nth(5).unwrap().to_string(), post.split(' ').nth(1).unwrap().to_string())
}

fn fsck_clean(store: &Path) {
    let o = ringfs(&["fsck", "--store", &s(store)]);
    assert!(o.status.success(), "fsck {}: {:?}", store.display(), out_str(&o));
}

#[test]
fn helper_maps_mount_8_arguments() {
    skip_if_raw!();
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("usr");
    install_to(&p);
    let helper = p.join("sbin/mount.fuse.ringfs");
    let d = DaemonMount::new("helper");
    let o = run_timeout(
        Command::new(&helper).arg(&d.store).arg(&d.mp).args(["-n", "-o", "rw,noatime,ignore=node_modules,defaults,nofail", "-t", "fuse.ringfs"]),
        Duration::from_secs(30),
    );
    assert!(o.status.success() && d.is_mounted(), "helper mount: {:?}", out_str(&o));
    let (opts, source) = mount_fields(&d.mp);
    assert!(opts.contains("noatime") && opts.contains("nosuid") && opts.contains("nodev"), "{opts}");
    assert_eq!(source, s(&d.store.canonicalize().unwrap()), "the store is the mount's source");
    fs::write(d.mp.join("kept"), "through the helper").unwrap();
    // remount through the helper
    let o = run_timeout(Command::new(&helper).arg("ringfs").arg(&d.mp).args(["-o", "remount,ro"]), Duration::from_secs(30));
    assert!(o.status.success(), "helper remount: {:?}", out_str(&o));
    assert!(mount_fields(&d.mp).0.starts_with("ro"));
    let o = run_timeout(Command::new(&helper).arg("ringfs").arg(&d.mp).args(["-o", "remount,rw"]), Duration::from_secs(30));
    assert!(o.status.success(), "helper remount: {:?}", out_str(&o));
    umount_8(&d.mp, daemon_pid(&d.mp));
    fsck_clean(&d.store);
    // Bad input: one line naming the problem, exit 32 (mount failure) or 1 (usage).
    let o = run_timeout(Command::new(&helper).arg(&d.store).arg(&d.mp).args(["-o", "frob"]), Duration::from_secs(30));
    assert!(!o.status.success() && out_str(&o).1.contains("unknown mount option `frob`"), "{:?}", out_str(&o));
    let o = run_timeout(Command::new(&helper).arg(&d.mp), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(1), "{:?}", out_str(&o));
    // -f: nothing happens.
    let o = run_timeout(Command::new(&helper).arg("memory").arg(&d.mp).arg("-f"), Duration::from_secs(30));
    assert!(o.status.success() && !d.is_mounted());
}

#[test]
fn mount_8_fstab_and_umount_8() {
    skip_if_raw!();
    let Some(_helper) = sbin_helper() else { return };
    let d = DaemonMount::new("mount8");
    let o = run_timeout(Command::new("mount").args(["-t", "fuse.ringfs", &s(&d.store), &s(&d.mp), "-o", "noatime,ignore=node_modules"]), Duration::from_secs(30));
    assert!(o.status.success() && d.is_mounted(), "mount -t fuse.ringfs: {:?}", out_str(&o));
    assert!(mount_fields(&d.mp).0.contains("noatime"));
    fs::write(d.mp.join("f"), "one").unwrap();
    let o = run_timeout(Command::new("mount").args(["-o", "remount,ro", &s(&d.mp)]), Duration::from_secs(30));
    assert!(o.status.success(), "mount -o remount,ro: {:?}", out_str(&o));
    assert_eq!(fs::write(d.mp.join("f"), "x").unwrap_err().raw_os_error(), Some(libc::EROFS));
    let o = run_timeout(Command::new("mount").args(["-o", "remount,rw", &s(&d.mp)]), Duration::from_secs(30));
    assert!(o.status.success(), "mount -o remount,rw: {:?}", out_str(&o));
    fs::write(d.mp.join("f"), "two").unwrap();
    umount_8(&d.mp, daemon_pid(&d.mp));
    fsck_clean(&d.store);
    // An fstab line (mount -T reads another fstab than /etc/fstab).
    let fstab = d.dir().join("fstab");
    fs::write(&fstab, format!("# test\n{}  {}  fuse.ringfs  noatime,ignore=node_modules,nofail,x-systemd.after=local-fs.target  0 0\n", s(&d.store), s(&d.mp))).unwrap();
    let o = run_timeout(Command::new("mount").arg("-T").arg(&fstab).arg(&d.mp), Duration::from_secs(30));
    assert!(o.status.success() && d.is_mounted(), "mount from fstab: {:?}", out_str(&o));
    assert_eq!(fs::read_to_string(d.mp.join("f")).unwrap(), "two");
    umount_8(&d.mp, daemon_pid(&d.mp));
}

#[test]
fn sd_notify_ready_and_stopping() {
    skip_if_raw!();
    let d = DaemonMount::new("notify");
    let sock_path = d.dir().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let child = Command::new(RINGFS)
        .args(["mount", &s(&d.mp), "--store", &s(&d.store)])
        .args(env_mount_args())
        .env("NOTIFY_SOCKET", &sock_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Kill(child);
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("READY=1 within 20 s");
    assert_eq!(&buf[..n], b"READY=1");
    assert!(d.is_mounted(), "mounted when READY=1 is sent");
    fs::write(d.mp.join("f"), "committed at stop").unwrap();
    // SIGTERM (systemctl stop): STOPPING=1, then commit, unmount, exit 0.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let n = sock.recv(&mut buf).expect("STOPPING=1");
    assert_eq!(&buf[..n], b"STOPPING=1");
    let st = wait_timeout(&mut child.0, Duration::from_secs(30)).expect("the daemon exits after SIGTERM");
    assert!(st.success(), "exit status {st}");
    assert!(!d.is_mounted());
    fsck_clean(&d.store);
}
