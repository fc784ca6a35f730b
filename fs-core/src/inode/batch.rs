//! [`Batch`]: everything the inode table changed since the last group
//! commit, as [`State::drain`](super::State::drain) hands it to the store
//! and [`State::put_back`](super::State::put_back) takes it back when the
//! commit fails. A plain copy: the store writes it without the table's lock.

use std::collections::{HashMap, HashSet};

use crate::schema::InodeRec;

/// Pending directory-entry changes: (parent, name) → Some((child, cookie)),
/// or None (removed).
pub(crate) type DirentChanges = HashMap<(u64, Vec<u8>), Option<(u64, u64)>>;
/// Pending xattr changes: (ino, name) → Some(value), or None (removed).
pub(crate) type XattrChanges = HashMap<(u64, Vec<u8>), Option<Vec<u8>>>;
/// A pending inode change: its record and symlink target, or None if freed.
pub(crate) type InodeChange = (u64, Option<(InodeRec, Option<Vec<u8>>)>);

/// Everything changed since the last group commit.
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) inodes: Vec<InodeChange>,
    pub(crate) dirents: DirentChanges,
    pub(crate) xattrs: XattrChanges,
    /// Freed synced inodes (records, manifest and chunk references go).
    pub(crate) freed: HashSet<u64>,
    /// Freed local-only inodes (removed from the `local_*` tables only).
    pub(crate) freed_local: HashSet<u64>,
    /// Which of the inodes named are local-only now.
    pub(crate) loc: HashSet<u64>,
    /// The inode counter to persist.
    pub(crate) next_ino: u64,
    /// The ready backing files to leave for the next mount (`[POOL_WC]`,
    /// `[POOL_LOCAL]` of `State::pool`): set only for the final, clean
    /// commit, which replaces the `pool` table with them.
    pub(crate) pool: Option<[Vec<u64>; 2]>,
    /// Backing files of freed files to delete once this batch is durable
    /// (`State::drop_after_commit`): set only for a durable commit, which
    /// they make happen even when nothing else is in it.
    pub(crate) drops: Vec<(u64, bool)>,
}

impl Batch {
    /// Nothing to write (a commit may still be forced).
    pub(crate) fn is_empty(&self) -> bool {
        self.inodes.is_empty() && self.dirents.is_empty() && self.xattrs.is_empty() && self.freed.is_empty() && self.freed_local.is_empty() && self.drops.is_empty()
    }
}
