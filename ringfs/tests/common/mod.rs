//! Shared harness for the real-mount integration tests.
//!
//! `TestMount` mounts a fresh ringfs workspace (memory or durable store) on a private
//! temp directory, and tears everything down on drop — on every path, including panics:
//! `ringfs umount`, wait for the daemon, SIGKILL it if it hangs, `umount -l` only if the
//! mountpoint (which is ours: a unique temp dir) is still a mount, then remove the temp
//! dirs. A watchdog aborts the FUSE connection of a test that runs too long, so a hung
//! filesystem fails a test instead of hanging CI.
//!
//! Environment:
//! - `RINGFS_TEST_MOUNT_ARGS`: extra whitespace-separated args for every `ringfs mount`
//!   (a CI matrix runs the same tests per mode, e.g. `--passthrough off`).
//! - `RINGFS_TEST_RAW_DIR=1`: do not mount at all; use a plain host temp dir (ext4
//!   reference semantics). Used to validate the tests themselves.
//! - `RINGFS_TEST_TIMEOUT`: per-mount watchdog in seconds (default 600).
//! - `RINGFS_TEST_KEEP_LOGS=1`: print the daemon's stderr even when the test passes.
#![allow(dead_code)]

use std::ffi::{CString, OsStr};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

pub const RINGFS: &str = env!("CARGO_BIN_EXE_ringfs");

mod daemon;
pub mod garage;
#[allow(unused_imports)]
pub use daemon::{sbin_helper, DaemonMount, SbinHelper, SBIN_HELPER};

/// Unprivileged identity used by the non-root cases (`nobody:nogroup` on Debian).
pub const NOBODY_UID: u32 = 65534;
pub const NOBODY_GID: u32 = 65534;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Store,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Store => "store",
        }
    }
}

/// True when the harness runs against a plain host directory instead of a mount.
pub fn raw_mode() -> bool {
    matches!(std::env::var("RINGFS_TEST_RAW_DIR").as_deref(), Ok("1") | Ok("true") | Ok("yes"))
}

/// Extra mount args from the environment (CI matrix).
pub fn env_mount_args() -> Vec<String> {
    std::env::var("RINGFS_TEST_MOUNT_ARGS")
        .map(|s| s.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

fn watchdog_secs() -> u64 {
    std::env::var("RINGFS_TEST_TIMEOUT").ok().and_then(|s| s.parse().ok()).unwrap_or(600)
}

// ---------------------------------------------------------------------------------
// mountinfo
// ---------------------------------------------------------------------------------

/// One line of /proc/self/mountinfo, the fields we need.
#[derive(Clone, Debug)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    /// "major:minor" of the superblock; for FUSE the minor is the fusectl connection id.
    pub dev: String,
    pub fstype: String,
}

fn unescape_mountinfo(s: &str) -> PathBuf {
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() + 0 && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

pub fn mounts() -> Vec<MountEntry> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let f: Vec<&str> = pre.split(' ').collect();
            if f.len() < 5 {
                return None;
            }
            let fstype = post.split(' ').next().unwrap_or("").to_owned();
            Some(MountEntry { mount_point: unescape_mountinfo(f[4]), dev: f[2].to_owned(), fstype })
        })
        .collect()
}

/// The topmost mount at exactly `path`, if any.
pub fn mount_at(path: &Path) -> Option<MountEntry> {
    mounts().into_iter().filter(|m| m.mount_point == path).last()
}

pub fn is_mounted(path: &Path) -> bool {
    mount_at(path).is_some()
}

/// Abort a FUSE connection through fusectl (all pending and future requests fail with
/// ENOTCONN). Used by the watchdog and as a last resort in cleanup.
fn fuse_abort(dev: &str) {
    if let Some((_, minor)) = dev.split_once(':') {
        let p = format!("/sys/fs/fuse/connections/{minor}/abort");
        if Path::new(&p).exists() {
            let _ = fs::write(&p, "1");
        }
    }
}

// ---------------------------------------------------------------------------------
// process helpers
// ---------------------------------------------------------------------------------

/// Wait for a child with a timeout; `None` if it is still running.
pub fn wait_timeout(child: &mut Child, t: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + t;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Run a command to completion with a timeout (killed on expiry). Output captured.
pub fn run_timeout(cmd: &mut Command, t: Duration) -> Output {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    // Drain pipes in threads so a chatty child cannot block.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let to = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let te = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let status = match wait_timeout(&mut child, t) {
        Some(s) => s,
        None => {
            let _ = child.kill();
            let s = child.wait().expect("wait after kill");
            let stdout = to.join().unwrap_or_default();
            let mut stderr = te.join().unwrap_or_default();
            stderr.extend_from_slice(format!("\n[harness: killed after {t:?} timeout]\n").as_bytes());
            return Output { status: s, stdout, stderr };
        }
    };
    Output { status, stdout: to.join().unwrap_or_default(), stderr: te.join().unwrap_or_default() }
}

pub fn out_str(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Run `ringfs ARGS` (not `mount` in the foreground!) with a timeout.
pub fn ringfs(args: &[&str]) -> Output {
    run_timeout(Command::new(RINGFS).args(args), Duration::from_secs(60))
}

pub fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub fn errno_name(e: i32) -> String {
    let names = [
        (libc::EPERM, "EPERM"),
        (libc::ENOENT, "ENOENT"),
        (libc::EIO, "EIO"),
        (libc::EBADF, "EBADF"),
        (libc::EAGAIN, "EAGAIN"),
        (libc::EACCES, "EACCES"),
        (libc::EBUSY, "EBUSY"),
        (libc::EEXIST, "EEXIST"),
        (libc::EXDEV, "EXDEV"),
        (libc::ENOTDIR, "ENOTDIR"),
        (libc::EISDIR, "EISDIR"),
        (libc::EINVAL, "EINVAL"),
        (libc::ENOSPC, "ENOSPC"),
        (libc::ENAMETOOLONG, "ENAMETOOLONG"),
        (libc::ENOSYS, "ENOSYS"),
        (libc::ENOTEMPTY, "ENOTEMPTY"),
        (libc::ELOOP, "ELOOP"),
        (libc::ENODATA, "ENODATA"),
        (libc::EOPNOTSUPP, "EOPNOTSUPP"),
        (libc::ENOTTY, "ENOTTY"),
        (libc::ENXIO, "ENXIO"),
        (libc::ENOTCONN, "ENOTCONN"),
        (libc::ERANGE, "ERANGE"),
    ];
    names.iter().find(|(n, _)| *n == e).map(|(_, s)| s.to_string()).unwrap_or_else(|| format!("errno {e}"))
}

// ---------------------------------------------------------------------------------
// TestMount
// ---------------------------------------------------------------------------------

pub struct MountBuilder {
    backend: Backend,
    args: Vec<String>,
    name: String,
    envs: Vec<(String, String)>,
}

impl MountBuilder {
    /// Extra args for `ringfs mount` (in addition to RINGFS_TEST_MOUNT_ARGS).
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, it: I) -> Self {
        self.args.extend(it.into_iter().map(Into::into));
        self
    }
    /// An environment variable for the daemon (e.g. the AWS_* of an S3 remote), on
    /// every mount of this TestMount.
    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.envs.push((k.into(), v.into()));
        self
    }
    /// A label for log lines.
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = n.into();
        self
    }
    pub fn mount(self) -> TestMount {
        TestMount::start(self)
    }
}

pub struct TestMount {
    /// Owns everything below; removed last (after the mount is gone).
    root: Option<tempfile::TempDir>,
    mp: PathBuf,
    store: PathBuf,
    /// A writable HOME for tools (git, npm, python) outside the mount.
    home: PathBuf,
    /// Scratch space on the host, outside the mount.
    host_tmp: PathBuf,
    backend: Backend,
    args: Vec<String>,
    name: String,
    /// Extra environment of the daemon (`MountBuilder::env`).
    envs: Vec<(String, String)>,
    child: Option<Child>,
    daemon_log: PathBuf,
    generation: u32,
    /// fusectl connection of the current mount, "major:minor".
    dev: Option<String>,
    watchdog: Option<mpsc::Sender<()>>,
    /// What the last successful `ringfs umount` printed on stderr.
    last_umount: String,
}

impl TestMount {
    pub fn builder(backend: Backend) -> MountBuilder {
        MountBuilder { backend, args: Vec::new(), name: String::new(), envs: Vec::new() }
    }
    pub fn new(backend: Backend) -> TestMount {
        Self::builder(backend).mount()
    }

    fn start(b: MountBuilder) -> TestMount {
        let root = tempfile::Builder::new().prefix("ringfs-test-").tempdir().expect("tempdir");
        // Non-root test users must be able to traverse to the mountpoint.
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let rp = root.path().to_path_buf();
        let mp = rp.join("mnt");
        let store = rp.join("store");
        let home = rp.join("home");
        let host_tmp = rp.join("host-tmp");
        for d in [&mp, &home, &host_tmp] {
            fs::create_dir(d).unwrap();
        }
        fs::set_permissions(&host_tmp, fs::Permissions::from_mode(0o1777)).unwrap();
        let mut args = b.args;
        args.extend(env_mount_args());
        let mut tm = TestMount {
            root: Some(root),
            daemon_log: rp.join("daemon.log"),
            mp,
            store,
            home,
            host_tmp,
            backend: b.backend,
            args,
            name: if b.name.is_empty() { b.backend.name().to_owned() } else { b.name },
            envs: b.envs,
            child: None,
            generation: 0,
            dev: None,
            watchdog: None,
            last_umount: String::new(),
        };
        tm.spawn_daemon();
        tm
    }

    pub fn is_raw(&self) -> bool {
        raw_mode()
    }
    /// The mountpoint (root of the workspace).
    pub fn path(&self) -> &Path {
        &self.mp
    }
    pub fn p(&self, rel: &str) -> PathBuf {
        self.mp.join(rel)
    }
    pub fn store_dir(&self) -> &Path {
        &self.store
    }
    pub fn backend(&self) -> Backend {
        self.backend
    }
    pub fn home(&self) -> &Path {
        &self.home
    }
    /// A directory on the host file system (not in the mount) that is removed with the mount.
    pub fn host_tmp(&self) -> &Path {
        &self.host_tmp
    }
    pub fn daemon_pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
    pub fn daemon_log(&self) -> String {
        fs::read_to_string(&self.daemon_log).unwrap_or_default()
    }

    /// The `ringfs mount` argument list for this mount.
    pub fn mount_args(&self) -> Vec<String> {
        let mut v = vec!["mount".to_owned(), self.mp.display().to_string()];
        match self.backend {
            Backend::Memory => v.push("--memory".into()),
            Backend::Store => {
                v.push("--store".into());
                v.push(self.store.display().to_string());
            }
        }
        v.extend(self.args.iter().cloned());
        v
    }

    fn spawn_daemon(&mut self) {
        self.generation += 1;
        if raw_mode() {
            return;
        }
        assert!(!is_mounted(&self.mp), "{} already mounted before spawn", self.mp.display());
        let log = fs::OpenOptions::new().create(true).append(true).open(&self.daemon_log).unwrap();
        let log2 = log.try_clone().unwrap();
        let mut cmd = Command::new(RINGFS);
        cmd.args(self.mount_args())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .env("RUST_BACKTRACE", "1")
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        // If the test process dies without running Drop, the daemon gets SIGTERM
        // (flush, commit, unmount). PDEATHSIG follows the spawning thread; the guard
        // never outlives the test thread that created it.
        // The mount shows in mountinfo before the daemon serves its control
        // socket (and places native roots): wait for the line it writes on
        // RINGFS_READY_FD once ready, as a `--daemon` parent does. A mount
        // whose args hold `--daemon` hands its child a pipe of its own; its
        // exit with the mount up is then the sign (below).
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills two fds.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) }, 0, "pipe2");
        let (ready_rd, ready_wr) = (fds[0], fds[1]);
        cmd.env("RINGFS_READY_FD", ready_wr.to_string());
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                // The write end survives exec in the child only.
                libc::fcntl(ready_wr, libc::F_SETFD, 0);
                Ok(())
            });
        }
        let started = Instant::now();
        let spawned = cmd.spawn();
        // SAFETY: our copy of the write end, not used again.
        unsafe { libc::close(ready_wr) };
        let mut child = spawned.unwrap_or_else(|e| panic!("spawn {RINGFS}: {e}"));
        let deadline = started + Duration::from_secs(15);
        let mut ready = false;
        let mut said = Vec::new();
        loop {
            if !ready {
                let mut buf = [0u8; 256];
                // SAFETY: reading into a local buffer from our own fd.
                let n = unsafe { libc::read(ready_rd, buf.as_mut_ptr().cast(), buf.len()) };
                if n > 0 {
                    said.extend_from_slice(&buf[..n as usize]);
                }
                // A line ("ok", or "error: …" before the daemon exits), or EOF.
                ready = n == 0 || said.contains(&b'\n');
            }
            if ready {
                if let Some(m) = mount_at(&self.mp) {
                    self.dev = Some(m.dev);
                    break;
                }
            }
            if let Ok(Some(st)) = child.try_wait() {
                // `--daemon` may detach: exit 0 with the mount up is success.
                if st.success() {
                    if let Some(m) = mount_at(&self.mp) {
                        self.dev = Some(m.dev);
                        self.child = None;
                        // SAFETY: our read end, not used again.
                        unsafe { libc::close(ready_rd) };
                        self.start_watchdog();
                        return;
                    }
                }
                let log = self.daemon_log();
                panic!(
                    "ringfs mount {:?} exited with {st} before the mount was ready.\n--- daemon output ---\n{log}",
                    self.mount_args()
                );
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                if is_mounted(&self.mp) {
                    lazy_umount(&self.mp);
                }
                panic!(
                    "ringfs mount {:?} not ready after 15 s\n--- daemon output ---\n{}",
                    self.mount_args(),
                    self.daemon_log()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: our read end, not used again.
        unsafe { libc::close(ready_rd) };
        eprintln!(
            "[{}] mounted {} (gen {}, pid {}) in {:?}",
            self.name,
            self.mp.display(),
            self.generation,
            child.id(),
            started.elapsed()
        );
        self.child = Some(child);
        self.start_watchdog();
    }

    fn start_watchdog(&mut self) {
        let (tx, rx) = mpsc::channel::<()>();
        let dev = self.dev.clone();
        let pid = self.child.as_ref().map(|c| c.id() as i32);
        let mp = self.mp.clone();
        let secs = watchdog_secs();
        thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(secs)) {
                eprintln!(
                    "WATCHDOG: test used its mount {} for more than {secs} s; aborting the FUSE connection",
                    mp.display()
                );
                if let Some(d) = &dev {
                    fuse_abort(d);
                }
                if let Some(p) = pid {
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
            }
        });
        self.watchdog = Some(tx);
    }

    fn stop_watchdog(&mut self) {
        if let Some(tx) = self.watchdog.take() {
            let _ = tx.send(());
        }
    }

    /// Clean stop: `ringfs umount`, wait for the daemon to exit 0, mount gone.
    /// Returns a description of anything that went wrong (empty on success).
    fn stop_daemon(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        self.stop_watchdog();
        if raw_mode() {
            return problems;
        }
        // `ringfs umount` waits for the daemon process to go away; the daemon is our
        // child, so reap it while umount runs (an unreaped zombie still "exists").
        let mut daemon_status: Option<ExitStatus> = None;
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                daemon_status = Some(st); // already gone (signal, crash)
            }
        }
        // Not mounted any more (a signal stop, an external umount): nothing to
        // ask `ringfs umount`; the daemon is only waited for below.
        // A tool's background process (say git's auto-maintenance) may
        // still be leaving the mount: `ringfs umount` answers EBUSY; retry
        // for 10 s, then detach it with --lazy (what umount did before it
        // refused busy mounts).
        let busy_since = Instant::now();
        let mut lazy = false;
        while is_mounted(&self.mp) {
            let mut cmd = Command::new(RINGFS);
            cmd.arg("umount").arg(&self.mp).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
            if lazy {
                cmd.arg("--lazy");
            }
            match cmd.spawn() {
                Err(e) => {
                    problems.push(format!("spawn ringfs umount: {e}"));
                    break;
                }
                Ok(mut um) => {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    let um_status = loop {
                        if daemon_status.is_none() {
                            if let Some(c) = self.child.as_mut() {
                                if let Ok(Some(st)) = c.try_wait() {
                                    daemon_status = Some(st);
                                }
                            }
                        }
                        if let Ok(Some(st)) = um.try_wait() {
                            break Some(st);
                        }
                        if Instant::now() >= deadline {
                            let _ = um.kill();
                            let _ = um.wait();
                            break None;
                        }
                        thread::sleep(Duration::from_millis(10));
                    };
                    let mut so = String::new();
                    let mut se = String::new();
                    if let Some(mut o) = um.stdout.take() {
                        let _ = o.read_to_string(&mut so);
                    }
                    if let Some(mut e) = um.stderr.take() {
                        let _ = e.read_to_string(&mut se);
                    }
                    match um_status {
                        Some(st) if st.success() => {
                            self.last_umount = se;
                            break;
                        }
                        Some(_) if se.contains("(EBUSY)") && !lazy => {
                            if busy_since.elapsed() > Duration::from_secs(10) {
                                eprintln!("[{}] still busy after 10 s, detaching lazily: {se}", self.name);
                                lazy = true;
                            } else {
                                thread::sleep(Duration::from_millis(200));
                            }
                        }
                        Some(st) => {
                            problems.push(format!("ringfs umount exited {st}: {so}{se}"));
                            break;
                        }
                        None => {
                            problems.push(format!("ringfs umount hung for 30 s: {so}{se}"));
                            break;
                        }
                    }
                }
            }
        }
        if let Some(mut child) = self.child.take() {
            let st = daemon_status.or_else(|| wait_timeout(&mut child, Duration::from_secs(30)));
            match st {
                Some(st) if st.success() => {}
                Some(st) => problems.push(format!("daemon exited with {st}")),
                None => {
                    problems.push("daemon still running 30 s after umount; SIGKILL".into());
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        // Only our own unique mountpoint is ever touched here.
        let mut tries = 0;
        while let Some(m) = mount_at(&self.mp) {
            tries += 1;
            if tries == 1 {
                problems.push(format!("{} still mounted after the daemon stopped", self.mp.display()));
            }
            fuse_abort(&m.dev);
            lazy_umount(&self.mp);
            if tries > 5 {
                problems.push("could not remove the mount".into());
                break;
            }
        }
        if let Some(d) = self.dev.take() {
            // A lazily detached connection may still be alive; make sure it dies.
            let minor = d.split_once(':').map(|x| x.1.to_owned()).unwrap_or_default();
            if !problems.is_empty() && Path::new(&format!("/sys/fs/fuse/connections/{minor}")).exists() {
                fuse_abort(&d);
            }
        }
        problems
    }

    /// Unmount cleanly and assert that it was clean (umount exit 0, daemon exit 0).
    pub fn unmount_checked(&mut self) {
        let p = self.stop_daemon();
        assert!(
            p.is_empty(),
            "unclean unmount of {}: {p:?}\n--- daemon output ---\n{}",
            self.mp.display(),
            self.daemon_log()
        );
    }

    /// What the last clean `ringfs umount` printed on stderr (its progress).
    pub fn last_umount_output(&self) -> &str {
        &self.last_umount
    }

    /// Replaces the mount args for the next mount (RINGFS_TEST_MOUNT_ARGS still apply).
    pub fn set_args(&mut self, args: &[&str]) {
        self.args = args.iter().map(|a| a.to_string()).collect();
        self.args.extend(env_mount_args());
    }

    /// Unmount and mount again on the same store (durable stores only).
    pub fn remount(&mut self) {
        assert_eq!(self.backend, Backend::Store, "remount needs a durable store");
        self.unmount_checked();
        self.spawn_daemon();
    }

    /// Simulate a crash: SIGKILL the daemon, then remove the dead mount.
    pub fn kill_daemon(&mut self) {
        self.stop_watchdog();
        if raw_mode() {
            return;
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let mut tries = 0;
        while is_mounted(&self.mp) && tries < 10 {
            tries += 1;
            // `ringfs umount` of a dead daemon should remove the stale mount; fall
            // back to a lazy unmount of our own mountpoint.
            let _ = run_timeout(Command::new(RINGFS).arg("umount").arg(&self.mp), Duration::from_secs(10));
            if is_mounted(&self.mp) {
                lazy_umount(&self.mp);
            }
        }
        assert!(!is_mounted(&self.mp), "could not remove the dead mount");
        self.dev = None;
    }

    /// Mount again after `kill_daemon` (same store).
    pub fn mount_again(&mut self) {
        assert!(self.child.is_none());
        self.spawn_daemon();
    }

    // --- running things inside the mount ---------------------------------------

    fn base_cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        c.current_dir(&self.mp)
            .env("M", &self.mp)
            .env("HOME", &self.home)
            .env("TMPDIR", &self.host_tmp)
            .env("LC_ALL", "C")
            // The test runner's cargo settings must not leak into tools run in the mount.
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET_DIR")
            .env_remove("RUSTFLAGS")
            // Real tools write bytecode caches; that is part of the workload.
            .env_remove("PYTHONDONTWRITEBYTECODE")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "ringfs test")
            .env("GIT_AUTHOR_EMAIL", "test@ringfs.invalid")
            .env("GIT_COMMITTER_NAME", "ringfs test")
            .env("GIT_COMMITTER_EMAIL", "test@ringfs.invalid")
            .env("npm_config_update_notifier", "false")
            .env("npm_config_fund", "false")
            .env("npm_config_audit", "false");
        c
    }

    /// Run `bash -c SCRIPT` as root in the mount (cwd = mountpoint, `$M` = mountpoint).
    pub fn sh(&self, script: &str) -> Output {
        self.sh_timeout(script, Duration::from_secs(300))
    }
    pub fn sh_timeout(&self, script: &str, t: Duration) -> Output {
        let mut c = self.base_cmd("bash");
        c.arg("-c").arg(format!("umask 022\nset -e\n{script}"));
        run_timeout(&mut c, t)
    }
    /// Run `bash -c SCRIPT` as uid/gid 65534 (no supplementary groups), cwd = mountpoint.
    pub fn sh_as_nobody(&self, script: &str) -> Output {
        self.sh_as(NOBODY_UID, NOBODY_GID, script)
    }
    pub fn sh_as(&self, uid: u32, gid: u32, script: &str) -> Output {
        let mut c = self.base_cmd("setpriv");
        c.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg("--")
            .arg("bash")
            .arg("-c")
            .arg(format!("umask 022\nset -e\n{script}"))
            .env("HOME", &self.host_tmp);
        run_timeout(&mut c, Duration::from_secs(300))
    }

    /// Run as root; assert exit 0; return stdout.
    #[track_caller]
    pub fn sh_ok(&self, script: &str) -> String {
        let o = self.sh(script);
        self.check_ok(script, &o)
    }
    #[track_caller]
    pub fn sh_nobody_ok(&self, script: &str) -> String {
        let o = self.sh_as_nobody(script);
        self.check_ok(script, &o)
    }
    #[track_caller]
    pub fn check_ok(&self, script: &str, o: &Output) -> String {
        let (so, se) = out_str(o);
        assert!(
            o.status.success(),
            "[{}] script failed ({}):\n--- script ---\n{script}\n--- stdout ---\n{so}\n--- stderr ---\n{se}",
            self.name,
            o.status
        );
        so
    }

    /// A directory in the mount owned by uid/gid 65534, mode 0755.
    pub fn nobody_dir(&self, rel: &str) -> PathBuf {
        let d = self.p(rel);
        fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(NOBODY_UID), Some(NOBODY_GID)).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        d
    }
}

/// Unmounts a mountpoint a test made inside or beside a workspace (a fork
/// mounted there, a bind mount) when dropped: `ringfs umount`, else
/// umount(8), else a lazy unmount.
pub struct MountGuard(pub PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = run_timeout(Command::new(RINGFS).arg("umount").arg(&self.0), Duration::from_secs(30));
        }
        if is_mounted(&self.0) {
            let _ = run_timeout(Command::new("umount").arg(&self.0), Duration::from_secs(10));
        }
        if is_mounted(&self.0) {
            lazy_umount(&self.0);
        }
    }
}

fn lazy_umount(p: &Path) {
    let _ = run_timeout(Command::new("umount").arg("-l").arg(p), Duration::from_secs(10));
    if is_mounted(p) {
        let c = cstr(p);
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        let panicking = thread::panicking();
        let problems = self.stop_daemon();
        if !problems.is_empty() || panicking || std::env::var_os("RINGFS_TEST_KEEP_LOGS").is_some() {
            let log = self.daemon_log();
            if !problems.is_empty() {
                eprintln!("[{}] cleanup problems: {problems:?}", self.name);
            }
            if !log.is_empty() {
                eprintln!("[{}] --- daemon output ---\n{log}--- end daemon output ---", self.name);
            }
        }
        if let Some(root) = self.root.take() {
            if is_mounted(&self.mp) {
                // Never recurse into a live mount; leave the dir rather than hang.
                eprintln!("[{}] {} is still mounted; leaving {}", self.name, self.mp.display(), root.path().display());
                let _ = root.keep();
            } else {
                let path = root.path().to_path_buf();
                if let Err(e) = root.close() {
                    // Files created by other users or read-only dirs: fix modes and retry.
                    let _ = Command::new("chmod").arg("-R").arg("u+rwx").arg(&path).status();
                    if fs::remove_dir_all(&path).is_err() {
                        eprintln!("[{}] could not remove {}: {e}", self.name, path.display());
                    }
                }
            }
        }
        if !problems.is_empty() && !panicking {
            // Surface an unclean unmount as a test failure (not a double panic).
            panic!("[{}] unclean unmount: {problems:?}", self.name);
        }
    }
}

/// `both_backends!(body_fn => name_memory, name_store;)` generates two `#[test]`s that
/// call `body_fn(&mut TestMount)` on a `--memory` and on a `--store` mount.
#[macro_export]
macro_rules! both_backends {
    ($($body:path => $mem:ident, $store:ident;)*) => {
        $(
            #[test]
            fn $mem() {
                let mut m = $crate::common::TestMount::new($crate::common::Backend::Memory);
                $body(&mut m);
            }
            #[test]
            fn $store() {
                let mut m = $crate::common::TestMount::new($crate::common::Backend::Store);
                $body(&mut m);
            }
        )*
    };
}

// ---------------------------------------------------------------------------------
// native roots
// ---------------------------------------------------------------------------------

/// Mount points strictly below `p` (native roots of a mount at `p`).
pub fn mounts_below(p: &Path) -> Vec<PathBuf> {
    mounts().into_iter().map(|m| m.mount_point).filter(|m| m != p && m.starts_with(p)).collect()
}

/// False when the environment's mount args turn native roots off (or raw mode).
pub fn native_roots_possible() -> bool {
    let a = env_mount_args().join(" ");
    !raw_mode() && !a.contains("--native-roots off")
}

/// Makes the directory `rel` (which must match an ignore pattern of `m`,
/// with a synced parent) and waits until it is bind-mounted as a native root.
pub fn make_native_root(m: &TestMount, rel: &str) -> PathBuf {
    let p = m.p(rel);
    if !p.exists() {
        fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
    }
    wait_native_root(&p);
    p
}

/// Makes the native root `rel` (as [`make_native_root`]) and detaches it with
/// `ringfs unroot`: the same host tree, now served by the daemon.
pub fn make_unrooted_tree(m: &TestMount, rel: &str) -> PathBuf {
    let dir = make_native_root(m, rel);
    let o = run_timeout(Command::new(RINGFS).arg("unroot").arg(&dir), Duration::from_secs(20));
    assert!(o.status.success(), "ringfs unroot: {}", out_str(&o).1);
    assert!(!is_mounted(&dir), "{} is still a mount point after unroot", dir.display());
    dir
}

/// Waits (10 s at most) until `p` is a mount point.
pub fn wait_native_root(p: &Path) {
    let t0 = Instant::now();
    while !is_mounted(p) {
        assert!(t0.elapsed() < Duration::from_secs(10), "{} did not become a native root (bind mount) within 10 s", p.display());
        thread::sleep(Duration::from_millis(10));
    }
}


/// Copies the tree `from` into `to` (created): directories and regular files.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
    // The directory's mode too, as `cp -a` (a store's are 0700: D87).
    std::fs::set_permissions(to, std::fs::metadata(from).unwrap().permissions()).unwrap();
}

/// A mountpoint as the `&str` the CLI takes.
pub fn mp(m: &TestMount) -> &str {
    m.path().to_str().unwrap()
}

/// `ringfs ARGS --json`, which must succeed: its document.
pub fn json(args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    let o = ringfs(&a);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "ringfs {args:?}: {out} {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ringfs {args:?} printed no JSON ({e}): {out}"))
}

/// Every path below `root` (relative) → what it is: file bytes, a link
/// target, or "dir".
pub fn tree(root: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == "lost+found" {
                continue;
            }
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                out.insert(
                    rel,
                    [
                        b"link:".to_vec(),
                        fs::read_link(&p)
                            .unwrap()
                            .into_os_string()
                            .into_encoded_bytes(),
                    ]
                    .concat(),
                );
            } else if ft.is_dir() {
                out.insert(rel, b"dir".to_vec());
                stack.push(p);
            } else {
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The `file://` URL of a remote directory.
pub fn file_url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// Bytes of hex text `s` (an object id as the CLI prints it).
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
}

/// Sets (`Some`: the commit id's bytes) or deletes ref `name` in the
/// `refs` table of an unmounted store (docs/FORMATS.md "redb schema"), as a
/// test's way to move or drop a branch behind the CLI's back.
pub fn set_ref(store: &Path, name: &str, value: Option<&[u8]>) {
    let db = redb::Database::open(store.join("store.redb")).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(fs_core::store::REFS).unwrap();
        match value {
            Some(v) => {
                t.insert(name, v).unwrap();
            }
            None => {
                t.remove(name).unwrap();
            }
        }
    }
    w.commit().unwrap();
}
