//! The store section (issue 12): what the store engine costs, measured on
//! ringfs's default mode (synced paths, the embedded store on disk) beside a
//! plain directory on the host disk (ext4) in the same run:
//!
//! 1. fsync latency by file size: 4 KiB written at a random offset + fsync,
//!    median and p90, on files of 1, 16, 64, 256 MiB;
//! 2. SQLite: a database (WAL) and 4 concurrent writer processes of small
//!    transactions: wall time, writers that failed, `PRAGMA integrity_check`;
//! 3. the daemon's memory (VmHWM, and VmRSS sampled every 100 ms) for the
//!    mixed 8-client load, a big file written + fsync'd, a tree of small files;
//!    RSS idle before and after each;
//! 4. disk: the store beside the working copies for the big file, store plus
//!    working copies for the tree against `du` of the same tree on ext4;
//! 5. the final commit: `ringfs umount` right after the tree, un-fsynced.
//!
//! Every figure carries its target from the issue and whether it was met
//! ([`figures`]). Sizes by profile: [`Sizes::of`]. The workloads are in
//! [`work`] and [`mixed`]; the instruments in [`measure`]; the summary and
//! markdown lines in [`show`].

pub mod figures;
pub mod measure;
pub mod mixed;
pub mod show;
pub mod work;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::noise::{self, LoadSampler};
use crate::sys::{self, TempDir};
use crate::targets::{Features, Instance, Kind, RingfsMode, TargetSpec};
use figures::{Figure, SectionLoad, StoreSection};
use measure::{mib, RssPeak, RssSampler};

const MIB: u64 = 1 << 20;
const GIB: f64 = 1073741824.0;

/// The sizes of a store section.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizes {
    pub profile: &'static str,
    /// fsync latency: file sizes in MiB, and timed write + fsync per size.
    pub fsync_mib: Vec<u64>,
    pub fsync_reps: usize,
    /// SQLite: database size (MB, 10^6 bytes), writer processes, transactions each.
    pub sqlite_mb: f64,
    pub sqlite_writers: usize,
    pub sqlite_txns: usize,
    /// Mixed load: duration, files in the tar, packages per npm-like install.
    pub mixed: Duration,
    pub mixed_tar_files: usize,
    pub mixed_npm_pkgs: usize,
    /// The big file, MiB.
    pub big_mib: u64,
    /// The small-file tree, files.
    pub tree_files: usize,
    /// How long the daemon is left idle before its "after" RSS is read.
    pub settle: Duration,
}

impl Sizes {
    /// "full" (the sizes), "quick" (≈ 1–2 min), "tiny" (the test's, seconds).
    pub fn of(profile: &str) -> Option<Sizes> {
        Some(match profile {
            "full" => Sizes {
                profile: "full",
                fsync_mib: vec![1, 16, 64, 256],
                fsync_reps: 20,
                sqlite_mb: 54.0,
                sqlite_writers: 4,
                sqlite_txns: 2000,
                mixed: Duration::from_secs(600),
                mixed_tar_files: 5000,
                mixed_npm_pkgs: 40,
                big_mib: 4096,
                tree_files: 200_000,
                settle: Duration::from_secs(10),
            },
            "quick" => Sizes {
                profile: "quick",
                fsync_mib: vec![1, 16, 64, 256],
                fsync_reps: 5,
                sqlite_mb: 8.0,
                sqlite_writers: 4,
                sqlite_txns: 100,
                mixed: Duration::from_secs(20),
                mixed_tar_files: 5000,
                mixed_npm_pkgs: 20,
                big_mib: 1024,
                tree_files: 20_000,
                settle: Duration::from_secs(2),
            },
            "tiny" => Sizes {
                profile: "tiny",
                fsync_mib: vec![1, 4],
                fsync_reps: 3,
                sqlite_mb: 1.0,
                sqlite_writers: 4,
                sqlite_txns: 10,
                mixed: Duration::from_secs(3),
                mixed_tar_files: 200,
                mixed_npm_pkgs: 2,
                big_mib: 8,
                tree_files: 300,
                settle: Duration::from_millis(500),
            },
            _ => return None,
        })
    }

    fn record(&self) -> BTreeMap<String, serde_json::Value> {
        let mut m = BTreeMap::new();
        m.insert("fsync_mib".into(), json!(self.fsync_mib));
        m.insert("fsync_reps".into(), json!(self.fsync_reps));
        m.insert("sqlite_mb".into(), json!(self.sqlite_mb));
        m.insert("sqlite_writers".into(), json!(self.sqlite_writers));
        m.insert("sqlite_txns".into(), json!(self.sqlite_txns));
        m.insert("sqlite_journal".into(), json!("wal"));
        m.insert("mixed_s".into(), json!(self.mixed.as_secs_f64()));
        m.insert("mixed_tar_files".into(), json!(self.mixed_tar_files));
        m.insert("big_mib".into(), json!(self.big_mib));
        m.insert("tree_files".into(), json!(self.tree_files));
        m.insert("settle_s".into(), json!(self.settle.as_secs_f64()));
        m
    }
}

/// The ringfs side: `ringfs mount MP --store DIR --daemon`, nothing else.
pub fn default_mode() -> TargetSpec {
    TargetSpec {
        id: "rf-default".into(),
        label: "ringfs defaults (synced, embedded store)".into(),
        kind: Kind::Ringfs(RingfsMode { transport: None, passthrough: None, local_only: false, native_root: false, memory: false }),
    }
}

/// The ext4 side: a plain directory on the host disk.
pub fn raw_spec() -> TargetSpec {
    TargetSpec { id: "raw".into(), label: "ext4 directory".into(), kind: Kind::Raw }
}

/// Everything a workload needs.
struct Ctx<'a> {
    sizes: &'a Sizes,
    features: &'a Features,
    base: PathBuf,
    scratch: PathBuf,
    script: PathBuf,
    timeout: Duration,
    log: &'a dyn Fn(&str),
    figures: Vec<Figure>,
    errors: Vec<String>,
    effective: serde_json::Value,
}

/// A mounted ringfs instance with its daemon's PID and idle RSS.
struct Live {
    inst: Instance,
    pid: i32,
    idle: Option<u64>,
}

impl Ctx<'_> {
    fn ringfs(&mut self) -> Result<Live> {
        let mut inst = Instance::new(&default_mode(), self.features, &self.base)?;
        inst.mount().context("mounting ringfs")?;
        if self.effective.is_null() {
            self.effective = inst.effective.clone();
        }
        let pid = inst.daemon_pid().context("`ringfs status --json` gave no daemon pid")?;
        let idle = measure::settled_rss(pid, Duration::from_millis(1500));
        Ok(Live { inst, pid, idle })
    }

    /// Keep an error of a workload (interruptions end the section).
    fn failed(&mut self, what: &str, e: anyhow::Error) -> Result<()> {
        if sys::interrupted() {
            bail!("interrupted");
        }
        (self.log)(&format!("ringfs-bench: store: {what} failed: {e:#}"));
        self.errors.push(format!("{what}: {e:#}"));
        Ok(())
    }

    fn push(&mut self, f: Figure) {
        self.figures.push(f);
    }

    /// The memory figures of one workload: VmHWM, sampled max, idle before, after.
    fn rss_figures(&mut self, key: &str, what: &str, peak: Option<RssPeak>, idle: Option<u64>, after: Option<u64>) {
        let m = |x: Option<u64>| x.map(mib);
        self.push(Figure::new(format!("rss-{key}-hwm"), format!("daemon VmHWM, {what}"), "MiB", None, m(peak.map(|p| p.hwm))).at_most(128.0, "≤ 128 MiB"));
        self.push(
            Figure::new(format!("rss-{key}-max"), format!("daemon VmRSS sampled max, {what}"), "MiB", None, m(peak.map(|p| p.max_rss)))
                .at_most(128.0, "≤ 128 MiB"),
        );
        self.push(Figure::new(format!("rss-{key}-idle"), format!("daemon VmRSS idle before, {what}"), "MiB", None, m(idle)));
        let mut f = Figure::new(format!("rss-{key}-after"), format!("daemon VmRSS idle after, {what}"), "MiB", None, m(after));
        if let Some(i) = idle {
            f = f.at_most(2.0 * mib(i), format!("≤ 2× idle ({:.0} MiB)", 2.0 * mib(i)));
        }
        self.push(f);
    }
}

/// One workload of the section: it pushes its figures into the context.
type Step = fn(&mut Ctx) -> Result<()>;

/// Run the store section with `sizes`; `log` prints a progress line.
pub fn run(sizes: &Sizes, features: &Features, base: &Path, timeout: Duration, log: &dyn Fn(&str)) -> Result<StoreSection> {
    let started = Instant::now();
    let sampler = LoadSampler::start(noise::LOAD_INTERVAL);
    let before = noise::read_loadavg();
    let tmp = TempDir::new(base, "store.")?;
    let scratch = tmp.path.join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let script = scratch.join("sqlite_work.py");
    std::fs::write(&script, work::SQLITE_PY)?;
    let mut cx = Ctx {
        sizes,
        features,
        base: tmp.path.clone(),
        scratch,
        script,
        timeout,
        log,
        figures: vec![],
        errors: vec![],
        effective: serde_json::Value::Null,
    };
    let steps: [(&str, Step); 4] =
        [("fsync latency and SQLite", fsync_and_sqlite), ("mixed load", mixed_load), ("big file", big_file), ("small files", small_files)];
    for (what, step) in steps {
        sys::check_interrupted()?;
        log(&format!("ringfs-bench: store ({}): {what}", sizes.profile));
        if let Err(e) = step(&mut cx) {
            cx.failed(what, e)?;
        }
    }
    let after = noise::read_loadavg();
    Ok(StoreSection {
        kind: "store".into(),
        profile: sizes.profile.into(),
        sizes: sizes.record(),
        ext4_fs: sys::fs_type(&tmp.path),
        ringfs_args: vec!["--store".into(), "DIR".into(), "--daemon".into()],
        ringfs_effective: cx.effective,
        load: SectionLoad { cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0), before, during: sampler.stop(), after },
        duration_s: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        figures: cx.figures,
        errors: cx.errors,
    })
}

fn fsync_and_sqlite(cx: &mut Ctx) -> Result<()> {
    let mut raw = Instance::new(&raw_spec(), cx.features, &cx.base)?;
    raw.mount()?;
    let mut rf = cx.ringfs()?;
    let mut rng = fastrand::Rng::with_seed(12);
    let sizes = cx.sizes.clone();
    for &s in &sizes.fsync_mib {
        (cx.log)(&format!("ringfs-bench: store: 4 KiB write + fsync on a {s} MiB file, ×{}", sizes.fsync_reps));
        let mut one = |dir: &Path| work::fsync_latency(dir, s * MIB, sizes.fsync_reps, &mut rng);
        let e = one(&raw.root());
        let r = one(&rf.inst.root());
        let err = [("ext4", &e), ("ringfs", &r)].iter().find_map(|(n, x)| x.as_ref().err().map(|e| format!("{n}: {e:#}")));
        if let Some(err) = &err {
            cx.failed(&format!("fsync at {s} MiB"), anyhow::anyhow!("{err}"))?;
        }
        let (em, ep) = e.as_deref().map(measure::median_p90).unwrap_or((None, None));
        let (rm, rp) = r.as_deref().map(measure::median_p90).unwrap_or((None, None));
        let mut med = Figure::new(format!("fsync-{s}MiB-median"), format!("4 KiB write + fsync, {s} MiB file, median"), "ms", em, rm);
        if s == 256 {
            med = med.ratio_at_most(3.0);
        }
        cx.push(med.with_error(err.clone()));
        cx.push(Figure::new(format!("fsync-{s}MiB-p90"), format!("4 KiB write + fsync, {s} MiB file, p90"), "ms", ep, rp).with_error(err));
    }
    // SQLite: the same database on both sides, then the concurrent writers.
    let n = sizes.sqlite_writers;
    (cx.log)(&format!("ringfs-bench: store: SQLite, {} MB of rows (the figures give the database file's size), {n} writers × {} transactions", sizes.sqlite_mb, sizes.sqlite_txns));
    let side = |dir: &Path, name: &str| -> Result<(work::Writers, bool, u64)> {
        let sc = cx.scratch.join(format!("sqlite-{name}"));
        let db = dir.join("bench.db");
        let bytes = work::sqlite_create(&cx.script, &db, sizes.sqlite_mb, &sc, cx.timeout)?;
        let w = work::sqlite_writers(&cx.script, &db, n, sizes.sqlite_txns, &sc, cx.timeout)?;
        let ok = work::sqlite_check(&cx.script, &db, &sc, cx.timeout)?;
        for f in ["bench.db", "bench.db-wal", "bench.db-shm"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        Ok((w, ok, bytes))
    };
    let e = side(&raw.root(), "ext4");
    let r = side(&rf.inst.root(), "ringfs");
    let err = [("ext4", &e), ("ringfs", &r)].iter().find_map(|(n, x)| x.as_ref().err().map(|e| format!("{n}: {e:#}")));
    if let Some(err) = &err {
        cx.failed("SQLite", anyhow::anyhow!("{err}"))?;
    }
    let (e, r) = (e.ok(), r.ok());
    let mb = r.as_ref().or(e.as_ref()).map_or(sizes.sqlite_mb, |x| x.2 as f64 / 1e6);
    let what = format!("{mb:.0} MB database, {n} writers × {} txns (WAL)", sizes.sqlite_txns);
    cx.push(Figure::new("sqlite-wall", format!("SQLite {what}: wall"), "s", e.as_ref().map(|x| x.0.wall_s), r.as_ref().map(|x| x.0.wall_s)).ratio_at_most(1.5).with_error(err));
    let wf_err = r.as_ref().and_then(|x| x.0.first_error.clone()).or_else(|| e.as_ref().and_then(|x| x.0.first_error.clone()));
    cx.push(
        Figure::new("sqlite-failed", "SQLite: writers that failed", "count", e.as_ref().map(|x| x.0.failed as f64), r.as_ref().map(|x| x.0.failed as f64))
            .equals(0.0, "= 0")
            .with_error(wf_err),
    );
    let okv = |x: &Option<(work::Writers, bool, u64)>| x.as_ref().map(|x| if x.1 { 1.0 } else { 0.0 });
    cx.push(Figure::new("sqlite-integrity", "SQLite: PRAGMA integrity_check", "ok", okv(&e), okv(&r)).equals(1.0, "ok"));
    rf.inst.unmount().context("unmounting ringfs after fsync and SQLite")?;
    Ok(())
}

fn mixed_load(cx: &mut Ctx) -> Result<()> {
    let tar = mixed::make_tar(&cx.scratch, cx.sizes.mixed_tar_files)?;
    let mut rf = cx.ringfs()?;
    (cx.log)(&format!("ringfs-bench: store: mixed 8-client load for {} s", cx.sizes.mixed.as_secs()));
    let sampler = RssSampler::start(rf.pid);
    let rep = mixed::run(&rf.inst.root().join("mixed"), cx.sizes.mixed, &cx.scratch, &cx.script, &tar, cx.sizes.mixed_npm_pkgs);
    let after = measure::settled_rss(rf.pid, cx.sizes.settle);
    let peak = sampler.stop();
    let what = format!("mixed 8-client load, {} s", cx.sizes.mixed.as_secs());
    match rep {
        Ok(rep) => {
            let it: Vec<String> = rep.iterations.iter().map(|(k, v)| format!("{k} {v}")).collect();
            (cx.log)(&format!("ringfs-bench: store: mixed load iterations: {}", it.join(", ")));
            for e in rep.errors {
                cx.failed("mixed load client", anyhow::anyhow!(e))?;
            }
            cx.rss_figures("mixed", &what, Some(peak), rf.idle, after);
        }
        Err(e) => {
            cx.rss_figures("mixed", &what, None, rf.idle, None);
            cx.failed("mixed load", e)?;
        }
    }
    rf.inst.unmount().context("unmounting ringfs after the mixed load")?;
    Ok(())
}

fn big_file(cx: &mut Ctx) -> Result<()> {
    let size = cx.sizes.big_mib * MIB;
    let gib = size as f64 / GIB;
    let what = if cx.sizes.big_mib >= 1024 { format!("{gib:.0} GiB file") } else { format!("{} MiB file", cx.sizes.big_mib) };
    (cx.log)(&format!("ringfs-bench: store: {what} written + fsync"));
    let mut rng = fastrand::Rng::with_seed(4);
    let mut raw = Instance::new(&raw_spec(), cx.features, &cx.base)?;
    raw.mount()?;
    let ep = raw.root().join("big");
    let e = work::write_file(&ep, size, &mut rng);
    let e_du = measure::du(&ep).ok();
    let _ = std::fs::remove_file(&ep);
    let mut rf = cx.ringfs()?;
    let sampler = RssSampler::start(rf.pid);
    let r = work::write_file(&rf.inst.root().join("big"), size, &mut rng);
    let after = measure::settled_rss(rf.pid, cx.sizes.settle);
    let peak = sampler.stop();
    let err = [("ext4", &e), ("ringfs", &r)].iter().find_map(|(n, x)| x.as_ref().err().map(|e| format!("{n}: {e:#}")));
    cx.push(Figure::new("big-write", format!("{what}: write + fsync"), "s", e.as_ref().ok().map(|x| x / 1e3), r.as_ref().ok().map(|x| x / 1e3)).with_error(err.clone()));
    cx.rss_figures("big", &format!("{what} written + fsync"), r.is_ok().then_some(peak), rf.idle, after);
    if let Some(err) = err {
        cx.failed(&what, anyhow::anyhow!(err))?;
    }
    rf.inst.unmount().context("unmounting ringfs after the big file")?;
    // Disk, after a clean unmount: the store beside its working copies.
    let store = rf.inst.store_dir();
    let (total, wcs) = store_du(&store)?;
    let besides = (total.1.saturating_sub(wcs.1)) as f64 / GIB;
    let limit = 4.3 / 4.0 * gib;
    cx.push(
        Figure::new("disk-big-store", format!("{what}: store besides working copies (du)"), "GiB", e_du.map(|x| x.1 as f64 / GIB), r.is_ok().then_some(besides))
            .at_most(limit, format!("≤ {limit:.2} GiB")),
    );
    cx.push(Figure::new("disk-big-all", format!("{what}: store + working copies (du)"), "GiB", e_du.map(|x| x.1 as f64 / GIB), r.is_ok().then_some(total.1 as f64 / GIB)));
    Ok(())
}

/// `ringfs umount` timed until the daemon has exited (its final commit done):
/// (ms, what `ringfs umount` said when it gave up waiting but the daemon
/// went on and finished within `timeout`).
fn final_commit(rf: &mut Live, timeout: Duration) -> Result<(f64, Option<String>)> {
    let t0 = Instant::now();
    match rf.inst.unmount() {
        Ok(ms) => Ok((ms, None)),
        Err(e) if !rf.inst.is_mounted() => {
            // `ringfs umount` gave up waiting (its --timeout); the daemon may still be committing.
            while measure::rss_hwm(rf.pid).is_some() && !measure::is_zombie(rf.pid) {
                if t0.elapsed() > timeout {
                    bail!("{e:#}; the daemon (pid {}) was still running after {} s", rf.pid, timeout.as_secs());
                }
                sys::check_interrupted()?;
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok((t0.elapsed().as_secs_f64() * 1e3, Some(format!("{e:#}; the daemon finished after {:.0} s", t0.elapsed().as_secs_f64()))))
        }
        Err(e) => Err(e.context("ringfs umount after the tree")),
    }
}

/// du of the whole store and of its working copies (`wc/`, `local/`): ((bytes, allocated), (bytes, allocated)).
fn store_du(store: &Path) -> Result<((u64, u64), (u64, u64))> {
    let total = measure::du(store)?;
    let (a, b) = (measure::du(&store.join("wc"))?, measure::du(&store.join("local"))?);
    Ok((total, (a.0 + b.0, a.1 + b.1)))
}

fn small_files(cx: &mut Ctx) -> Result<()> {
    let n = cx.sizes.tree_files;
    let what = format!("{n} small files");
    (cx.log)(&format!("ringfs-bench: store: {what}, then ringfs umount"));
    let mut raw = Instance::new(&raw_spec(), cx.features, &cx.base)?;
    raw.mount()?;
    let et = raw.root().join("tree");
    let e = work::small_tree(&et, n);
    let t0 = Instant::now();
    let mut c = std::process::Command::new("sync");
    c.arg("-f").arg(&et);
    let e_sync = sys::run_ok(c, &cx.scratch, cx.timeout).map(|_| t0.elapsed().as_secs_f64());
    let e_du = measure::du(&et).ok();
    // Run 1: the tree, then `ringfs umount` at once (the final commit), then disk.
    let mut rf = cx.ringfs()?;
    let sampler = RssSampler::start(rf.pid);
    let r = work::small_tree(&rf.inst.root().join("tree"), n);
    let um = if r.is_ok() { Some(final_commit(&mut rf, cx.timeout)) } else { None };
    let peak = sampler.stop();
    let err = [("ext4", e.as_ref().map(|_| ())), ("ringfs", r.as_ref().map(|_| ()))]
        .into_iter()
        .find_map(|(s, x)| x.err().map(|e| format!("{s}: {e:#}")))
        .or_else(|| um.as_ref().and_then(|u| u.as_ref().err().map(|e| format!("{e:#}"))));
    cx.push(Figure::new("tree-create", format!("{what}: create (no fsync)"), "s", e.as_ref().ok().map(|x| x.0 / 1e3), r.as_ref().ok().map(|x| x.0 / 1e3)).with_error(err.clone()));
    let um_s = um.as_ref().and_then(|u| u.as_ref().ok()).map(|(ms, _)| ms / 1e3);
    let err = err.or_else(|| um.as_ref().and_then(|u| u.as_ref().ok()).and_then(|(_, e)| e.clone()));
    cx.push(
        Figure::new("umount-final-commit", format!("{what}: ringfs umount at once (ext4: sync -f)"), "s", e_sync.as_ref().ok().copied(), um_s)
            .at_most(10.0, "≤ 10 s")
            .with_error(err.clone()),
    );
    let (total, _) = store_du(&rf.inst.store_dir())?;
    cx.push(
        Figure::new("disk-tree", format!("{what}: store + working copies (du)"), "MiB", e_du.map(|x| mib(x.1)), um_s.map(|_| mib(total.1))).ratio_at_most(1.3),
    );
    cx.push(Figure::new("disk-tree-apparent", format!("{what}: apparent bytes (du -sb)"), "MiB", e_du.map(|x| mib(x.0)), um_s.map(|_| mib(total.0))));
    if let Some(err) = err {
        cx.failed(&what, anyhow::anyhow!(err))?;
    }
    if um_s.is_some() {
        // The tree survived the final commit.
        rf.inst.mount().context("remounting ringfs after the final commit")?;
        let check = work::check_tree(&rf.inst.root().join("tree"), n);
        rf.inst.unmount()?;
        if let Err(e) = check {
            cx.failed("the tree after the final commit", e)?;
        }
    }
    drop(rf);
    // Run 2: the same tree on a fresh mount, for the memory it leaves when idle.
    let mut rf = cx.ringfs()?;
    let sampler = RssSampler::start(rf.pid);
    let r = work::small_tree(&rf.inst.root().join("tree"), n);
    let after = measure::settled_rss(rf.pid, cx.sizes.settle);
    let peak2 = sampler.stop();
    let both = RssPeak { hwm: peak.hwm.max(peak2.hwm), max_rss: peak.max_rss.max(peak2.max_rss), ..peak2 };
    rf.inst.unmount()?;
    // The tree stays in the workspace, and its inode table in the daemon's
    // memory: "idle" here is a fresh mount of the same store at rest (the
    // empty store's idle is the reference of the other workloads).
    rf.inst.mount().context("remounting ringfs for the idle reference")?;
    let pid = rf.inst.daemon_pid().context("`ringfs status --json` gave no daemon pid")?;
    let idle = measure::settled_rss(pid, cx.sizes.settle);
    rf.inst.unmount()?;
    cx.rss_figures("tree", &format!("{what} + final commit (idle: a fresh mount of the tree)"), r.is_ok().then_some(both), idle, after);
    Ok(())
}
