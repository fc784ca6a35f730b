//! The lockfile protocol (git's index.lock, and many other tools'): create
//! `NAME.lock` with O_CREAT|O_EXCL, write it, close it, rename it over `NAME`
//! (or unlink it to roll back). Once the rename or unlink has returned, the
//! next O_EXCL create of `NAME.lock` must succeed. Issue 12's mixed load saw a
//! `git commit` fail on a lock file that existed, once in 2 464 commits (git's
//! own detached gc holding HEAD.lock, docs/DECISIONS.md D31, not ringfs);
//! this is the short version of `scripts/stress-rename-excl.sh` (which runs
//! it for minutes beside git, SQLite and churn), through a real mount on the
//! io_uring transport (`--transport auto`: /dev/fuse where the kernel has no
//! FUSE-over-io_uring) and on /dev/fuse, with a reader walking the directory
//! and reading every file meanwhile (as the benchmark's `cat` client read
//! `.git/index.lock` while git renamed it). Counts, never timings.

mod common;

use common::*;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Lockfile cycles per writer thread.
const CYCLES: usize = 1500;
/// Writer threads, all in one directory.
const WRITERS: usize = 4;

/// One writer: `CYCLES` times create `t<k>.lock` exclusively, write, close,
/// then rename it over `t<k>` (every third cycle of odd threads: unlink it,
/// git's rollback). Returns the first failure, described.
fn writer(dir: &Path, k: usize) -> Result<(), String> {
    let lock = dir.join(format!("t{k}.lock"));
    let fin = dir.join(format!("t{k}"));
    for i in 0..CYCLES {
        let mut f = match fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o644).open(&lock) {
            Ok(f) => f,
            Err(e) => {
                let after = fs::symlink_metadata(&lock).map(|m| format!("exists, {} bytes", m.len())).unwrap_or_else(|e| e.to_string());
                return Err(format!("thread {k} cycle {i}: O_EXCL create of {}: {e} (a stat afterwards: {after})", lock.display()));
            }
        };
        let line = format!("thread {k} cycle {i}\n");
        f.write_all(line.repeat(1 + i % 40).as_bytes()).map_err(|e| format!("thread {k} cycle {i}: write: {e}"))?;
        if i % 64 == 0 {
            f.sync_all().map_err(|e| format!("thread {k} cycle {i}: fsync: {e}"))?;
        }
        drop(f);
        let r = if k % 2 == 1 && i % 3 == 0 { fs::remove_file(&lock) } else { fs::rename(&lock, &fin) };
        r.map_err(|e| format!("thread {k} cycle {i}: rename/unlink of {}: {e}", lock.display()))?;
        // The next command reads the final name (git reads the index).
        let _ = fs::read(&fin);
    }
    Ok(())
}

/// Reads every file of `dir` (names from readdir, so often a `.lock` being
/// renamed away) until `stop`; errors from vanished files are expected.
fn reader(dir: PathBuf, stop: Arc<AtomicBool>) -> usize {
    let mut walks = 0;
    while !stop.load(Ordering::Relaxed) {
        if let Ok(rd) = fs::read_dir(&dir) {
            for e in rd.flatten() {
                let _ = e.metadata();
                let _ = fs::read(e.path());
            }
        }
        walks += 1;
    }
    walks
}

/// Files created, renamed over each other and unlinked in `dir` until `stop`.
fn churn(dir: PathBuf, stop: Arc<AtomicBool>) {
    fs::create_dir_all(&dir).unwrap();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let tmp = dir.join(format!("c{}.tmp", n % 64));
        if fs::write(&tmp, vec![b'x'; n % 3000]).is_ok() {
            let _ = fs::rename(&tmp, dir.join(format!("c{}", n % 17)));
        }
        if n % 5 == 0 {
            let _ = fs::remove_file(dir.join(format!("c{}", (n / 5) % 17)));
        }
        n += 1;
    }
}

fn lockfile_protocol(transport: &str) {
    let m = TestMount::builder(Backend::Store).args(["--transport", transport]).name(format!("store, --transport {transport}")).mount();
    let dir = m.p("locks");
    fs::create_dir(&dir).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (walks, failures) = std::thread::scope(|s| {
        let r = s.spawn({
            let (d, st) = (dir.clone(), stop.clone());
            move || reader(d, st)
        });
        let c = s.spawn({
            let (d, st) = (m.p("churn"), stop.clone());
            move || churn(d, st)
        });
        let ws: Vec<_> = (0..WRITERS).map(|k| s.spawn({
            let d = dir.clone();
            move || writer(&d, k)
        })).collect();
        let failures: Vec<String> = ws.into_iter().filter_map(|w| w.join().unwrap().err()).collect();
        stop.store(true, Ordering::Relaxed);
        c.join().unwrap();
        (r.join().unwrap(), failures)
    });
    assert!(failures.is_empty(), "[{transport}] after {walks} reader walks: {}\n--- daemon log ---\n{}", failures.join("\n"), m.daemon_log());
    // Nothing is left but the final names (an odd thread's last cycle may have unlinked its lock).
    let mut names: Vec<String> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let want: Vec<String> = (0..WRITERS).map(|k| format!("t{k}")).collect();
    assert_eq!(names, want, "[{transport}] directory after the writers");

    // The same through git: `add -A` + `commit` with a reader reading .git meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    m.sh_ok("git init -q repo");
    std::thread::scope(|s| {
        let r = s.spawn({
            let (d, st) = (m.p("repo/.git"), stop.clone());
            move || reader(d, st)
        });
        let o = m.sh(
            "cd repo\n\
             for i in $(seq 1 60); do\n\
               echo \"commit $i\" > f$((i % 7))\n\
               git -c gc.auto=0 -c maintenance.auto=0 add -A\n\
               git -c user.name=t -c user.email=t@localhost -c commit.gpgsign=false -c gc.auto=0 -c maintenance.auto=0 commit -q -m c$i\n\
             done\n\
             test ! -e .git/index.lock && test \"$(git rev-list --count HEAD)\" = 60",
        );
        stop.store(true, Ordering::Relaxed);
        r.join().unwrap();
        m.check_ok("60 git commits beside a reader of .git", &o);
    });
}

#[test]
fn lockfile_rename_and_excl_create_uring() {
    lockfile_protocol("auto");
}

#[test]
fn lockfile_rename_and_excl_create_dev_fuse() {
    lockfile_protocol("dev");
}
