//! Branch heads on a remote, the only mutable keys (docs/FORMATS.md
//! "Remote layout", docs/SEMANTICS.md "Remotes"). The layout marker
//! `ringfs-remote.json` records how heads are guarded, chosen once by a
//! probe (create the same key twice):
//! - `cas`: the server refuses the second create. A head is a chain of
//!   immutable generation keys `heads/<B>/<seq>.json`; a push creates
//!   generation n+1 only if absent, so of two writers one wins and the
//!   other is refused.
//! - `writers`: the server ignores the condition (Garage 2.5). Each store
//!   writes only its own key `writers/<B>/<W>.json`; a push first checks
//!   every other writer's head is an ancestor of its commit, writes, lists
//!   again and takes its write back if another writer's head appeared that
//!   is not — so of two racing writers both may be refused, never one
//!   overwritten.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use super::store::{Miss, Remote};

pub const MARKER: &str = "ringfs-remote.json";

/// How heads are guarded on a remote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Guard {
    Cas,
    Writers,
}

impl Guard {
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::Cas => "cas",
            Guard::Writers => "writers",
        }
    }
}

/// The remote's layout marker (`ringfs-remote.json`, docs/FORMATS.md
/// "Remote layout").
#[derive(Serialize, Deserialize)]
pub struct Marker {
    format: String,
    version: u32,
    heads: Guard,
    /// This remote's identity (32 hex digits), chosen when the marker is
    /// created: a remote emptied or replaced under the same URL gets a new
    /// one, so a store's record of what it held is known stale. Empty in a
    /// marker written before identities existed.
    #[serde(default)]
    id: String,
}

/// One head record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HeadRec {
    pub branch: String,
    pub commit: String,
    pub height: u64,
    pub writer: String,
    pub time: u64,
    #[serde(default)]
    pub seq: u64,
    /// The key it was read from (not stored; empty for one being written).
    #[serde(skip)]
    pub key: String,
}

/// The error of a head record whose commit cannot be used (`why`): names
/// the remote, the branch and the record's key, and the way out. Every
/// command meeting it says the same (clone, pull, push).
pub fn damaged(r: &Remote, h: &HeadRec, why: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "remote {}: the head of branch {} is damaged (record {}): {why}. Nothing was taken from it or changed; \
         remove that record on the remote (the generation before it, if any, is then the head) or push to a new branch",
        r.url,
        h.branch,
        h.key
    )
}

fn hexname(b: &str) -> String {
    b.bytes().map(|x| format!("{x:02x}")).collect()
}

/// Whether create-if-absent holds on this server: a probe key created
/// twice (then removed).
pub fn probe(r: &Remote, writer: &str) -> Result<Guard> {
    let k = format!("probe/{writer}-{}", std::process::id());
    // Whatever fails, the probe key goes (and on file:// its directory).
    let gone = || {
        let _ = r.delete(&k);
        r.tidy("probe");
    };
    let first = r.create(&k, b"probe".to_vec()).inspect_err(|_| gone())?;
    let second = r.create(&k, b"probe".to_vec()).inspect_err(|_| gone())?;
    r.delete(&k)?;
    Ok(if first && !second {
        Guard::Cas
    } else {
        Guard::Writers
    })
}

/// The layout version this ringfs reads and writes.
pub const VERSION: u64 = 1;

/// Checks a marker's bytes: a JSON object with `"format":
/// "ringfs-remote"` and `"version"` 1 (format and version first, so a newer
/// layout whose other fields changed is named as newer). Errors: one line
/// naming the remote and what is wrong with its marker.
fn check_marker(url: &str, b: &[u8]) -> Result<Marker> {
    let not = |why: String| anyhow::anyhow!("remote {url}: {MARKER} {why}: this is not a ringfs remote this ringfs can use (check the URL)");
    let v: serde_json::Value = serde_json::from_slice(b).map_err(|e| not(format!("is not a ringfs remote marker ({e})")))?;
    match v.get("format").and_then(|f| f.as_str()) {
        Some("ringfs-remote") => {}
        Some(f) => return Err(not(format!("names format {f:?}, not \"ringfs-remote\""))),
        None => return Err(not("names no format".into())),
    }
    match v.get("version").and_then(|x| x.as_u64()) {
        Some(VERSION) => {}
        Some(n) if n > VERSION => bail!("remote {url}: layout version {n} is newer than this ringfs reads ({VERSION}): upgrade ringfs"),
        _ => return Err(not(format!("has no valid version ({})", v.get("version").map(|x| x.to_string()).unwrap_or_else(|| "none".into())))),
    }
    serde_json::from_value(v).map_err(|e| not(format!("is damaged ({e})")))
}

/// The remote's marker, read and checked by [`check_marker`]: every
/// command that reads or writes a remote (clone, pull, push, remote add and
/// status, a lazy clone's daemon) goes through here first. None: the
/// remote has no marker. Errors: a marker of another format or a newer
/// version, a damaged one, the remote unreachable.
pub fn marker(r: &Remote) -> Result<Option<Marker>> {
    match r.get(MARKER) {
        Ok(b) => check_marker(&r.url, &b).map(Some),
        Err(Miss::NotFound) => Ok(None),
        Err(Miss::Other(e)) => Err(e),
    }
}

/// The remote's marker, which must exist (every command but `remote add`
/// and push, which set a remote up). Errors: as [`marker`], or none there.
fn marker_needed(r: &Remote) -> Result<Marker> {
    match marker(r)? {
        Some(m) => Ok(m),
        None => bail!("remote {}: no ringfs remote there ({MARKER} is missing): check the URL, or push to it first", r.url),
    }
}

/// The remote's guard, from its marker; a remote without one is set up
/// (probe, then the marker created if absent). Errors: as [`marker`].
pub fn init(r: &Remote, writer: &str) -> Result<Guard> {
    if let Some(m) = marker(r)? {
        return Ok(m.heads);
    }
    let g = probe(r, writer)?;
    let seed = format!("{writer}{:?}{}", std::time::SystemTime::now(), std::process::id());
    let m = Marker {
        format: "ringfs-remote".into(),
        version: VERSION as u32,
        heads: g,
        id: blake3::hash(seed.as_bytes()).to_hex()[..32].to_string(),
    };
    r.create(MARKER, serde_json::to_vec_pretty(&m)?)?;
    // Whoever created it first decides.
    match marker(r)? {
        Some(m) => Ok(m.heads),
        None => bail!("remote {}: {MARKER} vanished right after it was written", r.url),
    }
}

/// The remote's identity from its marker (empty for a marker without one).
/// Errors: as [`marker`], or the marker missing.
pub fn identity(r: &Remote) -> Result<String> {
    Ok(marker_needed(r)?.id)
}

/// The guard of a remote that must be set up already (clone, pull,
/// status). Errors: as [`marker`], or the marker missing.
pub fn read_guard(r: &Remote) -> Result<Guard> {
    Ok(marker_needed(r)?.heads)
}

/// The head record at `k`, checked: JSON of a record whose commit is a
/// commit id (64 hex digits). Errors: a damaged record ([`damaged`]).
fn fetch_rec(r: &Remote, k: &str) -> Result<Option<HeadRec>> {
    match r.get(k) {
        Ok(b) => {
            let mut h: HeadRec = serde_json::from_slice(&b).map_err(|e| {
                anyhow::anyhow!("remote {}: head record {k} is damaged ({e}): nothing was taken from it or changed; remove that record on the remote (the generation before it, if any, is then the head) or push to a new branch", r.url)
            })?;
            h.key = k.to_string();
            if super::push::parse_hex(&h.commit).is_none() {
                return Err(damaged(r, &h, &format!("its commit {:?} is not a commit id", h.commit)));
            }
            Ok(Some(h))
        }
        Err(Miss::NotFound) => Ok(None),
        Err(Miss::Other(e)) => Err(e),
    }
}

/// Every head record of `branch` (cas: the latest generation only).
pub fn records(r: &Remote, g: Guard, branch: &str) -> Result<Vec<(String, HeadRec)>> {
    let dir = match g {
        Guard::Cas => format!("heads/{}", hexname(branch)),
        Guard::Writers => format!("writers/{}", hexname(branch)),
    };
    let mut names: Vec<String> = r
        .list(&dir)?
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    if g == Guard::Cas {
        names = names.pop().into_iter().collect();
    }
    let mut out = Vec::new();
    for n in names {
        let k = format!("{dir}/{n}");
        if let Some(rec) = fetch_rec(r, &k)? {
            out.push((k, rec));
        }
    }
    Ok(out)
}

/// The branch's head: the record of greatest height. Errors: two records
/// at that height naming different commits (diverged writers).
pub fn head(r: &Remote, g: Guard, branch: &str) -> Result<Option<HeadRec>> {
    let recs = records(r, g, branch)?;
    let Some(max) = recs.iter().map(|x| x.1.height).max() else {
        return Ok(None);
    };
    let top: Vec<&HeadRec> = recs
        .iter()
        .map(|x| &x.1)
        .filter(|x| x.height == max)
        .collect();
    if top.iter().any(|x| x.commit != top[0].commit) {
        bail!("remote {}: branch {branch} has diverged heads from several writers ({}): nothing is taken from it", r.url, top.iter().map(|x| format!("{} by {}", &x.commit[..12], x.writer)).collect::<Vec<_>>().join(", "));
    }
    Ok(Some(top[0].clone()))
}

/// The branches with a head on the remote.
pub fn branches(r: &Remote, g: Guard) -> Result<Vec<String>> {
    let dir = match g {
        Guard::Cas => "heads",
        Guard::Writers => "writers",
    };
    // Directory names: list the keys below with a full listing of one level
    // down is not offered by `list`; the branch names are in the records.
    let mut out = Vec::new();
    for sub in r.list_dirs(dir)? {
        let Some(name) = unhex(&sub) else { continue };
        out.push(name);
    }
    out.sort();
    Ok(out)
}

fn unhex(s: &str) -> Option<String> {
    if s.len() % 2 != 0 {
        return None;
    }
    let b: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect();
    String::from_utf8(b?).ok()
}

/// Generations of a `cas` head kept, the newest included: a push deletes
/// the older ones (oldest first), so the head read's listing stays bounded.
pub const KEEP_GENERATIONS: u64 = 32;

/// Generation `seq` of a `cas` head was just created at `key` from the
/// predecessor `pred` (its key and commit) read before. Creating it proves
/// it was absent, but not that it was never there: generations are pruned,
/// so a writer whose read was more than [`KEEP_GENERATIONS`] pushes stale
/// could re-create a deleted one. Pruning deletes oldest first, so the
/// predecessor still holding the commit read means nothing at or above it
/// was pruned and `seq` is new. With no predecessor (the branch looked
/// empty), any other generation present means the read was stale (or,
/// within the moment between the create and the listing, another writer
/// already built on it: refused too, which is safe). A stale create with a
/// predecessor is taken back; one without is left below the prune horizon
/// for the next prune. The push is then refused as raced; the real head is
/// untouched either way.
fn still_current(r: &Remote, dir: &str, key: &str, seq: u64, pred: Option<&(String, String)>) -> Result<bool> {
    let fresh = match pred {
        Some((pk, commit)) => fetch_rec(r, pk)?.is_some_and(|p| p.commit == *commit),
        None => !r.list(dir)?.iter().any(|n| n.ends_with(".json") && gen_of(n).is_some_and(|g| g != seq)),
    };
    if !fresh && pred.is_some() {
        r.delete(key)?;
    }
    Ok(fresh)
}

/// The generation a `heads/<B>/<SEQ>.json` name carries.
fn gen_of(name: &str) -> Option<u64> {
    name.strip_suffix(".json")?.parse().ok()
}

/// Deletes the generations of `dir` older than `newest - KEEP_GENERATIONS`,
/// oldest first (what [`still_current`] relies on). Best effort: a failure
/// leaves more generations to list, never a wrong head, and is logged.
fn prune(r: &Remote, dir: &str, newest: u64) {
    let Some(horizon) = newest.checked_sub(KEEP_GENERATIONS) else { return };
    let names = match r.list(dir) {
        Ok(n) => n,
        Err(e) => {
            tracing::debug!("pruning {dir}: {e:#}");
            return;
        }
    };
    let mut old: Vec<u64> = names.iter().filter_map(|n| gen_of(n)).filter(|g| *g <= horizon).collect();
    old.sort_unstable();
    for g in old {
        if let Err(e) = r.delete(&format!("{dir}/{g:020}.json")) {
            tracing::warn!("remote {}: pruning old head generation {g} of {dir}: {e:#}", r.url);
            return;
        }
    }
}

/// Why a head was not moved.
#[derive(Debug)]
pub enum Refused {
    /// The remote head is not an ancestor of ours (another writer, or a
    /// diverged history).
    Diverged { theirs: HeadRec },
    /// Another writer moved the head during our push.
    Raced,
}

/// Moves `branch` to `new` (height `height`) for `writer`, never over
/// another writer's head. `is_ancestor(commit hex)` answers from the local
/// store. Ok(Ok(true)): moved; Ok(Ok(false)): the head was `new` already
/// (nothing written); Ok(Err(_)): refused, nothing of another writer changed.
pub fn advance(
    r: &Remote,
    g: Guard,
    branch: &str,
    writer: &str,
    new: &str,
    height: u64,
    is_ancestor: &dyn Fn(&str) -> Result<bool>,
) -> Result<std::result::Result<bool, Refused>> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut rec = HeadRec {
        branch: branch.to_string(),
        commit: new.to_string(),
        height,
        writer: writer.to_string(),
        time: now,
        seq: 0,
        key: String::new(),
    };
    match g {
        Guard::Cas => {
            let cur = records(r, g, branch)?.pop();
            if let Some((_, c)) = &cur {
                if c.commit == new {
                    return Ok(Ok(false));
                }
                if !is_ancestor(&c.commit)? {
                    return Ok(Err(Refused::Diverged { theirs: c.clone() }));
                }
            }
            let pred = cur.as_ref().map(|(k, c)| (k.clone(), c.commit.clone()));
            rec.seq = cur.map(|c| c.1.seq + 1).unwrap_or(1);
            let dir = format!("heads/{}", hexname(branch));
            let k = format!("{dir}/{:020}.json", rec.seq);
            if !r.create(&k, serde_json::to_vec_pretty(&rec)?)? {
                return Ok(Err(Refused::Raced));
            }
            if !still_current(r, &dir, &k, rec.seq, pred.as_ref())? {
                return Ok(Err(Refused::Raced));
            }
            prune(r, &dir, rec.seq);
            Ok(Ok(true))
        }
        Guard::Writers => {
            let mine_key = format!("writers/{}/{writer}.json", hexname(branch));
            let before = records(r, g, branch)?;
            let mine_before = before.iter().find(|x| x.0 == mine_key).map(|x| x.1.clone());
            for (k, o) in &before {
                if *k != mine_key && !is_ancestor(&o.commit)? {
                    return Ok(Err(Refused::Diverged { theirs: o.clone() }));
                }
            }
            // Ours says `new` already and every other head is in its
            // history: the branch's head is `new`, nothing to write.
            if mine_before.as_ref().is_some_and(|m| m.commit == new) {
                return Ok(Ok(false));
            }
            r.put(&mine_key, serde_json::to_vec_pretty(&rec)?)?;
            if super::failpoint("head-written") {
                std::process::abort();
            }
            let after = records(r, g, branch)?;
            for (k, o) in &after {
                if *k != mine_key && !is_ancestor(&o.commit)? {
                    // Another writer came in meanwhile: take ours back.
                    match &mine_before {
                        Some(m) => r.put(&mine_key, serde_json::to_vec_pretty(m)?)?,
                        None => r.delete(&mine_key)?,
                    }
                    return Ok(Err(Refused::Diverged { theirs: o.clone() }));
                }
            }
            Ok(Ok(true))
        }
    }
}
