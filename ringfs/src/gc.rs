//! `ringfs gc`: compacts the pack files of a workspace — on a mount through
//! its daemon (control socket request `gc`), or on an unmounted store with
//! `--store DIR` — and prints the packs before and after and the bytes
//! reclaimed.

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::cli::GcArgs;
use crate::{ask, control, plan};

/// A [`fs_core::GcReport`] as the control socket carries it.
pub fn report_doc(r: &fs_core::GcReport) -> Value {
    json!({
        "packs_before": r.packs_before,
        "bytes_before": r.bytes_before,
        "packs_after": r.packs_after,
        "bytes_after": r.bytes_after,
        "packs_compacted": r.packs_compacted,
        "chunks_moved": r.chunks_moved,
        "bytes_moved": r.bytes_moved,
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
        }),
        _ => match v.get("refused").and_then(|x| x.as_str()) {
            Some(why) => bail!("{why}"),
            None => bail!("the daemon answered gc with {v}, not a report (is it an older ringfs? unmount and mount again with this one)"),
        },
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
            if let Some(m) = crate::plan::not_a_store("--store", dir) {
                bail!("{m}");
            }
            match fs_core::gc_store(dir) {
                Ok(r) => r,
                Err(e) => return Err(plan::store_command_error(e, dir, "gc")),
            }
        }
        _ => bail!("give a MOUNTPOINT or --store DIR, not both"),
    };
    println!("packs before: {} ({})", r.packs_before, mib(r.bytes_before));
    println!("packs after:  {} ({})", r.packs_after, mib(r.bytes_after));
    println!(
        "reclaimed:    {} ({} bytes; {} packs compacted, {} chunks of {} moved)",
        mib(r.reclaimed()),
        r.reclaimed(),
        r.packs_compacted,
        r.chunks_moved,
        mib(r.bytes_moved)
    );
    Ok(())
}
