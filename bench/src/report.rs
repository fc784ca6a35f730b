//! Summaries, the markdown table, the JSON document and the SVG plot.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{json, Value};

use crate::run::{Results, Sample};

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

fn median(v: &mut [f64]) -> Option<f64> {
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
            let requests = if ss.iter().any(|s| s.counters.is_some()) {
                let mut ops: BTreeMap<String, Vec<u64>> = BTreeMap::new();
                let oks: Vec<&&&Sample> = ss.iter().filter(|s| s.ok && s.counters.is_some()).collect();
                for s in &oks {
                    for op in s.counters.as_ref().unwrap().requests.keys() {
                        ops.entry(op.clone()).or_default();
                    }
                }
                for (op, v) in ops.iter_mut() {
                    for s in &oks {
                        v.push(*s.counters.as_ref().unwrap().requests.get(op).unwrap_or(&0));
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
                    let mut v: Vec<u64> = ss.iter().filter(|s| s.ok).filter_map(|s| s.counters.as_ref()?.bytes_to_daemon).collect();
                    (!v.is_empty()).then(|| median_u(&mut v))
                },
                bytes_from_daemon: {
                    let mut v: Vec<u64> = ss.iter().filter(|s| s.ok).filter_map(|s| s.counters.as_ref()?.bytes_from_daemon).collect();
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

fn fmt_ms(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

fn row_title(r: &Results, key: &str, phase: &str) -> String {
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

fn cell_text(s: Option<&Summary>) -> String {
    let Some(s) = s else { return "–".into() };
    match s.median_ms {
        None => format!("FAIL {}/{}", s.fails, s.fails + s.n),
        Some(m) => {
            let mut t = format!("{} [{}–{}]", fmt_ms(m), fmt_ms(s.min_ms.unwrap()), fmt_ms(s.max_ms.unwrap()));
            if let Some(r) = s.ratio {
                let _ = write!(t, " ×{r:.2}");
            }
            if s.fails > 0 {
                let _ = write!(t, " ({} FAIL)", s.fails);
            }
            t
        }
    }
}

/// The markdown report.
pub fn markdown(r: &Results, sums: &[Summary]) -> String {
    let m = &r.meta;
    let mach = &m["machine"];
    let s = |v: &Value| v.as_str().map_or(v.to_string(), str::to_string);
    let mut o = String::new();
    let _ = writeln!(o, "# ringfs fs-bench: {} run, {}\n", s(&m["profile"]), s(&m["date"]));
    let _ = writeln!(
        o,
        "Machine: {}, {} CPUs, {} GiB RAM, kernel {}; load average {} at start, {} at end. \
         Targets on {}. REPS={}, WARMUP={}, seed {}; {}; {} s in all.\n",
        s(&mach["cpu_model"]),
        mach["cpus"],
        mach["mem_gib"],
        s(&mach["kernel"]),
        s(&mach["loadavg_start"]),
        s(&mach["loadavg_end"]),
        s(&m["base_fs"]),
        m["reps"],
        m["warmup"],
        m["seed"],
        s(&m["ringfs"]["version"]),
        m["duration_s"],
    );
    if let Some(section) = m["interrupted_in"].as_str() {
        let _ = writeln!(o, "**Interrupted during {section}:** {section} has the samples taken until then (fewer repetitions for some rows), the sections after it are missing.\n");
    }
    let _ = writeln!(
        o,
        "Each cell: median [min–max] ms of the timed body, ×ratio of medians to raw disk (lower is faster). \
         Every sample is verified afterwards (file counts, sizes, content hashes); a failed one is counted as FAIL, never as a time.\n"
    );
    let ran: Vec<_> = r.targets.iter().filter(|t| t.status == "ran").collect();
    for (sec, heading) in [("rows", "fs-bench rows"), ("npm", "npm installs (from a warmed cache)"), ("cells", "Cells C01–C12 (fresh store and mount per cell, warm-up run on an earlier mount)"), ("restore", "Restore after restart (daemon stopped and started on the same store, until `ls -R` answers)")] {
        let ss: Vec<&Summary> = sums.iter().filter(|x| x.section == sec).collect();
        if ss.is_empty() {
            continue;
        }
        let _ = writeln!(o, "## {heading}\n");
        if sec == "restore" {
            let _ = writeln!(o, "Time from `ringfs mount` to a complete `ls -R` on the restarted daemon; ringfs on-disk stores only (an in-memory store is empty after a restart).\n");
        }
        let _ = write!(o, "| row |");
        for t in &ran {
            let _ = write!(o, " {} |", t.spec.label);
        }
        let _ = write!(o, "\n|---|");
        for _ in &ran {
            let _ = write!(o, "---:|");
        }
        o.push('\n');
        let mut keys: Vec<(&str, &str)> = vec![];
        for x in &ss {
            if !keys.contains(&(x.row.as_str(), x.phase.as_str())) {
                keys.push((&x.row, &x.phase));
            }
        }
        for (row, phase) in &keys {
            let title = match (sec, r.rows.iter().find(|x| x.key == *row)) {
                ("cells", Some(x)) => format!("C{:02} {}", x.n, x.title),
                _ => row_title(r, row, phase),
            };
            let _ = write!(o, "| {} |", title.replace('|', "\\|"));
            for t in &ran {
                let cell = ss.iter().find(|x| x.row == *row && x.phase == *phase && x.target == t.spec.id).copied();
                let _ = write!(o, " {} |", cell_text(cell));
            }
            o.push('\n');
        }
        if sec == "npm" {
            let _ = writeln!(o, "\nInstalled files and bytes (first sample per target):\n");
            for (row, _) in keys.iter().filter(|k| k.1 == "install") {
                for t in &ran {
                    if let Some(smp) = r.samples.iter().find(|x| x.section == "npm" && x.row == *row && x.target == t.spec.id && x.ok) {
                        let _ = writeln!(
                            o,
                            "- {} on {}: {} files, {} bytes",
                            row,
                            t.spec.label,
                            smp.info.get("files").map_or("?", String::as_str),
                            smp.info.get("bytes").map_or("?", String::as_str)
                        );
                    }
                }
            }
        }
        if sec == "cells" {
            let _ = writeln!(o, "\nMount / unmount of the timed mount, median ms over all cells:\n");
            for t in &ran {
                let mut mo: Vec<f64> = r.samples.iter().filter(|x| x.section == "cells" && x.target == t.spec.id).filter_map(|x| x.mount_ms).collect();
                let mut um: Vec<f64> = r.samples.iter().filter(|x| x.section == "cells" && x.target == t.spec.id).filter_map(|x| x.unmount_ms).collect();
                let f = |v: Option<f64>| v.map_or("n/a".to_string(), fmt_ms);
                let _ = writeln!(o, "- {}: mount {} ms, unmount {} ms", t.spec.label, f(median(&mut mo)), f(median(&mut um)));
            }
        }
        o.push('\n');
    }

    // Daemon requests per row.
    let rf: Vec<_> = ran.iter().filter(|t| t.spec.is_ringfs()).collect();
    if !rf.is_empty() {
        let _ = writeln!(o, "## Daemon requests per sample (median), ringfs targets\n");
        for t in rf {
            let _ = writeln!(o, "{}:\n", t.spec.label);
            let _ = writeln!(o, "| row | requests | bytes to / from daemon | by opcode |\n|---|---:|---:|---|");
            for x in sums.iter().filter(|x| x.target == t.spec.id) {
                let Some(req) = &x.requests else { continue };
                if x.phase != "body" && x.phase != "install" && x.phase != "restore" {
                    continue;
                }
                // Medians: an opcode seen in fewer than half the samples shows 0.
                let mut ops: Vec<(&String, &u64)> = req.iter().filter(|(_, v)| **v > 0).collect();
                ops.sort_by(|a, b| b.1.cmp(a.1));
                let total: u64 = req.values().sum();
                let by = ops.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
                let sec = if x.section == "rows" { String::new() } else { format!("{}: ", x.section) };
                let bytes = match (x.bytes_to_daemon, x.bytes_from_daemon) {
                    (None, None) => "n/a".to_string(),
                    (a, b) => format!("{} / {}", a.map_or("?".into(), |v| v.to_string()), b.map_or("?".into(), |v| v.to_string())),
                };
                let _ = writeln!(o, "| {sec}{} | {total} | {bytes} | {by} |", row_title(r, &x.row, "body").replace('|', "\\|"));
            }
            o.push('\n');
        }
    }

    let _ = writeln!(o, "## Targets\n");
    for t in &r.targets {
        match t.status.as_str() {
            "ran" => {
                let mut extra = String::new();
                if !t.args.is_empty() {
                    let _ = write!(extra, " flags `{}`", t.args.join(" "));
                }
                if !t.effective.is_null() {
                    let _ = write!(extra, " reported {}", t.effective);
                }
                let _ = writeln!(o, "- **{}** (`{}`): ran;{extra}", t.spec.label, t.spec.id);
            }
            _ => {
                let _ = writeln!(o, "- **{}** (`{}`): skipped: {}", t.spec.label, t.spec.id, t.reason.as_deref().unwrap_or("?"));
            }
        }
    }
    let fails: Vec<&Sample> = r.samples.iter().filter(|s| !s.ok).collect();
    if !fails.is_empty() {
        let _ = writeln!(o, "\n## Failures\n");
        for f in fails {
            let _ = writeln!(
                o,
                "- {} {} on {} (rep {}{}): {}",
                f.section,
                f.row,
                f.target,
                f.rep,
                if f.warmup { ", warm-up" } else { "" },
                f.error.as_deref().unwrap_or("?")
            );
        }
    }
    o
}

pub fn json_doc(r: &Results, sums: &[Summary]) -> Value {
    json!({
        "meta": r.meta,
        "targets": r.targets,
        "rows": r.rows,
        "summary": sums,
        "samples": r.samples,
    })
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A horizontal grouped bar chart of the ratio to raw disk (log scale), per row and target.
pub fn svg(r: &Results, sums: &[Summary]) -> String {
    let targets: Vec<_> = r.targets.iter().filter(|t| t.status == "ran" && t.spec.id != "raw").collect();
    let mut keys: Vec<(&str, &str, &str)> = vec![];
    for s in sums.iter().filter(|s| s.section == "rows" || s.section == "npm") {
        if !keys.contains(&(s.section.as_str(), s.row.as_str(), s.phase.as_str())) {
            keys.push((&s.section, &s.row, &s.phase));
        }
    }
    let colors = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c", "#d62728", "#9467bd"];
    let bar = 9.0;
    let gap = 8.0;
    let left = 330.0;
    let plot_w = 560.0;
    let top = 60.0;
    let group_h = bar * targets.len().max(1) as f64 + gap;
    let legend_h = 18.0 * targets.len() as f64 + 20.0;
    let h = top + group_h * keys.len() as f64 + 40.0 + legend_h;
    let w = left + plot_w + 120.0;
    let ratios: Vec<f64> = sums.iter().filter(|s| s.section == "rows" || s.section == "npm").filter_map(|s| s.ratio).filter(|x| *x > 0.0).collect();
    let lo = ratios.iter().cloned().fold(1.0f64, f64::min).min(0.5);
    let hi = ratios.iter().cloned().fold(1.0f64, f64::max).max(2.0);
    let (l0, l1) = (lo.log10().floor(), hi.log10().ceil());
    let x = |v: f64| left + (v.log10() - l0) / (l1 - l0) * plot_w;
    let mut o = String::new();
    let _ = writeln!(o, r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" font-family="sans-serif" font-size="11">"##);
    let _ = writeln!(o, r##"<rect width="100%" height="100%" fill="white"/>"##);
    let title = format!(
        "ringfs fs-bench {} run {}: time relative to raw disk (median, log scale; lower is faster)",
        r.meta["profile"].as_str().unwrap_or(""),
        r.meta["date"].as_str().unwrap_or("")
    );
    let _ = writeln!(o, r##"<text x="10" y="20" font-size="14" font-weight="bold">{}</text>"##, esc(&title));
    let _ = writeln!(
        o,
        r##"<text x="10" y="38" fill="#555">{}</text>"##,
        esc(&format!(
            "{} CPUs, kernel {}, load {} → {}",
            r.meta["machine"]["cpus"],
            r.meta["machine"]["kernel"].as_str().unwrap_or(""),
            r.meta["machine"]["loadavg_start"].as_str().unwrap_or(""),
            r.meta["machine"]["loadavg_end"].as_str().unwrap_or("")
        ))
    );
    // Grid lines at powers of ten and 2x, 5x.
    let bottom = top + group_h * keys.len() as f64;
    let mut e = l0;
    while e <= l1 {
        let muls: &[f64] = if l1 - l0 > 3.0 { &[1.0] } else { &[1.0, 2.0, 5.0] };
        for &mul in muls {
            let v = 10f64.powf(e) * mul;
            if v.log10() > l1 + 1e-9 {
                continue;
            }
            let xv = x(v);
            let stroke = if (v - 1.0).abs() < 1e-9 { "#000" } else { "#ddd" };
            let _ = writeln!(o, r##"<line x1="{xv:.1}" y1="{top}" x2="{xv:.1}" y2="{bottom:.1}" stroke="{stroke}"/>"##);
            let _ = writeln!(o, r##"<text x="{xv:.1}" y="{:.1}" text-anchor="middle">×{}</text>"##, bottom + 14.0, if v < 1.0 { format!("{v}") } else { format!("{v:.0}") });
        }
        e += 1.0;
    }
    for (gi, (sec, row, phase)) in keys.iter().enumerate() {
        let y0 = top + gi as f64 * group_h;
        let _ = writeln!(o, r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##, left - 6.0, y0 + group_h / 2.0, esc(&row_title(r, row, phase)));
        for (ti, t) in targets.iter().enumerate() {
            let y = y0 + ti as f64 * bar;
            let Some(s) = sums.iter().find(|s| s.section == *sec && s.row == *row && s.phase == *phase && s.target == t.spec.id) else { continue };
            let c = colors[ti % colors.len()];
            match s.ratio {
                Some(v) => {
                    let (a, b) = (x(1.0).min(x(v)), x(1.0).max(x(v)));
                    let _ = writeln!(o, r##"<rect x="{a:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{c}"><title>{}: ×{v:.2}</title></rect>"##, (b - a).max(1.0), bar - 1.0, esc(&t.spec.label));
                    let _ = writeln!(o, r##"<text x="{:.1}" y="{:.1}" font-size="8" fill="#333">{v:.2}</text>"##, b + 2.0, y + bar - 2.0);
                }
                None => {
                    let _ = writeln!(o, r##"<text x="{:.1}" y="{:.1}" font-size="8" fill="#c00">FAIL</text>"##, x(1.0) + 2.0, y + bar - 2.0);
                }
            }
        }
    }
    let ly = bottom + 34.0;
    for (ti, t) in targets.iter().enumerate() {
        let y = ly + ti as f64 * 18.0;
        let _ = writeln!(o, r##"<rect x="{left}" y="{y:.1}" width="12" height="12" fill="{}"/>"##, colors[ti % colors.len()]);
        let _ = writeln!(o, r##"<text x="{:.1}" y="{:.1}">{}</text>"##, left + 18.0, y + 10.0, esc(&t.spec.label));
    }
    o.push_str("</svg>\n");
    o
}
