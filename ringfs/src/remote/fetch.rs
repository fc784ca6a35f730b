//! `ringfs clone` and `ringfs pull`: a branch head read from the remote,
//! the bundle indexes, then the objects the head reaches that the local
//! store lacks (each checked against its id) and the chunk bundles
//! holding the chunks they name (each checked against its key, then every
//! record against its hash when it becomes a pack). Eager (pull, `clone
//! --eager`): every chunk is fetched before the command returns; lazy
//! (`clone`): the chunks' places on the remote are returned instead
//! (`remote/lazy.rs` fetches them later).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use fs_core::snap::object::{hex_id, id_of, ObjectId};
use fs_core::snap::transfer::children;

use super::heads::{self, HeadRec};
use super::progress;
use super::push::parse_hex;
use super::store::Remote;

/// Where each object and chunk is on the remote: (bundle key, offset, len).
#[derive(Default)]
pub struct Catalog {
    pub objects: HashMap<ObjectId, (String, u64, u32)>,
    pub chunks: HashMap<ObjectId, (String, u64, u32)>,
    pub sizes: HashMap<String, u64>,
}

/// Reads every bundle index (each checked against its key).
pub fn catalog(r: &Remote) -> Result<Catalog> {
    let mut c = Catalog::default();
    // Every index at once (GETS_IN_FLIGHT at a time), then each parsed.
    let keys: Vec<(String, String)> = r
        .list("index")?
        .into_iter()
        .filter_map(|n| {
            let h = n.strip_suffix(".json")?.to_string();
            Some((format!("index/{n}"), h))
        })
        .collect();
    let all = r.get_many_verified(&keys)?;
    for ((k, _), b) in keys.iter().zip(all) {
        let v: serde_json::Value = serde_json::from_slice(&b)
            .map_err(|e| anyhow!("remote {}: {k} is not a bundle index: {e}", r.url))?;
        let bundle = v["bundle"]
            .as_str()
            .ok_or_else(|| anyhow!("remote {}: {k} names no bundle", r.url))?
            .to_string();
        let map = if bundle.starts_with("chunks/") {
            &mut c.chunks
        } else {
            &mut c.objects
        };
        for e in v["entries"].as_array().into_iter().flatten() {
            let (Some(id), Some(off), Some(len)) = (
                e[0].as_str().and_then(parse_hex),
                e[1].as_u64(),
                e[2].as_u64(),
            ) else {
                bail!("remote {}: {k} has a malformed entry", r.url);
            };
            map.insert(id, (bundle.clone(), off, len as u32));
        }
        c.sizes.insert(bundle, v["size"].as_u64().unwrap_or(0));
    }
    Ok(c)
}

/// The hex hash a bundle key names (`objects/<H>.bundle`).
fn key_hash(k: &str) -> &str {
    k.rsplit('/')
        .next()
        .unwrap_or(k)
        .trim_end_matches(".bundle")
}

/// What a fetch brought: objects (post-order not needed: a store insert
/// takes them all at once) and the chunk bundle files.
pub struct Fetched {
    pub head: HeadRec,
    pub objects: Vec<(ObjectId, Vec<u8>)>,
    pub bundles: Vec<PathBuf>,
    pub bytes: u64,
    /// Lazy: each wanted chunk and its place on the remote (bundle key,
    /// offset, length), in the order a depth-first walk of the head's tree
    /// by name first meets them (a path-order reader's order; then the
    /// chunks only older commits name); no chunk bundle fetched.
    pub remote: Vec<(ObjectId, (String, u64, u32))>,
}

/// Fetches what `head` reaches and `have_object` / `have_chunk` say the
/// local store lacks; chunk bundles are written under `staging` (a bundle
/// already there whole is not fetched again: a cut-short clone resumes).
/// `all_objects` (a clone: the store has no object yet): every object
/// bundle is fetched up front, concurrently, instead of each when the walk
/// first needs it.
#[allow(clippy::too_many_arguments)]
pub fn fetch(
    r: &Remote,
    head: HeadRec,
    have_object: &dyn Fn(&ObjectId) -> bool,
    have_chunk: &dyn Fn(&ObjectId) -> bool,
    staging: &Path,
    quiet: bool,
    lazy: bool,
    all_objects: bool,
) -> Result<Fetched> {
    let cat = catalog(r)?;
    let root = parse_hex(&head.commit).ok_or_else(|| {
        anyhow!(
            "remote {}: head of {} is not a commit id",
            r.url,
            head.branch
        )
    })?;
    let mut bundles: HashMap<String, Vec<u8>> = HashMap::new();
    let mut objects = Vec::new();
    let mut want_chunks: HashSet<ObjectId> = HashSet::new();
    // The wanted chunks in the order the walk first meets them.
    let mut want_order: Vec<ObjectId> = Vec::new();
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut stack = vec![root];
    let mut bytes = 0u64;
    if all_objects {
        let mut keys: Vec<(String, String)> = cat
            .objects
            .values()
            .map(|p| (p.0.clone(), key_hash(&p.0).to_string()))
            .collect();
        keys.sort();
        keys.dedup();
        for ((k, _), b) in keys.iter().zip(r.get_many_verified(&keys)?) {
            bytes += b.len() as u64;
            bundles.insert(k.clone(), b);
        }
    }
    while let Some(id) = stack.pop() {
        if !seen.insert(id) || have_object(&id) {
            continue;
        }
        let Some((bk, off, len)) = cat.objects.get(&id) else {
            bail!(
                "remote {}: object {} is in no bundle index (the remote lost data a head needs)",
                r.url,
                hex_id(&id)
            );
        };
        if !bundles.contains_key(bk) {
            let b = r.get_verified(bk, key_hash(bk))?;
            bytes += b.len() as u64;
            bundles.insert(bk.clone(), b);
        }
        let b = &bundles[bk];
        let rec = b
            .get(*off as usize..*off as usize + *len as usize)
            .ok_or_else(|| anyhow!("remote {}: {bk} is shorter than its index says", r.url))?;
        if id_of(rec) != id {
            bail!(
                "remote {}: object {} in {bk} does not match its id",
                r.url,
                hex_id(&id)
            );
        }
        if id == root {
            if let Some(why) = not_a_commit(rec) {
                return Err(heads::damaged(r, &head, &why));
            }
        }
        let (objs, chunks) = children(rec)
            .map_err(|e| anyhow!("remote {}: object {} in {bk}: {e}", r.url, hex_id(&id)))?;
        // Pushed in reverse, so the walk is depth-first in name order (a
        // directory's entries are sorted by name): chunks are met in the
        // order a reader walking the head's tree by path needs them.
        stack.extend(objs.into_iter().rev());
        for h in chunks {
            if !have_chunk(&h) && want_chunks.insert(h) {
                want_order.push(h);
            }
        }
        objects.push((id, rec.to_vec()));
    }
    drop(bundles);
    // The chunk bundles holding what is wanted.
    let mut need: Vec<String> = Vec::new();
    let mut in_need: HashSet<&str> = HashSet::new();
    for h in &want_chunks {
        let Some((bk, _, _)) = cat.chunks.get(h) else {
            bail!(
                "remote {}: chunk {} is in no bundle index (the remote lost data a head needs)",
                r.url,
                hex_id(h)
            );
        };
        if in_need.insert(bk.as_str()) {
            need.push(bk.clone());
        }
    }
    need.sort();
    if lazy {
        let remote = want_order
            .iter()
            .map(|h| (*h, cat.chunks[h].clone()))
            .collect();
        return Ok(Fetched {
            head,
            objects,
            bundles: Vec::new(),
            bytes,
            remote,
        });
    }
    // Private to the store's owner, as the store it fills (D87).
    fs_core::private::create_dir_all(staging).with_context(|| format!("creating {}", staging.display()))?;
    let total: u64 = need
        .iter()
        .map(|k| cat.sizes.get(k).copied().unwrap_or(0))
        .sum();
    let bar = progress(total, quiet, "fetch");
    let mut files = Vec::new();
    for k in &need {
        let h = key_hash(k);
        let p = staging.join(format!("{h}.bundle"));
        let whole = std::fs::read(&p)
            .map(|b| blake3::hash(&b).to_hex().as_str() == h)
            .unwrap_or(false);
        if !whole {
            let b = r.get_verified(k, h)?;
            bytes += b.len() as u64;
            let tmp = p.with_extension("part");
            if let Err(e) = fs_core::private::write(&tmp, &b) {
                // (No half-written bundle stays: a full disk is reported with what the staging holds.)
                let _ = std::fs::remove_file(&tmp);
                return Err(e).with_context(|| format!("writing {}", tmp.display()));
            }
            std::fs::rename(&tmp, &p)?;
            if super::failpoint("bundle-fetched") && files.len() >= 1 {
                std::process::abort();
            }
        }
        bar.inc(cat.sizes.get(k).copied().unwrap_or(0));
        files.push(p);
    }
    bar.finish_and_clear();
    Ok(Fetched {
        head,
        objects,
        bundles: files,
        bytes,
        remote: Vec::new(),
    })
}

/// Why the object bytes `b` a head names are not a commit ("it names
/// object X, which is a directory, not a commit"); None: a commit.
pub fn not_a_commit(b: &[u8]) -> Option<String> {
    use fs_core::snap::object::{dec_commit, kind_name, kind_of, KIND_COMMIT};
    let why = match kind_of(b) {
        Ok(KIND_COMMIT) => format!("a commit that cannot be read ({})", dec_commit(b).err()?),
        Ok(k) => format!("{}, not a commit", kind_name(k)),
        Err(e) => format!("not an object this ringfs reads ({e})"),
    };
    Some(format!("it names object {}, which is {why}", hex_id(&id_of(b))))
}

/// Checks that the commit `head` names is a commit: from `local` (the
/// object's bytes when this store holds it), else from the remote (its
/// bundle index and bundle). A push refused by a head it does not descend
/// from calls it first, so a damaged head is named as such, as clone and
/// pull name it, not as another store's. Errors: [`heads::damaged`], or
/// the remote unreadable.
pub fn check_head(r: &Remote, head: &HeadRec, local: &dyn Fn(&ObjectId) -> Option<Vec<u8>>) -> Result<()> {
    let id = parse_hex(&head.commit).ok_or_else(|| heads::damaged(r, head, "its commit is not a commit id"))?;
    let b = match local(&id) {
        Some(b) => b,
        None => {
            let cat = catalog(r)?;
            let Some((bk, off, len)) = cat.objects.get(&id) else {
                return Err(heads::damaged(r, head, &format!("it names object {}, which is in no bundle index on the remote", hex_id(&id))));
            };
            let b = r.get_verified(bk, key_hash(bk))?;
            match b.get(*off as usize..*off as usize + *len as usize) {
                Some(rec) if id_of(rec) == id => rec.to_vec(),
                _ => bail!("remote {}: object {} in {bk} does not match its index", r.url, hex_id(&id)),
            }
        }
    };
    match not_a_commit(&b) {
        Some(why) => Err(heads::damaged(r, head, &why)),
        None => Ok(()),
    }
}

/// The head of `branch` on the remote (None: the remote's only branch, or
/// `main`). Errors: no such branch (naming those there are).
pub fn remote_head(r: &Remote, branch: Option<&str>) -> Result<HeadRec> {
    let g = heads::read_guard(r)?;
    let names = heads::branches(r, g)?;
    let b = match branch {
        Some(b) => b.to_string(),
        None if names.len() == 1 => names[0].clone(),
        None if names.iter().any(|n| n == "main") => "main".into(),
        None if names.is_empty() => bail!("remote {}: no branch has been pushed there yet", r.url),
        None => bail!(
            "remote {} has several branches ({}): name one with --branch",
            r.url,
            names.join(", ")
        ),
    };
    match heads::head(r, g, &b)? {
        Some(h) => Ok(h),
        None => bail!(
            "remote {}: no branch {b:?} there (it has: {})",
            r.url,
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        ),
    }
}
