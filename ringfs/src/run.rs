//! Running the command of `ringfs exec` (without a sandbox; the sandbox
//! reuses the output capture and status decoding): argv straight to
//! execve, the program looked up in `PATH`, stdout/stderr streamed or
//! captured bounded, a timeout through a pidfd, resource use from wait4,
//! and what the command left running killed when it exits.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::exec::Captured;

/// Where the command's stdout and stderr go: the caller's, or captured (at
/// most this many bytes each are kept).
#[derive(Clone, Copy, Debug)]
pub enum Output {
    Inherit,
    Capture(u64),
}

/// How a command ended and what it used: exit code as a shell gives it
/// (128+N for signal N), the signal, whether the timeout killed it,
/// processes it left running (killed), its time from start to exit, CPU
/// (user, system) and peak RSS (KiB) from wait4 (with what it waited for),
/// and the captured output.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub orphans: u64,
    pub command: Duration,
    pub user: Duration,
    pub system: Duration,
    pub max_rss_kib: u64,
    pub stdout: Option<Captured>,
    pub stderr: Option<Captured>,
}

/// The command was not run: not found (exit code 127) or not executable (126).
#[derive(Debug)]
pub struct NotRun {
    pub program: String,
    pub found: bool,
    pub why: String,
}

impl NotRun {
    /// The shell's exit code for it.
    pub fn code(&self) -> u8 {
        if self.found {
            126
        } else {
            127
        }
    }
}

impl std::fmt::Display for NotRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.program, self.why)
    }
}

impl std::error::Error for NotRun {}

fn executable(p: &Path) -> bool {
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The file `arg0` names: a path (with a `/`, relative to `cwd`) as it
/// is, else the first executable of that name in `PATH`. Errors:
/// [`NotRun`].
pub fn find_program(arg0: &OsStr, cwd: &Path) -> Result<PathBuf> {
    let name = arg0.to_string_lossy().into_owned();
    if arg0.as_bytes().contains(&b'/') {
        let p = cwd.join(arg0);
        if !p.exists() {
            return Err(NotRun {
                program: name,
                found: false,
                why: "no such file".into(),
            }
            .into());
        }
        if !executable(&p) {
            return Err(NotRun {
                program: name,
                found: true,
                why: "not an executable file (check its mode)".into(),
            }
            .into());
        }
        return Ok(p);
    }
    let path =
        std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    for dir in std::env::split_paths(&path) {
        let p = dir.join(arg0);
        if executable(&p) {
            return Ok(p);
        }
    }
    Err(NotRun {
        program: name,
        found: false,
        why: "command not found in PATH (no shell runs it: give a program, e.g. `-- sh -c '…'`)"
            .into(),
    }
    .into())
}

/// Reads `r` to its end, keeping the first `limit` bytes.
pub(crate) fn drain(mut r: impl Read, limit: u64) -> Captured {
    let mut kept = Vec::new();
    let mut total = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len() as u64) as usize;
                kept.extend_from_slice(&buf[..n.min(room)]);
                total += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let text_b64 = std::str::from_utf8(&kept).is_err().then(|| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&kept)
    });
    Captured {
        text: String::from_utf8_lossy(&kept).into_owned(),
        text_b64,
        cut: total - kept.len() as u64,
        bytes: total,
        raw: kept,
    }
}

/// Exit code, signal from a wait status.
pub(crate) fn decode(status: i32) -> (i32, Option<i32>) {
    if libc::WIFSIGNALED(status) {
        let s = libc::WTERMSIG(status);
        (128 + s, Some(s))
    } else {
        (libc::WEXITSTATUS(status), None)
    }
}

pub(crate) fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
}

/// Waits for `pid` (our child) up to `timeout`, then kills it with
/// `kill_target` (a pid or -pgid) and waits. Returns (wait status, rusage,
/// timed out, processes of the group -`kill_target` alive when the timeout
/// killed them, the command included; 0 for a pid).
pub(crate) fn wait_child(
    pid: i32,
    timeout: Option<Duration>,
    kill_target: i32,
) -> std::io::Result<(i32, libc::rusage, bool, u64)> {
    let mut timed_out = false;
    let mut at_timeout = 0;
    // A timeout too large to add to the clock (library callers may pass
    // Duration::MAX) is no deadline at all.
    if let Some(deadline) = timeout.and_then(|t| Instant::now().checked_add(t)) {
        // SAFETY: pidfd_open takes a pid and flags; the fd returned is ours.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, ms) };
            if n > 0 {
                break;
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if left.is_zero() || n == 0 {
                timed_out = true;
                if kill_target < 0 {
                    // Counted before the kill: killed, they are gone from
                    // the count the caller takes after the wait.
                    at_timeout = count_group(-kill_target);
                }
                // SAFETY: kill(2) on our child (or its process group).
                unsafe { libc::kill(kill_target, libc::SIGKILL) };
                break;
            }
        }
        // SAFETY: closing the pidfd we opened.
        unsafe { libc::close(fd) };
    }
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child with valid out pointers.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            return Ok((status, ru, timed_out, at_timeout));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// How many processes are in process group `pgid` (a scan of /proc, done
/// only when one is known to remain).
fn count_group(pgid: i32) -> u64 {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        let name = e.file_name();
        if !name.as_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        if let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) {
            // pid (comm) state ppid pgrp …: comm may hold spaces; split after ')'.
            if let Some(rest) = stat.rsplit_once(')').map(|x| x.1) {
                let f: Vec<&str> = rest.split_whitespace().collect();
                if f.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
                    && f.first() != Some(&"Z")
                {
                    n += 1;
                }
            }
        }
    }
    n
}

/// Kills what is left of process group `pgid` (the command's; it has
/// exited) and reaps those that are our children (we are a subreaper).
/// Returns how many were left.
fn kill_group(pgid: i32) -> u64 {
    // SAFETY: kill(2) with signal 0 only checks.
    if unsafe { libc::kill(-pgid, 0) } != 0 {
        return 0;
    }
    let n = count_group(pgid);
    // SAFETY: killing the command's own process group.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    for _ in 0..10_000 {
        let mut st = 0;
        // SAFETY: reaping children of that group (orphans reparented to us).
        let r = unsafe { libc::waitpid(-pgid, &mut st, 0) };
        if r <= 0 {
            break;
        }
    }
    n
}

/// The environment variable that marks a call's processes: `ringfs
/// exec` sets it for the command (`PID-N`, unique in this process), its
/// descendants inherit it, and a process reparented to this process that
/// carries it is one the command left (not another thread's child).
pub const CALL_ENV: &str = "RINGFS_EXEC_CALL";

static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Does process `pid` carry `entry` (`NAME=VALUE`) in its environment?
fn carries(pid: i32, entry: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|e| e.split(|b| *b == 0).any(|x| x == entry))
}

/// This process's children now (every thread's, from
/// `/proc/self/task/*/children`; empty where the kernel does not list them).
fn children() -> std::collections::HashSet<i32> {
    let mut out = std::collections::HashSet::new();
    let Ok(rd) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in rd.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    out
}

/// Kills the command's descendants that left its process group (setsid,
/// setpgid: daemons) and were reparented to us (the subreaper) when their
/// parent exited: our children now that carry the call's `marker`
/// ([`CALL_ENV`]; another thread's children do not).
/// Repeats while killing one hands us its
/// own children. Returns how many were killed.
fn kill_escaped(marker: &[u8]) -> u64 {
    let mut n = 0;
    for _ in 0..1000 {
        // (A zombie's environ reads empty: one that exited by itself is
        // left to whoever reaps our children.)
        let extra: Vec<i32> = children()
            .into_iter()
            .filter(|p| carries(*p, marker))
            .collect();
        if extra.is_empty() {
            break;
        }
        for p in extra {
            // SAFETY: kill(2) and waitpid(2) on our own child.
            unsafe {
                libc::kill(p, libc::SIGKILL);
                let mut st = 0;
                libc::waitpid(p, &mut st, 0);
            }
            n += 1;
        }
    }
    n
}

/// Runs `argv` (`program` resolved) in `cwd`, in a process group of its
/// own; the calling process becomes a child subreaper so the command's
/// orphans are reaped here: those in its group, and those that left it
/// (setsid) and were reparented to this process, are killed when the
/// command exits. Errors: [`NotRun`]
/// when execve fails; I/O errors spawning or waiting.
pub fn run(
    program: &Path,
    argv: &[OsString],
    cwd: &Path,
    output: Output,
    timeout: Option<Duration>,
) -> Result<RunResult> {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let mut cmd = Command::new(program);
    cmd.arg0(&argv[0])
        .args(&argv[1..])
        .current_dir(cwd)
        .process_group(0);
    // The command dies with us: a caller that kills `ringfs exec` (a
    // harness's timeout) must not leave it changing the workspace with no
    // receipt. Its own children are not covered (only --sandbox's PID
    // namespace is).
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl and getppid are async-signal-safe; nothing allocates.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(137);
            }
            Ok(())
        });
    }
    if let Output::Capture(_) = output {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    let call = format!(
        "{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    cmd.env(CALL_ENV, &call);
    let marker = format!("{CALL_ENV}={call}").into_bytes();
    let t0 = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let found = e.kind() != std::io::ErrorKind::NotFound;
            return Err(NotRun {
                program: argv[0].to_string_lossy().into_owned(),
                found,
                why: e.to_string(),
            }
            .into());
        }
    };
    let pid = child.id() as i32;
    let readers = match output {
        Output::Capture(limit) => {
            let out = child
                .stdout
                .take()
                .map(|o| std::thread::spawn(move || drain(o, limit)));
            let err = child
                .stderr
                .take()
                .map(|e| std::thread::spawn(move || drain(e, limit)));
            Some((out, err))
        }
        Output::Inherit => None,
    };
    let waited = wait_child(pid, timeout, -pid);
    let command = t0.elapsed();
    let orphans = kill_group(pid);
    let orphans = orphans + kill_escaped(&marker);
    let (status, ru, timed_out, at_timeout) = waited?;
    // What the timeout killed besides the command were left running too.
    let orphans = orphans + at_timeout.saturating_sub(1);
    let (exit_code, signal) = decode(status);
    let mut r = RunResult {
        exit_code,
        signal,
        timed_out,
        orphans,
        command,
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
        max_rss_kib: ru.ru_maxrss as u64,
        ..Default::default()
    };
    if let Some((out, err)) = readers {
        r.stdout = out.and_then(|h| h.join().ok());
        r.stderr = err.and_then(|h| h.join().ok());
    }
    Ok(r)
}
