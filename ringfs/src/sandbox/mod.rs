//! `ringfs exec --sandbox`: the command in fresh mount, PID, IPC, UTS and
//! network namespaces, in a root made for it, in a session of its own,
//! without capabilities, under a seccomp filter, as an unprivileged user;
//! launched directly (fork, unshare, the new mount API; no container
//! engine). docs/SECURITY.md (what holds, what does not), docs/SEMANTICS.md
//! "ringfs exec receipts", docs/DECISIONS.md D40 and D86.
//!
//! Processes: the caller forks A, which joins the call's cgroups (with
//! `--memory` / `--pids`: [`limits`]), unshares the namespaces and forks B,
//! PID 1 of the new PID namespace. B builds the sandbox's root and pivots
//! into it ([`root`]), brings up loopback (the only interface), then forks
//! C, which starts a new session (no controlling terminal), marks every
//! descriptor but 0, 1, 2 and `--keep-fd`s close-on-exec, sets the
//! resource limits, drops every capability (bounding set, ambient,
//! effective, permitted, inheritable), becomes the unprivileged user, sets
//! no_new_privs, installs the seccomp filter ([`filter`]) and execs the
//! command. B waits for C, reports C's status and wait4 resource use (and
//! its time on B's clock) on a pipe, and exits: every process left in the
//! namespace dies with it. A dies with the caller (`PR_SET_PDEATHSIG`), B
//! with A; a timeout kills A. After fork, the children use only raw system
//! calls on data prepared before (no allocation), as a fork in a threaded
//! process requires.
//!
//! The caller's terminal never reaches the command: a standard input that
//! is a terminal is replaced by /dev/null, a standard output or error that
//! is one by a pipe that this process copies to it.
//!
//! Needs root (namespaces and mounts are made as root, then dropped).

mod filter;
mod limits;
mod root;

pub use root::{BindSpec, PROGRAM_TREES};

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::run::{self, Output, RunResult};

/// What `--sandbox` is asked for: the user to run as (name or uid;
/// default: the owner of the workspace root, or `nobody` when that is
/// root), a memory limit in bytes and a process limit ([`limits`]), more
/// host paths to show (`--bind`, `--ro-bind`), descriptors to pass on
/// beside 0, 1 and 2 (`--keep-fd`), and the system calls to allow that
/// the filter refuses by default (`--allow-userns`, `--allow-io-uring`).
#[derive(Clone, Debug, Default)]
pub struct SandboxOptions {
    pub user: Option<String>,
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    pub binds: Vec<BindSpec>,
    pub keep_fds: Vec<i32>,
    pub allow_userns: bool,
    pub allow_io_uring: bool,
}

/// What the sandbox of a call was, for its receipt (`"sandbox"`): the user
/// and group ids the command ran as and that user's name where it has one,
/// why that user (`user_from`: `--user`, `workspace owner` or `default`),
/// a note when the default fell back to `nobody`, and how `--memory` and
/// `--pids` were enforced on this host ([`limits`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SandboxInfo {
    pub uid: u32,
    pub gid: u32,
    pub user: Option<String>,
    pub user_from: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<String>,
}

/// A sandbox checked and prepared before the call starts: the user, the
/// limits, the root, the filter.
#[derive(Debug)]
pub struct Prepared {
    uid: u32,
    gid: u32,
    limits: limits::Limits,
    root: root::RootPlan,
    filters: filter::Filters,
    keep_fds: Vec<i32>,
    /// What the receipt says of it.
    pub info: SandboxInfo,
}

/// The environment a sandboxed command gets: only `PATH`, `TERM`, `TZ`,
/// `LANG`, `LANGUAGE` and `LC_*` from the caller's, and `HOME=/tmp` (the
/// sandbox's own). Everything else — credentials such as `AWS_*` above all —
/// stays out, since the command could write it into the workspace, which is
/// committed and pushed. More is passed on explicitly through argv:
/// `ringfs exec MNT --sandbox -- env NAME=VALUE CMD…`.
fn sandbox_env() -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.as_bytes();
            matches!(k, b"PATH" | b"TERM" | b"TZ" | b"LANG" | b"LANGUAGE") || k.starts_with(b"LC_")
        })
        .collect();
    env.push(("HOME".into(), "/tmp".into()));
    env
}

fn check_unprivileged(u: &str, uid: u32, gid: u32) -> Result<()> {
    // (uid_t)-1 means "unchanged" to setresuid/setresgid: the command would
    // keep root's ids. Root itself is not an unprivileged user either.
    if uid == u32::MAX || gid == u32::MAX {
        bail!("--user {u}: 4294967295 is not a user id (setresuid(2) reads it as \"leave unchanged\"): give an unprivileged user");
    }
    if uid == 0 || gid == 0 {
        bail!("--user {u}: the sandbox runs an unprivileged user, not root's ids (uid {uid}, gid {gid}): give another user (default: the workspace root's owner, or nobody)");
    }
    Ok(())
}

/// (uid, gid, name) of a user name or number; a number without a passwd
/// entry is its own group.
fn lookup_user_ids(u: &str) -> Result<(u32, u32, Option<String>)> {
    let c = CString::new(u).context("--user: a name without NUL bytes")?;
    // SAFETY: getpwnam/getpwuid return a pointer to static storage or null;
    // read at once, before any other call that could reuse it.
    unsafe {
        let pw = match u.parse::<u32>() {
            Ok(uid) => libc::getpwuid(uid),
            Err(_) => libc::getpwnam(c.as_ptr()),
        };
        if pw.is_null() {
            if let Ok(uid) = u.parse::<u32>() {
                return Ok((uid, uid, None));
            }
            bail!("--user {u}: no such user (give a name from /etc/passwd or a number)");
        }
        let name = std::ffi::CStr::from_ptr((*pw).pw_name).to_string_lossy().into_owned();
        Ok(((*pw).pw_uid, (*pw).pw_gid, Some(name)))
    }
}

/// The user of the call: `--user`, else the owner of the workspace root
/// (with its group) when that is not root, else `nobody`.
fn choose_user(opts: &SandboxOptions, workspace: &Path) -> Result<SandboxInfo> {
    if let Some(u) = &opts.user {
        let (uid, gid, name) = lookup_user_ids(u)?;
        check_unprivileged(u, uid, gid)?;
        return Ok(SandboxInfo { uid, gid, user: name, user_from: "--user".into(), ..Default::default() });
    }
    let m = std::fs::metadata(workspace).with_context(|| format!("workspace {}", workspace.display()))?;
    if m.uid() != 0 && m.gid() != 0 && m.uid() != u32::MAX && m.gid() != u32::MAX {
        let name = lookup_user_ids(&m.uid().to_string()).ok().and_then(|x| x.2);
        return Ok(SandboxInfo { uid: m.uid(), gid: m.gid(), user: name, user_from: "workspace owner".into(), ..Default::default() });
    }
    let (uid, gid, name) = lookup_user_ids("nobody")
        .context("the workspace root is owned by root and this host has no user nobody: give --user")?;
    check_unprivileged("nobody", uid, gid)?;
    Ok(SandboxInfo {
        uid,
        gid,
        user: name,
        user_from: "default".into(),
        note: Some(format!(
            "the workspace root {} is owned by uid {}, gid {} (root's ids are never the sandbox's), so the command runs as nobody, who writes only what others may write: chown the workspace to its user and group, or give --user",
            workspace.display(),
            m.uid(),
            m.gid()
        )),
        ..Default::default()
    })
}

/// Checks that a sandbox can be made (root; the user; the binds; the
/// descriptors to keep open) and makes its limits, root plan and filter.
/// Nothing else is touched. `workspace` is the canonical mountpoint.
pub fn prepare(opts: &SandboxOptions, workspace: &Path, _cwd: &Path) -> Result<Prepared> {
    if !rustix::process::geteuid().is_root() {
        bail!("--sandbox needs root (it makes namespaces and mounts, then drops to the sandbox user): run ringfs exec as root, or without --sandbox");
    }
    let mut info = choose_user(opts, workspace)?;
    for fd in &opts.keep_fds {
        // SAFETY: fcntl(F_GETFD) only reads the descriptor's flags.
        if *fd < 3 || unsafe { libc::fcntl(*fd, libc::F_GETFD) } < 0 {
            bail!("--keep-fd {fd}: not an open descriptor above 2 of this process (0, 1 and 2 always pass; open it in the caller, e.g. `{fd}<FILE`)");
        }
    }
    let root = root::RootPlan::new(workspace, &opts.binds)?;
    let filters = filter::build(opts.allow_userns, opts.allow_io_uring)?;
    let limits = limits::make(opts.memory, opts.pids, info.uid)?;
    info.memory_limit = limits.memory_how.clone();
    info.pids_limit = limits.pids_how.clone();
    Ok(Prepared {
        uid: info.uid,
        gid: info.gid,
        limits,
        root,
        filters,
        keep_fds: opts.keep_fds.clone(),
        info,
    })
}

fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The file `arg0` names as the sandbox sees it: a path (with a `/`,
/// relative to `cwd`) as it is, else the first executable of that name in
/// `PATH` among the directories the sandbox shows ([`PROGRAM_TREES`], the
/// binds, the workspace). Errors: [`run::NotRun`].
pub fn find_program(p: &Prepared, arg0: &OsStr, cwd: &Path) -> Result<PathBuf> {
    let name = arg0.to_string_lossy().into_owned();
    let not_run = |found: bool, why: &str| -> anyhow::Error {
        run::NotRun { program: name.clone(), found, why: why.into() }.into()
    };
    if arg0.as_bytes().contains(&b'/') {
        let path = cwd.join(arg0);
        return match p.root.host_path(&path) {
            Some(h) if executable(&h) => Ok(path),
            Some(h) if h.exists() => Err(not_run(true, "not an executable file (check its mode)")),
            _ => Err(not_run(false, "no such file in the sandbox (it shows /usr, /bin, /sbin, /lib*, /etc, the workspace and --bind/--ro-bind paths)")),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    for dir in std::env::split_paths(&path) {
        let cand = dir.join(arg0);
        if cand.is_absolute() && p.root.host_path(&cand).is_some_and(|h| executable(&h)) {
            return Ok(cand);
        }
    }
    Err(not_run(false, "command not found in the sandbox's PATH (it shows /usr, /bin, /sbin, /lib*, /etc and the workspace: give a path, or --ro-bind the directory holding it)"))
}

/// Steps whose failure A, B or C reports (the record's second word),
/// after [`root::STEPS`] (B's root).
const STEPS: &[&str] = &[
    "unshare the namespaces",
    "bring up loopback",
    "set the hostname",
    "enter the working directory",
    "drop capabilities",
    "switch user",
    "set no_new_privs",
    "execute the command",
    "fork",
    "join the cgroup",
    "start a new session",
    "close inherited descriptors",
    "set resource limits",
    "install the seccomp filter",
    "open /dev/null as standard input",
];
const S_UNSHARE: i64 = 0;
const S_LOOPBACK: i64 = 1;
const S_HOSTNAME: i64 = 2;
const S_CWD: i64 = 3;
const S_CAPS: i64 = 4;
const S_USER: i64 = 5;
const S_NNP: i64 = 6;
const S_EXEC: i64 = 7;
const S_FORK: i64 = 8;
const S_CGROUP: i64 = 9;
const S_SETSID: i64 = 10;
const S_FDS: i64 = 11;
const S_RLIMIT: i64 = 12;
const S_SECCOMP: i64 = 13;
const S_STDIN: i64 = 14;
/// Root steps are reported as `ROOT_STEP + root::STEPS index`.
const ROOT_STEP: i64 = 100;

const MAGIC_OK: i64 = 0x5249_4e47_4f4b;
const MAGIC_ERR: i64 = 0x5249_4e47_4552;

/// Writes one record of eight words to `fd` (async-signal-safe).
fn report(fd: i32, rec: [i64; 8]) {
    // SAFETY: writing a stack buffer to a pipe we own.
    unsafe {
        libc::write(
            fd,
            rec.as_ptr() as *const libc::c_void,
            std::mem::size_of_val(&rec),
        )
    };
}

/// Reports step `step` failed with `errno` (0: this thread's errno) about
/// entry `which`, and exits.
fn fail_with(fd: i32, step: i64, errno: i32, which: i64) -> ! {
    let e = if errno != 0 {
        errno
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    };
    report(fd, [MAGIC_ERR, step, e as i64, which, 0, 0, 0, 0]);
    // SAFETY: leaving a forked child without running destructors.
    unsafe { libc::_exit(125) }
}

fn fail(fd: i32, step: i64) -> ! {
    fail_with(fd, step, 0, 0)
}

/// Everything B and C need, made before the fork.
struct Plan<'a> {
    program: CString,
    /// Null-terminated pointer arrays into `argv`/`envp` of [`run`].
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
    root: &'a root::RootPlan,
    filters: &'a filter::Filters,
    cwd: CString,
    cgroup_procs: &'a [CString],
    rlimits: &'a [(i32, u64)],
    keep_fds: &'a [i32],
    /// Replace a terminal on standard input by /dev/null.
    stdin_null: bool,
    uid: u32,
    gid: u32,
}

/// Brings up `lo` in the current network namespace.
fn loopback_up() -> bool {
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        flags: libc::c_short,
        pad: [u8; 22],
    }
    // SAFETY: a socket for the ioctl, a zeroed ifreq naming "lo".
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return false;
        }
        let mut r = IfReq {
            name: [0; 16],
            flags: 0,
            pad: [0; 22],
        };
        r.name[..2].copy_from_slice(b"lo");
        let ok = libc::ioctl(s, libc::SIOCGIFFLAGS, &mut r) == 0 && {
            r.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            libc::ioctl(s, libc::SIOCSIFFLAGS, &r) == 0
        };
        libc::close(s);
        ok
    }
}

/// Counts the processes in this PID namespace's /proc other than the caller
/// (getdents64 into a stack buffer: no allocation).
fn count_procs() -> i64 {
    // SAFETY: open/getdents64/close on /proc with a stack buffer.
    unsafe {
        let fd = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return 0;
        }
        let mut buf = [0u8; 8192];
        let mut n = 0i64;
        loop {
            let got = libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len());
            if got <= 0 {
                break;
            }
            let mut off = 0usize;
            while off < got as usize {
                let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
                let name0 = buf[off + 19];
                if name0.is_ascii_digit() {
                    n += 1;
                }
                off += reclen;
            }
        }
        libc::close(fd);
        (n - 1).max(0)
    }
}


/// B: PID 1 of the new namespaces. Never returns.
fn init(plan: &Plan, status_fd: i32, out: (i32, i32)) -> ! {
    // SAFETY: raw system calls in a forked child, on data made before the fork.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if let Err((step, which)) = root::build(plan.root) {
            fail_with(status_fd, ROOT_STEP + step as i64, 0, which as i64);
        }
        if !loopback_up() {
            fail(status_fd, S_LOOPBACK);
        }
        let host = b"ringfs-sandbox";
        if libc::sethostname(host.as_ptr() as *const libc::c_char, host.len()) != 0 {
            fail(status_fd, S_HOSTNAME);
        }
        let mut t0: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t0);
        let c = libc::fork();
        if c < 0 {
            fail(status_fd, S_FORK);
        }
        if c == 0 {
            command(plan, status_fd, out);
        }
        let mut status = 0;
        let mut ru: libc::rusage = std::mem::zeroed();
        loop {
            let r = libc::wait4(c, &mut status, 0, &mut ru);
            if r == c {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                break;
            }
        }
        let mut t1: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t1);
        let ns = (t1.tv_sec - t0.tv_sec) as i64 * 1_000_000_000 + (t1.tv_nsec - t0.tv_nsec) as i64;
        let left = count_procs();
        let us = |t: libc::timeval| t.tv_sec as i64 * 1_000_000 + t.tv_usec as i64;
        report(
            status_fd,
            [
                MAGIC_OK,
                status as i64,
                us(ru.ru_utime),
                us(ru.ru_stime),
                ru.ru_maxrss as i64,
                ns,
                left,
                0,
            ],
        );
        libc::_exit(0)
    }
}

/// C: the command. Never returns.
fn command(plan: &Plan, status_fd: i32, out: (i32, i32)) -> ! {
    // SAFETY: raw system calls in a forked child, on data made before the fork.
    unsafe {
        if out.0 >= 0 {
            libc::dup2(out.0, 1);
        }
        if out.1 >= 0 {
            libc::dup2(out.1, 2);
        }
        if plan.stdin_null {
            let n = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if n < 0 || libc::dup2(n, 0) != 0 {
                fail(status_fd, S_STDIN);
            }
            libc::close(n);
        }
        // A session of its own: no controlling terminal, so no TIOCSTI
        // into the caller's (the filter refuses it too).
        if libc::setsid() < 0 {
            fail(status_fd, S_SETSID);
        }
        if libc::chdir(plan.cwd.as_ptr()) != 0 {
            fail(status_fd, S_CWD);
        }
        // Only 0, 1, 2 and --keep-fd cross execve (the status pipe stays
        // open until then, to report a failed exec).
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) != 0 {
            fail(status_fd, S_FDS);
        }
        for fd in plan.keep_fds {
            if libc::fcntl(*fd, libc::F_SETFD, 0) != 0 {
                fail(status_fd, S_FDS);
            }
        }
        for (res, v) in plan.rlimits {
            let l = libc::rlimit { rlim_cur: *v, rlim_max: *v };
            if libc::setrlimit(*res as _, &l) != 0 {
                fail(status_fd, S_RLIMIT);
            }
        }
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setresgid(plan.gid, plan.gid, plan.gid) != 0
            || libc::setresuid(plan.uid, plan.uid, plan.uid) != 0
        {
            fail(status_fd, S_USER);
        }
        // Effective, permitted and inheritable sets empty (also for uid 0).
        #[repr(C)]
        struct Hdr {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let h = Hdr { version: 0x2008_0522, pid: 0 };
        let zero = || Data { effective: 0, permitted: 0, inheritable: 0 };
        let d = [zero(), zero()];
        if libc::syscall(libc::SYS_capset, &h as *const Hdr, d.as_ptr()) != 0 {
            fail(status_fd, S_CAPS);
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            fail(status_fd, S_NNP);
        }
        let e = filter::install(plan.filters);
        if e != 0 {
            fail_with(status_fd, S_SECCOMP, e, 0);
        }
        libc::execve(plan.program.as_ptr(), plan.argv_ptrs.as_ptr(), plan.envp_ptrs.as_ptr());
        fail(status_fd, S_EXEC)
    }
}

fn isatty(fd: i32) -> bool {
    // SAFETY: isatty(3) only asks the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

fn pipe() -> Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 into a two-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("making a pipe");
    }
    Ok((fds[0], fds[1]))
}

/// Copies the read end `fd` to this process's descriptor `to` until EOF.
fn relay(fd: i32, to: i32) -> std::thread::JoinHandle<()> {
    // SAFETY: the read end is ours alone from here.
    let mut f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match std::io::Read::read(&mut f, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let mut off = 0;
                    while off < n {
                        // SAFETY: writing our buffer to our own descriptor.
                        let w = unsafe { libc::write(to, buf[off..n].as_ptr().cast(), n - off) };
                        if w <= 0 {
                            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                                continue;
                            }
                            break;
                        }
                        off += w as usize;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    })
}

/// Runs the command in the sandbox `p` (see the module doc); `program`
/// from [`find_program`]. Errors: a setup step that failed (named, with
/// the system's reason); [`run::NotRun`] when execve failed.
pub fn run(
    p: &Prepared,
    program: &Path,
    argv: &[OsString],
    cwd: &Path,
    output: Output,
    timeout: Option<Duration>,
) -> Result<RunResult> {
    let argv_c: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .context("an argument with a NUL byte")?;
    let envp_c: Vec<CString> = sandbox_env()
        .into_iter()
        .map(|(k, v)| {
            let mut b = k.as_bytes().to_vec();
            b.push(b'=');
            b.extend_from_slice(v.as_bytes());
            CString::new(b)
        })
        .collect::<Result<_, _>>()
        .context("an environment variable with a NUL byte")?;
    let ptrs = |v: &[CString]| {
        v.iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect::<Vec<_>>()
    };
    let cstr = |p: &Path| CString::new(p.as_os_str().as_bytes()).with_context(|| format!("{}: a path with a NUL byte", p.display()));
    let plan = Plan {
        program: cstr(program)?,
        argv_ptrs: ptrs(&argv_c),
        envp_ptrs: ptrs(&envp_c),
        root: &p.root,
        filters: &p.filters,
        cwd: cstr(cwd)?,
        cgroup_procs: &p.limits.procs,
        rlimits: &p.limits.rlimits,
        keep_fds: &p.keep_fds,
        stdin_null: isatty(0),
        uid: p.uid,
        gid: p.gid,
    };
    let status = pipe()?;
    // Captured output, or the caller's own where it is not a terminal; a
    // terminal gets a pipe this process copies to it.
    let (outp, errp) = match output {
        Output::Capture(_) => (Some(pipe()?), Some(pipe()?)),
        Output::Inherit => (
            isatty(1).then(pipe).transpose()?,
            isatty(2).then(pipe).transpose()?,
        ),
    };
    let t0 = Instant::now();
    // SAFETY: fork; the child runs only raw system calls on `plan`.
    let a = unsafe { libc::fork() };
    if a < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if a == 0 {
        // A.
        // SAFETY: raw system calls in the forked child.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            for cg in plan.cgroup_procs {
                let fd = libc::open(cg.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, b"0".as_ptr() as *const libc::c_void, 1) != 1 {
                    fail(status.1, S_CGROUP);
                }
                libc::close(fd);
            }
            let flags = libc::CLONE_NEWNS
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS
                | libc::CLONE_NEWNET;
            if libc::unshare(flags) != 0 {
                fail(status.1, S_UNSHARE);
            }
            let b = libc::fork();
            if b < 0 {
                fail(status.1, S_FORK);
            }
            if b == 0 {
                init(
                    &plan,
                    status.1,
                    (
                        outp.map(|p| p.1).unwrap_or(-1),
                        errp.map(|p| p.1).unwrap_or(-1),
                    ),
                );
            }
            let mut st = 0;
            while libc::waitpid(b, &mut st, 0) < 0 && *libc::__errno_location() == libc::EINTR {}
            libc::_exit(if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st)
            } else {
                125
            });
        }
    }
    // SAFETY: closing the write ends the children hold.
    unsafe {
        libc::close(status.1);
        for p in [outp, errp].into_iter().flatten() {
            libc::close(p.1);
        }
    }
    let (mut ro, mut re, mut relays) = (None, None, Vec::new());
    match output {
        Output::Capture(limit) => {
            let reader = |p: Option<(i32, i32)>| {
                p.map(|p| {
                    // SAFETY: the read end is ours alone from here.
                    let f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(p.0) };
                    std::thread::spawn(move || run::drain(f, limit))
                })
            };
            (ro, re) = (reader(outp), reader(errp));
        }
        Output::Inherit => {
            relays.extend(outp.map(|p| relay(p.0, 1)));
            relays.extend(errp.map(|p| relay(p.0, 2)));
        }
    }
    let waited = run::wait_child(a, timeout, a);
    let wall = t0.elapsed();
    // SAFETY: the status pipe's read end is ours.
    let mut sf = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(status.0) };
    let mut bytes = Vec::new();
    let _ = std::io::Read::read_to_end(&mut sf, &mut bytes);
    let (_, _, timed_out, _) = waited.context("waiting for the sandbox")?;
    for h in relays {
        let _ = h.join();
    }
    let recs: Vec<[i64; 8]> = bytes
        .chunks_exact(64)
        .map(|c| {
            let mut r = [0i64; 8];
            for (i, w) in c.chunks_exact(8).enumerate() {
                r[i] = i64::from_ne_bytes(w.try_into().unwrap());
            }
            r
        })
        .collect();
    let mut r = RunResult {
        timed_out,
        ..Default::default()
    };
    r.stdout = ro.and_then(|h| h.join().ok());
    r.stderr = re.and_then(|h| h.join().ok());
    if let Some(ok) = recs.iter().find(|x| x[0] == MAGIC_OK) {
        (r.exit_code, r.signal) = run::decode(ok[1] as i32);
        r.user = Duration::from_micros(ok[2] as u64);
        r.system = Duration::from_micros(ok[3] as u64);
        r.max_rss_kib = ok[4] as u64;
        r.command = Duration::from_nanos(ok[5] as u64);
        r.orphans = ok[6] as u64;
        return Ok(r);
    }
    if let Some(e) = recs.iter().find(|x| x[0] == MAGIC_ERR) {
        let why = std::io::Error::from_raw_os_error(e[2] as i32);
        if e[1] == S_EXEC {
            let found = e[2] as i32 != libc::ENOENT;
            return Err(run::NotRun {
                program: argv[0].to_string_lossy().into_owned(),
                found,
                why: format!("in the sandbox: {why}"),
            }
            .into());
        }
        if e[1] >= ROOT_STEP {
            let step = root::STEPS.get((e[1] - ROOT_STEP) as usize).unwrap_or(&"build its root");
            let at = p.root.shown(e[3] as usize);
            bail!("sandbox: could not {step}{at}: {why}");
        }
        bail!(
            "sandbox: could not {}: {why}",
            STEPS.get(e[1] as usize).unwrap_or(&"set up")
        );
    }
    if timed_out {
        r.exit_code = 128 + libc::SIGKILL;
        r.signal = Some(libc::SIGKILL);
        r.command = wall;
        return Ok(r);
    }
    bail!("sandbox: its init ended without a report (killed?)")
}
