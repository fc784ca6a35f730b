//! Branches and forks on a live filesystem: [`Fs::snapshot_branch`] and
//! [`Fs::snapshot_fork`], answered while the daemon serves (the control
//! socket's `branch` and `fork`). Both read only committed state: a fork
//! is of a commit, not of the live tree.
//!
//! Must not know: the object encoding, FUSE.

use std::path::Path;

use crate::fs::Fs;
use crate::snap::materialize::{fork_from, fork_point, ForkReport};
use crate::snap::refs::{branch_op, BranchOp, BranchReport};
use crate::snap::transfer::Transfer;
use crate::snap::SnapError;

impl Fs {
    /// `ringfs branch MOUNTPOINT …`: create, move, delete or list branches
    /// (see [`BranchOp`]), in one durable transaction.
    pub fn snapshot_branch(&self, op: &BranchOp) -> Result<BranchReport, SnapError> {
        branch_op(&self.inner.store, op)
    }

    /// Read access to this store's history for `ringfs push` (see
    /// [`Transfer`]); requests go on meanwhile.
    pub fn transfer(&self) -> Transfer<'_> {
        Transfer { store: &self.inner.store }
    }

    /// `ringfs fork MOUNTPOINT[@AT] --to …`: a new store at `dest` from the
    /// commit `at` names (default: the checked-out branch's head), sharing
    /// this store's packs by hard link; requests go on meanwhile.
    pub fn snapshot_fork(&self, at: Option<&str>, dest: &Path) -> Result<ForkReport, SnapError> {
        let (id, branch) = fork_point(&self.inner.store, at)?;
        fork_from(&self.inner.store, id, &branch, dest)
    }
}
