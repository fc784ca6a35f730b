//! The figures: every row's time relative to raw disk on a log axis with 1.0
//! marked, a dot at the ratio of medians and a whisker over its min–max range
//! (mode min ÷ raw max to mode max ÷ raw min), rows grouped by kind (metadata,
//! data, git/npm, cells), the legend on top, Okabe–Ito colours with a shape per
//! mode. `ratios.svg` has the main modes (the summary's columns),
//! `ratios-all.svg` every mode; [`png`] renders either with resvg.

use std::fmt::Write as _;

use anyhow::{Context, Result};

use crate::noise::{self, Verdict};
use crate::report::{fmt_ms, main_modes, Summary};
use crate::run::Results;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    Circle,
    Square,
    Diamond,
    TriUp,
    TriDown,
}

/// Okabe–Ito: distinguishable with the common colour-vision deficiencies.
const BLUE: &str = "#0072B2";
const SKY: &str = "#56B4E9";
const ORANGE: &str = "#E69F00";
const VERMILLION: &str = "#D55E00";
const GREEN: &str = "#009E73";
const PURPLE: &str = "#CC79A7";
const BLACK: &str = "#000000";
const GREY: &str = "#7F7F7F";

struct Mode {
    id: String,
    label: String,
    colour: &'static str,
    shape: Shape,
    filled: bool,
}

fn main_style(column: &str) -> (&'static str, Shape) {
    match column {
        "synced" => (BLUE, Shape::Square),
        "local-only" => (ORANGE, Shape::Diamond),
        "native root" => (GREEN, Shape::TriUp),
        _ => (PURPLE, Shape::Circle),
    }
}

/// Colour by mode, shape by kind, filled for io_uring and hollow for /dev/fuse.
fn any_style(id: &str) -> (&'static str, Shape, bool) {
    let uring = !id.starts_with("rf-dev-");
    match id {
        "tmpfs" => (BLACK, Shape::Circle, true),
        "bindfs" => (GREY, Shape::TriDown, true),
        "fuse-overlayfs" => (BLACK, Shape::TriDown, false),
        "rf-mem" => (PURPLE, Shape::Circle, true),
        _ if id.ends_with("-synced") => (BLUE, Shape::Square, uring),
        _ if id.ends_with("-synced-ptoff") => (SKY, Shape::Square, uring),
        _ if id.ends_with("-local-pt") => (ORANGE, Shape::Diamond, uring),
        _ if id.ends_with("-local-ptoff") => (VERMILLION, Shape::Diamond, uring),
        _ if id.ends_with("-native") => (GREEN, Shape::TriUp, uring),
        _ => (GREY, Shape::Circle, false),
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Rough width of `s` at 11 px in a sans-serif face.
fn text_w(s: &str, px: f64) -> f64 {
    s.chars().count() as f64 * px * 0.58
}

fn draw_marker(o: &mut String, m: &Mode, cx: f64, cy: f64, r: f64, title: &str) {
    let fill = if m.filled { m.colour } else { "#ffffff" };
    let common = format!(r#"fill="{fill}" stroke="{}" stroke-width="1.2""#, m.colour);
    let t = if title.is_empty() { String::new() } else { format!("<title>{}</title>", esc(title)) };
    let _ = match m.shape {
        Shape::Circle => writeln!(o, r#"<circle class="dot" cx="{cx:.1}" cy="{cy:.1}" r="{r:.1}" {common}>{t}</circle>"#),
        Shape::Square => {
            let s = r * 0.9;
            writeln!(o, r#"<rect class="dot" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" {common}>{t}</rect>"#, cx - s, cy - s, 2.0 * s, 2.0 * s)
        }
        Shape::Diamond => {
            let s = r * 1.25;
            writeln!(o, r#"<path class="dot" d="M{cx:.1},{:.1} L{:.1},{cy:.1} L{cx:.1},{:.1} L{:.1},{cy:.1} Z" {common}>{t}</path>"#, cy - s, cx + s, cy + s, cx - s)
        }
        Shape::TriUp | Shape::TriDown => {
            let d = if m.shape == Shape::TriUp { 1.0 } else { -1.0 };
            let (tip, base) = (cy - d * r * 1.25, cy + d * r * 0.9);
            writeln!(o, r#"<path class="dot" d="M{cx:.1},{tip:.1} L{:.1},{base:.1} L{:.1},{base:.1} Z" {common}>{t}</path>"#, cx + r * 1.15, cx - r * 1.15)
        }
    };
}

/// Which group a row belongs to: metadata, data, git/npm, cells, other.
const GROUPS: &[&str] = &[
    "Metadata: rows 1–5",
    "Data, 64 MiB: rows 6–11",
    "git and npm: rows 12–14, npm installs (from a warm cache)",
    "Cells C01–C12: a fresh store and mount per sample",
    "Other",
];

fn group_of(section: &str, n: u32) -> usize {
    match (section, n) {
        ("rows", 1..=5) => 0,
        ("rows", 6..=11) => 1,
        ("rows", 12..=14) | ("npm", _) => 2,
        ("cells", _) => 3,
        _ => 4,
    }
}

struct Entry<'a> {
    section: &'a str,
    row: &'a str,
    phase: &'a str,
    label: String,
    flagged: bool,
    raw: &'a Summary,
}

const NICE: &[f64] = &[0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0];

/// The figure with the main modes (the summary's columns): ratios.svg.
pub fn main_figure(r: &Results, sums: &[Summary], v: &Verdict) -> String {
    let modes: Vec<Mode> = main_modes(r)
        .into_iter()
        .map(|(name, t)| {
            let (colour, shape) = main_style(name);
            Mode { id: t.spec.id.clone(), label: format!("{name} ({})", t.spec.id), colour, shape, filled: true }
        })
        .collect();
    figure(r, sums, v, &modes, "main ringfs modes", None)
}

/// The figure with every mode that ran: ratios-all.svg.
pub fn all_figure(r: &Results, sums: &[Summary], v: &Verdict) -> String {
    let modes: Vec<Mode> = r
        .targets
        .iter()
        .filter(|t| t.status == "ran" && t.spec.id != "raw")
        .map(|t| {
            let (colour, shape, filled) = any_style(&t.spec.id);
            Mode { id: t.spec.id.clone(), label: t.spec.label.clone(), colour, shape, filled }
        })
        .collect();
    figure(r, sums, v, &modes, "every mode", Some("filled: io_uring transport (and peers), hollow: /dev/fuse"))
}

fn figure(r: &Results, sums: &[Summary], v: &Verdict, modes: &[Mode], what: &str, extra_legend: Option<&str>) -> String {
    let find = |e: &Entry, id: &str| sums.iter().find(|s| s.section == e.section && s.row == e.row && s.phase == e.phase && s.target == id);
    // Rows with raw-disk samples (restore has none), by group, in table order.
    let mut entries: Vec<(usize, Entry)> = vec![];
    for raw in sums.iter().filter(|s| s.target == "raw") {
        let row = r.rows.iter().find(|x| x.key == raw.row);
        let n = row.map_or(0, |x| x.n);
        let title = row.map_or(raw.row.as_str(), |x| x.title);
        let label = match raw.section.as_str() {
            "cells" => format!("C{n:02} {title}"),
            "npm" => format!("npm {}: {}", raw.row.trim_start_matches("npm-"), raw.phase),
            _ if n > 0 => format!("{n} {title}"),
            _ => title.to_string(),
        };
        let flagged = v.rows.iter().any(|x| x.flagged && x.section == raw.section && x.row == raw.row && x.phase == raw.phase);
        entries.push((group_of(&raw.section, n), Entry { section: &raw.section, row: &raw.row, phase: &raw.phase, label, flagged, raw }));
    }
    entries.sort_by_key(|e| e.0);

    // The axis: 1-2-5 ticks around every ratio and whisker end shown, 1.0 always in.
    let (mut dmin, mut dmax) = (1.0f64, 1.0f64);
    for (_, e) in &entries {
        for m in modes {
            let Some(s) = find(e, &m.id) else { continue };
            let (lo, hi) = noise::ratio_range(s, e.raw).unwrap_or((1.0, 1.0));
            for x in [Some(lo), Some(hi), s.ratio].into_iter().flatten().filter(|x| *x > 0.0) {
                dmin = dmin.min(x);
                dmax = dmax.max(x);
            }
        }
    }
    let lo = NICE.iter().rev().copied().find(|t| *t <= dmin.max(0.01) * 0.999).unwrap_or(0.01).min(0.5);
    let hi = NICE.iter().copied().find(|t| *t >= dmax.min(100.0) * 1.001).unwrap_or(100.0).max(2.0);
    let mut ticks: Vec<f64> = NICE.iter().copied().filter(|t| *t >= lo && *t <= hi).collect();
    if ticks.len() > 10 {
        ticks.retain(|t| (t.log10() - t.log10().round()).abs() < 1e-9);
    }

    let n = modes.len().max(1);
    let (step, rad) = if n <= 6 { (5.6, 2.8) } else { (4.2, 2.1) };
    let row_h = (n as f64 * step + 6.0).max(16.0);
    let w = 1040.0;
    let (lx, x0, x1, ms_x, sp_x) = (296.0, 310.0, 900.0, 962.0, 1026.0);
    let x = |val: f64| x0 + (val.clamp(lo, hi).ln() - lo.ln()) / (hi.ln() - lo.ln()) * (x1 - x0);

    let mut o = String::new();
    let mut body = String::new();
    // Title and what the noise says.
    let m = &r.meta;
    let title = format!(
        "ringfs fs-bench, {} run {}: time relative to raw disk ({what})",
        m["profile"].as_str().unwrap_or(""),
        m["date"].as_str().unwrap_or("")
    );
    let _ = writeln!(body, r#"<text x="12" y="24" font-size="16" font-weight="bold">{}</text>"#, esc(&title));
    let sub = format!(
        "{} CPUs ({}), kernel {}, targets on {}; REPS={}, WARMUP={}",
        m["machine"]["cpus"],
        m["machine"]["cpu_model"].as_str().unwrap_or("?"),
        m["machine"]["kernel"].as_str().unwrap_or("?"),
        m["base_fs"].as_str().unwrap_or("?"),
        m["reps"],
        m["warmup"]
    );
    let _ = writeln!(body, r##"<text x="12" y="42" fill="#444">{}</text>"##, esc(&sub));
    let _ = writeln!(body, r##"<text x="12" y="58" fill="#444">{}</text>"##, esc(&v.load.line()));
    let vcol = if v.rerun || v.flagged > 0 { VERMILLION } else { "#444" };
    let verdict = match v.advice() {
        Some(a) => format!("{} — {a}", v.line()),
        None => v.line(),
    };
    let _ = writeln!(body, r#"<text x="12" y="74" fill="{vcol}">{}</text>"#, esc(&verdict));

    // The legend, on top.
    let ly0 = 86.0;
    let mut legend = String::new();
    let (mut lxp, mut lyp) = (24.0, ly0 + 16.0);
    for md in modes {
        let iw = 16.0 + text_w(&md.label, 11.0) + 22.0;
        if lxp + iw > w - 16.0 {
            lxp = 24.0;
            lyp += 18.0;
        }
        draw_marker(&mut legend, md, lxp + 5.0, lyp - 4.0, 4.0, "");
        let _ = writeln!(legend, r#"<text x="{:.1}" y="{lyp:.1}">{}</text>"#, lxp + 14.0, esc(&md.label));
        lxp += iw;
    }
    lyp += 20.0;
    let wy = lyp - 4.0;
    let _ = writeln!(legend, r##"<line x1="24" y1="{wy:.1}" x2="54" y2="{wy:.1}" stroke="#333" stroke-width="1.4"/><line x1="24" y1="{:.1}" x2="24" y2="{:.1}" stroke="#333"/><line x1="54" y1="{:.1}" x2="54" y2="{:.1}" stroke="#333"/><circle cx="39" cy="{wy:.1}" r="3" fill="#333"/>"##, wy - 3.0, wy + 3.0, wy - 3.0, wy + 3.0);
    let expl = format!(
        "dot: median ÷ raw disk's median; whisker: min–max (mode min ÷ raw max … mode max ÷ raw min); ⚠ row flagged: raw-disk spread over ×{}",
        noise::RAW_SPREAD_MAX
    );
    let _ = writeln!(legend, r##"<text x="62" y="{lyp:.1}" fill="#333">{}</text>"##, esc(&expl));
    if let Some(e) = extra_legend {
        lyp += 18.0;
        let _ = writeln!(legend, r##"<text x="24" y="{lyp:.1}" fill="#333">{}</text>"##, esc(e));
    }
    let ly1 = lyp + 8.0;
    let _ = writeln!(body, r##"<g id="legend"><rect class="legend-box" x="12" y="{ly0:.1}" width="{:.1}" height="{:.1}" fill="#fafafa" stroke="#dddddd"/>"##, w - 24.0, ly1 - ly0);
    body.push_str(&legend);
    body.push_str("</g>\n");

    // Axis labels on top, then the rows.
    let hint_y = ly1 + 18.0;
    let tick_y = ly1 + 34.0;
    let top = ly1 + 42.0;
    let _ = writeln!(body, r##"<text x="{:.1}" y="{hint_y:.1}" text-anchor="end" fill="#444">← faster than raw disk</text>"##, x(1.0) - 8.0);
    let _ = writeln!(body, r##"<text x="{:.1}" y="{hint_y:.1}" fill="#444">slower →</text>"##, x(1.0) + 8.0);
    let _ = writeln!(body, r##"<text x="{ms_x}" y="{tick_y:.1}" text-anchor="end" fill="#444">raw ms</text><text x="{sp_x}" y="{tick_y:.1}" text-anchor="end" fill="#444">spread</text>"##);
    let mut y = top;
    let mut rows_svg = String::new();
    let mut zebra = String::new();
    let mut last_group = usize::MAX;
    for (i, (g, e)) in entries.iter().enumerate() {
        if *g != last_group {
            last_group = *g;
            let _ = writeln!(rows_svg, r#"<text class="group" x="12" y="{:.1}" font-size="12" font-weight="bold">{}</text>"#, y + 16.0, esc(GROUPS[*g]));
            y += 22.0;
        }
        let _ = writeln!(rows_svg, r#"<g class="row" data-y="{y:.1}">"#);
        if i % 2 == 0 {
            let _ = writeln!(zebra, r##"<rect class="zebra" x="8" y="{y:.1}" width="{:.1}" height="{row_h:.1}" fill="#f3f3f3"/>"##, w - 16.0);
        }
        let cy_mid = y + row_h / 2.0 + 4.0;
        let (lab, col) = if e.flagged { (format!("⚠ {}", e.label), VERMILLION) } else { (e.label.clone(), "#000000") };
        let _ = writeln!(rows_svg, r#"<text x="{lx}" y="{cy_mid:.1}" text-anchor="end" fill="{col}">{}</text>"#, esc(&lab));
        let ms = e.raw.median_ms.map_or("–".into(), fmt_ms);
        let sp = if e.raw.n >= 2 { noise::spread(e.raw).map_or("–".into(), |s| format!("×{s:.2}")) } else { "–".into() };
        let weight = if e.flagged { r#" font-weight="bold""# } else { "" };
        let _ = writeln!(rows_svg, r##"<text x="{ms_x}" y="{cy_mid:.1}" text-anchor="end" fill="#444">{ms}</text><text x="{sp_x}" y="{cy_mid:.1}" text-anchor="end" fill="{col}"{weight}>{sp}</text>"##);
        let y_first = y + (row_h - n as f64 * step) / 2.0 + step / 2.0;
        for (mi, md) in modes.iter().enumerate() {
            let cy = y_first + mi as f64 * step;
            let Some(s) = find(e, &md.id) else { continue };
            let Some(ratio) = s.ratio else {
                if s.fails > 0 {
                    let _ = writeln!(rows_svg, r#"<text x="{:.1}" y="{:.1}" font-size="8" fill="{VERMILLION}">FAIL {}</text>"#, x(1.0) + 4.0, cy + 3.0, esc(&md.id));
                }
                continue;
            };
            if let Some((rlo, rhi)) = noise::ratio_range(s, e.raw) {
                let (a, b) = (x(rlo), x(rhi));
                let _ = writeln!(
                    rows_svg,
                    r#"<line class="whisker" data-lo="{rlo:.3}" data-hi="{rhi:.3}" x1="{a:.1}" y1="{cy:.1}" x2="{b:.1}" y2="{cy:.1}" stroke="{}" stroke-width="1.3"/>"#,
                    md.colour
                );
                // Caps where the range ends inside the axis.
                for (end, inside) in [(a, rlo >= lo), (b, rhi <= hi)] {
                    if inside {
                        let _ = writeln!(rows_svg, r#"<line x1="{end:.1}" y1="{:.1}" x2="{end:.1}" y2="{:.1}" stroke="{}" stroke-width="1.1"/>"#, cy - 2.2, cy + 2.2, md.colour);
                    }
                }
            }
            let tip = format!(
                "{}: ×{ratio:.2} (min–max ×{}), {} samples{}",
                md.label,
                noise::ratio_range(s, e.raw).map_or("?".into(), |(a, b)| format!("{a:.2}–×{b:.2}")),
                s.n,
                if s.fails > 0 { format!(", {} FAIL", s.fails) } else { String::new() }
            );
            draw_marker(&mut rows_svg, md, x(ratio), cy, rad, &tip);
        }
        rows_svg.push_str("</g>\n");
        y += row_h;
    }
    let bottom = y;
    // Grid and ticks under the rows' marks, the 1.0 line over the zebra.
    let mut grid = String::new();
    for &t in &ticks {
        let xv = x(t);
        let label = if t < 1.0 { format!("×{t}") } else { format!("×{t:.0}") };
        if (t - 1.0).abs() > 1e-9 {
            let _ = writeln!(grid, r##"<line class="grid" x1="{xv:.1}" y1="{top:.1}" x2="{xv:.1}" y2="{bottom:.1}" stroke="#d9d9d9"/>"##);
        }
        for ty in [tick_y, bottom + 14.0] {
            let _ = writeln!(grid, r#"<text class="tick" data-value="{t}" x="{xv:.1}" y="{ty:.1}" text-anchor="middle">{label}</text>"#);
        }
    }
    let unity = format!(
        r##"<line class="unity" data-value="1" x1="{0:.1}" y1="{top:.1}" x2="{0:.1}" y2="{bottom:.1}" stroke="#000000" stroke-width="1.5"/>"##,
        x(1.0)
    );
    // Zebra bands, then the grid and the 1.0 line, then the rows' marks on top.
    body.push_str(&zebra);
    body.push_str(&grid);
    body.push_str(&unity);
    body.push('\n');
    body.push_str(&rows_svg);
    let _ = writeln!(
        body,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#444">time relative to raw disk, log scale (×1 = raw disk; lower is faster)</text>"##,
        (x0 + x1) / 2.0,
        bottom + 32.0
    );
    let _ = writeln!(
        body,
        r##"<text x="12" y="{:.1}" font-size="10" fill="#777">ringfs-bench · every sample in results.json, the full table in results.md</text>"##,
        bottom + 50.0
    );
    let h = bottom + 60.0;
    let _ = writeln!(o, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="DejaVu Sans, Liberation Sans, Helvetica, Arial, sans-serif" font-size="11">"#
    );
    let _ = writeln!(o, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    o.push_str(&body);
    o.push_str("</svg>\n");
    o
}

/// Render an SVG to PNG at `scale` with resvg (system fonts; DejaVu Sans when
/// installed, scripts/setup.sh installs it).
pub fn png(svg: &str, scale: f32) -> Result<Vec<u8>> {
    use resvg::{tiny_skia, usvg};
    let mut opt = usvg::Options::default();
    {
        let db = opt.fontdb_mut();
        db.load_system_fonts();
        // Generic families to a face that is there.
        let fams: Vec<String> = db.faces().flat_map(|f| f.families.iter().map(|(n, _)| n.clone())).collect();
        if let Some(f) = ["DejaVu Sans", "Liberation Sans", "Noto Sans"].iter().find(|f| fams.iter().any(|x| x == *f)) {
            db.set_sans_serif_family(*f);
        } else if let Some(f) = fams.first() {
            db.set_sans_serif_family(f.clone());
        }
    }
    let tree = usvg::Tree::from_str(svg, &opt).context("parsing the SVG")?;
    let size = tree.size().to_int_size().scale_by(scale).context("the PNG size")?;
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).context("allocating the PNG")?;
    resvg::render(&tree, tiny_skia::Transform::from_scale(scale, scale), &mut pixmap.as_mut());
    pixmap.encode_png().context("encoding the PNG")
}
