//! The control socket: how `ringfs status` and `ringfs umount` talk to the
//! daemon serving a mountpoint.
//!
//! One Unix stream socket per mount, at `<runtime dir>/<id>.sock`, where the
//! runtime dir is `/run/ringfs` for root (else `$XDG_RUNTIME_DIR/ringfs` or
//! `/tmp/ringfs-<uid>`) and `<id>` is the first 16 hex digits of the BLAKE3
//! hash of the absolute mountpoint path. A client sends one JSON line
//! (`{"cmd":"status"}`, `{"cmd":"stats"}`, `{"cmd":"shutdown"}`, `{"cmd":"gc"}`,
//! `{"cmd":"commit",…}`, `{"cmd":"log"}`, `{"cmd":"diff",…}`,
//! `{"cmd":"restore",…}`, `{"cmd":"exec_begin"}`, `{"cmd":"exec_end",…}`, …) and reads one JSON line back.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Stack of the thread that answers control requests (bytes of address
/// space; pages are used only as deep as a request's recursion goes).
const CONTROL_STACK: usize = 256 << 20;

/// A request on the control socket.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    /// Answer with the status document (see `ringfs status --json`).
    Status,
    /// Answer with the stats document (see `ringfs stats --json`).
    Stats,
    /// Flush, commit and unmount; answered before the unmount starts. On a
    /// `mount --remote`: `no_wait` skips the final push, else it ends
    /// within `wait_secs` (less a margin; default 30 s).
    Shutdown {
        #[serde(default)]
        no_wait: bool,
        #[serde(default)]
        wait_secs: Option<u64>,
    },
    /// Detach the native root at `path` (absolute) and serve it from the daemon.
    Unroot { path: PathBuf },
    /// Compact the pack files (`ringfs gc`); answered with the report.
    Gc,
    /// Make a snapshot commit (`ringfs commit`); answered with its report.
    Commit { message: String, author: String, allow_empty: bool },
    /// The branch's commits (`ringfs log`).
    Log,
    /// A diff (`ringfs diff`): `None` is the default side.
    Diff { from: Option<String>, to: Option<String> },
    /// A branch command (`ringfs branch`): `action` is `list`, `create`
    /// or `delete`.
    Branch { action: String, name: Option<String>, from: Option<String>, force: bool },
    /// A fork of commit `at` (default: the head) into the new store `to` (`ringfs fork`).
    Fork { at: Option<String>, to: PathBuf },
    /// Make the live tree a commit's (`ringfs restore`): `paths` relative
    /// to the workspace root as raw bytes (empty: the whole tree).
    Restore { commit: String, paths: Vec<Vec<u8>> },
    /// Push a branch to a remote (`ringfs push`).
    Push { branch: Option<String>, remote: Option<String> },
    /// The remotes' state (`ringfs remote status`). `local`: from the
    /// store's own record only, without contacting the remote (the remote's
    /// head is the one last seen, `reachable` null): what `ringfs exec`'s
    /// receipt shows on a `mount --remote`.
    RemoteStatus {
        remote: Option<String>,
        #[serde(default)]
        local: bool,
    },
    /// Before a `ringfs exec` command: take and pin an exec point; answered
    /// with its token and the stats document.
    ExecBegin,
    /// After it: the changes since the point of `token` (unpinned), made
    /// durable when `durable`, with the stats document.
    ExecEnd { token: u64, durable: bool },
    /// Drop the pin of an exec point whose call failed.
    ExecRelease { token: u64 },
}

/// The directory holding control sockets.
pub fn runtime_dir() -> PathBuf {
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/run/ringfs");
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(dir).join("ringfs");
    }
    PathBuf::from(format!("/tmp/ringfs-{}", rustix::process::geteuid().as_raw()))
}

/// Creates the runtime directory `dir` ([`runtime_dir`]) with mode 0700,
/// or checks the one there: it must be a directory (not a symlink) of the
/// effective user (`/tmp/ringfs-UID` is a name another user could take
/// first), and loses any group or other bits. The sockets, claims, logs and
/// results in it are its owner's alone (D87): a control socket is reached
/// by its owner (root for `/run/ringfs`) only. Errors: one line naming the
/// directory and the fix.
pub fn make_runtime_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    fs_core::private::create_dir_all(dir).with_context(|| format!("creating the runtime directory {}", dir.display()))?;
    let m = std::fs::symlink_metadata(dir).with_context(|| format!("runtime directory {}", dir.display()))?;
    if !m.is_dir() {
        anyhow::bail!("runtime directory {} is not a directory (a symlink?): remove it, or set XDG_RUNTIME_DIR to a directory of yours", dir.display());
    }
    let me = rustix::process::geteuid().as_raw();
    if m.uid() != me {
        anyhow::bail!(
            "runtime directory {} belongs to uid {}, not to you (uid {me}): another user made it; remove it, or set XDG_RUNTIME_DIR to a directory of yours",
            dir.display(),
            m.uid()
        );
    }
    if m.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).with_context(|| format!("making the runtime directory {} private (0700)", dir.display()))?;
    }
    Ok(())
}

/// The control socket path for an absolute mountpoint path.
pub fn socket_path(mountpoint: &Path) -> PathBuf {
    let hash = blake3::hash(mountpoint.as_os_str().as_bytes());
    runtime_dir().join(format!("{}.sock", &hash.to_hex()[..16]))
}

/// The claim `ringfs mount` takes on a mountpoint ([`crate::mountpoint::Claim`]).
pub fn claim_path(mountpoint: &Path) -> PathBuf {
    socket_path(mountpoint).with_extension("claim")
}

/// Where a daemon leaves the outcome of its final commit for `ringfs umount`
/// ("ok", or the error), next to its socket.
pub fn result_path(mountpoint: &Path) -> PathBuf {
    socket_path(mountpoint).with_extension("result")
}

/// Serves the control socket on a background thread until the process ends.
pub struct Server {
    path: PathBuf,
}

impl Server {
    /// Bind the socket for `mountpoint` (replacing a stale one) and serve it.
    /// `answer` builds the document for a `Status` or `Stats` request;
    /// `shutdown` starts a clean stop after the reply was sent.
    pub fn start(
        mountpoint: &Path,
        answer: Arc<dyn Fn(&Request) -> Value + Send + Sync>,
        shutdown: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<Server> {
        let path = socket_path(mountpoint);
        let dir = path.parent().expect("socket path has a parent");
        make_runtime_dir(dir)?;
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).with_context(|| format!("binding control socket {}", path.display()))?;
        // Its owner's (root's, for /run/ringfs) alone, as its directory (D87).
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).with_context(|| format!("control socket {}", path.display()))?;
        }
        // Commit, diff, restore and push walk the tree recursively, a few
        // KiB of stack per directory level: 2 MiB (the default) overflowed
        // at ~700 levels (D72). 256 MiB of address space, touched only as
        // deep as a tree goes, serves ~80 000 levels.
        std::thread::Builder::new().name("ringfs-control".into()).stack_size(CONTROL_STACK).spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let answer = answer.clone();
                let shutdown = shutdown.clone();
                let _ = serve_one(conn, &*answer, &*shutdown);
            }
        })?;
        Ok(Server { path })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve_one(conn: UnixStream, answer: &dyn Fn(&Request) -> Value, shutdown: &dyn Fn()) -> Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut conn = conn;
    // A panic while answering (redb's on a damaged page: the store turns
    // read-only, `fs_core::StoreDamaged`) refuses the request (`error` is
    // for requests the daemon cannot read); this thread, and so the
    // socket, lives on.
    let answer = |req: &Request| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| answer(req))).unwrap_or_else(panic_reply);
    let reply = match serde_json::from_str::<Request>(line.trim()) {
        Ok(req @ (Request::Status | Request::Stats | Request::Unroot { .. } | Request::Gc | Request::Commit { .. } | Request::Log | Request::Diff { .. } | Request::Branch { .. } | Request::Fork { .. } | Request::Restore { .. } | Request::Push { .. } | Request::RemoteStatus { .. } | Request::ExecBegin | Request::ExecEnd { .. } | Request::ExecRelease { .. })) => answer(&req),
        Ok(req @ Request::Shutdown { .. }) => {
            let mut v = answer(&req);
            if !v.is_object() {
                v = serde_json::json!({});
            }
            v["ok"] = true.into();
            v["pid"] = std::process::id().into();
            v
        }
        Err(e) => serde_json::json!({ "error": format!("bad request: {e}") }),
    };
    // One write of the whole line (Display of a JSON value writes token
    // by token: unbuffered, a big diff was hundreds of thousands of sends).
    let mut out = reply.to_string();
    out.push('\n');
    conn.write_all(out.as_bytes())?;
    conn.flush()?;
    if matches!(serde_json::from_str::<Request>(line.trim()), Ok(Request::Shutdown { .. })) {
        shutdown();
    }
    Ok(())
}

/// The reply to a request whose answer panicked (`p`: the payload): a
/// refusal naming the panic's message.
pub fn panic_reply(p: Box<dyn std::any::Any + Send>) -> Value {
    let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default();
    serde_json::json!({ "refused": format!("the daemon failed while answering: {msg}") })
}

/// Send one request to the daemon serving `mountpoint` and return its reply
/// (waiting up to 30 s for it). Fails when no daemon listens there.
pub fn call(mountpoint: &Path, req: &Request) -> Result<Value> {
    call_within(mountpoint, req, Duration::from_secs(30))
}

/// [`call`], waiting at most `wait` for the reply.
pub fn call_within(mountpoint: &Path, req: &Request, wait: Duration) -> Result<Value> {
    let path = socket_path(mountpoint);
    let mut conn = UnixStream::connect(&path)
        .with_context(|| format!("no ringfs daemon answers for {} (control socket {})", mountpoint.display(), path.display()))?;
    // A gc copies up to a store's worth of packs; a first commit or a diff
    // against live hashes every changed file first.
    conn.set_read_timeout(Some(if matches!(req, Request::Gc | Request::Commit { .. } | Request::Diff { .. } | Request::Fork { .. } | Request::Restore { .. } | Request::Push { .. } | Request::RemoteStatus { .. } | Request::ExecBegin | Request::ExecEnd { .. }) { wait.max(Duration::from_secs(3600)) } else { wait }))?;
    writeln!(conn, "{}", serde_json::to_string(req)?)?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line)?;
    let v: Value = serde_json::from_str(line.trim()).context("malformed reply on the control socket")?;
    if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
        anyhow::bail!("daemon: {err}");
    }
    Ok(v)
}
