//! `ringfs-exec-bench`: the `exec` section of issue 15 — the fixed overhead
//! of `ringfs exec` (the receipt's wall minus the command's own time,
//! median over `--calls` calls of `true`), without and with `--sandbox`,
//! through the CLI and through the library (`ringfs::exec`), beside a plain
//! fork/exec of `true`, `unshare` of it (the same namespaces) and `setpriv`
//! of it (no capabilities, no_new_privs), all interleaved in one run on one
//! mounted store. Prints a markdown table (medians and p90, ms) with the
//! load; `--json F` writes every sample.
//!
//! `--cells`: the twelve cells C01–C12 (scripts/fsbench/NN-*.sh) through
//! `ringfs exec` by the seed's method (per cell a fresh store, an untimed
//! identical run on an earlier mount, the setup committed, a fresh mount for
//! the timed run, the cell's verifier), four candidates side by side: the
//! plain host (an ext4 directory), `setpriv` (no capabilities, no_new_privs)
//! as the reference, `ringfs exec` and `ringfs exec --sandbox` (as `--user`,
//! default nobody); `--reps` each (default 3), `--rows` to pick cells.
//! Counts first (the receipts' request and changed-path counts, equal
//! between the two ringfs candidates or flagged), then times (command, exec
//! wall, overhead, commit via `ringfs exec --commit`, mount, unmount; store
//! and working-copy bytes), ratios to the plain host, the load before and
//! after; `--json F` writes every sample. See `bench::exec_cells`. The
//! quiet rerun:
//!
//!     sudo target/release/ringfs-exec-bench --cells --ringfs target/release/ringfs --json exec-cells.json

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde_json::json;

const AFTER_HELP: &str = "\
--cells: cells C01–C12 through ringfs exec (issue 15), by the fs-bench's method
(per cell a fresh store; one untimed identical run on an earlier mount; the
setup, e.g. C09–C11's 64 MiB base file, committed with `ringfs commit`; that
mount's unmount; a fresh mount for the timed run; the cell's verifier), every
phase through each of four candidates: the plain host (bash in an ext4
directory under --base), setpriv (--no-new-privs, no capabilities), ringfs exec
and ringfs exec --sandbox (--user; the cell's directory is handed to that user).
The timed body runs with `ringfs exec --commit`. Printed: counts (the receipts'
requests and changed paths; exec and --sandbox must agree, else flagged), times
(medians over --reps: command time, exec wall, ratios to the plain host), the
ringfs detail (overhead, exec points, commit, mount, unmount, bytes to/from the
daemon, store and working-copy bytes) and the load before/after. --json writes
every sample. Needs root, /dev/fuse and setpriv. The quiet rerun:
  sudo target/release/ringfs-exec-bench --cells --ringfs target/release/ringfs --json exec-cells.json";

#[derive(Debug, Parser)]
#[command(name = "ringfs-exec-bench", version, after_help = AFTER_HELP)]
struct Cli {
    /// The ringfs binary.
    #[arg(long, default_value = "target/release/ringfs")]
    ringfs: PathBuf,
    /// Calls per candidate.
    #[arg(long, default_value_t = 100)]
    calls: usize,
    /// Where the store and mountpoint go (a temp dir below it, removed at the end).
    #[arg(long, default_value = "/var/tmp")]
    base: PathBuf,
    /// Write every sample as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run cells C01–C12 through ringfs exec (see below) instead of the overhead of `true`.
    #[arg(long)]
    cells: bool,
    /// With --cells: timed repetitions of every cell on every candidate.
    #[arg(long, default_value_t = 3, requires = "cells")]
    reps: usize,
    /// With --cells: the cells to run, e.g. 1,9 (default: 1 to 12).
    #[arg(long, value_delimiter = ',', requires = "cells")]
    rows: Option<Vec<u32>>,
    /// With --cells: the user `ringfs exec --sandbox --user` runs as.
    #[arg(long, default_value = "nobody", requires = "cells")]
    user: String,
    /// With --cells: scripts/fsbench (default: the one of this checkout).
    #[arg(long, requires = "cells")]
    scripts: Option<PathBuf>,
    /// With --cells: the seed of the candidates' order (default: from the clock).
    #[arg(long, requires = "cells")]
    seed: Option<u64>,
    /// With --cells: per-phase timeout in seconds.
    #[arg(long, default_value_t = 900, requires = "cells")]
    timeout: u64,
}

/// `--cells`: run, print the tables, write the JSON; an error when a sample failed.
fn cells(cli: &Cli) -> Result<()> {
    bench::sys::install_signal_handlers()?;
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let scripts = cli.scripts.clone().unwrap_or_else(|| repo.join("scripts/fsbench"));
    let cfg = bench::exec_cells::Config {
        ringfs: cli.ringfs.canonicalize().with_context(|| format!("--ringfs {}: build it (cargo build --release -p ringfs) or pass its path", cli.ringfs.display()))?,
        scripts: scripts.canonicalize().with_context(|| format!("--scripts {}", scripts.display()))?,
        base: cli.base.clone(),
        rows: cli.rows.clone().unwrap_or_else(|| (1..=12).collect()),
        reps: cli.reps,
        user: cli.user.clone(),
        seed: cli.seed.unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos() as u64),
        timeout: Duration::from_secs(cli.timeout),
    };
    if cfg.reps == 0 {
        bail!("--reps 0: give at least 1");
    }
    let report = bench::exec_cells::run(&cfg)?;
    print!("{}", bench::exec_cells::markdown(&report));
    if let Some(p) = &cli.json {
        std::fs::write(p, serde_json::to_string_pretty(&bench::exec_cells::to_json(&report))?).with_context(|| format!("writing {}", p.display()))?;
    }
    let failed = report.samples.iter().filter(|s| !s.ok).count();
    if report.meta["interrupted"] == true {
        bail!("interrupted; the tables above are partial");
    }
    if failed > 0 {
        bail!("{failed} of {} samples failed (listed above)", report.samples.len());
    }
    Ok(())
}

/// The mounted workspace; unmounted and removed on drop.
struct Mount {
    ringfs: PathBuf,
    dir: tempfile::TempDir,
}

impl Mount {
    fn mp(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new(&self.ringfs).arg("umount").arg(self.mp()).stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn quiet(c: &mut Command) -> Result<Duration> {
    let t = Instant::now();
    let s = c.stdout(Stdio::null()).stderr(Stdio::null()).status().context("spawn")?;
    let d = t.elapsed();
    if !s.success() {
        bail!("{c:?} failed: {s}");
    }
    Ok(d)
}

/// `ringfs exec [--sandbox] MP --json -- true`: (process wall, receipt overhead).
fn cli_exec(ringfs: &Path, mp: &Path, sandbox: bool) -> Result<(f64, f64)> {
    let mut c = Command::new(ringfs);
    c.arg("exec").arg(mp);
    if sandbox {
        c.arg("--sandbox");
    }
    c.args(["--json", "--", "true"]);
    let t = Instant::now();
    let o = c.stderr(Stdio::null()).output()?;
    let wall = ms(t.elapsed());
    if !o.status.success() {
        bail!("ringfs exec failed: {}", o.status);
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)?;
    Ok((wall, v["time"]["overhead_ms"].as_f64().unwrap_or(f64::NAN)))
}

fn lib_exec(mp: &Path, sandbox: bool) -> Result<f64> {
    let opts = ringfs::ExecOptions {
        mountpoint: mp.to_path_buf(),
        cwd: None,
        argv: vec!["true".into()],
        capture: Some(1 << 16),
        commit: None,
        checkpoint: false,
        timeout: None,
        sandbox: sandbox.then(ringfs::sandbox::SandboxOptions::default),
    };
    Ok(ringfs::exec(&opts)?.time.overhead_ms)
}

fn stats(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    (v[v.len() / 2], v[(v.len() * 9 / 10).min(v.len() - 1)])
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if cli.cells {
        return cells(&cli);
    }
    let root = unsafe { libc::geteuid() } == 0;
    let dir = tempfile::Builder::new().prefix("ringfs-exec-bench-").tempdir_in(&cli.base)?;
    std::fs::create_dir(dir.path().join("mnt"))?;
    let st = Command::new(&cli.ringfs).arg("mount").arg(dir.path().join("mnt")).arg("--store").arg(dir.path().join("store")).arg("--daemon").stdout(Stdio::null()).stderr(Stdio::null()).status()?;
    if !st.success() {
        bail!("ringfs mount failed");
    }
    let m = Mount { ringfs: cli.ringfs.clone(), dir };
    let mp = m.mp();
    std::fs::write(mp.join("seed.txt"), "seed")?;
    // One untimed call each: the first exec point builds the tree.
    cli_exec(&cli.ringfs, &mp, false)?;
    let load0 = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let names = ["fork/exec true", "unshare (mnt,pid,ipc,uts,net) true", "setpriv (no caps, nnp) true", "ringfs exec (CLI wall)", "ringfs exec (overhead)", "ringfs::exec (library, overhead)", "ringfs exec --sandbox (CLI wall)", "ringfs exec --sandbox (overhead)", "ringfs::exec sandbox (library, overhead)"];
    let mut s: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..cli.calls {
        s[0].push(ms(quiet(&mut Command::new("true"))?));
        if root {
            s[1].push(ms(quiet(Command::new("unshare").args(["--mount", "--pid", "--ipc", "--uts", "--net", "--fork", "true"]))?));
        }
        s[2].push(ms(quiet(Command::new("setpriv").args(["--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "true"]))?));
        let (w, o) = cli_exec(&cli.ringfs, &mp, false)?;
        s[3].push(w);
        s[4].push(o);
        s[5].push(lib_exec(&mp, false)?);
        if root {
            let (w, o) = cli_exec(&cli.ringfs, &mp, true)?;
            s[6].push(w);
            s[7].push(o);
            s[8].push(lib_exec(&mp, true)?);
        }
    }
    let load1 = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("ringfs-exec-bench: {} calls each, interleaved; load before {} after {}", cli.calls, load0.trim(), load1.trim());
    println!();
    println!("| candidate | median ms | p90 ms |");
    println!("| --- | ---: | ---: |");
    let mut doc = serde_json::Map::new();
    for (i, n) in names.iter().enumerate() {
        doc.insert(n.to_string(), json!(s[i]));
        let (med, p90) = stats(&mut s[i].clone());
        if !s[i].is_empty() {
            println!("| {n} | {med:.3} | {p90:.3} |");
        }
    }
    if let Some(p) = &cli.json {
        std::fs::write(p, serde_json::to_string_pretty(&json!({ "calls": cli.calls, "load_before": load0.trim(), "load_after": load1.trim(), "samples_ms": doc }))?)?;
    }
    drop(m);
    Ok(())
}
