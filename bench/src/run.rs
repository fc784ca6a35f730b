//! The run: targets interleaved in a fresh random order for every row of every
//! repetition, every sample in a fresh directory, prep untimed, body timed,
//! verify afterwards (a failed verify is a FAIL, never a time).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::noise::{self, LoadSampler};
use crate::progress::Progress;
use crate::rows::{self, de_static, Name, Row};
use crate::sys::{self, Ran, TempDir};
use crate::targets::{self, Counters, Features, Instance, TargetSpec};

#[derive(Debug, Clone)]
pub struct Config {
    pub profile: String,
    pub reps: usize,
    pub warmup: usize,
    pub rows: Vec<u32>,
    /// Target ids to run (None: every target).
    pub targets: Option<Vec<String>>,
    pub ringfs: PathBuf,
    pub scripts: PathBuf,
    pub cache: PathBuf,
    pub base: PathBuf,
    pub cells: bool,
    pub npm: Vec<String>,
    pub npm_reps: usize,
    /// Restore after restart at these file counts (ringfs on-disk stores).
    pub restore: Vec<usize>,
    pub seed: u64,
    pub timeout: Duration,
    pub date: String,
    /// The store section's sizes (None: no store section).
    pub store: Option<crate::store::Sizes>,
    /// The snapshots section's sizes (None: no snapshots section).
    pub snapshots: Option<crate::snapshots::Sizes>,
    /// The sync section's sizes (None: no sync section).
    pub sync: Option<crate::sync::Sizes>,
    /// The sync section's server: auto, garage or file.
    pub sync_remote: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    #[serde(deserialize_with = "de_static")]
    pub section: Name,
    pub row: String,
    pub target: String,
    pub rep: usize,
    pub warmup: bool,
    pub ok: bool,
    /// Milliseconds of the timed body (the sum of its timed functions).
    pub ms: Option<f64>,
    pub phases_ms: BTreeMap<String, f64>,
    pub error: Option<String>,
    /// The daemon's counters during the body (ringfs targets).
    pub counters: Option<Counters>,
    /// The daemon's counters per timed function, for rows with more than one
    /// (npm: install, readback; ringfs targets).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phase_counters: BTreeMap<String, Counters>,
    pub info: BTreeMap<String, String>,
    /// Cells: mount/unmount of the timed mount, and of the earlier (warm-up) mount.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmount_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_mount_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_unmount_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remounted: Option<bool>,
    /// Exec cells (`ringfs-exec-bench --cells`): the candidate's own figures
    /// (walls, the receipt's times, requests and changes, bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetResult {
    #[serde(flatten)]
    pub spec: TargetSpec,
    /// "ran" or "skipped".
    pub status: String,
    pub reason: Option<String>,
    pub args: Vec<String>,
    pub effective: Value,
    pub mount_ms: Option<f64>,
    pub unmount_ms: Option<f64>,
}

/// A run: what `run` measured, or what `ringfs-bench report --from` read back from
/// its results.json (the summaries there are recomputed, not read).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    pub meta: Value,
    pub targets: Vec<TargetResult>,
    pub rows: Vec<Row>,
    pub samples: Vec<Sample>,
    /// The store section (issue 12), when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<crate::store::figures::StoreSection>,
    /// The snapshots section (issue 13), when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<crate::store::figures::StoreSection>,
    /// The sync section (issue 14), when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<crate::store::figures::StoreSection>,
}

/// How a sample's phases run, and what a cell adds around them. The fs-bench
/// runs `bash run.sh ROW PHASE DIR` directly ([`Direct`]); the exec cells
/// (`crate::exec_cells`) wrap it (`setpriv`, `ringfs exec`) and read the
/// receipts. Every hook but [`Launch::phase`] does nothing by default.
pub trait Launch {
    /// Runs one phase (`prep`, `body` or `verify`): `cmd` is `bash run.sh ROW
    /// PHASE DIR` with its environment and working directory set. What it
    /// returns is judged as the phase's own output (`FSBENCH_US`,
    /// `FSBENCH_INFO`, `FSBENCH_FAIL` lines on stdout; the exit status).
    fn phase(&mut self, _inst: &Instance, _phase: &str, cmd: Command, scratch: &Path, timeout: Duration) -> Result<Ran> {
        sys::run(cmd, scratch, timeout)
    }
    /// The sample's fresh directory `dir` was made, before its prep.
    fn prepare_dir(&mut self, _inst: &Instance, _dir: &Path) -> Result<()> {
        Ok(())
    }
    /// The body succeeded (before verify): add what was measured to `s`.
    fn body_done(&mut self, _inst: &Instance, _dir: &Path, _s: &mut Sample) -> Result<()> {
        Ok(())
    }
    /// A cell's untimed setup (its prep) ran on the earlier mount, before that
    /// mount's unmount (the exec cells commit it).
    fn setup_done(&mut self, _inst: &mut Instance) -> Result<()> {
        Ok(())
    }
}

/// The fs-bench's way: every phase run directly.
pub struct Direct;

impl Launch for Direct {}

/// What the phases of a row need: the scripts, the cache, a per-phase timeout.
pub struct Phases {
    /// scripts/fsbench (run.sh and the row scripts).
    pub scripts: PathBuf,
    /// The persistent cache (row 13's clone fixture, the npm cache).
    pub cache: PathBuf,
    /// Per-phase timeout.
    pub timeout: Duration,
}

impl Phases {
    /// Runs run.sh's `phase` of `row` in `dir` through `launch`; `stats`:
    /// FSBENCH_STATS (see [`Instance::stats_command`]).
    #[allow(clippy::too_many_arguments)]
    fn phase(&self, launch: &mut dyn Launch, inst: &Instance, scratch: &Path, row: &Row, phase: &str, dir: &Path, stats: Option<&str>) -> Result<Ran> {
        let mut cmd = Command::new("bash");
        cmd.arg(self.scripts.join("run.sh")).arg(row.script()).arg(phase).arg(dir);
        if let Some(c) = stats {
            cmd.env("FSBENCH_STATS", c);
        }
        cmd.env("FSBENCH_GIT_REPO", self.cache.join("git/bench.git"));
        cmd.env("FSBENCH_NPM_CACHE", self.cache.join("npm"));
        cmd.current_dir(dir);
        launch.phase(inst, phase, cmd, scratch, self.timeout)
    }

    /// One sample of `row` in the fresh directory `name` under the instance's root.
    /// `between` runs after prep and before the body (a cell's remount).
    pub fn sample(
        &self,
        launch: &mut dyn Launch,
        inst: &mut Instance,
        row: &Row,
        name: &str,
        between: &mut dyn FnMut(&mut dyn Launch, &mut Instance) -> Result<()>,
    ) -> Result<Sample> {
        let mut s = Sample { row: row.key.to_string(), ..blank("rows", &inst.spec.id) };
        let dir = inst.root().join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let scratch = inst.scratch();
        let result = (|| -> Result<()> {
            launch.prepare_dir(inst, &dir)?;
            let r = self.phase(launch, inst, &scratch, row, "prep", &dir, None)?;
            if !r.ok() {
                s.error = Some(format!("prep: {}", r.why()));
                return Ok(());
            }
            between(launch, inst)?;
            let before = inst.counters();
            let r = self.phase(launch, inst, &scratch, row, "body", &dir, inst.stats_command().as_deref())?;
            let after = inst.counters();
            if !r.ok() {
                s.error = Some(format!("body: {}", r.why()));
                return Ok(());
            }
            let mut last: Option<Counters> = None;
            for l in r.stdout.lines() {
                if let Some(rest) = l.strip_prefix("FSBENCH_STATS ") {
                    let (f, json) = rest.split_once(' ').unwrap_or((rest, ""));
                    let now = serde_json::from_str::<serde_json::Value>(json).ok().map(|v| Counters::from_json(&v));
                    if let (Some(prev), Some(now), true) = (&last, &now, f != "-") {
                        s.phase_counters.insert(f.to_string(), Counters::delta(prev, now));
                    }
                    last = now;
                    continue;
                }
                let mut w = l.split_whitespace();
                if let (Some("FSBENCH_US"), Some(f), Some(us)) = (w.next(), w.next(), w.next()) {
                    if let Ok(us) = us.parse::<f64>() {
                        s.phases_ms.insert(f.to_string(), us / 1e3);
                    }
                }
            }
            if s.phases_ms.is_empty() {
                s.error = Some("body printed no FSBENCH_US line".into());
                return Ok(());
            }
            if let (Some(b), Some(a)) = (&before, &after) {
                s.counters = Some(Counters::delta(b, a));
            }
            launch.body_done(inst, &dir, &mut s)?;
            let r = self.phase(launch, inst, &scratch, row, "verify", &dir, None)?;
            for l in r.stdout.lines() {
                if let Some(rest) = l.strip_prefix("FSBENCH_INFO ") {
                    for kv in rest.split_whitespace() {
                        if let Some((k, v)) = kv.split_once('=') {
                            s.info.insert(k.into(), v.into());
                        }
                    }
                }
            }
            if !r.ok() {
                s.error = Some(format!("verify: {}", r.why()));
                return Ok(());
            }
            s.ok = true;
            s.ms = Some(s.phases_ms.values().sum());
            Ok(())
        })();
        // Untimed clean-up, then flush dirty data so the next sample starts quiet.
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if dir.exists() {
                eprintln!("ringfs-bench: removing {}: {e}", dir.display());
            }
        }
        let _ = std::fs::remove_file(inst.root().join(".fsbench-find-count"));
        // SAFETY: sync(2) has no preconditions.
        unsafe { libc::sync() };
        result?;
        if !s.ok && sys::interrupted() {
            anyhow::bail!("interrupted");
        }
        Ok(s)
    }
}

/// "rows rep 2/3", "cells warm-up 1/1": where a sample group is in its section.
fn group_label(section: &str, rep: usize, warmup: usize, reps: usize) -> String {
    if rep < warmup {
        format!("{section} warm-up {}/{warmup}", rep + 1)
    } else {
        format!("{section} rep {}/{reps}", rep + 1 - warmup)
    }
}

/// Run the whole benchmark.
pub fn run(cfg: &Config) -> Result<Results> {
    let started = Instant::now();
    let load_before = noise::read_loadavg();
    let sampler = LoadSampler::start(noise::LOAD_INTERVAL);
    let features = Features::detect(&cfg.ringfs)?;
    let mut machine = sys::machine();
    let base = TempDir::new(&cfg.base, "ringfs-bench.")?;
    let ctx = Phases { scripts: cfg.scripts.clone(), cache: cfg.cache.clone(), timeout: cfg.timeout };
    let mut rng = fastrand::Rng::with_seed(cfg.seed);

    // Which targets: selected, available, and mountable.
    let mut results: Vec<TargetResult> = vec![];
    let mut specs: Vec<TargetSpec> = vec![];
    for spec in targets::all_targets() {
        if let Some(sel) = &cfg.targets {
            if !sel.iter().any(|s| s == &spec.id) {
                continue;
            }
        }
        let args = spec.ringfs_args(&features).unwrap_or_default();
        let mut tr = TargetResult {
            spec: spec.clone(),
            status: "ran".into(),
            reason: None,
            args,
            effective: Value::Null,
            mount_ms: None,
            unmount_ms: None,
        };
        if let Some(why) = spec.unavailable(&features) {
            tr.status = "skipped".into();
            tr.reason = Some(why);
        } else {
            specs.push(spec);
        }
        results.push(tr);
    }
    let find = |results: &mut Vec<TargetResult>, id: &str| -> usize { results.iter().position(|t| t.spec.id == id).unwrap() };

    let mut samples: Vec<Sample> = vec![];
    // Interrupted (SIGINT/SIGTERM): the sections measured so far are kept
    // and reported; the rest is skipped.
    let mut interrupted: Option<&'static str> = None;
    let keep = |r: Result<()>, name: &'static str, interrupted: &mut Option<&'static str>| -> Result<()> {
        match r {
            Err(_) if sys::interrupted() => {
                eprintln!("ringfs-bench: interrupted during {name}; reporting what was measured");
                *interrupted = Some(name);
                Ok(())
            }
            r => r,
        }
    };
    let rows: Vec<&Row> = cfg.rows.iter().filter_map(|n| rows::row(*n)).collect();
    let npm_rows: Vec<&Row> = cfg.npm.iter().filter_map(|n| rows::npm(n)).collect();

    // Rows and npm: every target mounted once for the run, samples interleaved.
    let mut live: Vec<Instance> = vec![];
    if !rows.is_empty() || !npm_rows.is_empty() {
        for spec in &specs {
            sys::check_interrupted()?;
            let i = find(&mut results, &spec.id);
            let mut inst = Instance::new(spec, &features, &base.path)?;
            match inst.mount() {
                Ok(ms) => {
                    results[i].mount_ms = Some(ms);
                    results[i].effective = inst.effective.clone();
                    eprintln!("ringfs-bench: mounted {} in {ms:.0} ms", spec.id);
                    live.push(inst);
                }
                Err(e) => {
                    results[i].status = "skipped".into();
                    results[i].reason = Some(format!("{e:#}"));
                    eprintln!("ringfs-bench: skipping {}: {e:#}", spec.id);
                }
            }
        }
    }
    // What the later sections run on: the targets that mounted (all, when nothing was mounted yet).
    let ran = |id: &str| results.iter().any(|t| t.spec.id == id && t.status == "ran");
    let cell_rows: Vec<&Row> = if cfg.cells { rows::ROWS.iter().filter(|r| r.n <= 12 && cfg.rows.contains(&r.n)).collect() } else { vec![] };
    let cell_specs: Vec<TargetSpec> = specs.iter().filter(|s| ran(&s.id)).cloned().collect();
    let rs: Vec<TargetSpec> = specs.iter().filter(|s| s.is_ringfs() && s.survives_remount() && ran(&s.id)).cloned().collect();
    let per = (cfg.warmup + cfg.reps) as u64;
    let total = per * (rows.len() * live.len()) as u64
        + (cfg.npm_reps * npm_rows.len() * live.len()) as u64
        + per * (cell_rows.len() * cell_specs.len()) as u64
        + per * (cfg.restore.len() * rs.len()) as u64;
    let mut prog = Progress::new(total);

    if !live.is_empty() {
        let section = |samples: &mut Vec<Sample>, name: &'static str, list: &[&Row], reps: usize, warmup: usize, live: &mut Vec<Instance>, rng: &mut fastrand::Rng, prog: &mut Progress| -> Result<()> {
            for rep in 0..warmup + reps {
                for row in list {
                    prog.group(&group_label(name, rep, warmup, reps), row.key);
                    let mut order: Vec<usize> = (0..live.len()).collect();
                    rng.shuffle(&mut order);
                    for i in order {
                        sys::check_interrupted()?;
                        prog.start(&live[i].spec.id);
                        let name_dir = format!("s{rep}-{}", row.key);
                        let mut s = ctx.sample(&mut Direct, &mut live[i], row, &name_dir, &mut |_, _| Ok(()))?;
                        s.section = name;
                        s.rep = rep;
                        s.warmup = rep < warmup;
                        prog.done(&s);
                        samples.push(s);
                    }
                }
            }
            prog.end_group();
            Ok(())
        };
        let r = section(&mut samples, "rows", &rows, cfg.reps, cfg.warmup, &mut live, &mut rng, &mut prog);
        keep(r, "rows", &mut interrupted)?;
        if interrupted.is_none() {
            let r = section(&mut samples, "npm", &npm_rows, cfg.npm_reps, 0, &mut live, &mut rng, &mut prog);
            keep(r, "npm", &mut interrupted)?;
        }
    }
    for mut inst in live {
        let i = find(&mut results, &inst.spec.id);
        match inst.unmount() {
            Ok(ms) => results[i].unmount_ms = Some(ms),
            Err(e) => prog.println(&format!("ringfs-bench: {e:#}")),
        }
    }

    // Cells C01–C12: per cell a fresh store and mount; an untimed identical run on an
    // earlier mount, then its unmount; then a fresh mount for the timed run.
    if !cell_rows.is_empty() && interrupted.is_none() {
        let r = (|| -> Result<()> {
            for rep in 0..cfg.warmup + cfg.reps {
                for row in &cell_rows {
                    prog.group(&group_label("cells", rep, cfg.warmup, cfg.reps), row.key);
                    let mut order: Vec<usize> = (0..cell_specs.len()).collect();
                    rng.shuffle(&mut order);
                    for i in order {
                        sys::check_interrupted()?;
                        prog.start(&cell_specs[i].id);
                        let s = ctx.cell(&mut Direct, &cell_specs[i], &features, &base.path, row, rep, cfg.warmup)?;
                        prog.done(&s);
                        samples.push(s);
                    }
                }
            }
            prog.end_group();
            Ok(())
        })();
        keep(r, "cells", &mut interrupted)?;
    }

    // Restore after restart: populate, stop the daemon, start it on the same store and
    // time until a full `ls -R` of the mount answers.
    let mut restore_rows: Vec<Row> = vec![];
    if !cfg.restore.is_empty() && interrupted.is_none() {
        for &n in &cfg.restore {
            let key: &'static str = Box::leak(format!("restore-{n}").into_boxed_str());
            let title: &'static str = Box::leak(format!("restore after restart, {n} files (mount + ls -R)").into_boxed_str());
            restore_rows.push(Row { n: 0, key, title });
        }
        let r = (|| -> Result<()> {
            for rep in 0..cfg.warmup + cfg.reps {
                for (ri, &n) in cfg.restore.iter().enumerate() {
                    prog.group(&group_label("restore", rep, cfg.warmup, cfg.reps), restore_rows[ri].key);
                    let mut order: Vec<usize> = (0..rs.len()).collect();
                    rng.shuffle(&mut order);
                    for i in order {
                        sys::check_interrupted()?;
                        prog.start(&rs[i].id);
                        let mut s = restore(&ctx, &rs[i], &features, &base.path, n)?;
                        s.row = restore_rows[ri].key.to_string();
                        s.rep = rep;
                        s.warmup = rep < cfg.warmup;
                        prog.done(&s);
                        samples.push(s);
                    }
                }
            }
            prog.end_group();
            Ok(())
        })();
        keep(r, "restore", &mut interrupted)?;
    }

    // The store section: its own mounts, ext4 beside ringfs's default mode.
    let mut store = None;
    if let (Some(sizes), None) = (&cfg.store, interrupted) {
        let r = (|| -> Result<()> {
            let log = |m: &str| prog.println(m);
            store = Some(crate::store::run(sizes, &features, &base.path, cfg.timeout, &log)?);
            Ok(())
        })();
        keep(r, "store", &mut interrupted)?;
    }

    // The snapshots section: its own mounts, ringfs's snapshot commands beside git on ext4.
    let mut snapshots = None;
    if let (Some(sizes), None) = (&cfg.snapshots, interrupted) {
        let r = (|| -> Result<()> {
            let log = |m: &str| prog.println(m);
            snapshots = Some(crate::snapshots::run(sizes, &features, &base.path, &cfg.cache, cfg.timeout, &log)?);
            Ok(())
        })();
        keep(r, "snapshots", &mut interrupted)?;
    }

    // The sync section: push, clone and restart against Garage (or file://) beside raw object_store.
    let mut sync = None;
    if let (Some(sizes), None) = (&cfg.sync, interrupted) {
        let r = (|| -> Result<()> {
            let log = |m: &str| prog.println(m);
            sync = Some(crate::sync::run(sizes, &cfg.ringfs, &cfg.sync_remote, &base.path, &cfg.cache, cfg.timeout, &log)?);
            Ok(())
        })();
        keep(r, "sync", &mut interrupted)?;
    }

    prog.finish();
    machine["loadavg_end"] = json!(sys::loadavg());
    let load = noise::Load {
        cores: machine["cpus"].as_u64().unwrap_or(0) as usize,
        before: load_before,
        during: sampler.stop(),
        after: noise::read_loadavg(),
        interval_s: Some(noise::LOAD_INTERVAL.as_secs_f64()),
    };
    let meta = json!({
        "date": cfg.date,
        "profile": cfg.profile,
        "reps": cfg.reps,
        "warmup": cfg.warmup,
        "npm_reps": cfg.npm_reps,
        "seed": cfg.seed,
        "machine": machine,
        "load": load,
        "base_fs": sys::fs_type(&base.path),
        "ringfs": features,
        "scripts": cfg.scripts,
        "duration_s": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "interrupted_in": interrupted,
    });
    let mut all_rows: Vec<Row> = rows.iter().map(|r| (*r).clone()).collect();
    all_rows.extend(npm_rows.iter().map(|r| (*r).clone()));
    all_rows.extend(restore_rows);
    Ok(Results { meta, targets: results, rows: all_rows, samples, store, snapshots, sync })
}

impl Phases {
    /// One cell (C01–C12) of `row` on a fresh instance of `spec`: the untimed
    /// identical run on an earlier mount, the timed run's prep there, then (when
    /// the target survives it) that mount's unmount and a fresh mount for the
    /// timed body; the verify after it. Mount and unmount times go in the sample.
    #[allow(clippy::too_many_arguments)]
    pub fn cell(&self, launch: &mut dyn Launch, spec: &TargetSpec, features: &Features, base: &Path, row: &Row, rep: usize, warmup: usize) -> Result<Sample> {
        let mut inst = Instance::new(spec, features, base)?;
        let fail = |e: anyhow::Error| Sample {
            row: row.key.to_string(),
            rep,
            warmup: rep < warmup,
            error: Some(format!("{e:#}")),
            ..blank("cells", &spec.id)
        };
        let warm_mount = match inst.mount() {
            Ok(ms) => ms,
            Err(e) => return Ok(fail(e)),
        };
        // The untimed identical run on the earlier mount.
        let warm = match self.sample(launch, &mut inst, row, "warm", &mut |_, _| Ok(())) {
            Ok(w) => w,
            Err(e) => return Ok(fail(e.context("the untimed run"))),
        };
        let remount = spec.survives_remount();
        let mut warm_unmount = None;
        let mut mount_ms = None;
        let s = self.sample(launch, &mut inst, row, "cell", &mut |launch: &mut dyn Launch, inst: &mut Instance| {
            // prep (e.g. cells 9–11's base file) has run on the earlier mount.
            launch.setup_done(inst)?;
            if remount {
                warm_unmount = Some(inst.unmount()?);
                mount_ms = Some(inst.mount()?);
            }
            Ok(())
        });
        let unmount_ms = inst.unmount();
        drop(inst);
        let mut s = match s {
            Ok(s) => s,
            Err(e) => return Ok(fail(e)),
        };
        s.section = "cells";
        s.rep = rep;
        s.warmup = rep < warmup;
        s.warm_mount_ms = Some(warm_mount);
        s.warm_unmount_ms = warm_unmount;
        s.mount_ms = mount_ms;
        s.remounted = Some(remount);
        match unmount_ms {
            Ok(ms) => s.unmount_ms = Some(ms),
            Err(e) => {
                s.ok = false;
                s.error = Some(format!("{e:#}"));
            }
        }
        if !warm.ok {
            s.info.insert("warm_run".into(), format!("FAIL {}", warm.error.unwrap_or_default()));
        }
        Ok(s)
    }
}

fn blank(section: &'static str, target: &str) -> Sample {
    Sample {
        section,
        row: String::new(),
        target: target.to_string(),
        rep: 0,
        warmup: false,
        ok: false,
        ms: None,
        phases_ms: BTreeMap::new(),
        error: None,
        counters: None,
        phase_counters: BTreeMap::new(),
        info: BTreeMap::new(),
        mount_ms: None,
        unmount_ms: None,
        warm_mount_ms: None,
        warm_unmount_ms: None,
        remounted: None,
        exec: None,
    }
}

fn restore(ctx: &Phases, spec: &TargetSpec, features: &Features, base: &Path, n: usize) -> Result<Sample> {
    let mut s = blank("restore", &spec.id);
    let mut inst = Instance::new(spec, features, base)?;
    let res = (|| -> Result<()> {
        s.warm_mount_ms = Some(inst.mount()?);
        let tree = inst.root().join("tree");
        for i in 0..n {
            let d = tree.join(format!("d{}", i / 100));
            if i % 100 == 0 {
                std::fs::create_dir_all(&d)?;
            }
            std::fs::write(d.join(format!("f{i}")), format!("{i}\n"))?;
        }
        s.warm_unmount_ms = Some(inst.unmount()?);
        let t0 = Instant::now();
        s.mount_ms = Some(inst.mount()?);
        let mut ls = Command::new("ls");
        ls.arg("-R").arg(inst.root());
        let r = sys::run(ls, &inst.scratch(), ctx.timeout)?;
        let total = t0.elapsed().as_secs_f64() * 1e3;
        if !r.ok() {
            anyhow::bail!("ls -R: {}", r.why());
        }
        s.counters = inst.counters();
        let files = r.stdout.lines().filter(|l| l.starts_with('f')).count();
        if files != n {
            anyhow::bail!("ls -R listed {files} files, want {n}");
        }
        for i in [0, n / 2, n - 1] {
            let got = std::fs::read_to_string(tree.join(format!("d{}", i / 100)).join(format!("f{i}")))?;
            if got != format!("{i}\n") {
                anyhow::bail!("f{i} holds {got:?} after the restart");
            }
        }
        s.phases_ms.insert("restore".into(), total);
        s.ms = Some(total);
        s.ok = true;
        Ok(())
    })();
    if let Err(e) = res {
        s.error = Some(format!("{e:#}"));
    }
    match inst.unmount() {
        Ok(ms) => s.unmount_ms = Some(ms),
        Err(e) => {
            s.ok = false;
            s.error.get_or_insert(format!("{e:#}"));
        }
    }
    Ok(s)
}
