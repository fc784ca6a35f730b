//! How noisy a run was, said plainly: the load average before, during
//! (sampled) and after the run, the spread of the raw-disk samples of every
//! row, which rows' ratios cannot be trusted, and whether to rerun.
//!
//! The rules (README, `ringfs-bench --help` and docs/DECISIONS.md D22 say the same):
//!
//! - spread of a set of samples: max / min;
//! - a ratio's min–max range: [min of the mode ÷ max of raw disk, max of the
//!   mode ÷ min of raw disk], the extremes any pairing of samples gives;
//! - a row is flagged (its ratios untrustworthy) when its raw-disk spread is
//!   over [`RAW_SPREAD_MAX`] (×1.5: raw disk is every ratio's denominator), or
//!   when the ranges of at least [`STRADDLE_MODES`] modes straddle 1.0 widely
//!   (reach below 1/[`STRADDLE`] and above [`STRADDLE`]: the samples alone could
//!   say "×1.5 faster" and "×1.5 slower");
//! - "rerun on a quiet machine" when more than [`RERUN_ROWS`] rows are flagged,
//!   or the 1-minute load average before the run, or the median of those sampled
//!   during it, exceeded the number of cores. The load after the run is reported
//!   but not judged: it is mostly the run's own last minute.
//! - a cell's spread marker: `~` when its ratio range is over ×1.5 wide
//!   ([`WIDE`]), `!` when over ×3 ([`VERY_WIDE`]).

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::report::Summary;

pub const RAW_SPREAD_MAX: f64 = 1.5;
pub const STRADDLE: f64 = 1.5;
pub const STRADDLE_MODES: usize = 2;
pub const RERUN_ROWS: usize = 3;
pub const WIDE: f64 = 1.5;
pub const VERY_WIDE: f64 = 3.0;
/// How often the load average is sampled during a run.
pub const LOAD_INTERVAL: Duration = Duration::from_secs(10);

/// The 1-, 5- and 15-minute load averages of a /proc/loadavg line.
pub fn parse_loadavg(s: &str) -> Option<[f64; 3]> {
    let v: Vec<f64> = s.split_whitespace().take(3).map(str::parse::<f64>).collect::<Result<_, _>>().ok()?;
    (v.len() == 3).then(|| [v[0], v[1], v[2]])
}

pub fn read_loadavg() -> Option<[f64; 3]> {
    parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct LoadPoint {
    /// Seconds since the run started.
    pub t_s: f64,
    pub avg: [f64; 3],
}

/// The load averages of a run (results.json `meta.load`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Load {
    pub cores: usize,
    pub before: Option<[f64; 3]>,
    pub during: Vec<LoadPoint>,
    pub after: Option<[f64; 3]>,
    pub interval_s: Option<f64>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

impl Load {
    /// From a results.json `meta`: `meta.load`, or for runs before it was
    /// recorded, `machine.loadavg_start`/`loadavg_end` (nothing during).
    pub fn from_meta(meta: &Value) -> Load {
        if let Ok(l) = serde_json::from_value::<Load>(meta["load"].clone()) {
            return l;
        }
        let m = &meta["machine"];
        Load {
            cores: m["cpus"].as_u64().unwrap_or(0) as usize,
            before: m["loadavg_start"].as_str().and_then(parse_loadavg),
            during: vec![],
            after: m["loadavg_end"].as_str().and_then(parse_loadavg),
            interval_s: None,
        }
    }

    pub fn during_median(&self) -> Option<f64> {
        median(self.during.iter().map(|p| p.avg[0]).collect())
    }

    pub fn during_max(&self) -> Option<f64> {
        self.during.iter().map(|p| p.avg[0]).max_by(f64::total_cmp)
    }

    /// Why the load says "rerun", if it does.
    pub fn too_busy(&self) -> Option<String> {
        let cores = self.cores as f64;
        if self.cores == 0 {
            return None;
        }
        if let Some(b) = self.before.filter(|b| b[0] > cores) {
            return Some(format!("load {:.2} before the run exceeded the {} cores", b[0], self.cores));
        }
        if let Some(d) = self.during_median().filter(|d| *d > cores) {
            return Some(format!("load {d:.2} (median during the run) exceeded the {} cores", self.cores));
        }
        None
    }

    /// `load (1-min average, 2 cores): 1.49 before · 1.80 median, 2.61 max during (254 samples) · 2.12 after`
    pub fn line(&self) -> String {
        let f = |x: Option<[f64; 3]>| x.map_or("?".to_string(), |x| format!("{:.2}", x[0]));
        let during = match (self.during_median(), self.during_max()) {
            (Some(med), Some(max)) => format!("{med:.2} median, {max:.2} max during ({} samples)", self.during.len()),
            _ => "not sampled during".into(),
        };
        format!("load (1-min average, {} cores): {} before · {during} · {} after", self.cores, f(self.before), f(self.after))
    }
}

/// Samples /proc/loadavg every `every` on a thread of its own until stopped.
pub struct LoadSampler {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<Vec<LoadPoint>>,
}

impl LoadSampler {
    pub fn start(every: Duration) -> LoadSampler {
        let (stop, rx) = mpsc::channel::<()>();
        let t0 = Instant::now();
        let thread = std::thread::spawn(move || {
            let mut v = vec![];
            // Ends on stop() or when the sender is dropped.
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
                if let Some(avg) = read_loadavg() {
                    v.push(LoadPoint { t_s: (t0.elapsed().as_secs_f64() * 10.0).round() / 10.0, avg });
                }
            }
            v
        });
        LoadSampler { stop, thread }
    }

    pub fn stop(self) -> Vec<LoadPoint> {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_default()
    }
}

/// [min ÷ raw max, max ÷ raw min]: the extreme ratios any pairing of samples gives.
pub fn ratio_range(s: &Summary, raw: &Summary) -> Option<(f64, f64)> {
    let (lo, hi, rlo, rhi) = (s.min_ms?, s.max_ms?, raw.min_ms?, raw.max_ms?);
    (rlo > 0.0 && rhi > 0.0).then(|| (lo / rhi, hi / rlo))
}

/// Max / min of a summary's samples (None without samples or with a zero).
pub fn spread(s: &Summary) -> Option<f64> {
    let (lo, hi) = (s.min_ms?, s.max_ms?);
    (lo > 0.0).then(|| hi / lo)
}

/// The spread marker of a ratio: "" within ×1.5, "~" within ×3, "!" beyond.
pub fn marker(range: Option<(f64, f64)>) -> &'static str {
    match range {
        Some((lo, hi)) if lo > 0.0 && hi / lo > VERY_WIDE => "!",
        Some((lo, hi)) if lo > 0.0 && hi / lo > WIDE => "~",
        _ => "",
    }
}

/// Does a ratio range straddle 1.0 widely (below 1/1.5 and above 1.5)?
pub fn straddles(range: (f64, f64)) -> bool {
    range.0 < 1.0 / STRADDLE && range.1 > STRADDLE
}

/// One row (section, row, phase) that has raw-disk samples.
#[derive(Debug, Clone, Serialize)]
pub struct RowNoise {
    pub section: String,
    pub row: String,
    pub phase: String,
    pub raw_n: usize,
    pub raw_min_ms: Option<f64>,
    pub raw_median_ms: Option<f64>,
    pub raw_max_ms: Option<f64>,
    /// Raw disk max / min (None with fewer than 2 samples).
    pub raw_spread: Option<f64>,
    /// Modes whose ratio range straddles 1.0 widely.
    pub straddling: Vec<String>,
    pub flagged: bool,
    pub reasons: Vec<String>,
}

/// The judgement of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub load: Load,
    pub rows: Vec<RowNoise>,
    /// Rows flagged.
    pub flagged: usize,
    /// Rows with fewer than 2 raw-disk samples: their spread is not judged.
    pub unjudged: usize,
    pub rerun: bool,
    pub reasons: Vec<String>,
}

/// Judge a run from its summaries and `meta` (for the load).
pub fn judge(meta: &Value, sums: &[Summary]) -> Verdict {
    let load = Load::from_meta(meta);
    let mut rows = vec![];
    for raw in sums.iter().filter(|s| s.target == "raw") {
        let same = |s: &&Summary| s.section == raw.section && s.row == raw.row && s.phase == raw.phase;
        let raw_spread = if raw.n >= 2 { spread(raw) } else { None };
        let straddling: Vec<String> = sums
            .iter()
            .filter(same)
            .filter(|s| s.target != "raw")
            .filter(|s| ratio_range(s, raw).is_some_and(straddles))
            .map(|s| s.target.clone())
            .collect();
        let mut reasons = vec![];
        if let Some(sp) = raw_spread.filter(|sp| *sp > RAW_SPREAD_MAX) {
            reasons.push(format!("raw-disk spread ×{sp:.2} > ×{RAW_SPREAD_MAX}"));
        }
        if straddling.len() >= STRADDLE_MODES {
            reasons.push(format!("{} modes' ratio ranges straddle 1.0 (below ×{:.2} and above ×{STRADDLE})", straddling.len(), 1.0 / STRADDLE));
        }
        rows.push(RowNoise {
            section: raw.section.clone(),
            row: raw.row.clone(),
            phase: raw.phase.clone(),
            raw_n: raw.n,
            raw_min_ms: raw.min_ms,
            raw_median_ms: raw.median_ms,
            raw_max_ms: raw.max_ms,
            raw_spread,
            straddling,
            flagged: !reasons.is_empty(),
            reasons,
        });
    }
    let flagged = rows.iter().filter(|r| r.flagged).count();
    let mut reasons = vec![];
    if flagged > RERUN_ROWS {
        reasons.push(format!("{flagged} rows flagged (more than {RERUN_ROWS})"));
    }
    if let Some(why) = load.too_busy() {
        reasons.push(why);
    }
    Verdict {
        unjudged: rows.iter().filter(|r| r.raw_n < 2).count(),
        rerun: !reasons.is_empty(),
        load,
        rows,
        flagged,
        reasons,
    }
}

/// "1", "C03", "npm-express readback": a row's name in a word or two.
pub fn short_name(section: &str, row: &str, phase: &str) -> String {
    let num: String = row.chars().take_while(char::is_ascii_digit).collect();
    match section {
        "rows" if !num.is_empty() => num.trim_start_matches('0').to_string(),
        "cells" if !num.is_empty() => format!("C{num}"),
        _ if phase == "body" || phase == "restore" => row.to_string(),
        _ => format!("{row} {phase}"),
    }
}

impl Verdict {
    /// One line: how many rows are flagged (and, without a rerun, what follows).
    pub fn line(&self) -> String {
        let judged = self.rows.len() - self.unjudged;
        let rows_where = |keep: &dyn Fn(&RowNoise) -> bool| -> Vec<String> {
            self.rows.iter().filter(|r| keep(r)).map(|r| short_name(&r.section, &r.row, &r.phase)).collect()
        };
        let names = rows_where(&|r| r.flagged);
        let mut o = if self.rows.is_empty() {
            "noise: no row has raw-disk samples to judge".to_string()
        } else if judged == 0 {
            "noise: one raw-disk sample per row, spread not judged".to_string()
        } else if names.is_empty() {
            format!("noise: no row of {judged} flagged (raw-disk spreads ≤ ×{RAW_SPREAD_MAX})")
        } else {
            format!("noise: {} of {judged} rows flagged ({})", names.len(), names.join(", "))
        };
        if judged > 0 && self.unjudged > 0 {
            let one = rows_where(&|r| r.raw_n < 2);
            o.push_str(&format!("; not judged (one raw-disk sample): {}", one.join(", ")));
        }
        if !self.rerun && !names.is_empty() {
            o.push_str(" — do not trust their ratios; the others hold");
        }
        o
    }

    /// "rerun on a quiet machine: why", when the run says so.
    pub fn advice(&self) -> Option<String> {
        self.rerun.then(|| format!("rerun on a quiet machine: {}", self.reasons.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loadavg_parses() {
        assert_eq!(parse_loadavg("1.49 0.82 0.33 3/170 30160\n"), Some([1.49, 0.82, 0.33]));
        assert_eq!(parse_loadavg("1.49 0.82"), None);
        assert_eq!(parse_loadavg(""), None);
    }

    #[test]
    fn old_meta_gives_start_and_end() {
        let meta = serde_json::json!({"machine": {"cpus": 2, "loadavg_start": "1.49 0.82 0.33", "loadavg_end": "2.12 1.68 1.69"}});
        let l = Load::from_meta(&meta);
        assert_eq!((l.cores, l.before, l.after), (2, Some([1.49, 0.82, 0.33]), Some([2.12, 1.68, 1.69])));
        assert!(l.during.is_empty() && l.too_busy().is_none());
        assert!(l.line().contains("not sampled during"), "{}", l.line());
    }

    #[test]
    fn markers() {
        assert_eq!(marker(Some((0.9, 1.2))), "");
        assert_eq!(marker(Some((0.9, 2.0))), "~");
        assert_eq!(marker(Some((0.4, 2.7))), "!");
        assert!(straddles((0.46, 2.7)) && !straddles((0.9, 2.7)) && !straddles((0.5, 1.3)));
        assert_eq!(short_name("rows", "01-create", "body"), "1");
        assert_eq!(short_name("cells", "12-git-commit", "body"), "C12");
        assert_eq!(short_name("npm", "npm-express", "readback"), "npm-express readback");
    }
}
