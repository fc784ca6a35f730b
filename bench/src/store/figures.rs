//! What the store section measured: one [`Figure`] per number, ext4 beside
//! ringfs, with its target and whether it was met. Written into results.json
//! as `store` and read back by `ringfs-bench report --from`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::noise::LoadPoint;

/// A target a figure is held to (issue 12's targets), decided when measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Target {
    /// What is required, e.g. "≤ ×3 ext4", "≤ 128 MiB", "= 0".
    pub text: String,
    /// Met (true), missed (false), or not decidable (a side failed: None).
    pub pass: Option<bool>,
}

/// One measured number of the store section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    /// Stable key, e.g. "fsync-256MiB-median", "rss-mixed-hwm".
    pub key: String,
    /// What it is, e.g. "4 KiB write + fsync, 256 MiB file, median".
    pub title: String,
    /// "ms", "s", "MiB", "GiB", "count" or "ok" (1 = ok, 0 = not ok).
    pub unit: String,
    /// The figure on the ext4 directory, when it has one there.
    pub ext4: Option<f64>,
    /// The figure on ringfs (default mode).
    pub ringfs: Option<f64>,
    pub target: Option<Target>,
    /// Why a side has no value (its workload failed), one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Figure {
    /// A figure without a target.
    pub fn new(key: impl Into<String>, title: impl Into<String>, unit: &str, ext4: Option<f64>, ringfs: Option<f64>) -> Figure {
        Figure { key: key.into(), title: title.into(), unit: unit.into(), ext4, ringfs, target: None, error: None }
    }

    /// ringfs ÷ ext4 (None without both or with a zero ext4).
    pub fn ratio(&self) -> Option<f64> {
        match (self.ringfs, self.ext4) {
            (Some(r), Some(e)) if e > 0.0 => Some(r / e),
            _ => None,
        }
    }

    /// Target: ringfs ≤ `x` × ext4.
    pub fn ratio_at_most(mut self, x: f64) -> Figure {
        let pass = self.ratio().map(|r| r <= x);
        self.target = Some(Target { text: format!("≤ ×{x} ext4"), pass });
        self
    }

    /// Target: ringfs ≤ `limit` (in the figure's unit), `text` saying it.
    pub fn at_most(mut self, limit: f64, text: impl Into<String>) -> Figure {
        let pass = self.ringfs.map(|v| v <= limit);
        self.target = Some(Target { text: text.into(), pass });
        self
    }

    /// Target: ringfs is exactly `want` (a count, or 1 for "ok").
    pub fn equals(mut self, want: f64, text: impl Into<String>) -> Figure {
        let pass = self.ringfs.map(|v| v == want);
        self.target = Some(Target { text: text.into(), pass });
        self
    }

    pub fn with_error(mut self, e: Option<String>) -> Figure {
        self.error = e;
        self
    }
}

/// The load average around the store section (its workloads are long, so it
/// says its own load besides the run's).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SectionLoad {
    pub cores: usize,
    pub before: Option<[f64; 3]>,
    pub during: Vec<LoadPoint>,
    pub after: Option<[f64; 3]>,
}

impl SectionLoad {
    /// "load (1-min, 2 cores) during the store section: 1.20 before · 2.10 max · 1.90 after"
    pub fn line(&self) -> String {
        let f = |x: Option<[f64; 3]>| x.map_or("?".to_string(), |x| format!("{:.2}", x[0]));
        let max = self.during.iter().map(|p| p.avg[0]).max_by(f64::total_cmp);
        let busy = self.before.into_iter().chain(self.after).map(|x| x[0]).chain(max).any(|x| self.cores > 0 && x > self.cores as f64);
        format!(
            "load (1-min, {} cores) in the section: {} before · {} max during · {} after{}",
            self.cores,
            f(self.before),
            max.map_or("?".into(), |m| format!("{m:.2}")),
            f(self.after),
            if busy { " — over the cores: noisy timings" } else { "" }
        )
    }
}

/// The store section of a run: the figures and what they ran on.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StoreSection {
    /// Which section: "store" (issue 12), "snapshots" (issue 13; its
    /// ext4 column is git or `cp -a` on an ext4 directory) or "sync"
    /// (issue 14; its ext4 column is the reference: raw object_store, or
    /// the local-only variant; `ext4_fs` then names the server).
    #[serde(default = "store_kind")]
    pub kind: String,
    /// "tiny", "quick" or "full".
    pub profile: String,
    /// The sizes used (fsync file sizes, database MB, file counts…), for the record.
    pub sizes: BTreeMap<String, serde_json::Value>,
    /// The ext4 side: a plain directory on this filesystem (mountinfo type).
    pub ext4_fs: String,
    /// The ringfs side: `ringfs mount` arguments and what the daemon reported.
    pub ringfs_args: Vec<String>,
    pub ringfs_effective: serde_json::Value,
    pub load: SectionLoad,
    pub duration_s: f64,
    pub figures: Vec<Figure>,
    /// Workloads that could not run at all, one line each.
    pub errors: Vec<String>,
}

fn store_kind() -> String {
    "store".into()
}

impl StoreSection {
    /// The section's title and issue: ("store", "issue 12") or ("snapshots", "issue 13").
    pub fn name(&self) -> (&str, &str) {
        match self.kind.as_str() {
            "snapshots" => ("snapshots", "issue 13"),
            "sync" => ("sync", "issue 14"),
            _ => ("store", "issue 12"),
        }
    }

    /// (met, missed, undecided) over the figures with a target.
    pub fn tally(&self) -> (usize, usize, usize) {
        let t: Vec<Option<bool>> = self.figures.iter().filter_map(|f| f.target.as_ref().map(|t| t.pass)).collect();
        (t.iter().filter(|p| **p == Some(true)).count(), t.iter().filter(|p| **p == Some(false)).count(), t.iter().filter(|p| p.is_none()).count())
    }
}

/// A figure's value in its unit: "0.84", "1.07 GiB"… ("–" for none).
pub fn fmt_value(unit: &str, v: Option<f64>) -> String {
    let Some(v) = v else { return "–".into() };
    match unit {
        "ok" => if v == 1.0 { "ok".into() } else { "NOT OK".into() },
        "count" => format!("{v:.0}"),
        u => {
            let n = if v >= 100.0 {
                format!("{v:.0}")
            } else if v >= 10.0 {
                format!("{v:.1}")
            } else if v >= 1.0 || v == 0.0 {
                format!("{v:.2}")
            } else {
                format!("{v:.3}")
            };
            format!("{n} {u}")
        }
    }
}

/// "PASS", "FAIL", "?" or "" (no target).
pub fn pass_mark(f: &Figure) -> &'static str {
    match &f.target {
        None => "",
        Some(Target { pass: Some(true), .. }) => "PASS",
        Some(Target { pass: Some(false), .. }) => "FAIL",
        Some(Target { pass: None, .. }) => "?",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_decide() {
        let f = Figure::new("k", "t", "ms", Some(1.0), Some(2.5)).ratio_at_most(3.0);
        assert_eq!(pass_mark(&f), "PASS");
        let f = Figure::new("k", "t", "MiB", None, Some(200.0)).at_most(128.0, "≤ 128 MiB");
        assert_eq!(pass_mark(&f), "FAIL");
        let f = Figure::new("k", "t", "count", Some(0.0), None).equals(0.0, "= 0");
        assert_eq!(pass_mark(&f), "?");
        assert_eq!(fmt_value("ok", Some(1.0)), "ok");
        assert_eq!(fmt_value("ms", Some(0.8432)), "0.843 ms");
        assert_eq!(fmt_value("ms", Some(2.5)), "2.50 ms");
        assert_eq!(fmt_value("GiB", Some(9.71)), "9.71 GiB");
    }
}
