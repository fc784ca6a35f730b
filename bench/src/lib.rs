//! The fs-bench reproduction harness (issue 6).
//!
//! `ringfs-bench` drives the real `ringfs` binary (never the daemon's internals)
//! next to raw disk, tmpfs and peer FUSE filesystems, running the bash bodies in
//! `scripts/fsbench/` identically on every target, and writes a markdown table,
//! a JSON document with every sample, and an SVG plot of the ratios to raw disk.
//! See `scripts/bench.sh` for the quick, full and smoke runs.

pub mod noise;
pub mod progress;
pub mod report;
pub mod rows;
pub mod run;
pub mod sys;
pub mod targets;
