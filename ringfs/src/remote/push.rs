//! `ringfs push`: what a branch head needs that the remote lacks (by the
//! local record `held`, no existence round trips), sent as chunk bundles
//! then object bundles (children first), each followed by its index and
//! then recorded as held; the head last (docs/FORMATS.md "Remote layout").
//!
//! Reading and sending overlap: the calling thread packs (and hashes)
//! bundles while an uploader thread keeps two bundle uploads in flight,
//! each on its own connection (one more bundle queued: at most four
//! bundles in memory), and acknowledges them in the order they were
//! packed, so a bundle is acknowledged only after every bundle before it. Bundles of `MULTIPART_MIN` bytes or
//! more go up as multipart uploads ([`Remote::put`]).

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Result};
use fs_core::snap::object::{hex_id, ObjectId};
use fs_core::snap::transfer::Transfer;
use serde_json::{json, Value};

use super::heads::{self, Refused};
use super::state;
use super::store::Remote;
use super::{failpoint, progress};

/// A bundle's size limit: the pack seal size (a clone keeps it as a
/// pack); tests set a smaller one with RINGFS_TEST_BUNDLE_MAX (bytes).
fn bundle_max() -> usize {
    std::env::var("RINGFS_TEST_BUNDLE_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32 << 20)
}

/// What a push did.
#[derive(Debug, Default)]
pub struct PushReport {
    pub remote: String,
    pub branch: String,
    pub commit: String,
    pub objects: u64,
    pub chunks: u64,
    pub bytes: u64,
    pub bundles: u64,
    /// Bundles a cut-short push had uploaded without their index: found on
    /// the remote, only their index written (not in `bytes`/`bundles`).
    pub bundles_found: u64,
    pub head_moved: bool,
    /// The remote was not the one this store pushed to before (its marker's
    /// identity changed: emptied, replaced or recreated), so the record of
    /// what it held was dropped and everything the branch needs was sent.
    pub remote_reset: bool,
    pub guard: String,
    pub ms: f64,
}

impl PushReport {
    pub fn doc(&self) -> Value {
        json!({
            "remote": self.remote, "branch": self.branch, "commit": self.commit,
            "objects_sent": self.objects, "chunks_sent": self.chunks, "bytes_sent": self.bytes,
            "bundles_sent": self.bundles, "bundles_found": self.bundles_found, "head_moved": self.head_moved, "remote_reset": self.remote_reset, "heads": self.guard, "push_ms": self.ms,
        })
    }
}

/// A bundle being filled: pack format v1 bytes and its index entries.
struct Bundle {
    kind: u8,
    bytes: Vec<u8>,
    entries: Vec<(ObjectId, u64, u32)>,
}

impl Bundle {
    fn new(kind: u8) -> Bundle {
        let mut bytes = Vec::with_capacity(1 << 20);
        bytes.extend_from_slice(fs_core::store::pack::MAGIC);
        bytes.extend_from_slice(&fs_core::store::pack::VERSION.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        Bundle {
            kind,
            bytes,
            entries: Vec::new(),
        }
    }
    fn add(&mut self, id: &ObjectId, b: &[u8]) {
        self.bytes.extend_from_slice(id);
        self.bytes
            .extend_from_slice(&(b.len() as u32).to_le_bytes());
        let off = self.bytes.len() as u64;
        self.bytes.extend_from_slice(b);
        self.entries.push((*id, off, b.len() as u32));
    }
    fn len(&self) -> usize {
        self.bytes.len()
    }
}

/// A bundle whose bytes are on their way: what acknowledging it needs.
struct Sent {
    kind: u8,
    key: String,
    size: u64,
    entries: Vec<(ObjectId, u64, u32)>,
}

/// Starts the upload of a bundle (with its BLAKE3 `h`, hashed by the
/// packer) on a thread of `s` through `r`; None for an empty bundle.
/// Errors: the wait for the push ran out ([`Hooks::cancel`]).
fn start<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    r: &'s Remote,
    (b, h): (Bundle, String),
    hooks: &Hooks,
) -> Result<Option<(std::thread::ScopedJoinHandle<'s, Result<bool>>, Sent)>> {
    if b.entries.is_empty() {
        return Ok(None);
    }
    if (hooks.cancel)() {
        bail!(
            "remote {}: push stopped before its end (the wait for it ran out); what was sent is kept and the next push sends the rest",
            r.url
        );
    }
    let dir = if b.kind == b'c' { "chunks" } else { "objects" };
    let key = format!("{dir}/{h}.bundle");
    let sent = Sent {
        kind: b.kind,
        key: key.clone(),
        size: b.bytes.len() as u64,
        entries: b.entries,
    };
    let bytes = b.bytes;
    Ok(Some((s.spawn(move || put_bundle(r, &key, bytes)), sent)))
}

/// PUTs a bundle unless the remote holds `key` with its size already: a
/// push cut short after a bundle's upload and before its index (a full
/// disk, a lost connection) packs the same bundle again, and sending it
/// again would need its size twice on a nearly full server. Keys are the
/// BLAKE3 of the bytes and uploads appear whole (docs/FORMATS.md "Remote
/// layout"), so a key of that size holds these bytes; a failed HEAD just
/// sends it. Ok(true): sent, Ok(false): found there.
fn put_bundle(r: &Remote, key: &str, bytes: Vec<u8>) -> Result<bool> {
    if r.size(key).ok().flatten() == Some(bytes.len() as u64) {
        tracing::info!("remote {}: {key} is there already (an earlier push sent it): not sent again", r.url);
        return Ok(false);
    }
    r.put(key, bytes).map(|()| true)
}

/// Acknowledges a bundle whose bytes are on the remote (`uploaded` by
/// this push, or found there): its index, then its ids recorded as held.
fn ack(r: &Remote, store: &Path, name: &str, b: Sent, uploaded: bool, rep: &mut PushReport) -> Result<()> {
    if failpoint("bundle-sent") {
        std::process::abort();
    }
    let idx = json!({
        "version": 1, "bundle": b.key, "size": b.size,
        "entries": b.entries.iter().map(|(id, off, len)| json!([hex_id(id), off, len])).collect::<Vec<_>>(),
    });
    let ib = serde_json::to_vec(&idx)?;
    let ih = blake3::hash(&ib).to_hex().to_string();
    r.put(&format!("index/{ih}.json"), ib)?;
    if failpoint("index-sent") {
        std::process::abort();
    }
    let ids: Vec<(u8, ObjectId)> = b.entries.iter().map(|e| (b.kind, e.0)).collect();
    state::add_held(store, name, &ids)?;
    if uploaded {
        rep.bundles += 1;
        rep.bytes += b.size;
    } else {
        rep.bundles_found += 1;
    }
    if b.kind == b'c' {
        rep.chunks += ids.len() as u64;
    } else {
        rep.objects += ids.len() as u64;
    }
    if failpoint("bundle-acked") && rep.bundles + rep.bundles_found >= 2 {
        std::process::abort();
    }
    Ok(())
}

/// Bundle uploads in flight at once (each on its own connection).
const IN_FLIGHT: usize = 2;

/// Uploads the bundles `rx` yields, [`IN_FLIGHT`] at a time, and
/// acknowledges them in the order they came: a bundle is acknowledged only
/// after every bundle before it. What was acknowledged is returned.
fn upload(
    r: &Remote,
    store: &Path,
    name: &str,
    rx: std::sync::mpsc::Receiver<(Bundle, String)>,
    hooks: &Hooks,
) -> Result<PushReport> {
    let mut rep = PushReport::default();
    // Each upload slot has its own connection and runtime; `r` writes the
    // indexes (a runtime is driven by one thread at a time).
    let conns = [Remote::open(&r.url, false)?, Remote::open(&r.url, false)?];
    std::thread::scope(|s| {
        let mut flying = std::collections::VecDeque::new();
        let mut slot = 0;
        for b in rx {
            if flying.len() == IN_FLIGHT {
                let (j, sent): (std::thread::ScopedJoinHandle<Result<bool>>, Sent) =
                    flying.pop_front().unwrap();
                let uploaded = join(j)?;
                ack(r, store, name, sent, uploaded, &mut rep)?;
            }
            if let Some(f) = start(s, &conns[slot], b, hooks)? {
                flying.push_back(f);
                slot = (slot + 1) % IN_FLIGHT;
            }
        }
        while let Some((j, sent)) = flying.pop_front() {
            let uploaded = join(j)?;
            ack(r, store, name, sent, uploaded, &mut rep)?;
        }
        Ok(rep)
    })
}

fn join(j: std::thread::ScopedJoinHandle<Result<bool>>) -> Result<bool> {
    j.join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("a bundle upload panicked")))
}

/// What a caller of [`push_with`] follows and controls: `progress(sent,
/// total)` in bytes as chunks and objects are packed, and `cancel()`,
/// asked before each bundle (true: stop with an error, what was sent
/// stays acknowledged).
pub struct Hooks<'a> {
    pub progress: &'a (dyn Fn(u64, u64) + Sync),
    pub cancel: &'a (dyn Fn() -> bool + Sync),
}

/// One push at a time per process: a `ringfs push` on a mount and the
/// background sync (`mount --remote`) take turns. Held only by pushes,
/// never by the FUSE request path.
static PUSHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Pushes `branch` (None: the checked-out one) of the store at `store`
/// (read through `src`) to remote `cfg`. Records the outcome in
/// `status.json` (the error too). `quiet`: no progress bar.
pub fn push(
    src: &Transfer,
    store: &Path,
    cfg: &state::Config,
    branch: Option<&str>,
    quiet: bool,
) -> Result<PushReport> {
    push_with(
        src,
        store,
        cfg,
        branch,
        quiet,
        &Hooks {
            progress: &|_, _| {},
            cancel: &|| false,
        },
    )
}

/// [`push`] with [`Hooks`].
pub fn push_with(
    src: &Transfer,
    store: &Path,
    cfg: &state::Config,
    branch: Option<&str>,
    quiet: bool,
    hooks: &Hooks,
) -> Result<PushReport> {
    let _one = PUSHING.lock().unwrap_or_else(|p| p.into_inner());
    let r = push_inner(src, store, cfg, branch, quiet, hooks);
    let mut st = state::status(store, &cfg.name);
    let now = super::sync::now_unix();
    match &r {
        Ok(rep) => {
            st.last_push = Some(now);
            st.last_error = None;
            st.heads.insert(rep.branch.clone(), rep.commit.clone());
            st.branches.insert(
                rep.branch.clone(),
                state::BranchStatus {
                    last_push: Some(now),
                    last_error: None,
                },
            );
        }
        Err(e) => {
            st.last_error = Some(format!("{e:#}"));
            let b = match branch {
                Some(b) => Some(b.to_string()),
                None => src.head(None).ok().map(|h| h.0),
            };
            if let Some(b) = b {
                st.branches.entry(b).or_default().last_error = Some(format!("{e:#}"));
            }
        }
    }
    let _ = state::save_status(store, &cfg.name, &st);
    r
}

fn push_inner(
    src: &Transfer,
    store: &Path,
    cfg: &state::Config,
    branch: Option<&str>,
    quiet: bool,
    hooks: &Hooks,
) -> Result<PushReport> {
    let t = Instant::now();
    let r = Remote::open(&cfg.url, false)?;
    r.ping()?;
    let guard = heads::init(&r, &cfg.writer)?;
    let remote_reset = state::check_identity(store, &cfg.name, &heads::identity(&r)?)?;
    let held = state::held(store, &cfg.name)?;
    let out = src
        .outgoing(branch, &|k, id| held.contains(&(k, *id)))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(held);
    // A lazy clone's chunks not fetched yet are held by the remote it was
    // cloned from, not this one: they cannot be sent from here.
    let lazy = out
        .chunks
        .iter()
        .filter(|(_, l)| l.pack == fs_core::store::REMOTE_PACK)
        .count();
    if lazy > 0 {
        bail!(
            "remote {} ({}): {lazy} chunks of branch {} are not in this store yet, only on the remote it was cloned from (a lazy clone): mount it until `ringfs remote status` shows 0 remote-only chunks (the background prefetch fetches them), or clone with --eager, then push again",
            cfg.name, cfg.url, out.branch
        );
    }
    let mut rep = PushReport {
        remote: cfg.name.clone(),
        branch: out.branch.clone(),
        commit: hex_id(&out.head),
        guard: guard.as_str().into(),
        remote_reset,
        ..Default::default()
    };
    let max = bundle_max();
    let total = out.bytes();
    let bar = progress(total, quiet, "push");
    // The uploader sends bundles in the order they are queued; a send
    // error ends it (the queue then refuses), a pack error ends the queue.
    let (tx, rx) = std::sync::mpsc::sync_channel::<(Bundle, String)>(1);
    let name = cfg.name.as_str();
    let rr = &r;
    let (packing, sent) = std::thread::scope(|s| {
        let up = s.spawn(move || upload(rr, store, name, rx, hooks));
        let packing = (|| -> Result<()> {
            let queue = |b: Bundle| -> Result<()> {
                // Refused only when the uploader stopped on an error, which
                // the join below reports.
                let h = blake3::hash(&b.bytes).to_hex().to_string();
                tx.send((b, h))
                    .map_err(|_| anyhow::anyhow!("the upload stopped"))
            };
            let mut packed = 0u64;
            let mut b = Bundle::new(b'c');
            for (id, loc) in &out.chunks {
                let bytes = src.chunk(id, *loc).map_err(|e| anyhow::anyhow!("{e}"))?;
                if b.len() + bytes.len() + 36 > max && !b.entries.is_empty() {
                    queue(std::mem::replace(&mut b, Bundle::new(b'c')))?;
                }
                b.add(id, &bytes);
                bar.inc(bytes.len() as u64);
                packed += bytes.len() as u64;
                (hooks.progress)(packed, total);
            }
            queue(b)?;
            let mut b = Bundle::new(b'o');
            for (id, bytes) in &out.objects {
                if b.len() + bytes.len() + 36 > max && !b.entries.is_empty() {
                    queue(std::mem::replace(&mut b, Bundle::new(b'o')))?;
                }
                b.add(id, bytes);
                bar.inc(bytes.len() as u64);
                packed += bytes.len() as u64;
                (hooks.progress)(packed, total);
            }
            queue(b)
        })();
        drop(tx);
        let sent = up
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the upload thread panicked")));
        (packing, sent)
    });
    // The uploader's error first: it is why packing stopped, if it did.
    let sent = sent?;
    packing?;
    rep.bundles = sent.bundles;
    rep.bundles_found = sent.bundles_found;
    rep.bytes = sent.bytes;
    rep.chunks = sent.chunks;
    rep.objects = sent.objects;
    bar.finish_and_clear();
    let head = rep.commit.clone();
    let is_anc = |c: &str| -> Result<bool> {
        let Some(id) = parse_hex(c) else {
            return Ok(false);
        };
        src.is_ancestor(&id, &out.head)
            .map_err(|e| anyhow::anyhow!("{e}"))
    };
    match heads::advance(&r, guard, &out.branch, &cfg.writer, &head, out.height, &is_anc)? {
        Ok(moved) => rep.head_moved = moved,
        Err(Refused::Diverged { theirs }) => {
            // A head naming no commit is damaged, not another store's.
            super::fetch::check_head(&r, &theirs, &|id| src.object(id).ok().flatten())?;
            return Err(anyhow::Error::new(Diverged(format!(
            "remote {} ({}): branch {} there is at {} (pushed by writer {}), which this store's {} does not descend from: another store pushes this branch. Nothing of theirs was changed (your objects are there, the head is not). If this store has no commits of its own since, `ringfs pull --store DIR` fast-forwards it to theirs; if both sides have commits (pull then refuses: it does not merge), keep yours on a new branch (`ringfs branch … NEWNAME`, then `ringfs push … --branch NEWNAME`) or in a fork of this store (`ringfs fork`)",
            cfg.name, cfg.url, out.branch, &theirs.commit[..12.min(theirs.commit.len())], theirs.writer, &head[..12]
        ))));
        }
        Err(Refused::Raced) => bail!(
            "remote {} ({}): another store moved branch {} during this push; nothing of theirs was changed: push again (refused with the way out if their head is not in your history), or push as a new branch (`ringfs branch … NEWNAME`, then `ringfs push … --branch NEWNAME`)",
            cfg.name, cfg.url, out.branch
        ),
    }
    rep.ms = (t.elapsed().as_secs_f64() * 1e6).round() / 1e3;
    Ok(rep)
}

/// A push refused because the remote's head is not in this store's
/// history (another store pushes the branch): no retry changes that, so
/// the unmount's final push stops waiting on it (`Diverged` is downcast
/// from the `anyhow` error; the background loop keeps retrying with
/// backoff, as the other store may go away). The text is the refusal with its ways out.
#[derive(Debug)]
pub struct Diverged(pub String);

impl std::fmt::Display for Diverged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Diverged {}

/// 64 hex digits → id.
pub fn parse_hex(s: &str) -> Option<ObjectId> {
    if s.len() != 64 {
        return None;
    }
    let mut id = [0u8; 32];
    for i in 0..32 {
        id[i] = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(id)
}
