//! Writing a run's report: results.md, results.json, summary.txt and the
//! figures (ratios.svg/.png with the main modes, ratios-all.svg/.png with
//! every mode), from a fresh run or from an earlier run's results.json.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use crate::noise::{self, Verdict};
use crate::report::{self, Summary};
use crate::run::Results;
use crate::{markdown, plot, screen};

/// PNG scale of ratios.png (2 pixels per SVG unit) and ratios-all.png.
pub const PNG_SCALE: f32 = 2.0;
pub const PNG_SCALE_ALL: f32 = 1.5;

/// results.json: the run, its summaries and the noise judgement (both are
/// recomputed when a report is made from the file).
pub fn json_doc(r: &Results, sums: &[Summary], noise: &Verdict) -> Value {
    json!({
        "meta": r.meta,
        "targets": r.targets,
        "rows": r.rows,
        "summary": sums,
        "noise": noise,
        "samples": r.samples,
        "store": r.store,
        "snapshots": r.snapshots,
        "sync": r.sync,
    })
}

/// Read an earlier run's results.json.
pub fn read_results(path: &Path) -> Result<Results> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a ringfs-bench results.json", path.display()))
}

pub struct Written {
    /// The one-screen summary (also in summary.txt).
    pub summary: String,
    pub files: Vec<PathBuf>,
    /// What could not be written and why (a PNG without a renderer's font, say).
    pub warnings: Vec<String>,
}

/// Write the report of `r` into `out` (results.json too when `with_json`).
pub fn write(r: &Results, out: &Path, with_json: bool) -> Result<Written> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let sums = report::summarize(r);
    let verdict = noise::judge(&r.meta, &sums);
    let summary = screen::summary(r, &sums, &verdict);
    let mut files = vec![];
    let mut warnings = vec![];
    let mut put = |name: &str, bytes: &[u8]| -> Result<()> {
        let p = out.join(name);
        std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
        files.push(p);
        Ok(())
    };
    put("results.md", markdown::markdown(r, &sums, &verdict).as_bytes())?;
    if with_json {
        put("results.json", serde_json::to_string_pretty(&json_doc(r, &sums, &verdict))?.as_bytes())?;
    }
    put("summary.txt", summary.as_bytes())?;
    for (name, svg, scale) in [
        ("ratios", plot::main_figure(r, &sums, &verdict), PNG_SCALE),
        ("ratios-all", plot::all_figure(r, &sums, &verdict), PNG_SCALE_ALL),
    ] {
        put(&format!("{name}.svg"), svg.as_bytes())?;
        match plot::png(&svg, scale) {
            Ok(png) => put(&format!("{name}.png"), &png)?,
            Err(e) => warnings.push(format!("{name}.png not written: {e:#}")),
        }
    }
    Ok(Written { summary, files, warnings })
}
