//! `ringfs-store-bench`: the store half of issue 6's "Store and restore", through
//! fs-core without FUSE: 2000 files created, stat cold, stat warm, readdir ×50,
//! for the in-memory store and the on-disk store. (Restore after a daemon restart
//! is measured through the real binary by `ringfs-bench --restore`.)
//!
//! "Cold" for the on-disk store: after a clean shutdown and reopen of the store
//! (the open is timed separately); for the in-memory store, which cannot be
//! reopened, the first pass after the creates. Prints a markdown table; `--json F`
//! also writes every sample.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, Result};
use clap::Parser;
use fs_core::{Caller, Config, Fs, StoreLocation};
use serde_json::json;

#[derive(Debug, Parser)]
#[command(name = "ringfs-store-bench", version)]
struct Cli {
    /// Files to create.
    #[arg(long, default_value_t = 2000)]
    files: usize,
    /// readdir passes over the directory.
    #[arg(long, default_value_t = 50)]
    readdirs: usize,
    /// Repetitions (median [min–max] reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Where on-disk stores go (a temp dir below it, removed at the end).
    #[arg(long, default_value = "/var/tmp")]
    base: PathBuf,
    /// Write every sample as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

const ME: Caller = Caller { uid: 0, gid: 0, pid: 1, umask: 0 };

fn name(i: usize) -> OsString {
    OsString::from(format!("f{i}"))
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn e(x: impl std::fmt::Debug) -> anyhow::Error {
    anyhow!("{x:?}")
}

fn stat_all(fs: &Fs, n: usize) -> Result<()> {
    for i in 0..n {
        let a = fs.lookup(&ME, 1, &name(i)).map_err(e)?;
        fs.getattr(a.ino, None).map_err(e)?;
        fs.forget(a.ino, 1);
    }
    Ok(())
}

fn readdir_all(fs: &Fs, n: usize) -> Result<()> {
    let fh = fs.opendir(&ME, 1).map_err(e)?;
    let mut off = 0;
    let mut count = 0;
    loop {
        let mut got = 0;
        fs.readdir(1, fh, off, &mut |d| {
            off = d.offset;
            got += 1;
            true
        })
        .map_err(e)?;
        count += got;
        if got == 0 {
            break;
        }
    }
    fs.releasedir(fh);
    if count < n {
        return Err(anyhow!("readdir saw {count} entries, want at least {n}"));
    }
    Ok(())
}

fn one(disk: bool, dir: &std::path::Path, cli: &Cli) -> Result<serde_json::Value> {
    let loc = if disk { StoreLocation::Dir(dir.to_path_buf()) } else { StoreLocation::Memory };
    let mut fs = Fs::open_store(Config::new(loc.clone())).map_err(e)?;
    let t = Instant::now();
    for i in 0..cli.files {
        let (a, fh) = fs.create(&ME, 1, &name(i), libc::S_IFREG | 0o644, libc::O_WRONLY as u32).map_err(e)?;
        fs.write(fh, 0, format!("{i}\n").as_bytes()).map_err(e)?;
        fs.release(fh).map_err(e)?;
        fs.forget(a.ino, 1);
    }
    let create_ms = ms(t);
    let mut open_ms = None;
    if disk {
        fs.shutdown().map_err(e)?;
        drop(fs);
        let t = Instant::now();
        fs = Fs::open_store(Config::new(loc)).map_err(e)?;
        open_ms = Some(ms(t));
    }
    let t = Instant::now();
    stat_all(&fs, cli.files)?;
    let cold = ms(t);
    let t = Instant::now();
    stat_all(&fs, cli.files)?;
    let warm = ms(t);
    let t = Instant::now();
    for _ in 0..cli.readdirs {
        readdir_all(&fs, cli.files)?;
    }
    let readdir = ms(t);
    fs.shutdown().map_err(e)?;
    Ok(json!({"store": if disk {"disk"} else {"memory"}, "create_ms": create_ms, "reopen_ms": open_ms,
              "stat_cold_ms": cold, "stat_warm_ms": warm, "readdir_ms": readdir}))
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let base = bench::sys::TempDir::new(&cli.base, "ringfs-store-bench.")?;
    let mut samples = vec![];
    for rep in 0..cli.reps {
        // Alternate which store goes first.
        let order = if rep % 2 == 0 { [false, true] } else { [true, false] };
        for disk in order {
            let dir = base.path.join(format!("store-{rep}"));
            let mut s = one(disk, &dir, &cli)?;
            s["rep"] = json!(rep);
            eprintln!("{s}");
            samples.push(s);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let fields = [("create_ms", "create"), ("reopen_ms", "reopen (cold open)"), ("stat_cold_ms", "stat cold"), ("stat_warm_ms", "stat warm"), ("readdir_ms", "readdir ×")];
    println!("fs-core store benchmark (no FUSE): {} files, readdir ×{}, {} reps; median [min–max] ms\n", cli.files, cli.readdirs, cli.reps);
    println!("| operation | in-memory store | on-disk store |\n|---|---:|---:|");
    for (k, label) in fields {
        let label = if k == "readdir_ms" { format!("{label}{}", cli.readdirs) } else { label.to_string() };
        let mut cells = vec![];
        for st in ["memory", "disk"] {
            let mut v: Vec<f64> = samples.iter().filter(|s| s["store"] == st).filter_map(|s| s[k].as_f64()).collect();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            cells.push(if v.is_empty() {
                "n/a".to_string()
            } else {
                format!("{:.1} [{:.1}–{:.1}]", v[v.len() / 2], v[0], v[v.len() - 1])
            });
        }
        println!("| {label} | {} | {} |", cells[0], cells[1]);
    }
    if let Some(p) = &cli.json {
        std::fs::write(p, serde_json::to_string_pretty(&json!({"files": cli.files, "readdirs": cli.readdirs, "samples": samples}))?)?;
    }
    Ok(())
}
