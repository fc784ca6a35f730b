//! `ringfs exec --sandbox` tried as an attacker would (issue 36): every
//! attempt is asserted to fail with the specific refusal docs/SECURITY.md
//! names — the host's trees outside the program trees are not there
//! (ENOENT), the program trees are read-only (EROFS), the filter's calls
//! fail with EPERM (clone3 with ENOSYS), host processes are not in the
//! PID namespace (ESRCH), host sockets are not reachable (ECONNREFUSED,
//! ENOENT), device nodes and setuid bits of the workspace do nothing
//! (EACCES, euid unchanged), inherited descriptors are closed (EBADF), the
//! caller's terminal is not the command's (no TIOCSTI), limits hold.
//! Needs root (skipped otherwise).

mod common;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Python helpers the probes share: `res(name, f)` prints `name: OK …`
/// or `name: ERRNO`; `sc(nr, …)` is a raw system call.
const PRELUDE: &str = r#"
import os, sys, socket, errno, ctypes, fcntl
libc = ctypes.CDLL(None, use_errno=True)
def res(name, f):
    try:
        r = f()
        print(f"{name}: OK {r}", flush=True)
    except OSError as e:
        print(f"{name}: {errno.errorcode.get(e.errno, e.errno)}", flush=True)
def sc(nr, *a):
    r = libc.syscall(nr, *[ctypes.c_long(x) for x in a])
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
"#;

/// Runs `script` (Python, after [`PRELUDE`]) in the sandbox of `m` with
/// `flags`: (exit code, stdout, stderr).
fn probe(m: &TestMount, flags: &[&str], script: &str) -> (i32, String, String) {
    let mut c = Command::new(RINGFS);
    c.arg("exec").arg(mp(m)).arg("--sandbox").args(flags).args(["--output-limit", "1000000", "--", "python3", "-c"]);
    c.arg(format!("{PRELUDE}\n{script}"));
    let o = run_timeout(&mut c, Duration::from_secs(60));
    let (out, err) = out_str(&o);
    (o.status.code().unwrap_or(-1), out, err)
}

#[track_caller]
fn has(out: &str, want: &str) {
    assert!(out.lines().any(|l| l.trim() == want), "missing {want:?} in\n{out}");
}

#[test]
fn the_sandbox_sees_only_its_own_root_and_its_calls_are_refused() {
    if !is_root() {
        eprintln!("skipped: --sandbox needs root");
        return;
    }
    let m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir -m 777 w");
    let pid = std::process::id();
    // Host things the sandbox must not reach.
    let secret = format!("/var/tmp/ringfs-escape-secret-{pid}");
    std::fs::write(&secret, "topsecret").unwrap();
    let sock_path = format!("/var/tmp/ringfs-escape-{pid}.sock");
    let _ = std::fs::remove_file(&sock_path);
    let fs_sock = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    fs_sock.set_nonblocking(true).unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let port = tcp.local_addr().unwrap().port();
    let store = m.store_dir().canonicalize().unwrap().display().to_string();
    let daemon = m.daemon_pid().unwrap();
    let script = format!(
        r#"
for p in ["/usr/x", "/etc/x", "/x", "/bin/x"]:
    res("write " + p, lambda: open(p, "w"))
for p in ["/var", "/run", "/home", "/root", "/srv", "/mnt", "/sys", "/var/tmp", "{store}", "{secret}", "/dev/tty", "/proc/1/cmdline"]:
    res("see " + p, lambda: os.stat(p))
os.symlink("{secret}", "lnk")
res("symlink out", lambda: open("lnk").read())
res("hard link in", lambda: os.link("/etc/hostname", "hl"))
print("dev:", " ".join(sorted(os.listdir("/dev"))))
print("root:", " ".join(sorted(os.listdir("/"))))
res("tcp to the host", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
def unix(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
res("unix socket file", lambda: unix("{sock_path}"))
res("abstract socket", lambda: unix("\0ringfs-escape-{pid}"))
res("signal the daemon", lambda: os.kill({daemon}, 0))
res("ptrace the daemon", lambda: sc(101, 16, {daemon}, 0, 0))
res("mount", lambda: sc(165, 0, 0, 0, 0, 0))
res("unshare mnt", lambda: sc(272, 0x20000))
res("unshare user", lambda: sc(272, 0x10000000))
res("clone newuser", lambda: sc(56, 0x10000000 | 17, 0, 0, 0, 0))
res("clone3", lambda: sc(435, 0, 0))
res("setns", lambda: sc(308, 0, 0))
res("chroot", lambda: sc(161, 0))
res("keyctl", lambda: sc(250, 0, 0))
res("bpf", lambda: sc(321, 0, 0, 0))
res("perf_event_open", lambda: sc(298, 0, 0, 0, 0, 0))
res("userfaultfd", lambda: sc(323, 0))
res("io_uring_setup", lambda: sc(425, 1, 0))
res("open_tree", lambda: sc(428, -100, 0, 0))
res("tiocsti", lambda: fcntl.ioctl(0, 0x5412, b"x"))
res("mknod", lambda: os.mknod("nul", 0o20666, os.makedev(1, 3)))
def is_open(fd):
    try:
        fcntl.fcntl(fd, fcntl.F_GETFD)
        return True
    except OSError:
        return False
print("fds:", " ".join(str(fd) for fd in range(3, 1024) if is_open(fd)))
print("session leader:", os.getsid(0) == os.getpid())
print("uid:", os.getuid(), os.geteuid())
for l in open("/proc/self/status"):
    if l.startswith(("CapEff", "CapBnd", "NoNewPrivs", "Seccomp:")):
        print(" ".join(l.split()))
print("hostname:", socket.gethostname())
"#
    );
    let (code, out, err) = probe(&m, &["--cwd", "w"], &script);
    let _ = std::fs::remove_file(&secret);
    let _ = std::fs::remove_file(&sock_path);
    assert_eq!(code, 0, "{out}\n{err}");
    for p in ["/usr/x", "/etc/x", "/x", "/bin/x"] {
        has(&out, &format!("write {p}: EROFS"));
    }
    for p in ["/var", "/run", "/home", "/root", "/srv", "/mnt", "/sys", "/var/tmp", &store, &secret, "/dev/tty", "/proc/1/cmdline"] {
        has(&out, &format!("see {p}: ENOENT"));
    }
    for (probe, want) in [
        ("symlink out", "ENOENT"),
        ("hard link in", "EXDEV"),
        ("tcp to the host", "ECONNREFUSED"),
        ("unix socket file", "ENOENT"),
        ("abstract socket", "ECONNREFUSED"),
        ("signal the daemon", "ESRCH"),
        ("ptrace the daemon", "ESRCH"),
        ("mount", "EPERM"),
        ("unshare mnt", "EPERM"),
        ("unshare user", "EPERM"),
        ("clone newuser", "EPERM"),
        ("clone3", "ENOSYS"),
        ("setns", "EPERM"),
        ("chroot", "EPERM"),
        ("keyctl", "EPERM"),
        ("bpf", "EPERM"),
        ("perf_event_open", "EPERM"),
        ("userfaultfd", "EPERM"),
        ("io_uring_setup", "EPERM"),
        ("open_tree", "EPERM"),
        ("tiocsti", "EPERM"),
        ("mknod", "EPERM"),
    ] {
        has(&out, &format!("{probe}: {want}"));
    }
    has(&out, "dev: fd full null random shm stderr stdin stdout urandom zero");
    let root_line = out.lines().find(|l| l.starts_with("root:")).unwrap();
    for name in root_line["root:".len()..].split_whitespace() {
        assert!(["bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr"].contains(&name), "the sandbox's root shows {name}: {root_line}");
    }
    has(&out, "fds:");
    has(&out, "session leader: True");
    has(&out, "uid: 65534 65534");
    has(&out, "CapEff: 0000000000000000");
    has(&out, "CapBnd: 0000000000000000");
    has(&out, "NoNewPrivs: 1");
    has(&out, "Seccomp: 2");
    has(&out, "hostname: ringfs-sandbox");
    assert!(tcp.accept().is_err(), "the sandbox reached a host port");
    assert!(fs_sock.accept().is_err(), "the sandbox reached a host socket file");
}

#[test]
fn inherited_descriptors_are_closed_unless_kept() {
    if !is_root() {
        return;
    }
    let m = TestMount::new(Backend::Memory);
    m.sh_ok("mkdir -m 777 w");
    let dir = tempfile::tempdir().unwrap();
    let d = std::fs::File::open(dir.path()).unwrap();
    let dfd = d.as_raw_fd();
    let script = "res('create through fd 9', lambda: os.open('x', os.O_CREAT | os.O_WRONLY, dir_fd=9))";
    let run = |flags: &[&str]| {
        let mut c = Command::new(RINGFS);
        c.arg("exec").arg(mp(&m)).arg("--sandbox").args(flags).args(["--cwd", "w", "--output-limit", "100000", "--", "python3", "-c"]);
        c.arg(format!("{PRELUDE}\n{script}"));
        // SAFETY: dup2 in the child before exec, on a descriptor we hold.
        unsafe {
            c.pre_exec(move || {
                if libc::dup2(dfd, 9) != 9 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let o = run_timeout(&mut c, Duration::from_secs(60));
        out_str(&o).0
    };
    has(&run(&[]), "create through fd 9: EBADF");
    assert!(!dir.path().join("x").exists());
    // --keep-fd passes one on purpose (the directory is root's 0700: the
    // sandbox user still may not write there).
    has(&run(&["--keep-fd", "9"]), "create through fd 9: EACCES");
    let o = ringfs(&["exec", mp(&m), "--sandbox", "--keep-fd", "77", "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(out_str(&o).1.contains("--keep-fd 77: not an open descriptor"), "{:?}", out_str(&o));
}

#[test]
fn the_callers_terminal_is_not_the_commands() {
    if !is_root() {
        return;
    }
    let m = TestMount::new(Backend::Memory);
    m.sh_ok("mkdir -m 777 w");
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty into two ints.
    assert_eq!(unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) }, 0);
    let script = "res('tiocsti', lambda: fcntl.ioctl(0, 0x5412, b'X'))\nres('tiocsti on stdout', lambda: fcntl.ioctl(1, 0x5412, b'X'))\nprint('ttys:', os.isatty(0), os.isatty(1), os.isatty(2))\nres('open /dev/tty', lambda: open('/dev/tty'))";
    let mut c = Command::new(RINGFS);
    c.arg("exec").arg(mp(&m)).args(["--sandbox", "--cwd", "w", "--", "python3", "-c"]).arg(format!("{PRELUDE}\n{script}"));
    // The caller's session has the pty as its controlling terminal, as
    // an interactive shell's does.
    // SAFETY: setsid/ioctl/dup2 in the child before exec.
    unsafe {
        c.pre_exec(move || {
            libc::setsid();
            if libc::ioctl(slave, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for fd in 0..3 {
                libc::dup2(slave, fd);
            }
            Ok(())
        });
    }
    c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    // SAFETY: the master is ours; read it non-blocking while the child runs.
    let mut mf = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(master) };
    unsafe { libc::fcntl(master, libc::F_SETFL, libc::O_NONBLOCK) };
    let mut seen = Vec::new();
    let status = loop {
        let mut buf = [0u8; 4096];
        if let Ok(n) = mf.read(&mut buf) {
            seen.extend_from_slice(&buf[..n]);
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(100));
    let mut buf = [0u8; 4096];
    while let Ok(n) = mf.read(&mut buf) {
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
    }
    let out = String::from_utf8_lossy(&seen).replace('\r', "");
    assert!(status.success(), "{status}: {out}");
    has(&out, "tiocsti: EPERM");
    has(&out, "tiocsti on stdout: EPERM");
    has(&out, "ttys: False False False");
    has(&out, "open /dev/tty: ENOENT");
    // Nothing was pushed into the terminal's input queue.
    // SAFETY: a non-blocking read of the slave we own.
    unsafe { libc::fcntl(slave, libc::F_SETFL, libc::O_NONBLOCK) };
    let mut sf = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(slave) };
    let n = sf.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "input pushed into the caller's terminal: {:?}", &buf[..n]);
}

#[test]
fn setuid_files_and_device_nodes_of_the_workspace_do_nothing() {
    if !is_root() {
        return;
    }
    let m = TestMount::builder(Backend::Store).args(["--suid", "--dev"]).mount();
    m.sh_ok("mkdir -m 777 w && cp /usr/bin/id w/id && chmod 4755 w/id && mknod -m 666 w/zero c 1 5");
    let script = "import subprocess\nprint('id:', subprocess.run(['./id', '-u'], capture_output=True, text=True).stdout.strip())\nres('open a device node', lambda: open('zero', 'rb').read(1))\nfor l in open('/proc/self/mountinfo'):\n    f = l.split()\n    if f[4] == os.getcwd().rsplit('/', 1)[0]:\n        print('workspace options:', f[5])";
    let (code, out, err) = probe(&m, &["--cwd", "w"], script);
    assert_eq!(code, 0, "{out}\n{err}");
    has(&out, "id: 65534");
    has(&out, "open a device node: EACCES");
    let opts = out.lines().find(|l| l.starts_with("workspace options:")).unwrap_or_else(|| panic!("{out}"));
    assert!(opts.contains("nosuid") && opts.contains("nodev"), "{opts}");
}

#[test]
fn binds_show_what_is_asked_and_userns_io_uring_when_allowed() {
    if !is_root() {
        return;
    }
    let m = TestMount::new(Backend::Memory);
    m.sh_ok("mkdir -m 777 w");
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("tool.txt"), "tool").unwrap();
    let ro = format!("{}:/opt/tool", host.path().display());
    let script = "res('read a --ro-bind', lambda: open('/opt/tool/tool.txt').read())\nres('write a --ro-bind', lambda: open('/opt/tool/new', 'w'))\nres('unshare user', lambda: sc(272, 0x10000000))\nres('io_uring_setup', lambda: sc(425, 1, 0))";
    let (code, out, err) = probe(&m, &["--cwd", "w", "--ro-bind", &ro, "--allow-userns", "--allow-io-uring"], script);
    assert_eq!(code, 0, "{out}\n{err}");
    has(&out, "read a --ro-bind: OK tool");
    has(&out, "write a --ro-bind: EROFS");
    has(&out, "unshare user: OK 0");
    // Allowed: the kernel answers (EFAULT for the null params), not the filter.
    has(&out, "io_uring_setup: EFAULT");
    // Binds do not nest: the directories above a bind are made as root,
    // and a command could have left a link inside the outer one.
    let outer = tempfile::tempdir().unwrap();
    let o = ringfs(&["exec", mp(&m), "--sandbox", "--bind", &format!("{}:/cache", outer.path().display()), "--ro-bind", &format!("{}:/cache/tool", host.path().display()), "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(out_str(&o).1.contains("binds may not nest"), "{:?}", out_str(&o));
    let inside = format!("{}:{}/x", host.path().display(), mp(&m));
    let o = ringfs(&["exec", mp(&m), "--sandbox", "--bind", &inside, "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(out_str(&o).1.contains("inside the workspace"), "{:?}", out_str(&o));
}

#[test]
fn limits_hold_and_processes_that_leave_die_with_the_call() {
    if !is_root() {
        return;
    }
    let m = TestMount::new(Backend::Memory);
    m.sh_ok("mkdir -m 777 w");
    let bomb = "import time\nn = 0\nkids = []\nfor i in range(200):\n    try:\n        p = os.fork()\n    except OSError:\n        break\n    if p == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\nprint('forked:', n)";
    let (code, out, err) = probe(&m, &["--cwd", "w", "--pids", "20", "--timeout", "20"], bomb);
    assert_eq!(code, 0, "{out}\n{err}");
    let n: u32 = out.lines().find_map(|l| l.strip_prefix("forked: ")).unwrap().trim().parse().unwrap();
    assert!(n < 20, "--pids 20 let {n} processes fork");
    assert!(err.contains("pids"), "the receipt says how --pids was enforced: {err}");
    let (code, out, err) = probe(&m, &["--cwd", "w", "--memory", "64M"], "b = bytearray(512 << 20)\nprint('allocated')");
    assert_ne!(code, 0, "512 MiB under --memory 64M: {out}\n{err}");
    assert!(!out.contains("allocated"));
    // A daemon that left the command's session dies with the call.
    let (code, out, err) = probe(&m, &["--cwd", "w"], "import subprocess\nsubprocess.Popen(['setsid', 'sh', '-c', 'sleep 1.5; echo late > late'])\nprint('started')");
    assert_eq!(code, 0, "{out}\n{err}");
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!m.p("w/late").exists(), "a process the command left wrote after the call");
}
