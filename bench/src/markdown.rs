//! results.md: the full table (every target, median [min–max] and ratio per
//! row), the noise judgement, daemon requests per row, targets and failures.

use std::fmt::Write as _;

use serde_json::Value;

use crate::noise::{short_name, Verdict};
use crate::report::{fmt_ms, median, row_title, Summary};
use crate::run::{Results, Sample};

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

/// How many files one sample of `x`'s row works on, for requests per file:
/// 1000 for the create rows (1–3), the installed files for an npm readback
/// (the median of the samples' `files`); None for the other rows.
fn files_per_sample(r: &Results, x: &Summary) -> Option<f64> {
    match (x.row.as_str(), x.phase.as_str()) {
        ("01-create" | "02-create-stat" | "03-create-rm", _) => Some(1000.0),
        (row, "readback") => {
            let mut v: Vec<f64> = r
                .samples
                .iter()
                .filter(|s| s.ok && !s.warmup && s.row == row && s.target == x.target && s.section == x.section)
                .filter_map(|s| s.info.get("files")?.parse().ok())
                .collect();
            median(&mut v).filter(|n| *n > 0.0)
        }
        _ => None,
    }
}

/// The markdown report.
pub fn markdown(r: &Results, sums: &[Summary], noise: &Verdict) -> String {
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
    noise_section(&mut o, r, noise);
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

    for st in r.store.iter().chain(&r.snapshots).chain(&r.sync) {
        crate::store::show::markdown(&mut o, st);
    }

    // Daemon requests per row.
    let rf: Vec<_> = ran.iter().filter(|t| t.spec.is_ringfs()).collect();
    if !rf.is_empty() {
        let _ = writeln!(o, "## Daemon requests per sample (median), ringfs targets\n");
        for t in rf {
            let _ = writeln!(o, "{}:\n", t.spec.label);
            let _ = writeln!(o, "| row | requests | per file | bytes to / from daemon | by opcode |\n|---|---:|---:|---:|---|");
            for x in sums.iter().filter(|x| x.target == t.spec.id) {
                let Some(req) = &x.requests else { continue };
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
                let per = files_per_sample(r, x).map_or("–".to_string(), |n| format!("{:.2}", total as f64 / n));
                let _ = writeln!(o, "| {sec}{} | {total} | {per} | {bytes} | {by} |", row_title(r, &x.row, &x.phase).replace('|', "\\|"));
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

/// The noise section: load, verdict, and the raw-disk spread of every row.
fn noise_section(o: &mut String, r: &Results, v: &Verdict) {
    let _ = writeln!(o, "## Noise\n");
    let _ = writeln!(o, "- {}", v.load.line());
    let _ = writeln!(o, "- {}", v.line());
    if let Some(a) = v.advice() {
        let _ = writeln!(o, "- **{a}**");
    }
    let _ = writeln!(
        o,
        "- A row is flagged when its raw-disk spread (max/min) is over ×{} or when {} or more modes' ratio ranges \
         (mode min ÷ raw max to mode max ÷ raw min) reach below ×{:.2} and above ×{}; rerun when more than {} rows are flagged \
         or the 1-minute load before or (median) during the run exceeded the cores.\n",
        crate::noise::RAW_SPREAD_MAX,
        crate::noise::STRADDLE_MODES,
        1.0 / crate::noise::STRADDLE,
        crate::noise::STRADDLE,
        crate::noise::RERUN_ROWS,
    );
    if v.rows.is_empty() {
        return;
    }
    let _ = writeln!(o, "| row | raw samples | raw min / median / max ms | raw spread | flagged |\n|---|---:|---:|---:|---|");
    for x in &v.rows {
        let title = match (x.section.as_str(), r.rows.iter().find(|k| k.key == x.row)) {
            ("cells", Some(k)) => format!("C{:02} {}", k.n, k.title),
            _ => row_title(r, &x.row, &x.phase),
        };
        let f = |v: Option<f64>| v.map_or("–".to_string(), fmt_ms);
        let _ = writeln!(
            o,
            "| {} | {} | {} / {} / {} | {} | {} |",
            title.replace('|', "\\|"),
            x.raw_n,
            f(x.raw_min_ms),
            f(x.raw_median_ms),
            f(x.raw_max_ms),
            x.raw_spread.map_or("–".to_string(), |s| format!("×{s:.2}")),
            if x.flagged { format!("**{}**: {}", short_name(&x.section, &x.row, &x.phase), x.reasons.join("; ")) } else { String::new() }
        );
    }
    o.push('\n');
}
