//! The FUSE-over-io_uring transport (kernel ≥ 6.14, `CONFIG_FUSE_IO_URING`,
//! module parameter `enable_uring=Y`).
//!
//! Only moves bytes: every request goes through the same
//! [`Dispatcher::dispatch_parts`](crate::Dispatcher::dispatch_parts) as the
//! `/dev/fuse` transport uses through `dispatch`. Kernel doc:
//! Documentation/filesystems/fuse-io-uring.rst.
//!
//! Owns the queues, their threads, the start-up probe and the pool for slow
//! requests; the entries' buffers and one request's trip through them are
//! its submodule `entry`. It builds on [`dev`](crate::dev) (the
//! [`FuseDev`] its SQEs name) and on the dispatcher (through `Handler`). It
//! does not mount, answer INIT, read `/dev/fuse` or decide whether io_uring
//! is used: the session does, and tears the connection down if the ring fails.
//!
//! # Structure
//!
//! - One `Queue` per **possible** CPU (the kernel routes a request to the
//!   queue of the CPU its caller runs on and hangs if a queue is missing),
//!   each with its own `IoUring` (128-byte SQEs, mandatory) and `depth`
//!   registered entries. An entry owns a 288-byte header buffer (`in_out`,
//!   `op_in`, `fuse_uring_ent_in_out`) and a payload buffer of the
//!   negotiated maximum payload (`QueueMem`).
//! - One thread per queue, started in `mount` (it must be the thread that
//!   submits its entries' SQEs: the kernel hands a request to an entry as
//!   task work of that thread, so any other thread, blocked in a syscall on
//!   the mount, would deadlock it). It waits for CQEs; a CQE on an entry
//!   means "a request is in this entry". Quick requests are dispatched
//!   inline and answered with COMMIT_AND_FETCH, which also re-arms the entry.
//! - Slow requests ([`Filesystem::is_slow`](crate::Filesystem::is_slow),
//!   default [`is_slow_default`](crate::is_slow_default): fsync, release,
//!   fallocate, copy_file_range, large reads/writes) are
//!   handed to a [`SlowPool`] thread; the entry stays owned by that job until the
//!   ring thread commits it (a hop costs two thread wake-ups, measured
//!   +25..70 µs on a loaded 2-CPU machine). The job writes the
//!   reply into the entry's buffers, queues the entry index on the queue's
//!   `Wakeup` and writes its eventfd; the ring thread has a POLL_ADD on that
//!   eventfd, so it wakes, and only the ring thread ever touches its ring.
//!
//! # Entry ownership
//!
//! At any time an entry's buffers belong to exactly one party: the kernel
//! (from the REGISTER/COMMIT_AND_FETCH SQE until its CQE), the ring thread
//! (after the CQE), or one pool job (from hand-off until it queues the
//! entry on the wakeup list). That protocol is what makes the raw-pointer
//! accesses in `QueueMem` sound. Buffers are freed only once every entry
//! has been reported dead by the kernel (drained); a ring torn down any
//! other way leaks them rather than risk a late kernel write.
//!
//! # Startup and failure detection
//!
//! After INIT was answered with FUSE_OVER_IO_URING, `start` starts the
//! queue threads, which set up their rings and submit their REGISTERs. An
//! immediate error CQE (bad size, qid, SQE size, not initialised) fails the
//! start. `Rings::probe` then sends one STATFS (`fstatfs` on an `O_PATH` fd
//! of the new mount's root, never the mount point's path, which may show
//! another mount by then) from a thread pinned to each CPU the process may use; the ring threads answer it (ENOSYS) and hold any
//! other request until `Session::run` hands them the dispatcher. A probe not
//! answered within the timeout (e.g. a queue did not register) fails the
//! start. The caller then aborts the connection, so nothing stays hung
//! (`session::mount`).
//!
//! # Teardown
//!
//! On unmount or abort the kernel completes every registered entry with
//! -ENOTCONN (a commit to a dead connection fails too); a queue thread ends
//! when all its entries have ended, then `Session::run` returns. On kill -9
//! the kernel cancels the entries when the rings close and aborts the
//! connection when the last `/dev/fuse` reference goes: callers get
//! ENOTCONN and `umount` succeeds.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::abi::*;
use crate::dev::FuseDev;
use crate::reply::ReplyBuf;
use crate::slow::SlowPool;

mod entry;
use entry::{ent_in_out, io_size, process_entry, put_reply, QueueMem, ENT_IN_OUT, OP_IN};
pub(crate) use entry::Handler;
pub use entry::HEADER_SIZE;

/// user_data of the eventfd poll.
const WAKE: u64 = u64::MAX;

type Ring = IoUring<squeue::Entry128, cqueue::Entry>;

/// Deliberate start failures, for testing the fallback (never in production).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RingFault {
    /// No fault.
    #[default]
    None,
    /// Register a payload buffer that is too small: REGISTER fails.
    SmallPayload,
    /// Do not register the last queue: the ring never gets ready and the
    /// probe times out (the classic hung-mount trap).
    SkipLastQueue,
    /// Mount a tmpfs over the mount point just before the probe (someone
    /// else mounting on, or detaching, the path while the ring starts).
    OvermountBeforeProbe,
    /// Both [`Self::OvermountBeforeProbe`] and [`Self::SkipLastQueue`].
    OvermountAndSkipLastQueue,
}

impl RingFault {
    pub(crate) fn skips_last_queue(self) -> bool {
        matches!(self, RingFault::SkipLastQueue | RingFault::OvermountAndSkipLastQueue)
    }
    pub(crate) fn overmounts(self) -> bool {
        matches!(self, RingFault::OvermountBeforeProbe | RingFault::OvermountAndSkipLastQueue)
    }
}

/// Told to a ring thread once start-up is over.
pub(crate) enum Start {
    /// Serve requests.
    Serve { handler: Arc<dyn Handler>, pool: Arc<SlowPool> },
    /// The start failed or the session was dropped unserved: exit now
    /// (closing the ring cancels its entries).
    Stop,
}

/// State shared between `mount` (the probe) and the ring threads.
#[derive(Default)]
struct Control {
    /// Thread ids whose STATFS is a probe, answered by the ring thread.
    probe_tids: Mutex<Vec<i32>>,
    /// Probe requests answered through a ring.
    answered: std::sync::atomic::AtomicUsize,
}

/// One queue, owned by its thread: the ring, its entries, requests held.
struct Queue {
    qid: u16,
    ring: Ring,
    mem: Arc<QueueMem>,
    dev: RawFd,
}

fn cmd_bytes(commit_id: u64, qid: u16) -> [u8; 80] {
    let req = fuse_uring_cmd_req { flags: 0, commit_id, qid, padding: [0; 6] };
    let mut cmd = [0u8; 80];
    cmd[..std::mem::size_of::<fuse_uring_cmd_req>()].copy_from_slice(req.as_bytes());
    cmd
}

/// Sets `sqe->len` (u32 at byte 24 of the SQE), which `UringCmd80` has no setter for.
fn set_sqe_len(e: &mut squeue::Entry128, len: u32) {
    // SAFETY: Entry128 is repr(C) and starts with the 64-byte io_uring_sqe,
    // whose `len` field is the u32 at offset 24.
    unsafe { (e as *mut squeue::Entry128 as *mut u8).add(24).cast::<u32>().write_unaligned(len) }
}

impl Queue {
    fn push(&mut self, e: &squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: every buffer an SQE points to (iovecs, entry buffers)
            // lives in `self.mem`, which outlives the ring's use of it.
            if unsafe { self.ring.submission().push(e) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    fn register(&mut self, i: usize) -> io::Result<()> {
        let iov = self.mem.iov[i].as_ptr();
        let mut e = opcode::UringCmd80::new(types::Fd(self.dev), FUSE_IO_URING_CMD_REGISTER)
            .cmd(cmd_bytes(0, self.qid))
            .addr(Some(iov as u64))
            .build()
            .user_data(i as u64);
        set_sqe_len(&mut e, 2);
        self.push(&e)
    }

    fn commit(&mut self, i: usize) -> io::Result<()> {
        // SAFETY: we own entry i (it is being committed by us).
        let commit_id = unsafe { ent_in_out(&self.mem, i) }.commit_id;
        let e = opcode::UringCmd80::new(types::Fd(self.dev), FUSE_IO_URING_CMD_COMMIT_AND_FETCH)
            .cmd(cmd_bytes(commit_id, self.qid))
            .build()
            .user_data(i as u64);
        self.push(&e)
    }

    fn arm_wake(&mut self, efd: RawFd) -> io::Result<()> {
        let e = opcode::PollAdd::new(types::Fd(efd), libc::POLLIN as u32).build().user_data(WAKE);
        self.push(&e.into())
    }

    /// Completions available now, as (user_data, result).
    fn reap(&mut self, out: &mut Vec<(u64, i32)>) {
        out.clear();
        out.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
    }
}

/// The ring threads of one connection (one per queue), started by [`start`].
pub(crate) struct Rings {
    threads: Vec<std::thread::JoinHandle<io::Result<()>>>,
    starts: Vec<(mpsc::Sender<Start>, Arc<Wakeup>)>,
    control: Arc<Control>,
    /// Registered entries per queue.
    pub(crate) depth: usize,
    /// Keeps the fd the SQEs name open.
    _dev: FuseDev,
}

impl std::fmt::Debug for Rings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rings").field("queues", &self.threads.len()).field("depth", &self.depth).finish()
    }
}

/// Starts one thread per queue (`nqueues`), each setting up its ring with
/// `depth` entries of `payload_len`-byte payloads and registering them
/// **from that thread** (the kernel delivers a request to an entry as task
/// work of the thread that submitted the entry's last SQE, so the thread
/// serving an entry must be the one that registered it). Waits until every
/// queue reports its REGISTERs accepted or rejected. Errors are reasons.
pub(crate) fn start(dev: &FuseDev, nqueues: usize, depth: usize, payload_len: usize, fault: RingFault) -> Result<Rings, String> {
    let depth = depth.max(1);
    let control = Arc::new(Control::default());
    let mut rings = Rings { threads: Vec::new(), starts: Vec::new(), control: control.clone(), depth, _dev: dev.clone() };
    let payload_len = if fault == RingFault::SmallPayload { 4096 } else { payload_len };
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    for qid in 0..nqueues {
        let wake = Arc::new(Wakeup::new().map_err(|e| format!("eventfd: {e}"))?);
        let (start_tx, start_rx) = mpsc::channel();
        let skip = fault.skips_last_queue() && qid == nqueues - 1;
        let (ready, control, w) = (ready_tx.clone(), control.clone(), wake.clone());
        let dev = dev.as_fd().as_raw_fd();
        let h = std::thread::Builder::new()
            .name(format!("fuse-ring-{qid}"))
            .spawn(move || queue_thread(qid as u16, dev, depth, payload_len, skip, ready, start_rx, w, control))
            .map_err(|e| format!("ring thread: {e}"));
        match h {
            Ok(h) => {
                rings.threads.push(h);
                rings.starts.push((start_tx, wake));
            }
            Err(e) => {
                rings.stop();
                return Err(e);
            }
        }
    }
    drop(ready_tx);
    for _ in 0..nqueues {
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                rings.stop();
                return Err(e);
            }
            Err(_) => {
                rings.stop();
                return Err("a ring thread did not report its registration".into());
            }
        }
    }
    Ok(rings)
}

fn gettid() -> i32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::gettid() }
}

fn pin_to_cpu(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: a zeroed cpu_set_t is an empty set; cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the zeroed set; CPU_ISSET reads within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![];
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

impl Rings {
    /// The number of queues.
    pub(crate) fn queues(&self) -> usize {
        self.threads.len()
    }

    /// Checks that requests really come through the rings: one STATFS on
    /// this connection's root (`root`, an `O_PATH` fd opened right after
    /// `mount(2)`; never the mount point's path, which may show another
    /// mount by now) from a thread pinned to each CPU this process may run
    /// on, answered (ENOSYS) by the ring threads without reaching the
    /// filesystem. Other requests arriving meanwhile wait in their entries
    /// until [`Self::serve`]. Err if a probe is not answered through a ring
    /// within `timeout`; the caller must then abort the connection, which
    /// also ends the blocked probe threads.
    pub(crate) fn probe(&mut self, root: BorrowedFd<'_>, timeout: Duration) -> Result<(), String> {
        let mut cpus: Vec<Option<usize>> =
            allowed_cpus().into_iter().filter(|&c| c < self.queues()).map(Some).collect();
        if cpus.is_empty() {
            cpus.push(None);
        }
        // (cpu, statfs errno or 0) per finished probe.
        let (done_tx, done_rx) = mpsc::channel::<(Option<usize>, i32)>();
        for &cpu in &cpus {
            let done = done_tx.clone();
            // Each probe owns its fd: a late one never statfs'es a reused fd number.
            let fd = root.try_clone_to_owned().map_err(|e| format!("probe fd: {e}"))?;
            let (tid_tx, tid_rx) = mpsc::channel();
            let (go_tx, go_rx) = mpsc::channel::<()>();
            std::thread::Builder::new()
                .name("fuse-ring-probe".into())
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        pin_to_cpu(cpu);
                    }
                    let _ = tid_tx.send(gettid());
                    if go_rx.recv().is_err() {
                        return;
                    }
                    // SAFETY: valid fd and out-pointer.
                    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
                    // SAFETY: as above.
                    let r = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) };
                    let errno = if r == 0 { 0 } else { io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO) };
                    let _ = done.send((cpu, errno));
                })
                .map_err(|e| format!("probe thread: {e}"))?;
            let tid = tid_rx.recv().map_err(|_| "probe thread died".to_string())?;
            self.control.probe_tids.lock().unwrap_or_else(|e| e.into_inner()).push(tid);
            let _ = go_tx.send(());
        }
        drop(done_tx);
        let deadline = Instant::now() + timeout;
        let mut odd = Vec::new();
        for _ in 0..cpus.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            match done_rx.recv_timeout(left) {
                Ok((_, libc::ENOSYS)) => {}
                Ok((cpu, errno)) => odd.push(match cpu {
                    Some(c) => format!("cpu {c}: {}", io::Error::from_raw_os_error(errno)),
                    None => format!("{}", io::Error::from_raw_os_error(errno)),
                }),
                Err(_) => {
                    let answered = self.control.answered.load(Ordering::SeqCst);
                    return Err(format!(
                        "no answer through the ring within {timeout:?} ({answered} of {} probe requests arrived)",
                        cpus.len()
                    ));
                }
            }
        }
        let answered = self.control.answered.load(Ordering::SeqCst);
        if answered < cpus.len() {
            return Err(format!(
                "only {answered} of {} probe requests came through the ring (statfs: {})",
                cpus.len(),
                odd.join(", ")
            ));
        }
        Ok(())
    }

    fn tell(&mut self, mut make: impl FnMut() -> Start) {
        for (tx, wake) in &self.starts {
            let _ = tx.send(make());
            wake.signal();
        }
        self.starts.clear();
    }

    /// Lets every ring thread serve with `handler`; returns their handles.
    pub(crate) fn serve(mut self, handler: Arc<dyn Handler>, pool: Arc<SlowPool>) -> Vec<std::thread::JoinHandle<io::Result<()>>> {
        self.tell(|| Start::Serve { handler: handler.clone(), pool: pool.clone() });
        std::mem::take(&mut self.threads)
    }

    /// Stops and joins every ring thread (their rings close; entries the
    /// kernel held are cancelled). Call after aborting the connection.
    pub(crate) fn stop(&mut self) {
        self.tell(|| Start::Stop);
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Rings {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Wakes a ring thread: entries finished by pool jobs, or a [`Start`] message.
pub(crate) struct Wakeup {
    done: Mutex<Vec<usize>>,
    efd: OwnedFd,
}

impl Wakeup {
    fn new() -> io::Result<Wakeup> {
        // SAFETY: plain eventfd(2).
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh fd owned by nobody else.
        Ok(Wakeup { done: Mutex::new(Vec::new()), efd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }
    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64.
        unsafe { libc::write(self.efd.as_raw_fd(), &one as *const u64 as *const _, 8) };
    }
    fn finish(&self, i: usize) {
        self.done.lock().unwrap_or_else(|e| e.into_inner()).push(i);
        self.signal();
    }
    fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 (non-blocking fd).
        unsafe { libc::read(self.efd.as_raw_fd(), &mut v as *mut u64 as *mut _, 8) };
    }
}

/// The life of one queue's thread: set up and register (report on `ready`),
/// answer probes and hold other requests until told to [`Start`], then
/// serve until the kernel has ended every entry (unmount, abort).
#[allow(clippy::too_many_arguments)]
fn queue_thread(
    qid: u16,
    dev: RawFd,
    depth: usize,
    payload_len: usize,
    skip_register: bool,
    ready: mpsc::Sender<Result<(), String>>,
    start: mpsc::Receiver<Start>,
    wake: Arc<Wakeup>,
    control: Arc<Control>,
) -> io::Result<()> {
    // Requests come from this CPU: serve them here (as libfuse does).
    pin_to_cpu(qid as usize);
    let setup = || -> Result<Queue, String> {
        let entries = (depth as u32 + 2).next_power_of_two();
        // Only this thread submits, and it runs the ring's task work itself
        // when it waits for completions (no interruptions while it serves a
        // request). Kernels without DEFER_TASKRUN (< 6.1) get a plain ring.
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
            .or_else(|_| IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(entries))
        .map_err(|e| format!("io_uring_setup with 128-byte SQEs failed: {e}"))?;
        let mem = QueueMem::new(depth, payload_len).map_err(|e| format!("ring buffers: {e}"))?;
        Ok(Queue { qid, ring, mem: Arc::new(mem), dev })
    };
    let mut q = match setup() {
        Ok(q) => q,
        Err(e) => {
            let _ = ready.send(Err(format!("queue {qid}: {e}")));
            return Ok(());
        }
    };
    let mut cqes = Vec::new();
    let mut held = Vec::new(); // entries holding a request received before Serve
    if !skip_register {
        // From the first REGISTER on, the kernel may own these buffers.
        q.mem.drained.store(false, Ordering::Release);
        let reg = (|| -> io::Result<()> {
            for i in 0..depth {
                q.register(i)?;
            }
            q.ring.submit().map(drop)
        })();
        if let Err(e) = reg {
            let _ = ready.send(Err(format!("queue {qid}: submitting REGISTER: {e}")));
            return Ok(());
        }
        // A rejected REGISTER completes while it is issued; an accepted one
        // completes only when a request arrives.
        q.reap(&mut cqes);
        for &(i, res) in &cqes {
            if res < 0 {
                let e = io::Error::from_raw_os_error(-res);
                let _ = ready.send(Err(format!("queue {qid}: FUSE_IO_URING_CMD_REGISTER failed: {e}")));
                return Ok(());
            }
            held.push(i as usize);
        }
    }
    q.arm_wake(wake.efd.as_raw_fd())?;
    let _ = ready.send(Ok(()));
    drop(ready);

    // Entries not yet ended by the kernel (an error CQE ends one for good).
    let mut live = if skip_register { 0 } else { depth };

    // Start-up: answer probes, hold everything else.
    let (handler, pool) = loop {
        match q.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
            Err(e) => return Err(e),
        }
        q.reap(&mut cqes);
        let mut msg = None;
        for &(ud, res) in &cqes {
            if ud == WAKE {
                wake.clear();
                if let Ok(m) = start.try_recv() {
                    msg = Some(m);
                }
                q.arm_wake(wake.efd.as_raw_fd())?;
                continue;
            }
            let i = ud as usize;
            if res < 0 {
                live -= 1; // the entry is gone (connection aborted)
                continue;
            }
            // SAFETY: this CQE hands entry i to this thread.
            let h = fuse_in_header::read_from(unsafe { q.mem.hdr(i) }).expect("288 bytes");
            let is_probe = h.opcode == FUSE_STATFS
                && control.probe_tids.lock().unwrap_or_else(|e| e.into_inner()).contains(&(h.pid as i32));
            if is_probe {
                let mut reply = ReplyBuf::with_capacity(0);
                reply.reset(h.unique);
                reply.set_error(libc::ENOSYS);
                // SAFETY: as above.
                unsafe { put_reply(&q.mem, i, &mut reply) };
                q.commit(i)?;
                control.answered.fetch_add(1, Ordering::SeqCst);
            } else {
                held.push(i);
            }
        }
        match msg {
            Some(Start::Serve { handler, pool }) => break (handler, pool),
            // Closing the ring cancels the entries; the buffers are leaked
            // (not drained) in case the kernel still writes to them.
            Some(Start::Stop) => return Ok(()),
            None => {}
        }
    };

    // Serving.
    let mut reply = ReplyBuf::with_capacity(64 * 1024);
    cqes.clear();
    cqes.extend(held.into_iter().map(|i| (i as u64, 0)));
    loop {
        for &(ud, res) in &cqes {
            if ud == WAKE {
                wake.clear();
                let done = std::mem::take(&mut *wake.done.lock().unwrap_or_else(|e| e.into_inner()));
                for i in done {
                    q.commit(i)?;
                }
                q.arm_wake(wake.efd.as_raw_fd())?;
                continue;
            }
            let i = ud as usize;
            if res == -libc::ENOENT {
                // The kernel no longer knew the committed request and did not
                // re-arm the entry: register it again so the queue keeps it.
                tracing::debug!(qid, entry = i, "stale commit; re-registering the entry");
                q.register(i)?;
                continue;
            }
            if res < 0 {
                live -= 1;
                continue;
            }
            // SAFETY: this CQE hands entry i to this thread.
            let (opcode, slow) = unsafe {
                let hdr = q.mem.hdr(i);
                let opcode = fuse_in_header::read_from(hdr).map_or(0, |h| h.opcode);
                (opcode, handler.is_slow(opcode, io_size(opcode, &hdr[OP_IN..ENT_IN_OUT])))
            };
            if slow && pool.started() {
                tracing::trace!(qid, opcode, "to the pool");
                let (mem, wake, handler) = (q.mem.clone(), wake.clone(), handler.clone());
                pool.submit(Box::new(move |reply: &mut ReplyBuf| {
                    // SAFETY: the ring thread handed entry i to this job.
                    unsafe { process_entry(&mem, i, &*handler, reply) };
                    wake.finish(i);
                }));
            } else {
                // SAFETY: as above.
                unsafe { process_entry(&q.mem, i, &*handler, &mut reply) };
                q.commit(i)?;
            }
        }
        if live == 0 {
            break;
        }
        match q.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
            Err(e) => return Err(e),
        }
        q.reap(&mut cqes);
    }
    // Every entry came back with an error: the kernel holds none of them.
    q.mem.drained.store(true, Ordering::Release);
    tracing::debug!(qid, "ring queue ended");
    Ok(())
}
