//! Plain values exchanged with the transport adapter: attributes, callers,
//! setattr requests, directory entries, configuration, errors.
//!
//! Owns: the public shapes of fs-core's API. Must not touch: anything
//! (no logic beyond conversions and `Display`).

use std::path::PathBuf;
use std::time::Duration;

/// A positive errno value (`libc::ENOENT`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub const EIO: Errno = Errno(libc::EIO);
}

impl From<std::io::Error> for Errno {
    fn from(e: std::io::Error) -> Self {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

/// Result of a filesystem operation: `Err` holds a positive errno.
pub type Result<T> = std::result::Result<T, Errno>;

/// Who makes a request: the caller's fsuid, fsgid and thread group id,
/// and for a create (mknod, mkdir, create, tmpfile) its umask.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// Cleared from a new inode's mode unless its directory has a default
    /// ACL, which then decides instead (as ext4 does). 0 when the kernel
    /// has already applied it (no FUSE_DONT_MASK).
    pub umask: u32,
}

/// A flag of [`crate::Fs::setxattr`] beside XATTR_CREATE / XATTR_REPLACE:
/// the caller is neither in the file's group nor has CAP_FSETID, so setting
/// an access ACL also clears S_ISGID (the kernel's
/// FUSE_SETXATTR_ACL_KILL_SGID).
pub const XATTR_ACL_KILL_SGID: u32 = 1 << 16;

/// Attributes of an inode, as stat(2) reports them. Times are seconds and
/// nanoseconds since the Unix epoch; `mode` includes the `S_IF*` type bits;
/// `blocks` counts 512-byte units; `ino` is also the FUSE nodeid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: i64,
    pub atime_nsec: u32,
    pub mtime: i64,
    pub mtime_nsec: u32,
    pub ctime: i64,
    pub ctime_nsec: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    /// Birth time (statx `stx_btime`), if known.
    pub btime: Option<(i64, u32)>,
    /// Inode flags (FS_IOC_GETFLAGS), see [`crate::store::KEPT_FLAGS`].
    pub flags: u32,
}

/// A time to set (utimensat(2)): `Now` is `UTIME_NOW`; `UTIME_OMIT` is `None`
/// in [`SetAttr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    Now,
    /// Seconds and nanoseconds since the epoch.
    At(i64, u32),
}

/// What a setattr asks to change (chmod(2), chown(2), truncate(2),
/// utimensat(2)); `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (07777); type bits are ignored.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// New size in bytes (regular files only: EISDIR for directories,
    /// EINVAL for other types).
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    /// Explicit ctime (seconds, nanoseconds); otherwise ctime becomes now.
    pub ctime: Option<(i64, u32)>,
    /// The handle the change is made through (ftruncate, fchmod): acts on
    /// that handle's working copy whatever the mode now says.
    pub fh: Option<u64>,
    /// Clear S_ISUID, and S_ISGID when group-exec is set, of a
    /// non-directory (ignored for directories); ctime becomes now.
    pub kill_suidgid: bool,
}

/// One directory entry. `offset` is the cookie of the position *after*
/// this entry (pass it back to continue); `kind` is a `DT_*` value.
#[derive(Clone, Copy, Debug)]
pub struct DirEntry<'a> {
    pub ino: u64,
    pub offset: u64,
    pub kind: u32,
    pub name: &'a [u8],
}

/// statfs(2) numbers: block counts in `frsize` units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// Reply to getxattr(2)/listxattr(2): the size needed when the request's
/// size was 0, else the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XattrValue {
    Size(u32),
    Data(Vec<u8>),
}

/// Where the store lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// A directory: `DIR/store.redb`, working copies in `DIR/wc/<ino>`,
    /// lock `DIR/ringfs.lock`. Created if missing.
    Dir(PathBuf),
    /// redb's in-memory backend; working copies in a temporary directory
    /// removed when the `Fs` is dropped. Nothing survives the process.
    Memory,
}

/// How much of an existing store [`crate::Fs::open_store_checked`] reads
/// before it serves it (docs/SEMANTICS.md, "Damaged stores").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OpenCheck {
    /// Every table read (redb's panics on damaged pages caught) after an
    /// unclean shutdown and before a migration; after a clean one the inode
    /// tables (loaded anyway), the pack list and the chunk index.
    #[default]
    WhenUnclean,
    /// Every table read, whatever the last shutdown (`ringfs mount --check`).
    Full,
}

/// Configuration of [`crate::Fs::open_store`].
#[derive(Clone, Debug)]
pub struct Config {
    pub store: StoreLocation,
    /// Interval of the background group commit of metadata (default 1 s).
    pub commit_interval: Duration,
    /// Threads cutting and hashing released files (default 2, at least 1).
    pub hash_threads: usize,
    /// Local-only paths (default: none).
    pub local: LocalConfig,
    /// When reads served by the daemon update atime (default relatime);
    /// changed later with [`crate::Fs::set_atime`].
    pub atime: Atime,
}

/// When a read moves a file's atime (the mount's atime option).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Atime {
    /// `relatime`: when atime is not after mtime or ctime, or is a day old.
    #[default]
    Relatime,
    /// `noatime` (also what a read-only mount does): never.
    Noatime,
    /// `strictatime`: on every read.
    Strictatime,
}

impl Atime {
    pub(crate) fn from_u8(v: u8) -> Atime {
        match v {
            1 => Atime::Noatime,
            2 => Atime::Strictatime,
            _ => Atime::Relatime,
        }
    }
    pub(crate) fn as_u8(self) -> u8 {
        match self {
            Atime::Relatime => 0,
            Atime::Noatime => 1,
            Atime::Strictatime => 2,
        }
    }
}

/// Local-only paths: which (gitignore patterns) and where their files live.
#[derive(Clone, Debug, Default)]
pub struct LocalConfig {
    /// gitignore-style patterns, matched against the path relative to the
    /// workspace root (see [`crate::IgnorePolicy`]).
    pub ignore: Vec<String>,
    /// Backing directory of local-only files. Default: `DIR/local` for a
    /// `Dir` store, a temporary directory for `Memory`.
    pub dir: Option<PathBuf>,
    /// Make new local-only directories whose parent is synced native roots
    /// (their contents a host tree under `DIR/roots`, see [`crate::Fs::mkdir`]).
    pub native_roots: bool,
}

impl Config {
    /// Defaults for a store location.
    pub fn new(store: StoreLocation) -> Config {
        Config {
            store,
            commit_interval: Duration::from_secs(1),
            hash_threads: 2,
            local: LocalConfig::default(),
            atime: Atime::Relatime,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::new(StoreLocation::Memory)
    }
}

/// A description of the store for `ringfs stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// The store directory, or "memory".
    pub store: String,
    /// Live inodes (including unlinked-but-open ones).
    pub inodes: u64,
    /// Distinct chunks stored, and their total bytes.
    pub chunks: u64,
    pub chunk_bytes: u64,
    /// Last journal sequence number committed (the sync position).
    pub sync_position: u64,
    /// Changed inodes/dirents/xattrs waiting for the next group commit,
    /// plus files waiting to be hashed.
    pub dirty: u64,
    /// Synced regular files whose working copy is not stored yet (changed
    /// since last hashed): what a final commit still has to hash.
    pub unstored: u64,
    /// Open file and directory handles (FUSE `fh`s the kernel holds).
    pub open_files: u64,
    /// The clean shutdown (final commit) has begun.
    pub closing: bool,
    /// File content stored since the daemon started, in bytes: chunks
    /// written to the packs (`content_new`) and chunks the store already
    /// had (`content_reused`, deduplicated or unchanged parts of a file).
    pub content_new: u64,
    pub content_reused: u64,
}

/// Damage a served store met (a redb panic on a damaged page, or a
/// corruption error, in any of its transactions): the store is read-only
/// from then on — reads still serve what can be read, changes are refused
/// (EROFS), the final commit is skipped — until it is unmounted and
/// salvaged (docs/SEMANTICS.md "Damaged stores").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("store damaged in {table}: {detail}; the store is read-only until unmounted (what can be read is still served): run `ringfs umount` then `ringfs salvage --store {} --to NEWDIR`", dir.display())]
pub struct StoreDamaged {
    /// The table (and key) that cannot be read, as `ringfs fsck` names it.
    pub table: String,
    /// What redb said, or where it panicked.
    pub detail: String,
    /// The store directory ("memory" for a memory store).
    pub dir: PathBuf,
}

/// Errors opening, shutting down or checking a store. Each message is one
/// line naming the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path} is in use by another ringfs process{} (lock file {path}/ringfs.lock): unmount its workspace (`ringfs umount MOUNTPOINT`) or stop it first", pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Locked { pid: Option<u32>, path: PathBuf },
    #[error("store {path} has schema version {found}, this ringfs supports up to {supported}; upgrade ringfs")]
    NewerSchema { found: u64, supported: u64, path: PathBuf },
    /// redb refused the database file (`path` is `DIR/store.redb`).
    #[error("store {path} is damaged: {reason}; rebuild it into a new store with `ringfs salvage --store {} --to NEWDIR` (it leaves this one as it is)", path.parent().unwrap_or(path).display())]
    Corrupt { path: PathBuf, reason: String },
    /// The check before a store is served found damage (`what`: where, in
    /// which table and key, or which files); nothing was written.
    #[error("store {dir} looks damaged: {what}; rebuild it into a new store with `ringfs salvage --store {dir} --to NEWDIR` (it leaves {dir} as it is; `ringfs fsck --store {dir}` lists the damage)", dir = dir.display())]
    Damaged { dir: PathBuf, what: String },
    /// A part of the store directory `dir` (its pack directory or a pack
    /// file) cannot be used as it is: `what` is one line naming the path,
    /// what is wrong and the fix (from `store::pack::usable`); nothing was
    /// written.
    #[error("{what}")]
    Unusable { dir: PathBuf, what: String },
    #[error("invalid ignore pattern `{pattern}`: {reason}")]
    Ignore { pattern: String, reason: String },
    /// The underlying error is the `source` (printed by error chains such
    /// as anyhow's `{:#}`), not repeated in this message.
    #[error("store I/O error on {path}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The store met damage while it was served ([`StoreDamaged`]): the
    /// final commit was skipped (changes since the last commit stay in the
    /// working copies, which `ringfs salvage` takes in).
    #[error("the final commit was skipped: {0}")]
    ServedDamaged(StoreDamaged),
}

impl StoreError {
    /// The message with its cause (the I/O error of [`StoreError::Io`]),
    /// for an error passed on as text, where no error chain prints it.
    pub fn with_cause(&self) -> String {
        match self {
            StoreError::Io { source, .. } => format!("{self}: {source}"),
            _ => self.to_string(),
        }
    }
}

/// A native root: a local-only directory whose contents are a directory
/// tree on the host disk, bind-mounted over it by the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeRoot {
    /// The directory's inode (FUSE nodeid and `st_ino` through the mount).
    pub ino: u64,
    /// Its path relative to the workspace root (no leading '/').
    pub path: PathBuf,
    /// The host directory holding its contents (`LOCAL/roots/<ino>`).
    pub backing: PathBuf,
}

/// `n` with the singular or the plural noun, for reports: `count(1,
/// "chunk", "chunks")` is "1 chunk", `count(0, "entry", "entries")` "0 entries".
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A name or path (bytes) as a message shows it: lossy UTF-8, control
/// characters escaped (`a\nb` is shown as `a\nb`, not broken over two
/// lines), so a message stays one line whatever the user typed.
pub fn printable(b: &[u8]) -> String {
    String::from_utf8_lossy(b).chars().flat_map(|c| -> Vec<char> { if c.is_control() { c.escape_default().collect() } else { vec![c] } }).collect()
}

/// Did `e` fail for want of space (ENOSPC, EDQUOT)?
pub fn is_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Does an error's text (its whole chain) say a disk was full? For errors
/// already turned into text (`No space left on device`, `Disk quota
/// exceeded`, as std prints ENOSPC and EDQUOT).
pub fn says_full(text: &str) -> bool {
    text.contains("No space left on device") || text.contains("Disk quota exceeded")
}

/// The one line for a command that failed because the disk holding `path`
/// is full while `doing` (e.g. "storing the changed files"): names the
/// disk and what to free. The caller says what was kept or undone.
pub fn full_disk(path: &std::path::Path, doing: &str) -> String {
    format!(
        "the disk holding {} is full ({doing}): free space on it (`df {}` shows how much is left: remove files there, or `ringfs gc` a store there) and run the command again",
        path.display(),
        path.display()
    )
}
