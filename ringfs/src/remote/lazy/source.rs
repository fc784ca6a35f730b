//! The source of a lazy clone's remote-only chunks (D51, D56): the
//! chunks cut into batches (neighbourhoods of one bundle, fetched by one
//! coalesced range GET), the state of each batch shared by first opens and
//! the prefetch (pending, in flight with waiters, fetched and kept for
//! them, being stored, done), and the fetch with bounded retries.
//!
//! Owns: batches and their states, the GETs. Must not know: the store's
//! tables (it hands bytes to whoever stores them), the builder, FUSE.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::Result;
use bytes::Bytes;
use fs_core::snap::object::hex_id;
use fs_core::store::remote::ChunkSource;

use super::{state, Hash, Place, Places, Remote, FILE, STATS};

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
        got: Arc<Vec<(Hash, Bytes)>>,
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
/// in flight), the prefetch takes the others in the record's order (a
/// path walk's, D82). At most
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
    /// The source of remote `name` of `store`, for the chunks of `listed`
    /// (with their places, in the record's order: a path-order walk of the
    /// tree, D82); those of `left` (still remote-only) are cut into batches
    /// of about `batch_bytes` of consecutive chunks of one bundle, which the
    /// prefetch takes in the order of their first chunk in `listed`, so
    /// that a reader walking the tree finds its files fetched ahead of it.
    pub fn new(
        store: &Path,
        name: &str,
        listed: Vec<(Hash, Place)>,
        left: &[(Hash, u32)],
        batch_bytes: u64,
    ) -> Result<Source> {
        let c = state::load(store, name)?;
        let pos: HashMap<Hash, usize> = listed.iter().enumerate().map(|(i, (h, _))| (*h, i)).collect();
        let places: Places = listed.into_iter().collect();
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
        // Every chunk of a batch is in `listed` (`order` took only those).
        batches.sort_by_cached_key(|b| b.chunks.iter().map(|c| pos[&c.0]).min());
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

    fn attempt(&self, key: &str, ranges: &[std::ops::Range<u64>]) -> Result<Vec<Bytes>> {
        let r = match self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            Some(r) => r,
            None => {
                // Each connection opened checks the remote's marker first
                // (another format or a newer layout: refused, never read).
                let r = Remote::open(&self.url, false)?;
                super::super::heads::read_guard(&r)?;
                r
            }
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
    ) -> std::result::Result<Vec<(Hash, Bytes)>, String> {
        let ranges: Vec<_> = chunks.iter().map(|&(_, o, l)| o..o + l as u64).collect();
        let mut pause = PAUSE;
        for n in 1..=TRIES {
            match self.attempt(bk, &ranges) {
                Ok(b) => {
                    let got: Vec<(Hash, Bytes)> = chunks.iter().map(|c| c.0).zip(b).collect();
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
    pub(super) fn fetch_claimed(
        &self,
        claimed: &[usize],
        prefetch: bool,
    ) -> std::result::Result<Vec<(Hash, Bytes)>, String> {
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
    fn wait(&self, i: usize) -> std::result::Result<(Vec<(Hash, Bytes)>, bool), String> {
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
    pub(super) fn stored(&self, i: usize) {
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

    /// The next batch in the prefetch's order nobody fetched yet, claimed for the
    /// prefetch (None: all claimed).
    pub(super) fn claim_next(&self) -> Option<usize> {
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
    ) -> std::result::Result<Vec<(Hash, Bytes)>, String> {
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
