//! `ringfs branch`, `ringfs fork`, and what `ringfs mount --branch` and
//! `--at` do before serving (docs/SEMANTICS.md "Snapshots", DECISIONS
//! D35). On a mount, branch and fork go through the daemon's control
//! socket (requests `branch` and `fork`, answered by [`answer`]); with
//! `--store DIR` they work on an unmounted store, its lock held.
//!
//! JSON shapes (`--json`):
//! - branch: `{"done": "one line" (absent for a list), "branches": [{"name",
//!   "head", "current"}]}`;
//! - fork: `{"store", "commit", "branch", "files", "dirs", "objects",
//!   "chunks", "packs_linked", "new_bytes", "fork_ms", "phases_ms": {"objects",
//!   "tree", "chunks", "commit", "rename"}, "mounted" (null or
//!   the mountpoint), "mount_ms"}`.
//!
//! A refusal is `{"refused": "one line"}`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};

use fs_core::snap::materialize::ForkReport;
use fs_core::snap::refs::{BranchOp, BranchReport, BranchStoreError};
use fs_core::Fs;

use crate::cli::{BranchArgs, ForkArgs, MountArgs};
use crate::{ask, control, mountpoint, plan};

fn branch_doc(r: &BranchReport) -> Value {
    json!({
        "done": r.done,
        "branches": r.branches.iter().map(|b| json!({ "name": b.name, "head": b.head, "current": b.current })).collect::<Vec<_>>(),
    })
}

fn fork_doc(r: &ForkReport) -> Value {
    json!({
        "store": r.store,
        "commit": r.commit,
        "branch": r.branch,
        "files": r.files,
        "dirs": r.dirs,
        "objects": r.objects,
        "chunks": r.chunks,
        "packs_linked": r.packs_linked,
        "new_bytes": r.new_bytes,
        "fork_ms": (r.elapsed.as_secs_f64() * 1e6).round() / 1e3,
        "phases_ms": r.phases.iter().map(|(k, d)| (k.to_string(), json!((d.as_secs_f64() * 1e6).round() / 1e3))).collect::<serde_json::Map<String, Value>>(),
    })
}

fn op_of(action: &str, name: Option<String>, from: Option<String>, force: bool) -> Result<BranchOp, String> {
    Ok(match (action, name) {
        ("list", _) => BranchOp::List,
        ("create", Some(name)) => BranchOp::Create { name, from, force },
        ("delete", Some(name)) => BranchOp::Delete { name },
        _ => return Err(format!("bad branch request {action:?}")),
    })
}

/// The daemon's answer to a `branch` or `fork` request.
pub fn answer(fs: &Fs, req: &control::Request) -> Value {
    let r = match req {
        control::Request::Branch { action, name, from, force } => match op_of(action, name.clone(), from.clone(), *force) {
            Ok(op) => fs.snapshot_branch(&op).map(|r| branch_doc(&r)).map_err(|e| e.to_string()),
            Err(e) => Err(e),
        },
        control::Request::Fork { at, to } => fs.snapshot_fork(at.as_deref(), to).map(|r| fork_doc(&r)).map_err(|e| e.to_string()),
        _ => Err("not a branch request".into()),
    };
    r.unwrap_or_else(|e| json!({ "refused": e }))
}

fn check(v: Value) -> Result<Value> {
    if let Some(why) = v.get("refused").and_then(|x| x.as_str()) {
        bail!("{why}");
    }
    Ok(v)
}

fn store_err(e: BranchStoreError, dir: &Path, cmd: &str) -> anyhow::Error {
    match e {
        BranchStoreError::Store(e) => plan::store_command_error(e, dir, cmd),
        BranchStoreError::Snap(e) => anyhow!("{e}"),
    }
}

/// `ringfs branch MOUNTPOINT|--store DIR NAME [FROM] [--force] | --list | -d NAME`.
pub fn cmd_branch(args: BranchArgs) -> Result<()> {
    let action = if args.list {
        "list"
    } else if args.delete {
        "delete"
    } else {
        "create"
    };
    let mut rest: Vec<String> = args.args.clone();
    let mp = if args.store.is_none() {
        if rest.is_empty() {
            bail!("give a MOUNTPOINT or --store DIR (ringfs branch --help)");
        }
        Some(PathBuf::from(rest.remove(0)))
    } else {
        None
    };
    let mut rest = rest.into_iter();
    let (name, from) = (rest.next(), rest.next());
    if rest.next().is_some() || (args.list && name.is_some()) || (args.delete && from.is_some()) {
        bail!("too many arguments: ringfs branch MOUNTPOINT|--store DIR NAME [FROM] | --list | -d NAME");
    }
    if !args.list && name.is_none() {
        bail!("give the branch NAME (or --list)");
    }
    let v = match (&mp, &args.store) {
        (Some(mp), None) => {
            let req = control::Request::Branch { action: action.into(), name, from, force: args.force };
            check(ask(mp, req)?)?
        }
        (None, Some(dir)) => {
            plan::store_there("--store", dir)?;
            let op = op_of(action, name, from, args.force).map_err(|e| anyhow!(e))?;
            branch_doc(&fs_core::snap::refs::branch_store(dir, &op).map_err(|e| store_err(e, dir, "branch"))?)
        }
        _ => bail!("give a MOUNTPOINT or --store DIR, not both"),
    };
    if args.json {
        let mut v = v;
        // A list did nothing: no "done" line.
        if v.get("done").and_then(|d| d.as_str()) == Some("") {
            v.as_object_mut().map(|o| o.remove("done"));
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if let Some(done) = v.get("done").and_then(|d| d.as_str()).filter(|d| !d.is_empty()) {
        println!("{done}");
    }
    if args.list {
        let branches = v.get("branches").and_then(|b| b.as_array()).cloned().unwrap_or_default();
        if branches.is_empty() {
            println!("no branches yet (the first commit makes main)");
        }
        for b in branches {
            let cur = b.get("current").and_then(|c| c.as_bool()) == Some(true);
            let s = |k: &str| b.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
            println!("{} {} {}", if cur { "*" } else { " " }, s("name"), &s("head")[..s("head").len().min(16)]);
        }
    }
    Ok(())
}

/// Splits `X@AT` (AT a commit or branch): a path that exists as given is
/// taken whole.
fn split_at(s: &str) -> (String, Option<String>) {
    if Path::new(s).exists() {
        return (s.to_string(), None);
    }
    match s.rsplit_once('@') {
        Some((p, at)) if !at.is_empty() && !at.contains('/') => (p.to_string(), Some(at.to_string())),
        _ => (s.to_string(), None),
    }
}

/// An absolute path for `p` (which may not exist yet): its parent resolved.
fn absolute(p: &Path) -> Result<PathBuf> {
    let p = if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir()?.join(p) };
    let name = p.file_name().ok_or_else(|| anyhow!("{} names no directory", p.display()))?.to_owned();
    let parent = p.parent().unwrap_or(Path::new("/"));
    let parent = parent.canonicalize().map_err(|e| anyhow!("{}: {e}: create it first", parent.display()))?;
    Ok(parent.join(name))
}

/// `ringfs fork SOURCE[@AT] --to NEWMNT [--new-store NEWDIR] [--no-mount]`.
pub fn cmd_fork(args: ForkArgs) -> Result<()> {
    let t = Instant::now();
    let (mounted, origin, at) = match (&args.mountpoint, &args.store) {
        (Some(m), None) => {
            let (p, at) = split_at(m);
            (true, PathBuf::from(p), at)
        }
        (None, Some(s)) => {
            let (p, at) = split_at(s);
            (false, PathBuf::from(p), at)
        }
        _ => bail!("give a MOUNTPOINT or --store DIR, not both"),
    };
    // Everything checked before anything is made.
    let origin_store = if mounted {
        let status = ask(&origin, control::Request::Status)?;
        let s = status.get("store").and_then(|s| s.as_str()).unwrap_or("memory").to_string();
        if s == "memory" {
            bail!("{} is a memory workspace: a fork shares a durable store's packs (mount with --store DIR to fork)", origin.display());
        }
        PathBuf::from(s)
    } else {
        plan::store_there("--store", &origin)?;
        origin.canonicalize()?
    };
    let to = match &args.to {
        // `-o nonempty` as `ringfs mount -o nonempty` takes it.
        Some(to) if !args.no_mount => Some(mountpoint::check_mountable(to, args.options.iter().flat_map(|o| o.split(',')).any(|o| o == "nonempty"))?),
        _ => None,
    };
    let new_store = match (&args.new_store, &to) {
        (Some(n), _) => absolute(n)?,
        (None, Some(to)) => {
            let name = to.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "fork".into());
            let mut s = origin_store.as_os_str().to_owned();
            s.push(format!(".fork-{name}"));
            PathBuf::from(s)
        }
        (None, None) => bail!("--no-mount needs --new-store NEWDIR"),
    };
    fs_core::snap::materialize::check_dest(&new_store).map_err(|e| match args.new_store {
        Some(_) => anyhow!("--new-store: {e}"),
        None => anyhow!("the default new store: {e} (or give --new-store NEWDIR)"),
    })?;
    if let Some(to) = &to {
        if new_store.starts_with(to) || to.starts_with(&new_store) {
            bail!("--new-store {} and --to {} are inside one another: give them separate places", new_store.display(), to.display());
        }
    }
    let mut v = if mounted {
        check(ask(&origin, control::Request::Fork { at: at.clone(), to: new_store.clone() })?)?
    } else {
        fork_doc(&fs_core::snap::materialize::fork_store(&origin, at.as_deref(), &new_store).map_err(|e| store_err(e, &origin, "fork"))?)
    };
    let forked = t.elapsed();
    v["mounted"] = Value::Null;
    if let Some(to) = &to {
        let t = Instant::now();
        let mut cmd = std::process::Command::new(std::env::current_exe()?);
        cmd.arg("mount").arg(to).arg("--store").arg(&new_store).arg("--daemon");
        for o in &args.options {
            cmd.arg("-o").arg(o);
        }
        let out = cmd.stdin(std::process::Stdio::null()).output()?;
        if !out.status.success() {
            bail!(
                "the fork was made in {} but mounting it failed: {}; mount it with `ringfs mount {} --store {}`",
                new_store.display(),
                String::from_utf8_lossy(&out.stderr).trim(),
                to.display(),
                new_store.display()
            );
        }
        v["mounted"] = json!(to);
        v["mount_ms"] = json!((t.elapsed().as_secs_f64() * 1e6).round() / 1e3);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let g = |k: &str| v.get(k).map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string())).unwrap_or_default();
    let n = |k: &str, one: &str, many: &str| fs_core::count(v.get(k).and_then(Value::as_u64).unwrap_or(0), one, many);
    println!(
        "forked commit {} (branch {}) into {} in {:.1} ms: {}, {}; {} shared, {} KiB new",
        &g("commit")[..g("commit").len().min(16)],
        g("branch"),
        new_store.display(),
        forked.as_secs_f64() * 1e3,
        n("files", "file", "files"),
        n("dirs", "directory", "directories"),
        n("packs_linked", "pack", "packs"),
        v.get("new_bytes").and_then(|b| b.as_u64()).unwrap_or(0) / 1024
    );
    if let Some(to) = &to {
        println!("mounted {} in {} ms", to.display(), g("mount_ms"));
    } else {
        println!("mount it with `ringfs mount NEWMNT --store {}`", new_store.display());
    }
    Ok(())
}

/// The temporary store `ringfs mount --at` serves, removed when dropped
/// (at unmount; after a crash, by the next `--at` mount of its origin).
pub struct AtStore {
    path: PathBuf,
}

impl Drop for AtStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// What a `mount --at` view at `mp` (of full commit id `commit` of store
/// `origin`) says when it refuses something: the view, then `tail` (what
/// is refused and why), then the fork that keeps work from that commit.
pub fn at_view_line(mp: &Path, commit: &str, origin: &Path, tail: &str) -> String {
    let short = &commit[..commit.len().min(16)];
    let o = origin.display();
    format!(
        "{} is `ringfs mount --at {short}`, a read-only view of commit {short} of store {o} served from a temporary copy removed at unmount: {tail}; to work from that commit, fork it: ringfs fork --store {o}@{short} --to NEWMNT",
        mp.display()
    )
}

/// The `--at` view a daemon's status document (`at`: commit, store)
/// describes, if it serves one.
pub fn at_view_of(status: &Value) -> Option<(String, PathBuf)> {
    let at = status.get("at").filter(|a| a.is_object())?;
    Some((at["commit"].as_str()?.to_string(), PathBuf::from(at["store"].as_str()?)))
}

/// `ringfs mount --at COMMIT --read-only --store DIR`: forks COMMIT into
/// `DIR/../.NAME.at-PID` and returns the mount's arguments with that store.
pub fn at_store(args: &MountArgs) -> Result<Option<(MountArgs, AtStore)>> {
    let Some(at) = &args.at else { return Ok(None) };
    if !crate::options::Vfs::parse(args, crate::options::Vfs::default())?.read_only {
        bail!("--at mounts a commit read-only: add --read-only (to write from a commit, fork it: `ringfs fork --store DIR@{at} --to NEWMNT`)");
    }
    let dir = args.store.as_ref().ok_or_else(|| anyhow!("--at needs --store DIR"))?;
    plan::store_there("--store", dir)?;
    let dir = dir.canonicalize()?;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "store".into());
    let prefix = format!(".{name}.at-");
    // Left by a daemon killed while serving one.
    if let Ok(rd) = std::fs::read_dir(dir.parent().unwrap_or(Path::new("/"))) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = n.strip_prefix(&prefix).and_then(|p| p.parse::<u32>().ok()) {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
    let tmp = dir.with_file_name(format!("{prefix}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let commit = match fs_core::snap::materialize::fork_store(&dir, Some(at), &tmp) {
        Ok(r) => r.commit,
        Err(BranchStoreError::Store(fs_core::StoreError::Locked { .. })) => bail!(
            "store {} is in use by a running daemon: browse a commit of a mounted workspace with `ringfs fork MOUNTPOINT@{at} --to NEWMNT -o ro`",
            dir.display()
        ),
        Err(e) => return Err(store_err(e, &dir, "mount --at")),
    };
    let guard = AtStore { path: tmp.clone() };
    let mut a = args.clone();
    a.store = Some(tmp);
    a.at = None;
    a.at_view = Some((commit, dir));
    Ok(Some((a, guard)))
}

/// `ringfs mount --branch NAME --store DIR`: the store checked out on NAME
/// before it is opened ([`fs_core::snap::switch::switch_store`]).
pub fn switch_branch(args: &MountArgs) -> Result<()> {
    let (Some(name), Some(dir)) = (&args.branch, &args.store) else { return Ok(()) };
    if std::fs::metadata(dir.join("store.redb")).map(|m| m.len() == 0).unwrap_or(true) {
        bail!("--branch {name}: {} holds no store yet (a new store starts on main; make branches with `ringfs branch`)", dir.display());
    }
    match fs_core::snap::switch::switch_store(dir, name) {
        Ok(r) if r.switched => {
            tracing::info!("switched {} from branch {} to {} (commit {}, {} files)", dir.display(), r.from, r.to, r.commit, r.files);
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(BranchStoreError::Store(e)) => Err(plan::explain_store_error(e, "--store")),
        Err(BranchStoreError::Snap(e)) if name.len() >= 4 && fs_core::snap::refs::all_hex(name) => Err(anyhow!(
            "--branch {name}: {e} (--branch takes a branch name; for a commit: browse it with `--at {name} --read-only`, or name it first: `ringfs branch --store {} NAME {name}`)",
            dir.display()
        )),
        Err(BranchStoreError::Snap(e)) => Err(anyhow!("--branch {name}: {e}")),
    }
}
