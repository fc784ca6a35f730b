//! Local-only paths: the ignore policy (gitignore semantics, from the
//! `ignore` crate) and confined access to the backing directories.
//!
//! Owns: matching a path against the patterns, and every file operation in
//! a backing directory (through its descriptor, never a path from outside).
//! Must not touch: the inode table, the store.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{Mode, OFlags, ResolveFlags};

/// The name a freed file's backing file is set aside under until the
/// durable commit that records the free (D76): `.doomed-<inode>`, in the
/// same directory. Recovery after a crash puts it back as `<inode>` if the
/// store still names the inode, and deletes it otherwise.
pub(crate) fn doomed_name(ino: u64) -> String {
    format!(".doomed-{ino}")
}

/// The inode a [`doomed_name`] names; `None` for any other name.
pub(crate) fn doomed_ino(name: &str) -> Option<u64> {
    name.strip_prefix(".doomed-")?.parse().ok()
}

/// Which paths of a workspace are local-only: gitignore patterns matched
/// against the path relative to the workspace root (`node_modules` at any
/// depth, `/dist` only at the root, `**/target`, `!keep` re-includes).
/// As in git, nothing below an ignored directory can be re-included.
#[derive(Clone, Debug)]
pub struct IgnorePolicy {
    matcher: Gitignore,
    patterns: Vec<String>,
}

impl IgnorePolicy {
    /// Builds the matcher. Err: (the offending pattern, why).
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<IgnorePolicy, (String, String)> {
        let mut b = GitignoreBuilder::new("/");
        // A `[` without `]` is an error here (git would take it literally):
        // a typo in a pattern should fail the mount, not match nothing.
        b.allow_unclosed_class(false);
        let mut kept = Vec::new();
        for p in patterns {
            let p = p.as_ref();
            if p.trim().is_empty() {
                continue;
            }
            // Lines gitignore reads as nothing: a pattern that matches
            // nothing is a mistake, not a no-op.
            if p.trim() == "!" {
                return Err((p.to_string(), "`!` alone re-includes nothing: write `!PATTERN` to re-include what PATTERN matches".into()));
            }
            if p.starts_with('#') {
                return Err((p.to_string(), "a pattern starting with `#` is a comment and matches nothing: write `\\#` for a name that starts with #".into()));
            }
            b.add_line(None, p).map_err(|e| (p.to_string(), e.to_string()))?;
            kept.push(p.to_string());
        }
        let matcher = b.build().map_err(|e| (kept.join(", "), e.to_string()))?;
        Ok(IgnorePolicy { matcher, patterns: kept })
    }

    /// No patterns: nothing is local-only.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Does `rel` (relative to the workspace root, no leading '/') match on
    /// its own (ancestors are the caller's business)?
    pub fn matches(&self, rel: &[u8], is_dir: bool) -> bool {
        if self.patterns.is_empty() {
            return false;
        }
        self.matcher.matched(Path::new(OsStr::from_bytes(rel)), is_dir).is_ignore()
    }
}

/// A backing directory (working copies, or local-only files), used only
/// through its descriptor: every open is an `openat2` with RESOLVE_BENEATH,
/// RESOLVE_NO_MAGICLINKS and RESOLVE_NO_SYMLINKS, every unlink and rename is
/// `*at` on a single name (which never follows a symlink), so a symlink
/// planted in the directory cannot lead the daemon outside it.
#[derive(Debug)]
pub(crate) struct BackDir {
    fd: OwnedFd,
    path: PathBuf,
    /// Entries made here (creates, renames in), counted, and the count the
    /// last fsync(2) of the directory covered ([`BackDir::sync_entries`]).
    made: AtomicU64,
    synced: AtomicU64,
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS).union(ResolveFlags::NO_SYMLINKS);

impl BackDir {
    /// Opens (creating if missing, mode 0700: D87) the directory at `path`.
    pub(crate) fn open(path: &Path) -> std::io::Result<BackDir> {
        crate::private::create_dir_all(path)?;
        let fd = rustix::fs::open(path, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(BackDir { fd, path: path.to_path_buf(), made: AtomicU64::new(0), synced: AtomicU64::new(0) })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Makes every entry made here so far durable: fsync(2) of the
    /// directory, unless no entry was made since the last one (so an
    /// fsync of a file costs a directory sync once per new working copy,
    /// not per call). Errors: fsync's.
    pub(crate) fn sync_entries(&self) -> std::io::Result<()> {
        let made = self.made.load(Ordering::SeqCst);
        if self.synced.load(Ordering::SeqCst) >= made {
            return Ok(());
        }
        rustix::fs::fsync(&self.fd)?;
        self.synced.fetch_max(made, Ordering::SeqCst);
        Ok(())
    }

    /// Counts entries that may not be durable yet although this process
    /// made none (those a mount finds): the next [`BackDir::sync_entries`]
    /// syncs the directory. (What a mount of a cleanly shut down store
    /// does instead of syncing both directories itself, D61.)
    pub(crate) fn note_unsynced(&self) {
        self.made.fetch_add(1, Ordering::SeqCst);
    }

    /// fsync(2) of the directory, whatever was made in it.
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        let made = self.made.load(Ordering::SeqCst);
        rustix::fs::fsync(&self.fd)?;
        self.synced.fetch_max(made, Ordering::SeqCst);
        Ok(())
    }

    fn openat(&self, name: &str, flags: OFlags) -> std::io::Result<File> {
        // openat2 rejects a mode without O_CREAT.
        let mode = if flags.contains(OFlags::CREATE) { Mode::from_raw_mode(0o600) } else { Mode::empty() };
        let fd = rustix::fs::openat2(self.fd.as_fd(), name, flags | OFlags::CLOEXEC | OFlags::NOFOLLOW, mode, RESOLVE)?;
        Ok(File::from(fd))
    }

    /// Opens `name` for reading and writing.
    pub(crate) fn open_rw(&self, name: &str) -> std::io::Result<File> {
        self.openat(name, OFlags::RDWR)
    }

    /// Opens `name` read-only.
    pub(crate) fn open_ro(&self, name: &str) -> std::io::Result<File> {
        self.openat(name, OFlags::RDONLY)
    }

    /// Creates (or opens; `truncate` empties it) `name` for reading and writing.
    pub(crate) fn create(&self, name: &str, truncate: bool) -> std::io::Result<File> {
        let t = if truncate { OFlags::TRUNC } else { OFlags::empty() };
        let f = self.openat(name, OFlags::RDWR | OFlags::CREATE | t)?;
        self.made.fetch_add(1, Ordering::SeqCst);
        Ok(f)
    }

    /// Creates `name`, failing if it exists.
    pub(crate) fn create_new(&self, name: &str) -> std::io::Result<File> {
        let f = self.openat(name, OFlags::RDWR | OFlags::CREATE | OFlags::EXCL)?;
        self.made.fetch_add(1, Ordering::SeqCst);
        Ok(f)
    }

    /// Unlinks the entry `name` (a symlink is removed, never followed).
    pub(crate) fn unlink(&self, name: &str) -> std::io::Result<()> {
        rustix::fs::unlinkat(self.fd.as_fd(), name, rustix::fs::AtFlags::empty())?;
        Ok(())
    }

    /// Renames `from` in this directory to `to` in `dst`.
    pub(crate) fn rename_to(&self, from: &str, dst: &BackDir, to: &str) -> std::io::Result<()> {
        rustix::fs::renameat(self.fd.as_fd(), from, dst.fd.as_fd(), to)?;
        dst.made.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Renames `from` in this directory to `to` in `dst`, failing with
    /// EEXIST if `to` exists (RENAME_NOREPLACE: never replaces anything).
    pub(crate) fn rename_noreplace(&self, from: &str, dst: &BackDir, to: &str) -> std::io::Result<()> {
        rustix::fs::renameat_with(self.fd.as_fd(), from, dst.fd.as_fd(), to, rustix::fs::RenameFlags::NOREPLACE)?;
        dst.made.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// A new file with no name in this directory (O_TMPFILE), for reading
    /// and writing: its inode is allocated without taking the directory's
    /// lock, and it vanishes if never linked (a crash leaves nothing).
    /// Errors: open(2)'s — EOPNOTSUPP (or EISDIR, EINVAL on old kernels)
    /// where the filesystem has no O_TMPFILE; callers then create a named
    /// temporary instead.
    pub(crate) fn tmpfile(&self) -> std::io::Result<File> {
        let fd = rustix::fs::openat(
            self.fd.as_fd(),
            ".",
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        Ok(File::from(fd))
    }

    /// Names the unnamed file `f` (from [`BackDir::tmpfile`] of this
    /// directory) `name`, failing with EEXIST if `name` exists (never
    /// replaces anything). linkat(2) of the descriptor (AT_EMPTY_PATH,
    /// which needs CAP_DAC_READ_SEARCH), else of its /proc/self/fd link.
    pub(crate) fn link_tmpfile(&self, f: &File, name: &str) -> std::io::Result<()> {
        use rustix::fs::AtFlags;
        let r = rustix::fs::linkat(f.as_fd(), "", self.fd.as_fd(), name, AtFlags::EMPTY_PATH);
        match r {
            Err(e)
                if e == rustix::io::Errno::NOENT
                    || e == rustix::io::Errno::PERM
                    || e == rustix::io::Errno::ACCESS =>
            {
                use std::os::fd::AsRawFd;
                let proc = format!("/proc/self/fd/{}", f.as_raw_fd());
                rustix::fs::linkat(
                    rustix::fs::CWD,
                    proc.as_str(),
                    self.fd.as_fd(),
                    name,
                    AtFlags::SYMLINK_FOLLOW,
                )?
            }
            r => r?,
        }
        self.made.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Does the entry `name` exist (as anything, symlinks not followed)?
    pub(crate) fn exists(&self, name: &str) -> bool {
        rustix::fs::statat(self.fd.as_fd(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// Names of the entries (not "." or "..").
    pub(crate) fn names(&self) -> Vec<String> {
        let mut out = Vec::new();
        let Ok(fd) = rustix::fs::openat(self.fd.as_fd(), ".", OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) else {
            return out;
        };
        let Ok(mut dir) = rustix::fs::Dir::read_from(&fd) else { return out };
        for e in dir.by_ref().flatten() {
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                if let Ok(s) = std::str::from_utf8(n) {
                    out.push(s.to_string());
                }
            }
        }
        out
    }

    /// Is this directory on the same filesystem as `other` (renameat works)?
    pub(crate) fn same_fs(&self, other: &BackDir) -> bool {
        match (rustix::fs::fstat(&self.fd), rustix::fs::fstat(&other.fd)) {
            (Ok(a), Ok(b)) => a.st_dev == b.st_dev,
            _ => false,
        }
    }
}
