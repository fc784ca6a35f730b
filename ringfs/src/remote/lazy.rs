//! Lazy clones (DECISIONS D51): the record of where a clone's remote-only
//! chunks are on the remote (`STORE/remotes/NAME/remote-chunks.json`,
//! docs/FORMATS.md "Remote-only chunks"), the [`ChunkSource`] a daemon
//! installs to fetch them (range GETs of the bundles, bounded retries) and
//! the prefetch thread that fetches the rest in the background while the
//! store is mounted (stopped at unmount; the next mount resumes, since only
//! chunks still remote-only in the chunk index are fetched).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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

/// Fetches remote-only chunks from one remote by range GETs of their
/// bundles: at most [`TRIES`] attempts per bundle, [`PAUSE`] apart then
/// doubling, then an error naming the remote and the chunk.
pub struct Source {
    name: String,
    url: String,
    places: Places,
    /// Open remotes ready for use (one per concurrent fetch).
    pool: Mutex<Vec<Remote>>,
}

const TRIES: u32 = 3;
const PAUSE: Duration = Duration::from_millis(200);

impl Source {
    /// The source of remote `name` of `store`, for the chunks of `places`.
    pub fn new(store: &Path, name: &str, places: Places) -> Result<Source> {
        let c = state::load(store, name)?;
        Ok(Source {
            name: c.name,
            url: c.url,
            places,
            pool: Mutex::new(Vec::new()),
        })
    }

    fn attempt(&self, key: &str, ranges: &[std::ops::Range<u64>]) -> Result<Vec<Vec<u8>>> {
        let r = match self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            Some(r) => r,
            None => Remote::open(&self.url, false)?,
        };
        let v = r.get_ranges(key, ranges)?;
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).push(r);
        Ok(v)
    }
}

impl ChunkSource for Source {
    fn fetch(&self, want: &[([u8; 32], u32)]) -> std::result::Result<Vec<Vec<u8>>, String> {
        // Grouped by bundle: one vectored range GET per bundle.
        let mut by: HashMap<&str, Vec<(usize, u64, u32)>> = HashMap::new();
        for (i, (h, _)) in want.iter().enumerate() {
            let Some((bk, off, len)) = self.places.get(h) else {
                return Err(format!(
                    "remote {} ({}): chunk {} is in no bundle of the clone's record (remotes/{}/{FILE})",
                    self.name, self.url, hex_id(h), self.name
                ));
            };
            by.entry(bk.as_str()).or_default().push((i, *off, *len));
        }
        let mut out = vec![Vec::new(); want.len()];
        for (bk, v) in by {
            let ranges: Vec<_> = v.iter().map(|&(_, o, l)| o..o + l as u64).collect();
            let mut pause = PAUSE;
            let mut got = None;
            for n in 1..=TRIES {
                match self.attempt(bk, &ranges) {
                    Ok(b) => {
                        got = Some(b);
                        break;
                    }
                    Err(e) if n == TRIES => {
                        let msg = format!(
                            "remote {}: fetching chunk {} from {bk} failed {TRIES} times: {e:#}",
                            self.name,
                            hex_id(&want[v[0].0].0)
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
            for (&(i, _, _), b) in v.iter().zip(got.unwrap_or_default()) {
                out[i] = b;
            }
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("remote {} ({})", self.name, self.url)
    }
}

/// How many chunk batches are fetched at once in the background.
const WORKERS: usize = 2;
/// The bytes one background batch asks for at most.
const BATCH_BYTES: u64 = 4 << 20;

/// The prefetch of a mounted lazy clone: fetches every chunk still
/// remote-only, in the background, [`WORKERS`] batches at a time, until
/// done or stopped.
pub struct Prefetch {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Prefetch {
    /// Installs the chunk source of the store `dir` on `fs` when the store
    /// has remote-only chunks and a record of where they are, and starts
    /// the prefetch (unless RINGFS_TEST_NO_PREFETCH is set: tests of the
    /// fetch on open). None when there is nothing to fetch. Errors: the
    /// record is damaged or its remote is gone from the store.
    pub fn start(fs: Arc<Fs>, dir: &Path) -> Result<Option<Prefetch>> {
        // Only a lazy clone has a record: other stores skip the scan of
        // the chunk index.
        let records: Vec<_> = state::names(dir)
            .into_iter()
            .map(|n| state::remotes_dir(dir).join(n).join(FILE))
            .filter(|p| p.exists())
            .collect();
        if records.is_empty() {
            return Ok(None);
        }
        let left = fs
            .transfer()
            .remote_only()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if left.is_empty() {
            // Everything arrived: the record is not needed any more.
            for p in records {
                let _ = std::fs::remove_file(&p);
            }
            return Ok(None);
        }
        let Some((name, places)) = read(dir)? else {
            return Ok(None);
        };
        let src = Arc::new(Source::new(dir, &name, places)?);
        // Tests make many small batches (a kill lands mid-way).
        let batch_bytes = std::env::var("RINGFS_TEST_PREFETCH_BATCH_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(BATCH_BYTES);
        let mut batches: Vec<Vec<([u8; 32], u32)>> = Vec::new();
        {
            let mut order: Vec<_> = left
                .iter()
                .filter_map(|c| src.places.get(&c.0).map(|p| (p, *c)))
                .collect();
            order.sort_by(|a, b| (&a.0 .0, a.0 .1).cmp(&(&b.0 .0, b.0 .1)));
            let (mut cur, mut bytes) = (Vec::new(), 0u64);
            for (_, c) in order {
                bytes += c.1 as u64;
                cur.push(c);
                if bytes >= batch_bytes {
                    batches.push(std::mem::take(&mut cur));
                    bytes = 0;
                }
            }
            if !cur.is_empty() {
                batches.push(cur);
            }
        }
        fs.transfer().set_chunk_source(src.clone());
        tracing::info!("{} chunks ({} batches) are only on remote {name}: fetched on first open and in the background", left.len(), batches.len());
        let stop = Arc::new(AtomicBool::new(false));
        if std::env::var_os("RINGFS_TEST_NO_PREFETCH").is_some() {
            return Ok(Some(Prefetch {
                stop,
                threads: Vec::new(),
            }));
        }
        batches.reverse(); // taken from the end: in bundle order
        let queue = Arc::new(Mutex::new(batches));
        let mut threads = Vec::new();
        for i in 0..WORKERS {
            let (fs, stop, queue) = (fs.clone(), stop.clone(), queue.clone());
            threads.push(std::thread::Builder::new().name(format!("ringfs-prefetch{i}")).spawn(move || {
                let mut failures = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    let Some(b) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop() else { break };
                    if let Err(e) = fs.transfer().fetch_remote(&b) {
                        failures += 1;
                        tracing::warn!("prefetch: {e}");
                        if failures >= 3 {
                            tracing::warn!("prefetch stopped after {failures} failures: the rest is fetched on first open (or at the next mount)");
                            break;
                        }
                        queue.lock().unwrap_or_else(|p| p.into_inner()).insert(0, b);
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            })?);
        }
        Ok(Some(Prefetch { stop, threads }))
    }

    /// Stops the prefetch (a batch in flight finishes) and waits for it.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Remote-only chunks and bytes of the store `src` reads.
pub fn remote_only(src: &fs_core::snap::transfer::Transfer) -> (u64, u64) {
    src.remote_only()
        .map(|v| (v.len() as u64, v.iter().map(|c| c.1 as u64).sum()))
        .unwrap_or((0, 0))
}
