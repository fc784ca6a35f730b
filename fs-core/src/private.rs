//! Stores private to their owner (issue 36; docs/DECISIONS.md D87).
//!
//! Every directory ringfs makes for a store is 0700 and every file it
//! writes there 0600, given at creation (the mode passed to mkdir(2) and
//! open(2): a umask can only take bits away, never add group or other
//! ones): the store directory, `store.redb` and its migration backups,
//! `ringfs.lock`, `packs/` (packs, object index files), `remotes/` (the
//! records, a pull's staging), the roots of the working copies (`wc/`,
//! `local/`, `local/roots/`). The working copies themselves keep the modes
//! their files have in the workspace (the modes `stat` shows through the
//! mount): they are reachable only through the 0700 directories above them.
//!
//! A store made by an earlier version (0755 directories, 0644 files) is
//! made private when it is next opened for writing ([`fix_store`], one
//! warning); `ringfs fsck` reports one that is still open ([`exposure`]).
//!
//! Must not touch: the modes of the user's files (anything below `wc/`
//! and `local/`).

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};

/// The mode of every directory of a store.
pub const DIR_MODE: u32 = 0o700;
/// The mode of every file of a store (working copies aside).
pub const FILE_MODE: u32 = 0o600;
/// Group and other permission bits.
const OPEN_BITS: u32 = 0o077;
/// Group and other search bits of a directory.
const SEARCH_BITS: u32 = 0o011;
/// Directories of a store holding the user's files (working copies,
/// local-only files, native roots): the directory itself is private, what
/// is in it keeps its own modes.
const USER_TREES: [&str; 2] = ["wc", "local"];
/// How deep the walk goes (a store is at most `remotes/NAME/incoming/F`).
const MAX_DEPTH: usize = 8;
/// How many open entries a report names.
const EXAMPLES: usize = 3;

/// Makes the directory `path` (its parent must exist) with mode 0700.
pub fn create_dir(path: &Path) -> std::io::Result<()> {
    DirBuilder::new().mode(DIR_MODE).create(path)
}

/// Makes the directory `path` and any missing parents, each with mode 0700
/// (directories that exist are left as they are).
pub fn create_dir_all(path: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(path)
}

/// [`OpenOptions`] whose created files get mode 0600.
pub fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(FILE_MODE);
    o
}

/// Creates (or truncates) `path` for writing; a new file gets mode 0600.
pub fn create(path: &Path) -> std::io::Result<File> {
    options().write(true).create(true).truncate(true).open(path)
}

/// `std::fs::write` with a new file made 0600.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    create(path)?.write_all(bytes)
}

/// A new temporary directory (in the system's, named `PREFIX…`) with mode
/// 0700: a `--memory` store's working copies, packs and local-only files.
/// (tempfile makes directories 0777 less the umask unless told.)
pub fn temp_dir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new().prefix(prefix).permissions(std::fs::Permissions::from_mode(DIR_MODE)).tempdir()
}

/// Takes the group and other bits off the file or directory `path` if it
/// has any (a hard link made from a file of another store, a file renamed
/// in). Symlinks are left alone.
pub fn restrict(path: &Path) -> std::io::Result<()> {
    let st = rustix::fs::statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW)?;
    let t = FileType::from_raw_mode(st.st_mode);
    if st.st_mode & OPEN_BITS != 0 && matches!(t, FileType::RegularFile | FileType::Directory) {
        let fd = rustix::fs::openat(CWD, path, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK, Mode::empty())?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(st.st_mode & 0o700))?;
    }
    Ok(())
}

/// What [`exposure`] or [`make_private`] found in a store: the entries
/// other users could read or search.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exposure {
    /// The store directory's permission bits.
    pub dir_mode: u32,
    /// Entries (the store directory included) with group or other bits.
    pub open: u64,
    /// The first few of them, relative to the store (`.`: the store
    /// directory itself), with their permission bits.
    pub examples: Vec<(PathBuf, u32)>,
}

impl Exposure {
    /// Nothing in the store is open to other users.
    pub fn is_private(&self) -> bool {
        self.open == 0
    }

    /// What was open, in a few words: "mode 0755; 12 entries, e.g.
    /// store.redb 0644, packs 0755".
    pub fn describe(&self) -> String {
        let eg: Vec<String> = self.examples.iter().map(|(p, m)| format!("{} {m:04o}", p.display())).collect();
        format!("mode {:04o}; {} open to others, e.g. {}", self.dir_mode, crate::types::count(self.open, "entry", "entries"), eg.join(", "))
    }
}

/// Which of the store `dir`'s own directories and files (not the user's
/// files below `wc/` and `local/`) other users could read or search,
/// counting only what they can reach (nothing below a directory without a
/// group or other search bit: `chmod 700 DIR` closes a store; a fork's
/// hard-linked packs are reached through the fork, checked as its own
/// store); nothing is changed. Errors: `dir` cannot be opened or read.
pub fn exposure(dir: &Path) -> std::io::Result<Exposure> {
    walk(dir, false)
}

/// Takes the group and other bits off the store `dir` and every directory
/// and file of it (directories 0700, files 0600; the user's files below
/// `wc/` and `local/` keep their modes); what was open before. Errors:
/// `dir` cannot be opened or read, or a chmod failed (not the owner).
pub fn make_private(dir: &Path) -> std::io::Result<Exposure> {
    walk(dir, true)
}

/// [`make_private`] for a store being opened for writing: says once (a
/// warning) when an `existing` store (one with a database: made by an
/// earlier version) was open to others, and when it could not be made
/// private. A new store in a directory that was there (an empty one the
/// user made) is made private silently.
pub fn fix_store(dir: &Path, existing: bool) {
    match make_private(dir) {
        Ok(e) if e.is_private() || !existing => {}
        Ok(e) if e.dir_mode & OPEN_BITS != 0 => tracing::warn!(
            "store {} was readable by others (mode {:04o}): made private (directories 0700, files 0600)",
            dir.display(),
            e.dir_mode
        ),
        Ok(e) => tracing::warn!("store {} had files open to others ({}): made private (directories 0700, files 0600)", dir.display(), e.describe()),
        Err(e) => tracing::warn!(
            "store {}: could not make it private ({e}); other users may read it: `chmod 700 {}` as its owner",
            dir.display(),
            dir.display()
        ),
    }
}

/// `ringfs fsck`'s finding for a store other users can read or search
/// (None: private, or `dir` unreadable, which fsck reports otherwise): what
/// is open and the fix.
pub fn finding(dir: &Path) -> Option<String> {
    let e = exposure(dir).ok().filter(|e| !e.is_private())?;
    let d = dir.display();
    Some(format!(
        "other users can read the store ({}): mount it once with this ringfs (or run a `ringfs … --store {d}` command that writes to it), which makes it private (directories 0700, files 0600; the files of the workspace keep their modes); `chmod 700 {d}` shuts others out at once",
        e.describe()
    ))
}

fn walk(dir: &Path, fix: bool) -> std::io::Result<Exposure> {
    let fd = rustix::fs::openat(CWD, dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    let mut ex = Exposure { dir_mode: st.st_mode & 0o7777, ..Default::default() };
    note(&fd, st.st_mode, Path::new("."), fix, &mut ex)?;
    if fix || st.st_mode & SEARCH_BITS != 0 {
        descend(&fd, Path::new(""), 0, fix, &mut ex)?;
    }
    Ok(ex)
}

/// Counts (and with `fix` closes) the open entry `fd` of mode `mode`.
fn note(fd: &OwnedFd, mode: u32, rel: &Path, fix: bool, ex: &mut Exposure) -> std::io::Result<()> {
    if mode & OPEN_BITS == 0 {
        return Ok(());
    }
    ex.open += 1;
    if ex.examples.len() < EXAMPLES {
        ex.examples.push((rel.to_path_buf(), mode & 0o7777));
    }
    if fix {
        rustix::fs::fchmod(fd, Mode::from_raw_mode(mode & 0o700))?;
    }
    Ok(())
}

fn descend(dfd: &OwnedFd, rel: &Path, depth: usize, fix: bool, ex: &mut Exposure) -> std::io::Result<()> {
    let mut names = Vec::new();
    for e in rustix::fs::Dir::read_from(dfd)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(e.file_name().to_owned());
        }
    }
    for name in names {
        let child = rel.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        let st = match rustix::fs::statat(dfd, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(s) => s,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        let is_dir = match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => true,
            FileType::RegularFile => false,
            _ => continue,
        };
        // Without `fix`, only what others can reach counts: nothing below a
        // directory they cannot search (no group or other x bit).
        let inside = is_dir && depth < MAX_DEPTH && !(depth == 0 && USER_TREES.iter().any(|t| t.as_bytes() == name.to_bytes())) && (fix || st.st_mode & SEARCH_BITS != 0);
        if st.st_mode & OPEN_BITS == 0 && !inside {
            continue;
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | if is_dir { OFlags::DIRECTORY } else { OFlags::NONBLOCK | OFlags::NOCTTY };
        let fd = match rustix::fs::openat(dfd, name.as_c_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        note(&fd, st.st_mode, &child, fix, ex)?;
        if inside {
            descend(&fd, &child, depth + 1, fix, ex)?;
        }
    }
    Ok(())
}
