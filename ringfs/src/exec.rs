//! `ringfs exec`: one command run with its working directory in a
//! workspace, and a receipt of what it changed and cost (docs/SEMANTICS.md
//! "exec receipts", docs/DECISIONS.md D40).
//!
//! The call: (with `--checkpoint`, a commit), an exec point taken and
//! pinned by the daemon (`exec_begin` on the control socket: the live tree
//! settled and written as snapshot objects without moving a branch), the
//! command (directly, or in a sandbox: [`crate::sandbox`]), a second point
//! (`exec_end`, durable when anything changed) and its diff against the
//! first, (with `--commit`, a commit). Both requests carry the daemon's
//! stats document, whose difference is the receipt's request counts and
//! bytes. Every step costs what the call changed, not the tree's size.
//!
//! Library form: [`exec`] with [`ExecOptions`] returns the [`Receipt`];
//! `ringfs exec` is [`crate::exec_cli::cmd_exec`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::control::{self, Request};
use crate::errors::{self, ErrorKind};
use crate::run::{self, Output, RunResult};
use crate::sandbox::{SandboxInfo, SandboxOptions};

/// Returns a usage error ([`ErrorKind::Usage`]) saying the formatted text.
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(errors::failure(ErrorKind::Usage, format!($($t)*), None))
    };
}

/// What [`exec`] runs and how.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    /// The mountpoint of a ringfs mount (its daemon answers the control socket).
    pub mountpoint: PathBuf,
    /// The working directory: relative to the mountpoint, or an absolute
    /// path inside it; `None` is the mountpoint itself.
    pub cwd: Option<PathBuf>,
    /// The command and its arguments, passed to execve directly (no shell;
    /// the program is looked up in `PATH` when it has no `/`).
    pub argv: Vec<OsString>,
    /// `None`: stdout and stderr go to the caller's (streamed). `Some(n)`:
    /// both are captured into the receipt, at most `n` bytes each (the
    /// rest is read and counted as cut).
    pub capture: Option<u64>,
    /// Make a commit after the call with this message (`--commit -m`).
    pub commit: Option<String>,
    /// Make a commit before the call (`--checkpoint`), so that `ringfs
    /// restore MOUNTPOINT ID` undoes the call.
    pub checkpoint: bool,
    /// Kill the command (and everything it started) after this long.
    pub timeout: Option<Duration>,
    /// Run in a sandbox ([`crate::sandbox`]).
    pub sandbox: Option<SandboxOptions>,
}

/// Output captured from the command: its first `limit` bytes (as text,
/// invalid UTF-8 replaced), the total it wrote, and how many bytes were cut.
/// When the kept bytes are not valid UTF-8, `text_b64` holds them exactly
/// (docs/FORMATS.md "Path names in JSON": the same rule as `path_b64`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Captured {
    pub text: String,
    /// Only when the kept bytes are not valid UTF-8: their exact bytes in
    /// standard base64 (RFC 4648, with padding).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_b64: Option<String>,
    /// The bytes kept, as written (`text` is their lossy UTF-8).
    #[serde(skip)]
    pub raw: Vec<u8>,
    pub bytes: u64,
    pub cut: u64,
}

/// One side of a changed path: kind (`file`, `dir`, `symlink`, …), mode
/// (octal text) and size in bytes.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PathSide {
    pub kind: String,
    pub mode: String,
    pub size: u64,
}

/// A path's JSON fields (docs/FORMATS.md "Path names in JSON"): `path`,
/// its text (bytes that are not UTF-8 replaced by U+FFFD), and only when
/// the name is not UTF-8, `path_b64`, its exact bytes in standard base64
/// (with padding). The workspace root is `""`.
pub fn path_fields(p: &[u8]) -> (String, Option<String>) {
    use base64::Engine;
    match std::str::from_utf8(p) {
        Ok(t) => (t.to_string(), None),
        Err(_) => (
            String::from_utf8_lossy(p).into_owned(),
            Some(base64::engine::general_purpose::STANDARD.encode(p)),
        ),
    }
}

/// The exact bytes of a path given as [`path_fields`] writes it.
pub fn path_bytes(path: &str, path_b64: Option<&str>) -> Vec<u8> {
    use base64::Engine;
    path_b64
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .unwrap_or_else(|| path.as_bytes().to_vec())
}

/// A changed path (relative to the workspace root, `""` for the root
/// itself): `added`, `modified` or `removed`, with its old and new side.
/// `path_b64` is present only for a name that is not UTF-8
/// ([`path_fields`]; [`PathChange::bytes`] gives the exact bytes).
#[derive(Clone, Debug, Serialize)]
pub struct PathChange {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    pub change: String,
    pub old: Option<PathSide>,
    pub new: Option<PathSide>,
}

impl PathChange {
    /// The path's exact bytes.
    pub fn bytes(&self) -> Vec<u8> {
        path_bytes(&self.path, self.path_b64.as_deref())
    }
}

/// A changed local-only path: `changed` (created or written: content,
/// mode, owner or xattrs) or `removed` (it was there when the call
/// began). One created and removed during the call is not listed.
/// `path_b64` as in [`PathChange`].
#[derive(Clone, Debug, Serialize)]
pub struct LocalChange {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    pub change: String,
}

impl LocalChange {
    /// The path's exact bytes.
    pub fn bytes(&self) -> Vec<u8> {
        path_bytes(&self.path, self.path_b64.as_deref())
    }
}

/// Times of the call, in milliseconds: `wall` of the whole call (as the
/// caller sees it), `command` (from starting the command to its exit,
/// measured next to it), `overhead` = wall − command; `begin` and `end`
/// the daemon's two exec points, `checkpoint` and `commit` the commits;
/// user and system CPU of the command (and what it waited for).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Times {
    pub wall_ms: f64,
    pub command_ms: f64,
    pub overhead_ms: f64,
    pub checkpoint_ms: f64,
    pub begin_ms: f64,
    pub end_ms: f64,
    pub commit_ms: f64,
    pub user_cpu_ms: f64,
    pub system_cpu_ms: f64,
}

/// The daemon's requests during the call: FUSE requests by opcode (those
/// that moved), their total, and bytes to and from the daemon.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Requests {
    pub total: u64,
    pub by_opcode: BTreeMap<String, u64>,
    pub bytes_to_daemon: u64,
    pub bytes_from_daemon: u64,
}

/// The synced paths the call changed (against the exec point before it),
/// with counts, and file content stored during the call: bytes newly
/// written to the store's packs and bytes the store already had.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Changes {
    pub added: u64,
    pub modified: u64,
    pub removed: u64,
    pub paths: Vec<PathChange>,
    pub bytes_new: u64,
    pub bytes_reused: u64,
}

/// Whether the call's changes are safe: `local` is true when every change
/// to a synced path is durable in the local store (local-only paths are
/// never stored); `remote` is one line: `no remote` on a mount without
/// `--remote`, else what is on the remote and what is pending, whose
/// figures are in `sync` ([`crate::exec_sync`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Durability {
    pub local: bool,
    pub remote: String,
    pub sync: Option<crate::exec_sync::RemoteSync>,
}

/// The receipt of one call. `exit_code` is the command's status as a shell
/// gives it (128+N for a signal N; 137 after `timeout`), `signal` the
/// signal that ended it. `orphans` counts processes the command left
/// running, killed when it exited: its process group, and processes that
/// left it but carry its `RINGFS_EXEC_CALL` (a sandbox's are killed with
/// it); after `--timeout`, also the processes of its group the timeout
/// killed beside the command (not counted inside a sandbox, whose whole
/// PID namespace ends).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Receipt {
    pub command: Vec<String>,
    pub cwd: String,
    pub mountpoint: String,
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub orphans: u64,
    pub sandbox: bool,
    /// With `--sandbox`: its user and how its limits were enforced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox_detail: Option<SandboxInfo>,
    pub time: Times,
    pub peak_rss_kib: u64,
    pub requests: Requests,
    pub changes: Changes,
    pub local_only: Vec<LocalChange>,
    pub durability: Durability,
    pub checkpoint: Option<String>,
    pub commit: Option<String>,
    /// With `--commit`: why the commit after the command failed (the
    /// command ran and the receipt stands; `commit` is then `None`).
    pub commit_error: Option<String>,
    pub stdout: Option<Captured>,
    pub stderr: Option<Captured>,
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Is `mp` a FUSE mount now (from /proc/self/mountinfo)?
fn is_fuse_mount(mp: &Path) -> bool {
    let want = mp.to_string_lossy().replace(' ', "\\040");
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|t| {
        t.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let fstype = f.iter().position(|x| *x == "-").and_then(|i| f.get(i + 1));
            f.get(4) == Some(&want.as_str()) && fstype.is_some_and(|t| t.starts_with("fuse"))
        })
    })
}

/// One control request; a `refused` reply is an error naming why. A mount
/// whose control socket is not bound yet belongs to a daemon still
/// starting: retried for up to 15 s, as the other commands do.
fn ask(mp: &Path, req: &Request) -> Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let v = loop {
        match control::call(mp, req) {
            Ok(v) => break v,
            // (Up to 2 s even when mountinfo does not show the mount yet.)
            Err(_) if !control::socket_path(mp).exists() && Instant::now() < deadline && (is_fuse_mount(mp) || deadline - Instant::now() > Duration::from_secs(13)) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                let msg = format!("{} is not a ringfs mount, or its daemon does not answer: {e:#}", mp.display());
                let hint = "give the mountpoint of a running `ringfs mount` (findmnt -t fuse.ringfs lists them)";
                return Err(errors::failure(ErrorKind::NotAMount, msg, Some(hint.into())));
            }
        }
    };
    if let Some(why) = v.get("refused").and_then(|x| x.as_str()) {
        bail!("{why}");
    }
    Ok(v)
}

/// The working directory for `cwd` on mountpoint `mp` (canonical), which
/// must exist and be inside the workspace. Errors name the fix.
fn resolve_cwd(mp: &Path, cwd: Option<&Path>) -> Result<PathBuf> {
    let Some(c) = cwd else {
        return Ok(mp.to_path_buf());
    };
    let joined = if c.is_absolute() {
        c.to_path_buf()
    } else {
        mp.join(c)
    };
    let real = joined
        .canonicalize()
        .with_context(|| format!("--cwd {}: no such directory in the workspace", c.display()))
        .map_err(|e| errors::tagged(ErrorKind::NotFound, e))?;
    if !real.starts_with(mp) {
        usage!(
            "--cwd {} is outside the workspace {} (resolves to {}): give a directory inside it",
            c.display(),
            mp.display(),
            real.display()
        );
    }
    if !real.is_dir() {
        usage!("--cwd {} is not a directory", c.display());
    }
    Ok(real)
}

fn commit(mp: &Path, message: &str) -> Result<String> {
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| format!("uid{}", rustix::process::getuid().as_raw()));
    let v = ask(
        mp,
        &Request::Commit {
            message: message.to_string(),
            author: format!("{user}@ringfs-exec"),
            allow_empty: false,
        },
    )?;
    Ok(v.get("id")
        .and_then(|x| x.as_str())
        .unwrap_or_default()
        .to_string())
}

fn shown(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Runs one command in the workspace at `opts.mountpoint` and returns its
/// receipt (see [`Receipt`]; docs/SEMANTICS.md "exec receipts").
///
/// The command runs directly (no shell) with stdin inherited; its stdout
/// and stderr are streamed to the caller's, or captured with
/// `opts.capture`. Processes it leaves behind are killed when it exits
/// (they would change the workspace after the receipt was written). This
/// makes the calling process a child subreaper (`PR_SET_CHILD_SUBREAPER`)
/// and waits for its own child only.
///
/// Errors (nothing was run unless said): the mountpoint is no ringfs mount
/// or its daemon does not answer; `--cwd` outside the workspace; the
/// program cannot be found or executed (not run); a sandbox that cannot
/// be set up (not run); the daemon failing the exec points or commits
/// (the command may have run: the error says so).
pub fn exec(opts: &ExecOptions) -> Result<Receipt> {
    let t0 = Instant::now();
    if opts.argv.is_empty() {
        usage!("no command given: ringfs exec MOUNTPOINT -- CMD [ARGS…]");
    }
    let mp = opts
        .mountpoint
        .canonicalize()
        .with_context(|| format!("mountpoint {}", opts.mountpoint.display()))
        .map_err(|e| errors::tagged(ErrorKind::NotAMount, e))?;
    let cwd = resolve_cwd(&mp, opts.cwd.as_deref())?;
    // The sandbox is prepared (user, limits, root, filter) before the
    // workspace is touched: a refusal leaves nothing behind.
    let prepared = match &opts.sandbox {
        Some(s) => Some(crate::sandbox::prepare(s, &mp, &cwd).map_err(|e| errors::tagged(ErrorKind::NotRun, e))?),
        None => None,
    };
    let program = match &prepared {
        Some(p) => crate::sandbox::find_program(p, &opts.argv[0], &cwd)?,
        None => run::find_program(&opts.argv[0], &cwd)?,
    };
    let mut r = Receipt {
        command: shown(&opts.argv),
        cwd: cwd
            .strip_prefix(&mp)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        mountpoint: mp.to_string_lossy().into_owned(),
        sandbox: opts.sandbox.is_some(),
        sandbox_detail: prepared.as_ref().map(|p| p.info.clone()),
        ..Default::default()
    };
    if opts.checkpoint {
        let t = Instant::now();
        let args: Vec<String> = r.command.clone();
        r.checkpoint = Some(commit(
            &mp,
            &format!("checkpoint before ringfs exec: {}", args.join(" ")),
        )?);
        r.time.checkpoint_ms = ms(t.elapsed());
    }
    let t = Instant::now();
    let begin = ask(&mp, &Request::ExecBegin)?;
    r.time.begin_ms = ms(t.elapsed());
    let token = begin
        .get("token")
        .and_then(|x| x.as_u64())
        .context("exec_begin reply without a token")?;
    let output = match opts.capture {
        Some(n) => Output::Capture(n),
        None => Output::Inherit,
    };
    let ran: Result<RunResult> = match &prepared {
        Some(p) => crate::sandbox::run(p, &program, &opts.argv, &cwd, output, opts.timeout),
        None => run::run(&program, &opts.argv, &cwd, output, opts.timeout),
    };
    let ran = match ran {
        Ok(x) => x,
        Err(e) => {
            let _ = control::call(&mp, &Request::ExecRelease { token });
            return Err(e);
        }
    };
    let t = Instant::now();
    let end = ask(
        &mp,
        &Request::ExecEnd {
            token,
            durable: true,
        },
    )
    .context("the command ran, but the daemon could not say what it changed")?;
    r.time.end_ms = ms(t.elapsed());
    if let Some(m) = &opts.commit {
        let t = Instant::now();
        let msg = if m.is_empty() {
            format!("ringfs exec: {}", r.command.join(" "))
        } else {
            m.clone()
        };
        // The receipt still answers when the commit fails ("head moved",
        // say): what the command changed and its exit code are not lost.
        match commit(&mp, &msg) {
            Ok(id) => r.commit = Some(id),
            Err(e) => r.commit_error = Some(format!("the command ran, but the commit after it failed: {e:#}")),
        }
        r.time.commit_ms = ms(t.elapsed());
    }
    fill(&mut r, &ran, &begin, &end);
    // On a `mount --remote`: what is pushed and pending, after the commit.
    let changed = r.changes.added + r.changes.modified + r.changes.removed > 0 && r.commit.is_none();
    if let Some((line, sync)) = crate::exec_sync::remote_state(&mp, &end["stats"]["sync"], changed) {
        (r.durability.remote, r.durability.sync) = (line, sync);
    }
    r.time.wall_ms = ms(t0.elapsed());
    r.time.overhead_ms = ((r.time.wall_ms - r.time.command_ms) * 1e3).round() / 1e3;
    Ok(r)
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for k in path {
        x = &x[*k];
    }
    x.as_u64().unwrap_or(0)
}

/// The receipt's fields from the run and the daemon's two replies.
fn fill(r: &mut Receipt, ran: &RunResult, begin: &Value, end: &Value) {
    r.exit_code = ran.exit_code;
    r.signal = ran.signal;
    r.timed_out = ran.timed_out;
    r.orphans = ran.orphans;
    r.time.command_ms = ms(ran.command);
    r.time.user_cpu_ms = ms(ran.user);
    r.time.system_cpu_ms = ms(ran.system);
    r.peak_rss_kib = ran.max_rss_kib;
    r.stdout = ran.stdout.clone();
    r.stderr = ran.stderr.clone();
    let (a, b) = (&begin["stats"], &end["stats"]);
    let mut req = Requests {
        bytes_to_daemon: u(b, &["bytes_to_daemon"]).saturating_sub(u(a, &["bytes_to_daemon"])),
        bytes_from_daemon: u(b, &["bytes_from_daemon"])
            .saturating_sub(u(a, &["bytes_from_daemon"])),
        ..Default::default()
    };
    if let Some(ops) = b["requests"].as_object() {
        for (name, v) in ops {
            let n = v["count"]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(a["requests"][name]["count"].as_u64().unwrap_or(0));
            if n > 0 {
                req.by_opcode.insert(name.clone(), n);
                req.total += n;
            }
        }
    }
    r.requests = req;
    let side = |s: &Value| -> Option<PathSide> {
        s.is_object().then(|| PathSide {
            kind: s["kind"].as_str().unwrap_or("").to_string(),
            mode: s["mode"].as_str().unwrap_or("").to_string(),
            size: s["size"].as_u64().unwrap_or(0),
        })
    };
    let mut ch = Changes {
        bytes_new: u(b, &["store", "content_new"]).saturating_sub(u(a, &["store", "content_new"])),
        bytes_reused: u(b, &["store", "content_reused"])
            .saturating_sub(u(a, &["store", "content_reused"])),
        ..Default::default()
    };
    for c in end["changes"]
        .as_array()
        .map(|x| x.as_slice())
        .unwrap_or(&[])
    {
        let change = c["change"].as_str().unwrap_or("").to_string();
        match change.as_str() {
            "added" => ch.added += 1,
            "removed" => ch.removed += 1,
            _ => ch.modified += 1,
        }
        ch.paths.push(PathChange {
            path: c["path"].as_str().unwrap_or("").to_string(),
            path_b64: c["path_b64"].as_str().map(str::to_string),
            change,
            old: side(&c["old"]),
            new: side(&c["new"]),
        });
    }
    r.changes = ch;
    r.local_only = end["local_only"]
        .as_array()
        .map(|x| x.as_slice())
        .unwrap_or(&[])
        .iter()
        .map(|c| LocalChange {
            path: c["path"].as_str().unwrap_or("").to_string(),
            path_b64: c["path_b64"].as_str().map(str::to_string),
            change: c["change"].as_str().unwrap_or("").to_string(),
        })
        .collect();
    r.durability = Durability {
        local: end["durable"].as_bool().unwrap_or(false),
        remote: "no remote".into(),
        sync: None,
    };
}

/// Sets `path` (and `path_b64` when not UTF-8) of JSON object `d`.
pub fn put_path(d: &mut Value, p: &[u8]) {
    let (path, b64) = path_fields(p);
    d["path"] = json!(path);
    if let Some(b) = b64 {
        d["path_b64"] = json!(b);
    }
}

/// The daemon's answer to `exec_begin`, `exec_end` and `exec_release`;
/// `stats` builds the stats document (taken after the exec point, so the
/// content stored by settling counts in the call that changed it).
pub fn answer(fs: &fs_core::Fs, req: &Request, stats: impl Fn() -> Value) -> Value {
    match req {
        Request::ExecBegin => match fs.exec_begin() {
            Ok((token, p)) => {
                json!({ "token": token, "position": p.pos, "records": p.records, "local_mark": p.local_mark, "stats": stats() })
            }
            Err(e) => json!({ "refused": e.to_string() }),
        },
        Request::ExecEnd { token, durable } => match fs.exec_end(*token, *durable) {
            Ok(e) => {
                let side = |s: &Option<fs_core::snap::diff::Side>| {
                    s.map(|s| json!({ "kind": s.kind.name(), "mode": format!("{:04o}", s.mode), "size": s.size }))
                };
                json!({
                    "position": e.point.pos,
                    "records": e.point.records,
                    "objects_new": e.point.objects_new,
                    // Durable: written durably, or nothing changed to write.
                    "durable": e.point.durable || e.point.records == 0,
                    "changes": e.changes.iter().map(|c| {
                        let mut d = json!({
                            "change": c.kind.name(),
                            "old": side(&c.old),
                            "new": side(&c.new),
                        });
                        put_path(&mut d, &c.path);
                        d
                    }).collect::<Vec<_>>(),
                    "local_only": e.local.iter().map(|(path, there)| {
                        let mut d = json!({ "change": if *there { "changed" } else { "removed" } });
                        put_path(&mut d, path);
                        d
                    }).collect::<Vec<_>>(),
                    "phases_ms": e.phases.iter().map(|(k, d)| (k.to_string(), json!(ms(*d)))).collect::<serde_json::Map<String, Value>>(),
                    "stats": stats(),
                })
            }
            Err(e) => json!({ "refused": e.to_string() }),
        },
        Request::ExecRelease { token } => json!({ "released": fs.exec_release(*token) }),
        _ => json!({ "refused": "not an exec request" }),
    }
}

/// A receipt path as the human receipt shows it: the root (`""`) as `.`.
pub(crate) fn shown_path(p: &str) -> &str {
    if p.is_empty() {
        "."
    } else {
        p
    }
}

fn size_text(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// The human receipt (what `ringfs exec` prints on stderr).
pub fn human(r: &Receipt) -> String {
    let mut o = String::new();
    let t = &r.time;
    let how = match (r.timed_out, r.signal) {
        (true, _) => format!("killed after the timeout (exit {})", r.exit_code),
        (false, Some(s)) => format!("killed by signal {s} (exit {})", r.exit_code),
        _ => format!("exit {}", r.exit_code),
    };
    o += &format!(
        "ringfs exec: {how}; wall {} ms = command {} ms + overhead {} ms; cpu user {} ms, system {} ms; peak rss {}\n",
        t.wall_ms,
        t.command_ms,
        t.overhead_ms,
        t.user_cpu_ms,
        t.system_cpu_ms,
        size_text(r.peak_rss_kib * 1024)
    );
    if let Some(d) = &r.sandbox_detail {
        let who = d.user.clone().unwrap_or_else(|| d.uid.to_string());
        o += &format!("  sandbox: as {who} (uid {}, gid {}; {})
", d.uid, d.gid, d.user_from);
        for line in [&d.note, &d.memory_limit, &d.pids_limit].into_iter().flatten() {
            o += &format!("    {line}
");
        }
    }
    let ops: Vec<String> = r
        .requests
        .by_opcode
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    o += &format!(
        "  requests: {}{}; {} to / {} from the daemon\n",
        r.requests.total,
        if ops.is_empty() {
            String::new()
        } else {
            format!(" ({})", ops.join(", "))
        },
        size_text(r.requests.bytes_to_daemon),
        size_text(r.requests.bytes_from_daemon)
    );
    let c = &r.changes;
    o += &format!(
        "  changed: {} added, {} modified, {} removed; content stored {} new, {} reused\n",
        c.added,
        c.modified,
        c.removed,
        size_text(c.bytes_new),
        size_text(c.bytes_reused)
    );
    // Kind and size; the mode too when it changed.
    let sz = |s: &Option<PathSide>, mode: bool| {
        s.as_ref()
            .map(|s| {
                if mode {
                    format!("{} {} mode {}", s.kind, s.size, s.mode)
                } else {
                    format!("{} {}", s.kind, s.size)
                }
            })
            .unwrap_or_default()
    };
    for p in c.paths.iter().take(20) {
        let name = shown_path(&p.path);
        match p.change.as_str() {
            "added" => o += &format!("    A  {name}  ({})\n", sz(&p.new, false)),
            "removed" => o += &format!("    D  {name}  ({})\n", sz(&p.old, false)),
            _ => {
                let mode = p.old.as_ref().map(|s| &s.mode) != p.new.as_ref().map(|s| &s.mode);
                o += &format!("    M  {name}  ({} -> {})\n", sz(&p.old, mode), sz(&p.new, mode))
            }
        }
    }
    if c.paths.len() > 20 {
        o += &format!(
            "    … {} more (--json lists them all)\n",
            c.paths.len() - 20
        );
    }
    if !r.local_only.is_empty() {
        let shown: Vec<String> = r
            .local_only
            .iter()
            .take(5)
            .map(|l| {
                if l.change == "removed" {
                    format!("{} removed", l.path)
                } else {
                    l.path.clone()
                }
            })
            .collect();
        o += &format!(
            "  local-only (not stored): {} changed ({}{})\n",
            r.local_only.len(),
            shown.join(", "),
            if r.local_only.len() > 5 { ", …" } else { "" }
        );
    }
    o += &format!(
        "  durable: {} in the local store; {}\n",
        if r.durability.local {
            "yes, every change"
        } else {
            "NOT yet"
        },
        r.durability.remote
    );
    if r.orphans > 0 {
        o += &format!(
            "  orphans: {} process{} left running, killed when the command exited\n",
            r.orphans,
            if r.orphans == 1 { "" } else { "es" }
        );
    }
    for (name, cap) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
        if let Some(c) = cap {
            if c.cut > 0 {
                o += &format!(
                    "  {name}: {} bytes written, {} cut (over --output-limit)\n",
                    c.bytes, c.cut
                );
            }
        }
    }
    if let Some(id) = &r.checkpoint {
        o += &format!(
            "  checkpoint: {id} (undo the call: ringfs restore {} {})\n",
            r.mountpoint,
            &id[..id.len().min(12)]
        );
    }
    if let Some(id) = &r.commit {
        o += &format!("  commit: {id}\n");
    }
    if let Some(e) = &r.commit_error {
        o += &format!("  commit: FAILED: {e}\n");
    }
    o
}
