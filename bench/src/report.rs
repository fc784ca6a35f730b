//! Summaries of a run (median, min, max, ratio to raw disk per row and target),
//! the JSON document, and which targets are the main modes of the summary and
//! the default figure.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::run::{Results, Sample, TargetResult};
use crate::targets::Counters;

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub section: String,
    pub row: String,
    pub phase: String,
    pub target: String,
    pub n: usize,
    pub fails: usize,
    pub median_ms: Option<f64>,
    pub min_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// median / median of raw disk for the same row and phase.
    pub ratio: Option<f64>,
    /// Median per-opcode request counts over the samples (ringfs targets).
    pub requests: Option<BTreeMap<String, u64>>,
    /// Median bytes written to / read from the daemon during the body (when `ringfs stats` reports them).
    pub bytes_to_daemon: Option<u64>,
    pub bytes_from_daemon: Option<u64>,
    pub first_error: Option<String>,
    pub mount_ms: Option<f64>,
    pub unmount_ms: Option<f64>,
}

pub(crate) fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

fn median_u(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    if v.is_empty() {
        0
    } else {
        v[v.len() / 2]
    }
}

/// A sample's daemon counters for one timed `phase`: its own when run.sh
/// reported them per function, else the whole body's for a body of one
/// function (and, for results of earlier versions, for `install`, which is
/// how their reports showed the npm rows).
fn phase_counters<'a>(s: &'a Sample, phase: &str) -> Option<&'a Counters> {
    if !s.phase_counters.is_empty() {
        return s.phase_counters.get(phase);
    }
    (s.phases_ms.len() <= 1 || phase == "install").then_some(s.counters.as_ref()).flatten()
}

/// One summary per (section, row, phase, target), in row order then target order.
pub fn summarize(r: &Results) -> Vec<Summary> {
    let measured: Vec<&Sample> = r.samples.iter().filter(|s| !s.warmup).collect();
    let mut keys: Vec<(String, String, String)> = vec![];
    for s in &measured {
        let phases: Vec<String> = if s.phases_ms.is_empty() { vec!["body".into()] } else { s.phases_ms.keys().cloned().collect() };
        for p in phases {
            let k = (s.section.to_string(), s.row.clone(), p);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    let sec_order = |s: &str| ["rows", "npm", "cells", "restore"].iter().position(|x| *x == s).unwrap_or(9);
    let phase_order = |p: &str| ["body", "install", "readback", "restore"].iter().position(|x| *x == p).unwrap_or(9);
    let row_order = |k: &str| r.rows.iter().position(|x| x.key == k).unwrap_or(usize::MAX);
    keys.sort_by(|a, b| (sec_order(&a.0), row_order(&a.1), &a.1, phase_order(&a.2)).cmp(&(sec_order(&b.0), row_order(&b.1), &b.1, phase_order(&b.2))));
    let mut out = vec![];
    for (sec, row, phase) in keys {
        let mut raw_median = None;
        for t in r.targets.iter().filter(|t| t.status == "ran") {
            let ss: Vec<&&Sample> = measured.iter().filter(|s| s.section == sec && s.row == row && s.target == t.spec.id).collect();
            if ss.is_empty() {
                continue;
            }
            let mut ms: Vec<f64> = ss.iter().filter(|s| s.ok).filter_map(|s| s.phases_ms.get(&phase).copied()).collect();
            let fails = ss.iter().filter(|s| !s.ok).count();
            let med = median(&mut ms);
            if t.spec.id == "raw" {
                raw_median = med;
            }
            let requests = if ss.iter().any(|s| phase_counters(s, &phase).is_some()) {
                let mut ops: BTreeMap<String, Vec<u64>> = BTreeMap::new();
                let oks: Vec<&Counters> = ss.iter().filter(|s| s.ok).filter_map(|s| phase_counters(s, &phase)).collect();
                for c in &oks {
                    for op in c.requests.keys() {
                        ops.entry(op.clone()).or_default();
                    }
                }
                for (op, v) in ops.iter_mut() {
                    for c in &oks {
                        v.push(*c.requests.get(op).unwrap_or(&0));
                    }
                }
                Some(ops.into_iter().map(|(k, mut v)| (k, median_u(&mut v))).collect())
            } else {
                None
            };
            let mut mounts: Vec<f64> = ss.iter().filter_map(|s| s.mount_ms).collect();
            let mut umounts: Vec<f64> = ss.iter().filter_map(|s| s.unmount_ms).collect();
            out.push(Summary {
                section: sec.clone(),
                row: row.clone(),
                phase: phase.clone(),
                target: t.spec.id.clone(),
                n: ms.len(),
                fails,
                median_ms: med,
                min_ms: ms.first().copied(),
                max_ms: ms.last().copied(),
                ratio: None,
                requests,
                bytes_to_daemon: {
                    let mut v: Vec<u64> = ss.iter().filter(|s| s.ok).filter_map(|s| phase_counters(s, &phase)?.bytes_to_daemon).collect();
                    (!v.is_empty()).then(|| median_u(&mut v))
                },
                bytes_from_daemon: {
                    let mut v: Vec<u64> = ss.iter().filter(|s| s.ok).filter_map(|s| phase_counters(s, &phase)?.bytes_from_daemon).collect();
                    (!v.is_empty()).then(|| median_u(&mut v))
                },
                first_error: ss.iter().find_map(|s| s.error.clone()),
                mount_ms: median(&mut mounts),
                unmount_ms: median(&mut umounts),
            });
        }
        for s in out.iter_mut().rev().take_while(|s| s.section == sec && s.row == row && s.phase == phase) {
            s.ratio = match (s.median_ms, raw_median) {
                (Some(m), Some(r)) if r > 0.0 => Some(m / r),
                _ => None,
            };
        }
    }
    out
}

pub(crate) fn fmt_ms(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

/// "1 create 1000 files", "npm install express: readback".
pub(crate) fn row_title(r: &Results, key: &str, phase: &str) -> String {
    let base = r.rows.iter().find(|x| x.key == key).map_or(key.to_string(), |x| {
        if x.n > 0 {
            format!("{} {}", x.n, x.title)
        } else {
            x.title.to_string()
        }
    });
    if phase == "body" || phase == "restore" {
        base
    } else {
        format!("{base}: {phase}")
    }
}

/// A column of the one-screen summary and of the default figure: one ringfs
/// mode, the first of `candidates` that ran (the daemon's defaults first:
/// io_uring transport, passthrough on).
pub struct MainMode {
    pub name: &'static str,
    pub candidates: &'static [&'static str],
}

pub const MAIN_MODES: &[MainMode] = &[
    MainMode { name: "synced", candidates: &["rf-uring-synced", "rf-dev-synced", "rf-uring-synced-ptoff", "rf-dev-synced-ptoff"] },
    MainMode { name: "local-only", candidates: &["rf-uring-local-pt", "rf-dev-local-pt", "rf-uring-local-ptoff", "rf-dev-local-ptoff"] },
    MainMode { name: "native root", candidates: &["rf-uring-native", "rf-dev-native"] },
    MainMode { name: "memory", candidates: &["rf-mem"] },
];

/// The peers, listed below the main modes.
pub const PEERS: &[&str] = &["tmpfs", "bindfs", "fuse-overlayfs"];

/// (column name, target) of every main mode that ran, in column order.
pub fn main_modes(r: &Results) -> Vec<(&'static str, &TargetResult)> {
    MAIN_MODES
        .iter()
        .filter_map(|m| {
            m.candidates.iter().find_map(|id| r.targets.iter().find(|t| t.spec.id == *id && t.status == "ran")).map(|t| (m.name, t))
        })
        .collect()
}
