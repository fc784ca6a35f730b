//! The working-copy builder of a lazy clone (D58) and the page cache fill
//! (D79): one thread fed with the batches the prefetch stored, which puts
//! the small files they complete in the kernel's page cache at once and,
//! once the prefetch ended, builds working copies ahead of first opens.
//!
//! Owns: the plan's feeding, the fill's bounds and memory, the builds'
//! pacing. Must not know: remotes, batches' states.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fs_core::Fs;

use super::{Hash, STATS};

/// The working-copy builder waits until no open was served from chunks for
/// this long (D67).
const BUILD_AFTER_IDLE: Duration = Duration::from_secs(1);

/// The prefetch's stored batches on their way to the builder: the hashes,
/// and the checked bytes while the page cache fill wants them (D79) and
/// fewer than [`FILL_BATCHES`] batches of bytes wait in the channel (a
/// builder still planning does not make the prefetch hold a clone's bytes
/// in memory); else empty slices.
#[derive(Clone)]
pub(super) struct Handoff {
    tx: std::sync::mpsc::Sender<Vec<(Hash, Bytes)>>,
    /// Batches with bytes in the channel; `usize::MAX`: no fill (no bytes).
    queued: Arc<AtomicUsize>,
}

impl Handoff {
    pub(super) fn send(&self, mut got: Vec<(Hash, Bytes)>) {
        let q = &self.queued;
        let with_bytes = q.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < FILL_BATCHES).then_some(n + 1)).is_ok();
        if !with_bytes {
            for g in &mut got {
                g.1 = Bytes::new();
            }
        }
        if self.tx.send(got).is_err() && with_bytes {
            q.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Starts the thread that builds working copies ahead of their first open
/// (D58): it plans the stored files without one ([`Fs::wc_plan`]), notes
/// those whose chunks are all local and each file the prefetch's batches
/// (sent through the returned [`Handoff`]) complete — filling the page
/// cache with the small ones at once when `cache` is given ([`Fill`]) —
/// and once the prefetch ended (every sender dropped) lowers itself to the
/// hash workers' priority and builds them and whatever is left whose chunks
/// a first open fetched. It stops early when `stop` is set. The thread's
/// handle is None when it could not start (logged).
pub(super) fn spawn_builder(fs: Arc<Fs>, stop: Arc<AtomicBool>, cache: Option<fuse_uring::Notifier>) -> (Handoff, Option<std::thread::JoinHandle<()>>) {
    let (tx, rx) = std::sync::mpsc::channel::<Vec<(Hash, Bytes)>>();
    // RINGFS_TEST_NO_FILL: measurements of the fill's effect.
    let cache = cache.filter(|_| std::env::var_os("RINGFS_TEST_NO_FILL").is_none());
    let queued = Arc::new(AtomicUsize::new(if cache.is_some() { 0 } else { usize::MAX }));
    let handoff = Handoff { tx, queued: queued.clone() };
    let t = std::thread::Builder::new().name("ringfs-wcbuild".into()).spawn(move || {
        let t0 = std::time::Instant::now();
        let mut plan = match fs.wc_plan() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("working copies are built at first open: {e}");
                return;
            }
        };
        tracing::info!("{} working copies to build ahead of their first open (planned in {:.1} ms)", plan.len(), t0.elapsed().as_secs_f64() * 1e3);
        let build = |inos: Vec<u64>| -> bool {
            for ino in inos {
                // A reader busy with opens served from chunks needs no
                // working copies (D67): build only once it paused.
                while fs_core::since_chunk_open().is_some_and(|d| d < BUILD_AFTER_IDLE) && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                if stop.load(Ordering::SeqCst) {
                    return false;
                }
                match fs.prebuild_wc(ino) {
                    Ok(true) => {
                        STATS.built.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => {}
                    // Its first open builds it (and reports the error).
                    Err(e) => tracing::debug!("{e}"),
                }
            }
            true
        };
        // Nothing is built while the prefetch runs: on two cores the builds
        // competed with it and with the reader and made the benchmark's
        // read-back slower (D58); the files its batches complete are only
        // noted, and built once every sender is gone.
        let mut fill = Fill { cache, budget: FILL_TOTAL, known: HashMap::new(), batches: VecDeque::new() };
        let mut ready = plan.take_ready();
        fill.files(&fs, &ready);
        while let Ok(got) = rx.recv() {
            if got.first().is_some_and(|g| !g.1.is_empty()) {
                let _ = queued.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n != usize::MAX).then(|| n.saturating_sub(1)));
            }
            if fill.cache.is_none() || fill.budget == 0 || plan.is_empty() {
                // The fill stopped (or no planned file is left to complete):
                // no more bytes through the channel.
                queued.store(usize::MAX, Ordering::SeqCst);
            }
            if stop.load(Ordering::SeqCst) {
                return;
            }
            if !plan.is_empty() {
                let now = plan.stored(got.iter().map(|g| &g.0));
                fill.remember(got);
                fill.files(&fs, &now);
                ready.extend(now);
            }
        }
        // The prefetch ended: building working copies is background work
        // (RINGFS_TEST_NO_WC_BUILD: none, for tests of what reads do).
        if std::env::var_os("RINGFS_TEST_NO_WC_BUILD").is_some() {
            return;
        }
        fs_core::background_priority();
        ready.extend(plan.rest());
        // Last first: a reader that started at the first files (the
        // prefetch's order is a path walk's, D82) and this thread meet in
        // the middle instead of both going for the same files (one of them waiting on the
        // other's build). Each build's inode is allocated unnamed
        // (O_TMPFILE), outside the directory's lock, so the two do work
        // side by side.
        ready.reverse();
        build(ready);
    });
    match t {
        Ok(t) => (handoff, Some(t)),
        Err(e) => {
            tracing::warn!("prefetch: starting the working-copy builder: {e}");
            handoff.queued.store(usize::MAX, Ordering::SeqCst);
            (handoff, None)
        }
    }
}

/// A file the prefetch completed is put in the kernel's page cache when it
/// is at most this big (a bigger file's reads are few and large)...
const FILL_MAX: u64 = 1 << 20;
/// ... until this many bytes were put there in this mount.
const FILL_TOTAL: u64 = 512 << 20;

/// The page cache fill of files the prefetch completes (D79): their bytes
/// put in the kernel's page cache (FUSE_NOTIFY_STORE) before a reader asks,
/// so a read-only open (served from the same chunks, FOPEN_KEEP_CACHE)
/// reads them with no READ request.
struct Fill {
    /// None: no fill (no notifier, RINGFS_TEST_NO_FILL, or the kernel
    /// refused a notification: then no more are tried).
    cache: Option<fuse_uring::Notifier>,
    /// Bytes the fill may still put in the page cache ([`FILL_TOTAL`]).
    budget: u64,
    /// The chunks of the last [`FILL_BATCHES`] batches stored, by hash (a
    /// file a batch completes mostly began in the one before).
    known: HashMap<Hash, Bytes>,
    batches: VecDeque<Vec<Hash>>,
}

/// How many of the prefetch's last batches the fill keeps in memory.
const FILL_BATCHES: usize = 8;

impl Fill {
    fn remember(&mut self, got: Vec<(Hash, Bytes)>) {
        if self.cache.is_none() || self.budget == 0 || got.first().is_none_or(|g| g.1.is_empty()) {
            return;
        }
        if self.batches.len() == FILL_BATCHES {
            for h in self.batches.pop_front().unwrap_or_default() {
                self.known.remove(&h);
            }
        }
        self.batches.push_back(got.iter().map(|g| g.0).collect());
        self.known.extend(got);
    }

    fn files(&mut self, fs: &Fs, inos: &[u64]) {
        for &ino in inos {
            let Some(n) = self.cache.as_ref() else { return };
            if self.budget == 0 {
                return;
            }
            // What the kernel said (kept here: fs-core's error is a line).
            let (mut put, mut refused) = (0u64, None);
            let r = fs.fill_page_cache(ino, FILL_MAX.min(self.budget), &self.known, |b| {
                match n.store(ino, 0, b) {
                    Ok(()) => put = b.len() as u64,
                    Err(e) => refused = Some(e),
                }
                Ok(())
            });
            match (r, refused) {
                // The kernel dropped the inode since: nothing was stored.
                (_, Some(e)) if e.raw_os_error() == Some(libc::ENOENT) => {}
                (_, Some(e)) => {
                    tracing::warn!("page cache fill stopped: the kernel refused FUSE_NOTIFY_STORE for inode {ino}: {e}");
                    self.cache = None;
                }
                (Ok(Some(true)), None) => {
                    // Written meanwhile by a path that takes no guard: the
                    // pages may be older than the file.
                    let _ = n.inval_inode(ino, 0, 0);
                }
                (Ok(Some(false)), None) => {
                    STATS.filled.fetch_add(1, Ordering::Relaxed);
                    STATS.filled_bytes.fetch_add(put, Ordering::Relaxed);
                    self.budget = self.budget.saturating_sub(put);
                }
                (Ok(None), None) => {}
                (Err(e), None) => tracing::debug!("{e}"),
            }
        }
    }
}
