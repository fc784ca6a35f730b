//! The threads both transports hand slow requests to ([`SlowPool`]):
//! fsync, release, large reads and writes ([`crate::fs::Filesystem::is_slow`]),
//! so that the threads reading requests (one per CPU on `/dev/fuse`, one per
//! queue on io_uring) keep serving fast ones meanwhile. A job is a closure
//! that dispatches one request and sends its reply, given the pool thread's
//! reply buffer; what "send" means (a write(2) on `/dev/fuse`, a
//! COMMIT_AND_FETCH through the ring thread) is the transport's.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::reply::ReplyBuf;

/// One slow request for a [`SlowPool`] thread: dispatch and reply, given
/// that thread's reply buffer.
pub(crate) type SlowJob = Box<dyn FnOnce(&mut ReplyBuf) + Send>;

/// A FIFO of [`SlowJob`]s served by a fixed set of threads named
/// `fuse-slow-K`. Shared by every reader of a session.
pub(crate) struct SlowPool {
    /// Queued jobs, and whether [`SlowPool::shutdown`] was called.
    jobs: Mutex<(VecDeque<SlowJob>, bool)>,
    cv: Condvar,
    /// Threads actually started; with none, callers serve slow requests
    /// themselves ([`SlowPool::started`]).
    started: AtomicUsize,
}

impl SlowPool {
    /// Starts `n` (≥ 1) threads. A thread that cannot be spawned is logged
    /// and left out; with none started, [`SlowPool::started`] is false.
    pub(crate) fn start(n: usize) -> (Arc<SlowPool>, Vec<std::thread::JoinHandle<()>>) {
        let pool = Arc::new(SlowPool { jobs: Mutex::new((VecDeque::new(), false)), cv: Condvar::new(), started: AtomicUsize::new(0) });
        let mut handles = Vec::new();
        for k in 0..n.max(1) {
            let p = pool.clone();
            match std::thread::Builder::new().name(format!("fuse-slow-{k}")).spawn(move || p.work()) {
                Ok(h) => handles.push(h),
                Err(e) => tracing::warn!("slow-request worker {k}: {e}"),
            }
        }
        pool.started.store(handles.len(), Ordering::Release);
        (pool, handles)
    }

    /// Whether any thread serves the pool (else submit nothing: serve inline).
    pub(crate) fn started(&self) -> bool {
        self.started.load(Ordering::Acquire) > 0
    }

    fn work(&self) {
        let mut reply = ReplyBuf::with_capacity(64 * 1024);
        loop {
            let job = {
                let mut g = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if let Some(j) = g.0.pop_front() {
                        break j;
                    }
                    if g.1 {
                        return;
                    }
                    g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
                }
            };
            job(&mut reply);
            // Do not let one huge reply pin memory forever.
            if reply.body_len() > 4 << 20 {
                reply = ReplyBuf::with_capacity(64 * 1024);
            }
        }
    }

    /// Queues `job` for the next free thread.
    pub(crate) fn submit(&self, job: SlowJob) {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).0.push_back(job);
        self.cv.notify_one();
    }

    /// Lets the threads finish queued jobs (their replies fail harmlessly
    /// once the connection is gone) and exit.
    pub(crate) fn shutdown(&self) {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.cv.notify_all();
    }
}
