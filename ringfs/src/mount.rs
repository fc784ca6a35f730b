//! `ringfs mount`: open the store, mount, serve until unmounted or signalled,
//! then commit and exit.
//!
//! Order of a clean stop (SIGINT, SIGTERM, `ringfs umount`, or an external
//! `umount`): unmount (the kernel ends the connection and the workers return),
//! then `Fs::shutdown` hashes what is dirty, commits durably and marks the
//! store clean, then the process exits 0.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::adapter::{Adapter, CachePolicy};
use crate::cli::MountArgs;
use crate::{control, mountpoint};

/// Environment variable through which a `--daemon` parent hands its child
/// the write end of a pipe; the child writes `ok\n` once the mount is ready,
/// or `error: <message>\n`.
const READY_FD_ENV: &str = "RINGFS_READY_FD";

pub fn cmd_mount(args: MountArgs) -> Result<()> {
    if args.daemon {
        return daemonize(&args);
    }
    let ready = std::env::var(READY_FD_ENV).ok().and_then(|v| v.parse::<i32>().ok()).map(|fd| {
        std::env::remove_var(READY_FD_ENV);
        // SAFETY: the parent created this pipe end for us and nothing else owns it.
        unsafe { OwnedFd::from_raw_fd(fd) }
    });
    let mut ready = ready.map(std::fs::File::from);
    let result = serve(&args, &mut ready);
    if let (Err(e), Some(pipe)) = (&result, ready.as_mut()) {
        let _ = writeln!(pipe, "error: {e:#}");
    }
    result
}

/// Re-run ourselves without `--daemon` in a new session and wait until the
/// child reports the mount ready (or fails).
fn daemonize(args: &MountArgs) -> Result<()> {
    let mp = mountpoint::check_mountable(&args.mountpoint)?;
    let (read_end, write_end) = rustix::pipe::pipe().context("creating the readiness pipe")?;
    let log = match &args.log_file {
        Some(p) => p.clone(),
        None => control::socket_path(&mp).with_extension("log"),
    };
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating log directory {}", dir.display()))?;
    }
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("opening log file {}", log.display()))?;
    let child_args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).filter(|a| a != "--daemon").collect();
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.args(&child_args)
        .env(READY_FD_ENV, write_end.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file);
    let read_raw = read_end.as_raw_fd();
    // SAFETY: setsid and close are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::close(read_raw);
            libc::setsid();
            Ok(())
        });
    }
    let child = cmd.spawn().context("starting the daemon")?;
    drop(write_end);
    let mut msg = String::new();
    std::fs::File::from(read_end).read_to_string(&mut msg)?;
    let msg = msg.trim();
    if msg == "ok" {
        println!("ringfs: mounted {} (daemon pid {}, log {})", mp.display(), child.id(), log.display());
        return Ok(());
    }
    if let Some(e) = msg.strip_prefix("error: ") {
        bail!("{e}");
    }
    bail!("the daemon exited before the mount was ready; see {}", log.display())
}

/// What `ringfs status` reports about features, decided at mount time.
#[derive(Clone)]
struct Features {
    transport: &'static str,
    transport_reason: &'static str,
    passthrough_reason: &'static str,
}

fn serve(args: &MountArgs, ready: &mut Option<std::fs::File>) -> Result<()> {
    let mp = mountpoint::check_mountable(&args.mountpoint)?;
    let store = match (&args.store, args.memory) {
        (Some(dir), false) => fs_core::StoreLocation::Dir(absolute_store(dir)?),
        (None, true) => fs_core::StoreLocation::Memory,
        _ => bail!("give exactly one of --store DIR or --memory"),
    };
    let store_desc = match &store {
        fs_core::StoreLocation::Dir(d) => d.display().to_string(),
        fs_core::StoreLocation::Memory => "memory".to_string(),
    };
    let cfg = fs_core::Config {
        store,
        commit_interval: Duration::from_millis(args.commit_interval_ms.max(1)),
        hash_threads: args.hash_threads.max(1),
    };
    let fs = Arc::new(fs_core::Fs::open_store(cfg)?);
    let opts = fuse_uring::session::MountOptions::default();
    let session = match fuse_uring::session::mount(&mp, &opts) {
        Ok(s) => s,
        Err(e) => {
            let _ = fs.shutdown();
            return Err(anyhow::Error::from(e).context(format!("mounting on {}", mp.display())));
        }
    };
    let features = Features {
        transport: "/dev/fuse",
        transport_reason: "FUSE-over-io_uring is not built yet (issue: io_uring transport)",
        passthrough_reason: "passthrough is not built yet (issue: passthrough and local-only paths)",
    };
    let adapter = Arc::new(Adapter::new(fs.clone(), CachePolicy::default()));
    let op_stats = session.stats();

    // Signals and `ringfs umount` both end the session by unmounting.
    let unmount_mp = mp.clone();
    let stop: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        if let Err(e) = fuse_uring::session::unmount(&unmount_mp) {
            tracing::warn!("unmount of {} failed: {e}", unmount_mp.display());
        }
    });
    {
        let stop = stop.clone();
        let mut signals = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM])?;
        std::thread::Builder::new().name("ringfs-signals".into()).spawn(move || {
            if let Some(sig) = signals.forever().next() {
                tracing::info!("signal {sig}: unmounting");
                stop();
            }
        })?;
    }
    let status = {
        let fs = fs.clone();
        let adapter = adapter.clone();
        let mp = mp.clone();
        let workers = args.workers;
        let features = features.clone();
        let store_desc = store_desc.clone();
        Arc::new(move || status_doc(&mp, &store_desc, &fs, &adapter, &features, workers, &op_stats))
    };
    let _control = control::Server::start(&mp, status, stop)?;
    tracing::info!("mounted {} on store {}", mp.display(), store_desc);
    if let Some(mut pipe) = ready.take() {
        let _ = writeln!(pipe, "ok");
    }
    let run = session.run(adapter.clone(), args.workers.max(1));
    tracing::info!("session ended; committing");
    fs.shutdown().context("final commit")?;
    run.context("serving the FUSE session")?;
    tracing::info!("unmounted {}", mp.display());
    Ok(())
}

fn absolute_store(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating store directory {}", dir.display()))?;
    dir.canonicalize().with_context(|| format!("store directory {}", dir.display()))
}

fn status_doc(
    mp: &Path,
    store: &str,
    fs: &fs_core::Fs,
    adapter: &Adapter,
    features: &Features,
    workers: usize,
    op_stats: &fuse_uring::session::OpStatsHandle,
) -> Value {
    let s = fs.stats();
    let conn = adapter.conn_info();
    json!({
        "mountpoint": mp,
        "pid": std::process::id(),
        "store": store,
        "transport": {
            "name": features.transport,
            "workers": workers,
            "io_uring": { "enabled": false, "reason": features.transport_reason },
        },
        "kernel": {
            "protocol": conn.map(|c| format!("7.{}", c.proto_minor)),
            "max_write": conn.map(|c| c.max_write),
            "init_flags": conn.map(|c| format!("{:#x}", c.flags)),
        },
        "features": {
            "passthrough": { "enabled": conn.map(|c| c.passthrough).unwrap_or(false), "reason": features.passthrough_reason },
            "readdirplus": true,
            "writeback_cache": { "enabled": false, "reason": "excluded by passthrough; the daemon caches nothing dirty" },
            "locks": "kernel-local (flock and POSIX locks)",
        },
        "store_stats": {
            "inodes": s.inodes,
            "chunks": s.chunks,
            "chunk_bytes": s.chunk_bytes,
            "journal_position": s.sync_position,
            "dirty": s.dirty,
        },
        "requests": op_stats.snapshot().iter().map(|c| (c.name.to_string(), json!(c.count))).collect::<serde_json::Map<String, Value>>(),
    })
}

/// Human-readable rendering of the status document.
pub fn format_status(v: &Value) -> String {
    let g = |path: &[&str]| -> String {
        let mut cur = v;
        for p in path {
            cur = &cur[*p];
        }
        match cur {
            Value::String(s) => s.clone(),
            Value::Null => "-".into(),
            other => other.to_string(),
        }
    };
    let mut out = String::new();
    out += &format!("mountpoint:       {}\n", g(&["mountpoint"]));
    out += &format!("daemon pid:       {}\n", g(&["pid"]));
    out += &format!("store:            {}\n", g(&["store"]));
    out += &format!("transport:        {} ({} workers)\n", g(&["transport", "name"]), g(&["transport", "workers"]));
    out += &format!("io_uring:         off ({})\n", g(&["transport", "io_uring", "reason"]));
    out += &format!("protocol:         {} (max_write {})\n", g(&["kernel", "protocol"]), g(&["kernel", "max_write"]));
    let pt = if v["features"]["passthrough"]["enabled"].as_bool() == Some(true) {
        "on".to_string()
    } else {
        format!("off ({})", g(&["features", "passthrough", "reason"]))
    };
    out += &format!("passthrough:      {pt}\n");
    out += &format!("readdirplus:      {}\n", g(&["features", "readdirplus"]));
    out += &format!("locks:            {}\n", g(&["features", "locks"]));
    out += &format!("inodes:           {}\n", g(&["store_stats", "inodes"]));
    out += &format!("chunks:           {} ({} bytes)\n", g(&["store_stats", "chunks"]), g(&["store_stats", "chunk_bytes"]));
    out += &format!("journal position: {}\n", g(&["store_stats", "journal_position"]));
    out += &format!("dirty:            {}\n", g(&["store_stats", "dirty"]));
    out
}
