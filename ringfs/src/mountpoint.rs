//! Mountpoint checks, path resolution, the claim on a mountpoint, and
//! `/proc/self/mountinfo` lookups (proc(5)).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};

/// One line of `/proc/self/mountinfo` that we care about.
#[derive(Debug, Clone)]
pub struct MountEntry {
    /// Mount ID (field 1); a remount keeps it.
    pub id: u64,
    /// Mount point, unescaped (field 5).
    pub mount_point: PathBuf,
    /// Per-mount options (field 6), e.g. `rw,nosuid,nodev,relatime`.
    pub options: String,
    /// Filesystem type after the separator, e.g. `fuse.ringfs`.
    pub fstype: String,
    /// Superblock options (the last field), e.g. `rw,user_id=0,…`.
    pub super_options: String,
}

/// Parses mountinfo text; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            if sep < 6 || f.len() < sep + 4 {
                return None;
            }
            Some(MountEntry {
                id: f[0].parse().ok()?,
                mount_point: PathBuf::from(native_roots::unescape(f[4])),
                options: f[5].to_string(),
                fstype: f[sep + 1].to_string(),
                super_options: f[sep + 3].to_string(),
            })
        })
        .collect()
}

/// All mounts visible in this mount namespace, in mount order.
pub fn mounts() -> Result<Vec<MountEntry>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    Ok(parse_mountinfo(&text))
}

/// The topmost mount whose mount point is exactly `path`, if any.
pub fn mount_at(path: &Path) -> Result<Option<MountEntry>> {
    Ok(mounts()?.into_iter().rev().find(|m| m.mount_point == path))
}

/// Whether the topmost mount at `path` is a ringfs FUSE mount.
pub fn is_ringfs_mount(path: &Path) -> Result<bool> {
    Ok(mount_at(path)?.is_some_and(|m| m.fstype == fuse_uring::session::FSTYPE))
}

/// Resolves a path given on the command line to an absolute one without
/// `.`, `..` or symbolic links, as realpath(1) would, but without
/// following anything into a mount that may be dead: each component is
/// looked at with lstat, a symbolic link replaced by its target, and a
/// component that cannot be looked at (missing, or a FUSE mount whose
/// daemon is gone: ENOTCONN) taken as it is.
pub fn resolve(path: &Path) -> Result<PathBuf> {
    let abs = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir()?.join(path) };
    let mut todo: VecDeque<OsString> = VecDeque::new();
    push_components(&mut todo, &abs, false);
    let mut out = PathBuf::from("/");
    let mut links = 0;
    while let Some(c) = todo.pop_front() {
        if c == "." {
            continue;
        }
        if c == ".." {
            // `out` has no symbolic link in it: lexical is right here.
            out.pop();
            continue;
        }
        let candidate = out.join(&c);
        match std::fs::symlink_metadata(&candidate) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > 40 {
                    bail!("{}: too many levels of symbolic links", path.display());
                }
                let target = std::fs::read_link(&candidate).with_context(|| format!("reading the link {}", candidate.display()))?;
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                push_components(&mut todo, &target, true);
            }
            _ => out = candidate,
        }
    }
    Ok(out)
}

/// Queues the components of `p` (at the front when `front`, keeping order).
fn push_components(todo: &mut VecDeque<OsString>, p: &Path, front: bool) {
    let parts: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::CurDir => Some(".".into()),
            Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    if front {
        for part in parts.into_iter().rev() {
            todo.push_front(part);
        }
    } else {
        todo.extend(parts);
    }
}

/// Check that `path` can be mounted on: it exists, is a directory, is not
/// already a mount point and (unless `nonempty`) is empty. Returns the
/// resolved path. Errors are one line that names the problem and the fix.
pub fn check_mountable(path: &Path, nonempty: bool) -> Result<PathBuf> {
    let abs = resolve(path)?;
    let meta = match std::fs::metadata(&abs) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("mountpoint {} does not exist: create it first (mkdir -p {})", abs.display(), abs.display())
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            bail!(
                "mountpoint {} is a dead ringfs mount (its daemon is gone): run `ringfs umount {}` first",
                abs.display(),
                abs.display()
            )
        }
        Err(e) => bail!("mountpoint {}: {e}", abs.display()),
    };
    if !meta.is_dir() {
        bail!("mountpoint {} is not a directory: mount on an empty directory", abs.display());
    }
    if let Some(m) = mount_at(&abs)? {
        if m.fstype == fuse_uring::session::FSTYPE {
            bail!("mountpoint {} is already a ringfs mount: unmount it first with `ringfs umount {}`", abs.display(), abs.display());
        }
        bail!("mountpoint {} is already a mount point ({}): choose another directory or unmount it first", abs.display(), m.fstype);
    }
    if !nonempty {
        let mut entries = std::fs::read_dir(&abs).with_context(|| format!("mountpoint {}", abs.display()))?;
        if let Some(first) = entries.next() {
            let first = first.map(|e| e.file_name().to_string_lossy().into_owned()).unwrap_or_default();
            let more = entries.count();
            bail!(
                "mountpoint {} is not empty ({} entr{}, e.g. `{first}`), and the mount would hide them: empty it, choose an empty directory, or pass --nonempty (-o nonempty)",
                abs.display(),
                more + 1,
                if more == 0 { "y" } else { "ies" }
            );
        }
    }
    Ok(abs)
}

/// Environment variable through which a `--daemon` parent hands its child
/// the claim it took on the mountpoint (an inherited descriptor).
const CLAIM_FD_ENV: &str = "RINGFS_CLAIM_FD";

/// How long a mount waits for the daemon that served its mountpoint
/// before to finish exiting (its final commit after an unmount).
pub const EXITING_DAEMON_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The claim of one `ringfs mount` on a mountpoint, from before anything
/// is created until the daemon exits: an exclusive flock on
/// `<runtime dir>/<id>.claim` holding the claimer's pid, followed by
/// ` exiting` once its session has ended. A second `ringfs mount` of the
/// same mountpoint (say two started at the same moment) fails at once
/// instead of stacking a second mount on the first; one that finds the
/// previous daemon exiting (after `umount MOUNTPOINT`) waits for it, up
/// to [`EXITING_DAEMON_WAIT`], saying so on stderr.
pub struct Claim {
    file: File,
    path: PathBuf,
    /// Handed to a child: not ours to remove.
    handed_over: bool,
}

impl Claim {
    /// Takes the claim on the resolved mountpoint `mp`, or fails naming the
    /// process that holds it; waits (bounded) for a holder that is exiting.
    pub fn take(mp: &Path) -> Result<Claim> {
        Claim::take_waiting(mp, EXITING_DAEMON_WAIT)
    }

    /// [`Claim::take`], waiting at most `wait` for an exiting holder.
    fn take_waiting(mp: &Path, wait: std::time::Duration) -> Result<Claim> {
        if let Some(c) = Claim::inherited()? {
            return Ok(c);
        }
        let path = crate::control::claim_path(mp);
        let dir = path.parent().expect("claim path has a parent");
        crate::control::make_runtime_dir(dir)?;
        let deadline = std::time::Instant::now() + wait;
        // The exiting daemon waited for: once its claim is free, wait for
        // the process itself to go (it still holds its store's lock).
        let mut waited: Option<u32> = None;
        loop {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("opening the mountpoint claim {}", path.display()))?;
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                    return Err(e).with_context(|| format!("locking the mountpoint claim {}", path.display()));
                }
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                // The file may be NUL-padded (rewritten shorter in place).
                let text = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
                let (pid, exiting) = match text.split_once(' ') {
                    Some((pid, state)) => (pid, state.trim() == "exiting"),
                    None => (text, false),
                };
                if exiting && std::time::Instant::now() < deadline {
                    let p: Option<u32> = pid.parse().ok();
                    if waited.is_none() || waited != p {
                        eprintln!(
                            "ringfs: waiting for the daemon{} that served {} to finish exiting (its final commit; up to {} s)",
                            if pid.is_empty() { String::new() } else { format!(" (pid {pid})") },
                            mp.display(),
                            wait.as_secs()
                        );
                        waited = p.or(Some(0));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    continue;
                }
                if exiting {
                    bail!(
                        "mountpoint {}: the daemon that served it (pid {pid}) is still finishing its final commit after {} s: wait for it (see its log), then mount again",
                        mp.display(),
                        wait.as_secs()
                    );
                }
                bail!(
                    "mountpoint {} is being mounted or served by another ringfs{}: wait for it to finish, or unmount it with `ringfs umount {}`",
                    mp.display(),
                    if pid.is_empty() { String::new() } else { format!(" (pid {pid})") },
                    mp.display()
                );
            }
            // Its last holder removes the file before letting go: make sure
            // the file we locked is still the one at the path.
            let same = std::fs::metadata(&path).ok().zip(file.metadata().ok()).is_some_and(|(a, b)| a.ino() == b.ino() && a.dev() == b.dev());
            if !same {
                continue;
            }
            if let Some(pid) = waited.filter(|p| *p != 0) {
                wait_gone(pid, deadline);
            }
            let _ = file.set_len(0);
            let _ = writeln!(file, "{}", std::process::id());
            return Ok(Claim { file, path, handed_over: false });
        }
    }

    /// The claim a `--daemon` parent handed down, if any.
    fn inherited() -> Result<Option<Claim>> {
        let Some(fd) = std::env::var(CLAIM_FD_ENV).ok().and_then(|v| v.parse::<RawFd>().ok()) else {
            return Ok(None);
        };
        std::env::remove_var(CLAIM_FD_ENV);
        // SAFETY: the parent left this descriptor open for us and nothing else owns it.
        let mut file = unsafe { File::from_raw_fd(fd) };
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        let path = std::fs::read_link(format!("/proc/self/fd/{fd}")).context("the inherited mountpoint claim")?;
        let _ = file.set_len(0);
        let _ = writeln!(file, "{}", std::process::id());
        Ok(Some(Claim { file, path, handed_over: false }))
    }

    /// Makes the claim's descriptor inheritable by a child about to be
    /// started with `cmd`: the child takes it over ([`Claim::take`]).
    pub fn hand_to(&mut self, cmd: &mut std::process::Command) {
        let fd = self.file.as_raw_fd();
        cmd.env(CLAIM_FD_ENV, fd.to_string());
        // SAFETY: fcntl between fork and exec is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(cmd, move || {
                libc::fcntl(fd, libc::F_SETFD, 0);
                Ok(())
            });
        }
    }

    /// In the child a `--daemon` parent forked without exec: the claim is
    /// this process's, and [`Claim::take`] takes it over (as an exec'd
    /// child's does, from the same descriptor).
    pub fn pass_to_forked_child(mut self) {
        self.handed_over = true;
        std::env::set_var(CLAIM_FD_ENV, self.file.as_raw_fd().to_string());
        // The descriptor stays open for `take`; nothing is removed.
        std::mem::forget(self);
    }

    /// In a daemon that refuses before taking its claim (`--at` naming no
    /// commit): removes the claim its parent handed down, if any.
    pub fn drop_inherited() {
        if let Ok(Some(c)) = Claim::inherited() {
            drop(c);
        }
    }

    /// The child now holds the claim: do not remove it when this process exits.
    pub fn handed_over(&mut self) {
        self.handed_over = true;
    }

    /// The daemon's session has ended (unmounted): a mount of the same
    /// mountpoint from now on waits for this process to exit instead of
    /// failing ([`Claim::take`]).
    pub fn mark_exiting(&self) {
        use std::os::unix::fs::FileExt;
        let _ = self.file.set_len(0);
        let _ = self.file.write_at(format!("{} exiting\n", std::process::id()).as_bytes(), 0);
    }
}

/// Waits until process `pid` is gone (or a zombie: its descriptors, and
/// with them its store's lock, are closed), at most until `deadline`.
fn wait_gone(pid: u32, deadline: std::time::Instant) {
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
            .unwrap_or(false)
    };
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.handed_over {
            // Removed while still locked (see `take`).
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The log a `--daemon` mount opens for its daemon's stdout and stderr.
/// Every daemon holds a shared flock(2) on it for its life (the lock goes
/// with the open file description, which the daemon's stdout and stderr
/// share), so a refused mount removes a log only when it created the file
/// and no other daemon writes to it (two mounts naming one `--log-file` at
/// the same moment).
pub struct DaemonLog {
    /// Open for appending, shared lock held.
    pub file: File,
    /// (st_dev, st_ino) when this mount created the file.
    created: Option<(u64, u64)>,
}

impl DaemonLog {
    /// Opens (creating, mode 0600: D87) `path` for appending and takes the
    /// shared lock. Errors: the file cannot be opened or locked.
    pub fn open(path: &Path) -> Result<DaemonLog> {
        let ctx = || format!("opening log file {}", path.display());
        loop {
            let (file, created) = match std::fs::OpenOptions::new().append(true).create_new(true).mode(0o600).open(path) {
                Ok(f) => (f, true),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match std::fs::OpenOptions::new().append(true).open(path) {
                    Ok(f) => (f, false),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e).with_context(ctx),
                },
                Err(e) => return Err(e).with_context(ctx),
            };
            rustix::fs::flock(&file, rustix::fs::FlockOperation::LockShared).with_context(ctx)?;
            // A refused mount may have removed the name between our open and our lock.
            let m = file.metadata().with_context(ctx)?;
            match std::fs::metadata(path) {
                Ok(n) if (n.dev(), n.ino()) == (m.dev(), m.ino()) => {
                    return Ok(DaemonLog { file, created: created.then(|| (m.dev(), m.ino())) });
                }
                _ => continue,
            }
        }
    }

    /// After the daemon refused and exited: drops this handle and removes
    /// `path` if this mount created it and no other daemon holds it.
    pub fn remove_unused(self, path: &Path) {
        let DaemonLog { file, created } = self;
        drop(file);
        let Some(id) = created else { return };
        let Ok(f) = std::fs::OpenOptions::new().append(true).open(path) else { return };
        let same = f.metadata().is_ok_and(|m| (m.dev(), m.ino()) == id);
        if same && rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok() {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_a_mount() {
        assert!(mount_at(Path::new("/")).unwrap().is_some());
    }

    #[test]
    fn resolve_follows_links_and_dots() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("d")).unwrap();
        std::os::unix::fs::symlink(real.join("d"), real.join("abs")).unwrap();
        std::os::unix::fs::symlink("d/../d", real.join("rel")).unwrap();
        assert_eq!(resolve(&real.join("abs")).unwrap(), real.join("d"));
        assert_eq!(resolve(&real.join("rel")).unwrap(), real.join("d"));
        assert_eq!(resolve(&real.join("d/../d/./")).unwrap(), real.join("d"));
        assert_eq!(resolve(&real.join("abs/../missing/x/..")).unwrap(), real.join("missing"));
        std::os::unix::fs::symlink("loop", real.join("loop")).unwrap();
        assert!(resolve(&real.join("loop")).is_err());
    }

    #[test]
    fn mountinfo_fields() {
        let m = parse_mountinfo("36 35 0:52 / /work/w\\040s rw,nosuid,nodev,noatime shared:1 - fuse.ringfs /s ro,user_id=0\n");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].mount_point, Path::new("/work/w s"));
        assert_eq!((m[0].id, m[0].options.as_str(), m[0].fstype.as_str(), m[0].super_options.as_str()), (36, "rw,nosuid,nodev,noatime", "fuse.ringfs", "ro,user_id=0"));
    }
}
