//! The store section's mixed 8-client load alone, on a directory you give
//! (a ringfs mount, or any directory to compare with), for reproducing a
//! failure of one client without the rest of the section:
//!
//!     cargo run --release -p bench --example mixed_load -- DIR SECONDS [SCRATCH]
//!
//! DIR/mixed is made and removed; SCRATCH (default: a new directory under
//! /var/tmp, on the host disk) holds the tar and the commands' output. Prints
//! the iterations per client; exit 1 with each failed client's error.
//! Source: `bench::store::mixed::run` with the full profile's sizes (5 000-file
//! tar, 40 packages per npm-like install).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bench::store::{mixed, work};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, secs, rest @ ..] = args.as_slice() else {
        bail!("usage: mixed_load DIR SECONDS [SCRATCH]");
    };
    let secs: f64 = secs.parse().with_context(|| format!("SECONDS must be a number, not {secs:?}"))?;
    let scratch = match rest.first() {
        Some(s) => PathBuf::from(s),
        None => PathBuf::from(format!("/var/tmp/mixed-load-scratch.{}", std::process::id())),
    };
    std::fs::create_dir_all(&scratch)?;
    bench::sys::install_signal_handlers()?;
    let script = scratch.join("sqlite_work.py");
    std::fs::write(&script, work::SQLITE_PY)?;
    let tar = mixed::make_tar(&scratch, 5000)?;
    let rep = mixed::run(&PathBuf::from(dir).join("mixed"), Duration::from_secs_f64(secs), &scratch, &script, &tar, 40)?;
    for (client, n) in &rep.iterations {
        println!("{client}: {n}");
    }
    if rep.errors.is_empty() {
        return Ok(());
    }
    for e in &rep.errors {
        eprintln!("failed: {e}");
    }
    std::process::exit(1)
}
