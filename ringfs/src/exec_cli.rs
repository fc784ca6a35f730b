//! `ringfs exec`'s command line: its flags ([`ExecArgs`]) and the adapter
//! from them to [`crate::exec::exec`] and back to an exit status and the
//! printed receipt (JSON on stdout, or the human receipt on stderr).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use crate::errors::{self, ErrorKind};
use crate::exec::{exec, human, ExecOptions};
use crate::run;
use crate::sandbox::{BindSpec, SandboxOptions};

/// `ringfs exec`'s flags.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The mountpoint a `ringfs mount` serves.
    pub mountpoint: PathBuf,
    /// Working directory of the command, inside the workspace (relative to
    /// MOUNTPOINT, or absolute below it). Default: MOUNTPOINT.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Print the receipt as JSON on stdout (the command's stdout and stderr
    /// are then captured into it, bounded by --output-limit, default 1 MiB).
    #[arg(long)]
    pub json: bool,
    /// Capture stdout and stderr into the receipt, at most BYTES each
    /// (what is cut is counted), instead of streaming them through.
    #[arg(long, value_name = "BYTES")]
    pub output_limit: Option<u64>,
    /// Commit the workspace after the call (the commit id is in the receipt).
    #[arg(long)]
    pub commit: bool,
    /// The message of the --commit commit.
    #[arg(short, long, value_name = "MSG", requires = "commit")]
    pub message: Option<String>,
    /// Commit before the call, so `ringfs restore MOUNTPOINT ID` undoes it
    /// exactly (files the call created are removed).
    #[arg(long)]
    pub checkpoint: bool,
    /// Kill the command and everything it started after SECONDS (exit 137).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Run in fresh mount, PID, IPC, UTS and network namespaces, without
    /// capabilities, as an unprivileged user; the workspace is the only
    /// writable tree, as its permissions allow that user (a workspace owned
    /// by root is not writable by nobody: see --user); the environment is
    /// only PATH, TERM, TZ, LANG*, LC_*
    /// and HOME=/tmp (pass more with `-- env NAME=VALUE CMD`)
    /// (docs/SEMANTICS.md "ringfs exec receipts").
    #[arg(long)]
    pub sandbox: bool,
    /// With --sandbox: the user to run as (name or uid; not root). Default:
    /// the owner of the workspace root, or nobody when that is root (nobody
    /// writes only what the workspace lets others write: chown the
    /// workspace to its user, or give --user).
    #[arg(long, value_name = "USER", requires = "sandbox")]
    pub user: Option<String>,
    /// With --sandbox: memory limit (bytes, or with K/M/G): cgroup v2, else
    /// cgroup v1, else RLIMIT_AS per process (the receipt says which).
    #[arg(long, value_name = "SIZE", requires = "sandbox")]
    pub memory: Option<String>,
    /// With --sandbox: limit on processes: cgroup v2, else cgroup v1, else
    /// RLIMIT_NPROC of the user host-wide (the receipt says which).
    #[arg(long, value_name = "N", requires = "sandbox")]
    pub pids: Option<u64>,
    /// With --sandbox: show the host's SRC read-write at DST (default: the
    /// same path) in the sandbox, which otherwise sees only /usr, /bin,
    /// /sbin, /lib*, /etc (read-only), a fresh /tmp, /dev and /proc, and
    /// the workspace. Repeatable.
    #[arg(long, value_name = "SRC[:DST]", requires = "sandbox")]
    pub bind: Vec<String>,
    /// With --sandbox: show the host's SRC read-only at DST (default: the
    /// same path). Repeatable.
    #[arg(long, value_name = "SRC[:DST]", requires = "sandbox")]
    pub ro_bind: Vec<String>,
    /// With --sandbox: pass this open descriptor (above 2) on to the
    /// command; every other one but 0, 1 and 2 is closed. Repeatable.
    #[arg(long, value_name = "FD", requires = "sandbox")]
    pub keep_fd: Vec<i32>,
    /// With --sandbox: allow user namespaces (unshare/clone with
    /// CLONE_NEWUSER, clone3), refused by default (docs/SECURITY.md).
    #[arg(long, requires = "sandbox")]
    pub allow_userns: bool,
    /// With --sandbox: allow io_uring (io_uring_setup, _enter, _register),
    /// refused by default (docs/SECURITY.md).
    #[arg(long, requires = "sandbox")]
    pub allow_io_uring: bool,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}


fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mul) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| errors::failure(ErrorKind::Usage, format!("--memory {s}: give bytes, or a number with K, M or G"), None))?;
    Ok(n * mul)
}

/// `ringfs exec`: exits with the command's status. A failure of ringfs
/// is returned, for `main` to report (text, or with `--json` the error
/// document: [`crate::errors`]) with [`failure_code`].
pub fn cmd_exec(args: ExecArgs) -> Result<ExitCode> {
    cmd_exec_inner(args).map(|code| ExitCode::from(code as u8))
}

/// The exit status of a failed `ringfs exec`: 127 for a command not found,
/// 126 for one that cannot be executed, else 125 (ringfs itself failed
/// before or after it, as `env`/`timeout` do).
pub fn failure_code(e: &anyhow::Error) -> u8 {
    e.chain()
        .find_map(|c| c.downcast_ref::<run::NotRun>())
        .map(|n| n.code())
        .unwrap_or(125)
}

fn cmd_exec_inner(args: ExecArgs) -> Result<i32> {
    let timeout = match args.timeout {
        Some(s) if !(s > 0.0 && s.is_finite()) => {
            return Err(errors::failure(ErrorKind::Usage, format!("--timeout {s}: give a positive number of seconds"), None))
        }
        Some(s) => Some(Duration::try_from_secs_f64(s).map_err(|_| {
            errors::failure(ErrorKind::Usage, format!("--timeout {s}: too large (give at most {} seconds)", u64::MAX), None)
        })?),
        None => None,
    };
    let capture = match (args.output_limit, args.json) {
        (Some(n), _) => Some(n),
        (None, true) => Some(1 << 20),
        (None, false) => None,
    };
    let sandbox = if args.sandbox {
        Some(SandboxOptions {
            user: args.user.clone(),
            memory: args.memory.as_deref().map(parse_size).transpose()?,
            pids: args.pids,
            binds: args
                .bind
                .iter()
                .map(|b| BindSpec::parse(b, true))
                .chain(args.ro_bind.iter().map(|b| BindSpec::parse(b, false)))
                .collect::<Result<_>>()?,
            keep_fds: args.keep_fd.clone(),
            allow_userns: args.allow_userns,
            allow_io_uring: args.allow_io_uring,
        })
    } else {
        None
    };
    let opts = ExecOptions {
        mountpoint: args.mountpoint.clone(),
        cwd: args.cwd.clone(),
        argv: args.command.clone(),
        capture,
        commit: args
            .commit
            .then(|| args.message.clone().unwrap_or_default()),
        checkpoint: args.checkpoint,
        timeout,
        sandbox,
    };
    let r = exec(&opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        if let Some(c) = &r.stdout {
            let _ = out.write_all(&c.raw);
        }
        let _ = out.flush();
        if let Some(c) = &r.stderr {
            let _ = std::io::stderr().write_all(&c.raw);
        }
        eprint!("{}", human(&r));
    }
    // A failed --commit is not success: a command that exited 0 gives 125
    // (as a ringfs failure), any other exit code stands.
    if let Some(e) = &r.commit_error {
        if args.json {
            eprintln!("ringfs exec: {e}");
        }
        if r.exit_code == 0 {
            return Ok(125);
        }
    }
    Ok(r.exit_code)
}
