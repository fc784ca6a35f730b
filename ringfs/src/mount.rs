//! `ringfs mount`: open the store, mount, serve until unmounted or signalled,
//! then commit and exit.
//!
//! Order of a clean stop (SIGINT, SIGTERM, `ringfs umount`, or an external
//! `umount`): unmount (the kernel ends the connection and the workers return),
//! then `Fs::shutdown` hashes what is dirty, commits durably and marks the
//! store clean, then the process exits 0.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::adapter::{Adapter, CachePolicy};
use crate::cli::{MountArgs, NativeRootsArg, Passthrough};
use crate::options::Vfs;
use crate::roots;
use crate::{control, mountpoint, notify, plan};

/// Environment variable through which a `--daemon` parent hands its child
/// the write end of a pipe; the child writes `ok\n` once the mount is ready,
/// or `error: <message>\n`.
const READY_FD_ENV: &str = "RINGFS_READY_FD";

/// `ringfs mount`. `argv` is the command line after the program name (as
/// expanded by [`crate::options::expand`]), for the `--daemon` child.
pub fn cmd_mount(args: MountArgs, argv: &[OsString]) -> Result<()> {
    if Vfs::parse(&args, Vfs::default())?.remount {
        return remount(&args);
    }
    if args.daemon {
        return daemonize(&args, argv);
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

/// `ringfs mount -o remount,…`: changes the flags of a mounted workspace
/// (mount(2) with MS_REMOUNT); the daemon follows the new atime and
/// read-only flags itself (it watches its mount, see [`watch_mount`]).
fn remount(args: &MountArgs) -> Result<()> {
    let mp = mountpoint::resolve(&args.mountpoint)?;
    let Some(m) = mountpoint::mount_at(&mp)?.filter(|m| m.fstype == fuse_uring::session::FSTYPE) else {
        bail!("{} is not a ringfs mount: -o remount changes the options of a mounted workspace (mount it first)", mp.display());
    };
    let vfs = Vfs::parse(args, Vfs::from_mountinfo(&m.options, &m.super_options))?;
    plan::require_root(&vfs)?;
    if !vfs.read_only {
        // A `mount --at` view stays read-only: what is written there would
        // be removed with its temporary copy at unmount.
        if let Some((c, o)) = crate::ask(&mp, control::Request::Status).ok().as_ref().and_then(crate::branch::at_view_of) {
            bail!("{}", crate::branch::at_view_line(&mp, &c, &o, "it cannot be remounted read-write (what is written there would be lost)"));
        }
    }
    let mut opts = fuse_uring::session::MountOptions::default();
    vfs.apply_to(&mut opts);
    // Going read-only is refused (EBUSY) while a file is open for writing;
    // a file just closed can hold the kernel's count a moment longer (its
    // RELEASE still on its way to the daemon), so EBUSY is retried for 2 s.
    let r = remount_retrying(&mp, &opts, if vfs.read_only { Duration::from_secs(2) } else { Duration::ZERO });
    r.map_err(|e| match e.raw_os_error() {
        Some(libc::EBUSY) if vfs.read_only => {
            anyhow::anyhow!("cannot remount {} read-only: files are open for writing in it (EBUSY): close them first", mp.display())
        }
        _ => anyhow::anyhow!("remounting {} with {}: {e}", mp.display(), vfs.describe()),
    })
}

/// mount(2) with MS_REMOUNT of `mp`, tried again every 50 ms for `busy`
/// while it answers EBUSY (going read-only with a write in flight).
fn remount_retrying(mp: &Path, opts: &fuse_uring::session::MountOptions, busy: Duration) -> std::io::Result<()> {
    let deadline = std::time::Instant::now() + busy;
    let mut r = fuse_uring::session::remount(mp, opts);
    while r.as_ref().is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY)) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        r = fuse_uring::session::remount(mp, opts);
    }
    r
}

/// Start the daemon in a new session — a fork of this process, or (when
/// it has other threads) ourselves re-run without `--daemon` — and wait
/// until it reports the mount ready (or fails). Everything is checked, and
/// the mountpoint claimed, before the log is created; the child takes the
/// claim over.
fn daemonize(args: &MountArgs, argv: &[OsString]) -> Result<()> {
    let plan = plan::check(args)?;
    crate::remote::sync::check(args)?;
    let mp = plan.mp.clone();
    let log = plan::log_path(args, &mp)?;
    let mut claim = mountpoint::Claim::take(&mp)?;
    if args.log_file.is_none() {
        if let Some(dir) = log.parent() {
            control::make_runtime_dir(dir)?;
        }
    }
    let (read_end, write_end) = rustix::pipe::pipe().context("creating the readiness pipe")?;
    // A log this mount creates goes again if the daemon refuses to serve
    // (say the store is in use): a refused mount leaves nothing behind.
    let daemon_log = mountpoint::DaemonLog::open(&log)?;
    let log_file = daemon_log.file.try_clone().with_context(|| format!("opening log file {}", log.display()))?;
    // This process has one thread (nothing above starts any): the daemon
    // is a fork of it, without a second exec of the binary (D61). A
    // process with more threads (not expected) re-runs the binary instead.
    if single_threaded() {
        let devnull = std::fs::File::open("/dev/null").context("opening /dev/null")?;
        // SAFETY: fork in a process with one thread; the child goes on
        // with this process's memory as it is now, as a new daemon.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error()).context("starting the daemon (fork)");
        }
        if pid == 0 {
            drop(read_end);
            // SAFETY: setsid and dup2 on descriptors we own.
            unsafe {
                libc::setsid();
                libc::dup2(devnull.as_raw_fd(), 0);
                libc::dup2(log_file.as_raw_fd(), 1);
                libc::dup2(log_file.as_raw_fd(), 2);
            }
            drop((devnull, log_file));
            claim.pass_to_forked_child();
            let mut ready = Some(std::fs::File::from(write_end));
            let result = serve(args, &mut ready);
            if let (Err(e), Some(pipe)) = (&result, ready.as_mut()) {
                let _ = writeln!(pipe, "error: {e:#}");
            }
            return result;
        }
        claim.handed_over();
        drop((write_end, log_file));
        let ready = wait_ready(read_end, pid as u32, &mp, &log);
        // SAFETY: waitpid on our own child, which has reported.
        return settle(ready, || unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0); }, daemon_log, &log);
    }
    let child_args: Vec<&OsString> = argv.iter().filter(|a| *a != "--daemon").collect();
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.args(child_args)
        .env(READY_FD_ENV, write_end.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file);
    claim.hand_to(&mut cmd);
    let read_raw = read_end.as_raw_fd();
    // SAFETY: setsid and close are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::close(read_raw);
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting the daemon")?;
    claim.handed_over();
    drop((write_end, cmd));
    let ready = wait_ready(read_end, child.id(), &mp, &log);
    settle(ready, || drop(child.wait()), daemon_log, &log)
}

/// Why a `--daemon` mount did not become ready.
enum Ready {
    /// The daemon refused to serve and said why (its log may go).
    Refused(String),
    /// Anything else (the daemon died, the pipe failed): the log stays.
    Other(anyhow::Error),
}

/// The `--daemon` parent's outcome: on a refusal, once `reap` has waited
/// for the daemon to exit, the log at `path` goes if this mount made it
/// and nothing else holds it ([`mountpoint::DaemonLog::remove_unused`]).
fn settle(ready: std::result::Result<(), Ready>, reap: impl FnOnce(), log: mountpoint::DaemonLog, path: &Path) -> Result<()> {
    match ready {
        Ok(()) => Ok(()),
        Err(Ready::Refused(e)) => {
            reap();
            log.remove_unused(path);
            Err(anyhow::anyhow!("{e}"))
        }
        Err(Ready::Other(e)) => Err(e),
    }
}

/// Whether this process has one thread (`/proc/self/task` lists one).
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").map(|d| d.count() == 1).unwrap_or(false)
}

/// Set for mount(8)'s helper, which is silent on success (errors still go
/// to stderr): see [`quiet_on_success`].
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A `--daemon` mount prints nothing once the mount is ready (mount(8)
/// helpers are silent on success).
pub fn quiet_on_success() {
    QUIET.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The `--daemon` parent's wait for daemon `pid` to report on the pipe
/// `read_end`: `ok` (the mount is ready: say so) or `error: MESSAGE` (the
/// daemon refused to serve: [`Ready::Refused`]).
fn wait_ready(read_end: OwnedFd, pid: u32, mp: &std::path::Path, log: &std::path::Path) -> std::result::Result<(), Ready> {
    let mut msg = String::new();
    std::fs::File::from(read_end).read_to_string(&mut msg).map_err(|e| Ready::Other(e.into()))?;
    let msg = msg.trim();
    if msg == "ok" {
        if !QUIET.load(std::sync::atomic::Ordering::Relaxed) {
            println!("ringfs: mounted {} (daemon pid {pid}, log {})", mp.display(), log.display());
        }
        return Ok(());
    }
    if let Some(e) = msg.strip_prefix("error: ") {
        return Err(Ready::Refused(e.to_string()));
    }
    Err(Ready::Other(anyhow::anyhow!("the daemon exited before the mount was ready; see {}", log.display())))
}

/// Raises the limit on open files as far as it may go: the daemon holds a
/// descriptor per open working copy, so all its clients' open files count
/// against its one table (EMFILE at its limit). As root (CAP_SYS_RESOURCE)
/// both limits go to `/proc/sys/fs/nr_open` (the kernel's bound for one
/// process, 1 048 576 by default); otherwise the soft limit goes to the
/// hard one. Returns the soft limit now in force.
fn raise_nofile_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit with a valid struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    let nr_open: u64 = std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let set = |to: u64| {
        let l = libc::rlimit { rlim_cur: to, rlim_max: to.max(lim.rlim_max) };
        // SAFETY: setrlimit with a valid struct.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) == 0 }
    };
    if nr_open > lim.rlim_max && set(nr_open) {
        tracing::debug!("open files limit raised from {}/{} to {nr_open} (fs.nr_open)", lim.rlim_cur, lim.rlim_max);
        return nr_open;
    }
    if lim.rlim_cur < lim.rlim_max {
        if set(lim.rlim_max) {
            tracing::debug!("open files limit raised from {} to {}", lim.rlim_cur, lim.rlim_max);
            return lim.rlim_max;
        }
        tracing::warn!("cannot raise the open files limit from {}: {}", lim.rlim_cur, std::io::Error::last_os_error());
    }
    lim.rlim_cur
}

/// The current soft limit on open files.
fn nofile_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit with a valid struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    lim.rlim_cur
}

/// Follows the flags of our mount (mount id `id`) in mountinfo, which the
/// kernel marks changed (POLLPRI) at every mount, unmount and remount, so
/// that reads move atime as the mount's current flags say (relatime,
/// noatime, strictatime; none while read-only) and changes are durable
/// before their replies under `sync`/`dirsync`, whoever remounted it.
/// `at_view`: the mountpoint of a `mount --at` view, which is put back
/// read-only when something remounted it read-write behind `ringfs mount
/// -o remount` (which refuses that).
fn watch_mount(fs: Arc<fs_core::Fs>, adapter: Arc<Adapter>, id: u64, at_view: Option<PathBuf>) -> std::io::Result<()> {
    use std::io::Seek;
    let mut f = std::fs::File::open("/proc/self/mountinfo")?;
    std::thread::Builder::new().name("ringfs-mountinfo".into()).spawn(move || loop {
        let mut text = String::new();
        if f.rewind().and_then(|_| f.read_to_string(&mut text)).is_err() {
            return;
        }
        let Some(m) = mountpoint::parse_mountinfo(&text).into_iter().find(|m| m.id == id) else { return };
        let vfs = Vfs::from_mountinfo(&m.options, &m.super_options);
        if let (Some(mp), false) = (&at_view, vfs.read_only) {
            let mut opts = fuse_uring::session::MountOptions::default();
            Vfs { read_only: true, ..vfs.clone() }.apply_to(&mut opts);
            // EBUSY while a write the kernel let through is still in flight
            // (the daemon refuses it with EROFS): tried again for 5 s.
            match remount_retrying(mp, &opts, Duration::from_secs(5)) {
                Ok(()) => tracing::error!("{} is a `mount --at` view and was remounted read-write by something other than `ringfs mount`: made read-only again (writes there would be lost at unmount)", mp.display()),
                Err(e) => tracing::error!("{} is a `mount --at` view remounted read-write: making it read-only again failed: {e}", mp.display()),
            }
        }
        let (dirs, all) = vfs.sync_writes();
        adapter.set_sync_writes(dirs, all);
        let atime = vfs.fs_atime();
        if atime != fs.atime() {
            tracing::info!("mount options now {}: atime {:?}", m.options, atime);
            fs.set_atime(atime);
        }
        let mut pfd = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
        // SAFETY: poll on one valid descriptor.
        if unsafe { libc::poll(&mut pfd, 1, -1) } < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    })?;
    Ok(())
}

/// What `ringfs status` reports about features, decided at mount time.
#[derive(Clone)]
struct Features {
    transport: fuse_uring::TransportInfo,
    passthrough_mode: Passthrough,
    passthrough_reason: String,
}

fn serve(args: &MountArgs, ready: &mut Option<std::fs::File>) -> Result<()> {
    // --at: a temporary fork of the commit, served and removed at the end.
    let at = crate::branch::at_store(args).inspect_err(|_| mountpoint::Claim::drop_inherited())?;
    if let Some((at_args, _at)) = at {
        return serve(&at_args, ready);
    }
    let t0 = std::time::Instant::now();
    let plan = plan::check(args)?;
    let sync_plan = crate::remote::sync::check(args)?;
    let mp = plan.mp.clone();
    let claim = mountpoint::Claim::take(&mp)?;
    let nofile = raise_nofile_limit();
    let native_mode = match args.native_roots {
        NativeRootsArg::Off => roots::Mode { requested: "off", off_reason: Some("--native-roots off".into()) },
        NativeRootsArg::Auto if plan.vfs.read_only => roots::Mode { requested: "auto", off_reason: Some("-o ro".into()) },
        NativeRootsArg::Auto => match native_roots::available() {
            Ok(()) => roots::Mode { requested: "auto", off_reason: None },
            Err(why) => {
                tracing::warn!("native roots off: {why}; local-only directories are served by the daemon");
                roots::Mode { requested: "auto", off_reason: Some(why) }
            }
        },
    };
    crate::branch::switch_branch(args)?;
    let (store, local_dir) = plan.create()?;
    // The store's directory (None: a memory store), and how it is named.
    let store_dir = match &store {
        fs_core::StoreLocation::Dir(d) => Some(d.clone()),
        fs_core::StoreLocation::Memory => None,
    };
    let store_desc = store_dir.as_ref().map_or_else(|| "memory".to_string(), |d| d.display().to_string());
    let cfg = fs_core::Config {
        store,
        commit_interval: Duration::from_millis(args.commit_interval_ms.max(1)),
        hash_threads: args.hash_threads.max(1),
        local: fs_core::LocalConfig {
            ignore: plan.ignore.clone(),
            dir: local_dir,
            native_roots: native_mode.off_reason.is_none(),
        },
        atime: plan.vfs.fs_atime(),
    };
    let t_plan = t0.elapsed();
    let check = if args.check { fs_core::OpenCheck::Full } else { fs_core::OpenCheck::WhenUnclean };
    let fs = Arc::new(fs_core::Fs::open_store_checked(cfg, check).map_err(|e| plan::explain_store_error(e, "--store"))?);
    let t_open = t0.elapsed();
    // Bind mounts of native roots left by a killed daemon of this store.
    let roots_dir = fs.local_info().1.join("roots");
    match native_roots::detach_stale(&roots_dir) {
        Ok(gone) if !gone.is_empty() => tracing::warn!("detached {} stale native roots of this store: {gone:?}", gone.len()),
        Ok(_) => {}
        Err(e) => tracing::warn!("looking for stale native roots of {}: {e}", roots_dir.display()),
    }
    let mut opts = fuse_uring::session::MountOptions {
        fsname: store_desc.clone(),
        passthrough: args.passthrough != Passthrough::Off,
        // ACLs are stored as xattrs and enforced by the kernel (fs-core keeps modes in step).
        posix_acl: true,
        transport: args.transport.into(),
        queue_depth: args.queue_depth.max(1),
        ..Default::default()
    };
    plan.vfs.apply_to(&mut opts);
    let session = match fuse_uring::session::mount(&mp, &opts) {
        Ok(s) => s,
        Err(e) => {
            let _ = fs.shutdown();
            return Err(anyhow::Error::from(e).context(format!("mounting on {}", mp.display())));
        }
    };
    let t_fuse = t0.elapsed();
    let mut adapter = Adapter::new(fs.clone(), CachePolicy::default());
    adapter.set_notifier(session.notifier());
    let (dirs, all) = plan.vfs.sync_writes();
    adapter.set_sync_writes(dirs, all);
    let passthrough_reason = match passthrough_check(args.passthrough, &session) {
        Ok(()) => {
            adapter.enable_passthrough(session.device(), session.notifier());
            "on".to_string()
        }
        Err(reason) if args.passthrough == Passthrough::On => {
            let _ = fuse_uring::session::unmount(&mp);
            drop(session);
            let _ = fs.shutdown();
            bail!("--passthrough on: FUSE passthrough is not available: {reason}");
        }
        Err(reason) => {
            if args.passthrough == Passthrough::Auto {
                tracing::warn!("passthrough off: {reason}; file data goes through the daemon");
            }
            reason
        }
    };
    let features = Features {
        transport: session.transport_info(),
        passthrough_mode: args.passthrough,
        passthrough_reason,
    };
    if args.at_view.is_some() {
        // A view: read-only in the daemon too, whatever a remount does.
        adapter.set_read_only();
    }
    let adapter = Arc::new(adapter);
    let op_stats = session.stats();
    let fsyncs = {
        let st = op_stats.clone();
        Box::new(move || st.get(fuse_uring::abi::FUSE_FSYNC) + st.get(fuse_uring::abi::FUSE_FSYNCDIR))
    };
    // Ours is the topmost ringfs mount there (the claim keeps other ringfs
    // mounts of this mountpoint away); remounts keep its id.
    let mount_id = mountpoint::mount_at(&mp)?.filter(|m| m.fstype == fuse_uring::session::FSTYPE).map(|m| m.id);
    if let Some(id) = mount_id {
        watch_mount(fs.clone(), adapter.clone(), id, args.at_view.is_some().then(|| mp.clone())).context("watching the mount's flags")?;
    }
    let roots = roots::Roots::start(fs.clone(), mp.clone(), native_mode)?;

    // Signals and `ringfs umount` both end the session by unmounting,
    // native roots first (the FUSE mount cannot go while they sit on it).
    let unmount_mp = mp.clone();
    let stop_roots = roots.clone();
    let stop: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        notify::notify("STOPPING=1");
        stop_roots.stop();
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
    let info = Arc::new(DaemonInfo {
        mountpoint: mp.clone(),
        store: store_desc.clone(),
        store_dir: store_dir.clone(),
        fs: fs.clone(),
        adapter: adapter.clone(),
        features,
        workers: args.workers,
        op_stats,
        roots: roots.clone(),
        mount_id,
        nofile,
        at_view: args.at_view.clone(),
    });
    // Restore changes the tree behind the kernel's back: it invalidates.
    let notifier = session.notifier();
    let answer = Arc::new(move |req: &control::Request| damage_said(&info.fs, || match (info.at_refusal(req), req) {
        (Some(why), _) => json!({ "refused": why }),
        (None, req) => match req {
        control::Request::Stats => info.stats_doc(),
        control::Request::Shutdown { no_wait, wait_secs } => crate::remote::sync::on_shutdown(*no_wait, *wait_secs),
        control::Request::Unroot { path } => match info.roots.unroot(path) {
            Ok(msg) => json!({ "ok": msg }),
            // Not "error": that means the request itself failed.
            Err(e) => json!({ "refused": e }),
        },
        control::Request::Gc => match info.fs.gc() {
            Ok(r) => crate::gc::report_doc(&r),
            Err(e) => json!({ "refused": format!("{:#}", anyhow::Error::from(e)) }),
        },
        control::Request::Commit { .. } | control::Request::Log | control::Request::Diff { .. } => crate::snap::answer(&info.fs, req),
        control::Request::Branch { .. } | control::Request::Fork { .. } => crate::branch::answer(&info.fs, req),
        control::Request::Push { .. } | control::Request::RemoteStatus { .. } => crate::remote::answer(&info.fs, info.store_dir.as_deref(), req),
        control::Request::ExecBegin | control::Request::ExecEnd { .. } | control::Request::ExecRelease { .. } => ringfs::exec::answer(&info.fs, req, || info.stats_doc()),
        control::Request::Restore { commit, paths } => {
            // A read-only mount (-o ro, or remounted so) takes no restore.
            let ro = mountpoint::mount_at(&info.mountpoint).ok().flatten().filter(|m| m.fstype == fuse_uring::session::FSTYPE).is_some_and(|m| Vfs::from_mountinfo(&m.options, &m.super_options).read_only);
            if ro {
                let mp = info.mountpoint.display();
                json!({ "refused": format!("{mp} is mounted read-only and restore changes its tree: remount it read-write first (ringfs mount {mp} -o remount,rw)") })
            } else {
                crate::snap::restore_answer(&info.fs, &notifier, &info.mountpoint, commit, paths)
            }
        }
        _ => info.status_doc(),
        },
    }));
    let _ = std::fs::remove_file(crate::remote::sync::outcome_path(&mp));
    let syncer = match sync_plan {
        Some(p) => Some(crate::remote::sync::Syncer::start(fs.clone(), p, fsyncs)?),
        None => None,
    };
    // A lazy clone: remote-only chunks fetched on first open and in the
    // background (D51), stopped before the store closes.
    let prefetch = match &store_dir {
        Some(d) => crate::remote::lazy::Prefetch::start(fs.clone(), d, Some(session.notifier())).unwrap_or_else(|e| {
            tracing::error!("remote-only chunks: {e:#}; files using them fail to open with EIO");
            None
        }),
        None => None,
    };
    let _control = control::Server::start(&mp, answer, stop)?;
    let _ = std::fs::remove_file(control::result_path(&mp));
    tracing::info!("mounted {} on store {}", mp.display(), store_desc);
    {
        // Ready once the native roots found in the store are mounted (their
        // placement needs the session below to answer its lookups): tell the
        // `--daemon` parent and systemd (Type=notify).
        let mut pipe = ready.take();
        let roots = roots.clone();
        std::thread::Builder::new().name("ringfs-ready".into()).spawn(move || {
            roots.wait_initial(Duration::from_secs(30));
            // Where a mount's time goes (D48): checks and branch switch, the
            // store opened, the FUSE mount (INIT), the rest until ready.
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let ready = t0.elapsed();
            // The CPU time of this process (a `--daemon` child: since its
            // fork), all threads: what a busy machine does not inflate (D68).
            tracing::info!(
                "mount ready in {:.1} ms: plan {:.1} ms, store {:.1} ms, FUSE mount {:.1} ms, control and roots {:.1} ms; process CPU {:.1} ms",
                ms(ready),
                ms(t_plan),
                ms(t_open - t_plan),
                ms(t_fuse - t_open),
                ms(ready - t_fuse),
                ms(fs_core::process_cpu())
            );
            if let Some(pipe) = pipe.as_mut() {
                let _ = writeln!(pipe, "ok");
            }
            notify::notify("READY=1");
        })?;
    }
    let run = session.run(adapter.clone(), args.workers.max(1));
    claim.mark_exiting();
    roots.stop();
    if let Some(p) = prefetch {
        p.finish();
    }
    if let Some(s) = &syncer {
        // Its last commit and push, before the store closes (D44).
        let out = s.finish();
        let _ = fs_core::private::write(&crate::remote::sync::outcome_path(&mp), out.to_string().as_bytes());
    }
    tracing::info!("session ended; committing");
    let shut = fs.shutdown();
    let outcome = match &shut {
        Ok(()) => "ok\n".to_string(),
        Err(e) => match std::error::Error::source(e) {
            Some(src) => format!("{e}: {src}\n"),
            None => format!("{e}\n"),
        },
    };
    let _ = fs_core::private::write(&control::result_path(&mp), outcome.as_bytes());
    shut.context("final commit")?;
    run.context("serving the FUSE session")?;
    tracing::info!("unmounted {}", mp.display());
    Ok(())
}

/// The control reply `answer` gives (a panic in it, redb's on a damaged
/// page, refuses the request), with the store's damage said first when the
/// request failed on a store that met damage while served
/// (`fs_core::StoreDamaged`: the line names the table and the fix), its own
/// reason after it.
fn damage_said(fs: &fs_core::Fs, answer: impl FnOnce() -> Value) -> Value {
    let mut v = std::panic::catch_unwind(std::panic::AssertUnwindSafe(answer)).unwrap_or_else(control::panic_reply);
    if !fs.is_damaged() {
        return v;
    }
    let Some(d) = fs.damaged() else { return v };
    for key in ["refused", "error"] {
        if let Some(why) = v.get(key).and_then(|w| w.as_str()) {
            v[key] = format!("{d} (this request: {why})").into();
        }
    }
    v
}

/// Whether FUSE passthrough can be used on `session`: INIT negotiated it
/// and registering a backing file works (CAP_SYS_ADMIN in the initial user
/// namespace). Err: why not, one line.
fn passthrough_check(mode: Passthrough, session: &fuse_uring::session::Session) -> std::result::Result<(), String> {
    if mode == Passthrough::Off {
        return Err("--passthrough off".into());
    }
    if !session.conn_info().passthrough {
        return Err("the kernel did not offer FUSE_PASSTHROUGH (needs Linux 6.9 or newer)".into());
    }
    // An unnamed file (O_TMPFILE): nothing in the shared temporary
    // directory to race with, no link of another user's to follow; where
    // its file system has no O_TMPFILE, a new name (O_EXCL follows no link).
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::temp_dir();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(&dir)
        .or_else(|_| {
            let probe = dir.join(format!(".ringfs-passthrough-probe-{}-{:x}", std::process::id(), rand_tag()));
            let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&probe);
            let _ = f.as_ref().map(|_| std::fs::remove_file(&probe));
            f
        })
        .map_err(|e| format!("cannot create a probe file in {}: {e}", dir.display()))?;
    match fuse_uring::backing_open(session.device(), &file) {
        Ok(id) => {
            let _ = fuse_uring::backing_close(session.device(), id);
            Ok(())
        }
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            Err("registering a backing file needs CAP_SYS_ADMIN in the initial user namespace (EPERM)".into())
        }
        Err(e) => Err(format!("registering a backing file failed: {e}")),
    }
}

/// A tag no other process guesses in advance (the clock's nanoseconds
/// through BLAKE3).
fn rand_tag() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let h = blake3::hash(&t.as_nanos().to_le_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or_default())
}

/// What the control socket reports about a running mount.
struct DaemonInfo {
    mountpoint: PathBuf,
    store: String,
    /// The store's directory (None: a memory store).
    store_dir: Option<PathBuf>,
    fs: Arc<fs_core::Fs>,
    adapter: Arc<Adapter>,
    features: Features,
    workers: usize,
    op_stats: fuse_uring::session::OpStatsHandle,
    roots: Arc<roots::Roots>,
    /// Our mount's id in mountinfo (for its current options).
    mount_id: Option<u64>,
    /// The open files limit after [`raise_nofile_limit`].
    nofile: u64,
    /// A `mount --at` view: (commit id, origin store).
    at_view: Option<(String, PathBuf)>,
}

impl DaemonInfo {
    /// Why a `mount --at` view refuses `req` (None: it does not, or this
    /// is no such view): a change of the store — commit, a branch made,
    /// moved or deleted, gc, restore, push, exec — would go to the
    /// temporary copy it serves, which is removed at unmount.
    fn at_refusal(&self, req: &control::Request) -> Option<String> {
        let (commit, origin) = self.at_view.as_ref()?;
        let what = match req {
            control::Request::Commit { .. } => "commit",
            control::Request::Branch { action, .. } if action != "list" => "a branch change",
            control::Request::Gc => "gc",
            control::Request::Restore { .. } => "restore",
            control::Request::Push { .. } => "push",
            control::Request::ExecBegin => "exec",
            _ => return None,
        };
        Some(crate::branch::at_view_line(&self.mountpoint, commit, origin, &format!("{what} is refused there (it would change only that copy)")))
    }

    /// The `ringfs status --json` document.
    fn status_doc(&self) -> Value {
        let s = self.fs.stats();
        let conn = self.adapter.conn_info();
        let (patterns, local_dir, local_inodes) = self.fs.local_info();
        json!({
            "mountpoint": self.mountpoint,
            "pid": std::process::id(),
            "store": self.store,
            // Damage met while serving (null: none): read-only since.
            "damaged": self.fs.damaged().map(|d| d.to_string()),
            "at": self.at_view.as_ref().map(|(c, o)| json!({ "commit": c, "store": o })),
            "transport": {
                "name": self.features.transport.kind.as_str(),
                "requested": self.features.transport.requested.as_str(),
                "summary": self.features.transport.to_string(),
                "queues": self.features.transport.queues,
                "queue_depth": self.features.transport.depth,
                "payload_bytes": self.features.transport.payload_size,
                "workers": self.workers,
                "reason": self.features.transport.reason,
            },
            "kernel": {
                "protocol": conn.map(|c| format!("7.{}", c.proto_minor)),
                "max_write": conn.map(|c| c.max_write),
                "init_flags": conn.map(|c| format!("{:#x}", c.flags)),
            },
            "features": {
                "passthrough": {
                    "enabled": self.adapter.passthrough(),
                    "mode": format!("{:?}", self.features.passthrough_mode).to_lowercase(),
                    "negotiated": conn.map(|c| c.passthrough).unwrap_or(false),
                    "reason": self.features.passthrough_reason,
                    "backing_ids": self.adapter.backing_ids(),
                },
                "readdirplus": true,
                "writeback_cache": { "enabled": false, "reason": "excluded by passthrough; the daemon caches nothing dirty" },
                "locks": "kernel-local (flock and POSIX locks)",
            },
            "local_only": { "patterns": patterns, "dir": local_dir, "inodes": local_inodes },
            "mount": {
                "options": self.mount_id.and_then(|id| mountpoint::mounts().ok()?.into_iter().find(|m| m.id == id)).map(|m| m.options),
                "atime": format!("{:?}", self.fs.atime()).to_lowercase(),
                "open_files_limit": self.nofile,
                "open_files_limit_now": nofile_limit(),
            },
            "native_roots": self.roots.status(),
            "store_stats": {
                "inodes": s.inodes,
                "chunks": s.chunks,
                "chunk_bytes": s.chunk_bytes,
                "journal_position": s.sync_position,
                "dirty": s.dirty,
                "unstored": s.unstored,
                "open_files": s.open_files,
                "closing": s.closing,
            },
            "requests": self.op_stats.snapshot().iter().map(|c| (c.name.to_string(), json!(c.count))).collect::<serde_json::Map<String, Value>>(),
        })
    }

    /// The `ringfs stats --json` document: per-opcode request counts and
    /// latency percentiles (µs, time spent in the daemon), bytes through the
    /// daemon, store size and journal position; on a `mount --remote`, the
    /// sync thread's state (`sync`). `ringfs exec`'s points carry it too.
    fn stats_doc(&self) -> Value {
        let s = self.fs.stats();
        let (bytes_in, bytes_out) = self.op_stats.bytes();
        let requests: serde_json::Map<String, Value> = self
            .op_stats
            .snapshot()
            .iter()
            .map(|c| {
                let l = self.op_stats.latency(c.opcode);
                (
                    c.name.to_string(),
                    json!({ "count": c.count, "p50_us": l.p50_us, "p90_us": l.p90_us, "p99_us": l.p99_us }),
                )
            })
            .collect();
        let mut v = json!({
            "mountpoint": self.mountpoint,
            "damaged": self.fs.damaged().map(|d| d.to_string()),
            "requests": requests,
            "requests_total": self.op_stats.total(),
            "bytes_to_daemon": bytes_in,
            "bytes_from_daemon": bytes_out,
            "store": {
                "location": self.store,
                "inodes": s.inodes,
                "chunks": s.chunks,
                "chunk_bytes": s.chunk_bytes,
                "dirty": s.dirty,
                "unstored": s.unstored,
                "open_files": s.open_files,
                "closing": s.closing,
                "content_new": s.content_new,
                "content_reused": s.content_reused,
            },
            "journal_position": s.sync_position,
        });
        if let Some(s) = crate::remote::sync::active() {
            v["sync"] = s.doc();
        }
        v
    }
}
