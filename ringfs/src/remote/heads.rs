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

#[derive(Serialize, Deserialize)]
struct Marker {
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

/// The remote's guard, from its marker; a remote without one is set up
/// (probe, then the marker created if absent). Errors: another format or a
/// newer version, the remote unreachable.
pub fn init(r: &Remote, writer: &str) -> Result<Guard> {
    match r.get(MARKER) {
        Ok(b) => {
            let m: Marker = serde_json::from_slice(&b).map_err(|e| {
                anyhow::anyhow!(
                    "remote {}: {MARKER} is not a ringfs remote marker: {e}",
                    r.url
                )
            })?;
            if m.format != "ringfs-remote" {
                bail!(
                    "remote {}: {MARKER} names format {:?}, not ringfs-remote",
                    r.url,
                    m.format
                );
            }
            if m.version > 1 {
                bail!("remote {}: layout version {} is newer than this ringfs reads (1): upgrade ringfs", r.url, m.version);
            }
            Ok(m.heads)
        }
        Err(Miss::Other(e)) => Err(e),
        Err(Miss::NotFound) => {
            let g = probe(r, writer)?;
            let seed = format!("{writer}{:?}{}", std::time::SystemTime::now(), std::process::id());
            let m = Marker {
                format: "ringfs-remote".into(),
                version: 1,
                heads: g,
                id: blake3::hash(seed.as_bytes()).to_hex()[..32].to_string(),
            };
            r.create(MARKER, serde_json::to_vec_pretty(&m)?)?;
            // Whoever created it first decides.
            init_read(r)
        }
    }
}

fn init_read(r: &Remote) -> Result<Guard> {
    match r.get(MARKER) {
        Ok(b) => Ok(serde_json::from_slice::<Marker>(&b)
            .map_err(|e| anyhow::anyhow!("remote {}: {MARKER}: {e}", r.url))?
            .heads),
        Err(Miss::NotFound) => bail!(
            "remote {}: {MARKER} vanished right after it was written",
            r.url
        ),
        Err(Miss::Other(e)) => Err(e),
    }
}

/// The remote's identity from its marker (empty for a marker without one).
/// Errors: the marker missing or unreadable, the remote unreachable.
pub fn identity(r: &Remote) -> Result<String> {
    match r.get(MARKER) {
        Ok(b) => Ok(serde_json::from_slice::<Marker>(&b)
            .map_err(|e| anyhow::anyhow!("remote {}: {MARKER}: {e}", r.url))?
            .id),
        Err(Miss::NotFound) => bail!("remote {}: no ringfs remote there ({MARKER} is missing)", r.url),
        Err(Miss::Other(e)) => Err(e),
    }
}

/// The guard of a remote that must be set up already (clone, pull).
pub fn read_guard(r: &Remote) -> Result<Guard> {
    match r.get(MARKER) {
        Ok(_) => init_read(r),
        Err(Miss::NotFound) => bail!("remote {}: no ringfs remote there ({MARKER} is missing): check the URL, or push to it first", r.url),
        Err(Miss::Other(e)) => Err(e),
    }
}

fn fetch_rec(r: &Remote, k: &str) -> Result<Option<HeadRec>> {
    match r.get(k) {
        Ok(b) => Ok(Some(serde_json::from_slice(&b).map_err(|e| {
            anyhow::anyhow!("remote {}: head record {k} is damaged: {e}", r.url)
        })?)),
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
