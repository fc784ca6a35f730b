//! The report without running anything: the one-screen summary of the
//! committed full run, the noise flags on synthetic samples, the figures (valid
//! SVG, log axis, whiskers, legend on top, Okabe–Ito colours), the PNG beside
//! them, `ringfs-bench report --from`, and README's figure being the one the
//! committed run gives. No root needed.

use std::path::{Path, PathBuf};
use std::process::Command;

use bench::noise::{self, Verdict};
use bench::report::{self, Summary};
use bench::run::Results;
use bench::{output, plot, screen};
use serde_json::json;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

const COMMITTED: &str = "bench/results/2026-12-01.json";

fn committed() -> Results {
    output::read_results(&repo().join(COMMITTED)).expect("the committed run reads back")
}

fn judged(r: &Results) -> (Vec<Summary>, Verdict) {
    let sums = report::summarize(r);
    let v = noise::judge(&r.meta, &sums);
    (sums, v)
}

#[test]
fn summary_of_the_committed_run_fits_one_screen() {
    let r = committed();
    let (sums, v) = judged(&r);
    let text = screen::summary(&r, &sums, &v);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() <= 40, "{} lines:\n{text}", lines.len());
    for l in &lines {
        assert!(l.chars().count() <= 120, "{} columns: {l}", l.chars().count());
    }
    // One line per row with the main modes as columns, peers below, noise said.
    let header = lines.iter().find(|l| l.starts_with("row ")).expect("a column header");
    for col in ["raw ms", "spread", "synced", "local-only", "native root", "memory"] {
        assert!(header.contains(col), "{col} missing from {header}");
    }
    for row in ["1 create 1000 files", "6 dd 64 MiB", "14 npm init", "npm express install", "npm toolchain readback", "cells C01–C12, geometric mean", "restore after restart, 3000"] {
        assert_eq!(lines.iter().filter(|l| l.trim_start().starts_with(row)).count(), 1, "{row}:\n{text}");
    }
    for needle in ["load (1-min average, 2 cores): 1.49 before", "2.12 after", "noise:", "tmpfs", "bindfs", "fuse-overlayfs", "rf-uring-synced"] {
        assert!(text.contains(needle), "{needle:?} missing:\n{text}");
    }
    // Row 1's raw samples spread ×2.58 (80–207 ms): flagged, its ratios marked.
    let row1 = lines.iter().find(|l| l.starts_with(" 1 create")).unwrap();
    assert!(row1.contains("×2.58*"), "{row1}");
    assert!(row1.contains('!'), "{row1}");
}

/// A run of `rows` rows with raw disk and the given modes, each with these sample times.
fn synthetic(rows: usize, raw: &[f64], modes: &[(&str, &[f64])], load_before: f64) -> Results {
    let mut targets = vec![json!({"id": "raw", "label": "raw disk", "kind": "raw", "status": "ran", "reason": null, "args": [], "effective": null, "mount_ms": null, "unmount_ms": null})];
    for (id, _) in modes {
        targets.push(json!({
            "id": id, "label": id, "kind": "ringfs", "transport": "uring", "passthrough": "on",
            "local_only": false, "native_root": false, "memory": false,
            "status": "ran", "reason": null, "args": [], "effective": null, "mount_ms": null, "unmount_ms": null
        }));
    }
    let mut samples = vec![];
    let mut row_list = vec![];
    for n in 1..=rows {
        let key = format!("{n:02}-row");
        row_list.push(json!({"n": n, "key": key, "title": format!("row {n}")}));
        let all: Vec<(&str, &[f64])> = std::iter::once(("raw", raw)).chain(modes.iter().copied()).collect();
        for (t, ms) in all {
            for (rep, ms) in ms.iter().enumerate() {
                samples.push(json!({
                    "section": "rows", "row": key, "target": t, "rep": rep, "warmup": false, "ok": true,
                    "ms": ms, "phases_ms": {"body": ms}, "error": null, "counters": null, "info": {}
                }));
            }
        }
    }
    let doc = json!({
        "meta": {
            "date": "2026-12-02", "profile": "quick", "reps": raw.len(), "warmup": 1, "duration_s": 60.0,
            "machine": {"cpus": 2, "cpu_model": "test", "kernel": "6.18", "loadavg_start": format!("{load_before} 0.5 0.5"), "loadavg_end": "0.5 0.5 0.5"},
            "load": {"cores": 2, "before": [load_before, 0.5, 0.5], "during": [{"t_s": 10.0, "avg": [0.8, 0.6, 0.5]}], "after": [0.5, 0.5, 0.5], "interval_s": 10.0},
            "base_fs": "ext4", "interrupted_in": null
        },
        "targets": targets,
        "rows": row_list,
        "samples": samples,
    });
    serde_json::from_value(doc).expect("synthetic results deserialize")
}

const QUIET_RAW: &[f64] = &[100.0, 102.0, 98.0, 101.0, 99.0];
const QUIET_MODE: &[f64] = &[120.0, 118.0, 121.0, 119.0, 122.0];
const NOISY_RAW: &[f64] = &[50.0, 250.0, 100.0, 90.0, 110.0];

#[test]
fn noise_flags_fire_on_noisy_samples_only() {
    // Quiet: nothing flagged, no rerun, ratios unmarked.
    let r = synthetic(6, QUIET_RAW, &[("rf-uring-synced", QUIET_MODE)], 0.3);
    let (sums, v) = judged(&r);
    assert_eq!(v.flagged, 0, "{:?}", v.rows);
    assert!(!v.rerun, "{:?}", v.reasons);
    let text = screen::summary(&r, &sums, &v);
    assert!(!text.contains("rerun"), "{text}");
    let row1 = text.lines().find(|l| l.starts_with(" 1 row 1")).unwrap();
    assert!(row1.contains("×1.20") && !row1.contains('*') && !row1.contains('!') && !row1.contains('~'), "{row1}");

    // Noisy raw disk (×5 spread): every row flagged, more than a few: rerun.
    let r = synthetic(6, NOISY_RAW, &[("rf-uring-synced", QUIET_MODE)], 0.3);
    let (sums, v) = judged(&r);
    assert_eq!(v.flagged, 6);
    assert!(v.rows.iter().all(|x| x.raw_spread == Some(5.0) && x.reasons[0].contains("raw-disk spread ×5.00")), "{:?}", v.rows);
    assert!(v.rerun && v.reasons.iter().any(|x| x.contains("6 rows flagged")), "{:?}", v.reasons);
    let text = screen::summary(&r, &sums, &v);
    assert!(text.contains("rerun on a quiet machine"), "{text}");
    assert!(text.lines().find(|l| l.starts_with(" 1 row 1")).unwrap().contains("×5.00*"), "{text}");
    let md = bench::markdown::markdown(&r, &sums, &v);
    assert!(md.contains("## Noise") && md.contains("rerun on a quiet machine"), "{md}");

    // A few noisy rows are flagged but not a rerun.
    let mut r = synthetic(6, QUIET_RAW, &[("rf-uring-synced", QUIET_MODE)], 0.3);
    for s in r.samples.iter_mut().filter(|s| s.row == "01-row" && s.target == "raw") {
        let ms = NOISY_RAW[s.rep];
        s.ms = Some(ms);
        s.phases_ms.insert("body".into(), ms);
    }
    let (_, v) = judged(&r);
    assert_eq!((v.flagged, v.rerun), (1, false), "{:?}", v.reasons);
    assert!(v.line().contains("1 of 6 rows flagged (1)"), "{}", v.line());

    // Raw disk quiet, but two modes swing from ×0.4 to ×1.6: the ratios straddle 1.0.
    let wild: &[f64] = &[40.0, 160.0, 100.0, 90.0, 110.0];
    let r = synthetic(2, QUIET_RAW, &[("rf-uring-synced", wild), ("rf-mem", wild), ("rf-uring-native", QUIET_MODE)], 0.3);
    let (sums, v) = judged(&r);
    assert_eq!(v.flagged, 2, "{:?}", v.rows);
    assert_eq!(v.rows[0].straddling, vec!["rf-uring-synced".to_string(), "rf-mem".into()]);
    let text = screen::summary(&r, &sums, &v);
    assert!(text.lines().find(|l| l.starts_with(" 1 row 1")).unwrap().contains('!'), "{text}");

    // Quiet samples on a busy machine: the load says rerun.
    let r = synthetic(2, QUIET_RAW, &[("rf-uring-synced", QUIET_MODE)], 5.0);
    let (sums, v) = judged(&r);
    assert_eq!(v.flagged, 0);
    assert!(v.rerun && v.reasons[0].contains("load 5.00 before the run exceeded the 2 cores"), "{:?}", v.reasons);
    assert!(screen::summary(&r, &sums, &v).contains("rerun on a quiet machine"));
}

#[test]
fn the_committed_run_is_judged() {
    let r = committed();
    let (_, v) = judged(&r);
    // Rows 1 (×2.58) and 12 (×1.71) have raw-disk spreads over ×1.5.
    let flagged: Vec<String> = v.rows.iter().filter(|x| x.flagged).map(|x| noise::short_name(&x.section, &x.row, &x.phase)).collect();
    assert!(flagged.contains(&"1".to_string()) && flagged.contains(&"12".to_string()), "{flagged:?}");
    assert_eq!(v.load.cores, 2);
    assert_eq!(v.load.before, Some([1.49, 0.82, 0.33]));
}

fn attr<'a>(n: &roxmltree::Node<'a, 'a>, a: &str) -> f64 {
    n.attribute(a).unwrap_or_else(|| panic!("no {a} on {n:?}")).parse().unwrap()
}

fn check_figure(svg: &str, max_h: f64, min_whiskers: usize) {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is valid XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let h = attr(&root, "height");
    assert!(h <= max_h, "{h} px tall");
    let by_class = |c: &str| doc.descendants().filter(|n| n.attribute("class") == Some(c)).collect::<Vec<_>>();

    // A log axis: the ticks' x positions are linear in log(value), 1.0 marked by its line.
    let unity = by_class("unity");
    assert_eq!(unity.len(), 1);
    let x1 = attr(&unity[0], "x1");
    assert_eq!(x1, attr(&unity[0], "x2"));
    let ticks: Vec<(f64, f64)> = by_class("tick").iter().map(|t| (attr(t, "data-value"), attr(t, "x"))).collect();
    assert!(ticks.iter().any(|(v, x)| *v == 1.0 && (*x - x1).abs() < 0.2), "{ticks:?}");
    let per_decade: Vec<f64> = ticks.iter().filter(|(v, _)| *v != 1.0).map(|(v, x)| (x - x1) / v.log10()).collect();
    assert!(per_decade.len() >= 2);
    for p in &per_decade {
        assert!((p - per_decade[0]).abs() < 1.0, "not a log axis: {ticks:?}");
    }
    assert!(ticks.iter().any(|(v, _)| *v < 1.0) && ticks.iter().any(|(v, _)| *v > 1.0));

    // Whiskers from min to max around each dot.
    let whiskers = by_class("whisker");
    assert!(whiskers.len() >= min_whiskers, "{} whiskers", whiskers.len());
    for w in &whiskers {
        assert!(attr(w, "data-lo") <= attr(w, "data-hi"));
        assert!(attr(w, "x1") <= attr(w, "x2"));
    }
    assert!(by_class("dot").len() >= whiskers.len());

    // The legend sits above the first row of marks.
    let legend = by_class("legend-box");
    assert_eq!(legend.len(), 1);
    let legend_bottom = attr(&legend[0], "y") + attr(&legend[0], "height");
    let first_row = by_class("row").iter().map(|r| attr(r, "data-y")).fold(f64::INFINITY, f64::min);
    assert!(legend_bottom < first_row, "legend ends at {legend_bottom}, first row at {first_row}");
    assert!(legend_bottom < 200.0, "legend ends at {legend_bottom}");

    // Okabe–Ito colours (and neutral greys) only.
    let okabe_ito = ["#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"];
    for n in doc.descendants().filter(|n| n.attribute("class") == Some("dot") || n.attribute("class") == Some("whisker")) {
        let c = n.attribute("stroke").unwrap();
        assert!(okabe_ito.contains(&c) || c == "#7F7F7F", "{c} is not Okabe–Ito");
    }
    // Rows grouped by kind.
    let groups: Vec<String> = by_class("group").iter().filter_map(|g| g.text()).map(str::to_string).collect();
    for g in ["Metadata", "Data", "git and npm", "Cells"] {
        assert!(groups.iter().any(|x| x.starts_with(g)), "{groups:?}");
    }
}

#[test]
fn figures_of_the_committed_run() {
    let r = committed();
    let (sums, v) = judged(&r);
    let main = plot::main_figure(&r, &sums, &v);
    // 30 rows with raw disk (14 rows, 4 npm phases, 12 cells), 4 main modes.
    check_figure(&main, 1400.0, 30 * 4);
    let legend_entries = ["synced (rf-uring-synced)", "local-only (rf-uring-local-pt)", "native root (rf-uring-native)", "memory (rf-mem)"];
    for l in legend_entries {
        assert!(main.contains(l), "{l}");
    }
    let all = plot::all_figure(&r, &sums, &v);
    check_figure(&all, 2600.0, 30 * 14);
    assert!(all.contains("fuse-overlayfs") && all.contains("ringfs dev synced, pt off"));
}

fn png_size(path: &Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", path.display());
    assert_eq!(&b[12..16], b"IHDR");
    let be = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

fn svg_size(path: &Path) -> (f64, f64) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    (attr(&doc.root_element(), "width"), attr(&doc.root_element(), "height"))
}

#[test]
fn report_from_results_json_writes_summary_figures_and_pngs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let st = Command::new(env!("CARGO_BIN_EXE_ringfs-bench")).arg("report").arg("--from").arg(repo().join(COMMITTED)).arg("--out").arg(&out).output().unwrap();
    let stdout = String::from_utf8_lossy(&st.stdout);
    assert!(st.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&st.stderr));
    assert_eq!(stdout, std::fs::read_to_string(out.join("summary.txt")).unwrap(), "stdout is the summary");
    assert!(!out.join("results.json").exists(), "report does not rewrite results.json");
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("## Noise") && md.contains("| 1 create 1000 files |") && md.contains("×2.58"), "{md}");
    for (name, scale) in [("ratios", output::PNG_SCALE), ("ratios-all", output::PNG_SCALE_ALL)] {
        let (w, h) = svg_size(&out.join(format!("{name}.svg")));
        let (pw, ph) = png_size(&out.join(format!("{name}.png")));
        assert_eq!((pw, ph), ((w * scale as f64).round() as u32, (h * scale as f64).round() as u32), "{name}.png");
        assert!(std::fs::metadata(out.join(format!("{name}.png"))).unwrap().len() > 20_000, "{name}.png is nearly empty");
    }
}

#[test]
fn readme_shows_the_figure_of_the_committed_run() {
    let r = committed();
    let (sums, v) = judged(&r);
    let svg = plot::main_figure(&r, &sums, &v);
    let committed_svg = std::fs::read_to_string(repo().join("bench/results/2026-12-01.svg")).unwrap();
    assert!(
        committed_svg == svg,
        "bench/results/2026-12-01.svg is not what the committed run gives; regenerate it:\n  \
         ringfs-bench report --from bench/results/2026-12-01.json --out DIR && cp DIR/ratios.svg bench/results/2026-12-01.svg && cp DIR/ratios.png bench/results/2026-12-01.png"
    );
    let all = std::fs::read_to_string(repo().join("bench/results/2026-12-01-all.svg")).unwrap();
    assert!(all == plot::all_figure(&r, &sums, &v), "bench/results/2026-12-01-all.svg is not what the committed run gives: cp DIR/ratios-all.svg");
    let (w, h) = svg_size(&repo().join("bench/results/2026-12-01.svg"));
    let (pw, ph) = png_size(&repo().join("bench/results/2026-12-01.png"));
    assert_eq!((pw, ph), ((w * 2.0).round() as u32, (h * 2.0).round() as u32));
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(readme.contains("](bench/results/2026-12-01.png)"), "README does not show the figure");
}

#[test]
fn help_readme_and_script_agree() {
    let help = Command::new(env!("CARGO_BIN_EXE_ringfs-bench")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let script = std::fs::read_to_string(repo().join("scripts/bench.sh")).unwrap();
    let decisions = std::fs::read_to_string(repo().join("docs/DECISIONS.md")).unwrap();
    for (name, text) in [("--help", &help), ("README.md", &readme), ("scripts/bench.sh", &script), ("docs/DECISIONS.md", &decisions)] {
        for needle in ["summary.txt", "ratios-all.svg", "ringfs-bench report --from"] {
            assert!(text.contains(needle), "{name} does not mention {needle}");
        }
    }
    for (name, text) in [("--help", &help), ("README.md", &readme), ("docs/DECISIONS.md", &decisions)] {
        for needle in ["rerun on a quiet machine", "×1.5", "more than 3 rows"] {
            assert!(text.contains(needle), "{name} does not say {needle:?}");
        }
    }
}

/// D46: requests per timed phase (run.sh's FSBENCH_STATS) and per file. An
/// npm sample with counters per phase shows install and readback apart, the
/// readback per installed file; a sample of an earlier version (whole-body
/// counters only) shows them under install alone, as its report did.
#[test]
fn request_table_per_phase_and_per_file() {
    let mut r = synthetic(1, QUIET_RAW, &[("rf-uring-synced", QUIET_MODE)], 0.3);
    let row1 = |n: u64| json!({"requests": {"CREATE": 1000, "LOOKUP": 1000, "GETATTR": n}, "bytes_to_daemon": 10, "bytes_from_daemon": 20});
    let mut npm = vec![];
    for rep in 0..3 {
        npm.push(json!({
            "section": "npm", "row": "npm-express", "target": "rf-uring-synced", "rep": rep, "warmup": false, "ok": true,
            "ms": 1010.0, "phases_ms": {"install": 1000.0, "readback": 10.0}, "error": null,
            "counters": {"requests": {"CREATE": 612, "OPEN": 611, "RELEASE": 1231}, "bytes_to_daemon": 900, "bytes_from_daemon": 800},
            "phase_counters": {
                "install": {"requests": {"CREATE": 612, "RELEASE": 620}, "bytes_to_daemon": 700, "bytes_from_daemon": 600},
                "readback": {"requests": {"OPEN": 611, "RELEASE": 611}, "bytes_to_daemon": 200, "bytes_from_daemon": 200}
            },
            "info": {"files": "611"}
        }));
    }
    npm.push(json!({
        "section": "npm", "row": "npm-old", "target": "rf-uring-synced", "rep": 0, "warmup": false, "ok": true,
        "ms": 1010.0, "phases_ms": {"install": 1000.0, "readback": 10.0}, "error": null,
        "counters": {"requests": {"CREATE": 5}, "bytes_to_daemon": 1, "bytes_from_daemon": 1}, "info": {"files": "5"}
    }));
    for s in r.samples.iter_mut().filter(|s| s.target == "rf-uring-synced") {
        s.row = "01-create".into();
        s.counters = Some(serde_json::from_value(row1(1000)).unwrap());
    }
    for s in r.samples.iter_mut().filter(|s| s.target == "raw") {
        s.row = "01-create".into();
    }
    r.rows[0] = serde_json::from_value(json!({"n": 1, "key": "01-create", "title": "create 1000 files"})).unwrap();
    r.rows.push(serde_json::from_value(json!({"n": 0, "key": "npm-express", "title": "npm install express"})).unwrap());
    r.rows.push(serde_json::from_value(json!({"n": 0, "key": "npm-old", "title": "npm old"})).unwrap());
    for s in npm {
        r.samples.push(serde_json::from_value(s).unwrap());
    }
    let (sums, v) = judged(&r);
    let md = bench::markdown::markdown(&r, &sums, &v);
    // The request table comes last: the last line of each row.
    let line = |needle: &str| md.lines().rfind(|l| l.starts_with(needle)).unwrap_or_else(|| panic!("no line {needle:?} in\n{md}")).to_string();
    assert!(line("| 1 create 1000 files |").contains("| 3000 | 3.00 | 10 / 20 |"), "{md}");
    assert!(line("| npm: npm install express: install |").contains("| 1232 | – | 700 / 600 | RELEASE 620, CREATE 612 |"), "{md}");
    assert!(line("| npm: npm install express: readback |").contains("| 1222 | 2.00 | 200 / 200 |"), "{md}");
    assert!(line("| npm: npm old: install |").contains("| 5 |"), "{md}");
    assert!(!md.contains("| npm: npm old: readback |"), "an old sample's readback has no counters of its own:\n{md}");
}
