//! The store section's workloads, each run the same way in a directory on
//! ext4 and in a ringfs mount: big files and fsync latency, SQLite writers
//! (python3's sqlite3, `sqlite_work.py`), trees of small files, and the
//! 8-client mixed load.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::sys;

/// The SQLite workload script, written next to the run's scratch files.
pub const SQLITE_PY: &str = include_str!("sqlite_work.py");
const MIB: u64 = 1 << 20;

/// Write `size` bytes of random (incompressible, never repeating) data to a
/// new file at `path` in 1 MiB writes, fsync and close it; the ms it took.
pub fn write_file(path: &Path, size: u64, rng: &mut fastrand::Rng) -> Result<f64> {
    let t0 = Instant::now();
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut buf = vec![0u8; MIB as usize];
    let mut left = size;
    while left > 0 {
        sys::check_interrupted()?;
        rng.fill(&mut buf);
        let n = left.min(MIB) as usize;
        f.write_all(&buf[..n]).with_context(|| format!("writing {}", path.display()))?;
        left -= n as u64;
    }
    f.sync_all().with_context(|| format!("fsync of {}", path.display()))?;
    drop(f);
    Ok(t0.elapsed().as_secs_f64() * 1e3)
}

/// fsync latency at one file size: a file of `size` bytes written, fsync'd
/// and closed (untimed), reopened, then `reps` times a 4 KiB write at a random
/// 4 KiB-aligned offset followed by fsync, each timed (ms). The file is removed.
pub fn fsync_latency(dir: &Path, size: u64, reps: usize, rng: &mut fastrand::Rng) -> Result<Vec<f64>> {
    let p = dir.join(format!("fsync-{}MiB", size / MIB));
    write_file(&p, size, rng)?;
    let f = OpenOptions::new().read(true).write(true).open(&p).with_context(|| format!("reopening {}", p.display()))?;
    let mut buf = [0u8; 4096];
    let mut out = Vec::with_capacity(reps);
    for _ in 0..reps {
        sys::check_interrupted()?;
        rng.fill(&mut buf);
        let off = rng.u64(0..(size / 4096).max(1)) * 4096;
        let t0 = Instant::now();
        f.write_all_at(&buf, off).with_context(|| format!("writing 4 KiB at {off} of {}", p.display()))?;
        f.sync_all().with_context(|| format!("fsync of {}", p.display()))?;
        out.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    drop(f);
    std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
    Ok(out)
}

/// `python3 sqlite_work.py ARGS…` as a command (its output goes to files in `scratch`).
fn py(script: &Path, args: &[String]) -> Command {
    let mut c = Command::new("python3");
    c.arg(script).args(args);
    c
}

/// The FSBENCH_INFO key=value pairs a script printed.
pub fn info(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("FSBENCH_INFO "))
        .flat_map(|r| r.split_whitespace())
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// Create the database `db` (WAL) of at least `mb` megabytes; its size in bytes.
pub fn sqlite_create(script: &Path, db: &Path, mb: f64, scratch: &Path, timeout: Duration) -> Result<u64> {
    let r = sys::run(py(script, &["create".into(), db.display().to_string(), mb.to_string()]), scratch, timeout)?;
    if !r.ok() {
        bail!("creating the database: {}", r.why());
    }
    Ok(info(&r.stdout).iter().find(|(k, _)| k == "bytes").and_then(|(_, v)| v.parse().ok()).unwrap_or(0))
}

/// What the concurrent writers did.
#[derive(Debug, Clone)]
pub struct Writers {
    /// From starting the first to the end of the last, seconds.
    pub wall_s: f64,
    pub failed: usize,
    /// The first failure's line (e.g. "database is locked").
    pub first_error: Option<String>,
}

/// A child of ours in its own process group, killed (the group) on drop.
struct Kid {
    child: Child,
    out: PathBuf,
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on the process group of a child we spawned.
            unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
            let _ = self.child.wait();
        }
    }
}

/// `writers` concurrent processes, each `txns` transactions on `db`.
pub fn sqlite_writers(script: &Path, db: &Path, writers: usize, txns: usize, scratch: &Path, timeout: Duration) -> Result<Writers> {
    use std::os::unix::process::CommandExt;
    std::fs::create_dir_all(scratch)?;
    let t0 = Instant::now();
    let mut kids = vec![];
    for w in 0..writers {
        let out = scratch.join(format!("writer{w}.out"));
        let mut c = py(script, &["write".into(), db.display().to_string(), txns.to_string(), (w + 1).to_string()]);
        c.stdin(Stdio::null()).stdout(File::create(&out)?).stderr(File::create(scratch.join(format!("writer{w}.err")))?).process_group(0);
        kids.push(Kid { child: c.spawn().context("starting python3")?, out });
    }
    let mut status = vec![None; writers];
    while status.iter().any(Option::is_none) {
        for (i, k) in kids.iter_mut().enumerate() {
            if status[i].is_none() {
                status[i] = k.child.try_wait()?;
            }
        }
        if t0.elapsed() > timeout {
            bail!("the SQLite writers did not finish within {} s", timeout.as_secs());
        }
        sys::check_interrupted()?;
        std::thread::sleep(Duration::from_millis(5));
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let mut failed = 0;
    let mut first_error = None;
    for (i, k) in kids.iter().enumerate() {
        if !status[i].is_some_and(|s| s.success()) {
            failed += 1;
            let text = std::fs::read_to_string(&k.out).unwrap_or_default();
            let err = std::fs::read_to_string(k.out.with_extension("err")).unwrap_or_default();
            let line = text.lines().find_map(|l| l.strip_prefix("FSBENCH_FAIL ")).map(str::to_string).or_else(|| err.lines().last().map(str::to_string));
            first_error.get_or_insert(format!("writer {}: {}", i + 1, line.unwrap_or_else(|| "exited without saying why".into())));
        }
    }
    Ok(Writers { wall_s, failed, first_error })
}

/// `PRAGMA integrity_check` of `db`: Ok(true) when it says ok.
pub fn sqlite_check(script: &Path, db: &Path, scratch: &Path, timeout: Duration) -> Result<bool> {
    let r = sys::run(py(script, &["check".into(), db.display().to_string()]), scratch, timeout)?;
    let ok = info(&r.stdout).iter().any(|(k, v)| k == "integrity" && v == "ok");
    if !ok && r.status.is_none() {
        bail!("integrity_check did not run: {}", r.why());
    }
    Ok(ok)
}

/// The path of small file `i` of a tree: 1 000 files per directory, 100 per subdirectory.
pub fn tree_path(root: &Path, i: usize) -> PathBuf {
    root.join(format!("d{}", i / 1000)).join(format!("s{}", (i / 100) % 10)).join(format!("f{i}"))
}

/// The content of small file `i`: 0 to 184 bytes (about 92 on average, like
/// the 200 000 files of 18.5 MB), distinct per file.
pub fn tree_content(i: usize) -> Vec<u8> {
    let n = i % 185;
    let seed = format!("{i:08}:");
    seed.bytes().cycle().take(n).collect()
}

/// Create `n` small files under `root` (no fsync); (ms, content bytes).
pub fn small_tree(root: &Path, n: usize) -> Result<(f64, u64)> {
    let t0 = Instant::now();
    let mut bytes = 0;
    for i in 0..n {
        if i % 100 == 0 {
            sys::check_interrupted()?;
            let d = tree_path(root, i);
            std::fs::create_dir_all(d.parent().unwrap()).with_context(|| format!("mkdir {}", d.parent().unwrap().display()))?;
        }
        let c = tree_content(i);
        bytes += c.len() as u64;
        let p = tree_path(root, i);
        std::fs::write(&p, &c).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok((t0.elapsed().as_secs_f64() * 1e3, bytes))
}

/// Check a few files of a tree made by [`small_tree`].
pub fn check_tree(root: &Path, n: usize) -> Result<()> {
    for i in [0, n / 3, n / 2, n.saturating_sub(1)] {
        let p = tree_path(root, i);
        let got = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
        if got != tree_content(i) {
            bail!("{} holds {} bytes that are not what was written", p.display(), got.len());
        }
    }
    Ok(())
}
