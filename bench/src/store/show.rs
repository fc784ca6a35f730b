//! The store section in the one-screen summary and in results.md: one line
//! (or table row) per figure with ext4, ringfs, their ratio, the target and
//! PASS/FAIL, after a head line saying what ran and the section's load.

use std::fmt::Write as _;

use crate::store::figures::{fmt_value, pass_mark, Figure, StoreSection};

const TITLE_W: usize = 58;
const VAL_W: usize = 11;

fn ratio_text(f: &Figure) -> String {
    match (f.unit.as_str(), f.ratio()) {
        ("ok" | "count", _) | (_, None) => "–".into(),
        (_, Some(x)) if x < 10.0 => format!("×{x:.2}"),
        (_, Some(x)) if x < 100.0 => format!("×{x:.1}"),
        (_, Some(x)) => format!("×{x:.0}"),
    }
}

fn truncate(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        s.to_string()
    } else {
        s.chars().take(w - 1).collect::<String>() + "…"
    }
}

fn head(s: &StoreSection) -> Vec<String> {
    let (met, missed, open) = s.tally();
    let (name, issue) = s.name();
    let beside = match name {
        "snapshots" => format!("git and cp -a on {}", s.ext4_fs),
        "sync" => format!("raw object_store transfers; remote: {}", s.ext4_fs),
        _ => format!("a directory on {}", s.ext4_fs),
    };
    let mut h = vec![
        format!("{name} section ({}, {:.0} s): ringfs defaults (synced, embedded store) beside {beside}", s.profile, s.duration_s),
        format!("targets ({issue}): {met} met, {missed} missed{}", if open > 0 { format!(", {open} undecided") } else { String::new() }),
    ];
    h.push(s.load.line());
    h
}

/// The store section's lines of the one-screen summary (≤ 120 columns each but the head).
pub fn summary_lines(s: &StoreSection) -> Vec<String> {
    let mut lines = head(s);
    let ext4 = match s.name().0 {
        "snapshots" => "git/cp -a",
        "sync" => "ref",
        _ => "ext4",
    };
    lines.push(format!("{:<TITLE_W$} {:>VAL_W$} {:>VAL_W$} {:>7}  target", "figure", ext4, "ringfs", "ratio"));
    for f in &s.figures {
        let t = f.target.as_ref().map_or(String::new(), |t| format!("{} {}", t.text, pass_mark(f)));
        // A title wider than its column gets a line of its own (whole, not
        // cut mid-word), its figures on the next.
        let title = if f.title.chars().count() > TITLE_W {
            lines.push(truncate(&f.title, 120));
            "  ↳".to_string()
        } else {
            f.title.clone()
        };
        let l = format!(
            "{:<TITLE_W$} {:>VAL_W$} {:>VAL_W$} {:>7}  {t}",
            title,
            fmt_value(&f.unit, f.ext4),
            fmt_value(&f.unit, f.ringfs),
            ratio_text(f)
        );
        lines.push(l.trim_end().to_string());
    }
    for e in &s.errors {
        lines.push(truncate(&format!("  failed: {e}"), 120));
    }
    lines
}

/// The store section of results.md.
pub fn markdown(o: &mut String, s: &StoreSection) {
    let (name, issue) = s.name();
    if name == "snapshots" {
        return snapshots_markdown(o, s);
    }
    if name == "sync" {
        return sync_markdown(o, s);
    }
    let _ = writeln!(o, "## Store ({issue})\n");
    for l in head(s) {
        let _ = writeln!(o, "{l}.  ");
    }
    let sizes = serde_json::to_string(&s.sizes).unwrap_or_default();
    let _ = writeln!(
        o,
        "\nringfs: `ringfs mount MP {}` (effective: {}). Sizes: `{sizes}`. Memory is the daemon's (from /proc/PID/status: \
         VmHWM, and VmRSS read every 100 ms); \"idle after\" is the lowest VmRSS over the last second of a {} s wait after the work. \
         Disk is `du` after a clean unmount. SQLite runs in WAL mode with busy_timeout 60 s.\n",
        s.ringfs_args.join(" "),
        s.ringfs_effective,
        s.sizes.get("settle_s").map_or("?".into(), |v| v.to_string())
    );
    let _ = writeln!(o, "| figure | ext4 | ringfs | ratio | target | |\n|---|---:|---:|---:|---|---|");
    rows(o, s);
}

/// The figure rows and failures of a section's table.
fn rows(o: &mut String, s: &StoreSection) {
    for f in &s.figures {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} |",
            f.title.replace('|', "\\|"),
            fmt_value(&f.unit, f.ext4),
            fmt_value(&f.unit, f.ringfs),
            ratio_text(f),
            f.target.as_ref().map_or("", |t| t.text.as_str()),
            pass_mark(f)
        );
    }
    if !s.errors.is_empty() {
        let _ = writeln!(o, "\nFailed:\n");
        for e in &s.errors {
            let _ = writeln!(o, "- {}", e.replace('\n', " "));
        }
    }
    o.push('\n');
}

/// The snapshots section of results.md: the ext4 column is git (or `cp -a`).
fn snapshots_markdown(o: &mut String, s: &StoreSection) {
    let _ = writeln!(o, "## Snapshots (issue 13)\n");
    for l in head(s) {
        let _ = writeln!(o, "{l}.  ");
    }
    let sizes = serde_json::to_string(&s.sizes).unwrap_or_default();
    let _ = writeln!(
        o,
        "\nringfs: `ringfs mount MP {}` (effective: {}), its `commit`, `diff`, `restore` and `fork` commands; beside it the same \
         steps with git on an ext4 directory (`git add -A` + `git commit`, `git diff --name-status`, `git reset --hard`) and `cp -a` \
         for a fork. Times with a target are the daemon's own (`total_ms` of `--json`) where the command reports one, else the \
         command's wall time; medians of the repetitions. Store growth is `du -sb` of the store without its working copies \
         (packs + database); git's is `du -sb .git`. Sizes: `{sizes}`.\n",
        s.ringfs_args.join(" "),
        s.ringfs_effective,
    );
    let _ = writeln!(o, "| figure | git / cp -a | ringfs | ratio | target | |\n|---|---:|---:|---:|---|---|");
    rows(o, s);
}

/// The sync section of results.md: the reference column is raw
/// object_store on the same server (or the local-only variant).
fn sync_markdown(o: &mut String, s: &StoreSection) {
    let _ = writeln!(o, "## Sync (issue 14)\n");
    for l in head(s) {
        let _ = writeln!(o, "{l}.  ");
    }
    let sizes = serde_json::to_string(&s.sizes).unwrap_or_default();
    let _ = writeln!(
        o,
        "\nringfs: `ringfs mount MP {}`, `remote add`, `commit` + `push --json` (bytes and objects as the push reports them), \
         `clone` then `mount` of the clone, `mount --remote` (the sync thread's startup reconciliation from `remote status --json`). \
         The reference column is object_store (the crate ringfs uses, configured the same way) moving the same bytes with nothing \
         of ringfs between: a list + GET of every key of the clone's remote prefix written to files (8 GETs at a time), and one \
         PUT per file of the pushed change; for npm, the same install with `node_modules` local-only. Times are wall times of \
         the commands; the clone's figures and the raw download are medians of three turns taken in alternation (since \
         D82; single samples before). Sizes: `{sizes}`.\n",
        s.ringfs_args.join(" "),
    );
    let _ = writeln!(o, "| figure | ref | ringfs | ratio | target | |\n|---|---:|---:|---:|---|---|");
    rows(o, s);
}
