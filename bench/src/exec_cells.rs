//! The exec section's cells (issue 15): cells C01–C12 run through `ringfs
//! exec` by the seed's method, the same code as the fs-bench's cells
//! ([`crate::run::Phases::cell`]: per cell a fresh store; one untimed
//! identical run on an earlier mount, the timed run's untimed setup there,
//! that mount's unmount; a fresh mount for the timed body; the cell's
//! verifier after it). Four candidates side by side, each cell's phases
//! (prep, body, verify) all run through the candidate's own route:
//!
//! - `host`: the plain host, `bash run.sh …` in an ext4 directory (no FUSE);
//! - `setpriv`: the same under `setpriv --no-new-privs --inh-caps=-all
//!   --bounding-set=-all` (uid 0 without capabilities), the reference;
//! - `exec`: `ringfs exec MNT --cwd DIR --json -- bash run.sh …` on a ringfs
//!   mount in its default mode; the timed body with `--commit` (its time is
//!   the receipt's `commit_ms`, inside the exec wall); the setup (prep, e.g.
//!   the 64 MiB base file of C09–C11) committed untimed with `ringfs commit`
//!   before the remount;
//! - `exec-sandbox`: the same with `--sandbox --user USER` (default nobody;
//!   the sample's directory is handed to that user and the mount root made
//!   world-writable, since the cells write there: C05 writes `../`).
//!
//! Counts first: the timed body's request counts (the receipt's per-opcode
//! requests) and changed-path counts (added/modified/removed) must be equal
//! between `exec` and `exec-sandbox` in every repetition; a difference is
//! flagged in the table and named in the notes. Times second: per cell the
//! medians of the command time, the exec wall (the caller's wall of the whole
//! call), the receipt's overhead, begin/end and commit times, the timed
//! mount and the final unmount, with ratios to the plain host; store bytes
//! (disk use of the store directory after the timed body) and working-copy
//! bytes (apparent size of the cell's directory). [`run`] measures,
//! [`markdown`] writes the tables, [`to_json`] every sample.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::noise;
use crate::progress::Progress;
use crate::rows::{self, Row};
use crate::run::{Launch, Phases, Sample};
use crate::sys::{self, Ran, TempDir};
use crate::targets::{Features, Instance, Kind, RingfsMode, TargetSpec};

/// What `ringfs-exec-bench --cells` runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The ringfs binary (canonical).
    pub ringfs: PathBuf,
    /// scripts/fsbench (canonical; must be readable by `user`).
    pub scripts: PathBuf,
    /// Where the run's temp directory goes (host directories, stores, mountpoints).
    pub base: PathBuf,
    /// Cells to run, 1..=12.
    pub rows: Vec<u32>,
    /// Timed repetitions of every cell on every candidate.
    pub reps: usize,
    /// The `--sandbox` candidate's `--user` (name).
    pub user: String,
    /// Seed of the candidates' order within a cell.
    pub seed: u64,
    /// Per-phase timeout.
    pub timeout: Duration,
}

/// One of the four ways a cell's command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidate {
    Host,
    Setpriv,
    Exec,
    Sandbox,
}

impl Candidate {
    /// In table order.
    pub const ALL: [Candidate; 4] = [
        Candidate::Host,
        Candidate::Setpriv,
        Candidate::Exec,
        Candidate::Sandbox,
    ];

    /// The id in the JSON (a sample's `target`).
    pub fn id(self) -> &'static str {
        match self {
            Candidate::Host => "host",
            Candidate::Setpriv => "setpriv",
            Candidate::Exec => "exec",
            Candidate::Sandbox => "exec-sandbox",
        }
    }

    /// The column heading.
    pub fn label(self) -> &'static str {
        match self {
            Candidate::Host => "plain host",
            Candidate::Setpriv => "setpriv",
            Candidate::Exec => "ringfs exec",
            Candidate::Sandbox => "ringfs exec --sandbox",
        }
    }

    fn is_ringfs(self) -> bool {
        matches!(self, Candidate::Exec | Candidate::Sandbox)
    }

    /// What it runs on: an ext4 directory, or a ringfs mount in its default mode.
    fn spec(self) -> TargetSpec {
        let kind = if self.is_ringfs() {
            Kind::Ringfs(RingfsMode {
                transport: None,
                passthrough: None,
                local_only: false,
                native_root: false,
                memory: false,
            })
        } else {
            Kind::Raw
        };
        TargetSpec {
            id: self.id().into(),
            label: self.label().into(),
            kind,
        }
    }
}

/// A copy of `cmd` (program, arguments, environment, working directory)
/// run as `program PRE… CMD ARGS…`.
fn wrap(cmd: &Command, program: &OsStr, pre: &[OsString]) -> Command {
    let mut c = Command::new(program);
    c.args(pre).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        c.current_dir(d);
    }
    c
}

/// The user `--sandbox` runs as: name, uid, gid.
#[derive(Debug, Clone)]
struct User {
    name: String,
    uid: u32,
    gid: u32,
}

fn lookup_user(name: &str) -> Result<User> {
    let c = CString::new(name).context("--user: a name without NUL bytes")?;
    // SAFETY: getpwnam with a valid C string; the fields are copied out at once
    // (the harness is single-threaded here).
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        bail!("--user {name}: no such user (give an unprivileged user that exists, e.g. nobody)");
    }
    // SAFETY: pw is non-null and points at getpwnam's static record.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    if uid == 0 {
        bail!("--user {name} is root: the sandbox runs as an unprivileged user");
    }
    Ok(User {
        name: name.to_string(),
        uid,
        gid,
    })
}

/// Apparent bytes (sizes of files and symlinks) under `p`, or disk use
/// (allocated blocks) with `disk`.
fn tree_bytes(p: &Path, disk: bool) -> u64 {
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    let own = if disk {
        m.blocks() * 512
    } else if m.is_dir() {
        0
    } else {
        m.len()
    };
    if !m.is_dir() {
        return own;
    }
    let Ok(rd) = std::fs::read_dir(p) else {
        return own;
    };
    own + rd
        .flatten()
        .map(|e| tree_bytes(&e.path(), disk))
        .sum::<u64>()
}

/// The hidden directory of the workspace root that holds the ringfs
/// candidates' copy of the scripts a cell runs ([`copy_scripts`]).
pub const SCRIPTS_DIR: &str = ".fsbench-scripts";

/// Copies run.sh and the row's script (`row_script`) from `scripts` into
/// `root`/[`SCRIPTS_DIR`] (0755, files 0644: the sandbox's user reads them)
/// unless there already, and returns that directory. `ringfs exec
/// --sandbox` shows the command the workspace and system directories only,
/// not the checkout (under the host's /tmp, say, it is hidden by the
/// sandbox's own /tmp): the ringfs candidates run the copy. Made before a
/// sample's first phase, outside its directory: not in the timed body's
/// receipt, nor in its working-copy bytes.
pub fn copy_scripts(scripts: &Path, root: &Path, row_script: &str) -> Result<PathBuf> {
    let dir = root.join(SCRIPTS_DIR);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    for name in ["run.sh", row_script] {
        let to = dir.join(name);
        if to.exists() {
            continue;
        }
        let from = scripts.join(name);
        std::fs::copy(&from, &to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(dir)
}

/// `cmd` (`bash SCRIPTS/run.sh ROW PHASE DIR`) running the copy in `copy`
/// instead of `scripts/run.sh`.
fn run_copy(cmd: &Command, scripts: &Path, copy: &Path) -> Command {
    let run = scripts.join("run.sh");
    let mut c = Command::new(cmd.get_program());
    for a in cmd.get_args() {
        if Path::new(a) == run {
            c.arg(copy.join("run.sh"));
        } else {
            c.arg(a);
        }
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        c.current_dir(d);
    }
    c
}

/// How one candidate runs a cell's phases, and what its timed body measured.
struct Launcher {
    cand: Candidate,
    ringfs: PathBuf,
    /// scripts/fsbench of the checkout (the ringfs candidates run their copy).
    scripts: PathBuf,
    user: User,
    row: &'static str,
    /// The body's caller-side wall (ms) and receipt (ringfs candidates).
    body: Option<(f64, Option<Value>)>,
}

impl Launcher {
    fn exec_cmd(&self, inst: &Instance, phase: &str, cmd: &Command) -> Command {
        let cmd = &run_copy(cmd, &self.scripts, &inst.root().join(SCRIPTS_DIR));
        let mut pre: Vec<OsString> = vec!["exec".into(), inst.root().into(), "--json".into()];
        if let Some(d) = cmd.get_current_dir() {
            pre.extend(["--cwd".into(), d.as_os_str().to_owned()]);
        }
        if self.cand == Candidate::Sandbox {
            pre.extend([
                "--sandbox".into(),
                "--user".into(),
                self.user.name.clone().into(),
            ]);
        }
        if phase == "body" {
            pre.extend([
                "--commit".into(),
                "-m".into(),
                format!("exec cells: {} body", self.row).into(),
            ]);
        }
        pre.push("--".into());
        wrap(cmd, self.ringfs.as_os_str(), &pre)
    }
}

impl Launch for Launcher {
    fn phase(
        &mut self,
        inst: &Instance,
        phase: &str,
        cmd: Command,
        scratch: &Path,
        timeout: Duration,
    ) -> Result<Ran> {
        let cmd = match self.cand {
            Candidate::Host => cmd,
            Candidate::Setpriv => {
                let pre: Vec<OsString> = [
                    "--no-new-privs",
                    "--inh-caps=-all",
                    "--bounding-set=-all",
                    "--",
                ]
                .map(OsString::from)
                .to_vec();
                wrap(&cmd, OsStr::new("setpriv"), &pre)
            }
            Candidate::Exec | Candidate::Sandbox => self.exec_cmd(inst, phase, &cmd),
        };
        let mut r = sys::run(cmd, scratch, timeout)?;
        let mut receipt = None;
        if self.cand.is_ringfs() {
            // The receipt is ringfs exec's stdout; the command's own output is in it.
            if let Ok(v) = serde_json::from_str::<Value>(&r.stdout) {
                let text = |k: &str| v[k]["text"].as_str().unwrap_or_default().to_string();
                r.stdout = text("stdout");
                r.stderr = format!("{}{}", text("stderr"), r.stderr);
                receipt = Some(v);
            }
        }
        if phase == "body" {
            self.body = Some((r.ms, receipt));
        }
        Ok(r)
    }

    fn prepare_dir(&mut self, inst: &Instance, dir: &Path) -> Result<()> {
        if self.cand.is_ringfs() {
            copy_scripts(&self.scripts, &inst.root(), &format!("{}.sh", self.row))?;
        }
        if self.cand == Candidate::Sandbox {
            std::os::unix::fs::chown(dir, Some(self.user.uid), Some(self.user.gid))
                .with_context(|| format!("chown {} to {}", dir.display(), self.user.name))?;
            let root = inst.root();
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777))
                .with_context(|| format!("chmod 777 {}", root.display()))?;
        }
        Ok(())
    }

    fn body_done(&mut self, inst: &Instance, dir: &Path, s: &mut Sample) -> Result<()> {
        let Some((wall, receipt)) = self.body.take() else {
            bail!("the body ran but left no wall time")
        };
        let mut e = json!({ "candidate": self.cand.id(), "wall_ms": wall, "wc_bytes": tree_bytes(dir, false) });
        match receipt {
            Some(r) => {
                let t = &r["time"];
                e["command_ms"] = t["command_ms"].clone();
                e["receipt"] = json!({
                    "exit_code": r["exit_code"],
                    "time": t,
                    "requests": r["requests"],
                    "changes": {
                        "added": r["changes"]["added"],
                        "modified": r["changes"]["modified"],
                        "removed": r["changes"]["removed"],
                        "bytes_new": r["changes"]["bytes_new"],
                        "bytes_reused": r["changes"]["bytes_reused"],
                    },
                    "local_only": r["local_only"].as_array().map_or(0, Vec::len),
                    "durability": r["durability"],
                    "commit": r["commit"],
                    "commit_error": r["commit_error"],
                });
                e["store_bytes"] = json!(tree_bytes(&inst.store_dir(), true));
                if r["commit"].is_null() {
                    bail!("ringfs exec --commit made no commit: {}", r["commit_error"]);
                }
            }
            None if self.cand.is_ringfs() => bail!("ringfs exec printed no receipt"),
            // The command's time is the call's wall here (no receipt, no other clock).
            None => e["command_ms"] = json!(wall),
        }
        s.exec = Some(e);
        Ok(())
    }

    fn setup_done(&mut self, inst: &mut Instance) -> Result<()> {
        if self.cand.is_ringfs() {
            let mut c = Command::new(&self.ringfs);
            c.arg("commit")
                .arg(inst.root())
                .args(["-m", &format!("exec cells: {} setup", self.row)]);
            sys::run_ok(c, &inst.scratch(), Duration::from_secs(300))?;
        }
        Ok(())
    }
}

/// What [`run`] measured: the run's facts and every sample (one per cell,
/// candidate and repetition).
#[derive(Debug, Clone)]
pub struct Report {
    pub meta: Value,
    pub rows: Vec<&'static Row>,
    pub samples: Vec<Sample>,
}

/// Runs every cell of `cfg.rows` `cfg.reps` times on every candidate (the
/// candidates in a seeded random order within each cell). Needs root
/// (mounts, `--sandbox`), /dev/fuse and `setpriv`. Errors before anything
/// runs when one is missing; a failed sample is kept (`ok: false`).
pub fn run(cfg: &Config) -> Result<Report> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("--cells needs root (it mounts ringfs and runs ringfs exec --sandbox): run it with sudo");
    }
    if !Path::new("/dev/fuse").exists() {
        bail!("/dev/fuse is missing (modprobe fuse)");
    }
    if sys::which("setpriv").is_none() {
        bail!("setpriv is not installed (apt-get install -y util-linux)");
    }
    let rows: Vec<&'static Row> = cfg
        .rows
        .iter()
        .map(|n| {
            rows::row(*n)
                .filter(|r| r.n <= 12)
                .with_context(|| format!("--rows {n}: cells are 1 to 12"))
        })
        .collect::<Result<_>>()?;
    let user = lookup_user(&cfg.user)?;
    let features = Features::detect(&cfg.ringfs)?;
    let started = Instant::now();
    let base = TempDir::new(&cfg.base, "ringfs-exec-cells.")?;
    let phases = Phases {
        scripts: cfg.scripts.clone(),
        cache: base.path.clone(),
        timeout: cfg.timeout,
    };
    let load_before = noise::read_loadavg();
    let mut rng = fastrand::Rng::with_seed(cfg.seed);
    let mut prog = Progress::new((cfg.reps * rows.len() * Candidate::ALL.len()) as u64);
    let mut samples = vec![];
    let mut interrupted = false;
    'all: for rep in 0..cfg.reps {
        for row in &rows {
            prog.group(&format!("exec cells rep {}/{}", rep + 1, cfg.reps), row.key);
            let mut order = Candidate::ALL.to_vec();
            rng.shuffle(&mut order);
            for c in order {
                if sys::interrupted() {
                    interrupted = true;
                    break 'all;
                }
                prog.start(c.id());
                let mut l = Launcher {
                    cand: c,
                    ringfs: cfg.ringfs.clone(),
                    scripts: cfg.scripts.clone(),
                    user: user.clone(),
                    row: row.key,
                    body: None,
                };
                let s = phases.cell(&mut l, &c.spec(), &features, &base.path, row, rep, 0)?;
                prog.done(&s);
                samples.push(s);
            }
        }
    }
    prog.finish();
    let meta = json!({
        "section": "exec cells",
        "reps": cfg.reps,
        "rows": cfg.rows,
        "seed": cfg.seed,
        "user": cfg.user,
        "machine": sys::machine(),
        "load_before": load_before,
        "load_after": noise::read_loadavg(),
        "base_fs": sys::fs_type(&base.path),
        "ringfs": features,
        "duration_s": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "commit": "ringfs exec --commit on the timed body (receipt commit_ms, inside the exec wall); the setup committed untimed with ringfs commit",
        "candidates": Candidate::ALL.iter().map(|c| json!({ "id": c.id(), "label": c.label() })).collect::<Vec<_>>(),
        "interrupted": interrupted,
    });
    Ok(Report {
        meta,
        rows,
        samples,
    })
}

/// Every sample and the per-cell counts check, as written by `--json`.
pub fn to_json(r: &Report) -> Value {
    let counts: Vec<Value> = r
        .rows
        .iter()
        .map(|row| json!({ "row": row.key, "mismatches": count_mismatches(r, row.key) }))
        .collect();
    json!({ "meta": r.meta, "counts": counts, "samples": r.samples })
}

fn samples_of<'a>(
    r: &'a Report,
    row: &'a str,
    c: Candidate,
) -> impl Iterator<Item = &'a Sample> + 'a {
    r.samples
        .iter()
        .filter(move |s| s.row == row && s.target == c.id())
}

/// Median of the successful samples' `f`.
fn median(r: &Report, row: &str, c: Candidate, f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    let mut v: Vec<f64> = samples_of(r, row, c)
        .filter(|s| s.ok)
        .filter_map(f)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn ex<'a>(s: &'a Sample, path: &[&str]) -> &'a Value {
    let mut v = s.exec.as_ref().unwrap_or(&Value::Null);
    for k in path {
        v = &v[*k];
    }
    v
}

fn f(s: &Sample, path: &[&str]) -> Option<f64> {
    ex(s, path).as_f64()
}

/// (added, modified, removed) of a ringfs sample's receipt.
fn changed(s: &Sample) -> (u64, u64, u64) {
    let c = ex(s, &["receipt", "changes"]);
    let n = |k: &str| c[k].as_u64().unwrap_or(0);
    (n("added"), n("modified"), n("removed"))
}

fn opcodes(s: &Sample) -> BTreeMap<String, u64> {
    let m = ex(s, &["receipt", "requests", "by_opcode"])
        .as_object()
        .cloned()
        .unwrap_or_default();
    m.into_iter()
        .map(|(k, v)| (k, v.as_u64().unwrap_or(0)))
        .collect()
}

/// Where `exec` and `exec-sandbox` disagree on a cell, repetition by
/// repetition: request counts by opcode, changed-path counts. Empty: equal.
fn count_mismatches(r: &Report, row: &str) -> Vec<String> {
    let mut out = vec![];
    for rep in 0..r.meta["reps"].as_u64().unwrap_or(0) as usize {
        let get = |c: Candidate| samples_of(r, row, c).find(|s| s.rep == rep && s.ok);
        let (Some(a), Some(b)) = (get(Candidate::Exec), get(Candidate::Sandbox)) else {
            continue;
        };
        if changed(a) != changed(b) {
            out.push(format!(
                "rep {}: changed paths (A/M/R) {:?} vs {:?}",
                rep + 1,
                changed(a),
                changed(b)
            ));
        }
        let (oa, ob) = (opcodes(a), opcodes(b));
        if oa != ob {
            let mut diffs = vec![];
            for k in oa
                .keys()
                .chain(ob.keys())
                .collect::<std::collections::BTreeSet<_>>()
            {
                let (x, y) = (
                    oa.get(k).copied().unwrap_or(0),
                    ob.get(k).copied().unwrap_or(0),
                );
                if x != y {
                    diffs.push(format!("{k} {x} vs {y}"));
                }
            }
            out.push(format!("rep {}: requests {}", rep + 1, diffs.join(", ")));
        }
    }
    out
}

fn num(x: Option<f64>) -> String {
    match x {
        None => "FAIL".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.1}"),
    }
}

/// `v (×v/host)`.
fn vs(x: Option<f64>, host: Option<f64>) -> String {
    match (x, host) {
        (Some(v), Some(h)) if h > 0.0 => format!("{} (×{:.2})", num(Some(v)), v / h),
        _ => num(x),
    }
}

/// Bytes in B, KiB or MiB.
fn size(x: Option<f64>) -> String {
    match x {
        None => "–".into(),
        Some(b) if b >= 1048576.0 => format!("{:.1} MiB", b / 1048576.0),
        Some(b) if b >= 1024.0 => format!("{:.1} KiB", b / 1024.0),
        Some(b) => format!("{b:.0} B"),
    }
}

fn count(x: Option<f64>) -> String {
    x.map_or("FAIL".into(), |v| format!("{v:.0}"))
}

fn load_text(v: &Value) -> String {
    v.as_array().map_or("?".into(), |a| {
        a.iter()
            .map(|x| x.as_f64().map_or("?".into(), |f| format!("{f:.2}")))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// The markdown report: counts first, then times (medians, ratios to the
/// plain host), then the ringfs candidates' detail; the load before/after.
pub fn markdown(r: &Report) -> String {
    use Candidate::*;
    let m = &r.meta;
    let mut o = format!(
        "exec cells (issue 15): C01–C12 through ringfs exec, {} reps each, medians; load before {} after {} ({} cores); {}\n\n",
        m["reps"],
        load_text(&m["load_before"]),
        load_text(&m["load_after"]),
        m["machine"]["cpus"],
        m["commit"].as_str().unwrap_or_default()
    );
    o += "Counts (the timed body's receipt): requests and changed paths (added/modified/removed) must be equal between ringfs exec and --sandbox.\n\n";
    o += "| cell | requests exec | requests --sandbox | changed exec | changed --sandbox | equal |\n| --- | ---: | ---: | ---: | ---: | --- |\n";
    let mut notes = vec![];
    for row in &r.rows {
        let req = |c| median(r, row.key, c, |s| f(s, &["receipt", "requests", "total"]));
        let ch = |c| {
            let mut v: Vec<String> = samples_of(r, row.key, c)
                .filter(|s| s.ok)
                .map(|s| format!("{}/{}/{}", changed(s).0, changed(s).1, changed(s).2))
                .collect();
            v.dedup();
            if v.is_empty() {
                "FAIL".into()
            } else {
                v.join(", ")
            }
        };
        let mism = count_mismatches(r, row.key);
        // What differed, in short: the opcodes (and "changed paths") named in any repetition.
        let mut what: Vec<String> = mism
            .iter()
            .flat_map(|m| {
                let m = m.split_once(": ").map_or(m.as_str(), |x| x.1);
                match m.strip_prefix("requests ") {
                    Some(ops) => ops
                        .split(", ")
                        .filter_map(|o| o.split_whitespace().next())
                        .map(str::to_string)
                        .collect::<Vec<_>>(),
                    None => vec!["changed paths".to_string()],
                }
            })
            .collect();
        what.sort();
        what.dedup();
        let eq = if mism.is_empty() {
            "yes".to_string()
        } else {
            format!("**NO**: {}", what.join(", "))
        };
        for x in &mism {
            notes.push(format!("- {}: {x}", row.key));
        }
        o += &format!(
            "| {} | {} | {} | {} | {} | {eq} |\n",
            row.key,
            count(req(Exec)),
            count(req(Sandbox)),
            ch(Exec),
            ch(Sandbox)
        );
    }
    if !notes.is_empty() {
        o += &format!(
            "\nCount differences (exec vs --sandbox):\n{}\n",
            notes.join("\n")
        );
    }
    o += "\nTimes (median ms; × the plain host's). command: the command's own time (host, setpriv: the caller's wall of it; ringfs: the receipt's); wall: the caller's wall of the whole call (ringfs: the `ringfs exec` process, commit included).\n\n";
    o += "| cell | host | setpriv | exec command | --sandbox command | exec wall | --sandbox wall |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for row in &r.rows {
        let cmd = |c| median(r, row.key, c, |s| f(s, &["command_ms"]));
        let wall = |c| median(r, row.key, c, |s| f(s, &["wall_ms"]));
        let h = wall(Host);
        o += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            row.key,
            num(h),
            vs(wall(Setpriv), h),
            vs(cmd(Exec), h),
            vs(cmd(Sandbox), h),
            vs(wall(Exec), h),
            vs(wall(Sandbox), h)
        );
    }
    o += "\nringfs detail (median): overhead = receipt wall − command; begin/end = the daemon's exec points; commit = --commit; mount = the timed run's mount, unmount = its unmount; store = disk use of the store after the body, wc = apparent bytes of the cell's directory (host: the same directory on ext4).\n\n";
    o += "| cell | candidate | overhead ms | begin ms | end ms | commit ms | mount ms | unmount ms | to / from daemon | store | wc |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for row in &r.rows {
        for c in [Exec, Sandbox] {
            let t = |k: &'static str| median(r, row.key, c, move |s| f(s, &["receipt", "time", k]));
            let rq =
                |k: &'static str| median(r, row.key, c, move |s| f(s, &["receipt", "requests", k]));
            o += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} |\n",
                row.key,
                c.label(),
                num(t("overhead_ms")),
                num(t("begin_ms")),
                num(t("end_ms")),
                num(t("commit_ms")),
                num(median(r, row.key, c, |s| s.mount_ms)),
                num(median(r, row.key, c, |s| s.unmount_ms)),
                size(rq("bytes_to_daemon")),
                size(rq("bytes_from_daemon")),
                size(median(r, row.key, c, |s| f(s, &["store_bytes"]))),
                size(median(r, row.key, c, |s| f(s, &["wc_bytes"]))),
            );
        }
        o += &format!(
            "| {} | plain host | | | | | | | | | {} |\n",
            row.key,
            size(median(r, row.key, Host, |s| f(s, &["wc_bytes"])))
        );
    }
    let fails: Vec<String> = r
        .samples
        .iter()
        .filter(|s| !s.ok)
        .map(|s| {
            format!(
                "- FAIL {} on {} (rep {}): {}",
                s.row,
                s.target,
                s.rep + 1,
                s.error.as_deref().unwrap_or("?")
            )
        })
        .collect();
    if !fails.is_empty() {
        o += &format!("\n{}\n", fails.join("\n"));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ringfs candidates run the workspace's copy of run.sh and the
    /// row's script, readable by the sandbox's user (issue 41 item 11).
    #[test]
    fn the_scripts_are_copied_into_the_workspace_and_run_from_there() {
        let d = tempfile::tempdir().unwrap();
        let (scripts, root) = (d.path().join("scripts"), d.path().join("ws"));
        std::fs::create_dir_all(&scripts).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        for f in ["run.sh", "01-create.sh", "09-read.sh"] {
            std::fs::write(scripts.join(f), format!("# {f}\n")).unwrap();
        }
        let copy = copy_scripts(&scripts, &root, "01-create.sh").unwrap();
        assert_eq!(copy, root.join(SCRIPTS_DIR));
        let mut names: Vec<String> = std::fs::read_dir(&copy).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, ["01-create.sh", "run.sh"]);
        assert_eq!(std::fs::read_to_string(copy.join("run.sh")).unwrap(), "# run.sh\n");
        assert_eq!(std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777, 0o755);
        assert_eq!(std::fs::metadata(copy.join("run.sh")).unwrap().permissions().mode() & 0o777, 0o644);
        // Again (the next sample): kept, another row's added.
        copy_scripts(&scripts, &root, "09-read.sh").unwrap();
        assert!(copy.join("09-read.sh").exists());

        let mut cmd = Command::new("bash");
        cmd.arg(scripts.join("run.sh")).arg("01-create.sh").arg("body").arg("/w/d").env("FSBENCH_X", "1").current_dir("/w/d");
        let c = run_copy(&cmd, &scripts, &copy);
        let args: Vec<&OsStr> = c.get_args().collect();
        assert_eq!(args, [copy.join("run.sh").as_os_str(), OsStr::new("01-create.sh"), OsStr::new("body"), OsStr::new("/w/d")]);
        assert_eq!(c.get_current_dir(), Some(Path::new("/w/d")));
        assert!(c.get_envs().any(|(k, v)| k == "FSBENCH_X" && v == Some(OsStr::new("1"))));
    }
}
