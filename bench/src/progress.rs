//! Progress of a run: `[k/N] row · target · ETA` on one updating line (indicatif)
//! when stderr is a terminal; otherwise (CI, a log file) one plain line per
//! completed sample group — one row of one repetition on every target — with
//! k/N and the ETA. Failed samples are always printed, one line each.
//!
//! The ETA is the mean time per sample so far times the samples left: the
//! targets of a row are interleaved and every repetition runs every row, so the
//! mean over whole groups is a fair guess (the first group is all it knows).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use crate::run::Sample;

/// Estimated time left after `done` of `total` samples took `elapsed`.
pub fn eta(elapsed: Duration, done: u64, total: u64) -> Option<Duration> {
    if done == 0 || total < done {
        return None;
    }
    Some(elapsed.mul_f64((total - done) as f64 / done as f64))
}

/// `1h02m`, `12m30s`, `45s`.
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

fn fmt_eta(e: Option<Duration>) -> String {
    e.map_or_else(|| "ETA –".into(), |d| format!("ETA {}", fmt_duration(d)))
}

struct Group {
    label: String,
    row: String,
    samples: usize,
    fails: usize,
    t0: Instant,
}

pub struct Progress {
    bar: Option<ProgressBar>,
    total: u64,
    done: u64,
    started: Instant,
    group: Option<Group>,
    /// Plain lines printed (non-terminal mode), for the caller's record.
    pub lines: usize,
}

impl Progress {
    /// A progress line for `total` samples: indicatif on a terminal, plain lines otherwise.
    pub fn new(total: u64) -> Progress {
        let tty = std::io::stderr().is_terminal() && std::env::var_os("FSBENCH_PLAIN_PROGRESS").is_none();
        let bar = tty.then(|| {
            let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("[{pos}/{len}] {wide_msg} · {my_eta} ({elapsed})")
                .expect("a valid template")
                .with_key("my_eta", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = w.write_str(&fmt_eta(eta(s.elapsed(), s.pos(), s.len().unwrap_or(0))));
                });
            pb.set_style(style);
            pb.enable_steady_tick(Duration::from_secs(1));
            pb
        });
        Progress { bar, total, done: 0, started: Instant::now(), group: None, lines: 0 }
    }

    /// Print a line above the progress line (or just print it).
    pub fn println(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }

    /// A group of samples begins: `row` in `label` (say "rows rep 2/3").
    pub fn group(&mut self, label: &str, row: &str) {
        self.end_group();
        self.group = Some(Group { label: label.into(), row: row.into(), samples: 0, fails: 0, t0: Instant::now() });
    }

    /// A sample of the current group's row on `target` starts.
    pub fn start(&mut self, target: &str) {
        if let (Some(b), Some(g)) = (&self.bar, &self.group) {
            b.set_message(format!("{} ({}) · {target}", g.row, g.label));
        }
    }

    /// A sample ended: count it; a failure gets a line of its own.
    pub fn done(&mut self, s: &Sample) {
        self.done += 1;
        if let Some(b) = &self.bar {
            b.inc(1);
        }
        if let Some(g) = &mut self.group {
            g.samples += 1;
            if !s.ok {
                g.fails += 1;
            }
        }
        if !s.ok {
            let what = self.group.as_ref().map_or(String::new(), |g| format!(" ({})", g.label));
            self.println(&format!("ringfs-bench: FAIL {} on {}{what}: {}", s.row, s.target, s.error.as_deref().unwrap_or("?")));
        }
    }

    /// The current group is complete: in plain mode, one line for it.
    pub fn end_group(&mut self) {
        let Some(g) = self.group.take() else { return };
        if self.bar.is_some() || g.samples == 0 {
            return;
        }
        let fails = if g.fails > 0 { format!(" ({} FAIL)", g.fails) } else { String::new() };
        eprintln!(
            "[{}/{}] {} · {} · {} samples in {:.1} s{fails} · {}",
            self.done,
            self.total,
            g.row,
            g.label,
            g.samples,
            g.t0.elapsed().as_secs_f64(),
            fmt_eta(eta(self.started.elapsed(), self.done, self.total))
        );
        self.lines += 1;
    }

    /// The run ended (or stopped): clear the progress line.
    pub fn finish(&mut self) {
        self.end_group();
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_is_the_mean_so_far_times_what_is_left() {
        assert_eq!(eta(Duration::from_secs(10), 0, 100), None);
        assert_eq!(eta(Duration::from_secs(10), 10, 100), Some(Duration::from_secs(90)));
        assert_eq!(eta(Duration::from_secs(10), 100, 100), Some(Duration::ZERO));
        assert_eq!(fmt_duration(Duration::from_secs(45)), "45s");
        assert_eq!(fmt_duration(Duration::from_secs(750)), "12m30s");
        assert_eq!(fmt_duration(Duration::from_secs(3720)), "1h02m");
    }
}
