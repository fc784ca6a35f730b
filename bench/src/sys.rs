//! Processes, mounts, signals and machine facts.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Catch SIGINT/SIGTERM/SIGHUP: the harness stops at the next check and its
/// guards unmount and clean up. A second signal of the same kind is not special.
pub fn install_signal_handlers() -> Result<()> {
    let flag = STOP.get_or_init(|| Arc::new(AtomicBool::new(false))).clone();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, flag.clone()).context("installing a signal handler")?;
    }
    Ok(())
}

pub fn interrupted() -> bool {
    STOP.get().is_some_and(|f| f.load(Ordering::Relaxed))
}

pub fn check_interrupted() -> Result<()> {
    if interrupted() {
        bail!("interrupted");
    }
    Ok(())
}

/// What a finished command left behind.
pub struct Ran {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub ms: f64,
    pub timed_out: bool,
}

impl Ran {
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success()) && !self.timed_out
    }
    /// One line describing a failure: stdout's `FSBENCH_FAIL` line, else the
    /// last stderr line starting with `fatal:` or `error:` (git's reason; the
    /// lines after it are advice, the same for every lock file, e.g. "remove
    /// the file manually to continue."), else the last stderr line that says
    /// something; prefixed with the exit status.
    pub fn why(&self) -> String {
        if self.timed_out {
            return "timed out".into();
        }
        if interrupted() {
            return "interrupted".into();
        }
        let fail = self.stdout.lines().find_map(|l| l.strip_prefix("FSBENCH_FAIL ")).map(str::to_string);
        let reason = || self.stderr.lines().rev().find(|l| l.starts_with("fatal:") || l.starts_with("error:")).map(str::to_string);
        let last = fail.or_else(reason).or_else(|| self.stderr.lines().rev().find(|l| !l.trim().is_empty()).map(str::to_string));
        let code = match self.status {
            Some(s) => format!("exit {}", s.code().map_or("signal".into(), |c| c.to_string())),
            None => "not started".into(),
        };
        match last {
            Some(l) => format!("{code}: {}", l.trim()),
            None => code,
        }
    }
}

/// Run `cmd` in its own process group with stdout/stderr captured through files
/// in `scratch`; kill the group (only it: processes we started) on timeout or
/// when the harness is interrupted. `ms` is the wall time of the command.
pub fn run(mut cmd: Command, scratch: &Path, timeout: Duration) -> Result<Ran> {
    std::fs::create_dir_all(scratch)?;
    let out_p = scratch.join(".cmd.out");
    let err_p = scratch.join(".cmd.err");
    cmd.stdin(Stdio::null())
        .stdout(File::create(&out_p)?)
        .stderr(File::create(&err_p)?)
        .process_group(0);
    let t0 = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ok(Ran { status: None, stdout: String::new(), stderr: format!("{:?}: {e}", cmd.get_program()), ms: 0.0, timed_out: false })
        }
    };
    let pgid = child.id() as i32;
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if t0.elapsed() > timeout || interrupted() {
            timed_out = !interrupted();
            // SAFETY: kill(2) on the process group of a child we spawned.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_micros(500));
    };
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let stdout = std::fs::read_to_string(&out_p).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_p).unwrap_or_default();
    let _ = std::fs::remove_file(&out_p);
    let _ = std::fs::remove_file(&err_p);
    Ok(Ran { status: Some(status), stdout, stderr, ms, timed_out })
}

/// Like [`run`] but an error unless the command succeeded.
pub fn run_ok(cmd: Command, scratch: &Path, timeout: Duration) -> Result<Ran> {
    let desc = format!("{cmd:?}");
    let r = run(cmd, scratch, timeout)?;
    if !r.ok() {
        bail!("{desc} failed: {}", r.why());
    }
    Ok(r)
}

/// Decode the octal escapes of /proc/self/mountinfo paths ([`native_roots::unescape`]).
fn unescape(s: &str) -> String {
    native_roots::unescape(s).to_string_lossy().into_owned()
}

/// Is `path` (absolute, canonical) a mountpoint right now?
pub fn is_mounted(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = path.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4).is_some_and(|mp| unescape(mp) == want))
}

/// A temp directory removed (recursively) on drop, after whatever was mounted in it
/// has been unmounted by its own guard.
pub struct TempDir {
    pub path: PathBuf,
    pub keep: bool,
}

impl TempDir {
    pub fn new(parent: &Path, prefix: &str) -> Result<TempDir> {
        std::fs::create_dir_all(parent)?;
        for _ in 0..100 {
            let p = parent.join(format!("{prefix}{:08x}", fastrand::u32(..)));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(TempDir { path: p.canonicalize()?, keep: false }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("creating {}", p.display())),
            }
        }
        bail!("could not create a temp dir in {}", parent.display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        // Never recurse into something still mounted below us.
        if mounted_below(&self.path) {
            eprintln!("ringfs-bench: not removing {}: something is still mounted below it", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Is anything mounted at or below `dir`?
pub fn mounted_below(dir: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    info.lines().filter_map(|l| l.split(' ').nth(4)).any(|mp| Path::new(&unescape(mp)).starts_with(dir))
}

fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

pub fn loadavg() -> String {
    read_trim("/proc/loadavg").split(' ').take(3).collect::<Vec<_>>().join(" ")
}

/// The machine facts printed with every table.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split(':').nth(1)))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let mem_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").and_then(|r| r.split_whitespace().next()?.parse().ok()))
        .unwrap_or(0);
    json!({
        "hostname": read_trim("/proc/sys/kernel/hostname"),
        "kernel": read_trim("/proc/sys/kernel/osrelease"),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model,
        "mem_gib": (mem_kib as f64 / 1048576.0 * 10.0).round() / 10.0,
        "loadavg_start": loadavg(),
    })
}

/// The filesystem type holding `path` (from /proc/self/mountinfo, longest prefix).
pub fn fs_type(path: &Path) -> String {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return "?".into() };
    let mut best = (0usize, "?".to_string());
    for l in info.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let Some(dash) = f.iter().position(|x| *x == "-") else { continue };
        let mp = unescape(f[4]);
        if path.starts_with(&mp) && mp.len() >= best.0 {
            best = (mp.len(), format!("{} ({})", f.get(dash + 1).unwrap_or(&"?"), f.get(dash + 2).unwrap_or(&"?")));
        }
    }
    best.1
}

pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(prog)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn ran(stderr: &str) -> Ran {
        Ran { status: Some(ExitStatus::from_raw(128 << 8)), stdout: String::new(), stderr: stderr.into(), ms: 0.0, timed_out: false }
    }

    #[test]
    fn why_names_the_fatal_line_not_the_advice_after_it() {
        let git = "fatal: cannot lock ref 'HEAD': Unable to create '/r/.git/HEAD.lock': File exists.\n\n\
                   Another git process seems to be running in this repository, e.g.\n\
                   may have crashed in this repository earlier:\n\
                   remove the file manually to continue.\n";
        assert_eq!(ran(git).why(), "exit 128: fatal: cannot lock ref 'HEAD': Unable to create '/r/.git/HEAD.lock': File exists.");
        assert_eq!(ran("warning: x\nsomething broke\n").why(), "exit 128: something broke");
        assert_eq!(ran("").why(), "exit 128");
    }
}
