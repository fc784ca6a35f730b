//! `ringfs`: the command line of the ringfs workspace filesystem.
//!
//! See README.md for usage; `ringfs --help` and `ringfs <command> --help`
//! describe every flag.

mod adapter;
mod branch;
mod cli;
mod gc;
mod helper;
mod install;
mod mount;
mod mount_text;
mod mountpoint;
mod notify;
mod options;
mod plan;
mod remote;
mod roots;
mod snap;
mod umount;

use std::ffi::OsString;

// The control socket is the library's ([`ringfs::control`]): `ringfs exec` uses it there.
use ringfs::control;
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::Parser;

use cli::{Cli, Command, FsckArgs, SalvageArgs, StatsArgs, StatusArgs, UnrootArgs};
use ringfs::errors::ErrorDoc;

fn main() -> ExitCode {
    // Few malloc arenas: glibc gives each thread that allocates its own
    // (up to 8 × cores), and freed memory in them is kept; the daemon's
    // many FUSE and hash threads would hold many.
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    let raw: Vec<OsString> = std::env::args_os().collect();
    // Under the name mount.fuse.ringfs, mount(8) runs us as its helper.
    let as_helper = raw.first().is_some_and(|a0| helper::is_helper(a0));
    let argv = if as_helper {
        // mount(8) helpers say nothing when the mount succeeds.
        mount::quiet_on_success();
        match helper::to_ringfs_argv(raw[1..].to_vec()) {
            Ok(Some(argv)) => argv,
            Ok(None) => return ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mount.fuse.ringfs: {e:#}");
                return ExitCode::from(1);
            }
        }
    } else {
        raw
    };
    // (Only `ringfs mount`'s line is rewritten: it has no --json.)
    let argv = match options::expand(argv) {
        Ok(a) => a,
        Err(e) => {
            // mount(8)'s code for a failed mount (bad option) from its helper.
            eprintln!("{}: {e:#}", if as_helper { "mount.fuse.ringfs" } else { "ringfs" });
            return ExitCode::from(if as_helper { 32 } else { 2 });
        }
    };
    let cli = match Cli::try_parse_from(&argv) {
        Ok(c) => c,
        Err(e) => {
            // `ringfs exec`'s own failures are 125 (as `env`/`timeout`):
            // 2 is a status the command itself may return.
            let exec = argv.get(1).is_some_and(|a| a == "exec");
            let code = if e.use_stderr() && exec { 125 } else { e.exit_code() };
            // (--help and --version are not errors: printed as ever.)
            if e.use_stderr() && cli::asks_json(&argv) {
                println!("{}", ErrorDoc::usage(&e, code).to_json());
            }
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    let (json, fallback) = (cli.command.json(), cli.command.fallback_kind());
    // A failure: its line on stderr as ever, and with --json the error
    // document on stdout (src/errors.rs), the exit status the same.
    let fail = |e: anyhow::Error, prefix: &str, code: u8| {
        if json {
            println!("{}", ErrorDoc::of(&e, fallback, i32::from(code)).to_json());
        }
        eprintln!("{prefix}: {e:#}");
        ExitCode::from(code)
    };
    if !matches!(cli.command, Command::Mount(_)) {
        // Short-lived commands die quietly when their output pipe closes
        // (`ringfs stats MP | head`), as other Unix tools do.
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    // Commands other than mount leave object_store's INFO lines (one per
    // retry of an unreachable remote) out: the command's own error says
    // what failed. RINGFS_LOG=info,object_store=info shows them.
    let default_log = if matches!(cli.command, Command::Mount(_)) { "info" } else { "info,object_store=warn" };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RINGFS_LOG").unwrap_or_else(|_| default_log.into()),
        )
        .with_writer(std::io::stderr)
        // `mount --daemon` forks the daemon, whose stderr is its log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && !matches!(&cli.command, Command::Mount(a) if a.daemon))
        .init();
    let result = match cli.command {
        Command::Mount(args) => mount::cmd_mount(args, &argv[1..]),
        Command::Umount(args) => umount::cmd_umount(args),
        Command::Status(args) => cmd_status(args),
        Command::Stats(args) => cmd_stats(args),
        Command::Fsck(args) => return cmd_fsck(args),
        Command::Gc(args) => gc::cmd_gc(args),
        Command::Salvage(args) => return cmd_salvage(args),
        Command::Unroot(args) => cmd_unroot(args),
        Command::Commit(args) => snap::cmd_commit(args),
        Command::Log(args) => snap::cmd_log(args),
        Command::Diff(args) => snap::cmd_diff(args),
        Command::Branch(args) => branch::cmd_branch(args),
        Command::Fork(args) => branch::cmd_fork(args),
        Command::Remote(args) => remote::cmd_remote(args),
        Command::Push(args) => remote::cmd_push(args),
        Command::Pull(args) => remote::cmd_pull(args),
        Command::Clone(args) => remote::cmd_clone(args),
        Command::Restore(args) => snap::cmd_restore(args),
        Command::Exec(args) => {
            return match ringfs::exec_cli::cmd_exec(args) {
                Ok(code) => code,
                Err(e) => {
                    let code = ringfs::exec_cli::failure_code(&e);
                    fail(e, "ringfs exec", code)
                }
            }
        }
        Command::Install(args) => install::cmd_install(args),
        Command::Completions(args) => install::cmd_completions(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // mount(8)'s code for a failed mount.
        Err(e) if as_helper => fail(e, "mount.fuse.ringfs", 32),
        Err(e) => fail(e, "ringfs", 1),
    }
}

/// How long a client waits for a daemon whose mount is visible but whose
/// control socket is not bound yet (it is still negotiating transports).
const STARTING_DAEMON_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Send `req` to the daemon serving the absolute path `mp`. A ringfs mount
/// without a socket may belong to a daemon still starting: retry for up to
/// [`STARTING_DAEMON_WAIT`] before giving up.
pub(crate) fn call_daemon(mp: &std::path::Path, req: &control::Request) -> Result<serde_json::Value> {
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

/// Ask the daemon serving `mountpoint` a question, explaining a dead mount
/// or a path that is no ringfs mount.
pub(crate) fn ask(mountpoint: &std::path::Path, req: control::Request) -> Result<serde_json::Value> {
    let mp = mountpoint::resolve(mountpoint)?;
    if !mountpoint::is_ringfs_mount(&mp)? && !control::socket_path(&mp).exists() {
        return Err(umount::not_a_mount(&mp));
    }
    match call_daemon(&mp, &req) {
        Ok(v) => Ok(v),
        Err(e) => {
            if mountpoint::is_ringfs_mount(&mp)? {
                let (msg, hint) = (format!("{} is a ringfs mount but no daemon answers (killed?)", mp.display()), format!("run `ringfs umount {}`", mp.display()));
                return Err(ringfs::errors::failure(ringfs::errors::ErrorKind::NoDaemon, msg, Some(hint)));
            }
            // A control socket left behind by a daemon that is gone.
            tracing::debug!("{e:#}");
            Err(umount::not_a_mount(&mp))
        }
    }
}

/// `ringfs stats`.
fn cmd_stats(args: StatsArgs) -> Result<()> {
    let stats = ask(&args.mountpoint, control::Request::Stats)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else if args.prometheus {
        print!("{}", mount_text::format_prometheus(&stats));
    } else {
        print!("{}", mount_text::format_stats(&stats));
    }
    Ok(())
}

/// `ringfs unroot PATH`: asks the daemon of the ringfs mount that holds PATH.
fn cmd_unroot(args: UnrootArgs) -> Result<()> {
    let path = mountpoint::resolve(&args.path)?;
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
        print!("{}", mount_text::format_status(&status));
    }
    Ok(())
}

/// `ringfs fsck`: 0 clean, 1 damaged (a report of what and where), 2 could
/// not check (no store there, or held by a running daemon).
fn cmd_fsck(args: FsckArgs) -> ExitCode {
    // Nothing is created in a directory that holds no store.
    let d = &args.store;
    let refuse = plan::not_a_store("--store", d);
    if let Some(msg) = refuse {
        eprintln!("ringfs: fsck: {msg}");
        return ExitCode::from(2);
    }
    let opts = fs_core::FsckOptions { full: args.full };
    match fs_core::fsck_store(&args.store, opts).map_err(|e| plan::explain_store_error(e, "--store")) {
        Ok(report) => {
            print!("{report}");
            if report.is_clean() {
                ExitCode::SUCCESS
            } else if report.problems.iter().all(|p| p.place.starts_with("wc/") || p.place == "packs" || p.place == "permissions") {
                // Each names its own fix (a working copy: the stored bytes
                // are intact; the pack directory and a store others can
                // read: its line says what to do).
                ExitCode::from(1)
            } else {
                println!(
                    "to rebuild the workspace from what survives: ringfs salvage --store {} --to NEWDIR (this store is left as it is)",
                    args.store.display()
                );
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("ringfs: fsck {}: {e:#}", args.store.display());
            ExitCode::from(2)
        }
    }
}

/// `ringfs salvage`: 0 everything named recovered, 1 some files lost (the
/// report lists them), 2 nothing built (refused or failed).
fn cmd_salvage(args: SalvageArgs) -> ExitCode {
    let (d, to) = (&args.store, &args.to);
    let refuse = if let Some(m) = plan::not_a_store("--store", d) {
        Some(m)
    } else if to.exists() && !to.is_dir() {
        Some(format!("--to {} exists and is not a directory: give a new directory for the rebuilt store", to.display()))
    } else if std::fs::read_dir(to).map(|mut r| r.next().is_some()).unwrap_or(false) {
        Some(format!("--to {} is not empty: give a new (or empty) directory for the rebuilt store", to.display()))
    } else {
        match (d.canonicalize(), to.parent().and_then(|p| p.canonicalize().ok())) {
            (Ok(dc), Some(tp)) if tp.starts_with(&dc) => {
                Some(format!("--to {} is inside the damaged store {}: give a directory outside it", to.display(), d.display()))
            }
            _ => None,
        }
    };
    if let Some(msg) = refuse {
        eprintln!("ringfs: salvage: {msg}");
        return ExitCode::from(2);
    }
    // Errors about the new store name --to, the rest --store.
    let flag_of = |e: &fs_core::StoreError| match e {
        fs_core::StoreError::Io { path, .. } | fs_core::StoreError::Corrupt { path, .. } | fs_core::StoreError::Locked { path, .. } if path.starts_with(to) => "--to",
        _ => "--store",
    };
    match fs_core::salvage(d, to).map_err(|e| {
        let flag = flag_of(&e);
        plan::explain_store_error(e, flag)
    }) {
        Ok(report) => {
            print!("{report}");
            let mount = format!("mount it with `ringfs mount MOUNTPOINT --store {}`; {} is left as it is", to.display(), d.display());
            if report.complete() {
                println!("salvaged into {}: {mount}", to.display());
                ExitCode::SUCCESS
            } else {
                println!("salvaged into {} with {} files not recovered whole (listed above): {mount}", to.display(), report.lost.len());
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("ringfs: salvage {}: {e:#}", d.display());
            ExitCode::from(2)
        }
    }
}
