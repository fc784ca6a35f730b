//! Per-opcode request counters.
//!
//! Every request that reaches a dispatcher adds one to its opcode's counter
//! (one relaxed atomic add, no lock). [`OpStats::snapshot`] reads them for
//! `ringfs stats`; counters never reset while the session lives.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::abi::{opcode_name, FUSE_OPCODE_MAX};

/// Counters indexed by FUSE opcode; one extra slot counts unknown opcodes.
/// Shared as `Arc<OpStats>` between the session's workers and readers.
#[derive(Debug)]
pub struct OpStats {
    counts: [AtomicU64; FUSE_OPCODE_MAX + 1],
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
        OpStats { counts: std::array::from_fn(|_| AtomicU64::new(0)) }
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
}
