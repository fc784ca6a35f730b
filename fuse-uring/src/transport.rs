//! Choosing and reporting the transport: `/dev/fuse` or FUSE-over-io_uring.
//!
//! [`MountOptions::transport`](crate::MountOptions::transport) asks for one
//! ([`Transport`]); [`Session::transport_info`](crate::Session::transport_info)
//! says what the mount got ([`TransportInfo`]), e.g. for `ringfs status`.
//! Also the facts about the kernel and the machine that choice rests on:
//! whether io_uring is enabled ([`uring_available`]), how many queues it
//! needs ([`possible_cpus`]), and which FUSE connection sits on a mount point
//! ([`connection_id`], [`abort_connection`]), all read from `/sys` and
//! `/proc` without sending a request to the mount.
//!
//! A leaf: it imports nothing from the rest of the crate and knows nothing of
//! requests, the filesystem or the threads that serve them.

use std::io;
use std::path::Path;

/// The module parameter that gates FUSE-over-io_uring (root may write `Y`).
pub const ENABLE_URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Which transport [`mount`](crate::mount) should use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// io_uring when the kernel offers it and [`ENABLE_URING_PARAM`] is `Y`,
    /// else `/dev/fuse` (with one log line giving the reason). A ring that
    /// fails to start is aborted and the filesystem remounted on `/dev/fuse`.
    #[default]
    Auto,
    /// FUSE-over-io_uring or an error (naming [`ENABLE_URING_PARAM`] when that
    /// is the cause). A ring that fails to start is aborted and unmounted.
    Uring,
    /// Classic `/dev/fuse` read/write only.
    Dev,
}

impl Transport {
    /// `"auto"`, `"uring"`, `"dev"`: the CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Uring => "uring",
            Transport::Dev => "dev",
        }
    }
}

impl std::str::FromStr for Transport {
    type Err = String;
    /// Parses `auto`, `uring` (also `io_uring`) or `dev` (also `/dev/fuse`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Transport::Auto),
            "uring" | "io_uring" => Ok(Transport::Uring),
            "dev" | "/dev/fuse" => Ok(Transport::Dev),
            _ => Err(format!("unknown transport {s:?} (expected auto, uring or dev)")),
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The transport a session actually uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    /// FUSE-over-io_uring (with a `/dev/fuse` reader for FORGET/INTERRUPT).
    IoUring,
    /// `/dev/fuse` read/write.
    DevFuse,
}

impl TransportKind {
    /// `"io_uring"` or `"/dev/fuse"`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::IoUring => "io_uring",
            TransportKind::DevFuse => "/dev/fuse",
        }
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`Session::transport_info`](crate::Session::transport_info) reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportInfo {
    /// What was asked for ([`MountOptions::transport`](crate::MountOptions::transport)).
    pub requested: Transport,
    /// What is in use.
    pub kind: TransportKind,
    /// io_uring: the number of queues (one per possible CPU). `/dev/fuse`: 0
    /// (the reader threads are `Session::run`'s `workers`).
    pub queues: usize,
    /// io_uring: registered entries per queue. `/dev/fuse`: 0.
    pub depth: usize,
    /// io_uring: the payload buffer size of each entry in bytes. `/dev/fuse`: 0.
    pub payload_size: usize,
    /// Why `/dev/fuse` is used although `Auto` was asked for (io_uring
    /// unavailable, or failed to start and the mount was redone); `None`
    /// when the transport is the one asked for, or `Dev` was asked for.
    pub reason: Option<String>,
}

impl std::fmt::Display for TransportInfo {
    /// E.g. `io_uring (2 queues x 4 entries)` or `/dev/fuse (io_uring unavailable: ...)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            TransportKind::IoUring => write!(f, "io_uring ({} queues x {} entries)", self.queues, self.depth)?,
            TransportKind::DevFuse => f.write_str("/dev/fuse")?,
        }
        if let Some(r) = &self.reason {
            write!(f, " ({r})")?;
        }
        Ok(())
    }
}

/// Whether this kernel lets a daemon use FUSE-over-io_uring: Ok, or the
/// reason it does not (naming [`ENABLE_URING_PARAM`]).
pub fn uring_available() -> Result<(), String> {
    match std::fs::read_to_string(ENABLE_URING_PARAM) {
        Ok(s) if s.trim() == "Y" || s.trim() == "1" => Ok(()),
        Ok(s) => Err(format!(
            "{ENABLE_URING_PARAM} is {} (as root: echo Y > {ENABLE_URING_PARAM})",
            s.trim()
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "kernel without FUSE-over-io_uring: {ENABLE_URING_PARAM} does not exist (needs Linux 6.14+ with CONFIG_FUSE_IO_URING)"
        )),
        Err(e) => Err(format!("cannot read {ENABLE_URING_PARAM}: {e}")),
    }
}

/// The number of queues the kernel expects: highest id in
/// `/sys/devices/system/cpu/possible` + 1.
pub fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(&s)
        .and_then(|v| v.into_iter().max())
        .map(|m| m + 1)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("cannot parse cpu list {s:?}")))
}

/// Parses a kernel cpu list such as `0-3,5,7-8`.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                v.extend(a..=b);
            }
            None => v.push(part.parse().ok()?),
        }
    }
    (!v.is_empty()).then_some(v)
}

/// Undoes `/proc/self/mountinfo` octal escapes (`\040` for space, ...).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push(((b[i + 1] - b'0') << 6) | ((b[i + 2] - b'0') << 3) | (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// The FUSE connection number of the topmost FUSE mount on `mountpoint`
/// (the directory name under `/sys/fs/fuse/connections/`), read from
/// `/proc/self/mountinfo` so that no request is sent to a possibly hung mount.
pub fn connection_id(mountpoint: &Path) -> Option<u32> {
    use std::os::unix::ffi::OsStrExt;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // Resolve the parent only: stat-ing the mount point itself could hang.
    let resolved = match (mountpoint.parent(), mountpoint.file_name()) {
        (Some(p), Some(name)) if !p.as_os_str().is_empty() => p.canonicalize().ok().map(|p| p.join(name)),
        _ => None,
    };
    let mountpoint = resolved.as_deref().unwrap_or(mountpoint);
    let want = mountpoint.as_os_str().as_bytes();
    let mut found = None;
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 10 || unescape(f[4]) != want {
            continue;
        }
        let Some(sep) = f.iter().position(|&x| x == "-") else { continue };
        if !f.get(sep + 1).is_some_and(|t| *t == "fuse" || t.starts_with("fuse.")) {
            continue;
        }
        let (maj, min) = f[2].split_once(':')?;
        let (maj, min): (u32, u32) = (maj.parse().ok()?, min.parse().ok()?);
        found = Some((maj << 20) | min);
    }
    found
}

/// The device number of the topmost mount (any type) on `mountpoint`, from
/// `/proc/self/mountinfo` (no access to the mount itself).
pub(crate) fn top_mount_dev(mountpoint: &Path) -> Option<u32> {
    use std::os::unix::ffi::OsStrExt;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let resolved = match (mountpoint.parent(), mountpoint.file_name()) {
        (Some(p), Some(name)) if !p.as_os_str().is_empty() => p.canonicalize().ok().map(|p| p.join(name)),
        _ => None,
    };
    let want = resolved.as_deref().unwrap_or(mountpoint).as_os_str().as_bytes().to_vec();
    let mut found = None;
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 10 || unescape(f[4]) != want {
            continue;
        }
        let Some((maj, min)) = f[2].split_once(':') else { continue };
        if let (Ok(maj), Ok(min)) = (maj.parse::<u32>(), min.parse::<u32>()) {
            found = Some((maj << 20) | min);
        }
    }
    found
}

/// Aborts the FUSE connection mounted on `mountpoint` through
/// `/sys/fs/fuse/connections/<id>/abort`: every pending and future request
/// fails with ECONNABORTED/ENOTCONN, ring entries complete, nothing hangs.
/// Err if the control filesystem or the connection is not found.
///
/// If the FUSE control filesystem is not mounted yet, mounts it at its
/// standard place (`mount -t fusectl none /sys/fs/fuse/connections`, as
/// systemd does at boot; needs root).
pub fn abort_connection(mountpoint: &Path) -> io::Result<()> {
    let id = connection_id(mountpoint).ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no FUSE mount there"))?;
    abort_connection_id(id)
}

/// Aborts FUSE connection `id` (see [`abort_connection`]; `id` as from
/// [`connection_id`]).
pub fn abort_connection_id(id: u32) -> io::Result<()> {
    let file = format!("/sys/fs/fuse/connections/{id}/abort");
    if !Path::new(&file).exists() {
        mount_fusectl();
    }
    std::fs::write(&file, b"1")
}

fn mount_fusectl() {
    const DIR: &std::ffi::CStr = c"/sys/fs/fuse/connections";
    // SAFETY: mount(2) with constant NUL-terminated strings; fails harmlessly
    // (EBUSY) if it is already mounted.
    let r = unsafe { libc::mount(c"fusectl".as_ptr(), DIR.as_ptr(), c"fusectl".as_ptr(), 0, std::ptr::null()) };
    if r == 0 {
        tracing::info!("mounted the FUSE control filesystem on /sys/fs/fuse/connections");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_transport_and_unescape() {
        assert_eq!("auto".parse::<Transport>().unwrap(), Transport::Auto);
        assert_eq!("uring".parse::<Transport>().unwrap(), Transport::Uring);
        assert_eq!("dev".parse::<Transport>().unwrap(), Transport::Dev);
        assert!("x".parse::<Transport>().is_err());
        assert_eq!(unescape(r"/a\040b\134c"), b"/a b\\c");
        assert_eq!(parse_cpu_list("0-3,5\n"), Some(vec![0, 1, 2, 3, 5]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list(""), None);
    }
}
