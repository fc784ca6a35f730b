//! The sync section's workloads (see the module doc of `sync`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::raw::Raw;
use super::{Ctx, Doc};
use crate::snapshots::work::{files_of, overwrite10, prepend10, random_file};
use crate::store::figures::{Figure, Target};
use crate::store::measure::mib;
use crate::store::work::small_tree;
use crate::sys;

/// `ringfs remote add MP origin URL`.
fn add_remote(cx: &Ctx, mp: &str, case: &str) -> Result<()> {
    cx.rf(&["remote", "add", mp, "origin", &cx.url(case)])?;
    Ok(())
}

/// `ringfs commit MP` then `ringfs push MP --json`: the push's document.
fn commit_push(cx: &Ctx, mp: &str, msg: &str) -> Result<Doc> {
    cx.rf(&["commit", mp, "-m", msg])?;
    cx.rf(&["push", mp])
}

fn n(d: &Value, k: &str) -> u64 {
    d[k].as_u64().unwrap_or(0)
}

/// npm install express into a synced path, then commit + push; beside it
/// the same with `node_modules` local-only.
pub fn npm(cx: &mut Ctx) -> Result<()> {
    if sys::which("npm").is_none() {
        bail!("skipped: npm is not on PATH");
    }
    let mut sent = vec![];
    for (name, extra) in [
        ("npm-synced", &[][..]),
        ("npm-local", &["--ignore", "node_modules"][..]),
    ] {
        let mut ws = cx.ws(name)?;
        ws.mount(extra)?;
        let mp = ws.mps();
        add_remote(cx, &mp, name)?;
        let app = ws.mp.join("app");
        std::fs::create_dir_all(&app)?;
        std::fs::write(
            app.join("package.json"),
            "{\"name\":\"sync-bench\",\"version\":\"1.0.0\",\"private\":true}\n",
        )?;
        commit_push(cx, &mp, "package.json")?;
        let mut c = Command::new("npm");
        c.current_dir(&app)
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--prefer-offline",
                "express",
            ])
            .env("npm_config_cache", &cx.npm_cache);
        sys::run_ok(c, &cx.scratch, cx.timeout).context("npm install express")?;
        let d = commit_push(cx, &mp, "npm install express")?;
        sent.push((
            mib(n(&d.doc, "bytes_sent")),
            (n(&d.doc, "objects_sent") + n(&d.doc, "chunks_sent")) as f64,
        ));
        ws.umount()?;
    }
    let (s, l) = (sent[0], sent[1]);
    cx.figures.push(Figure::new(
        "sync-npm-bytes",
        "npm install express, push: MiB sent (ref: node_modules local-only)",
        "MiB",
        Some(l.0),
        Some(s.0),
    ));
    cx.figures.push(Figure::new(
        "sync-npm-objects",
        "npm install express, push: objects + chunks sent (ref: local-only)",
        "count",
        Some(l.1),
        Some(s.1),
    ));
    Ok(())
}

/// Sixteen 10-byte overwrites of the dedup file with a commit + push after
/// each, then a 10-byte prepend: bytes sent.
pub fn dedup(cx: &mut Ctx) -> Result<()> {
    let size = cx.sizes.dedup_mib << 20;
    let mut ws = cx.ws("dedup")?;
    ws.mount(&[])?;
    let mp = ws.mps();
    add_remote(cx, &mp, "dedup")?;
    let f = ws.mp.join("big.bin");
    random_file(&f, size, 32)?;
    commit_push(cx, &mp, "base")?;
    let mut bytes = 0;
    for i in 0..16 {
        overwrite10(&f, size, i, 16)?;
        bytes += n(
            &commit_push(cx, &mp, &format!("edit {i}"))?.doc,
            "bytes_sent",
        );
    }
    let m = cx.sizes.dedup_mib;
    let mut fig = Figure::new(
        "sync-dedup-overwrite",
        format!("sixteen 10-byte edits of a {m} MiB file, commit + push each: MiB sent"),
        "MiB",
        None,
        Some(mib(bytes)),
    );
    if m == 32 {
        fig = fig.at_most(0.25, "≤ 0.25 MiB");
    }
    cx.figures.push(fig);
    prepend10(&f)?;
    let p = n(&commit_push(cx, &mp, "prepend")?.doc, "bytes_sent");
    let mut fig = Figure::new(
        "sync-dedup-prepend",
        "10-byte prepend (temp file + rename), commit + push: MiB sent",
        "MiB",
        None,
        Some(mib(p)),
    );
    if m == 32 {
        fig = fig.at_most(0.03, "≤ 0.03 MiB");
    }
    cx.figures.push(fig);
    ws.umount()?;
    Ok(())
}

/// A pushed workspace mounted again with `--remote`: how long the sync
/// thread takes to know nothing is pending, and what it resent.
pub fn restart(cx: &mut Ctx) -> Result<()> {
    let files = cx.sizes.restart_files;
    let mut ws = cx.ws("restart")?;
    ws.mount(&[])?;
    let mp = ws.mps();
    add_remote(cx, &mp, "restart")?;
    small_tree(&ws.mp.join("tree"), files)?;
    commit_push(cx, &mp, "tree")?;
    ws.umount()?;
    let mount_ms = ws.mount(&["--remote", "origin"])?;
    let t0 = Instant::now();
    let startup = loop {
        let st = cx.rf(&["remote", "status", &mp])?;
        let s = &st.doc["remotes"][0]["sync"]["startup"];
        if s.is_object() {
            break s.clone();
        }
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("the sync thread reported no startup reconciliation within 30 s (remote status: {})", st.doc);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ms = startup["ms"].as_f64();
    let resent = startup["objects_sent"]
        .as_u64()
        .zip(startup["chunks_sent"].as_u64())
        .map(|(a, b)| (a + b) as f64);
    let mut fig = Figure::new(
        "sync-restart-reconcile",
        format!("restart with --remote, {files} files pushed: reconciliation (daemon)"),
        "ms",
        None,
        ms,
    );
    if files == 3000 {
        fig = fig.at_most(10.0, "≤ 10 ms");
    }
    cx.figures.push(fig);
    cx.figures.push(
        Figure::new(
            "sync-restart-resent",
            "restart with --remote: objects + chunks resent",
            "count",
            None,
            resent,
        )
        .equals(0.0, "= 0"),
    );
    cx.figures.push(Figure::new(
        "sync-restart-mount",
        "restart: `ringfs mount --remote` wall",
        "ms",
        None,
        Some(mount_ms),
    ));
    ws.umount()?;
    Ok(())
}

/// Writes `files` files of `total / files` pseudo-random bytes, 100 per directory.
fn random_tree(root: &Path, files: usize, total: u64) -> Result<u64> {
    let each = (total / files as u64) as usize;
    let mut rng = fastrand::Rng::with_seed(7);
    let mut buf = vec![0u8; each];
    for i in 0..files {
        let d = root.join(format!("d{}", i / 100));
        if i % 100 == 0 {
            sys::check_interrupted()?;
            std::fs::create_dir_all(&d)?;
        }
        rng.fill(&mut buf);
        std::fs::write(d.join(format!("f{i}")), &buf)?;
    }
    Ok(each as u64 * files as u64)
}

/// Every file under `root` read back: (files, bytes).
fn read_all(root: &Path) -> Result<(u64, u64)> {
    let files = files_of(root)?;
    let mut bytes = 0;
    for f in &files {
        let p = root.join(f);
        bytes += std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?.len() as u64;
    }
    Ok((files.len() as u64, bytes))
}

/// Samples of the clone cell, each side (odd: the median is a sample).
const CLONE_REPS: usize = 3;

/// A pushed 3 000-file / 100 MiB workspace cloned into a fresh store and
/// mounted: until `ls -R` answers, until every file was read back; beside a
/// raw download of the same keys ([`CLONE_REPS`] turns each, medians).
pub fn clone(cx: &mut Ctx) -> Result<()> {
    let (files, total) = (cx.sizes.clone_files, cx.sizes.clone_mib << 20);
    let mut ws = cx.ws("clone-src")?;
    ws.mount(&[])?;
    let mp = ws.mps();
    add_remote(cx, &mp, "clone")?;
    let bytes = random_tree(&ws.mp.join("tree"), files, total)?;
    commit_push(cx, &mp, "tree")?;
    ws.umount()?;
    // The limit and the clone take turns, CLONE_REPS times each (the raw
    // download first: list + GET every key of the remote's prefix), into
    // fresh directories; each figure is the median of its samples (Garage on
    // a loaded two-core machine spreads a single download ×2).
    let raw = Raw::open(&cx.remote, "clone")?;
    let (mut raws, mut cmds, mut lss, mut reads) = (vec![], vec![], vec![], vec![]);
    let (mut raw_n, mut raw_bytes) = (0, 0);
    for rep in 0..CLONE_REPS {
        sys::check_interrupted()?;
        let (ms, n, b) = raw.get_all(&cx.base.join("raw-download"))?;
        let _ = std::fs::remove_dir_all(cx.base.join("raw-download"));
        (raw_n, raw_bytes) = (n, b);
        raws.push(ms);
        let mut dst = cx.ws(&format!("clone-dst{rep}"))?;
        let c = cx.rf(&[
            "clone",
            &cx.url("clone"),
            "--store",
            &dst.store.to_string_lossy(),
        ])?;
        let t = Instant::now();
        dst.mount(&[])?;
        let mut ls = Command::new("ls");
        ls.arg("-R").arg(&dst.mp);
        sys::run_ok(ls, &cx.scratch, cx.timeout)?;
        lss.push(c.wall_ms + t.elapsed().as_secs_f64() * 1e3);
        let (n_read, b_read) = read_all(&dst.mp.join("tree"))?;
        reads.push(c.wall_ms + t.elapsed().as_secs_f64() * 1e3);
        cmds.push(c.wall_ms);
        dst.umount()?;
        if (n_read, b_read) != (files as u64, bytes) {
            bail!("the clone read back {n_read} files / {b_read} bytes, not {files} / {bytes}");
        }
        let _ = std::fs::remove_dir_all(cx.base.join(format!("clone-dst{rep}")));
    }
    let spread = |v: &[f64]| {
        let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = v.iter().cloned().fold(0.0, f64::max);
        format!("{lo:.0}–{hi:.0}")
    };
    let med = |v: &[f64]| crate::report::median(&mut v.to_vec()).unwrap_or(0.0);
    let reps = format!("median of {CLONE_REPS}, taking turns with the raw download");
    let (raw_ms, to_ls, to_read) = (med(&raws), med(&lss), med(&reads));
    let what = format!("{files} files / {} MiB", cx.sizes.clone_mib);
    let limit = |f: Figure| {
        let pass = f.ringfs.map(|v| v <= raw_ms);
        Figure {
            target: Some(Target {
                text: "≤ raw download".into(),
                pass,
            }),
            ..f
        }
    };
    cx.figures.push(Figure::new(
        "sync-raw-download",
        format!(
            "raw download of the clone's remote: list + GET {raw_n} keys ({:.1} MiB, {} at a time; median of {CLONE_REPS}, taking turns with the clone: {} ms)",
            mib(raw_bytes),
            super::raw::GET_CONCURRENCY,
            spread(&raws)
        ),
        "ms",
        Some(raw_ms),
        None,
    ));
    cx.figures.push(Figure::new(
        "sync-clone-cmd",
        format!("`ringfs clone` of {what} (ref: raw download; {}: {} ms)", reps, spread(&cmds)),
        "ms",
        Some(raw_ms),
        Some(med(&cmds)),
    ));
    cx.figures.push(limit(Figure::new(
        "sync-clone-ls",
        format!("clone + mount until `ls -R` answers (ref: raw download; {reps}: {} ms)", spread(&lss)),
        "ms",
        Some(raw_ms),
        Some(to_ls),
    )));
    cx.figures.push(limit(Figure::new(
        "sync-clone-read",
        format!("clone + mount until every file was read back (ref: raw; {reps}: {} ms)", spread(&reads)),
        "ms",
        Some(raw_ms),
        Some(to_read),
    )));
    Ok(())
}

/// File `i` of the throughput change: `mib` MiB of bytes from seed `i`.
fn change_bytes(i: u64, mib: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(1000 + i);
    let mut b = vec![0u8; (mib << 20) as usize];
    rng.fill(&mut b);
    b
}

/// A push of `push_mib` MiB of new files (64 MiB each) beside raw PUTs of the same bytes.
pub fn throughput(cx: &mut Ctx) -> Result<()> {
    let total = cx.sizes.push_mib;
    let each = total.min(64);
    let count = total / each;
    let mut ws = cx.ws("throughput")?;
    ws.mount(&[])?;
    let mp = ws.mps();
    add_remote(cx, &mp, "throughput")?;
    std::fs::write(ws.mp.join("README"), "throughput\n")?;
    commit_push(cx, &mp, "base")?;
    for i in 0..count {
        sys::check_interrupted()?;
        std::fs::write(ws.mp.join(format!("big{i}.bin")), change_bytes(i, each))?;
    }
    cx.rf(&["commit", &mp, "-m", "change"])?;
    let d = cx.rf(&["push", &mp])?;
    ws.umount()?;
    let sent = n(&d.doc, "bytes_sent");
    // The same bytes, one PUT per file, generated before each PUT (untimed).
    let raw = Raw::open(&cx.remote, "raw-put")?;
    let mut raw_ms = 0.0;
    for i in 0..count {
        sys::check_interrupted()?;
        raw_ms += raw.put_all(vec![(format!("big{i}.bin"), change_bytes(i, each))])?;
    }
    let mb = (count * each) as f64;
    let (rate, raw_rate) = (mb / (d.wall_ms / 1e3), mb / (raw_ms / 1e3));
    let mut fig = Figure::new(
        "sync-push-throughput",
        format!("push of a {total} MiB change ({count} × {each} MiB files): MiB/s (ref: raw PUT)"),
        "MiB/s",
        Some(raw_rate),
        Some(rate),
    );
    let pass = Some(rate >= 0.8 * raw_rate);
    fig.target = Some(Target {
        text: "≥ 80 % of raw PUT".into(),
        pass,
    });
    cx.figures.push(fig);
    cx.figures.push(Figure::new(
        "sync-push-wall",
        format!(
            "push of the {total} MiB change: wall (ref: raw PUTs), {:.1} MiB sent",
            mib(sent)
        ),
        "s",
        Some(raw_ms / 1e3),
        Some(d.wall_ms / 1e3),
    ));
    Ok(())
}
