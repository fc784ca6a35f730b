//! What `ringfs mount` checks before it creates anything: who runs it, the
//! options, the ignore patterns, the mountpoint, where the store, the
//! local-only directory and the log go. A refused mount leaves no
//! directory, lock or log behind; every refusal is one line naming the
//! problem and the fix. Also the explanation of store errors (a lock held
//! by another process, a read-only or immutable store).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

use crate::cli::MountArgs;
use crate::mountpoint;
use crate::options::Vfs;

/// Where the store goes, resolved but not created yet.
#[derive(Debug, Clone)]
pub enum StorePlan {
    Dir(PathBuf),
    Memory,
}

/// A checked `ringfs mount`.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The mountpoint, resolved (no symbolic link, `.` or `..`).
    pub mp: PathBuf,
    pub store: StorePlan,
    /// `--local-dir`, resolved (the store's `local` when None).
    pub local_dir: Option<PathBuf>,
    /// `--ignore` then RINGFS_IGNORE.
    pub ignore: Vec<String>,
    /// The mount flags.
    pub vfs: Vfs,
}

/// Whether we are root in the initial user namespace (set-user-ID files
/// and device nodes honoured by the mount are only safe then).
fn init_root() -> bool {
    rustix::process::geteuid().is_root()
        && std::fs::read_to_string("/proc/self/uid_map")
            .map(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"])
            .unwrap_or(false)
}

/// The mount needs root; `--suid`/`--dev` need root outside any user namespace.
pub fn require_root(vfs: &Vfs) -> Result<()> {
    for (off, what) in [(vfs.nosuid, "--suid (-o suid)"), (vfs.nodev, "--dev (-o dev)")] {
        if !off && !init_root() {
            bail!(
                "{what} needs root in the initial user namespace (honouring set-user-ID files or device nodes on a FUSE mount is a privilege escalation otherwise): run ringfs mount as root, or leave it out (the mount is nosuid,nodev by default)"
            );
        }
    }
    if !rustix::process::geteuid().is_root() {
        bail!("ringfs mount needs root (mount(2) of a FUSE filesystem needs CAP_SYS_ADMIN): run it as root, e.g. with sudo");
    }
    Ok(())
}

/// Checks everything `ringfs mount` can check before creating anything.
pub fn check(args: &MountArgs) -> Result<Plan> {
    let vfs = Vfs::parse(args, Vfs::default())?;
    require_root(&vfs)?;
    let store = match (&args.store, args.memory) {
        (Some(d), false) => Some(d),
        (None, true) => None,
        (None, false) => bail!("no store given: give --store DIR (a durable store, created if missing) or --memory (contents vanish at unmount)"),
        (Some(_), true) => bail!("both --store and --memory given: give one of them"),
    };
    let ignore = ignore_patterns(args)?;
    let mp = mountpoint::check_mountable(&args.mountpoint, args.nonempty)?;
    let store = match store {
        None => StorePlan::Memory,
        Some(d) => {
            let d = mountpoint::resolve(d)?;
            if d.starts_with(&mp) {
                bail!("--store {} is inside the mountpoint {}: put the store outside the workspace (the mount would hide it)", d.display(), mp.display());
            }
            if mp.starts_with(&d) {
                bail!("the mountpoint {} is inside the store {}: choose a mountpoint outside the store directory", mp.display(), d.display());
            }
            if d.exists() && !d.is_dir() {
                bail!("--store {} exists and is not a directory: give a directory (created if missing)", d.display());
            }
            not_someone_elses("--store", &d)?;
            if let Some(at) = on_read_only_fs(&d) {
                bail!("{}", read_only_store(&d, &at, vfs.read_only));
            }
            writable("--store", &d, &["ringfs.lock", "store.redb", "wc", "local"])?;
            StorePlan::Dir(d)
        }
    };
    let local_dir = match &args.local_dir {
        None => None,
        Some(l) => {
            let l = mountpoint::resolve(l)?;
            if l.starts_with(&mp) {
                bail!(
                    "--local-dir {} is inside the mountpoint {}: put it outside the workspace (the mount would hide it; default: STORE/local)",
                    l.display(),
                    mp.display()
                );
            }
            if mp.starts_with(&l) {
                bail!("the mountpoint {} is inside --local-dir {}: choose a mountpoint outside it", mp.display(), l.display());
            }
            if l.exists() && !l.is_dir() {
                bail!("--local-dir {} exists and is not a directory: give a directory (created if missing)", l.display());
            }
            if let StorePlan::Dir(d) = &store {
                let wc = d.join("wc");
                if &l == d || l.starts_with(&wc) || wc.starts_with(&l) {
                    bail!(
                        "--local-dir {} is the store directory {} or holds its working copies: give a directory of its own (default: STORE/local)",
                        l.display(),
                        d.display()
                    );
                }
            }
            writable("--local-dir", &l, &[])?;
            Some(l)
        }
    };
    Ok(Plan { mp, store, local_dir, ignore, vfs })
}

impl Plan {
    /// Creates the store and local-only directories; their canonical paths.
    pub fn create(&self) -> Result<(fs_core::StoreLocation, Option<PathBuf>)> {
        let store = match &self.store {
            StorePlan::Memory => fs_core::StoreLocation::Memory,
            StorePlan::Dir(d) => fs_core::StoreLocation::Dir(make_dir(d, "store directory")?),
        };
        let local = self.local_dir.as_deref().map(|l| make_dir(l, "local-only directory")).transpose()?;
        Ok((store, local))
    }
}

/// Makes `dir` (and missing parents) 0700 (D87): a store, or local-only
/// files, private to their owner.
fn make_dir(dir: &Path, what: &str) -> Result<PathBuf> {
    fs_core::private::create_dir_all(dir).with_context(|| format!("creating {what} {}", dir.display()))?;
    dir.canonicalize().with_context(|| format!("{what} {}", dir.display()))
}

/// `--log-file` (its directory must exist and be outside the mountpoint),
/// or the default next to the control socket.
pub fn log_path(args: &MountArgs, mp: &Path) -> Result<PathBuf> {
    let Some(p) = &args.log_file else {
        return Ok(crate::control::socket_path(mp).with_extension("log"));
    };
    let p = mountpoint::resolve(p)?;
    if p.starts_with(mp) {
        bail!("--log-file {} is inside the mountpoint {}: put the log outside the workspace", p.display(), mp.display());
    }
    let dir = p.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        bail!("--log-file {}: its directory {} does not exist: create it first (mkdir -p {}) or choose another --log-file", p.display(), dir.display(), dir.display());
    }
    if p.is_dir() {
        bail!("--log-file {} is a directory: give a file name", p.display());
    }
    Ok(p)
}

/// `--ignore` patterns, then those of RINGFS_IGNORE (newline- or
/// comma-separated). An invalid pattern is an error naming it, where it
/// came from and the fix.
fn ignore_patterns(args: &MountArgs) -> Result<Vec<String>> {
    let mut all: Vec<String> = Vec::new();
    for p in &args.ignore {
        if let Err((pattern, reason)) = fs_core::IgnorePolicy::new(&[p]) {
            bail!("invalid ignore pattern `{pattern}` given to --ignore: {reason}; fix the pattern (gitignore syntax)");
        }
        all.push(p.clone());
    }
    if let Ok(env) = std::env::var("RINGFS_IGNORE") {
        for p in env.split(['\n', ',']).map(str::trim).filter(|p| !p.is_empty()) {
            if let Err((pattern, reason)) = fs_core::IgnorePolicy::new(&[p]) {
                bail!("invalid ignore pattern `{pattern}` in the environment variable RINGFS_IGNORE: {reason}; fix it there or unset RINGFS_IGNORE");
            }
            all.push(p.to_string());
        }
    }
    if let Err((pattern, reason)) = fs_core::IgnorePolicy::new(&all) {
        bail!("invalid ignore patterns `{pattern}`: {reason}; fix the patterns (gitignore syntax)");
    }
    Ok(all)
}

/// faccessat(W_OK) with the effective ids: what a write would answer
/// (EROFS on a read-only filesystem, EPERM for an immutable file).
fn access_w(p: &Path) -> std::io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The nearest existing ancestor of `dir` (or `dir`) when it is on a
/// read-only filesystem (statvfs(2) `ST_RDONLY`: `mount -o ro`, a read-only
/// bind mount, a read-only medium), else `None`.
fn on_read_only_fs(dir: &Path) -> Option<PathBuf> {
    let at = dir.ancestors().find(|a| a.exists())?;
    let c = CString::new(at.as_os_str().as_bytes()).ok()?;
    // SAFETY: a valid NUL-terminated path and a zeroed out-struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    (st.f_flag & libc::ST_RDONLY != 0).then(|| at.to_path_buf())
}

/// The refusal of a store directory `d` on a read-only filesystem (`at`
/// is where it is read-only), for a read-only (`ro`) or read-write mount.
/// Even a read-only mount writes into its store (the lock file holding the
/// daemon's pid, redb's commit at open and close, the pool of empty working
/// copies): docs/SEMANTICS.md, "Store on a read-only filesystem".
fn read_only_store(d: &Path, at: &Path, ro: bool) -> String {
    let fresh = !d.join("store.redb").exists();
    let (d, at) = (d.display(), at.display());
    let copy = if fresh {
        // No store there yet: nothing to copy.
        format!("choose another --store on a writable filesystem, or remount {at} read-write")
    } else {
        format!("copy the store to a writable directory (`cp -a {d} NEWDIR`) and mount that, or remount {at} read-write")
    };
    if ro {
        format!("--store {d} is on a read-only filesystem ({at}), and even a read-only mount (-o ro) writes to its store (ringfs.lock, the database's commits, working copies): {copy}; `ringfs fsck --store {d}` checks it where it is")
    } else {
        format!("--store {d} is on a read-only filesystem ({at}): a mount writes to its store (-o ro too): {copy}")
    }
}

/// Checks that `dir` (or, when missing, its nearest existing ancestor, in
/// which it will be created) and its existing `files` can be written.
/// Why `dir` (given as `flag`) cannot be the store of an existing workspace
/// for a command that only reads one (fsck, salvage, gc --store): missing,
/// not a directory, unreadable, or holding no store.redb, wc/ or packs/.
/// `None`: it looks like a store.
pub fn not_a_store(flag: &str, dir: &Path) -> Option<String> {
    let d = dir.display();
    match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!("{flag} {d} does not exist: give the store directory of a ringfs workspace")),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Some(format!("{flag} {d} is not a directory: give the store directory of a ringfs workspace")),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Some(format!("{flag} {d} cannot be read by this user ({e}): run as its owner or root, or fix its permissions"))
        }
        Err(e) => Some(format!("{flag} {d} cannot be read ({e})")),
        Ok(_) if !["store.redb", "wc", "packs"].iter().any(|f| dir.join(f).exists()) => {
            Some(format!("{flag} {d} is not a ringfs store (no store.redb, wc/ or packs/ in it): give the store directory of a ringfs workspace"))
        }
        Ok(_) => None,
    }
}

/// [`not_a_store`] as an error, of kind `not_found` (`io` for a directory
/// that cannot be read) for `--json`'s error document.
pub fn store_there(flag: &str, dir: &Path) -> Result<()> {
    use ringfs::errors::{failure, ErrorKind};
    match not_a_store(flag, dir) {
        Some(m) if dir.is_dir() && std::fs::read_dir(dir).is_err() => Err(failure(ErrorKind::Io, m, None)),
        Some(m) => Err(failure(ErrorKind::NotFound, m, None)),
        None => Ok(()),
    }
}

/// Names a store directory holds (docs/FORMATS.md); one of them marks a
/// directory as a store.
const STORE_NAMES: &[&str] = &["store.redb", "ringfs.lock", "wc", "packs", "local", "lost+found"];

/// A non-empty directory with none of a store's names is someone else's
/// (a home directory, another store's `wc/`): never filled with a store.
fn not_someone_elses(flag: &str, dir: &Path) -> Result<()> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Ok(()) };
    let names: Vec<String> = rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    if names.is_empty() || names.iter().any(|n| STORE_NAMES.contains(&n.as_str()) || n.starts_with("store.redb")) {
        return Ok(());
    }
    let mut some: Vec<&str> = names.iter().map(|n| n.as_str()).take(3).collect();
    some.sort();
    bail!(
        "{flag} {} is not empty and holds no ringfs store (it has {}{}): give a new or empty directory, or the directory of an existing store",
        dir.display(),
        some.join(", "),
        if names.len() > 3 { ", …" } else { "" }
    )
}

fn writable(flag: &str, dir: &Path, files: &[&str]) -> Result<()> {
    let mut at = dir;
    while !at.exists() {
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    let mut check: Vec<PathBuf> = vec![at.to_path_buf()];
    if at == dir {
        check.extend(files.iter().map(|f| dir.join(f)).filter(|p| p.exists()));
    }
    for p in check {
        if let Err(e) = access_w(&p) {
            return Err(anyhow!(unwritable(flag, &p, &e)));
        }
    }
    Ok(())
}

/// The one-line explanation of a path that cannot be written.
fn unwritable(flag: &str, p: &Path, e: &std::io::Error) -> String {
    let p = p.display();
    match e.raw_os_error() {
        Some(libc::EROFS) => format!("{flag}: {p} is on a read-only filesystem ({e}): remount that filesystem read-write or choose another {flag}"),
        Some(libc::EPERM) => format!(
            "{flag}: {p} cannot be written ({e}): it is probably immutable (`lsattr -d {p}` shows `i`; `chattr -i {p}` undoes it), or choose another {flag}"
        ),
        Some(libc::EACCES) => format!("{flag}: {p} is not writable by this user ({e}): fix its permissions or choose another {flag}"),
        _ => format!("{flag}: {p} cannot be written ({e}): choose another {flag}"),
    }
}

/// The process holding the flock on `lock` (from /proc/locks), with its command name.
fn lock_holder(lock: &Path) -> Option<(i32, String)> {
    let meta = std::fs::metadata(lock).ok()?;
    let (major, minor, ino) = (libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino());
    let want = format!("{major:02x}:{minor:02x}:{ino}");
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 2254 00:19:1234 0 EOF"; waiters have "->".
        if f.len() < 6 || f[1] == "->" || f[1] != "FLOCK" || f[5] != want {
            return None;
        }
        let pid: i32 = f[4].parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim().to_string()).unwrap_or_else(|_| "?".into());
        Some((pid, comm))
    })
}

/// Whether `pid` runs the ringfs binary.
fn is_ringfs(pid: i32, comm: &str) -> bool {
    comm == "ringfs"
        || std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().starts_with("ringfs")))
            .unwrap_or(false)
}

/// The error of a `CMD --store DIR` command (`ringfs gc`, `ringfs log`)
/// whose store is held by a running daemon: give the mountpoint instead;
/// any other store error as [`explain_store_error`].
pub fn store_command_error(e: fs_core::StoreError, dir: &Path, cmd: &str) -> anyhow::Error {
    match e {
        fs_core::StoreError::Locked { pid, .. } => anyhow!(
            "store {} is in use by a running daemon{}: give its mountpoint instead (ringfs {cmd} MOUNTPOINT)",
            dir.display(),
            pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
        ),
        e => explain_store_error(e, "--store"),
    }
}

/// Turns a store error into one line naming the problem and the fix.
pub fn explain_store_error(e: fs_core::StoreError, flag: &str) -> anyhow::Error {
    use fs_core::StoreError;
    match &e {
        StoreError::Locked { pid, path } => {
            let lock = path.join("ringfs.lock");
            match lock_holder(&lock) {
                Some((holder, comm)) if !is_ringfs(holder, &comm) => anyhow!(
                    "store {} is locked by pid {holder} ({comm}), which is not a ringfs daemon (lock file {}{}): stop that process or choose another {flag}",
                    path.display(),
                    lock.display(),
                    match pid {
                        Some(p) if *p as i32 != holder => format!("; the pid written in it, {p}, is stale"),
                        _ => String::new(),
                    }
                ),
                Some((holder, _)) => anyhow!(
                    "store {} is in use by another ringfs process (pid {holder}; lock file {}): unmount its workspace (`ringfs umount MOUNTPOINT`) or stop it first",
                    path.display(),
                    lock.display()
                ),
                None => anyhow!(e),
            }
        }
        StoreError::Io { path, source } if matches!(source.raw_os_error(), Some(libc::EROFS | libc::EPERM | libc::EACCES)) => {
            anyhow!(unwritable(flag, path, source))
        }
        _ => anyhow!(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritable_names_the_fix() {
        let m = unwritable("--store", Path::new("/s/ringfs.lock"), &std::io::Error::from_raw_os_error(libc::EROFS));
        assert!(m.contains("read-only") && m.contains("remount") && m.contains("another --store"), "{m}");
        let m = unwritable("--store", Path::new("/s"), &std::io::Error::from_raw_os_error(libc::EPERM));
        assert!(m.contains("chattr -i /s"), "{m}");
    }
}
