//! The group commit: every change since the last one, in one redb write
//! transaction ([`Store::group_commit`]), and the background thread that
//! runs one per commit interval ([`run_group_commits`]).
//!
//! Owns: the order of a commit (take the writer, then drain the inode
//! table, so a content transaction that committed before sees only inodes
//! this commit includes), what durability covers, and what happens when a
//! commit fails (the batch goes back, an I/O error marks the handle for
//! reopening). Must not touch: the inode table itself — the caller passes
//! `drain` and `put_back`.

use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use redb::Durability;

use crate::inode::batch::Batch;
use crate::store::db::{is_io_error, Store};

impl Store {
    /// One group commit: `drain()` gives everything dirty, written in one
    /// transaction of `durability`. `force` commits even when nothing is
    /// dirty (to make earlier non-durable content transactions durable);
    /// `clean` sets the clean-shutdown flag; `local_tables` as in
    /// [`Store::write_batch`]. On failure the batch is handed to `put_back`
    /// and the error returned.
    pub(crate) fn group_commit(
        &self,
        durability: Durability,
        force: bool,
        clean: Option<bool>,
        local_tables: bool,
        drain: impl FnOnce() -> Batch,
        put_back: impl FnOnce(Batch),
    ) -> std::result::Result<(), redb::Error> {
        let mut txn = self.begin_write_plain()?;
        txn.set_durability(durability)?;
        // Content transactions before ours become durable with ours.
        let covered = if matches!(durability, Durability::Immediate) { self.take_nondurable() } else { Default::default() };
        // Drain after taking the writer: a content transaction that
        // committed before us saw only inodes we now include.
        let batch = drain();
        let pending = self.content_pending.swap(false, Ordering::SeqCst);
        if batch.is_empty() && !force && !pending && clean.is_none() {
            txn.abort()?;
            return Ok(());
        }
        // A fork's deferred tree is written before its first change (D60);
        // a commit with nothing to write (the final one) leaves it deferred.
        let r = if batch.is_empty() { Ok(()) } else { self.write_deferred_in(&txn) };
        let r = r.and_then(|_| self.write_batch(&txn, &batch, local_tables, clean));
        // A durable index entry must point at durable pack bytes.
        let r = r.and_then(|v| if matches!(durability, Durability::Immediate) { self.packs.sync().map(|_| v).map_err(redb::Error::Io) } else { Ok(v) });
        let r = match r {
            Ok(v) => {
                // Moved before the writer is released: a transaction taking
                // it next numbers its journal records after ours (the
                // journal's own last key is the truth, `journal_last`).
                self.sync_pos.fetch_max(v.0, Ordering::SeqCst);
                txn.commit().map_err(redb::Error::from).map(|_| v)
            }
            Err(e) => Err(e),
        };
        match r {
            Ok((_, dc, db)) => {
                self.bump_counters(dc, db);
                Ok(())
            }
            Err(e) => {
                self.nondurable.lock().unwrap_or_else(|p| p.into_inner()).extend(covered);
                // A corruption error is damage: the store turns read-only.
                self.fault.note_error(&e, "a group commit");
                if is_io_error(&e) {
                    // redb refuses every later transaction on this handle.
                    self.mark_broken();
                    if self.trouble.due() {
                        tracing::error!("store: commit failed ({e}); changes stay queued, the database is reopened for the next commit (repeated at most once a minute)");
                    }
                }
                // Put the changes back so the next commit retries them.
                if pending {
                    self.content_pending.store(true, Ordering::SeqCst);
                }
                put_back(batch);
                Err(e)
            }
        }
    }
}

/// Gives freed memory back to the system (malloc_trim(3): glibc keeps freed
/// heap pages otherwise, so the daemon's RSS stays at its peak after a big
/// hash or a burst of work). A no-op on other C libraries.
pub(crate) fn give_back_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Commit intervals without a change (the sync position still) after which
/// the commit thread gives freed memory back once ([`give_back_memory`]).
const QUIET_INTERVALS_BEFORE_TRIM: u32 = 3;

/// The group-commit thread's loop: `commit()` every `interval` until `stop`
/// is set (and `stop_cv` notified). Failures are logged at most once a
/// minute (`store.trouble`), and their end once. Once the store met damage
/// (`store::fault`) it commits no more; a redb panic in `commit()` is
/// caught here (the damage it marks is logged by the next round).
pub(crate) fn run_group_commits(
    store: &Store,
    interval: Duration,
    stop: &Mutex<bool>,
    stop_cv: &Condvar,
    commit: impl Fn() -> std::result::Result<(), redb::Error>,
) {
    let mut stopped = stop.lock().unwrap_or_else(|p| p.into_inner());
    let (mut last_pos, mut quiet, mut trimmed) = (store.sync_pos.load(Ordering::SeqCst), 0u32, true);
    loop {
        // Set while we committed (its notify missed): stop now.
        if *stopped {
            return;
        }
        let (g, _) = stop_cv.wait_timeout(stopped, interval).unwrap_or_else(|p| p.into_inner());
        stopped = g;
        if *stopped {
            return;
        }
        drop(stopped);
        // Damage met while serving (`store::fault`): no more commits (the
        // store is read-only); named and logged once, here at the latest.
        if store.damage().is_some() {
            stopped = stop.lock().unwrap_or_else(|p| p.into_inner());
            continue;
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&commit)).unwrap_or_else(|_| Err(redb::Error::Corrupted("a group commit panicked".into())));
        match r {
            Err(_) if store.fault.is_hit() => {}
            Err(e) => {
                if store.trouble.due() {
                    tracing::error!("group commit failed: {e}");
                }
            }
            Ok(()) => {
                if store.trouble.reset() {
                    tracing::warn!("store: commits work again");
                }
            }
        }
        // After a burst of work, once the workspace is quiet, the memory it
        // freed goes back to the system (RSS falls back towards idle).
        let pos = store.sync_pos.load(Ordering::SeqCst);
        if pos != last_pos {
            (last_pos, quiet, trimmed) = (pos, 0, false);
        } else if !trimmed {
            quiet += 1;
            if quiet >= QUIET_INTERVALS_BEFORE_TRIM {
                give_back_memory();
                trimmed = true;
            }
        }
        stopped = stop.lock().unwrap_or_else(|p| p.into_inner());
    }
}
