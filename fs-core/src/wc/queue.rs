//! The hash queue: files waiting to be hashed, each with the instant before
//! which it is not ([`Hasher`]); the workers take them in batches of due
//! files ([`Hasher::next_batch`]).
//!
//! Owns: the delays (a released file waits [`HASH_DELAY`], an fsynced one
//! [`FSYNC_HASH_DELAY`]), coalescing (an inode is queued once while queued,
//! `State::hash_queued`), and the drain at shutdown (due times ignored).
//! Must not touch: the working copies or the store (the workers do).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::inode::State;

/// How long a file released after writing waits before it is hashed (the
/// working copy is the truth meanwhile).
pub(crate) const HASH_DELAY: Duration = Duration::from_millis(300);

/// How long an fsynced file waits before it is hashed, and how long an
/// open file must have gone unwritten before it is: a database that
/// fsyncs many times a second is hashed once it pauses (or at its close),
/// not at every fsync.
pub(crate) const FSYNC_HASH_DELAY: Duration = Duration::from_secs(2);

/// The most files one batch holds (one redb transaction stores them).
pub(crate) const BATCH_FILES: usize = 1000;

#[derive(Default)]
struct Queue {
    /// (not before, inode), earliest first.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    open: bool,
    /// Closed: hand out everything at once, due or not, then end.
    draining: bool,
}

/// The queue of files to hash, read by the hash workers. Starts closed
/// ([`Hasher::open`]).
#[derive(Default)]
pub(crate) struct Hasher {
    q: Mutex<Queue>,
    cv: Condvar,
}

impl Hasher {
    fn q(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the queue for [`Hasher::queue`].
    pub(crate) fn open(&self) {
        let mut q = self.q();
        q.open = true;
        q.draining = false;
    }

    /// Closes the queue: nothing more is queued, and the workers take what
    /// is left without waiting for its due time, then end.
    pub(crate) fn close(&self) {
        let mut q = self.q();
        q.open = false;
        q.draining = true;
        self.cv.notify_all();
    }

    /// Is the queue open (not shutting down)?
    pub(crate) fn is_open(&self) -> bool {
        self.q().open
    }

    /// Queues `ino` for hashing after [`HASH_DELAY`].
    pub(crate) fn queue(&self, st: &mut State, ino: u64) {
        self.queue_after(st, ino, HASH_DELAY)
    }

    /// Queues `ino` for hashing after `delay` (once while queued: a queued
    /// inode keeps its earlier time); after [`Hasher::close`] nothing is
    /// queued. `st` is the inode table (locked by the caller: the table's
    /// lock comes before the queue's).
    pub(crate) fn queue_after(&self, st: &mut State, ino: u64, delay: Duration) {
        let mut q = self.q();
        if !q.open {
            return;
        }
        if st.hash_queued.insert(ino) {
            q.heap.push(Reverse((Instant::now() + delay, ino)));
            self.cv.notify_one();
        }
    }

    /// Blocks until some files are due and returns up to `max` of them
    /// (earliest first; after [`Hasher::close`] all, due or not). `None`
    /// once the queue is closed and empty: the worker ends.
    pub(crate) fn next_batch(&self, max: usize) -> Option<Vec<u64>> {
        let mut q = self.q();
        loop {
            let now = Instant::now();
            match q.heap.peek() {
                None if !q.open => return None,
                None => q = self.cv.wait(q).unwrap_or_else(|p| p.into_inner()),
                Some(Reverse((due, _))) if *due > now && !q.draining => {
                    let wait = *due - now;
                    q = self.cv.wait_timeout(q, wait).unwrap_or_else(|p| p.into_inner()).0;
                }
                Some(_) => {
                    let mut out = Vec::new();
                    while out.len() < max {
                        match q.heap.peek() {
                            Some(Reverse((due, _))) if *due <= now || q.draining => {
                                let Reverse((_, ino)) = q.heap.pop().unwrap();
                                out.push(ino);
                            }
                            _ => break,
                        }
                    }
                    return Some(out);
                }
            }
        }
    }
}
