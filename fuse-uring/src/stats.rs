//! Per-opcode request counters, latency histograms and byte counts.
//!
//! Every request that reaches a dispatcher adds one to its opcode's counter
//! (one relaxed atomic add, no lock); [`OpStats::record_done`] adds the time
//! the filesystem took to a per-opcode latency histogram and the request and
//! reply sizes to byte counters. [`OpStats::snapshot`] reads them for
//! `ringfs stats`; counters never reset while the session lives.
//!
//! Histogram buckets are log-linear: four buckets per power of two of
//! nanoseconds, so a reported percentile is within 12.5 % of the true value.
//!
//! Built on [`abi`](crate::abi) alone (opcode numbers and names): the
//! dispatcher feeds it, the session hands it out; it knows nothing of
//! request contents, the filesystem or the transports.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::abi::{opcode_name, FUSE_OPCODE_MAX};

/// Counters indexed by FUSE opcode; one extra slot counts unknown opcodes.
/// Shared as `Arc<OpStats>` between the session's workers and readers.
#[derive(Debug)]
pub struct OpStats {
    counts: [AtomicU64; FUSE_OPCODE_MAX + 1],
    /// `latency[slot][bucket]`, see [`bucket`].
    latency: Box<[[AtomicU64; BUCKETS]]>,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// Histogram buckets per opcode: 4 per power of two over 64 powers.
const BUCKETS: usize = 256;

/// The histogram bucket of a latency of `ns` nanoseconds.
fn bucket(ns: u64) -> usize {
    let v = ns.max(1);
    let e = 63 - v.leading_zeros() as u64;
    let sub = if e >= 2 { (v >> (e - 2)) & 3 } else { (v << (2 - e)) & 3 };
    (e * 4 + sub) as usize
}

/// The representative value (middle) of a histogram bucket, in nanoseconds.
fn bucket_mid_ns(b: usize) -> f64 {
    let e = (b / 4) as i32;
    let sub = (b % 4) as f64;
    2f64.powi(e) * (1.0 + (sub + 0.5) / 4.0)
}

/// Latency percentiles of one opcode, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Requests whose latency was recorded (requests without a reply, such
    /// as FORGET, are counted but not timed).
    pub samples: u64,
}

/// One row of a [`OpStats::snapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpCount {
    /// The FUSE opcode (`abi::FUSE_LOOKUP`, ...); `u32::MAX` for the
    /// "unknown opcodes" row.
    pub opcode: u32,
    /// The kernel's name of the opcode (`"LOOKUP"`), or `"UNKNOWN"`.
    pub name: &'static str,
    /// Requests received with this opcode since the session started.
    pub count: u64,
}

impl Default for OpStats {
    fn default() -> Self {
        OpStats {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            latency: (0..=FUSE_OPCODE_MAX).map(|_| std::array::from_fn(|_| AtomicU64::new(0))).collect(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
        }
    }
}

impl OpStats {
    #[inline]
    fn slot(opcode: u32) -> usize {
        if (opcode as usize) < FUSE_OPCODE_MAX && opcode_name(opcode).is_some() {
            opcode as usize
        } else {
            FUSE_OPCODE_MAX
        }
    }

    /// Counts one request with `opcode`.
    #[inline]
    pub fn record(&self, opcode: u32) {
        self.counts[Self::slot(opcode)].fetch_add(1, Ordering::Relaxed);
    }

    /// Records a handled request: the time the filesystem took, the request
    /// bytes the kernel sent and the reply bytes sent back.
    #[inline]
    pub fn record_done(&self, opcode: u32, took: Duration, request_bytes: usize, reply_bytes: usize) {
        let ns = took.as_nanos().min(u64::MAX as u128) as u64;
        self.latency[Self::slot(opcode)][bucket(ns)].fetch_add(1, Ordering::Relaxed);
        self.bytes_in.fetch_add(request_bytes as u64, Ordering::Relaxed);
        self.bytes_out.fetch_add(reply_bytes as u64, Ordering::Relaxed);
    }

    /// Bytes of requests received from the kernel, and of replies sent.
    pub fn bytes(&self) -> (u64, u64) {
        (self.bytes_in.load(Ordering::Relaxed), self.bytes_out.load(Ordering::Relaxed))
    }

    /// Latency percentiles for `opcode` (zeros when nothing was timed).
    pub fn latency(&self, opcode: u32) -> Latency {
        let h = &self.latency[Self::slot(opcode)];
        let counts: Vec<u64> = h.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return Latency::default();
        }
        let pct = |q: f64| {
            let rank = ((total as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (b, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return bucket_mid_ns(b) / 1000.0;
                }
            }
            bucket_mid_ns(BUCKETS - 1) / 1000.0
        };
        Latency { p50_us: pct(0.50), p90_us: pct(0.90), p99_us: pct(0.99), samples: total }
    }

    /// Requests counted for `opcode` (unknown opcodes share one counter).
    pub fn get(&self, opcode: u32) -> u64 {
        self.counts[Self::slot(opcode)].load(Ordering::Relaxed)
    }

    /// Total requests counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The non-zero counters, in opcode order, the unknown-opcode row last.
    pub fn snapshot(&self) -> Vec<OpCount> {
        let mut out = Vec::new();
        for (i, c) in self.counts.iter().enumerate() {
            let count = c.load(Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            let (opcode, name) = if i == FUSE_OPCODE_MAX {
                (u32::MAX, "UNKNOWN")
            } else {
                (i as u32, opcode_name(i as u32).unwrap_or("UNKNOWN"))
            };
            out.push(OpCount { opcode, name, count });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::*;

    #[test]
    fn counts_and_snapshot() {
        let s = OpStats::default();
        s.record(FUSE_LOOKUP);
        s.record(FUSE_LOOKUP);
        s.record(FUSE_COPY_FILE_RANGE_64);
        s.record(9999);
        s.record(7); // a hole in the opcode table
        assert_eq!(s.get(FUSE_LOOKUP), 2);
        assert_eq!(s.total(), 5);
        let snap = s.snapshot();
        assert_eq!(snap[0], OpCount { opcode: FUSE_LOOKUP, name: "LOOKUP", count: 2 });
        assert_eq!(snap[1].name, "COPY_FILE_RANGE_64");
        assert_eq!(snap[2], OpCount { opcode: u32::MAX, name: "UNKNOWN", count: 2 });
    }

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for ns in [1u64, 2, 3, 4, 5, 7, 8, 100, 1000, 5000, 1 << 40, u64::MAX] {
            let b = bucket(ns);
            assert!(b >= last && b < BUCKETS, "{ns} -> {b}");
            last = b;
            if ns >= 4 {
                let mid = bucket_mid_ns(b);
                assert!((mid - ns as f64).abs() / (ns as f64) <= 0.25, "{ns} ~ {mid}");
            }
        }
    }

    #[test]
    fn percentiles() {
        let s = OpStats::default();
        for _ in 0..90 {
            s.record_done(FUSE_GETATTR, Duration::from_micros(10), 40, 120);
        }
        for _ in 0..10 {
            s.record_done(FUSE_GETATTR, Duration::from_millis(1), 40, 120);
        }
        let l = s.latency(FUSE_GETATTR);
        assert_eq!(l.samples, 100);
        assert!((l.p50_us - 10.0).abs() < 1.5, "{l:?}");
        assert!((l.p90_us - 10.0).abs() < 1.5, "{l:?}");
        assert!((l.p99_us - 1000.0).abs() < 130.0, "{l:?}");
        assert_eq!(s.bytes(), (4000, 12000));
        assert_eq!(s.latency(FUSE_LOOKUP), Latency::default());
    }
}
