//! `ringfs umount`: refuse a busy mount naming the processes that hold it
//! (as fuser(1) -m would, from /proc), else ask the daemon to stop and
//! wait, showing progress, until it has committed and exited; remove a
//! stale mount whose daemon is gone.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::cli::UmountArgs;
use crate::{call_daemon, control, mountpoint};

/// One process using a mount, as fuser(1) reports it.
#[derive(Debug, Clone)]
pub struct Holder {
    pub pid: i32,
    pub comm: String,
    /// `cwd`, `root`, `exe`, `open file PATH` or `mapped PATH`.
    pub what: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({}: {})", self.pid, self.comm, self.what)
    }
}

/// Whether `p` (a path as /proc shows it) is in the mount at `mp` and not
/// below one of the mounts in `below` (native roots: the daemon detaches them).
fn within(p: &Path, mp: &Path, below: &[PathBuf]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let b = p.as_os_str().as_bytes();
    let p = Path::new(std::ffi::OsStr::from_bytes(b.strip_suffix(b" (deleted)").unwrap_or(b)));
    p.starts_with(mp) && !below.iter().any(|b| p.starts_with(b))
}

/// The processes (other than those in `except`) whose working directory,
/// root, executable, open files or mapped files are in the mount at `mp`
/// (not below `below`). Read from /proc/PID/{cwd,root,exe,fd,maps}
/// without touching the files themselves.
pub fn holders(mp: &Path, except: &[i32], below: &[PathBuf]) -> Vec<Holder> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if except.contains(&pid) {
            continue;
        }
        let base = e.path();
        let comm = std::fs::read_to_string(base.join("comm")).map(|c| c.trim().to_string()).unwrap_or_else(|_| "?".into());
        let mut found: Option<String> = None;
        for link in ["cwd", "root", "exe"] {
            if let Ok(t) = std::fs::read_link(base.join(link)) {
                if within(&t, mp, below) {
                    found = Some(link.to_string());
                    break;
                }
            }
        }
        if found.is_none() {
            if let Ok(fds) = std::fs::read_dir(base.join("fd")) {
                for fd in fds.flatten() {
                    if let Ok(t) = std::fs::read_link(fd.path()) {
                        if within(&t, mp, below) {
                            found = Some(format!("open file {}", t.display()));
                            break;
                        }
                    }
                }
            }
        }
        if found.is_none() {
            if let Ok(maps) = std::fs::read_to_string(base.join("maps")) {
                found = maps
                    .lines()
                    .filter_map(|l| l.split_whitespace().nth(5))
                    .find(|p| p.starts_with('/') && within(Path::new(p), mp, below))
                    .map(|p| format!("mapped {p}"));
            }
        }
        if let Some(what) = found {
            out.push(Holder { pid, comm, what });
        }
    }
    out
}

/// "pid 1 (a: cwd), pid 2 (b: open file …)", the first ten.
fn list<T: std::fmt::Display>(items: &[T]) -> String {
    let mut s: Vec<String> = items.iter().take(10).map(|h| h.to_string()).collect();
    if items.len() > 10 {
        s.push(format!("and {} more", items.len() - 10));
    }
    s.join(", ")
}

/// The one-line answer for a path that is no ringfs mount.
pub fn not_a_mount(mp: &Path) -> anyhow::Error {
    let hint = Some("give the mountpoint of a running `ringfs mount` (findmnt -t fuse.ringfs lists them)".to_string());
    let why = if mp.exists() { "" } else { " (no such file or directory)" };
    ringfs::errors::failure(ringfs::errors::ErrorKind::NotAMount, format!("{} is not a ringfs mount{why}", mp.display()), hint)
}

/// `ringfs umount`: ask the daemon to stop; if it is gone, remove the stale mount.
pub fn cmd_umount(args: UmountArgs) -> Result<()> {
    let mp = mountpoint::resolve(&args.mountpoint)?;
    let top = mountpoint::mount_at(&mp)?;
    let is_ringfs = top.as_ref().is_some_and(|m| m.fstype == fuse_uring::session::FSTYPE);
    let had_socket = control::socket_path(&mp).exists();
    if !is_ringfs && !had_socket {
        if let Some(other) = top {
            bail!("{} is a {} mount, not a ringfs mount: use umount(8) for it", mp.display(), other.fstype);
        }
        return Err(not_a_mount(&mp));
    }
    let Ok(status) = call_daemon(&mp, &control::Request::Status) else {
        return remove_stale(&mp, is_ringfs, had_socket);
    };
    let daemon = status["pid"].as_i64().unwrap_or(0) as i32;
    let store = status["store"].as_str().unwrap_or("DIR").to_string();
    let roots: Vec<PathBuf> = status["native_roots"]["roots"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["path"].as_str().map(PathBuf::from)).collect())
        .unwrap_or_default();
    // Processes inside native roots count too: detaching a root under them
    // would silently move their cwd and files out of the workspace.
    let mut holding = if is_ringfs { holders(&mp, &[std::process::id() as i32, daemon], &[]) } else { Vec::new() };
    holding.sort_by_key(|h| h.pid);
    if !holding.is_empty() && !args.lazy {
        bail!(
            "{} is busy (EBUSY), used by {}: end those processes or move them out (cd elsewhere, close the files), or detach it now with `ringfs umount --lazy {}` (the daemon then commits and exits when the last one lets go)",
            mp.display(),
            list(&holding),
            mp.display()
        );
    }
    if is_ringfs && !args.lazy {
        let others: Vec<String> = mountpoint::mounts()?
            .into_iter()
            .filter(|m| m.mount_point != mp && m.mount_point.starts_with(&mp) && !roots.iter().any(|r| m.mount_point.starts_with(r)))
            .map(|m| format!("{} ({})", m.mount_point.display(), m.fstype))
            .collect();
        if !others.is_empty() {
            bail!(
                "{} is busy (EBUSY): other mounts sit inside it: {}; unmount them first, or detach everything now with `ringfs umount --lazy {}`",
                mp.display(),
                list(&others),
                mp.display()
            );
        }
    }
    let reply = match call_daemon(&mp, &control::Request::Shutdown { no_wait: args.no_wait, wait_secs: Some(args.timeout) }) {
        Ok(r) => r,
        Err(_) => return remove_stale(&mp, mountpoint::is_ringfs_mount(&mp)?, had_socket),
    };
    let pid = reply.get("pid").and_then(|p| p.as_u64()).unwrap_or(0) as i32;
    wait_for_daemon(&mp, pid, args.timeout, &holding)?;
    // The daemon's final commit: a failure (say a full disk) is ours to report.
    let result = control::result_path(&mp);
    let outcome = std::fs::read_to_string(&result).unwrap_or_else(|_| "ok".into());
    let _ = std::fs::remove_file(&result);
    if outcome.trim() != "ok" {
        // A store damaged while served skipped its final commit (the
        // outcome says why and the fix: salvage).
        let how = if outcome.contains("final commit was skipped") { "" } else { "the daemon's final commit failed: " };
        bail!("{} is unmounted, but {how}{}", mp.display(), outcome.trim());
    }
    match crate::remote::sync::take_outcome(&mp) {
        Some(v) => sync_report(&mp, &store, &v, args.timeout),
        None => Ok(()),
    }
}

/// What `ringfs umount` says about a `mount --remote`'s final push (D44):
/// a line when it was pushed or left pending (`--no-wait`), an error when
/// the wait ran out, each with what is pending.
fn sync_report(mp: &Path, store: &str, v: &serde_json::Value, timeout: u64) -> Result<()> {
    use crate::remote::sync::{count, human_bytes};
    let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let pending = format!(
        "{}, {} and {}, {}",
        count(n("pending_commits"), "commit"),
        count(n("pending_objects"), "object"),
        count(n("pending_chunks"), "chunk"),
        human_bytes(n("pending_bytes"))
    );
    match s("reason").as_str() {
        "pushed" => {
            eprintln!("ringfs: {} is on remote {} ({})", s("branch"), s("remote"), &s("commit")[..12.min(s("commit").len())]);
            Ok(())
        }
        "no commits" => Ok(()),
        "no-wait" if n("pending_commits") == 0 && n("pending_bytes") == 0 => Ok(()),
        "no-wait" => {
            eprintln!(
                "ringfs: left pending for remote {} (--no-wait): {pending} of branch {}, committed in the store; `ringfs push --store {store}` or the next `ringfs mount … --remote {}` sends them",
                s("remote"),
                s("branch"),
                s("remote")
            );
            Ok(())
        }
        "refused" => bail!(
            "{} is unmounted and every change is committed in its store, but remote {} ({}) refused the push: {}; {pending} of branch {} stay in the store (waiting longer cannot help)",
            mp.display(),
            s("remote"),
            s("url"),
            v["error"].as_str().unwrap_or("another store pushes this branch"),
            s("branch")
        ),
        _ => bail!(
            "{} is unmounted and every change is committed in its store, but the push to remote {} ({}) did not finish within the {timeout} s of --timeout{}: {pending} of branch {} are pending; send them with `ringfs push --store {store}` (or mount again with --remote {}), or unmount with a longer --timeout next time",
            mp.display(),
            s("remote"),
            s("url"),
            v["error"].as_str().map(|e| format!(" (last error: {e})")).unwrap_or_default(),
            s("branch"),
            s("remote")
        ),
    }
}


/// Waits until `pid` has exited, saying every two seconds what it waits
/// for: the processes that still hold a lazily detached mount, files the
/// kernel still holds open, or the final commit's progress (files left to
/// store, from the daemon's stats on the control socket).
fn wait_for_daemon(mp: &Path, pid: i32, timeout: u64, holding: &[Holder]) -> Result<()> {
    use std::io::IsTerminal;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(timeout);
    // On a terminal a spinner line follows the progress; else a line every 2 s.
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        if let Ok(st) = indicatif::ProgressStyle::with_template("{spinner} {msg}") {
            b.set_style(st);
        }
        b
    });
    let every = Duration::from_millis(if bar.is_some() { 250 } else { 2000 });
    let mut next_note = start + every;
    let exit_fd = if pid > 0 { pidfd_open(pid) } else { None };
    while pid > 0 && process_alive(pid) {
        let now = Instant::now();
        if now > deadline {
            if let Some(b) = &bar {
                b.finish_and_clear();
            }
            let why = still_holding(holding)
                .map(|l| format!("; still used by {l}"))
                .or_else(|| progress(mp).map(|p| format!("; {p}")))
                .unwrap_or_default();
            bail!(
                "the daemon (pid {pid}) serving {} did not finish within {timeout} s{why}: see its log, or wait longer with --timeout",
                mp.display()
            );
        }
        if now >= next_note {
            let why = match still_holding(holding) {
                Some(l) => format!("detached; it stops when these let go: {l}"),
                None => progress(mp).unwrap_or_else(|| "committing".to_string()),
            };
            let line = format!(
                "waiting for the daemon (pid {pid}) of {}: {why} ({} s of {timeout} s)",
                mp.display(),
                start.elapsed().as_secs()
            );
            match &bar {
                Some(b) => b.set_message(line),
                None => eprintln!("ringfs: {line}"),
            }
            next_note = now + every;
        }
        if let Some(b) = &bar {
            b.tick();
        }
        let until = next_note.min(deadline).saturating_duration_since(Instant::now());
        wait_exit(exit_fd.as_ref(), until);
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    Ok(())
}

/// A pidfd for `pid` (pidfd_open(2), Linux ≥ 5.3), `None` where the kernel
/// has none or the process is gone.
fn pidfd_open(pid: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a fresh fd owned by nobody else.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Waits at most `max` (and at most 0.5 s) for the process behind `pidfd`
/// to exit: a pidfd polls readable once the whole thread group is gone
/// (pidfd_open(2)), so the caller sees the exit at once instead of on its
/// next 20 ms tick. Without a pidfd it sleeps 20 ms.
fn wait_exit(pidfd: Option<&std::os::fd::OwnedFd>, max: Duration) {
    use std::os::fd::AsRawFd;
    let Some(fd) = pidfd else {
        std::thread::sleep(Duration::from_millis(20));
        return;
    };
    let ms = max.min(Duration::from_millis(500)).as_millis().max(1) as libc::c_int;
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// What the daemon of `mp` is doing, from its stats: "N files still open"
/// while the kernel holds handles (the session has not ended), else
/// "committing: N files left to store". `None` if it does not answer.
fn progress(mp: &Path) -> Option<String> {
    let v = control::call_within(mp, &control::Request::Stats, Duration::from_secs(1)).ok()?;
    Some(sync_line(&v["sync"]).unwrap_or_else(|| progress_line(&v["store"])))
}

/// The progress sentence of a `mount --remote`'s final commit and push
/// (the stats document's `sync` part), None before or without them.
fn sync_line(s: &serde_json::Value) -> Option<String> {
    use crate::remote::sync::human_bytes;
    if s["final"] != true {
        return None;
    }
    let remote = s["remote"].as_str().unwrap_or("");
    let err = s["last_error"].as_str().map(|e| format!(" (last error: {e})")).unwrap_or_default();
    Some(match s["phase"].as_str()? {
        "final commit" => format!("committing the last changes for remote {remote}"),
        "final push" => format!(
            "pushing to remote {remote}: {} of {} sent",
            human_bytes(s["sent_bytes"].as_u64().unwrap_or(0)),
            human_bytes(s["total_bytes"].as_u64().unwrap_or(0))
        ),
        "waiting to retry" => format!(
            "pushing to remote {remote}: {} failed attempts, next in {} s{err}",
            s["failures"],
            s["retry_in_s"]
        ),
        _ => return None,
    })
}

/// The progress sentence for a stats document's `store` part.
fn progress_line(store: &serde_json::Value) -> String {
    let open = store["open_files"].as_u64().unwrap_or(0);
    let left = store["unstored"].as_u64().unwrap_or(0);
    if open > 0 && !store["closing"].as_bool().unwrap_or(false) {
        return format!("{open} files still open");
    }
    match left {
        0 => "committing: all files stored, writing the final commit".to_string(),
        1 => "committing: 1 file left to store".to_string(),
        n => format!("committing: {n} files left to store"),
    }
}

/// Those of `holding` that still run.
fn still_holding(holding: &[Holder]) -> Option<String> {
    let alive: Vec<&Holder> = holding.iter().filter(|h| process_alive(h.pid)).collect();
    (!alive.is_empty()).then(|| list(&alive))
}

/// No daemon answers for `mp`.
fn remove_stale(mp: &Path, is_ringfs: bool, had_socket: bool) -> Result<()> {
    if is_ringfs {
        // A stale mount left by a killed daemon.
        fuse_uring::session::unmount(mp).map_err(|err| anyhow::anyhow!("unmounting stale ringfs mount {}: {err}", mp.display()))?;
        let _ = std::fs::remove_file(control::socket_path(mp));
        eprintln!("ringfs: removed stale mount {} (no daemon was serving it)", mp.display());
        Ok(())
    } else if had_socket && !mountpoint::is_ringfs_mount(mp)? {
        // Nothing is mounted there any more, but a daemon served it a
        // moment ago: it was already stopping (SIGTERM, an external
        // umount) and went away while we asked.
        Ok(())
    } else {
        Err(not_a_mount(mp))
    }
}

/// Whether `pid` still runs: kill(pid, 0) succeeds (kill(2)) and it is not
/// a zombie waiting for its parent to reap it (proc(5), `/proc/PID/stat`
/// state `Z`), which happens when the daemon's parent is the caller's.
pub fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    // A zombie leader whose other threads still run (exit_group in
    // progress: the store's file locks are not released yet) is alive.
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true);
    if !zombie {
        return true;
    }
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count()).unwrap_or(0);
    threads > 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_the_mount_not_its_roots() {
        let mp = Path::new("/w");
        let roots = [PathBuf::from("/w/node_modules")];
        assert!(within(Path::new("/w"), mp, &roots));
        assert!(within(Path::new("/w/a (deleted)"), mp, &roots));
        assert!(!within(Path::new("/w/node_modules/x"), mp, &roots));
        assert!(!within(Path::new("/wx"), mp, &roots));
    }

    #[test]
    fn progress_says_what_it_waits_for() {
        let v = serde_json::json!({ "open_files": 0, "unstored": 1234, "closing": true });
        assert_eq!(progress_line(&v), "committing: 1234 files left to store");
        let v = serde_json::json!({ "open_files": 3, "unstored": 9, "closing": false });
        assert_eq!(progress_line(&v), "3 files still open");
        let v = serde_json::json!({ "open_files": 0, "unstored": 0, "closing": true });
        assert_eq!(progress_line(&v), "committing: all files stored, writing the final commit");
    }

    #[test]
    fn our_own_cwd_holds_its_directory() {
        let cwd = std::env::current_dir().unwrap();
        let h = holders(&cwd, &[], &[]);
        assert!(h.iter().any(|h| h.pid == std::process::id() as i32 && h.what == "cwd"), "{h:?}");
    }
}
