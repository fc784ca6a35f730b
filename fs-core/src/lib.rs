//! fs-core: the ringfs filesystem model, independent of FUSE.
//!
//! [`Fs`] serves POSIX operations on inode numbers with ext4 semantics; a
//! FUSE adapter maps each `Filesystem` request onto one method. [`fsck`]
//! checks a store offline.
//!
//! # Model
//!
//! * **Inodes.** `nodeid == ino`; the root is 1 (mode 0755, root:root on
//!   a fresh store). Numbers come from a persisted counter and are never
//!   reused, so they are stable across rename and remount. An inode is freed
//!   (working copy deleted, chunk references dropped) only when its link
//!   count, its lookup count (LOOKUP/CREATE/… minus FORGET) and its open
//!   handles are all zero: unlinked-but-open files keep working.
//! * **Directories.** `nlink` = 2 + subdirectories. Every entry gets a
//!   cookie at link time from a per-directory counter (1 = ".", 2 = "..",
//!   children ≥ 3), persisted with the entry; `readdir(offset)` yields the
//!   entries with cookie > offset in cookie order, so offsets stay valid
//!   while entries come and go; a stream returns only entries whose cookie
//!   is below the directory's counter when it began (opendir or a read
//!   from offset 0), so it ends even if every entry is renamed during it. A renamed entry gets a new cookie in its
//!   new place; RENAME_EXCHANGE keeps both cookies.
//! * **Data.** Each regular file's bytes live in a working copy on the host
//!   disk (`DIR/wc/<ino>`), read and written with pread/pwrite on an fd
//!   shared by the inode's handles, outside the global lock. When a
//!   writable handle is released, on fsync and at shutdown, the file is cut
//!   into content-defined chunks ([`chunk`]: gear hash, 128 KiB / ~512 KiB /
//!   2 MiB), hashed with BLAKE3 and stored in redb with its manifest, chunk
//!   reference counts and a journal entry, in one transaction. Release
//!   returns at once (hashing runs on `hash_threads` workers); fsync waits
//!   for the hash and a durable commit. A missing working copy is rebuilt
//!   from the store on open. Writes that bypass the daemon (FUSE
//!   passthrough on [`Fs::backing_fd`]) are noticed from the working copy's
//!   size and mtime at getattr, fsync and release.
//! * **Metadata** lives in memory; changed inodes, entries and xattrs are
//!   group-committed every `commit_interval` (1 s) in one durable
//!   transaction by a background thread, with coalesced journal records.
//!   A crash loses at most that interval and leaves a consistent store;
//!   opening after an unclean shutdown frees unlinked inodes, deletes
//!   working copies that have no inode and re-hashes the rest (their bytes
//!   are the truth).
//! * **Permissions** are the kernel's (`default_permissions`): fs-core
//!   checks only what the kernel cannot (EEXIST, ENOENT, ENOTDIR, EISDIR,
//!   ENOTEMPTY, EINVAL for moving a directory into itself, EPERM for
//!   hard-linking a directory or a non-root mknod of a device,
//!   ENAMETOOLONG over 255 bytes, EMLINK over 65000 links). New inodes take
//!   the caller's uid and gid, or the parent's gid if it is setgid (new
//!   subdirectories then inherit S_ISGID). POSIX ACLs are xattrs the
//!   kernel enforces (FUSE_POSIX_ACL); fs-core keeps the mode in step with
//!   an access ACL, updates it on chmod, and gives new inodes their
//!   directory's default ACL (or else clears the caller's umask) as ext4
//!   does (`acl`).
//!
//! # Modules
//!
//! One per concept (docs/ARCHITECTURE.md lists them): `fs/` is [`Fs`], the
//! POSIX surface; `inode/` the in-memory table; `schema` the tables and
//! records; [`live`] files' live manifests (roots over shared segments);
//! [`store`] the redb database (group commit, content, recovery,
//! migration; it re-exports the schema); `wc/` working copies, their pools
//! and hashing; `host` native-root trees; `local` backing directories and
//! ignore patterns; `posix` limits, mode helpers and inode flags; `acl` POSIX ACLs; [`private`] the modes of a store's
//! own files (0700/0600); `types`
//! the public values; `throttle` rate-limited warnings; `chunk`
//! content-defined chunking; `fsck` the offline check; `damage` what
//! `ringfs fsck` runs around it (errors and panics reported, working copies
//! compared); `salvage` a new store from what survives in a damaged one.
//!
//! # Deviations from ext4
//!
//! * atime follows relatime for reads through the daemon; readdir does not
//!   update a directory's atime.
//! * A directory's size is always 4096.
//! * The group of a file created by a non-member in a setgid directory
//!   keeps S_ISGID (the kernel would clear it; fs-core cannot see group
//!   membership). For the same reason a remove-privileges request (a write
//!   or truncate by a caller without CAP_FSETID, `SetAttr::kill_suidgid`)
//!   clears S_ISGID only with group-exec; Linux ≥ 6.2 also clears it for a
//!   caller outside the file's group.
//! * Extended attributes: names up to 255 bytes, values up to 64 KiB, all
//!   namespaces stored alike.

mod acl;
mod chunk;
mod damage;
mod fs;
mod fsck;
mod host;
mod inode;
mod laps;
pub use laps::process_cpu;
pub mod live;
mod local;
mod posix;
pub mod private;
mod salvage;
mod schema;
pub mod snap;
pub mod store;
mod throttle;
mod types;
mod wc;

pub use fs::{chunk_served_opens, since_chunk_open, ExecEnd, Fs};

/// Is `nodeid` an inode inside a native root's host tree (not the root
/// directory itself)? See [`Fs::is_host`].
pub fn is_host_nodeid(nodeid: u64) -> bool {
    host::is_host_id(nodeid)
}
pub use fsck::{fsck, fsck_opts, FsckReport, Problem};
pub use snap::gc::gc_store;
pub use store::compact::{GcReport, SnapGcReport};
pub use damage::{fsck_store, FsckOptions};
pub use local::IgnorePolicy;
pub use wc::prebuild::{background_priority, WcPlan};
pub use salvage::{salvage, salvage_packs, PackChunks, SalvageReport};
pub use types::*;

#[cfg(test)]
mod tests;
