//! `ringfs commit`, `ringfs log`, `ringfs diff` and `ringfs restore`:
//! snapshots of a workspace (docs/SEMANTICS.md "Snapshots"). On a mount
//! they go through the daemon's control socket (requests `commit`, `log`,
//! `diff`, answered by [`answer`], and `restore`, answered by
//! [`restore_answer`], which also invalidates the kernel's caches, with the
//! JSON documents below); `log --store DIR` reads an unmounted store
//! read-only.
//!
//! JSON shapes (`--json` prints them as the daemon sends them):
//! - commit: `{"id", "created", "parent", "branch", "paths": {"added",
//!   "modified", "removed"}, "objects": {"new", "reused"}, "bytes": {"new",
//!   "reused"}, "journal_position", "journal_records", "changed_inodes",
//!   "phases_ms": {"hash", "flush", "build", "diff", "write", "durable"},
//!   "total_ms"}` (`durable`: the packs' fdatasync and the durable redb
//!   commit; absent when no commit was made);
//! - log: `{"branch", "commits": [{"id", "parents", "root", "time",
//!   "time_nsec", "author", "message", "journal_position"}]}`;
//! - diff: `{"from", "to", "changes": [{"path", "path_b64"?, "change",
//!   "old", "new"}], "total_ms"}`, `old`/`new` null or `{"kind", "mode",
//!   "size"}`, `path_b64` only for a name that is not UTF-8 and the root
//!   as path `""` (docs/FORMATS.md "Path names in JSON"), `total_ms` the
//!   daemon's own time (settling the live tree included);
//! - restore: `{"commit", "paths": {"added", "removed", "rewritten",
//!   "changed"}, "bytes", "kept": [path…], "invalidations", "phases_ms":
//!   {"hash", "flush", "plan", "manifests", "apply", "durable",
//!   "invalidate"}, "total_ms"}` (`bytes`: content of the files made, from
//!   the store's chunks; `kept`: paths left alone (local-only, or another filesystem mounted there);
//!   `invalidations`: kernel cache entries and inodes invalidated).
//!
//! A refusal (unknown commit, no commits yet, a store error) is
//! `{"refused": "one line"}`.

use std::os::unix::ffi::OsStrExt;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use fs_core::snap::diff::Side;
use fs_core::snap::restore::{Inval, RestoreReport};
use fs_core::snap::{CommitOptions, CommitReport, DiffReport, LogEntry};
use fs_core::Fs;

use crate::cli::{CommitArgs, DiffArgs, LogArgs, RestoreArgs};
use crate::{ask, control, plan};

fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// The JSON document of a commit report.
pub fn commit_doc(r: &CommitReport) -> Value {
    let phases: serde_json::Map<String, Value> = r.phases.iter().map(|(k, d)| (k.to_string(), json!(ms(*d)))).collect();
    let total: std::time::Duration = r.phases.iter().map(|(_, d)| *d).sum();
    json!({
        "id": r.id,
        "created": r.created,
        "parent": r.parent,
        "branch": r.branch,
        "paths": { "added": r.added, "modified": r.modified, "removed": r.removed },
        "objects": { "new": r.objects_new, "reused": r.objects_reused },
        "bytes": { "new": r.bytes_new, "reused": r.bytes_reused },
        "journal_position": r.journal_pos,
        "journal_records": r.records,
        "changed_inodes": r.changed_inodes,
        "phases_ms": phases,
        "total_ms": ms(total),
    })
}

fn log_doc(log: &[LogEntry]) -> Value {
    json!({
        "branch": fs_core::snap::MAIN,
        "commits": log.iter().map(|e| json!({
            "id": e.id,
            "parents": e.parents,
            "root": e.root,
            "time": e.time.0,
            "time_nsec": e.time.1,
            "author": e.author,
            "message": e.message,
            "journal_position": e.journal_pos,
        })).collect::<Vec<_>>(),
    })
}

fn side_doc(s: &Option<Side>) -> Value {
    match s {
        Some(s) => json!({ "kind": s.kind.name(), "mode": format!("{:04o}", s.mode), "size": s.size }),
        None => Value::Null,
    }
}

fn diff_doc(d: &DiffReport) -> Value {
    json!({
        "from": d.from,
        "to": d.to,
        "changes": d.changes.iter().map(|c| {
            let mut d = json!({
                "change": c.kind.name(),
                "old": side_doc(&c.old),
                "new": side_doc(&c.new),
            });
            ringfs::exec::put_path(&mut d, &c.path);
            d
        }).collect::<Vec<_>>(),
    })
}

/// The daemon's answer to a `commit`, `log` or `diff` request.
pub fn answer(fs: &Fs, req: &control::Request) -> Value {
    let r = match req {
        control::Request::Commit { message, author, allow_empty } => {
            fs.snapshot_commit(&CommitOptions { message: message.clone(), author: author.clone(), allow_empty: *allow_empty }).map(|r| commit_doc(&r))
        }
        control::Request::Log => fs.snapshot_log().map(|l| log_doc(&l)),
        control::Request::Diff { from, to } => {
            let t = std::time::Instant::now();
            fs.snapshot_diff(from.as_deref(), to.as_deref()).map(|d| {
                let mut doc = diff_doc(&d);
                doc["total_ms"] = json!(ms(t.elapsed()));
                doc
            })
        }
        _ => return json!({ "refused": "not a snapshot request" }),
    };
    r.unwrap_or_else(|e| json!({ "refused": e.to_string() }))
}

/// A reply that is a refusal becomes the error it names.
fn check(v: Value) -> Result<Value> {
    if let Some(why) = v.get("refused").and_then(|x| x.as_str()) {
        bail!("{why}");
    }
    Ok(v)
}

/// `user@host` of the caller, for the commit's author.
fn author() -> String {
    let user = std::env::var("SUDO_USER").or_else(|_| std::env::var("USER")).unwrap_or_else(|_| format!("uid{}", rustix::process::getuid().as_raw()));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "localhost".into());
    format!("{user}@{host}")
}

fn count(v: &Value, a: &str, b: &str) -> u64 {
    v.get(a).and_then(|x| x.get(b)).and_then(|x| x.as_u64()).unwrap_or(0)
}

/// `ringfs commit MOUNTPOINT [-m MSG] [--allow-empty] [--json]`.
pub fn cmd_commit(args: CommitArgs) -> Result<()> {
    let req = control::Request::Commit { message: args.message, author: author(), allow_empty: args.allow_empty };
    let v = check(ask(&args.mountpoint, req)?)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    if v.get("created").and_then(|x| x.as_bool()) != Some(true) {
        println!("nothing changed since commit {} on {}: no commit made (--allow-empty makes one)", s("id"), s("branch"));
        return Ok(());
    }
    println!("commit {} on {}", s("id"), s("branch"));
    println!("  paths:   {} added, {} modified, {} removed", count(&v, "paths", "added"), count(&v, "paths", "modified"), count(&v, "paths", "removed"));
    println!(
        "  objects: {} new ({} bytes), {} reused ({} bytes) — trees and manifests; file contents were stored as chunks when written",
        count(&v, "objects", "new"),
        count(&v, "bytes", "new"),
        count(&v, "objects", "reused"),
        count(&v, "bytes", "reused")
    );
    let phases = v.get("phases_ms").and_then(|p| p.as_object()).map(|m| m.iter().map(|(k, x)| format!("{k} {}", x.as_f64().unwrap_or(0.0))).collect::<Vec<_>>().join(", ")).unwrap_or_default();
    println!("  time:    {} ms ({phases})", v.get("total_ms").and_then(|x| x.as_f64()).unwrap_or(0.0));
    Ok(())
}

/// Year, month, day, hour, minute, second (UTC) of seconds since the
/// epoch (civil-from-days, H. Hinnant); the one calendar conversion of the
/// CLI (`log` dates, the remote status's ISO 8601 times).
pub(crate) fn civil(secs: i64) -> (i64, i64, i64, i64, i64, i64) {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    (y, m, d, rem / 3600, rem / 60 % 60, rem % 60)
}

/// A UTC date for seconds since the epoch: `2026-12-03 02:49:40 UTC`.
fn utc(secs: i64) -> String {
    let (y, m, d, h, mi, s) = civil(secs);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC")
}

/// `ringfs log MOUNTPOINT | --store DIR [--json]`.
pub fn cmd_log(args: LogArgs) -> Result<()> {
    let v = match (&args.mountpoint, &args.store) {
        (Some(mp), None) => check(ask(mp, control::Request::Log)?)?,
        (None, Some(dir)) => {
            plan::store_there("--store", dir)?;
            match fs_core::snap::log_store(dir) {
                Ok(l) => log_doc(&l),
                Err(e) => return Err(plan::store_command_error(e, dir, "log")),
            }
        }
        _ => bail!("give a MOUNTPOINT or --store DIR, not both"),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let commits = v.get("commits").and_then(|c| c.as_array()).cloned().unwrap_or_default();
    if commits.is_empty() {
        println!("no commits yet");
    }
    for c in commits {
        let s = |k: &str| c.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
        println!("commit {}", s("id"));
        println!("Author: {}", s("author"));
        println!("Date:   {}", utc(c.get("time").and_then(|x| x.as_i64()).unwrap_or(0)));
        println!("Journal position: {}", c.get("journal_position").and_then(|x| x.as_u64()).unwrap_or(0));
        println!();
        for line in s("message").lines() {
            println!("    {line}");
        }
        if !s("message").is_empty() {
            println!();
        }
    }
    Ok(())
}

fn side_text(s: &Value) -> String {
    if s.is_null() {
        return String::new();
    }
    let g = |k: &str| s.get(k).map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string())).unwrap_or_default();
    format!("{} {} {}", g("kind"), g("mode"), g("size"))
}

/// `ringfs diff MOUNTPOINT [FROM [TO]] [--json]`, or `ringfs diff --store
/// DIR FROM TO [--json]` on an unmounted store.
pub fn cmd_diff(args: DiffArgs) -> Result<()> {
    let v = match &args.store {
        None => {
            let mp = args.mountpoint.clone().unwrap_or_default();
            check(ask(&mp, control::Request::Diff { from: args.from, to: args.to })?)?
        }
        Some(dir) => {
            // No mountpoint with --store: the positionals are FROM and TO.
            let first = args.mountpoint.map(|p| p.to_string_lossy().into_owned());
            let names: Vec<String> = [first, args.from, args.to].into_iter().flatten().collect();
            let [from, to] = &names[..] else {
                bail!("ringfs diff --store DIR takes two commits, FROM and TO (commit ids or their starts, or branches), got {}", names.len());
            };
            plan::store_there("--store", dir)?;
            let t = std::time::Instant::now();
            match fs_core::snap::diff_store(dir, from, to) {
                Ok(Ok(d)) => {
                    let mut doc = diff_doc(&d);
                    doc["total_ms"] = json!(ms(t.elapsed()));
                    doc
                }
                Ok(Err(e)) => bail!("{e}"),
                Err(e) => return Err(plan::store_command_error(e, dir, "diff")),
            }
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let changes = v.get("changes").and_then(|c| c.as_array()).cloned().unwrap_or_default();
    let mut out = std::io::stdout().lock();
    for c in &changes {
        // The name's exact bytes (`path_b64` when not UTF-8); the root as `.`.
        let mut path = ringfs::exec::path_bytes(c.get("path").and_then(|x| x.as_str()).unwrap_or(""), c.get("path_b64").and_then(|x| x.as_str()));
        if path.is_empty() {
            path = b".".to_vec();
        }
        let (old, new) = (c.get("old").cloned().unwrap_or(Value::Null), c.get("new").cloned().unwrap_or(Value::Null));
        let (k, tail) = match c.get("change").and_then(|x| x.as_str()) {
            Some("added") => ("A", side_text(&new)),
            Some("removed") => ("D", side_text(&old)),
            // Same kind, mode and size: what changed is what the listing
            // does not show (owner, times of a file's content, flags, xattrs).
            _ if side_text(&old) == side_text(&new) => ("M", format!("{}; owner, flags, xattrs or content changed", side_text(&new))),
            _ => ("M", format!("{} -> {}", side_text(&old), side_text(&new))),
        };
        let line = [format!("{k}  ").as_bytes(), &path, format!("  ({tail})\n").as_bytes()].concat();
        std::io::Write::write_all(&mut out, &line)?;
    }
    drop(out);
    eprintln!("{} paths changed from {} to {}", changes.len(), v.get("from").and_then(|x| x.as_str()).unwrap_or(""), v.get("to").and_then(|x| x.as_str()).unwrap_or(""));
    Ok(())
}

/// The JSON document of a restore report; `invalidate` is the time spent
/// telling the kernel (a phase of its own, after fs-core's).
fn restore_doc(r: &RestoreReport, invalidate: std::time::Duration) -> Value {
    let mut phases: serde_json::Map<String, Value> = r.phases.iter().map(|(k, d)| (k.to_string(), json!(ms(*d)))).collect();
    phases.insert("invalidate".into(), json!(ms(invalidate)));
    let total: std::time::Duration = r.phases.iter().map(|(_, d)| *d).sum::<std::time::Duration>() + invalidate;
    json!({
        "commit": r.commit,
        "paths": { "added": r.added, "removed": r.removed, "rewritten": r.rewritten, "changed": r.changed },
        "bytes": r.bytes,
        "kept": r.kept.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect::<Vec<_>>(),
        "invalidations": r.invalidations.len(),
        "phases_ms": phases,
        "total_ms": ms(total),
    })
}

/// The daemon's answer to a `restore` request: the restore, then its
/// invalidations sent to the kernel through `notifier` (fs-core's locks
/// are released by then; an entry or inode the kernel has not cached is
/// no error).
pub fn restore_answer(fs: &Fs, notifier: &fuse_uring::Notifier, mountpoint: &std::path::Path, commit: &str, paths: &[Vec<u8>]) -> Value {
    // Other filesystems mounted inside the workspace (a fork's mount, a
    // bind mount; native roots are local-only anyway): kept, never removed
    // from under their mount.
    let mounts: std::collections::HashSet<Vec<u8>> = crate::mountpoint::mounts()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.mount_point.strip_prefix(mountpoint).ok().filter(|r| !r.as_os_str().is_empty()).map(|r| r.as_os_str().as_bytes().to_vec()))
        .collect();
    let r = match fs.snapshot_restore_keeping(commit, paths, &mounts) {
        Ok(r) => r,
        Err(e) => return json!({ "refused": e.to_string() }),
    };
    let t = std::time::Instant::now();
    for i in &r.invalidations {
        let res = match i {
            Inval::Entry { parent, name } => notifier.inval_entry(*parent, std::ffi::OsStr::from_bytes(name)),
            Inval::Inode(ino) => notifier.inval_inode(*ino, 0, 0),
        };
        if let Err(e) = res {
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::warn!("restore: invalidating {i:?} in the kernel: {e}");
            }
        }
    }
    restore_doc(&r, t.elapsed())
}

/// `ringfs restore MOUNTPOINT COMMIT [--path P]... [--json]`.
pub fn cmd_restore(args: RestoreArgs) -> Result<()> {
    let mp = crate::mountpoint::resolve(&args.mountpoint)?;
    let mut paths = Vec::new();
    for p in &args.paths {
        let rel = if p.is_absolute() {
            match p.strip_prefix(&mp) {
                Ok(r) => r.to_path_buf(),
                Err(_) => bail!("--path {}: not below the mountpoint {}; give it relative to the workspace root", fs_core::printable(p.as_os_str().as_bytes()), mp.display()),
            }
        } else {
            p.clone()
        };
        paths.push(rel.as_os_str().as_bytes().to_vec());
    }
    let v = check(ask(&args.mountpoint, control::Request::Restore { commit: args.commit, paths })?)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("restored commit {}", v.get("commit").and_then(|x| x.as_str()).unwrap_or(""));
    println!(
        "  paths:   {} added, {} removed, {} rewritten, {} changed in place",
        count(&v, "paths", "added"),
        count(&v, "paths", "removed"),
        count(&v, "paths", "rewritten"),
        count(&v, "paths", "changed")
    );
    println!("  content: {} bytes (from the store's chunks; working copies are rebuilt at first open)", v.get("bytes").and_then(|x| x.as_u64()).unwrap_or(0));
    let kept = v.get("kept").and_then(|k| k.as_array()).cloned().unwrap_or_default();
    if !kept.is_empty() {
        let shown: Vec<&str> = kept.iter().take(5).filter_map(|x| x.as_str()).collect();
        println!("  kept:    {} paths left alone: local-only, or mounted on ({}{})", kept.len(), shown.join(", "), if kept.len() > 5 { ", …" } else { "" });
    }
    let phases = v.get("phases_ms").and_then(|p| p.as_object()).map(|m| m.iter().map(|(k, x)| format!("{k} {}", x.as_f64().unwrap_or(0.0))).collect::<Vec<_>>().join(", ")).unwrap_or_default();
    println!("  time:    {} ms ({phases})", v.get("total_ms").and_then(|x| x.as_f64()).unwrap_or(0.0));
    Ok(())
}
