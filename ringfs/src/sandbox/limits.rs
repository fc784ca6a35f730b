//! The limits of `--memory` and `--pids`, with what the host has: a cgroup
//! v2 with its `memory`/`pids` controllers delegated; else the cgroup v1
//! hierarchy of that controller (a host booted with cgroup v1, as this
//! project's CI machine is); else a resource limit of the command's
//! processes (`RLIMIT_AS`, `RLIMIT_NPROC`), which is weaker and said so in
//! the receipt (`sandbox.memory_limit`, `sandbox.pids_limit`). Never
//! silently nothing. docs/SECURITY.md "Limits".

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};

/// The limits of one call, made before it starts and removed when dropped.
#[derive(Debug, Default)]
pub(super) struct Limits {
    /// Cgroup directories made for the call (removed on drop).
    cgroups: Vec<PathBuf>,
    /// `cgroup.procs` files the sandbox's first process joins (one per
    /// hierarchy).
    pub procs: Vec<CString>,
    /// Resource limits the command's process sets before it drops root:
    /// (`RLIMIT_*`, value).
    pub rlimits: Vec<(i32, u64)>,
    /// How `--memory` is enforced, in words (`None` without `--memory`).
    pub memory_how: Option<String>,
    /// How `--pids` is enforced, in words.
    pub pids_how: Option<String>,
}

impl Drop for Limits {
    fn drop(&mut self) {
        for cg in &self.cgroups {
            // v2 kills what is left at once; in v1 the PID namespace's end
            // has killed the call's processes already.
            let _ = std::fs::write(cg.join("cgroup.kill"), "1");
            for _ in 0..200 {
                if std::fs::remove_dir(cg).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Mounts of `fstype` (`cgroup2`, `cgroup`) from /proc/self/mounts: (mount
/// point, options).
fn cgroup_mounts(fstype: &str) -> Vec<(PathBuf, String)> {
    let Ok(m) = std::fs::read_to_string("/proc/self/mounts") else {
        return Vec::new();
    };
    m.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&fstype) && f.len() > 3)
                .then(|| (PathBuf::from(f[1].replace("\\040", " ")), f[3].to_string()))
        })
        .collect()
}

/// The cgroup v2 hierarchy and the controllers it enables for children.
fn v2() -> Option<(PathBuf, Vec<String>)> {
    let (root, _) = cgroup_mounts("cgroup2").into_iter().next()?;
    let ctl = std::fs::read_to_string(root.join("cgroup.subtree_control")).ok()?;
    Some((root, ctl.split_whitespace().map(str::to_string).collect()))
}

/// The mount point of the cgroup v1 hierarchy with `controller`.
fn v1(controller: &str) -> Option<PathBuf> {
    cgroup_mounts("cgroup")
        .into_iter()
        .find(|(_, o)| o.split(',').any(|x| x == controller))
        .map(|(p, _)| p)
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn new_cgroup(parent: &Path) -> Result<PathBuf> {
    let cg = parent.join(format!(
        "ringfs-exec-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&cg).with_context(|| format!("creating cgroup {}", cg.display()))?;
    Ok(cg)
}

fn set(cg: &Path, file: &str, v: u64) -> Result<()> {
    std::fs::write(cg.join(file), v.to_string())
        .with_context(|| format!("setting {} in {}", file, cg.display()))
}

fn procs(cg: &Path) -> Result<CString> {
    Ok(CString::new(cg.join("cgroup.procs").as_os_str().as_bytes())?)
}

/// Makes the limits asked for (`memory` in bytes, `pids` processes) for a
/// command that runs as `uid`. Errors: a cgroup that cannot be made or set
/// (what was made is removed).
pub(super) fn make(memory: Option<u64>, pids: Option<u64>, uid: u32) -> Result<Limits> {
    let mut l = Limits::default();
    if memory.is_none() && pids.is_none() {
        return Ok(l);
    }
    if let Some((root, ctl)) = v2() {
        let has = |c: &str| ctl.iter().any(|x| x == c);
        if (memory.is_none() || has("memory")) && (pids.is_none() || has("pids")) {
            let cg = new_cgroup(&root)?;
            l.cgroups.push(cg.clone());
            if let Some(m) = memory {
                set(&cg, "memory.max", m)?;
                let _ = set(&cg, "memory.swap.max", 0);
                l.memory_how = Some(format!("cgroup v2 memory.max {m} bytes (all the call's processes together)"));
            }
            if let Some(p) = pids {
                set(&cg, "pids.max", p)?;
                l.pids_how = Some(format!("cgroup v2 pids.max {p} (all the call's processes together)"));
            }
            l.procs.push(procs(&cg)?);
            return Ok(l);
        }
    }
    if let Some(m) = memory {
        if let Some(h) = v1("memory") {
            let cg = new_cgroup(&h)?;
            l.cgroups.push(cg.clone());
            set(&cg, "memory.limit_in_bytes", m)?;
            // With swap accounting, swap counts too (else a limit could be
            // outrun by swapping).
            if cg.join("memory.memsw.limit_in_bytes").exists() {
                set(&cg, "memory.memsw.limit_in_bytes", m)?;
            }
            l.procs.push(procs(&cg)?);
            l.memory_how = Some(format!("cgroup v1 memory.limit_in_bytes {m} bytes (all the call's processes together; this host has no cgroup v2 memory controller)"));
        } else {
            l.rlimits.push((libc::RLIMIT_AS as i32, m));
            l.memory_how = Some(format!("RLIMIT_AS {m} bytes of address space per process (this host has no cgroup memory controller: processes together can use more)"));
        }
    }
    if let Some(p) = pids {
        if let Some(h) = v1("pids") {
            let cg = new_cgroup(&h)?;
            l.cgroups.push(cg.clone());
            set(&cg, "pids.max", p)?;
            l.procs.push(procs(&cg)?);
            l.pids_how = Some(format!("cgroup v1 pids.max {p} (all the call's processes together; this host has no cgroup v2 pids controller)"));
        } else {
            l.rlimits.push((libc::RLIMIT_NPROC as i32, p));
            l.pids_how = Some(format!("RLIMIT_NPROC {p}: processes of uid {uid} on the whole host, this call's and any other's (this host has no cgroup pids controller)"));
        }
    }
    Ok(l)
}
