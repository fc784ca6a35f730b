//! The snapshots section (issue 13): what commit, diff, restore and fork
//! cost on ringfs's default mode (`ringfs mount MP --store DIR --daemon`),
//! beside the same steps on an ext4 directory with git (and `cp -a` for a
//! fork), in the same run:
//!
//! 1. a tree of small files (10 000 in quick and full: 100 per directory):
//!    the first commit, then commits after changing 1, 10, 100 and 500
//!    files spread over it (median of the repetitions; the daemon's own time
//!    `total_ms` holds the target, the command's wall time beside it);
//! 2. a diff of two commits 100 files apart; a restore to the commit 10
//!    commits back (git: `git diff --name-status`, `git reset --hard`);
//! 3. forks of the tree (as many as the repetitions, each into a new
//!    store, mounted once: medians of the fork times and first mounts; the
//!    first fork's new disk; git: `cp -a` of the tree) and a second mount of
//!    the first fork;
//! 4. LayerFS's dedup cases: sixteen 10-byte overwrites spread over a
//!    32 MiB file with a commit after each, and a 10-byte prepend (temp file
//!    + rename): the store's growth (packs + database, not working copies;
//!    git: `.git`'s growth);
//! 5. an agent-style loop on an `npm install express` tree: per iteration a
//!    commit, a tool call editing 5 files and creating one, a diff, and a
//!    restore when the "tool call failed" (every third): total time and
//!    store growth.
//!
//! Figures are [`Figure`]s of the store section's kind (ext4 column = the
//! git/cp side), written as results.json's `snapshots`.

pub mod work;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::noise::{self, LoadSampler};
use crate::store::figures::{Figure, SectionLoad, StoreSection};
use crate::store::measure::{median_p90, mib};
use crate::store::work::small_tree;
use crate::sys::{self, TempDir};
use crate::targets::{Features, Instance};
use work::{Doc, Runner};

/// The sizes of a snapshots section.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizes {
    pub profile: &'static str,
    /// Files in the tree (100 per directory).
    pub tree_files: usize,
    /// Changed-file counts of the commit figures, and repetitions of each.
    pub commit_ks: Vec<usize>,
    pub reps: usize,
    /// The dedup file, MiB (the 32).
    pub dedup_mib: u64,
    /// Iterations of the agent loop (0: not run).
    pub agent_iters: usize,
}

impl Sizes {
    /// "full" and "quick" (the sizes; full repeats more), "tiny" (the test's, seconds).
    pub fn of(profile: &str) -> Option<Sizes> {
        Some(match profile {
            "full" => Sizes { profile: "full", tree_files: 10_000, commit_ks: vec![1, 10, 100, 500], reps: 7, dedup_mib: 32, agent_iters: 100 },
            "quick" => Sizes { profile: "quick", tree_files: 10_000, commit_ks: vec![1, 10, 100, 500], reps: 3, dedup_mib: 32, agent_iters: 30 },
            "tiny" => Sizes { profile: "tiny", tree_files: 300, commit_ks: vec![1, 10], reps: 2, dedup_mib: 2, agent_iters: 0 },
            _ => return None,
        })
    }

    fn record(&self) -> BTreeMap<String, serde_json::Value> {
        let mut m = BTreeMap::new();
        m.insert("tree_files".into(), json!(self.tree_files));
        m.insert("commit_ks".into(), json!(self.commit_ks));
        m.insert("reps".into(), json!(self.reps));
        m.insert("dedup_mib".into(), json!(self.dedup_mib));
        m.insert("agent_iters".into(), json!(self.agent_iters));
        m
    }
}

/// The commit targets: ms after changing k files in a 10 000-file tree.
fn commit_target(k: usize) -> Option<f64> {
    match k {
        1 => Some(5.0),
        10 => Some(10.0),
        100 => Some(30.0),
        500 => Some(150.0),
        _ => None,
    }
}

struct Ctx<'a> {
    sizes: &'a Sizes,
    features: &'a Features,
    base: std::path::PathBuf,
    run: Runner,
    npm_cache: std::path::PathBuf,
    log: &'a dyn Fn(&str),
    figures: Vec<Figure>,
    errors: Vec<String>,
    effective: serde_json::Value,
}

impl Ctx<'_> {
    fn failed(&mut self, what: &str, e: anyhow::Error) -> Result<()> {
        if sys::interrupted() {
            bail!("interrupted");
        }
        (self.log)(&format!("ringfs-bench: snapshots: {what} failed: {e:#}"));
        self.errors.push(format!("{what}: {e:#}"));
        Ok(())
    }

    /// A mounted ringfs instance of the default mode, and an ext4 directory.
    fn pair(&mut self) -> Result<(Instance, Instance)> {
        let mut raw = Instance::new(&crate::store::raw_spec(), self.features, &self.base)?;
        raw.mount()?;
        let mut rf = Instance::new(&crate::store::default_mode(), self.features, &self.base)?;
        rf.mount().context("mounting ringfs")?;
        if self.effective.is_null() {
            self.effective = rf.effective.clone();
        }
        Ok((raw, rf))
    }

    fn commit(&self, mp: &Path, msg: &str) -> Result<Doc> {
        self.run.ringfs(&["commit", &mp.to_string_lossy(), "-m", msg])
    }
}

type Step = fn(&mut Ctx) -> Result<()>;

/// Run the snapshots section with `sizes`; `log` prints a progress line.
pub fn run(sizes: &Sizes, features: &Features, base: &Path, cache: &Path, timeout: Duration, log: &dyn Fn(&str)) -> Result<StoreSection> {
    let started = Instant::now();
    let sampler = LoadSampler::start(noise::LOAD_INTERVAL);
    let before = noise::read_loadavg();
    let tmp = TempDir::new(base, "snapshots.")?;
    let scratch = tmp.path.join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let mut cx = Ctx {
        sizes,
        features,
        base: tmp.path.clone(),
        run: Runner { ringfs: features.binary.clone(), scratch, timeout },
        npm_cache: cache.join("npm"),
        log,
        figures: vec![],
        errors: vec![],
        effective: serde_json::Value::Null,
    };
    let mut steps: Vec<(&str, Step)> = vec![("tree: commit, diff, restore, fork", tree), ("dedup", dedup)];
    if sizes.agent_iters > 0 {
        steps.push(("agent loop", agent_loop));
    }
    for (what, step) in steps {
        sys::check_interrupted()?;
        log(&format!("ringfs-bench: snapshots ({}): {what}", sizes.profile));
        if let Err(e) = step(&mut cx) {
            cx.failed(what, e)?;
        }
    }
    let after = noise::read_loadavg();
    Ok(StoreSection {
        kind: "snapshots".into(),
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

fn med(v: &[f64]) -> Option<f64> {
    median_p90(v).0
}

fn tree(cx: &mut Ctx) -> Result<()> {
    let n = cx.sizes.tree_files;
    let (raw, mut rf) = cx.pair()?;
    let (gd, mp) = (raw.root().join("tree"), rf.root());
    let rt = mp.join("tree");
    small_tree(&gd, n)?;
    small_tree(&rt, n)?;
    cx.run.git(&gd, &["init", "-q"])?;
    let g0 = cx.run.git_commit(&gd, "first")?;
    let r0 = cx.commit(&mp, "first")?;
    cx.figures.push(Figure::new("snap-first-commit", format!("first commit of {n} files (git: add -A + commit)"), "ms", Some(g0), r0.total_ms()));

    // Commits after k changes, repeated.
    let mut round = 0;
    let mut base = (r0.doc["id"].as_str().unwrap_or_default().to_string(), cx.run.git_head(&gd)?);
    for &k in &cx.sizes.commit_ks.clone() {
        let (mut gs, mut rs, mut rw) = (vec![], vec![], vec![]);
        for _ in 0..cx.sizes.reps {
            round += 1;
            work::edit_spread(&gd, n, k, round)?;
            work::edit_spread(&rt, n, k, round)?;
            gs.push(cx.run.git_commit(&gd, &format!("r{round}"))?);
            let d = cx.commit(&mp, &format!("r{round}"))?;
            if d.doc["paths"]["modified"].as_u64() != Some(k as u64) {
                bail!("ringfs commit after changing {k} files reported {}", d.doc["paths"]);
            }
            rs.extend(d.total_ms());
            rw.push(d.wall_ms);
            base = (d.doc["id"].as_str().unwrap_or_default().to_string(), cx.run.git_head(&gd)?);
        }
        let mut f = Figure::new(format!("snap-commit-{k}"), format!("commit after changing {k} of {} (ringfs: daemon time)", fs_core::count(n as u64, "file", "files")), "ms", med(&gs), med(&rs));
        if let (Some(t), 10_000) = (commit_target(k), n) {
            f = f.at_most(t, format!("≤ {t} ms"));
        }
        cx.figures.push(f);
        cx.figures.push(Figure::new(format!("snap-commit-{k}-wall"), format!("commit after changing {}: `ringfs commit` wall", fs_core::count(k as u64, "file", "files")), "ms", med(&gs), med(&rw)));
    }
    // Ten 1-file commits, then a restore to the commit before them (10 files back).
    for i in 0..10 {
        round += 1;
        work::edit_spread(&gd, n, 1, round)?;
        work::edit_spread(&rt, n, 1, round)?;
        cx.run.git_commit(&gd, &format!("one {i}"))?;
        cx.commit(&mp, &format!("one {i}"))?;
    }
    let gr = cx.run.git(&gd, &["reset", "-q", "--hard", &base.1])?.1;
    let rr = cx.run.ringfs(&["restore", &mp.to_string_lossy(), &base.0])?;
    cx.figures.push(
        Figure::new("snap-restore-10", "restore to a commit 10 files back (git: reset --hard)", "ms", Some(gr), Some(rr.total_ms().unwrap_or(rr.wall_ms)))
            .at_most(20.0, "≤ 20 ms"),
    );
    cx.figures.push(Figure::new("snap-restore-10-wall", "restore 10 files back: `ringfs restore` wall", "ms", Some(gr), Some(rr.wall_ms)));
    let back = cx.run.ringfs(&["diff", &mp.to_string_lossy(), &base.0, "live"])?;
    if back.doc["changes"].as_array().map(|a| a.len()) != Some(0) {
        bail!("after ringfs restore the live tree differs from the commit: {}", back.doc["changes"]);
    }
    // A commit 100 files on from the restored one: a diff of two commits 100 files apart.
    round += 1;
    work::edit_spread(&gd, n, 100, round)?;
    work::edit_spread(&rt, n, 100, round)?;
    cx.run.git_commit(&gd, "hundred")?;
    let last = cx.commit(&mp, "hundred")?;
    let (rlast, glast) = (last.doc["id"].as_str().unwrap_or_default().to_string(), cx.run.git_head(&gd)?);
    let (mut gs, mut rs) = (vec![], vec![]);
    for _ in 0..cx.sizes.reps {
        gs.push(cx.run.git(&gd, &["diff", "--name-status", &base.1, &glast])?.1);
        let d = cx.run.ringfs(&["diff", &mp.to_string_lossy(), &base.0, &rlast])?;
        if d.doc["changes"].as_array().map(|a| a.len()) != Some(100) {
            bail!("ringfs diff of two commits 100 files apart listed {} changes", d.doc["changes"].as_array().map_or(0, |a| a.len()));
        }
        rs.push(d.total_ms().unwrap_or(d.wall_ms));
    }
    cx.figures.push(
        Figure::new("snap-diff-100", "diff of two commits 100 files apart (ringfs: daemon time, else wall)", "ms", med(&gs), med(&rs)).at_most(10.0, "≤ 10 ms"),
    );

    // Fork: a new store from the head, mounted elsewhere; cp -a on ext4.
    let copy = raw.root().join("tree-copy");
    let mut c = Command::new("cp");
    c.arg("-a").arg(&gd).arg(&copy);
    let gcp = cx.run.cmd(c)?;
    let g_du = crate::store::measure::du(&copy)?.1;
    let fork_mp = cx.base.join("fork-mnt");
    std::fs::create_dir_all(&fork_mp)?;
    // Several forks of the same head, each into a new store and mounted once
    // (a single first mount is one noisy sample): the medians of their
    // fork_ms and first mounts; the first fork's new disk. du counts a
    // hard-linked pack once per run: the whole section's directory before
    // and after is a fork's new disk.
    let forks = cx.sizes.reps.max(1);
    let (mut fork_ms, mut mount_ms, mut first_disk, mut after) = (vec![], vec![], 0u64, 0u64);
    for i in 0..forks {
        let fork_store = cx.base.join(format!("fork-store-{i}"));
        let before = crate::store::measure::du(&cx.base)?.1;
        let fk = match cx.run.ringfs(&["fork", &mp.to_string_lossy(), "--new-store", &fork_store.to_string_lossy(), "--no-mount"]) {
            Ok(fk) => fk,
            Err(e) => return cx.failed("fork", e).and_then(|_| rf.unmount().map(|_| ())),
        };
        fork_ms.push(fk.doc["fork_ms"].as_f64().unwrap_or(fk.wall_ms));
        if i == 0 {
            first_disk = crate::store::measure::du(&cx.base)?.1.saturating_sub(before);
        }
        match cx.run.ringfs_plain(&["mount", &fork_mp.to_string_lossy(), "--store", &fork_store.to_string_lossy(), "--daemon"]) {
            Ok(ms) => mount_ms.push(ms),
            Err(e) => return cx.failed("mounting the fork", e).and_then(|_| rf.unmount().map(|_| ())),
        }
        let ok = std::fs::read(work_path(&fork_mp.join("tree"), 5)).is_ok();
        let _ = cx.run.ringfs_plain(&["umount", &fork_mp.to_string_lossy()]);
        if !ok {
            bail!("a file of the fork could not be read");
        }
        // The first fork's disk after its mount and a read (D60: no rows
        // written until a change), before the next fork is made.
        if i == 0 {
            after = crate::store::measure::du(&cx.base)?.1.saturating_sub(before);
        }
    }
    cx.figures.push(
        Figure::new("snap-fork", format!("fork of the {n}-file tree, median of {forks} forks (ringfs: its fork_ms; ext4: cp -a)"), "ms", Some(gcp), med(&fork_ms)).at_most(50.0, "≤ 50 ms"),
    );
    cx.figures.push(Figure::new("snap-fork-disk", "fork: new disk (du, the first fork)", "MiB", Some(mib(g_du)), Some(mib(first_disk))).at_most(1.0, "≤ 1 MiB"));
    cx.figures.push(
        Figure::new("snap-fork-mount", format!("first mount of a fork, its tree served from objects, no rows written (D60; `ringfs mount --daemon` wall, median of {forks} forks)"), "ms", None, med(&mount_ms))
            .at_most(15.0, "≤ 15 ms"),
    );
    cx.figures.push(Figure::new("snap-fork-disk-mounted", "fork: new disk after its first mount and a read (du)", "MiB", Some(mib(g_du)), Some(mib(after))));
    // A second mount of the first fork.
    let fork_store = cx.base.join("fork-store-0");
    if let Ok(ms) = cx.run.ringfs_plain(&["mount", &fork_mp.to_string_lossy(), "--store", &fork_store.to_string_lossy(), "--daemon"]) {
        cx.figures.push(Figure::new("snap-fork-remount", "mount of the fork again (`ringfs mount --daemon` wall)", "ms", None, Some(ms)));
        let _ = cx.run.ringfs_plain(&["umount", &fork_mp.to_string_lossy()]);
    }
    rf.unmount()?;
    Ok(())
}

fn work_path(root: &Path, i: usize) -> std::path::PathBuf {
    crate::store::work::tree_path(root, i)
}

fn dedup(cx: &mut Ctx) -> Result<()> {
    let size = cx.sizes.dedup_mib << 20;
    let (raw, mut rf) = cx.pair()?;
    let (gd, mp, store) = (raw.root().join("dedup"), rf.root(), rf.store_dir());
    std::fs::create_dir_all(&gd)?;
    cx.run.git(&gd, &["init", "-q"])?;
    let (gf, rfile) = (gd.join("big.bin"), mp.join("big.bin"));
    work::random_file(&gf, size, 32)?;
    work::random_file(&rfile, size, 32)?;
    cx.run.git_commit(&gd, "base")?;
    cx.commit(&mp, "base")?;
    // Sixteen 10-byte overwrites, a commit after each.
    let (g0, r0) = (work::git_bytes(&gd)?, work::store_bytes(&store)?);
    for i in 0..16 {
        work::overwrite10(&gf, size, i, 16)?;
        work::overwrite10(&rfile, size, i, 16)?;
        cx.run.git_commit(&gd, &format!("edit {i}"))?;
        cx.commit(&mp, &format!("edit {i}"))?;
    }
    let (g1, r1) = (work::git_bytes(&gd)?, work::store_bytes(&store)?);
    let title = format!("sixteen 10-byte overwrites of a {} MiB file, commit after each: store growth (git: .git)", cx.sizes.dedup_mib);
    let mut f = Figure::new("snap-dedup-overwrite", title, "MiB", Some(mib(g1.saturating_sub(g0))), Some(mib(r1.saturating_sub(r0))));
    if cx.sizes.dedup_mib == 32 {
        f = f.at_most(0.25, "≤ 0.25 MiB");
    }
    cx.figures.push(f);
    // The prepend.
    work::prepend10(&gf)?;
    work::prepend10(&rfile)?;
    cx.run.git_commit(&gd, "prepend")?;
    cx.commit(&mp, "prepend")?;
    let (g2, r2) = (work::git_bytes(&gd)?, work::store_bytes(&store)?);
    let mut f = Figure::new("snap-dedup-prepend", "10-byte prepend (temp file + rename), commit: store growth (git: .git)", "MiB", Some(mib(g2.saturating_sub(g1))), Some(mib(r2.saturating_sub(r1))));
    if cx.sizes.dedup_mib == 32 {
        f = f.at_most(0.03, "≤ 0.03 MiB");
    }
    cx.figures.push(f);
    rf.unmount()?;
    Ok(())
}

fn npm_express(cx: &Ctx, dir: &Path) -> Result<f64> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("package.json"), "{\"name\":\"agent-loop\",\"version\":\"1.0.0\",\"private\":true}\n")?;
    let mut c = Command::new("npm");
    c.current_dir(dir).args(["install", "--no-audit", "--no-fund", "--prefer-offline", "express"]).env("npm_config_cache", &cx.npm_cache);
    cx.run.cmd(c)
}

fn agent_loop(cx: &mut Ctx) -> Result<()> {
    let iters = cx.sizes.agent_iters;
    let (raw, mut rf) = cx.pair()?;
    let (gd, mp, store) = (raw.root().join("agent"), rf.root(), rf.store_dir());
    npm_express(cx, &gd)?;
    npm_express(cx, &mp.join("agent"))?;
    let files = work::files_of(&gd)?;
    cx.run.git(&gd, &["init", "-q"])?;
    cx.run.git_commit(&gd, "installed")?;
    cx.commit(&mp, "installed")?;
    let (g0, r0) = (work::git_bytes(&gd)?, work::store_bytes(&store)?);
    let rt = mp.join("agent");
    let mps = mp.to_string_lossy().to_string();
    // git on ext4.
    let t = Instant::now();
    for it in 0..iters {
        cx.run.git_commit(&gd, &format!("before call {it}"))?;
        work::agent_edit(&gd, &files, it)?;
        cx.run.git(&gd, &["add", "-A"])?;
        cx.run.git(&gd, &["diff", "--cached", "--name-status"])?;
        if it % 3 == 2 {
            cx.run.git(&gd, &["reset", "-q", "--hard", "HEAD"])?;
        }
    }
    let g_ms = t.elapsed().as_secs_f64() * 1e3;
    // ringfs.
    let t = Instant::now();
    let mut restores = 0;
    for it in 0..iters {
        let c = cx.commit(&mp, &format!("before call {it}"))?;
        let id = c.doc["id"].as_str().unwrap_or_default().to_string();
        work::agent_edit(&rt, &files, it)?;
        let d = cx.run.ringfs(&["diff", &mps])?;
        if d.doc["changes"].as_array().map_or(0, |a| a.len()) < 6 {
            bail!("the agent loop's diff after a tool call listed {} changes (6 expected)", d.doc["changes"]);
        }
        if it % 3 == 2 {
            cx.run.ringfs(&["restore", &mps, &id])?;
            restores += 1;
        }
    }
    let r_ms = t.elapsed().as_secs_f64() * 1e3;
    let (g1, r1) = (work::git_bytes(&gd)?, work::store_bytes(&store)?);
    let what = format!("{iters} × (commit, edit 5 files + create 1, diff, restore every 3rd: {restores}) on an npm express tree of {} files", files.len());
    cx.figures.push(Figure::new("snap-agent-loop", format!("agent loop: {what} (git on ext4)"), "s", Some(g_ms / 1e3), Some(r_ms / 1e3)));
    cx.figures.push(Figure::new("snap-agent-growth", "agent loop: store growth (git: .git)", "MiB", Some(mib(g1.saturating_sub(g0))), Some(mib(r1.saturating_sub(r0)))));
    rf.unmount()?;
    Ok(())
}
