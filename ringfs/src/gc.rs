//! `ringfs gc`: deletes the snapshot objects no ref reaches and compacts
//! the pack files of a workspace — on a mount through its daemon (control
//! socket request `gc`), or on an unmounted store with `--store DIR` — and
//! prints the objects, commits and chunks freed, the packs before and
//! after and the bytes reclaimed (`--json`: [`report_doc`]).

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::cli::GcArgs;
use crate::{ask, control, plan};

/// A [`fs_core::GcReport`] as the control socket carries it and `ringfs
/// gc --json` prints it: `snapshots` (objects kept and deleted, commits
/// deleted, chunks freed and their bytes, chunk references dropped, its
/// time in ms), then the compaction's pack counts and bytes.
pub fn report_doc(r: &fs_core::GcReport) -> Value {
    let s = &r.snapshots;
    json!({
        "snapshots": {
            "objects_kept": s.objects_kept,
            "objects_deleted": s.objects_deleted,
            "commits_deleted": s.commits_deleted,
            "chunks_freed": s.chunks_freed,
            "chunk_bytes_freed": s.chunk_bytes_freed,
            "refs_dropped": s.refs_dropped,
            "ms": s.time.as_secs_f64() * 1000.0,
        },
        "packs_before": r.packs_before,
        "bytes_before": r.bytes_before,
        "packs_after": r.packs_after,
        "bytes_after": r.bytes_after,
        "packs_compacted": r.packs_compacted,
        "chunks_moved": r.chunks_moved,
        "bytes_moved": r.bytes_moved,
        "shared_bytes_before": r.shared_before,
        "shared_bytes_after": r.shared_after,
        "packs_shared_kept": r.packs_shared_kept,
        "reclaimed": r.reclaimed(),
    })
}

fn from_doc(v: &Value) -> Result<fs_core::GcReport> {
    let g = |k: &str| v.get(k).and_then(|x| x.as_u64());
    match (g("packs_before"), g("bytes_before"), g("packs_after"), g("bytes_after")) {
        (Some(pb), Some(bb), Some(pa), Some(ba)) => Ok(fs_core::GcReport {
            packs_before: pb,
            bytes_before: bb,
            packs_after: pa,
            bytes_after: ba,
            packs_compacted: g("packs_compacted").unwrap_or(0),
            chunks_moved: g("chunks_moved").unwrap_or(0),
            bytes_moved: g("bytes_moved").unwrap_or(0),
            shared_before: g("shared_bytes_before").unwrap_or(0),
            shared_after: g("shared_bytes_after").unwrap_or(0),
            packs_shared_kept: g("packs_shared_kept").unwrap_or(0),
            snapshots: snap_from_doc(&v["snapshots"]),
        }),
        _ => match v.get("refused").and_then(|x| x.as_str()) {
            Some(why) => bail!("{why}"),
            None => bail!("the daemon answered gc with {v}, not a report (is it an older ringfs? unmount and mount again with this one)"),
        },
    }
}

/// The `snapshots` part of [`report_doc`] (zeros from an older daemon).
fn snap_from_doc(v: &Value) -> fs_core::SnapGcReport {
    let g = |k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
    fs_core::SnapGcReport {
        objects_kept: g("objects_kept"),
        objects_deleted: g("objects_deleted"),
        commits_deleted: g("commits_deleted"),
        chunks_freed: g("chunks_freed"),
        chunk_bytes_freed: g("chunk_bytes_freed"),
        refs_dropped: g("refs_dropped"),
        time: std::time::Duration::from_secs_f64(v.get("ms").and_then(|x| x.as_f64()).unwrap_or(0.0).max(0.0) / 1000.0),
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// `ringfs gc MOUNTPOINT` or `ringfs gc --store DIR`.
pub fn cmd_gc(args: GcArgs) -> Result<()> {
    let r = match (&args.mountpoint, &args.store) {
        (Some(mp), None) => from_doc(&ask(mp, control::Request::Gc)?)?,
        (None, Some(dir)) => {
            crate::plan::store_there("--store", dir)?;
            match fs_core::gc_store(dir) {
                Ok(r) => r,
                Err(e) => return Err(plan::store_command_error(e, dir, "gc")),
            }
        }
        _ => bail!("give a MOUNTPOINT or --store DIR, not both"),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report_doc(&r))?);
        return Ok(());
    }
    let s = &r.snapshots;
    println!(
        "snapshots:    {} objects deleted ({} commits), {} kept; {} chunks ({}) freed, in {:.1} ms",
        s.objects_deleted,
        s.commits_deleted,
        s.objects_kept,
        s.chunks_freed,
        mib(s.chunk_bytes_freed),
        s.time.as_secs_f64() * 1000.0
    );
    let shared = |b: u64| if b > 0 { format!(", {} of it in packs another store links too", mib(b)) } else { String::new() };
    println!("packs before: {} ({}{})", r.packs_before, mib(r.bytes_before), shared(r.shared_before));
    println!("packs after:  {} ({}{})", r.packs_after, mib(r.bytes_after), shared(r.shared_after));
    println!(
        "reclaimed:    {} ({} bytes; {} packs compacted, {} chunks of {} moved)",
        mib(r.reclaimed()),
        r.reclaimed(),
        r.packs_compacted,
        r.chunks_moved,
        mib(r.bytes_moved)
    );
    if r.packs_shared_kept > 0 {
        println!(
            "shared:       {} packs with dead bytes left as they are: another store (a fork or its origin) links them, so compacting would copy their live chunks, not free space (compacted once the other store no longer links them)",
            r.packs_shared_kept
        );
    }
    Ok(())
}
