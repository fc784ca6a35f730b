//! The targets a row runs on: raw disk, tmpfs, every ringfs mode, peers.
//! Each mounted instance is a guard: dropping it unmounts what it mounted and
//! removes its directory, on every path (errors, Ctrl-C, panic).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rows::{de_static_opt, Name};

use crate::sys::{self, TempDir};

const MOUNT_TIMEOUT: Duration = Duration::from_secs(120);
const UMOUNT_TIMEOUT: Duration = Duration::from_secs(300);
/// A busy mount: tries of `ringfs umount` and the wait between them.
const UMOUNT_BUSY_TRIES: usize = 5;
const UMOUNT_BUSY_WAIT: Duration = Duration::from_secs(2);

/// The line of `ringfs umount`'s stderr that names the holders (the last busy one).
fn busy_line(stderr: &str) -> String {
    let l = stderr.lines().rev().find(|l| l.contains("busy")).or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()));
    l.map_or("(it said nothing)".into(), |l| l.trim().trim_start_matches("ringfs: ").to_string())
}

/// What the ringfs binary offers, read from its `--help` texts.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Features {
    pub binary: PathBuf,
    pub version: String,
    pub transport: Option<Vec<String>>,
    pub passthrough: Option<Vec<String>>,
    pub ignore: bool,
    pub native_roots: Option<Vec<String>>,
    pub stats: bool,
}

fn help_of(bin: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(bin).args(args).output().with_context(|| format!("running {} {}", bin.display(), args.join(" ")))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

/// The values a flag accepts: `[possible values: a, b]` in the flag's help, or
/// the `<a|b|c>` placeholder; `Some(vec![])` when the flag exists but lists none.
fn flag_values(help: &str, flag: &str) -> Option<Vec<String>> {
    let pos = help.find(&format!("{flag} ")).or_else(|| help.find(&format!("{flag}=")).or_else(|| help.find(&format!("{flag}\n"))))?;
    let rest = &help[pos..];
    // The flag's own paragraph: up to the next line starting with "  -".
    let end = rest[1..].find("\n  -").map_or(rest.len(), |e| e + 1);
    let para = &rest[..end];
    if let Some(i) = para.find("Possible values:") {
        // clap's long help with documented values: "- name: what" lines.
        let vals: Vec<String> = para[i..]
            .lines()
            .skip(1)
            .filter_map(|l| l.trim().strip_prefix("- "))
            .map(|l| l.split(|c: char| c == ':' || c.is_whitespace()).next().unwrap_or("").to_string())
            .filter(|v| !v.is_empty())
            .collect();
        return Some(vals);
    }
    if let Some(i) = para.find("possible values:") {
        let tail = &para[i + "possible values:".len()..];
        let tail = &tail[..tail.find(']').unwrap_or(tail.len())];
        return Some(tail.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect());
    }
    let first = para.lines().next().unwrap_or("");
    if let (Some(a), Some(b)) = (first.find('<'), first.find('>')) {
        let inner = &first[a + 1..b];
        if inner.contains('|') {
            return Some(inner.split('|').map(str::to_string).collect());
        }
    }
    Some(vec![])
}

impl Features {
    pub fn detect(bin: &Path) -> Result<Features> {
        let top = help_of(bin, &["--help"])?;
        let mount = help_of(bin, &["mount", "--help"])?;
        if !mount.contains("--store") {
            bail!("{} mount --help does not look like ringfs", bin.display());
        }
        let version = help_of(bin, &["--version"]).unwrap_or_default().trim().to_string();
        Ok(Features {
            binary: bin.to_path_buf(),
            version,
            transport: flag_values(&mount, "--transport"),
            passthrough: flag_values(&mount, "--passthrough"),
            ignore: mount.contains("--ignore"),
            native_roots: flag_values(&mount, "--native-roots"),
            stats: top.lines().any(|l| l.trim_start().starts_with("stats ")),
        })
    }
}

/// The directory (at the mount root) that native-root targets run their samples in.
pub const NATIVE_DIR: &str = "nr";

/// A ringfs mode: which flags it needs, with `None` meaning "not passed".
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RingfsMode {
    #[serde(default, deserialize_with = "de_static_opt")]
    pub transport: Option<Name>,
    #[serde(default, deserialize_with = "de_static_opt")]
    pub passthrough: Option<Name>,
    pub local_only: bool,
    pub native_root: bool,
    pub memory: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kind {
    Raw,
    Tmpfs,
    Ringfs(RingfsMode),
    Bindfs,
    FuseOverlayfs,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetSpec {
    pub id: String,
    pub label: String,
    #[serde(flatten)]
    pub kind: Kind,
}

/// Every target the benchmark knows, in table order.
pub fn all_targets() -> Vec<TargetSpec> {
    let mut v = vec![
        TargetSpec { id: "raw".into(), label: "raw disk".into(), kind: Kind::Raw },
        TargetSpec { id: "tmpfs".into(), label: "tmpfs".into(), kind: Kind::Tmpfs },
    ];
    for t in ["dev", "uring"] {
        let m = |passthrough: Option<&'static str>, local_only, native_root| RingfsMode { transport: Some(t), passthrough, local_only, native_root, memory: false };
        for (id, label, mode) in [
            ("synced", "synced", m(Some("on"), false, false)),
            ("synced-ptoff", "synced, pt off", m(Some("off"), false, false)),
            ("local-ptoff", "local-only, pt off", m(Some("off"), true, false)),
            ("local-pt", "local-only, pt", m(Some("on"), true, false)),
            ("native", "native root", m(None, true, true)),
        ] {
            v.push(TargetSpec { id: format!("rf-{t}-{id}"), label: format!("ringfs {t} {label}"), kind: Kind::Ringfs(mode) });
        }
    }
    v.push(TargetSpec {
        id: "rf-mem".into(),
        label: "ringfs memory store (defaults)".into(),
        kind: Kind::Ringfs(RingfsMode { transport: None, passthrough: None, local_only: false, native_root: false, memory: true }),
    });
    v.push(TargetSpec { id: "bindfs".into(), label: "bindfs".into(), kind: Kind::Bindfs });
    v.push(TargetSpec { id: "fuse-overlayfs".into(), label: "fuse-overlayfs".into(), kind: Kind::FuseOverlayfs });
    v
}

fn pick(values: &Option<Vec<String>>, want: &str, flag: &str, implicit: &str, what: &str) -> Result<Option<Vec<String>>, String> {
    match values {
        None if want == implicit => Ok(None),
        None => Err(format!("this ringfs has no {flag} ({what} not built yet)")),
        Some(vals) if !vals.is_empty() && !vals.iter().any(|v| v == want) => {
            Err(format!("{flag} does not accept '{want}' (accepts {})", vals.join(", ")))
        }
        Some(_) => Ok(Some(vec![flag.to_string(), want.to_string()])),
    }
}

impl TargetSpec {
    /// The extra `ringfs mount` flags of a ringfs mode, or why the binary cannot run it.
    pub fn ringfs_args(&self, f: &Features) -> Result<Vec<String>, String> {
        let Kind::Ringfs(m) = &self.kind else { return Ok(vec![]) };
        let mut args = vec![];
        // The binary's implicit defaults before the flags exist: /dev/fuse, passthrough off.
        if let Some(t) = m.transport {
            args.extend(pick(&f.transport, t, "--transport", "dev", "FUSE-over-io_uring transport")?.unwrap_or_default());
        }
        if let Some(p) = m.passthrough {
            args.extend(pick(&f.passthrough, p, "--passthrough", "off", "passthrough")?.unwrap_or_default());
        }
        if m.local_only {
            if !f.ignore {
                return Err("this ringfs has no --ignore (local-only paths not built yet)".into());
            }
        }
        if m.native_root {
            // Samples run inside one native root, /nr (see `root`).
            args.extend(pick(&f.native_roots, "auto", "--native-roots", "", "native roots")?.unwrap_or_default());
            args.extend(["--ignore".to_string(), format!("/{NATIVE_DIR}")]);
        } else if m.local_only {
            // The daemon's own local-only side, not native roots.
            args.extend(["--ignore".to_string(), "/*".to_string()]);
            args.extend(pick(&f.native_roots, "off", "--native-roots", "off", "native roots")?.unwrap_or_default());
        }
        Ok(args)
    }

    /// Why this target cannot run here, if it cannot (checked before mounting).
    pub fn unavailable(&self, f: &Features) -> Option<String> {
        match &self.kind {
            Kind::Raw => None,
            Kind::Tmpfs => (!rustix_is_root()).then(|| "mounting tmpfs needs root".into()),
            Kind::Ringfs(_) => {
                if !Path::new("/dev/fuse").exists() {
                    return Some("/dev/fuse is missing".into());
                }
                self.ringfs_args(f).err()
            }
            Kind::Bindfs => sys::which("bindfs").is_none().then(|| "bindfs is not installed (apt-get install -y bindfs)".into()),
            Kind::FuseOverlayfs => sys::which("fuse-overlayfs")
                .is_none()
                .then(|| "fuse-overlayfs is not installed (apt-get install -y fuse-overlayfs)".into()),
        }
    }

    pub fn is_ringfs(&self) -> bool {
        matches!(self.kind, Kind::Ringfs(_))
    }

    /// Does the content survive an unmount + mount (needed for a cell's remount)?
    pub fn survives_remount(&self) -> bool {
        match &self.kind {
            Kind::Raw | Kind::Bindfs | Kind::FuseOverlayfs => true,
            Kind::Tmpfs => false,
            Kind::Ringfs(m) => !m.memory,
        }
    }
}

fn rustix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// One live instance of a target: its directories and, while mounted, its mount.
pub struct Instance {
    pub spec: TargetSpec,
    features: Features,
    dir: TempDir,
    mounted: bool,
    /// Facts reported by the mounted filesystem (ringfs: transport, passthrough).
    pub effective: Value,
}

impl Instance {
    /// Make the directories (and the backing store) of a fresh instance; not mounted yet.
    pub fn new(spec: &TargetSpec, features: &Features, parent: &Path) -> Result<Instance> {
        let dir = TempDir::new(parent, &format!("{}.", spec.id))?;
        for sub in ["mnt", "store", "lower", "upper", "work", "scratch"] {
            std::fs::create_dir_all(dir.path.join(sub))?;
        }
        Ok(Instance { spec: spec.clone(), features: features.clone(), dir, mounted: false, effective: Value::Null })
    }

    /// Where the samples' directories go.
    pub fn root(&self) -> PathBuf {
        match &self.spec.kind {
            Kind::Raw => self.dir.path.join("store"),
            Kind::Ringfs(m) if m.native_root => self.dir.path.join("mnt").join(NATIVE_DIR),
            _ => self.dir.path.join("mnt"),
        }
    }

    /// A directory on the harness's own disk for command output; never measured.
    pub fn scratch(&self) -> PathBuf {
        self.dir.path.join("scratch")
    }

    fn mp(&self) -> PathBuf {
        self.dir.path.join("mnt")
    }

    /// The backing directory: ringfs's store (`--store`), raw disk's samples, bindfs's source.
    pub fn store_dir(&self) -> PathBuf {
        self.dir.path.join("store")
    }

    /// Whether this instance is mounted (as far as its own mount and unmount know).
    pub fn is_mounted(&self) -> bool {
        self.mounted
    }

    /// The PID of the ringfs daemon serving this mount (`ringfs status --json`), while mounted.
    pub fn daemon_pid(&self) -> Option<i32> {
        if !self.spec.is_ringfs() || !self.mounted {
            return None;
        }
        self.status()?.get("pid")?.as_i64().map(|p| p as i32)
    }

    /// Mount (a no-op for raw disk); returns the wall time of the mount command in ms.
    pub fn mount(&mut self) -> Result<f64> {
        if self.mounted {
            return Ok(0.0);
        }
        let d = &self.dir.path;
        let mp = self.mp();
        let mut cmd;
        match &self.spec.kind {
            Kind::Raw => {
                self.mounted = true;
                return Ok(0.0);
            }
            Kind::Tmpfs => {
                cmd = Command::new("mount");
                cmd.args(["-t", "tmpfs", "-o", "size=8g,mode=0755", "fsbench-tmpfs"]).arg(&mp);
            }
            Kind::Ringfs(m) => {
                cmd = Command::new(&self.features.binary);
                cmd.arg("mount").arg(&mp);
                if m.memory {
                    cmd.arg("--memory");
                } else {
                    cmd.arg("--store").arg(d.join("store"));
                }
                cmd.arg("--daemon").arg("--log-file").arg(d.join("ringfs.log"));
                cmd.args(self.spec.ringfs_args(&self.features).map_err(anyhow::Error::msg)?);
            }
            Kind::Bindfs => {
                cmd = Command::new("bindfs");
                cmd.arg(d.join("store")).arg(&mp);
            }
            Kind::FuseOverlayfs => {
                cmd = Command::new("fuse-overlayfs");
                cmd.arg("-o").arg(format!(
                    "lowerdir={},upperdir={},workdir={}",
                    d.join("lower").display(),
                    d.join("store").display(),
                    d.join("work").display()
                ));
                cmd.arg(&mp);
            }
        }
        let r = sys::run(cmd, &self.scratch(), MOUNT_TIMEOUT)?;
        if sys::is_mounted(&mp) {
            self.mounted = true;
        }
        if !r.ok() || !self.mounted {
            let mut why = r.why();
            if let Ok(log) = std::fs::read_to_string(d.join("ringfs.log")) {
                if let Some(l) = log.lines().rev().find(|l| !l.trim().is_empty()) {
                    why = format!("{why}; log: {}", l.trim());
                }
            }
            bail!("mount failed: {why}");
        }
        if let Kind::Ringfs(m) = &self.spec.kind {
            if m.native_root {
                // The native root the samples run in: made once, bind-mounted by the daemon.
                let nr = self.root();
                if !nr.exists() {
                    std::fs::create_dir(&nr).with_context(|| format!("mkdir {}", nr.display()))?;
                }
                let t0 = std::time::Instant::now();
                while !sys::is_mounted(&nr) {
                    if t0.elapsed() > std::time::Duration::from_secs(10) {
                        bail!("{} did not become a native root within 10 s", nr.display());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        }
        if self.spec.is_ringfs() {
            self.effective = self.status().map(|s| {
                serde_json::json!({
                    "transport": s.pointer("/transport/name").cloned().unwrap_or(Value::Null),
                    "queues": s.pointer("/transport/queues").cloned().unwrap_or(Value::Null),
                    "passthrough": s.pointer("/features/passthrough/enabled").cloned().unwrap_or(Value::Null),
                })
            }).unwrap_or(Value::Null);
        }
        Ok(r.ms)
    }

    /// Unmount what we mounted; returns the wall time in ms (0 for raw disk).
    pub fn unmount(&mut self) -> Result<f64> {
        if !self.mounted {
            return Ok(0.0);
        }
        let mp = self.mp();
        if matches!(self.spec.kind, Kind::Raw) {
            self.mounted = false;
            return Ok(0.0);
        }
        let cmd = || {
            if self.spec.is_ringfs() {
                let mut c = Command::new(&self.features.binary);
                c.arg("umount").arg(&mp);
                c
            } else {
                let mut c = Command::new("umount");
                c.arg(&mp);
                c
            }
        };
        // A busy mount (a sample's process not yet gone, a kernel reference
        // still dropping) is refused with EBUSY naming its holders: wait and retry.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = sys::run(cmd(), &self.scratch(), UMOUNT_TIMEOUT)?;
            if !sys::is_mounted(&mp) {
                self.mounted = false;
            }
            if r.ok() && !self.mounted {
                return Ok(r.ms);
            }
            let busy = r.stderr.contains("EBUSY") || r.stderr.contains("is busy") || r.stderr.contains("busy (");
            if !self.mounted || !busy || sys::interrupted() {
                bail!("unmount of {} failed: {}", mp.display(), r.why());
            }
            if attempt >= UMOUNT_BUSY_TRIES {
                bail!(
                    "unmount of {} refused {attempt} times over {} s, the mount is busy: {}",
                    mp.display(),
                    (attempt - 1) as u64 * UMOUNT_BUSY_WAIT.as_secs(),
                    busy_line(&r.stderr)
                );
            }
            std::thread::sleep(UMOUNT_BUSY_WAIT);
        }
    }

    fn status(&self) -> Option<Value> {
        let out = Command::new(&self.features.binary).arg("status").arg(self.mp()).arg("--json").output().ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }

    /// The daemon's counters: per-opcode request counts and, when `ringfs stats`
    /// offers them, bytes to/from the daemon. None for non-ringfs targets.
    pub fn counters(&self) -> Option<Counters> {
        if !self.spec.is_ringfs() || !self.mounted {
            return None;
        }
        let v: Value = if self.features.stats {
            let out = Command::new(&self.features.binary).arg("stats").arg(self.mp()).arg("--json").output().ok()?;
            serde_json::from_slice(&out.stdout).ok().or_else(|| self.status())?
        } else {
            self.status()?
        };
        Some(Counters::from_json(&v))
    }

    /// A shell command printing the daemon's counters as JSON (`ringfs stats
    /// MNT --json`) for run.sh's FSBENCH_STATS: requests per timed function.
    /// None for non-ringfs targets and binaries without `stats`.
    pub fn stats_command(&self) -> Option<String> {
        if !self.spec.is_ringfs() || !self.mounted || !self.features.stats {
            return None;
        }
        let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
        Some(format!("{} stats {} --json", q(&self.features.binary), q(&self.mp())))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if self.mounted {
            if let Err(e) = self.unmount() {
                eprintln!("ringfs-bench: {e}; detaching lazily");
                let mp = self.mp();
                if sys::is_mounted(&mp) {
                    let _ = Command::new("umount").arg("-l").arg(&mp).status();
                }
            }
        }
        // TempDir's own drop removes the directory (it refuses while anything is mounted below).
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Counters {
    pub requests: BTreeMap<String, u64>,
    pub bytes_to_daemon: Option<u64>,
    pub bytes_from_daemon: Option<u64>,
}

impl Counters {
    /// From `ringfs stats --json` (or `status --json`): `requests` maps an
    /// opcode to a count or to `{count, …}`.
    pub fn from_json(v: &Value) -> Counters {
        let mut c = Counters::default();
        if let Some(Value::Object(reqs)) = v.get("requests") {
            for (op, x) in reqs {
                let n = x.as_u64().or_else(|| x.get("count").and_then(Value::as_u64)).unwrap_or(0);
                c.requests.insert(op.clone(), n);
            }
        }
        c.bytes_to_daemon = v.get("bytes_to_daemon").and_then(Value::as_u64);
        c.bytes_from_daemon = v.get("bytes_from_daemon").and_then(Value::as_u64);
        c
    }

    /// `after - before`, per opcode (opcodes with zero difference omitted).
    pub fn delta(before: &Counters, after: &Counters) -> Counters {
        let mut requests = BTreeMap::new();
        for (op, n) in &after.requests {
            let d = n.saturating_sub(*before.requests.get(op).unwrap_or(&0));
            if d > 0 {
                requests.insert(op.clone(), d);
            }
        }
        let sub = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b.unwrap_or(0)));
        Counters {
            requests,
            bytes_to_daemon: sub(after.bytes_to_daemon, before.bytes_to_daemon),
            bytes_from_daemon: sub(after.bytes_from_daemon, before.bytes_from_daemon),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_parse_clap_help() {
        let help = "Options:\n      --store <DIR>\n          Durable store\n      --transport <TRANSPORT>\n          Which transport\n\n          [default: auto]\n          [possible values: auto, uring, dev]\n      --memory\n          Keep\n";
        assert_eq!(flag_values(help, "--transport"), Some(vec!["auto".into(), "uring".into(), "dev".into()]));
        assert_eq!(flag_values(help, "--memory"), Some(vec![]));
        assert_eq!(flag_values(help, "--passthrough"), None);
        let long = "      --transport <TRANSPORT>\n          Which\n\n          Possible values:\n          - auto:  io_uring if the kernel offers it\n          - uring: FUSE-over-io_uring\n          - dev\n\n      --memory\n";
        assert_eq!(flag_values(long, "--transport"), Some(vec!["auto".into(), "uring".into(), "dev".into()]));
        let short = "      --passthrough <auto|on|off>  Whether\n      --x\n";
        assert_eq!(flag_values(short, "--passthrough"), Some(vec!["auto".into(), "on".into(), "off".into()]));
    }
}
