//! The sync section (issue 14): what `ringfs push`, `clone` and
//! `mount --remote` send and cost, each figure beside its limit in the same
//! run, against one Garage node on loopback when `garage` is on PATH (else a
//! `file://` directory, and the results say so):
//!
//! 1. `npm install express` into a synced path, then commit + push: bytes
//!    and objects sent, beside the same with `node_modules` local-only
//!    (`--ignore node_modules`); npm from the bench's cache (FSBENCH_CACHE);
//! 2. sixteen 10-byte edits of a 32 MiB file with a commit + push after
//!    each, and a 10-byte prepend (temp file + rename): bytes sent
//!    (≤ 0.25 MiB / ≤ 0.03 MiB);
//! 3. restart: a 3 000-file workspace pushed, unmounted, mounted again with
//!    `--remote`: the sync thread's reconciliation time (until it knows
//!    nothing is pending, `remote status --json` `sync.startup`) ≤ 10 ms and
//!    0 objects resent;
//! 4. clone of a 3 000-file / 100 MiB workspace into a fresh store: time
//!    until `ls -R` of the mounted clone answers and until every file was
//!    read back, beside a raw download of the same keys through
//!    object_store (list + GET each, [`raw`]), the limit;
//! 5. push of a 1 GiB change (quick: 256 MiB; tiny: 16 MiB) in 64 MiB
//!    files: throughput beside raw object_store PUTs of the same bytes
//!    (≥ 80 %).
//!
//! Figures are [`Figure`]s of the store section's kind: the "ext4" column
//! holds the reference (raw object_store, or the local-only variant).

pub mod garage;
pub mod raw;
mod work;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::noise::{self, LoadSampler};
use crate::store::figures::{Figure, SectionLoad, StoreSection};
use crate::sys::{self, TempDir};
use raw::Where;

/// The sizes of a sync section.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizes {
    pub profile: &'static str,
    /// Run the npm figure (needs npm and its cache).
    pub npm: bool,
    /// The dedup file, MiB (the 32).
    pub dedup_mib: u64,
    /// Files of the restart workspace (the 3 000).
    pub restart_files: usize,
    /// Files and MiB of the clone workspace (the 3 000 / 100).
    pub clone_files: usize,
    pub clone_mib: u64,
    /// The push-throughput change, MiB (the 1 GiB).
    pub push_mib: u64,
    /// The steps to run, by name ([`STEPS`]); empty: all of them.
    pub steps: Vec<String>,
}

/// The section's steps by name, in the order they run (`--sync-steps`).
pub const STEPS: [&str; 5] = ["npm", "dedup", "restart", "clone", "throughput"];

impl Sizes {
    /// "full" (the sizes), "quick" (a 256 MiB push), "tiny" (the test's, seconds).
    pub fn of(profile: &str) -> Option<Sizes> {
        Some(match profile {
            "full" => Sizes {
                profile: "full",
                npm: true,
                dedup_mib: 32,
                restart_files: 3000,
                clone_files: 3000,
                clone_mib: 100,
                push_mib: 1024,
                steps: vec![],
            },
            "quick" => Sizes {
                profile: "quick",
                npm: true,
                dedup_mib: 32,
                restart_files: 3000,
                clone_files: 3000,
                clone_mib: 100,
                push_mib: 256,
                steps: vec![],
            },
            "tiny" => Sizes {
                profile: "tiny",
                npm: false,
                dedup_mib: 2,
                restart_files: 200,
                clone_files: 200,
                clone_mib: 4,
                push_mib: 16,
                steps: vec![],
            },
            _ => return None,
        })
    }

    fn record(&self) -> BTreeMap<String, Value> {
        let mut m = BTreeMap::new();
        m.insert("npm".into(), json!(self.npm));
        m.insert("dedup_mib".into(), json!(self.dedup_mib));
        m.insert("restart_files".into(), json!(self.restart_files));
        m.insert("clone_files".into(), json!(self.clone_files));
        m.insert("clone_mib".into(), json!(self.clone_mib));
        m.insert("push_mib".into(), json!(self.push_mib));
        if !self.steps.is_empty() {
            m.insert("steps".into(), json!(self.steps));
        }
        m
    }
}

/// What a `ringfs … --json` command printed, with its wall time.
pub struct Doc {
    pub doc: Value,
    pub wall_ms: f64,
}

pub(crate) struct Ctx<'a> {
    sizes: &'a Sizes,
    bin: PathBuf,
    base: PathBuf,
    scratch: PathBuf,
    timeout: Duration,
    remote: Where,
    env: Vec<(String, String)>,
    npm_cache: PathBuf,
    log: &'a dyn Fn(&str),
    figures: Vec<Figure>,
    errors: Vec<String>,
}

impl Ctx<'_> {
    /// `ringfs ARGS --json` with the remote's environment; must succeed.
    fn rf(&self, args: &[&str]) -> Result<Doc> {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .arg("--json")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let r = sys::run_ok(c, &self.scratch, self.timeout)?;
        let doc: Value = serde_json::from_str(r.stdout.trim())
            .with_context(|| format!("ringfs {} printed no JSON: {}", args.join(" "), r.stdout))?;
        Ok(Doc { doc, wall_ms: r.ms })
    }

    /// The remote URL of one workload's prefix.
    fn url(&self, case: &str) -> String {
        match &self.remote {
            Where::File(d) => format!("file://{}/{case}", d.display()),
            Where::S3 { bucket, .. } => format!("s3://{bucket}/{case}"),
        }
    }

    /// A fresh workspace (store + mountpoint) under the section's directory.
    fn ws(&self, name: &str) -> Result<Ws> {
        let dir = self.base.join(name);
        std::fs::create_dir_all(dir.join("mnt"))?;
        Ok(Ws {
            mp: dir.join("mnt"),
            store: dir.join("store"),
            log: dir.join("ringfs.log"),
            bin: self.bin.clone(),
            env: self.env.clone(),
            scratch: self.scratch.clone(),
            mounted: false,
        })
    }

    fn failed(&mut self, what: &str, e: anyhow::Error) -> Result<()> {
        if sys::interrupted() {
            bail!("interrupted");
        }
        (self.log)(&format!("ringfs-bench: sync: {what} failed: {e:#}"));
        self.errors.push(format!("{what}: {e:#}"));
        Ok(())
    }
}

/// A ringfs workspace of the section: `ringfs mount MP --store STORE
/// --daemon`; Drop unmounts it if this guard mounted it.
pub(crate) struct Ws {
    pub mp: PathBuf,
    pub store: PathBuf,
    log: PathBuf,
    bin: PathBuf,
    env: Vec<(String, String)>,
    scratch: PathBuf,
    mounted: bool,
}

impl Ws {
    /// Mounts with `extra` arguments; the mount command's wall ms.
    pub fn mount(&mut self, extra: &[&str]) -> Result<f64> {
        let mut c = Command::new(&self.bin);
        c.arg("mount")
            .arg(&self.mp)
            .arg("--store")
            .arg(&self.store)
            .arg("--daemon")
            .arg("--log-file")
            .arg(&self.log)
            .args(extra);
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        let r = sys::run(c, &self.scratch, Duration::from_secs(60))?;
        self.mounted = sys::is_mounted(&self.mp);
        if !r.ok() || !self.mounted {
            bail!("ringfs mount {} failed: {}", self.mp.display(), r.why());
        }
        Ok(r.ms)
    }

    /// `ringfs umount MP` (which waits for a `--remote` mount's last push).
    pub fn umount(&mut self) -> Result<f64> {
        if !self.mounted {
            return Ok(0.0);
        }
        let mut c = Command::new(&self.bin);
        c.arg("umount")
            .arg(&self.mp)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let r = sys::run(c, &self.scratch, Duration::from_secs(120))?;
        self.mounted = sys::is_mounted(&self.mp);
        if self.mounted || !r.ok() {
            bail!("ringfs umount {} failed: {}", self.mp.display(), r.why());
        }
        Ok(r.ms)
    }

    pub fn mps(&self) -> String {
        self.mp.to_string_lossy().into_owned()
    }
}

impl Drop for Ws {
    fn drop(&mut self) {
        if self.mounted {
            let _ = self.umount();
        }
    }
}

type Step = fn(&mut Ctx) -> Result<()>;

/// Run the sync section with `sizes` against `backend` (`auto`: Garage when `garage` is on PATH, else file://; `garage`; `file`);
/// `log` prints a progress line.
pub fn run(
    sizes: &Sizes,
    bin: &Path,
    backend: &str,
    base: &Path,
    cache: &Path,
    timeout: Duration,
    log: &dyn Fn(&str),
) -> Result<StoreSection> {
    let started = Instant::now();
    let sampler = LoadSampler::start(noise::LOAD_INTERVAL);
    let before = noise::read_loadavg();
    let tmp = TempDir::new(base, "sync.")?;
    let scratch = tmp.path.join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let garage_bin = if backend == "file" {
        None
    } else {
        sys::which("garage")
    };
    if backend == "garage" && garage_bin.is_none() {
        bail!("--sync-remote garage: no `garage` on PATH (scripts/setup.sh installs Garage 2.5.0)");
    }
    // The node lives until the section ends (declared after tmp: dropped first).
    let mut node = None;
    let (remote, env, server) = match &garage_bin {
        Some(g) => {
            let n = garage::Garage::start(g, &tmp.path.join("garage"))?;
            let w = Where::S3 {
                endpoint: n.endpoint.clone(),
                key_id: n.key_id.clone(),
                secret: n.secret.clone(),
                region: garage::REGION.into(),
                bucket: garage::BUCKET.into(),
            };
            let ver = Command::new(g)
                .arg("--version")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            let env = n.env();
            node = Some(n);
            (
                w,
                env,
                format!(
                    "Garage on 127.0.0.1, one node, data in {} ({ver})",
                    sys::fs_type(&tmp.path)
                ),
            )
        }
        None => {
            let d = tmp.path.join("remote");
            std::fs::create_dir_all(&d)?;
            let why = if backend == "file" {
                "--sync-remote file"
            } else {
                "no garage on PATH"
            };
            (
                Where::File(d),
                vec![],
                format!(
                    "file:// on {} ({why}: not an S3 server)",
                    sys::fs_type(&tmp.path)
                ),
            )
        }
    };
    log(&format!(
        "ringfs-bench: sync ({}): remote: {server}",
        sizes.profile
    ));
    let mut cx = Ctx {
        sizes,
        bin: bin.into(),
        base: tmp.path.clone(),
        scratch,
        timeout,
        remote,
        env,
        npm_cache: cache.join("npm"),
        log,
        figures: vec![],
        errors: vec![],
    };
    let mut steps: Vec<(&str, &str, Step)> = vec![];
    if sizes.npm {
        steps.push(("npm", "npm install express: sent vs local-only", work::npm));
    }
    steps.push(("dedup", "dedup: 10-byte edits and a prepend, pushed", work::dedup));
    steps.push(("restart", "restart with --remote", work::restart));
    steps.push(("clone", "clone vs raw download", work::clone));
    steps.push(("throughput", "push throughput vs raw PUT", work::throughput));
    steps.retain(|(name, _, _)| sizes.steps.is_empty() || sizes.steps.iter().any(|s| s == name));
    for (_, what, step) in steps {
        sys::check_interrupted()?;
        log(&format!("ringfs-bench: sync ({}): {what}", sizes.profile));
        if let Err(e) = step(&mut cx) {
            cx.failed(what, e)?;
        }
    }
    drop(node);
    let after = noise::read_loadavg();
    Ok(StoreSection {
        kind: "sync".into(),
        profile: sizes.profile.into(),
        sizes: sizes.record(),
        ext4_fs: server,
        ringfs_args: vec!["--store".into(), "DIR".into(), "--daemon".into()],
        ringfs_effective: Value::Null,
        load: SectionLoad {
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            before,
            during: sampler.stop(),
            after,
        },
        duration_s: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        figures: cx.figures,
        errors: cx.errors,
    })
}
