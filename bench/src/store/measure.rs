//! The store section's instruments: the daemon's memory from
//! `/proc/PID/status` (proc(5): VmRSS, VmHWM), sampled on a thread of its
//! own, and disk use from du(1).

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// How often [`RssSampler`] reads VmRSS.
pub const RSS_INTERVAL: Duration = Duration::from_millis(100);

/// (VmRSS, VmHWM) of `pid` in bytes, from /proc/PID/status (None once it is gone).
pub fn rss_hwm(pid: i32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |name: &str| -> Option<u64> {
        s.lines().find_map(|l| l.strip_prefix(name)).and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok()).map(|k| k * 1024)
    };
    Some((kib("VmRSS:")?, kib("VmHWM:")?))
}

/// Is `pid` a zombie (exited, not yet reaped)? proc(5) `/proc/PID/stat` state `Z`.
pub fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// Bytes to MiB.
pub fn mib(b: u64) -> f64 {
    b as f64 / 1048576.0
}

/// What an [`RssSampler`] saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct RssPeak {
    /// The largest VmRSS sampled, bytes.
    pub max_rss: u64,
    /// The last VmHWM read (the kernel's own peak since the process started), bytes.
    pub hwm: u64,
    /// The last VmRSS read, bytes.
    pub last_rss: u64,
    pub samples: usize,
}

/// Reads VmRSS and VmHWM of one process every [`RSS_INTERVAL`] until stopped
/// or the process is gone.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<RssPeak>,
}

impl RssSampler {
    pub fn start(pid: i32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut p = RssPeak::default();
            while let Some((rss, hwm)) = rss_hwm(pid) {
                p.max_rss = p.max_rss.max(rss);
                p.hwm = p.hwm.max(hwm);
                p.last_rss = rss;
                p.samples += 1;
                if s2.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(RSS_INTERVAL);
            }
            p
        });
        RssSampler { stop, thread }
    }

    /// Stop and return what was seen (the thread reads once more first).
    pub fn stop(self) -> RssPeak {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Disk use of a tree: (apparent bytes `du -sb`, allocated bytes `du -s` blocks × 1024).
/// Missing paths count 0.
pub fn du(path: &Path) -> Result<(u64, u64)> {
    if !path.exists() {
        return Ok((0, 0));
    }
    let one = |args: &[&str]| -> Result<u64> {
        let out = Command::new("du").args(args).arg(path).output().context("running du")?;
        if !out.status.success() {
            bail!("du {} {}: {}", args.join(" "), path.display(), String::from_utf8_lossy(&out.stderr).trim());
        }
        let s = String::from_utf8_lossy(&out.stdout);
        s.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()).with_context(|| format!("du printed {s:?}"))
    };
    Ok((one(&["-sb"])?, one(&["-sk"])? * 1024))
}

/// Wait `d`, then the RSS (bytes) of `pid`: the smallest of the readings over
/// the last second of the wait (the daemon's settled size).
pub fn settled_rss(pid: i32, d: Duration) -> Option<u64> {
    let start = std::time::Instant::now();
    let mut low: Option<u64> = None;
    while start.elapsed() < d {
        std::thread::sleep(RSS_INTERVAL);
        if d.saturating_sub(start.elapsed()) <= Duration::from_secs(1) {
            let (rss, _) = rss_hwm(pid)?;
            low = Some(low.map_or(rss, |l| l.min(rss)));
        }
    }
    low.or_else(|| rss_hwm(pid).map(|x| x.0))
}

/// Median and 90th percentile (nearest rank) of samples (None when empty).
pub fn median_p90(v: &[f64]) -> (Option<f64>, Option<f64>) {
    if v.is_empty() {
        return (None, None);
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let med = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    let rank = ((0.9 * n as f64).ceil() as usize).clamp(1, n);
    (Some(med), Some(v[rank - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_rss_and_percentiles() {
        let (rss, hwm) = rss_hwm(std::process::id() as i32).unwrap();
        assert!(rss > 0 && hwm >= rss);
        assert_eq!(median_p90(&[5.0, 1.0, 3.0]), (Some(3.0), Some(5.0)));
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(median_p90(&v), (Some(10.5), Some(18.0)));
        assert_eq!(median_p90(&[]), (None, None));
    }
}
