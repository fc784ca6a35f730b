//! The fs-bench reproduction harness (issue 6).
//!
//! `ringfs-bench` drives the real `ringfs` binary (never the daemon's internals)
//! next to raw disk, tmpfs and peer FUSE filesystems, running the bash bodies in
//! `scripts/fsbench/` identically on every target. It shows progress as
//! `[k/N] row · target · ETA`, judges the noise of the run (load average, the
//! spread of raw-disk samples per row) and writes a summary, the
//! full markdown table, a JSON document with every sample, and figures of the
//! ratios to raw disk (SVG and PNG). `ringfs-bench report --from results.json`
//! writes the same report from an earlier run. See `scripts/bench.sh` for the
//! quick, full and smoke runs.
//!
//! Modules: `run` (the run), `targets`/`rows` (what runs where), `sys`
//! (processes, mounts), `progress`, `report` (per-row summaries), `noise` (the
//! judgement), `screen` (the one-screen summary), `markdown` (results.md),
//! `plot` (the figures), `output` (writing all of it), `store` (the store
//! section of issue 12: fsync latency, SQLite writers, daemon memory, disk, final commit),
//! `snapshots` (the snapshots section of issue 13: commit, diff, restore, fork
//! and dedup beside git on ext4), `exec_cells` (the exec section's cells of
//! issue 15: C01–C12 through `ringfs exec`, with and without `--sandbox`,
//! beside the plain host and `setpriv`; `ringfs-exec-bench --cells`), `sync` (the
//! sync section of issue 14: push, clone and restart against Garage on
//! loopback beside raw object_store transfers of the same bytes).

pub mod exec_cells;
pub mod markdown;
pub mod noise;
pub mod output;
pub mod plot;
pub mod progress;
pub mod report;
pub mod rows;
pub mod run;
pub mod screen;
pub mod snapshots;
pub mod store;
pub mod sync;
pub mod sys;
pub mod targets;
