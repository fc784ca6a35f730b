//! `ringfs`: the command line of the ringfs workspace filesystem.
//!
//! See README.md for usage; `ringfs --help` and `ringfs <command> --help`
//! describe every flag.

mod adapter;
mod cli;
mod control;
mod mount;
mod mountpoint;
mod roots;

use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::Parser;

use cli::{Cli, Command, FsckArgs, StatsArgs, StatusArgs, UmountArgs, UnrootArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Mount(_)) {
        // Short-lived commands die quietly when their output pipe closes
        // (`ringfs stats MP | head`), as other Unix tools do.
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RINGFS_LOG").unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let result = match cli.command {
        Command::Mount(args) => mount::cmd_mount(args),
        Command::Umount(args) => cmd_umount(args),
        Command::Status(args) => cmd_status(args),
        Command::Stats(args) => cmd_stats(args),
        Command::Fsck(args) => return cmd_fsck(args),
        Command::Unroot(args) => cmd_unroot(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringfs: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `ringfs umount`: ask the daemon to stop; if it is gone, remove the stale mount.
fn cmd_umount(args: UmountArgs) -> Result<()> {
    let mp = mountpoint::absolute(&args.mountpoint)?;
    let had_socket = control::socket_path(&mp).exists();
    match call_daemon(&mp, &control::Request::Shutdown) {
        Ok(reply) => {
            let pid = reply.get("pid").and_then(|p| p.as_u64()).unwrap_or(0) as i32;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(args.timeout);
            // The daemon unmounts, commits and exits; wait for the process to go.
            while pid > 0 && process_alive(pid) {
                if std::time::Instant::now() > deadline {
                    bail!(
                        "the daemon (pid {pid}) serving {} did not finish within {} s; files may still be open under it",
                        mp.display(),
                        args.timeout
                    );
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            // The daemon's final commit: a failure (say a full disk) is ours to report.
            let result = control::result_path(&mp);
            let outcome = std::fs::read_to_string(&result).unwrap_or_else(|_| "ok".into());
            let _ = std::fs::remove_file(&result);
            if outcome.trim() != "ok" {
                bail!("{} is unmounted, but the daemon's final commit failed: {}", mp.display(), outcome.trim());
            }
            Ok(())
        }
        Err(_) => {
            if mountpoint::is_ringfs_mount(&mp)? {
                // No daemon answers: a stale mount left by a killed daemon.
                fuse_uring::session::unmount(&mp)
                    .map_err(|err| anyhow::anyhow!("unmounting stale ringfs mount {}: {err}", mp.display()))?;
                let _ = std::fs::remove_file(control::socket_path(&mp));
                eprintln!("ringfs: removed stale mount {} (no daemon was serving it)", mp.display());
                Ok(())
            } else if let Some(other) = mountpoint::mount_at(&mp)? {
                bail!(
                    "{} is a {} mount, not a ringfs mount: use umount(8) for it",
                    mp.display(),
                    other.fstype
                )
            } else if had_socket {
                // Nothing is mounted there any more, but a daemon served it a
                // moment ago: it was already stopping (SIGTERM, an external
                // umount) and went away while we asked.
                Ok(())
            } else {
                bail!("{} is not mounted (no ringfs daemon serves it)", mp.display())
            }
        }
    }
}

/// Whether `pid` still runs: kill(pid, 0) succeeds (kill(2)) and it is not
/// a zombie waiting for its parent to reap it (proc(5), `/proc/PID/stat`
/// state `Z`), which happens when the daemon's parent is the caller's.
fn process_alive(pid: i32) -> bool {
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

/// How long a client waits for a daemon whose mount is visible but whose
/// control socket is not bound yet (it is still negotiating transports).
const STARTING_DAEMON_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Send `req` to the daemon serving the absolute path `mp`. A ringfs mount
/// without a socket may belong to a daemon still starting: retry for up to
/// [`STARTING_DAEMON_WAIT`] before giving up.
fn call_daemon(mp: &std::path::Path, req: &control::Request) -> Result<serde_json::Value> {
    let deadline = std::time::Instant::now() + STARTING_DAEMON_WAIT;
    loop {
        match control::call(mp, req) {
            Ok(v) => return Ok(v),
            Err(e) => {
                let starting = !control::socket_path(mp).exists() && mountpoint::is_ringfs_mount(mp)?;
                if !starting || std::time::Instant::now() > deadline {
                    return Err(e);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
}

/// Ask the daemon serving `mountpoint` a question, explaining a dead mount.
fn ask(mountpoint: &std::path::Path, req: control::Request) -> Result<serde_json::Value> {
    let mp = mountpoint::absolute(mountpoint)?;
    match call_daemon(&mp, &req) {
        Ok(v) => Ok(v),
        Err(e) => {
            if mountpoint::is_ringfs_mount(&mp)? {
                bail!("{} is a ringfs mount but no daemon answers (killed?): run `ringfs umount {}`", mp.display(), mp.display());
            }
            Err(e)
        }
    }
}

/// `ringfs stats`.
fn cmd_stats(args: StatsArgs) -> Result<()> {
    let stats = ask(&args.mountpoint, control::Request::Stats)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else if args.prometheus {
        print!("{}", mount::format_prometheus(&stats));
    } else {
        print!("{}", mount::format_stats(&stats));
    }
    Ok(())
}

/// `ringfs unroot PATH`: asks the daemon of the ringfs mount that holds PATH.
fn cmd_unroot(args: UnrootArgs) -> Result<()> {
    let path = mountpoint::absolute(&args.path)?;
    let Some(mp) = mountpoint::mounts()?
        .into_iter()
        .filter(|m| m.fstype == "fuse.ringfs" && path.starts_with(&m.mount_point) && path != m.mount_point)
        .map(|m| m.mount_point)
        .max_by_key(|m| m.as_os_str().len())
    else {
        bail!("{} is not inside a ringfs mount", path.display());
    };
    let reply = ask(&mp, control::Request::Unroot { path: path.clone() })?;
    match (reply.get("ok").and_then(|v| v.as_str()), reply.get("refused").and_then(|v| v.as_str())) {
        (Some(msg), _) => {
            eprintln!("ringfs: {msg}");
            Ok(())
        }
        (_, Some(e)) => bail!("{e}"),
        _ => bail!("unexpected reply from the daemon: {reply}"),
    }
}

/// `ringfs status`.
fn cmd_status(args: StatusArgs) -> Result<()> {
    let status = ask(&args.mountpoint, control::Request::Status)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", mount::format_status(&status));
    }
    Ok(())
}

/// `ringfs fsck`: 0 clean, 1 damaged, 2 could not check.
fn cmd_fsck(args: FsckArgs) -> ExitCode {
    match fs_core::fsck(&args.store) {
        Ok(report) => {
            print!("{report}");
            if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("ringfs: fsck {}: {:#}", args.store.display(), anyhow::Error::from(e));
            ExitCode::from(2)
        }
    }
}
