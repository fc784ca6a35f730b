//! Pools of ready backing files: empty files made in advance under reserved
//! inode numbers, one pool for working copies (`wc/`) and one for
//! local-only files, so that a create takes a file instead of creating one
//! on the request path. A pool doubles (from [`POOL_MIN`] up to
//! [`POOL_MAX`]) whenever a create finds it empty; the local-only pool
//! starts at 0 (or at the files a clean shutdown left), so a workspace
//! without local-only files keeps none.
//! The files ready at a clean shutdown stay for the next mount (the final
//! commit records them in the store's `pool` table; [`Pools::new`] sizes
//! the pools for them), so a fresh mount's creates do not make files on the
//! request path (D52).
//!
//! The pool thread also deletes the set-aside backing files of removed
//! files once a durable commit has recorded their removal
//! (`State::unlink_ready`, D76), off the thread that committed.
//!
//! Owns: the pool thread and how many files to keep. The reserved numbers
//! themselves live in the inode table (`State::pool`), under its lock. Must
//! not touch: the store.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use crate::inode::{lock, State, POOL_LOCAL, POOL_WC};
use crate::throttle::LogThrottle;
use crate::wc::Dirs;

/// The smallest and largest number of ready files kept per pool.
pub(crate) const POOL_MIN: usize = 8;
pub(crate) const POOL_MAX: usize = 512;

/// The sizes of the two pools and the thread that keeps them filled.
pub(crate) struct Pools {
    /// How many ready backing files to keep, per pool (`[POOL_WC]`, `[POOL_LOCAL]`).
    pub(crate) size: [AtomicUsize; 2],
    /// Wakes the pool thread (waits on the inode table's lock).
    pub(crate) cv: Condvar,
    /// Each pool failing to make a file (retried every second).
    trouble: [LogThrottle; 2],
}

impl Pools {
    /// Pools sized for `saved` ready files per side (what the last clean
    /// shutdown left, `[POOL_WC]`, `[POOL_LOCAL]`): a mount keeps as many
    /// ready as the last one needed (the working-copy pool at least
    /// [`POOL_MIN`]; the local-only pool 0 until a local-only create).
    pub(crate) fn new(saved: [usize; 2]) -> Pools {
        let wc = saved[POOL_WC].clamp(POOL_MIN, POOL_MAX);
        let local = if saved[POOL_LOCAL] == 0 { 0 } else { saved[POOL_LOCAL].clamp(POOL_MIN, POOL_MAX) };
        Pools { size: [AtomicUsize::new(wc), AtomicUsize::new(local)], cv: Condvar::new(), trouble: Default::default() }
    }

    /// A ready file's inode number from pool `side` for a new regular file,
    /// if there is one. An empty pool grows; a half-empty one wakes the
    /// pool thread.
    pub(crate) fn take(&self, st: &mut State, side: usize) -> Option<u64> {
        let from_pool = st.pool[side].pop();
        let size = &self.size[side];
        if from_pool.is_none() {
            // Creates outran the pool: keep more ready.
            let _ = size.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| Some((s * 2).clamp(POOL_MIN, POOL_MAX)));
        }
        if st.pool[side].len() <= size.load(Ordering::Relaxed) / 2 {
            self.cv.notify_one();
        }
        from_pool
    }

    /// Keeps `pool_size` empty working copies ready, under reserved inode
    /// numbers; refills when half are used.
    pub(crate) fn run(&self, table: &Mutex<State>, dirs: &Dirs, stopping: &AtomicBool) {
        let low = |st: &State, i: usize| st.pool[i].len() <= self.size[i].load(Ordering::Relaxed) / 2
            && st.pool[i].len() < self.size[i].load(Ordering::Relaxed);
        loop {
            let (side, range) = {
                let mut st = lock(table);
                while !stopping.load(Ordering::SeqCst) && !low(&st, POOL_WC) && !low(&st, POOL_LOCAL) && st.unlink_ready.is_empty() {
                    st = self.cv.wait_timeout(st, std::time::Duration::from_millis(500)).unwrap_or_else(|p| p.into_inner()).0;
                }
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                // Backing files of removed files whose removal is durable.
                let doomed = std::mem::take(&mut st.unlink_ready);
                if !doomed.is_empty() {
                    drop(st);
                    dirs.unlink_doomed(doomed);
                    continue;
                }
                let side = if low(&st, POOL_WC) { POOL_WC } else { POOL_LOCAL };
                let k = self.size[side].load(Ordering::Relaxed).saturating_sub(st.pool[side].len()) as u64;
                let first = st.next_ino;
                st.next_ino += k;
                (side, first..first + k)
            };
            let dir = dirs.data_dir(side == POOL_LOCAL);
            let mut made = Vec::new();
            let mut failed = None;
            for ino in range.clone() {
                match dir.create_new(&ino.to_string()) {
                    Ok(_) => made.push(ino),
                    Err(e) => {
                        failed = Some((ino, e));
                        break;
                    }
                }
            }
            {
                let mut st = lock(table);
                st.pool[side].extend(made.into_iter().rev());
                if let Some((ino, _)) = &failed {
                    // Give back the numbers not used, if nobody took one since.
                    if st.next_ino == range.end {
                        st.next_ino = *ino;
                    }
                }
            }
            if let Some((ino, e)) = failed {
                // A full disk: say so once a minute, retry every second.
                if self.trouble[side].due() {
                    tracing::warn!("backing-file pool: {}/{ino}: {e} (retrying every second)", dir.path().display());
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}
