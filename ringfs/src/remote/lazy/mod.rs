//! Lazy clones (DECISIONS D51): the record of where a clone's remote-only
//! chunks are on the remote (`STORE/remotes/NAME/remote-chunks.json`,
//! docs/FORMATS.md "Remote-only chunks"), the [`ChunkSource`] a daemon
//! installs to fetch them (`source`: range GETs of the bundles, bounded
//! retries), the prefetch threads that fetch the rest in the background
//! while the store is mounted (stopped at unmount; the next mount resumes,
//! since only chunks still remote-only in the chunk index are fetched), and
//! the thread those threads feed (`build`: the page cache fill and the
//! working-copy builder).

mod build;
mod source;

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
use build::{spawn_builder, Handoff};
use source::Source;

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

/// Where a chunk is on the remote: (bundle key, offset, length).
pub type Place = (String, u64, u32);

/// Where each chunk is on the remote.
pub type Places = HashMap<ObjectId, Place>;

/// Writes the record of remote `name` in the store `store` (durably; the
/// clone writes it before the store is renamed into place): `chunks` with
/// their places in the order given (a path-order walk's, D82), the bundles
/// in the order the chunks first name them.
pub fn write(store: &Path, name: &str, chunks: &[(ObjectId, Place)]) -> Result<()> {
    let mut bundles: Vec<String> = Vec::new();
    let mut idx: HashMap<&str, u32> = HashMap::new();
    let chunks: Vec<(String, u32, u64, u32)> = chunks
        .iter()
        .map(|(h, (b, o, l))| {
            let i = *idx.entry(b.as_str()).or_insert_with(|| {
                bundles.push(b.clone());
                (bundles.len() - 1) as u32
            });
            (hex_id(h), i, *o, *l)
        })
        .collect();
    let rec = Record {
        version: 1,
        bundles,
        chunks,
    };
    let p = state::remotes_dir(store).join(name).join(FILE);
    let tmp = p.with_extension("tmp");
    let f = fs_core::private::create(&tmp).with_context(|| format!("writing {}", tmp.display()))?;
    serde_json::to_writer(std::io::BufWriter::new(&f), &rec)?;
    f.sync_all()?;
    std::fs::rename(&tmp, &p).with_context(|| format!("writing {}", p.display()))?;
    Ok(())
}

/// The record of remote `name`'s remote-only chunks in the store `store`:
/// each chunk with its place, in the record's order (a path-order walk's
/// for records written since D82, bundle order before). Errors: the record
/// missing, damaged or of a newer version, naming the file.
fn read(store: &Path, name: &str) -> Result<Vec<(Hash, Place)>> {
    let p = state::remotes_dir(store).join(name).join(FILE);
    let b = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
    let r: Record = state::decode_v1(&p, &b, |r: &Record| r.version)?;
    let mut listed = Vec::with_capacity(r.chunks.len());
    for (h, b, o, l) in r.chunks {
        let (Some(id), Some(bk)) = (parse_hex(&h), r.bundles.get(b as usize)) else {
            bail!("{} is damaged (a malformed entry)", p.display());
        };
        listed.push((id, (bk.clone(), o, l)));
    }
    Ok(listed)
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


/// How many batches are fetched at once in the background.
const WORKERS: usize = 4;
/// The bytes one batch (a neighbourhood a first open fetches whole, a
/// prefetch GET) holds at most (a larger chunk is a batch alone).
const BATCH_BYTES: u64 = 4 << 20;

/// The prefetch of a mounted lazy clone: fetches every chunk still
/// remote-only, in the background, [`WORKERS`] batches at a time in the
/// record's order (a path walk's, D82) from the moment of mount, until
/// done or stopped; a first open takes the batch it needs ahead of the
/// queue (or waits for the fetch of it in flight).
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
    ) -> std::result::Result<Vec<(Hash, bytes::Bytes)>, String> {
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

/// The source of the store's remote-only chunks, from the record of the
/// first of `names` (the remotes with a record); None: nothing left, and
/// the records `names` have are removed.
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
    // The record `start` found (a lazy clone has one, of its origin).
    let Some(name) = names.into_iter().next() else {
        return Ok(None);
    };
    let listed = read(dir, &name)?;
    // Tests make many small batches (a kill lands mid-way).
    let batch_bytes = std::env::var("RINGFS_TEST_PREFETCH_BATCH_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BATCH_BYTES);
    let src = Arc::new(Source::new(dir, &name, listed, &left, batch_bytes)?);
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


/// Remote-only chunks and bytes of the store `src` reads.
pub fn remote_only(src: &fs_core::snap::transfer::Transfer) -> (u64, u64) {
    src.remote_only()
        .map(|v| (v.len() as u64, v.iter().map(|c| c.1 as u64).sum()))
        .unwrap_or((0, 0))
}
