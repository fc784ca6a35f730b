//! The one-screen summary printed at the end of a run (and written to
//! summary.txt): one line per row with raw disk's median and spread and the
//! main ringfs modes' ratios of medians with a spread marker, the peers below
//! as one line each, and what the noise says. The full table is results.md.

use std::fmt::Write as _;

use crate::noise::{self, Verdict};
use crate::progress::fmt_duration;
use crate::report::{fmt_ms, main_modes, row_title, Summary, PEERS};
use crate::run::Results;

const TITLE_W: usize = 38;
const MS_W: usize = 7;
const SPREAD_W: usize = 8;
const NUM_W: usize = 11;
/// The widest line the summary is meant to print (the main modes fit in ~100).
pub const WIDTH: usize = 120;

/// ×0.71, ×12.3, ×140
pub fn fmt_ratio(x: f64) -> String {
    if x < 10.0 {
        format!("×{x:.2}")
    } else if x < 100.0 {
        format!("×{x:.1}")
    } else {
        format!("×{x:.0}")
    }
}

fn truncate(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(w - 1).collect();
        t.push('…');
        t
    }
}

/// Wrap `s` at spaces to `w` columns, continuation lines indented by two.
fn wrap(s: &str, w: usize) -> Vec<String> {
    let mut lines = vec![];
    let mut cur = String::new();
    // Nothing but the indent in `cur` yet.
    let mut fresh = true;
    for word in s.split(' ') {
        if !fresh && cur.chars().count() + 1 + word.chars().count() > w {
            lines.push(std::mem::replace(&mut cur, "  ".to_string()));
            fresh = true;
        }
        if !fresh {
            cur.push(' ');
        }
        cur.push_str(word);
        fresh = false;
    }
    if !fresh {
        lines.push(cur);
    }
    lines
}

fn geo_mean(v: &[f64]) -> Option<f64> {
    let v: Vec<f64> = v.iter().copied().filter(|x| *x > 0.0).collect();
    (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

/// A mode's cell: ratio, spread marker, F when some samples failed.
fn cell(s: Option<&Summary>, raw: Option<&Summary>) -> String {
    let Some(s) = s else { return format!("{:>NUM_W$}  ", "–") };
    match s.ratio {
        Some(x) => {
            let m = raw.and_then(|raw| noise::ratio_range(s, raw));
            let suffix = format!("{}{}", noise::marker(m), if s.fails > 0 { "F" } else { "" });
            format!("{:>NUM_W$}{:<2}", fmt_ratio(x), suffix)
        }
        None if s.median_ms.is_none() && s.fails > 0 => format!("{:>NUM_W$}  ", "FAIL"),
        None => format!("{:>NUM_W$}  ", s.median_ms.map_or("–".into(), |m| format!("{} ms", fmt_ms(m)))),
    }
}

/// The summary, a line each, ≤ [`WIDTH`] columns with the main modes.
pub fn summary(r: &Results, sums: &[Summary], v: &Verdict) -> String {
    let m = &r.meta;
    let modes = main_modes(r);
    let mut lines: Vec<String> = vec![];
    let dur = m["duration_s"].as_f64().map_or("?".into(), |s| fmt_duration(std::time::Duration::from_secs_f64(s)));
    let mut head = format!(
        "ringfs fs-bench · {} run {} · {} CPUs ({}) · REPS={} · {dur}",
        m["profile"].as_str().unwrap_or("?"),
        m["date"].as_str().unwrap_or("?"),
        m["machine"]["cpus"],
        m["machine"]["cpu_model"].as_str().unwrap_or("?"),
        m["reps"],
    );
    if let Some(sec) = m["interrupted_in"].as_str() {
        let _ = write!(head, " · INTERRUPTED in {sec}: partial");
    }
    lines.push(truncate(&head, WIDTH));
    lines.extend(wrap(&v.load.line(), WIDTH));
    lines.extend(wrap(&v.line(), WIDTH));
    if let Some(a) = v.advice() {
        lines.extend(wrap(&format!("→ {a}"), WIDTH));
    }
    lines.push(String::new());

    // A run of the store section alone has no rows: no table head, no peers.
    let any_samples = !r.samples.is_empty();
    let mut h = format!("{:<TITLE_W$} {:>MS_W$} {:>SPREAD_W$}", "row", "raw ms", "spread");
    for (name, _) in &modes {
        let _ = write!(h, "{name:>NUM_W$}  ");
    }
    if any_samples {
        lines.push(h.trim_end().to_string());
    }

    let find = |sec: &str, row: &str, phase: &str, t: &str| sums.iter().find(|s| s.section == sec && s.row == row && s.phase == phase && s.target == t);
    let mut keys: Vec<(&str, &str, &str)> = vec![];
    for s in sums {
        let k = (s.section.as_str(), s.row.as_str(), s.phase.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let flagged = |sec: &str, row: &str, phase: &str| v.rows.iter().any(|x| x.flagged && x.section == sec && x.row == row && x.phase == phase);
    // Ratios per mode over the rows listed (for the geometric means), and per peer.
    let mut per_mode: Vec<Vec<f64>> = vec![vec![]; modes.len()];
    for &(sec, row, phase) in keys.iter().filter(|k| k.0 == "rows" || k.0 == "npm") {
        let raw = find(sec, row, phase, "raw");
        let title = match (sec, r.rows.iter().find(|x| x.key == row)) {
            ("npm", _) => format!("npm {} {phase}", row.trim_start_matches("npm-")),
            (_, Some(x)) if x.n > 0 => format!("{:>2} {}", x.n, x.title),
            _ => row_title(r, row, phase),
        };
        let mut l = format!("{:<TITLE_W$} ", truncate(&title, TITLE_W));
        let ms = raw.and_then(|s| s.median_ms).map_or("–".into(), fmt_ms);
        let sp = raw.and_then(|s| (s.n >= 2).then(|| noise::spread(s)).flatten()).map_or("–".into(), |x| format!("×{x:.2}"));
        let star = if flagged(sec, row, phase) { "*" } else { " " };
        let _ = write!(l, "{ms:>MS_W$} {sp:>w$}{star}", w = SPREAD_W - 1);
        for (i, (_, t)) in modes.iter().enumerate() {
            let s = find(sec, row, phase, &t.spec.id);
            if let Some(x) = s.and_then(|s| s.ratio) {
                per_mode[i].push(x);
            }
            l.push_str(&cell(s, raw));
        }
        lines.push(l.trim_end().to_string());
    }
    let agg = |label: &str, vals: Vec<Option<f64>>, spread: String| {
        let mut l = format!("{:<TITLE_W$} {:>MS_W$} {spread:>SPREAD_W$}", truncate(label, TITLE_W), "");
        for x in vals {
            let _ = write!(l, "{:>NUM_W$}  ", x.map_or("–".into(), fmt_ratio));
        }
        l.trim_end().to_string()
    };
    if per_mode.iter().any(|v| !v.is_empty()) {
        lines.push(agg("geometric mean of the rows above", per_mode.iter().map(|v| geo_mean(v)).collect(), String::new()));
    }
    // Cells: one line, the geometric mean over C01–C12 per mode.
    let cell_keys: Vec<_> = keys.iter().filter(|k| k.0 == "cells").collect();
    if !cell_keys.is_empty() {
        let vals = modes
            .iter()
            .map(|(_, t)| geo_mean(&cell_keys.iter().filter_map(|k| find(k.0, k.1, k.2, &t.spec.id)?.ratio).collect::<Vec<_>>()))
            .collect();
        let nflag = cell_keys.iter().filter(|k| flagged(k.0, k.1, k.2)).count();
        let label = format!("cells C01–C12, geometric mean{}", if nflag > 0 { format!(" ({nflag}*)") } else { String::new() });
        lines.push(agg(&label, vals, String::new()));
    }
    // Restore: milliseconds, no raw disk.
    for &(sec, row, phase) in keys.iter().filter(|k| k.0 == "restore") {
        let n: String = row.chars().filter(char::is_ascii_digit).collect();
        let mut l = format!("{:<TITLE_W$} {:>MS_W$} {:>SPREAD_W$}", format!("restore after restart, {n} files"), "–", "");
        for (_, t) in &modes {
            let x = find(sec, row, phase, &t.spec.id);
            let _ = write!(
                l,
                "{:>NUM_W$}  ",
                match x {
                    Some(s) if s.median_ms.is_some() => format!("{} ms", fmt_ms(s.median_ms.unwrap())),
                    Some(s) if s.fails > 0 => "FAIL".into(),
                    _ => "–".into(),
                }
            );
        }
        lines.push(l.trim_end().to_string());
    }

    for st in r.store.iter().chain(&r.snapshots).chain(&r.sync) {
        lines.push(String::new());
        lines.extend(crate::store::show::summary_lines(st));
    }

    // Peers: one line each.
    let peers: Vec<_> = PEERS.iter().filter_map(|p| r.targets.iter().find(|t| t.spec.id == *p && t.status == "ran")).collect();
    if !peers.is_empty() && any_samples {
        lines.push(String::new());
        lines.push("peers: geometric mean of the ratios over the rows above; fastest and slowest row".into());
        for t in peers {
            let rs: Vec<(String, f64)> = keys
                .iter()
                .filter(|k| k.0 == "rows" || k.0 == "npm")
                .filter_map(|k| Some((noise::short_name(k.0, k.1, k.2), find(k.0, k.1, k.2, &t.spec.id)?.ratio?)))
                .collect();
            let g = geo_mean(&rs.iter().map(|x| x.1).collect::<Vec<_>>());
            let lo = rs.iter().min_by(|a, b| a.1.total_cmp(&b.1));
            let hi = rs.iter().max_by(|a, b| a.1.total_cmp(&b.1));
            let mut l = format!("  {:<TITLE_W$}{:>8}", t.spec.label, g.map_or("–".into(), fmt_ratio));
            if let (Some(lo), Some(hi)) = (lo, hi) {
                let name = |n: &str| if n.chars().all(|c| c.is_ascii_digit()) { format!("row {n}") } else { n.to_string() };
                let _ = write!(l, "   {} ({}) … {} ({})", fmt_ratio(lo.1), name(&lo.0), fmt_ratio(hi.1), name(&hi.0));
            }
            lines.push(truncate(&l, WIDTH));
        }
    }

    lines.push(String::new());
    if any_samples {
        lines.push(format!(
            "ratio: median ÷ raw disk's median, lower is faster; ~ min–max range over ×{} wide, ! over ×{}; F: a sample failed",
            noise::WIDE,
            noise::VERY_WIDE
        ));
        lines.push(format!("* row flagged: raw-disk spread (max/min) over ×{}, or modes straddling 1.0 — its ratios are untrustworthy", noise::RAW_SPREAD_MAX));
    }
    if r.store.is_some() {
        lines.push("store: ratio = ringfs ÷ ext4; PASS/FAIL against issue 12's target; memory is the ringfs daemon's (no ext4 side)".into());
    }
    if r.snapshots.is_some() {
        lines.push("snapshots: ratio = ringfs ÷ git (or cp -a) on ext4; PASS/FAIL against issue 13's target".into());
    }
    if r.sync.is_some() {
        lines.push("sync: ref = raw object_store on the same server (or the local-only variant); PASS/FAIL against issue 14's target".into());
    }
    if !modes.is_empty() && any_samples {
        let cols: Vec<String> = modes.iter().map(|(n, t)| format!("{n} = {}", t.spec.id)).collect();
        lines.extend(wrap(&format!("columns: {}", cols.join(", ")), WIDTH));
    }
    lines.push("every mode and sample: results.md (the full table), ratios.png and ratios-all.png (figures), results.json".into());
    let mut o = lines.join("\n");
    o.push('\n');
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_spaces() {
        let w = wrap("aaa bbb ccc ddd", 8);
        assert_eq!(w, vec!["aaa bbb".to_string(), "  ccc".into(), "  ddd".into()]);
        assert_eq!(wrap("short", 80), vec!["short".to_string()]);
        assert_eq!(fmt_ratio(0.714), "×0.71");
        assert_eq!(fmt_ratio(12.34), "×12.3");
        assert_eq!(geo_mean(&[1.0, 4.0]), Some(2.0));
    }
}
