//! Lazy clones (DECISIONS D51): the record of where a clone's remote-only
//! chunks are on the remote (`STORE/remotes/NAME/remote-chunks.json`,
//! docs/FORMATS.md "Remote-only chunks"), the [`ChunkSource`] a daemon
//! installs to fetch them (range GETs of the bundles, bounded retries) and
//! the prefetch thread that fetches the rest in the background while the
//! store is mounted (stopped at unmount; the next mount resumes, since only
//! chunks still remote-only in the chunk index are fetched).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use fs_core::snap::object::{hex_id, ObjectId};
use fs_core::store::remote::ChunkSource;
use fs_core::Fs;
use serde::{Deserialize, Serialize};

use super::push::parse_hex;
use super::state;
use super::store::Remote;

/// The record's file name in `STORE/remotes/NAME/`.
const FILE: &str = "remote-chunks.json";

/// `remote-chunks.json`, version 1: bundle keys, and per chunk (hex hash,
/// index into `bundles`, offset of its bytes in the bundle, length).
#[derive(Serialize, Deserialize)]
struct Record {
    version: u32,
    bundles: Vec<String>,
    chunks: Vec<(String, u32, u64, u32)>,
}

/// Where each chunk is on the remote: (bundle key, offset, length).
pub type Places = HashMap<ObjectId, (String, u64, u32)>;

/// Writes the record of remote `name` in the store `store` (durably; the
/// clone writes it before the store is renamed into place).
pub fn write(store: &Path, name: &str, places: &Places) -> Result<()> {
    let mut bundles: Vec<String> = places.values().map(|p| p.0.clone()).collect();
    bundles.sort();
    bundles.dedup();
    let idx: HashMap<&str, u32> = bundles
        .iter()
        .enumerate()
        .map(|(i, b)| (b.as_str(), i as u32))
        .collect();
    let mut chunks: Vec<(String, u32, u64, u32)> = places
        .iter()
        .map(|(h, (b, o, l))| (hex_id(h), idx[b.as_str()], *o, *l))
        .collect();
    chunks.sort_by(|a, b| (a.1, a.2).cmp(&(b.1, b.2)));
    let rec = Record {
        version: 1,
        bundles,
        chunks,
    };
    let p = state::remotes_dir(store).join(name).join(FILE);
    let tmp = p.with_extension("tmp");
    let f = std::fs::File::create(&tmp).with_context(|| format!("writing {}", tmp.display()))?;
    serde_json::to_writer(std::io::BufWriter::new(&f), &rec)?;
    f.sync_all()?;
    std::fs::rename(&tmp, &p).with_context(|| format!("writing {}", p.display()))?;
    Ok(())
}

/// The record of the store's remote-only chunks: (remote name, places), or
/// None when no remote of the store has one.
pub fn read(store: &Path) -> Result<Option<(String, Places)>> {
    for n in state::names(store) {
        let p = state::remotes_dir(store).join(&n).join(FILE);
        let b = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
        };
        let r: Record =
            serde_json::from_slice(&b).with_context(|| format!("{} is damaged", p.display()))?;
        if r.version != 1 {
            bail!(
                "{}: version {} is newer than this ringfs reads (1)",
                p.display(),
                r.version
            );
        }
        let mut m = Places::with_capacity(r.chunks.len());
        for (h, b, o, l) in r.chunks {
            let (Some(id), Some(bk)) = (parse_hex(&h), r.bundles.get(b as usize)) else {
                bail!("{} is damaged (a malformed entry)", p.display());
            };
            m.insert(id, (bk.clone(), o, l));
        }
        return Ok(Some((n, m)));
    }
    Ok(None)
}

type Hash = [u8; 32];

/// What the fetches of this process did (`remote status --json`,
/// `"lazy_fetch"`): range GET calls (one per bundle and batch group),
/// first opens that fetched, first opens that waited on a fetch already in
/// flight, and chunks / bytes received.
struct Stats {
    gets: AtomicU64,
    opens: AtomicU64,
    waits: AtomicU64,
    chunks: AtomicU64,
    bytes: AtomicU64,
    /// Working copies built in the background (D58).
    built: AtomicU64,
    /// Files put in the kernel's page cache as the prefetch completed
    /// them, and their bytes (D79).
    filled: AtomicU64,
    filled_bytes: AtomicU64,
}

static STATS: Stats = Stats {
    gets: AtomicU64::new(0),
    opens: AtomicU64::new(0),
    waits: AtomicU64::new(0),
    chunks: AtomicU64::new(0),
    bytes: AtomicU64::new(0),
    built: AtomicU64::new(0),
    filled: AtomicU64::new(0),
    filled_bytes: AtomicU64::new(0),
};

/// The fetch counters of this process (a daemon's, when asked through its
/// control socket): `{"gets", "first_opens", "waits", "chunks", "bytes",
/// "wc_built", "chunk_opens", "page_cache_files", "page_cache_bytes"}`
/// (`chunk_opens`: read-only opens served from the store's chunks with no
/// working copy, D67; `page_cache_*`: files the prefetch put in the
/// kernel's page cache, D79).
pub fn stats() -> serde_json::Value {
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    serde_json::json!({
        "gets": g(&STATS.gets),
        "first_opens": g(&STATS.opens),
        "waits": g(&STATS.waits),
        "chunks": g(&STATS.chunks),
        "bytes": g(&STATS.bytes),
        "wc_built": g(&STATS.built),
        "chunk_opens": fs_core::chunk_served_opens(),
        "page_cache_files": g(&STATS.filled),
        "page_cache_bytes": g(&STATS.filled_bytes),
    })
}

/// A neighbourhood of remote-only chunks: consecutive chunks of one bundle
/// (in offset order), up to the batch size — fetched as one coalesced range
/// GET by whoever needs one of them first (a first open or the prefetch).
struct Batch {
    bundle: String,
    chunks: Vec<(Hash, u64, u32)>,
}

/// Where a batch is.
enum State {
    Pending,
    /// Being fetched; `waiters` first opens wait for its bytes.
    InFlight {
        waiters: usize,
    },
    /// Fetched; its bytes kept until the `left` waiters took them;
    /// `storing`: by the prefetch, which has not yet ended storing it
    /// (Storing once the waiters took it, if it still has not).
    Ready {
        got: Arc<Vec<(Hash, Vec<u8>)>>,
        left: usize,
        storing: bool,
    },
    /// Fetched by the prefetch, which is storing it now ([`Source::stored`]
    /// makes it Done): a first open that needs one of its chunks waits for
    /// that instead of fetching the chunk again.
    Storing,
    Done,
}

struct Sched {
    states: Vec<State>,
    /// The prefetch's next batch (every batch before it left Pending once).
    cursor: usize,
}

/// Fetches remote-only chunks from one remote by range GETs of their
/// bundles, a neighbourhood ([`Batch`]) at a time: a first open fetches
/// the whole batch its chunks are in (or waits for a fetch of it already
/// in flight), the prefetch takes the others in bundle order. At most
/// [`TRIES`] attempts per GET, [`PAUSE`] apart then doubling, then an error
/// naming the remote and the chunk.
pub struct Source {
    name: String,
    url: String,
    places: Places,
    batches: Vec<Batch>,
    /// Chunk → its batch.
    of: HashMap<Hash, usize>,
    sched: Mutex<Sched>,
    cv: Condvar,
    /// Open remotes ready for use (one per concurrent fetch).
    pool: Mutex<Vec<Remote>>,
}

const TRIES: u32 = 3;
const PAUSE: Duration = Duration::from_millis(200);
/// How long a first open waits for the prefetch to end storing a batch it
/// fetched, at most (then it fetches the chunks it needs itself).
const SETTLE: Duration = Duration::from_secs(10);

impl Source {
    /// The source of remote `name` of `store`, for the chunks of `places`;
    /// those of `left` (still remote-only) are cut into batches of about
    /// `batch_bytes` in bundle order.
    pub fn new(
        store: &Path,
        name: &str,
        places: Places,
        left: &[(Hash, u32)],
        batch_bytes: u64,
    ) -> Result<Source> {
        let c = state::load(store, name)?;
        let mut order: Vec<(&str, u64, u32, Hash)> = left
            .iter()
            .filter_map(|(h, _)| places.get(h).map(|p| (p.0.as_str(), p.1, p.2, *h)))
            .collect();
        order.sort();
        let mut batches: Vec<Batch> = Vec::new();
        let mut bytes = 0u64;
        for (bk, off, len, h) in order {
            let fits = batches
                .last()
                .is_some_and(|b| b.bundle == bk && bytes + len as u64 <= batch_bytes.max(1));
            if !fits {
                batches.push(Batch {
                    bundle: bk.to_string(),
                    chunks: Vec::new(),
                });
                bytes = 0;
            }
            bytes += len as u64;
            batches.last_mut().unwrap().chunks.push((h, off, len));
        }
        let of = batches
            .iter()
            .enumerate()
            .flat_map(|(i, b)| b.chunks.iter().map(move |c| (c.0, i)))
            .collect();
        let states = batches.iter().map(|_| State::Pending).collect();
        Ok(Source {
            name: c.name,
            url: c.url,
            places,
            batches,
            of,
            sched: Mutex::new(Sched { states, cursor: 0 }),
            cv: Condvar::new(),
            pool: Mutex::new(Vec::new()),
        })
    }

    /// How many batches the remote-only chunks make.
    pub fn batches(&self) -> usize {
        self.batches.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sched> {
        self.sched.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn attempt(&self, key: &str, ranges: &[std::ops::Range<u64>]) -> Result<Vec<Vec<u8>>> {
        let r = match self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            Some(r) => r,
            None => Remote::open(&self.url, false)?,
        };
        STATS.gets.fetch_add(1, Ordering::Relaxed);
        let v = r.get_ranges(key, ranges)?;
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).push(r);
        Ok(v)
    }

    /// The bytes of `chunks` (hash, offset, length) of bundle `bk`: one
    /// vectored range GET (object_store coalesces adjacent ranges), retried.
    fn get(
        &self,
        bk: &str,
        chunks: &[(Hash, u64, u32)],
    ) -> std::result::Result<Vec<(Hash, Vec<u8>)>, String> {
        let ranges: Vec<_> = chunks.iter().map(|&(_, o, l)| o..o + l as u64).collect();
        let mut pause = PAUSE;
        for n in 1..=TRIES {
            match self.attempt(bk, &ranges) {
                Ok(b) => {
                    let got: Vec<(Hash, Vec<u8>)> = chunks.iter().map(|c| c.0).zip(b).collect();
                    STATS.chunks.fetch_add(got.len() as u64, Ordering::Relaxed);
                    STATS.bytes.fetch_add(
                        got.iter().map(|g| g.1.len() as u64).sum(),
                        Ordering::Relaxed,
                    );
                    return Ok(got);
                }
                Err(e) if n == TRIES => {
                    let msg = format!(
                        "remote {}: fetching chunk {} from {bk} failed {TRIES} times: {e:#}",
                        self.name,
                        hex_id(&chunks[0].0)
                    );
                    tracing::error!("{msg}");
                    return Err(msg);
                }
                Err(e) => {
                    tracing::warn!(
                        "remote {}: fetching from {bk} (try {n} of {TRIES}): {e:#}",
                        self.name
                    );
                    std::thread::sleep(pause);
                    pause *= 2;
                }
            }
        }
        unreachable!()
    }

    /// Fetches the batches `claimed` (each InFlight, claimed by the
    /// caller), one GET per bundle, and hands their bytes to the waiters.
    /// On an error they are Pending again (a waiter then fetches itself).
    /// `prefetch`: the caller stores them and then calls [`Source::stored`]
    /// (they are Storing until then; else Done at once).
    fn fetch_claimed(
        &self,
        claimed: &[usize],
        prefetch: bool,
    ) -> std::result::Result<Vec<(Hash, Vec<u8>)>, String> {
        let mut by: Vec<(&str, Vec<usize>)> = Vec::new();
        for &i in claimed {
            let bk = self.batches[i].bundle.as_str();
            match by.iter_mut().find(|b| b.0 == bk) {
                Some(b) => b.1.push(i),
                None => by.push((bk, vec![i])),
            }
        }
        let mut out = Vec::new();
        for (n, (bk, is)) in by.iter().enumerate() {
            let chunks: Vec<_> = is
                .iter()
                .flat_map(|&i| self.batches[i].chunks.iter().copied())
                .collect();
            match self.get(bk, &chunks) {
                Ok(got) => {
                    let mut got = got.into_iter();
                    let mut s = self.lock();
                    for &i in is {
                        let mine: Vec<_> =
                            got.by_ref().take(self.batches[i].chunks.len()).collect();
                        s.states[i] = match s.states[i] {
                            State::InFlight { waiters } if waiters > 0 => {
                                let a = Arc::new(mine.clone());
                                out.extend(mine);
                                State::Ready {
                                    got: a,
                                    left: waiters,
                                    storing: prefetch,
                                }
                            }
                            _ => {
                                out.extend(mine);
                                if prefetch {
                                    State::Storing
                                } else {
                                    State::Done
                                }
                            }
                        };
                    }
                    drop(s);
                    self.cv.notify_all();
                }
                Err(e) => {
                    let mut s = self.lock();
                    for (_, is) in &by[n..] {
                        for &i in is {
                            s.states[i] = State::Pending;
                            s.cursor = s.cursor.min(i);
                        }
                    }
                    drop(s);
                    self.cv.notify_all();
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Waits for batch `i`, registered as one of its waiters, and returns
    /// its bytes, and whether this thread fetched them (when the other
    /// fetch failed: then the caller stores them all).
    fn wait(&self, i: usize) -> std::result::Result<(Vec<(Hash, Vec<u8>)>, bool), String> {
        let mut s = self.lock();
        loop {
            match &mut s.states[i] {
                State::InFlight { .. } => s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner()),
                State::Ready { got, left, storing } => {
                    let got = got.clone();
                    *left -= 1;
                    if *left == 0 {
                        s.states[i] = if *storing { State::Storing } else { State::Done };
                    }
                    return Ok((got.to_vec(), false));
                }
                State::Pending => {
                    s.states[i] = State::InFlight { waiters: 0 };
                    drop(s);
                    return self.fetch_claimed(&[i], false).map(|v| (v, true));
                }
                // Not reached (a waiter is counted in `left`): its chunks
                // are stored, or the caller finds them still remote-only.
                State::Storing | State::Done => return Ok((Vec::new(), false)),
            }
        }
    }

    /// The prefetch stored batch `i` (or failed to): Storing becomes Done,
    /// and first opens waiting for that go on.
    fn stored(&self, i: usize) {
        let mut s = self.lock();
        match &mut s.states[i] {
            State::Storing => s.states[i] = State::Done,
            State::Ready { storing, .. } => *storing = false,
            _ => {}
        }
        drop(s);
        self.cv.notify_all();
    }

    /// Waits until the prefetch ended storing each of the batches `is` (at most
    /// [`SETTLE`]: the prefetch stores a batch in milliseconds).
    fn settle(&self, is: &[usize]) {
        let t0 = std::time::Instant::now();
        let mut s = self.lock();
        while is
            .iter()
            .any(|&i| matches!(s.states[i], State::Storing | State::Ready { storing: true, .. }))
        {
            let Some(left) = SETTLE.checked_sub(t0.elapsed()) else {
                return;
            };
            s = self
                .cv
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The next batch in bundle order nobody fetched yet, claimed for the
    /// prefetch (None: all claimed).
    fn claim_next(&self) -> Option<usize> {
        let mut s = self.lock();
        while s.cursor < s.states.len() {
            let i = s.cursor;
            s.cursor += 1;
            if matches!(s.states[i], State::Pending) {
                s.states[i] = State::InFlight { waiters: 0 };
                return Some(i);
            }
        }
        None
    }
}

impl ChunkSource for Source {
    fn fetch(
        &self,
        want: &[(Hash, u32)],
        still_remote: &dyn Fn(&Hash) -> bool,
    ) -> std::result::Result<Vec<(Hash, Vec<u8>)>, String> {
        STATS.opens.fetch_add(1, Ordering::Relaxed);
        // Each wanted chunk's batch: claimed (fetched here, whole), waited
        // for (in flight elsewhere), or — fetched already (once the
        // prefetch's store of it ended) yet the chunk still remote-only
        // (its store failed), or in no batch — asked for alone.
        let (mut claimed, mut waits, mut alone) = (Vec::new(), Vec::new(), Vec::new());
        let mut storing = Vec::new();
        {
            let mut s = self.lock();
            for (h, _) in want {
                let Some(&i) = self.of.get(h) else {
                    alone.push(*h);
                    continue;
                };
                if claimed.contains(&i) || waits.contains(&i) {
                    continue;
                }
                match &mut s.states[i] {
                    State::Pending => {
                        s.states[i] = State::InFlight { waiters: 0 };
                        claimed.push(i);
                    }
                    State::InFlight { waiters } => {
                        *waiters += 1;
                        waits.push(i);
                    }
                    State::Storing | State::Ready { storing: true, .. } => {
                        storing.push(i);
                        alone.push(*h);
                    }
                    State::Ready { .. } | State::Done => alone.push(*h),
                }
            }
        }
        if !waits.is_empty() {
            STATS.waits.fetch_add(1, Ordering::Relaxed);
        }
        let mut out = Vec::new();
        let mut first_err = None;
        if !claimed.is_empty() {
            match self.fetch_claimed(&claimed, false) {
                Ok(v) => out.extend(v),
                Err(e) => first_err = Some(e),
            }
        }
        // Registered waiters always collect (so the bytes kept for them
        // go); only the wanted chunks are kept: the fetching thread stores
        // the batch (no second hashing of its neighbours here).
        let wanted: std::collections::HashSet<&Hash> = want.iter().map(|w| &w.0).collect();
        for i in waits {
            match self.wait(i) {
                Ok((v, true)) => out.extend(v),
                Ok((v, false)) => out.extend(v.into_iter().filter(|c| wanted.contains(&c.0))),
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        // Only what is still remote-only once the prefetch's stores of
        // those batches ended: the rest was stored meanwhile (DECISIONS
        // D59 finding 4: a chunk fetched twice).
        if !storing.is_empty() {
            self.settle(&storing);
        }
        alone.retain(|h| still_remote(h));
        let mut by: HashMap<&str, Vec<(Hash, u64, u32)>> = HashMap::new();
        for h in &alone {
            let Some((bk, off, len)) = self.places.get(h) else {
                return Err(format!(
                    "remote {} ({}): chunk {} is in no bundle of the clone's record (remotes/{}/{FILE})",
                    self.name, self.url, hex_id(h), self.name
                ));
            };
            by.entry(bk.as_str()).or_default().push((*h, *off, *len));
        }
        for (bk, v) in by {
            out.extend(self.get(bk, &v)?);
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("remote {} ({})", self.name, self.url)
    }
}

/// How many batches are fetched at once in the background.
const WORKERS: usize = 4;
/// The bytes one batch (a neighbourhood a first open fetches whole, a
/// prefetch GET) holds at most (a larger chunk is a batch alone).
const BATCH_BYTES: u64 = 4 << 20;

/// The prefetch of a mounted lazy clone: fetches every chunk still
/// remote-only, in the background, [`WORKERS`] batches at a time in bundle
/// order from the moment of mount, until done or stopped; a first open
/// takes the batch it needs ahead of the queue (or waits for the fetch of
/// it in flight).
pub struct Prefetch {
    stop: Arc<AtomicBool>,
    /// The background start (scan, record, then the workers).
    setup: Option<std::thread::JoinHandle<()>>,
    workers: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>>,
}

/// The source a mount installs at once, before the record is read and
/// the chunk index scanned (in the background, so a lazy clone's mount
/// answers sooner): a first open in the meantime waits for it.
struct Deferred {
    desc: String,
    cell: Mutex<Option<std::result::Result<Arc<Source>, String>>>,
    cv: Condvar,
}

impl Deferred {
    fn set(&self, v: std::result::Result<Arc<Source>, String>) {
        *self.cell.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
        self.cv.notify_all();
    }

    fn get(&self) -> std::result::Result<Arc<Source>, String> {
        let mut c = self.cell.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(v) = c.as_ref() {
                return v.clone();
            }
            c = self.cv.wait(c).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl ChunkSource for Deferred {
    fn fetch(
        &self,
        want: &[(Hash, u32)],
        still_remote: &dyn Fn(&Hash) -> bool,
    ) -> std::result::Result<Vec<(Hash, Vec<u8>)>, String> {
        self.get()?.fetch(want, still_remote)
    }

    fn describe(&self) -> String {
        self.desc.clone()
    }
}

impl Prefetch {
    /// Installs the chunk source of the store `dir` on `fs` when a remote
    /// of the store has a record of remote-only chunks, and starts, in the
    /// background, the scan of what is still remote-only and the prefetch
    /// of it (unless RINGFS_TEST_NO_PREFETCH is set: tests of the fetch on
    /// open; RINGFS_TEST_PREFETCH_GATE=FILE: it waits until FILE exists).
    /// `cache`: the session's notifier, for the page cache fill of the files
    /// the prefetch completes (D79; None: no fill). None when no remote
    /// has a record. An error of the background
    /// start (the record damaged, its remote gone from the store) is
    /// logged and makes first opens of remote-only chunks fail (EIO).
    pub fn start(fs: Arc<Fs>, dir: &Path, cache: Option<fuse_uring::Notifier>) -> Result<Option<Prefetch>> {
        // Only a lazy clone has a record: other stores skip the scan of
        // the chunk index.
        let records: Vec<_> = state::names(dir)
            .into_iter()
            .filter(|n| state::remotes_dir(dir).join(n).join(FILE).exists())
            .collect();
        let Some(first) = records.first() else {
            return Ok(None);
        };
        let desc = match state::load(dir, first) {
            Ok(c) => format!("remote {} ({})", c.name, c.url),
            Err(_) => format!("remote {first}"),
        };
        let deferred = Arc::new(Deferred {
            desc,
            cell: Mutex::new(None),
            cv: Condvar::new(),
        });
        fs.transfer().set_chunk_source(deferred.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>> = Arc::default();
        let (dir, stop2, workers2) = (dir.to_path_buf(), stop.clone(), workers.clone());
        let setup = std::thread::Builder::new().name("ringfs-prefetch".into()).spawn(move || {
            // Whatever happens here (even a panic), a first open waiting
            // for the source gets an answer.
            struct Answer(Arc<Deferred>);
            impl Drop for Answer {
                fn drop(&mut self) {
                    let mut c = self.0.cell.lock().unwrap_or_else(|p| p.into_inner());
                    if c.is_none() {
                        *c = Some(Err(format!("{}: listing the remote-only chunks failed", self.0.desc)));
                        self.0.cv.notify_all();
                    }
                }
            }
            let _answer = Answer(deferred.clone());
            let t = std::time::Instant::now();
            match setup(&fs, &dir, records) {
                Ok(None) => deferred.set(Err(format!("{}: nothing is remote-only in this store", deferred.desc))),
                Ok(Some(src)) => {
                    deferred.set(Ok(src.clone()));
                    tracing::info!("remote-only chunks listed in {:.1} ms: {} batches", t.elapsed().as_secs_f64() * 1e3, src.batches());
                    // Tests: the prefetch starts once this file exists (the
                    // test first makes the kernel look every file up).
                    if let Some(gate) = std::env::var_os("RINGFS_TEST_PREFETCH_GATE") {
                        while !Path::new(&gate).exists() && !stop2.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                    if std::env::var_os("RINGFS_TEST_NO_PREFETCH").is_none() {
                        let mut w = workers2.lock().unwrap_or_else(|p| p.into_inner());
                        if !stop2.load(Ordering::SeqCst) {
                            let (tx, builder) = spawn_builder(fs.clone(), stop2.clone(), cache);
                            *w = spawn_workers(fs, src, stop2, tx);
                            w.extend(builder);
                        }
                    }
                }
                Err(e) => {
                    tracing::error!("remote-only chunks: {e:#}; files using them fail to open with EIO");
                    deferred.set(Err(format!("{}: {e:#}", deferred.desc)));
                }
            }
        })?;
        Ok(Some(Prefetch {
            stop,
            setup: Some(setup),
            workers,
        }))
    }

    /// Stops the prefetch (a batch in flight finishes) and waits for it.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.setup.take() {
            let _ = t.join();
        }
        let ws = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|p| p.into_inner()));
        for t in ws {
            let _ = t.join();
        }
    }
}

/// The source of the store's remote-only chunks (None: nothing left, and
/// the records `names` have are removed).
fn setup(fs: &Fs, dir: &Path, names: Vec<String>) -> Result<Option<Arc<Source>>> {
    let left = fs
        .transfer()
        .remote_only()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if left.is_empty() {
        // Everything arrived: the record is not needed any more.
        for n in names {
            let _ = std::fs::remove_file(state::remotes_dir(dir).join(n).join(FILE));
        }
        return Ok(None);
    }
    let Some((name, places)) = read(dir)? else {
        return Ok(None);
    };
    // Tests make many small batches (a kill lands mid-way).
    let batch_bytes = std::env::var("RINGFS_TEST_PREFETCH_BATCH_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BATCH_BYTES);
    let src = Arc::new(Source::new(dir, &name, places, &left, batch_bytes)?);
    tracing::info!(
        "{} chunks ({} batches) are only on remote {name}: fetched on first open and in the background",
        left.len(),
        src.batches()
    );
    Ok(Some(src))
}

/// The prefetch threads: each claims the next batch nobody fetched yet, in
/// bundle order, fetches and stores it, until none is left, `stop` is set
/// or it failed 3 times.
fn spawn_workers(fs: Arc<Fs>, src: Arc<Source>, stop: Arc<AtomicBool>, stored: Handoff) -> Vec<std::thread::JoinHandle<()>> {
    let n = std::env::var("RINGFS_TEST_PREFETCH_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(WORKERS);
    let mut threads = Vec::new();
    for i in 0..n {
        let (fs, stop, src, stored) = (fs.clone(), stop.clone(), src.clone(), stored.clone());
        let t = std::thread::Builder::new().name(format!("ringfs-prefetch{i}")).spawn(move || {
            let mut failures = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let Some(b) = src.claim_next() else { break };
                let r = src.fetch_claimed(&[b], true).and_then(|got| {
                    let r = fs.transfer().store_remote_chunks(&got);
                    // Stored (or not): first opens waiting for it go on.
                    src.stored(b);
                    let (n, bad) = r?;
                    // Local now (stored here or before): their files' working
                    // copies can be built (a chunk that failed stays remote).
                    stored.send(got.into_iter().filter(|g| !bad.contains(&g.0)).collect());
                    Ok((n, bad))
                });
                match r {
                    Ok((_, bad)) => {
                        for h in bad {
                            tracing::warn!("prefetch: {}: chunk {} does not match its hash: not used (its file's open fetches it again)", src.describe(), hex_id(&h));
                        }
                    }
                    Err(e) => {
                        failures += 1;
                        tracing::warn!("prefetch: {e}");
                        if failures >= 3 {
                            tracing::warn!("prefetch stopped after {failures} failures: the rest is fetched on first open (or at the next mount)");
                            break;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            }
        });
        match t {
            Ok(t) => threads.push(t),
            Err(e) => tracing::warn!("prefetch: starting a thread: {e}"),
        }
    }
    threads
}

/// The thread that builds working copies ahead of their first open (D58):
/// it plans the stored files without one ([`Fs::wc_plan`]), notes those
/// whose chunks are all local and each file the prefetch's batches (the
/// hashes sent on the returned channel) complete, and once the prefetch
/// ended (every sender dropped) builds them and whatever is left whose
/// chunks a first open fetched. One thread at the hash workers' priority;
/// it stops early when `stop` is set. None: it could not start (logged).
/// The working-copy builder waits until no open was served from chunks for
/// this long (D67).
const BUILD_AFTER_IDLE: Duration = Duration::from_secs(1);

/// The prefetch's stored batches on their way to the builder: the hashes,
/// and the checked bytes while the page cache fill wants them (D79) and
/// fewer than [`FILL_BATCHES`] batches of bytes wait in the channel (a
/// builder still planning does not make the prefetch hold a clone's bytes
/// in memory); else empty byte vectors.
#[derive(Clone)]
struct Handoff {
    tx: std::sync::mpsc::Sender<Vec<(Hash, Vec<u8>)>>,
    /// Batches with bytes in the channel; `usize::MAX`: no fill (no bytes).
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

impl Handoff {
    fn send(&self, mut got: Vec<(Hash, Vec<u8>)>) {
        let q = &self.queued;
        let with_bytes = q.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < FILL_BATCHES).then_some(n + 1)).is_ok();
        if !with_bytes {
            for g in &mut got {
                g.1 = Vec::new();
            }
        }
        if self.tx.send(got).is_err() && with_bytes {
            q.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn spawn_builder(fs: Arc<Fs>, stop: Arc<AtomicBool>, cache: Option<fuse_uring::Notifier>) -> (Handoff, Option<std::thread::JoinHandle<()>>) {
    let (tx, rx) = std::sync::mpsc::channel::<Vec<(Hash, Vec<u8>)>>();
    // RINGFS_TEST_NO_FILL: measurements of the fill's effect.
    let cache = cache.filter(|_| std::env::var_os("RINGFS_TEST_NO_FILL").is_none());
    let queued = Arc::new(std::sync::atomic::AtomicUsize::new(if cache.is_some() { 0 } else { usize::MAX }));
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
        let mut fill = Fill { cache, budget: FILL_TOTAL, known: HashMap::new(), batches: std::collections::VecDeque::new() };
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
        // Last first: a reader that started at the first files (the bundle
        // order is the tree's) and this thread meet in the middle instead
        // of both going for the same files (one of them waiting on the
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
    known: HashMap<Hash, Vec<u8>>,
    batches: std::collections::VecDeque<Vec<Hash>>,
}

/// How many of the prefetch's last batches the fill keeps in memory.
const FILL_BATCHES: usize = 8;

impl Fill {
    fn remember(&mut self, got: Vec<(Hash, Vec<u8>)>) {
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

/// Remote-only chunks and bytes of the store `src` reads.
pub fn remote_only(src: &fs_core::snap::transfer::Transfer) -> (u64, u64) {
    src.remote_only()
        .map(|v| (v.len() as u64, v.iter().map(|c| c.1 as u64).sum()))
        .unwrap_or((0, 0))
}
