//! `ringfs exec --sandbox`: the command in fresh mount, PID, IPC, UTS and
//! network namespaces, launched directly (fork, unshare, mount; no
//! container engine). docs/DECISIONS.md D40, docs/SEMANTICS.md "exec
//! receipts".
//!
//! Processes: the caller forks A, which joins a cgroup (with `--memory` /
//! `--pids`), unshares the namespaces and forks B, PID 1 of the new PID
//! namespace. B makes every mount read-only (`mount_setattr`, recursive)
//! except a clone of the workspace's mount tree taken before, mounts its
//! own `/tmp` (tmpfs) and `/proc`, covers the control socket directory and
//! the store directory with empty read-only tmpfs, brings up loopback (the
//! only interface), then forks C, which drops every capability (bounding
//! set, ambient, effective, permitted, inheritable), sets no_new_privs,
//! becomes the unprivileged user and execs the command. B waits for C,
//! reports C's status and wait4 resource use (and its time on B's clock)
//! on a pipe, and exits: every process left in the namespace dies with it.
//! A dies with the caller (`PR_SET_PDEATHSIG`), B with A; a timeout kills
//! A. After fork, the children use only raw system calls on data prepared
//! before (no allocation), as a fork in a threaded process requires.
//!
//! Needs root (namespaces and mounts are made as root, then dropped).

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::run::{self, Output, RunResult};

/// What `--sandbox` is asked for: the user to run as (name or uid;
/// default `nobody`), a memory limit in bytes and a process limit
/// (through cgroup v2; an error where it is not available).
#[derive(Clone, Debug, Default)]
pub struct SandboxOptions {
    pub user: Option<String>,
    pub memory: Option<u64>,
    pub pids: Option<u64>,
}

/// A sandbox checked and prepared before the call starts: the user, the
/// cgroup made for the limits, the workspace and working directory.
#[derive(Debug)]
pub struct Prepared {
    uid: u32,
    gid: u32,
    workspace: PathBuf,
    cgroup: Option<PathBuf>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(cg) = &self.cgroup {
            let _ = std::fs::write(cg.join("cgroup.kill"), "1");
            for _ in 0..100 {
                if std::fs::remove_dir(cg).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
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

fn lookup_user(u: &str) -> Result<(u32, u32)> {
    let (uid, gid) = lookup_user_ids(u)?;
    // (uid_t)-1 means "unchanged" to setresuid/setresgid: the command would
    // keep root's ids. Root itself is not an unprivileged user either.
    if uid == u32::MAX || gid == u32::MAX {
        bail!("--user {u}: 4294967295 is not a user id (setresuid(2) reads it as \"leave unchanged\"): give an unprivileged user");
    }
    if uid == 0 || gid == 0 {
        bail!("--user {u}: the sandbox runs an unprivileged user, not root's ids (uid {uid}, gid {gid}): give another user (default nobody)");
    }
    Ok((uid, gid))
}

fn lookup_user_ids(u: &str) -> Result<(u32, u32)> {
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
                return Ok((uid, uid));
            }
            bail!("--user {u}: no such user (give a name from /etc/passwd or a number)");
        }
        Ok(((*pw).pw_uid, (*pw).pw_gid))
    }
}

/// The cgroup v2 hierarchy: `/sys/fs/cgroup` (unified) or
/// `/sys/fs/cgroup/unified` (hybrid).
fn cgroup2_root() -> Option<PathBuf> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .map(PathBuf::from)
        .find(|p| {
            std::fs::read_to_string("/proc/self/mounts").is_ok_and(|m| {
                m.lines().any(|l| {
                    l.split_whitespace().nth(1) == Some(p.to_str().unwrap_or(""))
                        && l.split_whitespace().nth(2) == Some("cgroup2")
                })
            })
        })
}

fn make_cgroup(opts: &SandboxOptions) -> Result<Option<PathBuf>> {
    if opts.memory.is_none() && opts.pids.is_none() {
        return Ok(None);
    }
    let Some(root) = cgroup2_root() else {
        bail!("--memory and --pids need cgroup v2, which this machine does not mount (no cgroup2 at /sys/fs/cgroup or /sys/fs/cgroup/unified): run without them");
    };
    let avail = std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
    for (flag, ctl, asked) in [
        ("--memory", "memory", opts.memory.is_some()),
        ("--pids", "pids", opts.pids.is_some()),
    ] {
        if asked && !avail.split_whitespace().any(|c| c == ctl) {
            bail!(
                "{flag} needs the cgroup v2 {ctl} controller, which {} does not enable for its children (enabled: {}); this machine may run it under cgroup v1: run without {flag}",
                root.display(),
                if avail.trim().is_empty() { "none" } else { avail.trim() }
            );
        }
    }
    let cg = root.join(format!(
        "ringfs-exec-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    std::fs::create_dir(&cg).with_context(|| format!("creating cgroup {}", cg.display()))?;
    let set = |f: &str, v: String| {
        std::fs::write(cg.join(f), v).with_context(|| format!("setting {} in {}", f, cg.display()))
    };
    let r = (|| {
        if let Some(m) = opts.memory {
            set("memory.max", m.to_string())?;
            let _ = set("memory.swap.max", "0".into());
        }
        if let Some(p) = opts.pids {
            set("pids.max", p.to_string())?;
        }
        Ok(())
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_dir(&cg);
        return Err(e);
    }
    Ok(Some(cg))
}

/// Checks that a sandbox can be made (root; the user exists; the cgroup
/// limits available) and makes its cgroup. Nothing else is touched.
pub fn prepare(opts: &SandboxOptions, workspace: &Path, _cwd: &Path) -> Result<Prepared> {
    if !rustix::process::geteuid().is_root() {
        bail!("--sandbox needs root (it makes namespaces and mounts, then drops to --user): run ringfs exec as root, or without --sandbox");
    }
    let (uid, gid) = lookup_user(opts.user.as_deref().unwrap_or("nobody"))?;
    let cgroup = make_cgroup(opts)?;
    Ok(Prepared {
        uid,
        gid,
        workspace: workspace.to_path_buf(),
        cgroup,
    })
}

fn cstr(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .with_context(|| format!("{}: a path with a NUL byte", p.display()))
}

/// Steps whose failure B or C reports (the record's second word).
const STEPS: &[&str] = &[
    "unshare the namespaces",
    "make mounts private",
    "clone the workspace mount",
    "make / read-only",
    "mount /tmp",
    "mount /proc",
    "hide a directory",
    "recreate the workspace path",
    "mount the workspace",
    "bring up loopback",
    "set the hostname",
    "enter the working directory",
    "drop capabilities",
    "switch user",
    "set no_new_privs",
    "execute the command",
    "fork",
    "join the cgroup",
];

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

fn fail(fd: i32, step: usize) -> ! {
    let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    report(fd, [MAGIC_ERR, step as i64, e as i64, 0, 0, 0, 0, 0]);
    // SAFETY: leaving a forked child without running destructors.
    unsafe { libc::_exit(125) }
}

const AT_RECURSIVE: u32 = 0x8000;
const OPEN_TREE_CLONE: u32 = 1;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;

/// Everything B and C need, made before the fork.
struct Plan {
    program: CString,
    /// Null-terminated pointer arrays into `argv`/`envp` of [`run`].
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
    workspace: CString,
    /// Prefixes of the workspace path, to recreate under a fresh /tmp.
    prefixes: Vec<CString>,
    cwd: CString,
    hide: Vec<CString>,
    cgroup_procs: Option<CString>,
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
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            fail(status_fd, 1);
        }
        // The workspace's mount tree, cloned while it is writable.
        let ws = libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            plan.workspace.as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as u32,
        ) as i32;
        if ws < 0 {
            fail(status_fd, 2);
        }
        if native_roots::mount_setattr(libc::AT_FDCWD, c"/", AT_RECURSIVE, native_roots::MOUNT_ATTR_RDONLY, 0) != 0 {
            fail(status_fd, 3);
        }
        let nodev = libc::MS_NOSUID | libc::MS_NODEV;
        if libc::mount(
            c"tmpfs".as_ptr(),
            c"/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            nodev,
            c"mode=1777".as_ptr() as *const libc::c_void,
        ) != 0
        {
            fail(status_fd, 4);
        }
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            nodev | libc::MS_NOEXEC,
            std::ptr::null(),
        ) != 0
        {
            fail(status_fd, 5);
        }
        for h in &plan.hide {
            let r = libc::mount(
                c"tmpfs".as_ptr(),
                h.as_ptr(),
                c"tmpfs".as_ptr(),
                nodev | libc::MS_NOEXEC | libc::MS_RDONLY,
                c"mode=0,size=4k".as_ptr() as *const libc::c_void,
            );
            // A directory already under the fresh /tmp is gone anyway.
            if r != 0 && *libc::__errno_location() != libc::ENOENT {
                fail(status_fd, 6);
            }
        }
        for p in &plan.prefixes {
            if libc::mkdir(p.as_ptr(), 0o755) != 0 && *libc::__errno_location() != libc::EEXIST {
                fail(status_fd, 7);
            }
        }
        if libc::syscall(
            libc::SYS_move_mount,
            ws,
            c"".as_ptr(),
            libc::AT_FDCWD,
            plan.workspace.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        ) != 0
        {
            fail(status_fd, 8);
        }
        libc::close(ws);
        if !loopback_up() {
            fail(status_fd, 9);
        }
        let host = b"ringfs-sandbox";
        if libc::sethostname(host.as_ptr() as *const libc::c_char, host.len()) != 0 {
            fail(status_fd, 10);
        }
        let mut t0: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t0);
        let c = libc::fork();
        if c < 0 {
            fail(status_fd, 16);
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
        if libc::chdir(plan.cwd.as_ptr()) != 0 {
            fail(status_fd, 11);
        }
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setresgid(plan.gid, plan.gid, plan.gid) != 0
            || libc::setresuid(plan.uid, plan.uid, plan.uid) != 0
        {
            fail(status_fd, 13);
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
        let h = Hdr {
            version: 0x2008_0522,
            pid: 0,
        };
        let d = [
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        if libc::syscall(libc::SYS_capset, &h as *const Hdr, d.as_ptr()) != 0 {
            fail(status_fd, 12);
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            fail(status_fd, 14);
        }
        libc::execve(
            plan.program.as_ptr(),
            plan.argv_ptrs.as_ptr(),
            plan.envp_ptrs.as_ptr(),
        );
        fail(status_fd, 15)
    }
}

/// Runs the command in the sandbox `p` (see the module doc). `hide`: the
/// directories to cover (the control socket directory, the store).
/// Errors: a setup step that failed (named, with the system's reason);
/// [`run::NotRun`] when execve failed.
pub fn run(
    p: &Prepared,
    program: &Path,
    argv: &[OsString],
    cwd: &Path,
    output: Output,
    timeout: Option<Duration>,
    hide: &[PathBuf],
) -> Result<RunResult> {
    let mut prefixes = Vec::new();
    let mut acc = PathBuf::from("/");
    for c in p.workspace.components().skip(1) {
        acc.push(c);
        prefixes.push(cstr(&acc)?);
    }
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
    let plan = Plan {
        program: cstr(program)?,
        argv_ptrs: ptrs(&argv_c),
        envp_ptrs: ptrs(&envp_c),
        workspace: cstr(&p.workspace)?,
        prefixes,
        cwd: cstr(cwd)?,
        hide: hide
            .iter()
            .filter(|h| h.is_dir() && !p.workspace.starts_with(h))
            .map(|h| cstr(h))
            .collect::<Result<_>>()?,
        cgroup_procs: p
            .cgroup
            .as_ref()
            .map(|c| cstr(&c.join("cgroup.procs")))
            .transpose()?,
        uid: p.uid,
        gid: p.gid,
    };
    let pipe = || -> Result<(i32, i32)> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 into a two-int array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error()).context("making a pipe");
        }
        Ok((fds[0], fds[1]))
    };
    let status = pipe()?;
    let (outp, errp) = match output {
        Output::Capture(_) => (Some(pipe()?), Some(pipe()?)),
        Output::Inherit => (None, None),
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
            if let Some(cg) = &plan.cgroup_procs {
                let fd = libc::open(cg.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, b"0".as_ptr() as *const libc::c_void, 1) != 1 {
                    fail(status.1, 17);
                }
                libc::close(fd);
            }
            let flags = libc::CLONE_NEWNS
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS
                | libc::CLONE_NEWNET;
            if libc::unshare(flags) != 0 {
                fail(status.1, 0);
            }
            let b = libc::fork();
            if b < 0 {
                fail(status.1, 16);
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
    let reader = |p: Option<(i32, i32)>, limit: u64| {
        // SAFETY: the read end is ours alone from here.
        p.map(|p| {
            let f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(p.0) };
            std::thread::spawn(move || run::drain(f, limit))
        })
    };
    let limit = if let Output::Capture(n) = output {
        n
    } else {
        0
    };
    let (ro, re) = (reader(outp, limit), reader(errp, limit));
    let waited = run::wait_child(a, timeout, a);
    let wall = t0.elapsed();
    // SAFETY: the status pipe's read end is ours.
    let mut sf = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(status.0) };
    let mut bytes = Vec::new();
    let _ = std::io::Read::read_to_end(&mut sf, &mut bytes);
    let (_, _, timed_out) = waited.context("waiting for the sandbox")?;
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
        if e[1] == 15 {
            let found = e[2] as i32 != libc::ENOENT;
            return Err(run::NotRun {
                program: argv[0].to_string_lossy().into_owned(),
                found,
                why: format!("in the sandbox: {why}"),
            }
            .into());
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
