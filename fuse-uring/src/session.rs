//! The session: mounting, the INIT handshake, choosing and starting the
//! transport, serving, unmounting.
//!
//! Lifecycle: [`mount`] opens `/dev/fuse`, calls `mount(2)` and answers INIT
//! on that fd, returning a [`Session`] whose [`ConnInfo`] says what was
//! negotiated. With io_uring it also starts and probes the rings and, if they
//! do not work, aborts that connection and remounts on `/dev/fuse` (or
//! fails). [`Session::run`] serves requests on worker threads until the
//! filesystem is unmounted ([`unmount`] / [`Unmounter`]) or the connection is
//! aborted, then calls `Filesystem::destroy`. [`Session::notifier`] and
//! [`Session::stats`] give handles that outlive `run`'s borrow of the session.
//!
//! The top of the crate: it owns [`MountOptions`] and turns them into what
//! the layers below need ([`InitOptions`] for INIT, queue counts and depths
//! for the rings). It moves no request bytes itself: the `/dev/fuse` loop,
//! notifications and backing ids are [`dev`](crate::dev)'s, the rings
//! [`ring`]'s, decoding and the filesystem call the [`Dispatcher`]'s.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::abi::*;
use crate::dev::{clone_fd, cvt, open_dev_fuse, read_request, worker_loop, write_reply, FuseDev, Notifier};
use crate::slow::SlowPool;
use crate::dispatch::{negotiate, Dispatcher, InitDecision, InitOptions};
use crate::fs::{ConnInfo, Filesystem};
use crate::reply::ReplyBuf;
use crate::request::{Operation, ParseOptions, Request};
use crate::ring::{self, RingFault, Rings};
use crate::stats::OpStats;
pub use crate::transport::{Transport, TransportInfo, TransportKind};
use crate::transport::{abort_connection, abort_connection_id, connection_id, possible_cpus, uring_available};

/// Options for [`mount`]. `Default` gives the values documented per field.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The mount's source ("fsname", first column of /proc/mounts). Default `"ringfs"`.
    pub fsname: String,
    /// `allow_other`: users other than the mounter may access the mount. Default true.
    pub allow_other: bool,
    /// `default_permissions`: the kernel checks mode bits itself. Default true.
    pub default_permissions: bool,
    /// `MS_NOSUID`. Default true.
    pub nosuid: bool,
    /// `MS_NODEV`. Default true.
    pub nodev: bool,
    /// `MS_RDONLY`: the kernel refuses every change with EROFS. Default false.
    pub read_only: bool,
    /// `MS_NOEXEC`. Default false.
    pub noexec: bool,
    /// The mount's atime flag (`MS_RELATIME`, `MS_NOATIME` or
    /// `MS_STRICTATIME`). FUSE inodes are `S_NOATIME` in the kernel, so for
    /// FUSE this only shows in mountinfo: the filesystem server keeps atime
    /// itself and should follow it. Default [`MountAtime::Relatime`].
    pub atime: MountAtime,
    /// Further `mount(2)` flags, passed on as they are (`MS_NODIRATIME`,
    /// `MS_LAZYTIME`, `MS_SYNCHRONOUS`, `MS_DIRSYNC`, `MS_NOSYMFOLLOW`,
    /// `MS_SILENT`, `MS_I_VERSION`; the kernel refuses `MS_MANDLOCK` for
    /// FUSE with EINVAL). Default 0.
    pub extra_flags: libc::c_ulong,
    /// Ask for FUSE_PASSTHROUGH (kernel ≥ 6.9) with `max_stack_depth` 1.
    /// [`ConnInfo::passthrough`] says whether the kernel agreed. Default false.
    pub passthrough: bool,
    /// Ask for READDIRPLUS (DO_READDIRPLUS + READDIRPLUS_AUTO). Default true.
    pub readdirplus: bool,
    /// Ask for FUSE_POSIX_ACL (the kernel enforces ACLs the filesystem
    /// stores as xattrs), with DONT_MASK and SETXATTR_EXT (see
    /// [`negotiate`](crate::negotiate)). Default false.
    pub posix_acl: bool,
    /// Largest WRITE payload in bytes (sets `max_pages` = max_write / 4 KiB,
    /// which the kernel caps at its `max_pages_limit`, 256 by default).
    /// Default 1 MiB.
    pub max_write: u32,
    /// `fuse_init_out.max_background` (async requests in flight, e.g.
    /// readahead); the congestion threshold is 3/4 of it. Default 64.
    pub max_background: u16,
    /// The transport (see [`Transport`]). Default [`Transport::Auto`].
    pub transport: Transport,
    /// io_uring: registered entries per queue (one queue per possible CPU),
    /// i.e. requests one CPU can have in flight in the daemon. Each entry
    /// holds a payload buffer of max_write bytes (allocated lazily by the
    /// kernel's page faults). Default 4, at least 1.
    pub queue_depth: u16,
    /// io_uring: how long the start-up probe may wait for requests to come
    /// through the ring before the ring is declared broken (and the mount
    /// aborted). Default 5 s.
    pub ring_start_timeout: Duration,
    /// Test hook: make the ring fail to start. Default none.
    #[doc(hidden)]
    pub ring_fault: RingFault,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            fsname: "ringfs".into(),
            allow_other: true,
            default_permissions: true,
            nosuid: true,
            nodev: true,
            read_only: false,
            noexec: false,
            atime: MountAtime::Relatime,
            extra_flags: 0,
            passthrough: false,
            readdirplus: true,
            posix_acl: false,
            max_write: 1 << 20,
            max_background: 64,
            transport: Transport::Auto,
            queue_depth: 4,
            ring_start_timeout: Duration::from_secs(5),
            ring_fault: RingFault::None,
        }
    }
}

/// A mount's atime flag ([`MountOptions::atime`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MountAtime {
    /// `relatime` (the kernel's default).
    #[default]
    Relatime,
    /// `noatime`.
    Noatime,
    /// `strictatime`.
    Strictatime,
}

impl MountOptions {
    /// The `mount(2)` flags of these options (without `MS_REMOUNT`).
    pub fn ms_flags(&self) -> libc::c_ulong {
        let mut flags: libc::c_ulong = match self.atime {
            MountAtime::Relatime => libc::MS_RELATIME,
            MountAtime::Noatime => libc::MS_NOATIME,
            MountAtime::Strictatime => libc::MS_STRICTATIME,
        } | self.extra_flags;
        for (on, flag) in [
            (self.nosuid, libc::MS_NOSUID),
            (self.nodev, libc::MS_NODEV),
            (self.read_only, libc::MS_RDONLY),
            (self.noexec, libc::MS_NOEXEC),
        ] {
            if on {
                flags |= flag;
            }
        }
        flags
    }
}

impl From<&MountOptions> for InitOptions {
    /// What INIT asks for: OVER_IO_URING unless the transport is [`Transport::Dev`].
    fn from(o: &MountOptions) -> InitOptions {
        InitOptions {
            readdirplus: o.readdirplus,
            passthrough: o.passthrough,
            over_io_uring: o.transport != Transport::Dev,
            max_write: o.max_write,
            max_background: o.max_background,
            posix_acl: o.posix_acl,
        }
    }
}

/// The shared, clonable handle on a session's request counters
/// ([`Session::stats`]); read it with [`OpStats::snapshot`].
pub type OpStatsHandle = Arc<OpStats>;

/// The filesystem type given to `mount(2)`: shows as `fuse.ringfs` in /proc/mounts.
pub const FSTYPE: &str = "fuse.ringfs";

pub(crate) fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Unmounts `mountpoint`: `umount2(mountpoint, 0)`, falling back to a lazy
/// `MNT_DETACH` unmount when it is busy (EBUSY). The session's workers then
/// see ENODEV once the superblock goes away and [`Session::run`] returns.
pub fn unmount(mountpoint: &Path) -> io::Result<()> {
    let c = cpath(mountpoint)?;
    // SAFETY: umount2 with a valid NUL-terminated path.
    match cvt(unsafe { libc::umount2(c.as_ptr(), 0) }) {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            tracing::info!(mountpoint = %mountpoint.display(), "mount busy, detaching lazily");
            // SAFETY: as above.
            cvt(unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) }).map(drop)
        }
        Err(e) => Err(e),
    }
}

/// Changes the flags of the mount at `mountpoint` (`mount -o remount`):
/// `mount(2)` with `MS_REMOUNT` and the flags of `opts` (nosuid, nodev,
/// read_only, noexec, atime, extra_flags; the other fields are ignored). The FUSE
/// connection is unchanged. Going read-only fails with EBUSY while a file is
/// open for writing (the kernel's rule). Needs CAP_SYS_ADMIN.
pub fn remount(mountpoint: &Path, opts: &MountOptions) -> io::Result<()> {
    let c = cpath(mountpoint)?;
    let flags = libc::MS_REMOUNT | opts.ms_flags();
    // SAFETY: mount(2) with a valid NUL-terminated target; no source, type or data.
    cvt(unsafe { libc::mount(std::ptr::null(), c.as_ptr(), std::ptr::null(), flags, std::ptr::null()) }).map(drop)
}

/// A clonable handle that unmounts the session's mount point (see [`unmount`]).
#[derive(Clone, Debug)]
pub struct Unmounter {
    mountpoint: PathBuf,
}

impl Unmounter {
    /// Unmounts (see [`unmount`]).
    pub fn unmount(&self) -> io::Result<()> {
        unmount(&self.mountpoint)
    }
    /// The mount point this handle unmounts.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }
}

/// A mounted, initialised FUSE connection, ready to [`run`](Session::run).
///
/// Dropping a session without running it closes the fd, which aborts the
/// connection: accesses then fail with ENOTCONN until [`unmount`].
#[derive(Debug)]
pub struct Session {
    dev: FuseDev,
    mountpoint: PathBuf,
    info: ConnInfo,
    stats: Arc<OpStats>,
    bufsize: usize,
    /// io_uring queues, registered, until `run` serves them.
    rings: Option<Rings>,
    transport: TransportInfo,
    /// During [`mount`] only: an `O_PATH` fd on this mount's root, opened
    /// right after `mount(2)`. The probe and a fallback address this
    /// connection through it, never through the mount point's path, which
    /// may show another mount by then (stacked on top, or ours detached by
    /// someone else). Closed before `mount` returns (it would keep the
    /// mount busy).
    root: Option<OwnedFd>,
    /// The connection's id under `/sys/fs/fuse/connections` (the mount's
    /// device number), if it could be read from `root`.
    conn_id: Option<u32>,
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.rings.is_some() {
            // Registered but never served: abort so no caller waits forever.
            let _ = self.abort();
        }
    }
}

/// The device number (= FUSE connection id) and mount id of the mount whose
/// root `fd` is, read without sending a request (`AT_STATX_DONT_SYNC`).
fn root_ids(fd: BorrowedFd<'_>) -> Option<(u32, u64)> {
    // SAFETY: statx fills the zeroed struct; "" with AT_EMPTY_PATH names fd.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    if r != 0 || stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return None;
    }
    Some(((stx.stx_dev_major << 20) | stx.stx_dev_minor, stx.stx_mnt_id))
}

/// Opens this mount's root right after `mount(2)` (`O_PATH`: no request is
/// sent) and checks, through `/proc/self/mountinfo`, that it is a FUSE mount
/// (the one just made). Returns the fd and the connection id.
fn open_root(target: &std::ffi::CStr) -> Option<(OwnedFd, u32)> {
    // SAFETY: open(2) of a valid NUL-terminated path.
    let fd = unsafe { libc::open(target.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fresh fd, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let (dev, mnt_id) = root_ids(fd.as_fd())?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let ours = info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 4
            && f[0].parse::<u64>().ok() == Some(mnt_id)
            && l.split(" - ").nth(1).is_some_and(|t| t.starts_with("fuse"))
    });
    ours.then_some((fd, dev))
}

/// Mounts a FUSE filesystem at `mountpoint` and answers the kernel's INIT.
///
/// Opens `/dev/fuse` (`O_RDWR | O_CLOEXEC`), calls `mount(2)` with source
/// `opts.fsname`, type [`FSTYPE`] and data
/// `fd=N,rootmode=40000,user_id=0,group_id=0[,default_permissions][,allow_other]`,
/// then reads INIT on that fd and answers it as [`negotiate`] decides. Needs
/// CAP_SYS_ADMIN. On an INIT failure the mount is detached again.
///
/// Errors: those of open/mount(2) (ENOENT, EPERM, ...), ENODEV if the
/// connection died, EPROTO if the kernel's protocol is too old.
pub fn mount(mountpoint: &Path, opts: &MountOptions) -> io::Result<Session> {
    let mut reason = None;
    let try_uring = match opts.transport {
        Transport::Dev => false,
        t => match uring_available() {
            Ok(()) => true,
            Err(why) if t == Transport::Uring => {
                return Err(io::Error::new(io::ErrorKind::Unsupported, format!("io_uring transport unavailable: {why}")))
            }
            Err(why) => {
                reason = Some(format!("io_uring unavailable: {why}"));
                false
            }
        },
    };
    let mut s = mount_once(mountpoint, opts, try_uring)?;
    if try_uring {
        if s.info.flags & FUSE_OVER_IO_URING == 0 {
            let why = "the kernel did not accept FUSE_OVER_IO_URING in INIT".to_string();
            if opts.transport == Transport::Uring {
                s.abandon();
                return Err(io::Error::new(io::ErrorKind::Unsupported, format!("io_uring transport unavailable: {why}")));
            }
            reason = Some(format!("io_uring unavailable: {why}"));
        } else {
            match s.start_rings(opts) {
                Ok(()) => tracing::info!(mountpoint = %mountpoint.display(), transport = %s.transport, "FUSE transport"),
                Err(why) => {
                    s.abandon();
                    if opts.transport == Transport::Uring {
                        return Err(io::Error::other(format!(
                            "io_uring transport failed to start: {why}; the connection was aborted and unmounted"
                        )));
                    }
                    reason = Some(format!("io_uring failed to start ({why}); remounted on /dev/fuse"));
                    s = mount_once(mountpoint, opts, false)?;
                }
            }
        }
    }
    if let Some(r) = &reason {
        tracing::warn!(mountpoint = %mountpoint.display(), "FUSE transport /dev/fuse: {r}");
    }
    s.transport.reason = reason;
    // mount_once records the transport it was told to use; report the one asked for.
    s.transport.requested = opts.transport;
    // An open fd on the root would make umount(2) fail with EBUSY.
    s.root = None;
    Ok(s)
}

/// `mount(2)` + INIT, asking for FUSE_OVER_IO_URING if `uring`.
fn mount_once(mountpoint: &Path, opts: &MountOptions, uring: bool) -> io::Result<Session> {
    let mut opts = opts.clone();
    if !uring {
        opts.transport = Transport::Dev;
    }
    let opts = &opts;
    let fd = open_dev_fuse()?;
    let mut data = format!("fd={},rootmode=40000,user_id=0,group_id=0", fd.as_raw_fd());
    if opts.default_permissions {
        data.push_str(",default_permissions");
    }
    if opts.allow_other {
        data.push_str(",allow_other");
    }
    let flags = opts.ms_flags();
    let src = CString::new(opts.fsname.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let target = cpath(mountpoint)?;
    let fstype = CString::new(FSTYPE).expect("no NUL");
    let cdata = CString::new(data).expect("no NUL");
    // SAFETY: all pointers are valid NUL-terminated strings for the call.
    cvt(unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), flags, cdata.as_ptr() as *const _) })?;
    // Only needed to probe the ring and, if it fails, to tear down exactly this mount.
    let (root, conn_id) = match uring.then(|| open_root(&target)).flatten() {
        Some((fd, id)) => (Some(fd), Some(id)),
        None => (None, None),
    };

    let bufsize = FUSE_MIN_READ_BUFFER.max(opts.max_write.max(4096) as usize + 4096);
    let dev = FuseDev::new(fd);
    match init_handshake(dev.as_fd(), opts, bufsize) {
        Ok(info) => {
            tracing::info!(
                mountpoint = %mountpoint.display(),
                minor = info.proto_minor,
                flags = format_args!("{:#x}", info.flags),
                passthrough = info.passthrough,
                "FUSE session initialised"
            );
            if opts.passthrough && !info.passthrough {
                tracing::warn!("kernel did not offer FUSE_PASSTHROUGH; file data goes through the daemon");
            }
            let transport = TransportInfo {
                requested: opts.transport,
                kind: TransportKind::DevFuse,
                queues: 0,
                depth: 0,
                payload_size: 0,
                reason: None,
            };
            Ok(Session {
                dev,
                mountpoint: mountpoint.to_path_buf(),
                info,
                stats: Arc::default(),
                bufsize,
                rings: None,
                transport,
                root,
                conn_id,
            })
        }
        Err(e) => {
            // SAFETY: umount2 with a valid path; best effort.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            Err(e)
        }
    }
}

fn init_handshake(fd: BorrowedFd<'_>, opts: &MountOptions, bufsize: usize) -> io::Result<ConnInfo> {
    let mut buf = vec![0u8; bufsize];
    loop {
        let n = read_request(fd, &mut buf)?;
        let req = Request::parse(&buf[..n], ParseOptions::default())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("first request: {e}")))?;
        let Operation::Init { arg } = req.op else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("expected INIT, got opcode {}", req.header.opcode),
            ));
        };
        let mut reply = ReplyBuf::with_capacity(64);
        reply.reset(req.header.unique);
        match negotiate(&arg, opts) {
            InitDecision::Accept { out, len, info } => {
                reply.push_bytes(&out.as_bytes()[..len]);
                write_reply(fd, reply.as_bytes())?;
                return Ok(info);
            }
            InitDecision::RetryMajor { out, len } => {
                reply.push_bytes(&out.as_bytes()[..len]);
                write_reply(fd, reply.as_bytes())?;
            }
            InitDecision::Refuse(errno) => {
                reply.set_error(errno);
                let _ = write_reply(fd, reply.as_bytes());
                return Err(io::Error::from_raw_os_error(errno));
            }
        }
    }
}

impl Session {
    /// Registers ring entries on every queue and checks that requests come
    /// through; on success the session uses io_uring. Err: a reason, and the
    /// caller must [`Self::abandon`] the connection.
    fn start_rings(&mut self, opts: &MountOptions) -> Result<(), String> {
        let nqueues = possible_cpus().map_err(|e| format!("/sys/devices/system/cpu/possible: {e}"))?;
        let payload = FUSE_MIN_READ_BUFFER.max((self.info.max_write as usize).div_ceil(4096) * 4096);
        let depth = opts.queue_depth.max(1) as usize;
        let mut rings = ring::start(&self.dev, nqueues, depth, payload, opts.ring_fault)?;
        if opts.ring_fault.overmounts() {
            if let Ok(c) = cpath(&self.mountpoint) {
                // SAFETY: mount(2) with valid NUL-terminated strings (test hook).
                unsafe { libc::mount(c"tmpfs".as_ptr(), c.as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) };
            }
        }
        let probe = match &self.root {
            Some(root) => rings.probe(root.as_fd(), opts.ring_start_timeout),
            None => Err("cannot open the new mount's root to probe it".to_string()),
        };
        // Keep the rings even on failure: abandon() aborts the connection
        // before their threads are stopped.
        self.rings = Some(rings);
        probe?;
        self.transport = TransportInfo {
            requested: opts.transport,
            kind: TransportKind::IoUring,
            queues: nqueues,
            depth,
            payload_size: payload,
            reason: None,
        };
        Ok(())
    }

    /// Tears down a connection that must not be used: aborts it (via
    /// `/sys/fs/fuse/connections/<id>/abort` when the control filesystem is
    /// mounted), closes the rings and the fd (which aborts it too), and
    /// detaches the mount. Nothing that waited on it stays blocked.
    fn abandon(mut self) {
        if let Err(e) = self.abort() {
            tracing::debug!("abort via fusectl: {e}; closing the connection instead");
        }
        self.rings = None;
        // Detach this mount only if it is the topmost at the path: umount2
        // works on whatever the path shows (even through /proc/self/fd, a
        // mount on top of our root is crossed), and someone else's mount
        // must not be removed. Else ours stays, aborted (ENOTCONN), below it.
        let top = crate::transport::top_mount_dev(&self.mountpoint);
        let ours = match self.conn_id {
            Some(id) => top == Some(id),
            None => true,
        };
        if !ours {
            tracing::warn!(
                mountpoint = %self.mountpoint.display(),
                "another mount now sits on the mount point; the aborted FUSE mount under it is left for it to be removed"
            );
        } else if let Ok(c) = cpath(&self.mountpoint) {
            // SAFETY: umount2 with a valid NUL-terminated path.
            if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
                tracing::debug!("detaching the abandoned mount: {}", io::Error::last_os_error());
            }
        }
        drop(self);
    }

    /// Aborts this connection through fusectl. While `root` is held the
    /// id is certainly ours. Later, only if the path still shows this
    /// connection: an id can be reused once our mount is gone, and the path
    /// may show someone else's mount; never abort a stranger.
    fn abort(&self) -> io::Result<()> {
        match self.conn_id {
            Some(id) if self.root.is_some() => abort_connection_id(id),
            Some(id) if connection_id(&self.mountpoint) == Some(id) => abort_connection_id(id),
            Some(_) => Err(io::Error::new(io::ErrorKind::NotFound, "this mount is no longer at its mount point")),
            None => abort_connection(&self.mountpoint),
        }
    }

    /// The transport in use: kind (`io_uring` or `/dev/fuse`), queue count
    /// and depth, and why `/dev/fuse` was chosen when `Auto` fell back.
    pub fn transport_info(&self) -> TransportInfo {
        self.transport.clone()
    }

    /// What INIT negotiated (protocol minor, flags, passthrough, max_write).
    pub fn conn_info(&self) -> ConnInfo {
        self.info
    }

    /// The mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The per-opcode request counters of this session (live; never reset).
    pub fn stats(&self) -> OpStatsHandle {
        self.stats.clone()
    }

    /// A handle sending cache invalidations on this session's fd.
    pub fn notifier(&self) -> Notifier {
        Notifier::new(self.dev.clone())
    }

    /// The session's `/dev/fuse` fd, for [`backing_open`](crate::backing_open) /
    /// [`backing_close`](crate::backing_close).
    pub fn device(&self) -> FuseDev {
        self.dev.clone()
    }

    /// A handle that unmounts this session's mount point.
    pub fn unmounter(&self) -> Unmounter {
        Unmounter { mountpoint: self.mountpoint.clone() }
    }

    /// Serves requests until the filesystem is unmounted or the connection aborted.
    ///
    /// Calls `fs.init(&conn_info)` first, then starts min(`workers`, CPUs)
    /// reader threads ([`dev_readers`]; at least one), each reading requests
    /// on its own cloned `/dev/fuse` fd into a buffer of max(8 KiB,
    /// max_write + 4 KiB) bytes, dispatching them and writing replies with
    /// write(2), and a pool of `workers` threads to which readers hand slow
    /// requests ([`Filesystem::is_slow`]; the pool thread writes the reply).
    /// EINTR/EAGAIN are retried; ENOENT on a
    /// reply (the request was interrupted) is ignored; ENODEV (unmounted or
    /// aborted) ends a worker cleanly. A panic in the filesystem is caught
    /// and answered with EIO. Returns after every worker has ended, having
    /// called `fs.destroy()` (once, unless DESTROY already did). The first
    /// unexpected I/O error of any worker is returned.
    ///
    /// With the io_uring transport ([`Self::transport_info`]) it instead
    /// serves each queue on its own thread (pinned to the queue's CPU), hands
    /// slow requests ([`Filesystem::is_slow`]) to `workers` pool threads (at least
    /// one) and keeps one `/dev/fuse` reader for FORGET, BATCH_FORGET and
    /// INTERRUPT. It ends when the kernel has completed every ring entry
    /// (ENOTCONN on unmount or abort).
    pub fn run<F: Filesystem>(mut self, fs: Arc<F>, workers: usize) -> io::Result<()> {
        if let Some(rings) = self.rings.take() {
            return self.run_uring(fs, workers, rings);
        }
        fs.init(&self.info);
        let dispatcher = Arc::new(Dispatcher::new(fs, self.info, self.stats.clone()));
        let (pool, pool_threads) = SlowPool::start(workers.max(1));
        let mut handles = Vec::new();
        let mut spawn_err = None;
        for i in 0..dev_readers(workers) {
            let fd = match clone_fd(&self.dev) {
                Ok(fd) => fd,
                Err(e) => {
                    tracing::warn!("FUSE_DEV_IOC_CLONE failed ({e}); worker {i} shares the session fd");
                    match self.dev.as_fd().try_clone_to_owned() {
                        Ok(fd) => fd,
                        Err(e) => {
                            spawn_err = Some(e);
                            break;
                        }
                    }
                }
            };
            let (d, p) = (dispatcher.clone(), pool.clone());
            let bufsize = self.bufsize;
            let h = std::thread::Builder::new()
                .name(format!("fuse-worker-{i}"))
                .spawn(move || worker_loop(Arc::new(fd), &d, bufsize, Some(&p)));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    spawn_err = Some(e);
                    break;
                }
            }
        }
        if handles.is_empty() {
            // No reader: serve on this thread so the mount cannot hang.
            let fd = self.dev.as_fd().try_clone_to_owned()?;
            let r = worker_loop(Arc::new(fd), &dispatcher, self.bufsize, None);
            pool.shutdown();
            for h in pool_threads {
                let _ = h.join();
            }
            dispatcher.destroy();
            return r;
        }
        if let Some(e) = spawn_err {
            tracing::warn!("started only {} FUSE workers: {e}", handles.len());
        }
        let mut result = Ok(());
        for h in handles {
            let r = h.join().unwrap_or_else(|_| Err(io::Error::other("FUSE worker panicked")));
            if result.is_ok() {
                result = r;
            }
        }
        pool.shutdown();
        for h in pool_threads {
            let _ = h.join();
        }
        dispatcher.destroy();
        tracing::info!(mountpoint = %self.mountpoint.display(), "FUSE session ended");
        result
    }
}

impl Session {
    fn run_uring<F: Filesystem>(&self, fs: Arc<F>, workers: usize, rings: Rings) -> io::Result<()> {
        fs.init(&self.info);
        let d = Arc::new(Dispatcher::new(fs, self.info, self.stats.clone()));
        let (pool, pool_threads) = SlowPool::start(workers.max(1));
        let reader = {
            let fd = clone_fd(&self.dev).or_else(|_| self.dev.as_fd().try_clone_to_owned())?;
            let (d, bufsize) = (d.clone(), self.bufsize);
            std::thread::Builder::new()
                .name("fuse-dev-reader".into())
                .spawn(move || worker_loop(Arc::new(fd), &d, bufsize, None))
        };
        let mut result = Ok(());
        let handler: Arc<dyn ring::Handler> = d.clone();
        let threads = rings.serve(handler, pool.clone());
        for h in threads {
            let r = h.join().unwrap_or_else(|_| Err(io::Error::other("FUSE ring thread panicked")));
            if let Err(e) = r {
                tracing::error!("FUSE ring thread failed ({e}); aborting the connection");
                let _ = self.abort();
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        pool.shutdown();
        for h in pool_threads {
            let _ = h.join();
        }
        match reader {
            Ok(h) => {
                if let Err(e) = h.join().unwrap_or_else(|_| Err(io::Error::other("FUSE reader panicked"))) {
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
            Err(e) => tracing::warn!("no /dev/fuse reader thread: {e}"),
        }
        d.destroy();
        tracing::info!(mountpoint = %self.mountpoint.display(), "FUSE session (io_uring) ended");
        result
    }
}

/// The number of `/dev/fuse` reader threads [`Session::run`] starts for
/// `workers`: min(`workers`, the CPUs this process may run on), at least
/// one. More readers than CPUs only rotate: the kernel wakes the reader that
/// waited longest, so one-at-a-time requests (a `find | xargs cat`, a loop of
/// creates) land on a different, cold thread each time (D57). Slow requests
/// go to the pool of `workers` threads instead of blocking a reader.
pub fn dev_readers(workers: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    workers.min(cpus).max(1)
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Unmounter>();
}

#[cfg(test)]
mod tests {
    #[test]
    fn dev_readers_bounded_by_workers_and_cpus() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(super::dev_readers(0), 1);
        assert_eq!(super::dev_readers(1), 1);
        assert_eq!(super::dev_readers(4), 4.min(cpus));
        assert_eq!(super::dev_readers(10_000), cpus);
    }
}
