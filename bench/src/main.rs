//! `ringfs-bench`: the fs-bench reproduction. See `scripts/bench.sh`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use bench::{output, run, store, sys, targets};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Profile {
    /// 14 rows, REPS=3, WARMUP=1, every available mode, one `npm install express`.
    Quick,
    /// 14 rows, REPS=5, WARMUP=1, cells C01–C12, npm express and toolchain installs.
    Full,
    /// CI: REPS=1, WARMUP=0, rows 1 and 6, raw disk and ringfs synced (< 1 minute).
    Smoke,
}

const AFTER_HELP: &str = "\
Progress: `[k/N] row · target · ETA` on one updating line when stderr is a terminal;
otherwise one line per sample group (one row of one repetition on every target).

Output (--out): summary.txt (the summary, also printed on stdout),
results.md (the full table), results.json (every sample, the load averages, the
noise judgement), ratios.svg/.png (the main modes) and ratios-all.svg/.png (every
mode): time relative to raw disk on a log axis with min–max whiskers, rows grouped
by kind.

Noise: the load average is recorded before, during (every 10 s) and after the run.
A row is flagged (its ratios untrustworthy) when its raw-disk spread (max/min) is
over ×1.5, or when 2 or more modes' ratio ranges (mode min ÷ raw max to mode max ÷
raw min) reach below ×0.67 and above ×1.5. The summary says
\"rerun on a quiet machine\" when more than 3 rows are flagged or the 1-minute
load average before or (median) during the run exceeded the number of cores.

Store section (issue 12; --store-section, quick and full profiles): ringfs's
default mode beside a plain directory on the host disk: 4 KiB write + fsync by
file size, 4 concurrent SQLite writers (WAL), the daemon's VmHWM and VmRSS
(sampled every 100 ms) for a mixed 8-client load, a big file and a small-file
tree, disk use of the store, and `ringfs umount` after the tree; each figure
with its target and PASS/FAIL.

Snapshots section (issue 13; --snap-section, quick and full profiles): ringfs's
commit after 1/10/100/500 changed files of a 10 000-file tree, diff of two commits
100 files apart, restore 10 files back, fork (time, disk, mount), the dedup cases
(sixteen 10-byte overwrites of a 32 MiB file; a 10-byte prepend) and an agent loop
on an npm express tree, beside the same steps with git (and cp -a) on ext4.

Sync section (issue 14; --sync-section, full profile by default): against one Garage
node on 127.0.0.1 when `garage` is on PATH (else file://, said in the results;
--sync-remote): bytes and objects pushed after `npm install express` (beside
node_modules local-only), bytes pushed for sixteen 10-byte edits of a 32 MiB file and
a 10-byte prepend, the sync thread's reconciliation after a restart with --remote on a
3 000-file workspace, clone of 3 000 files / 100 MiB until `ls -R` and until all read
(beside a raw object_store list + GET of the same keys; three turns each, in alternation,
medians), and push throughput of a
1 GiB change (quick: 256 MiB) beside raw object_store PUTs of the same bytes.

`ringfs-bench report --from results.json --out DIR` writes the report of an
earlier run without running anything.";

/// Run the fs-bench reproduction against the real ringfs binary, raw disk, tmpfs
/// and peers; print a summary and write results.md, results.json,
/// summary.txt and the figures ratios.svg/.png and ratios-all.svg/.png.
#[derive(Debug, Parser)]
#[command(name = "ringfs-bench", version, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[arg(long, value_enum, default_value = "quick")]
    profile: Profile,
    /// Measured repetitions (default by profile; env REPS).
    #[arg(long, env = "REPS")]
    reps: Option<usize>,
    /// Discarded warm-up repetitions (default by profile; env WARMUP).
    #[arg(long, env = "WARMUP")]
    warmup: Option<usize>,
    /// Rows to run, e.g. 1,2,6 (default by profile).
    #[arg(long, value_delimiter = ',')]
    rows: Option<Vec<u32>>,
    /// Target ids to run (default by profile; `--list-targets` shows them).
    #[arg(long, value_delimiter = ',')]
    targets: Option<Vec<String>>,
    /// Run cells C01–C12 (default: only in the full profile).
    #[arg(long)]
    cells: Option<bool>,
    /// npm workloads: express, toolchain (default by profile; "none" for none).
    #[arg(long, value_delimiter = ',')]
    npm: Option<Vec<String>>,
    /// Restore after restart at these file counts, e.g. 500,3000 (default: full profile only; "0" for none).
    #[arg(long, value_delimiter = ',')]
    restore: Option<Vec<usize>>,
    /// The store section (issue 12): none, tiny, quick or full (default: the profile's; none for smoke).
    #[arg(long, value_parser = ["none", "tiny", "quick", "full"])]
    store_section: Option<String>,
    /// The snapshots section (issue 13): none, tiny, quick or full (default: the profile's; none for smoke).
    #[arg(long, value_parser = ["none", "tiny", "quick", "full"])]
    snap_section: Option<String>,
    /// The sync section (issue 14): none, tiny, quick or full (default: full for --profile full, else none).
    #[arg(long, value_parser = ["none", "tiny", "quick", "full"])]
    sync_section: Option<String>,
    /// The sync section's server: auto (Garage when `garage` is on PATH, else file://), garage or file.
    #[arg(long, value_parser = ["auto", "garage", "file"], default_value = "auto")]
    sync_remote: String,
    /// Only these steps of the sync section, comma-separated (default: all): npm, dedup, restart, clone, throughput.
    #[arg(long, value_delimiter = ',', value_parser = bench::sync::STEPS)]
    sync_steps: Vec<String>,
    /// Samples per npm workload and target (default: 1 quick, REPS full).
    #[arg(long)]
    npm_reps: Option<usize>,
    /// The ringfs binary (env RINGFS_BIN; default: target/release/ringfs of this checkout).
    #[arg(long, env = "RINGFS_BIN")]
    ringfs: Option<PathBuf>,
    /// scripts/fsbench of this checkout (env FSBENCH_SCRIPTS).
    #[arg(long, env = "FSBENCH_SCRIPTS")]
    scripts: Option<PathBuf>,
    /// Persistent cache: the clone fixture and the npm cache (env FSBENCH_CACHE).
    #[arg(long, env = "FSBENCH_CACHE", default_value = "/var/tmp/ringfs-bench-cache")]
    cache: PathBuf,
    /// Where the per-run temp directory goes (raw disk target, stores, mountpoints).
    #[arg(long, env = "FSBENCH_BASE", default_value = "/var/tmp")]
    base: PathBuf,
    /// Output directory for summary.txt, results.md, results.json and the figures.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Random seed for the target order (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Per-phase timeout in seconds.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Date printed in the report (default: today, UTC).
    #[arg(long)]
    date: Option<String>,
    /// Skip scripts/fsbench/setup.sh (clone fixture, npm cache warm-up).
    #[arg(long)]
    no_setup: bool,
    /// Print the targets with their availability and exit.
    #[arg(long)]
    list_targets: bool,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Write the report (summary.txt, results.md, ratios.svg/.png, ratios-all.svg/.png) of
    /// an earlier run from its results.json, without running anything; prints the summary.
    Report {
        /// The results.json of the run.
        #[arg(long)]
        from: PathBuf,
        /// Output directory (results.json itself is not rewritten).
        #[arg(long, default_value = "bench-out")]
        out: PathBuf,
    },
}

/// Write the report of `results` into `out`, print the summary on stdout.
fn report_to(results: &run::Results, out: &Path, with_json: bool) -> Result<()> {
    let w = output::write(results, out, with_json)?;
    print!("{}", w.summary);
    for warn in &w.warnings {
        eprintln!("ringfs-bench: {warn}");
    }
    let names: Vec<String> = w.files.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
    eprintln!("ringfs-bench: wrote {} in {}", names.join(", "), out.display());
    Ok(())
}

fn repo_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn today() -> String {
    let out = std::process::Command::new("date").args(["-u", "+%Y-%m-%d"]).output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("ringfs-bench: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    if let Some(Cmd::Report { from, out }) = &cli.command {
        let results = output::read_results(from)?;
        return report_to(&results, out, false);
    }
    sys::install_signal_handlers()?;
    let ringfs = cli.ringfs.clone().unwrap_or_else(|| repo_dir().join("target/release/ringfs"));
    if !ringfs.is_file() {
        bail!("no ringfs binary at {} (build it: cargo build --release -p ringfs, or pass --ringfs PATH)", ringfs.display());
    }
    let ringfs = ringfs.canonicalize()?;
    let scripts = cli.scripts.clone().unwrap_or_else(|| repo_dir().join("scripts/fsbench")).canonicalize().context("scripts/fsbench")?;
    if cli.list_targets {
        let f = targets::Features::detect(&ringfs)?;
        for t in targets::all_targets() {
            match t.unavailable(&f) {
                None => println!("{:<22} {:<36} available {}", t.id, t.label, t.ringfs_args(&f).unwrap_or_default().join(" ")),
                Some(why) => println!("{:<22} {:<36} skipped: {why}", t.id, t.label),
            }
        }
        return Ok(());
    }
    let (reps, warmup, rows, npm, cells, prof) = match cli.profile {
        Profile::Quick => (3, 1, (1..=14).collect::<Vec<u32>>(), vec!["express".to_string()], false, "quick"),
        Profile::Full => (5, 1, (1..=14).collect(), vec!["express".into(), "toolchain".into()], true, "full"),
        Profile::Smoke => (1, 0, vec![1, 6], vec![], false, "smoke"),
    };
    let reps = cli.reps.unwrap_or(reps);
    let targets = cli.targets.clone().or_else(|| {
        (cli.profile == Profile::Smoke).then(|| vec!["raw".to_string(), "rf-dev-synced-ptoff".to_string(), "rf-dev-synced".to_string()])
    });
    let npm: Vec<String> = cli.npm.clone().unwrap_or(npm).into_iter().filter(|n| n != "none" && !n.is_empty()).collect();
    let cache = {
        std::fs::create_dir_all(&cli.cache)?;
        cli.cache.canonicalize()?
    };
    let cfg = run::Config {
        profile: prof.to_string(),
        reps,
        warmup: cli.warmup.unwrap_or(warmup),
        rows: cli.rows.clone().unwrap_or(rows),
        targets,
        ringfs,
        scripts: scripts.clone(),
        cache: cache.clone(),
        base: cli.base.clone(),
        cells: cli.cells.unwrap_or(cells),
        npm_reps: cli.npm_reps.unwrap_or(if cli.profile == Profile::Full { reps } else { 1 }),
        npm: npm.clone(),
        restore: cli
            .restore
            .clone()
            .unwrap_or(if cli.profile == Profile::Full { vec![500, 3000] } else { vec![] })
            .into_iter()
            .filter(|n| *n > 0)
            .collect(),
        seed: cli.seed.unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64),
        timeout: Duration::from_secs(cli.timeout),
        date: cli.date.clone().unwrap_or_else(today),
        store: store::Sizes::of(cli.store_section.as_deref().unwrap_or(prof)),
        snapshots: bench::snapshots::Sizes::of(cli.snap_section.as_deref().unwrap_or(prof)),
        sync: bench::sync::Sizes::of(cli.sync_section.as_deref().unwrap_or(if cli.profile == Profile::Full { "full" } else { "none" }))
            .map(|s| bench::sync::Sizes { steps: cli.sync_steps.clone(), ..s }),
        sync_remote: cli.sync_remote.clone(),
    };
    if !cli.no_setup {
        let needs_setup = cfg.rows.contains(&13) || cfg.rows.contains(&14) || !npm.is_empty();
        if needs_setup {
            let mut c = std::process::Command::new("bash");
            c.arg(scripts.join("setup.sh")).arg(&cache);
            if !npm.is_empty() {
                c.arg("--npm").arg(npm.join(","));
            }
            let st = c.status().context("running scripts/fsbench/setup.sh")?;
            if !st.success() {
                eprintln!("ringfs-bench: setup.sh failed; rows 13/14 and npm installs may FAIL");
            }
        }
    }
    // Only the special smoke default: the smoke's second mode is whichever synced mode exists.
    let mut cfg = cfg;
    if cli.profile == Profile::Smoke && cli.targets.is_none() {
        let f = targets::Features::detect(&cfg.ringfs)?;
        let pick = if targets::all_targets().iter().any(|t| t.id == "rf-dev-synced" && t.unavailable(&f).is_none()) {
            "rf-dev-synced"
        } else {
            "rf-dev-synced-ptoff"
        };
        cfg.targets = Some(vec!["raw".into(), pick.into()]);
    }
    eprintln!(
        "ringfs-bench: {} run, REPS={} WARMUP={}, rows {:?}, seed {}, store section {}, snapshots section {}, sync section {}",
        cfg.profile,
        cfg.reps,
        cfg.warmup,
        cfg.rows,
        cfg.seed,
        cfg.store.as_ref().map_or("none", |s| s.profile),
        cfg.snapshots.as_ref().map_or("none", |s| s.profile),
        cfg.sync.as_ref().map_or("none", |s| s.profile)
    );
    // Fail before the run, not after it, if the output directory cannot be made.
    std::fs::create_dir_all(&cli.out).with_context(|| format!("creating the output directory {}", cli.out.display()))?;
    let results = run::run(&cfg)?;
    report_to(&results, &cli.out, true)?;
    if let Some(section) = results.meta["interrupted_in"].as_str() {
        // Partial results are written, but an interrupted run is not a success.
        anyhow::bail!("interrupted during {section}; the results above are partial");
    }
    Ok(())
}
