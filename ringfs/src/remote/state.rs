//! The local record of a remote, `STORE/remotes/<NAME>/` (docs/FORMATS.md
//! "Local record of a remote"): its config (name, URL, writer id; never a
//! secret), what the remote holds (`held`, append-only, fdatasync'd after
//! each acknowledged bundle) and the last push's outcome (`status.json`).

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// `config.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Config {
    pub version: u32,
    pub name: String,
    pub url: String,
    /// This store's writer id on the remote (16 hex digits).
    pub writer: String,
}

/// `status.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Status {
    pub last_push: Option<u64>,
    pub last_error: Option<String>,
    /// The remote heads last seen (branch → commit hex).
    #[serde(default)]
    pub heads: BTreeMap<String, String>,
    /// Per branch: its last push's outcome.
    #[serde(default)]
    pub branches: BTreeMap<String, BranchStatus>,
}

/// `status.json`'s record of one branch's pushes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BranchStatus {
    /// When the branch was last pushed successfully (unix seconds).
    pub last_push: Option<u64>,
    /// The last push's error, None once a push succeeded.
    pub last_error: Option<String>,
}

/// Checks a remote's name: 1 to 64 of letters, digits, `-`, `_`, `.`, not
/// starting with `.`.
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 64
        || name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        bail!("{name:?} is not a remote name: 1 to 64 of letters, digits, - _ . (not starting with .)");
    }
    Ok(())
}

pub fn remotes_dir(store: &Path) -> PathBuf {
    store.join("remotes")
}

fn dir_of(store: &Path, name: &str) -> PathBuf {
    remotes_dir(store).join(name)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let written = (|| {
        let mut f = fs_core::private::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        // Nothing half-written stays (a full disk, most likely).
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    if let Some(p) = path.parent() {
        let _ = std::fs::File::open(p).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Records a new remote. Errors: the name is taken.
pub fn add(store: &Path, name: &str, url: &str) -> Result<Config> {
    let d = dir_of(store, name);
    if d.join("config.json").exists() {
        bail!(
            "a remote named {name:?} exists already in {} (its URL: {})",
            store.display(),
            load(store, name)?.url
        );
    }
    let made = !d.exists();
    fs_core::private::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    let seed = format!(
        "{:?}{}{}{name}",
        std::time::SystemTime::now(),
        std::process::id(),
        store.display()
    );
    let writer = blake3::hash(seed.as_bytes()).to_hex()[..16].to_string();
    let c = Config {
        version: 1,
        name: name.to_string(),
        url: url.to_string(),
        writer,
    };
    write_atomic(
        &d.join("config.json"),
        serde_json::to_string_pretty(&c)?.as_bytes(),
    )
    .inspect_err(|_| {
        // A failed add leaves no record behind (nor `remotes/` if it made it).
        if made {
            let _ = std::fs::remove_dir(&d);
            let _ = std::fs::remove_dir(remotes_dir(store));
        }
    })?;
    Ok(c)
}

/// A remote's config. Errors: no such remote (naming those there are).
pub fn load(store: &Path, name: &str) -> Result<Config> {
    let p = dir_of(store, name).join("config.json");
    let b = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let names = names(store);
            if names.is_empty() {
                bail!("no remote named {name:?}: this store has no remote (add one with `ringfs remote add … NAME URL`)");
            }
            bail!(
                "no remote named {name:?} (this store has: {})",
                names.join(", ")
            );
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
    };
    decode_v1(&p, &b, |c: &Config| c.version)
}

/// Decodes `b`, the bytes of the version-1 JSON file `p` (`version`: the
/// version it states). Errors: not JSON of that shape ("damaged"), or a
/// newer version than this ringfs reads — each naming the file.
pub(super) fn decode_v1<T: serde::de::DeserializeOwned>(p: &Path, b: &[u8], version: impl Fn(&T) -> u32) -> Result<T> {
    let v: T = serde_json::from_slice(b).with_context(|| format!("{} is damaged", p.display()))?;
    if version(&v) != 1 {
        bail!("{}: version {} is newer than this ringfs reads (1)", p.display(), version(&v));
    }
    Ok(v)
}

/// The remotes recorded, sorted.
pub fn names(store: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(remotes_dir(store))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().join("config.json").exists())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The remote a command means: `name`, or the only one (or `origin`).
pub fn pick(store: &Path, name: Option<&str>) -> Result<Config> {
    if let Some(n) = name {
        return load(store, n);
    }
    let all = names(store);
    match all.len() {
        0 => bail!("this store has no remote: add one with `ringfs remote add … NAME URL`"),
        1 => load(store, &all[0]),
        _ if all.iter().any(|n| n == "origin") => load(store, "origin"),
        _ => bail!(
            "this store has several remotes ({}): name one with --remote NAME",
            all.join(", ")
        ),
    }
}

/// What the remote holds, from `held` (a torn last record is ignored).
pub fn held(store: &Path, name: &str) -> Result<HashSet<(u8, [u8; 32])>> {
    let p = dir_of(store, name).join("held");
    let b = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
    };
    Ok(b.chunks_exact(33)
        .map(|r| (r[0], r[1..].try_into().unwrap()))
        .collect())
}

/// Checks that the remote answering at this URL is the one `held` describes:
/// the marker's identity `id` against the one recorded in `remote-id`. A
/// different identity (the remote was emptied, replaced or recreated) or a
/// `held` record without an identity drops `held`, so the next push sends
/// everything its branch needs again; returns whether it did. An empty `id`
/// (a marker from before identities) cannot be checked: `held` is kept.
pub fn check_identity(store: &Path, name: &str, id: &str) -> Result<bool> {
    if id.is_empty() {
        return Ok(false);
    }
    let d = dir_of(store, name);
    let p = d.join("remote-id");
    let recorded = std::fs::read_to_string(&p).ok();
    if recorded.as_deref() == Some(id) {
        return Ok(false);
    }
    let held = d.join("held");
    let had = std::fs::metadata(&held).map(|m| m.len() > 0).unwrap_or(false);
    if had {
        std::fs::remove_file(&held).with_context(|| format!("removing {}", held.display()))?;
    }
    write_atomic(&p, id.as_bytes())?;
    Ok(had)
}

/// Appends to `held`, durably (a torn tail from an earlier crash is cut first).
pub fn add_held(store: &Path, name: &str, ids: &[(u8, [u8; 32])]) -> Result<()> {
    let p = dir_of(store, name).join("held");
    let mut f = fs_core::private::options()
        .create(true)
        .append(true)
        .open(&p)
        .with_context(|| format!("opening {}", p.display()))?;
    let len = f.metadata()?.len();
    if len % 33 != 0 {
        f.set_len(len - len % 33)?;
    }
    let mut buf = Vec::with_capacity(ids.len() * 33);
    for (k, id) in ids {
        buf.push(*k);
        buf.extend_from_slice(id);
    }
    f.write_all(&buf)?;
    f.sync_data()?;
    Ok(())
}

pub fn status(store: &Path, name: &str) -> Status {
    std::fs::read(dir_of(store, name).join("status.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

pub fn save_status(store: &Path, name: &str, s: &Status) -> Result<()> {
    write_atomic(
        &dir_of(store, name).join("status.json"),
        serde_json::to_string_pretty(s)?.as_bytes(),
    )
}
