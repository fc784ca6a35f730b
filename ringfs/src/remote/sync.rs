//! Continuous sync, `ringfs mount … --remote NAME` (DECISIONS D44,
//! docs/SEMANTICS.md "Continuous sync"). A thread of the daemon
//! (`ringfs-sync`) commits the live tree onto the mounted branch, as
//! `ringfs commit` does (message "ringfs sync", author `ringfs-sync@HOST`),
//! every `--sync-interval` and once an fsync burst is over, and pushes that
//! branch to the remote, as `ringfs push` does. A failed push is retried
//! with exponential backoff (1 s doubling to 30 s, times a random 0.5–1),
//! the workspace meanwhile working at local speed: nothing here runs on
//! the FUSE request path, the thread takes only what a `ringfs commit` and
//! a `ringfs push` take.
//!
//! At unmount (after the session ended) the thread commits a last time and
//! pushes until the remote has the branch's head or the wait ends: the
//! `ringfs umount` request says how long (`--timeout`) or not to wait
//! (`--no-wait`); a signal or an external umount waits 30 s. The outcome is
//! left for `ringfs umount` in `<control socket>.sync` ([`outcome_path`]):
//! `{"remote", "url", "branch", "commit", "pushed", "reason": "pushed" |
//! "no-wait" | "timeout" | "no commits", "error", "pending_commits",
//! "pending_objects", "pending_chunks", "pending_bytes", "waited_s"}`.
//!
//! Live state (`ringfs stats --json` and `ringfs remote status --json` on
//! the mount, key `sync`): `{"remote", "branch", "interval_s", "phase":
//! "idle" | "committing" | "pushing" | "waiting to retry" | "final commit" |
//! "final push" | "stopped", "final" (the unmount's phase), "auto_commits", "pushes", "failures",
//! "retry_in_s", "last_error", "last_push", "last_push_age_s",
//! "sent_bytes", "total_bytes", "startup"}` (sent/total: the push under
//! way). `startup` is null until the first cycle after the mount ended,
//! then `{"ms", "pending", "contacted_remote", "objects_sent",
//! "chunks_sent", "bytes_sent"}`: how long the thread took from its start
//! to know whether anything was pending (a commit of the live tree if it
//! changed, and a push unless the branch head is the one last pushed, per
//! the local record) and what that cycle sent — the "reconciliation after a
//! restart" of issue 14 (`pending`: the cycle's push failed).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Result};
use fs_core::snap::object::{dec_commit, hex_id, ObjectId};
use fs_core::snap::transfer::Transfer;
use fs_core::snap::{CommitOptions, SnapError};
use fs_core::Fs;
use serde_json::{json, Value};

use super::push::{self, Hooks};
use super::{state, store};
use crate::cli::MountArgs;

/// A pause of this long after the last fsync ends a burst.
const BURST_QUIET: Duration = Duration::from_millis(200);
/// Syncs triggered by fsync bursts are at least this far apart.
const MIN_GAP: Duration = Duration::from_millis(500);
/// The final push's wait when no `ringfs umount` set one (a signal, an
/// external umount).
pub const DEFAULT_FINAL_WAIT: Duration = Duration::from_secs(30);
/// The daemon stops pushing this long before the umount's own `--timeout`
/// ends, so that the umount hears how it went.
const MARGIN: Duration = Duration::from_secs(3);

/// What `mount --remote` will sync, checked before anything is created.
pub struct Plan {
    dir: PathBuf,
    cfg: state::Config,
    interval: Duration,
}

/// Checks `--remote` and `--sync-interval` (None: no `--remote`). Errors:
/// a memory workspace, `--at`, a store that does not exist yet or has no
/// remote of that name, an interval under 0.1 s.
pub fn check(args: &MountArgs) -> Result<Option<Plan>> {
    let Some(name) = &args.remote else {
        return Ok(None);
    };
    let secs = args.sync_interval;
    if !(secs.is_finite() && secs >= 0.1) {
        bail!("--sync-interval {secs}: give seconds, at least 0.1 (default 5)");
    }
    let Some(dir) = args.store.as_deref().filter(|_| !args.memory) else {
        bail!("--remote {name}: a memory workspace cannot sync (nothing of it outlives the daemon): mount a durable store with --store DIR");
    };
    if args.at.is_some() {
        bail!("--remote cannot go with --at: a temporary read-only fork has nothing to push");
    }
    if !dir.join("store.redb").exists() {
        bail!(
            "--remote {name}: {d} holds no store yet, so it has no remotes: mount it once without --remote and add one (`ringfs remote add MOUNTPOINT {name} URL`), or start from a remote (`ringfs clone URL --store {d}`)",
            d = dir.display()
        );
    }
    let dir = dir.canonicalize()?;
    let cfg = state::load(&dir, name).map_err(|e| anyhow!("--remote {name}: {e:#}"))?;
    store::parse_url(&cfg.url)?;
    Ok(Some(Plan {
        dir,
        cfg,
        interval: Duration::from_secs_f64(secs),
    }))
}

/// Where the daemon leaves the outcome of its final push for `ringfs umount`.
pub fn outcome_path(mountpoint: &Path) -> PathBuf {
    crate::control::socket_path(mountpoint).with_extension("sync")
}

/// Reads and removes the outcome left for `mountpoint` (None: no sync ran).
pub fn take_outcome(mountpoint: &Path) -> Option<Value> {
    let p = outcome_path(mountpoint);
    let b = std::fs::read(&p).ok()?;
    let _ = std::fs::remove_file(&p);
    serde_json::from_slice(&b).ok()
}

/// How the final push was asked to end.
#[derive(Clone, Copy)]
struct Finish {
    no_wait: bool,
    deadline: Instant,
}

#[derive(Default)]
struct St {
    phase: &'static str,
    wake: bool,
    /// Set by `ringfs umount`'s request, acted on once the session ended.
    requested: Option<Finish>,
    finish: Option<Finish>,
    failures: u32,
    next_try: Option<Instant>,
    last_error: Option<String>,
    /// The last push was refused for good (`push::Diverged`), not failed.
    refused: bool,
    last_push: Option<SystemTime>,
    auto_commits: u64,
    pushes: u64,
    sent: u64,
    total: u64,
    /// What the last successful push sent: (objects, chunks, bytes).
    last_sent: Option<(u64, u64, u64)>,
    /// The first cycle after start (see the module doc), once done.
    startup: Option<Value>,
}

/// The sync thread's handle and shared state.
pub struct Syncer {
    fs: Arc<Fs>,
    dir: PathBuf,
    cfg: state::Config,
    branch: String,
    interval: Duration,
    fsyncs: Box<dyn Fn() -> u64 + Send + Sync>,
    st: Mutex<St>,
    cv: Condvar,
    thread: Mutex<Option<std::thread::JoinHandle<Value>>>,
}

static ACTIVE: OnceLock<Arc<Syncer>> = OnceLock::new();

/// The daemon's syncer, if it mounted with `--remote`.
pub fn active() -> Option<&'static Arc<Syncer>> {
    ACTIVE.get()
}

/// The answer to `ringfs umount`'s shutdown request: how the final push
/// is to end (`no_wait`; else within `wait_secs` less a margin), and
/// what is pending now (`{}` without `--remote`).
pub fn on_shutdown(no_wait: bool, wait_secs: Option<u64>) -> Value {
    let Some(s) = active() else {
        return json!({});
    };
    let wait = wait_secs
        .map(|w| {
            Duration::from_secs(w)
                .saturating_sub(MARGIN)
                .max(Duration::from_secs(1))
        })
        .unwrap_or(DEFAULT_FINAL_WAIT);
    s.lock().requested = Some(Finish {
        no_wait,
        deadline: Instant::now() + wait,
    });
    json!({ "sync": s.doc() })
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Now, in seconds since the epoch (0 before it).
pub(crate) fn now_unix() -> u64 {
    unix(SystemTime::now())
}

/// `2026-12-03T02:49:40Z` for seconds since the epoch.
pub fn iso(secs: u64) -> String {
    let (y, m, d, h, mi, s) = crate::snap::civil(secs as i64);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// "12 s", "3 min 4 s", "2 h 5 min".
pub fn human_age(s: u64) -> String {
    match s {
        0..=99 => format!("{s} s"),
        100..=5999 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s / 60 % 60),
    }
}

/// "1 commit", "2 commits" (nouns whose plural adds an s; else
/// [`fs_core::count`]).
pub fn count(n: u64, what: &str) -> String {
    fs_core::count(n, what, &format!("{what}s"))
}

/// "1.2 MB", "340 kB", "12 B" (powers of 1000).
pub fn human_bytes(b: u64) -> String {
    let f = b as f64;
    if b >= 1_000_000_000 {
        format!("{:.1} GB", f / 1e9)
    } else if b >= 1_000_000 {
        format!("{:.1} MB", f / 1e6)
    } else if b >= 1_000 {
        format!("{:.0} kB", f / 1e3)
    } else {
        format!("{b} B")
    }
}

/// The commits of `head`'s history the remote lacks: those not at or
/// below `remote` (its head now) or `seen` (the head this store last saw
/// there, recorded at its last push or pull: heads only move forward, so
/// it is in the remote's history too), walked from `head` (at most
/// 100 000), and the oldest one's time (unix s). `seen` is what keeps a
/// diverged branch's count to its own commits: the remote's head is then
/// not in the local history.
pub fn lag(
    src: &Transfer,
    head: &ObjectId,
    remote: Option<&ObjectId>,
    seen: Option<&ObjectId>,
) -> Result<(u64, Option<u64>)> {
    let mut stack = vec![*head];
    let mut visited = HashSet::new();
    let (mut n, mut oldest) = (0u64, None::<u64>);
    while let Some(c) = stack.pop() {
        if Some(&c) == remote || Some(&c) == seen || !visited.insert(c) || n >= 100_000 {
            continue;
        }
        let Some(b) = src.object(&c).map_err(|e| anyhow!("{e}"))? else {
            continue;
        };
        let cm = dec_commit(&b).map_err(|e| anyhow!("commit {}: {e}", hex_id(&c)))?;
        n += 1;
        let t = cm.time.0.max(0) as u64;
        oldest = Some(oldest.map_or(t, |o: u64| o.min(t)));
        stack.extend(cm.parents);
    }
    Ok((n, oldest))
}

/// The delay before retry number `failures` (1, 2, …): 1 s doubling up to
/// the cap (30 s; tests: RINGFS_TEST_SYNC_BACKOFF_MAX_MS), times a random
/// factor in [0.5, 1).
fn backoff(failures: u32) -> Duration {
    let cap = std::env::var("RINGFS_TEST_SYNC_BACKOFF_MAX_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(30));
    let base = Duration::from_secs(1)
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(cap);
    let seed = format!("{:?}{failures}{}", SystemTime::now(), std::process::id());
    let r = u16::from_le_bytes(
        blake3::hash(seed.as_bytes()).as_bytes()[..2]
            .try_into()
            .unwrap(),
    );
    base.mul_f64(0.5 + f64::from(r) / 131072.0)
}

fn author() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("ringfs-sync@{host}")
}

impl Syncer {
    /// Starts the sync thread for `plan` on the mounted `fs`; `fsyncs()`
    /// counts the FSYNC and FSYNCDIR requests so far.
    pub fn start(
        fs: Arc<Fs>,
        plan: Plan,
        fsyncs: Box<dyn Fn() -> u64 + Send + Sync>,
    ) -> Result<Arc<Syncer>> {
        let branch = fs.transfer().head(None).map_err(|e| anyhow!("{e}"))?.0;
        let s = Arc::new(Syncer {
            fs,
            dir: plan.dir,
            cfg: plan.cfg,
            branch,
            interval: plan.interval,
            fsyncs,
            st: Mutex::new(St {
                phase: "idle",
                ..Default::default()
            }),
            cv: Condvar::new(),
            thread: Mutex::new(None),
        });
        if ACTIVE.set(s.clone()).is_err() {
            bail!("a sync runs already in this process");
        }
        let me = s.clone();
        let h = std::thread::Builder::new()
            .name("ringfs-sync".into())
            .spawn(move || me.run())?;
        *s.thread.lock().unwrap() = Some(h);
        tracing::info!(
            "sync: branch {} to remote {} ({}) every {:?} and after fsync bursts",
            s.branch,
            s.cfg.name,
            s.cfg.url,
            s.interval
        );
        Ok(s)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, St> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn phase(&self, p: &'static str) {
        self.lock().phase = p;
    }

    /// The live state (see the module doc).
    pub fn doc(&self) -> Value {
        let st = self.lock();
        let now = Instant::now();
        json!({
            "remote": self.cfg.name, "url": self.cfg.url, "branch": self.branch,
            "interval_s": self.interval.as_secs_f64(), "phase": st.phase, "final": st.finish.is_some(),
            "auto_commits": st.auto_commits, "pushes": st.pushes, "failures": st.failures,
            "retry_in_s": st.next_try.map(|t| (t.saturating_duration_since(now).as_secs_f64() * 10.0).round() / 10.0),
            "last_error": st.last_error,
            "last_push": st.last_push.map(|t| iso(unix(t))),
            "last_push_age_s": st.last_push.map(|t| now_unix().saturating_sub(unix(t))),
            "sent_bytes": st.sent, "total_bytes": st.total, "startup": st.startup,
        })
    }

    /// The remote's name.
    pub fn remote(&self) -> &str {
        &self.cfg.name
    }

    /// After the session ended: the final commit and push as requested
    /// (default: wait [`DEFAULT_FINAL_WAIT`]); returns the outcome.
    pub fn finish(&self) -> Value {
        {
            let mut st = self.lock();
            let f = st.requested.unwrap_or(Finish {
                no_wait: false,
                deadline: Instant::now() + DEFAULT_FINAL_WAIT,
            });
            st.finish = Some(f);
            self.cv.notify_all();
        }
        let h = self.thread.lock().unwrap().take();
        match h.map(|h| h.join()) {
            Some(Ok(v)) => v,
            _ => {
                json!({ "remote": self.cfg.name, "pushed": false, "reason": "error", "error": "the sync thread ended early (see the daemon's log)" })
            }
        }
    }

    fn run(self: Arc<Self>) -> Value {
        let mut pushed: Option<String> = state::status(&self.dir, &self.cfg.name)
            .heads
            .get(&self.branch)
            .cloned();
        let mut last_key = None;
        // The first cycle at once: it pushes what an earlier session left.
        let mut last_cycle: Option<Instant> = None;
        let mut seen = (self.fsyncs)();
        let mut last_fsync: Option<Instant> = None;
        let started = Instant::now();
        loop {
            let (finish, woke, retry_due) = {
                let mut st = self.lock();
                // The first cycle at once (no wait): a restart learns
                // what is pending without a pause.
                if !st.wake && st.finish.is_none() && last_cycle.is_some() {
                    st = self
                        .cv
                        .wait_timeout(st, Duration::from_millis(100))
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                let due = st.next_try.is_some_and(|t| Instant::now() >= t);
                (st.finish, std::mem::take(&mut st.wake), due)
            };
            if let Some(f) = finish {
                return self.final_sync(f, &mut pushed, &mut last_key);
            }
            let now = Instant::now();
            let n = (self.fsyncs)();
            if n != seen {
                seen = n;
                last_fsync = Some(now);
            }
            let since = last_cycle.map(|t| now - t);
            let burst_over = last_fsync.is_some_and(|t| now - t >= BURST_QUIET)
                && since.is_none_or(|s| s >= MIN_GAP);
            if since.is_none_or(|s| s >= self.interval) || burst_over || woke || retry_due {
                last_cycle = Some(now);
                last_fsync = None;
                let first = self.lock().startup.is_none();
                if first {
                    self.lock().last_sent = None;
                }
                self.commit(&mut last_key, false);
                let ok = self.try_push(&mut pushed, None);
                if first {
                    let ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
                    let mut st = self.lock();
                    let sent = st.last_sent;
                    let (o, c, b) = sent.unwrap_or_default();
                    st.startup = Some(json!({
                        "ms": ms, "pending": !ok, "contacted_remote": sent.is_some() || !ok,
                        "objects_sent": o, "chunks_sent": c, "bytes_sent": b,
                    }));
                }
            }
        }
    }

    /// Commits the live tree if anything may have changed since the last
    /// look (or `force`). Errors are logged and shown as the last error.
    fn commit(&self, last_key: &mut Option<(u64, u64, u64)>, force: bool) {
        let key = |s: &fs_core::Stats| (s.sync_position, s.content_new, s.inodes);
        let s = self.fs.stats();
        if !force && Some(key(&s)) == *last_key && s.dirty == 0 && s.unstored == 0 {
            return;
        }
        let was = self.lock().phase;
        self.phase(if was.starts_with("final") {
            "final commit"
        } else {
            "committing"
        });
        let r = self.fs.snapshot_commit(&CommitOptions {
            message: format!("ringfs sync (mount --remote {})", self.cfg.name),
            author: author(),
            allow_empty: false,
        });
        let mut st = self.lock();
        st.phase = was;
        match r {
            Ok(r) => {
                if r.created {
                    st.auto_commits += 1;
                    tracing::debug!(
                        "sync: commit {} on {}",
                        &r.id[..12.min(r.id.len())],
                        r.branch
                    );
                }
                *last_key = Some(key(&self.fs.stats()));
            }
            Err(SnapError::NoCommits) => {}
            Err(e) => {
                let e = format!("auto-commit failed: {e}");
                tracing::warn!("sync: {e}");
                st.last_error = Some(e);
            }
        }
    }

    /// Pushes the branch if its head is not the one pushed last and no
    /// backoff holds (a `deadline`: the final push, stopped between
    /// bundles once it passes). Ok(true): the remote has the head.
    fn try_push(&self, pushed: &mut Option<String>, deadline: Option<Instant>) -> bool {
        let head = match self.fs.transfer().head(Some(&self.branch)) {
            Ok((_, Some(h))) => hex_id(&h),
            Ok((_, None)) => return true,
            Err(e) => {
                self.lock().last_error = Some(format!("reading the branch head: {e}"));
                return false;
            }
        };
        if pushed.as_deref() == Some(head.as_str()) {
            return true;
        }
        {
            let mut st = self.lock();
            if deadline.is_none() && st.next_try.is_some_and(|t| Instant::now() < t) {
                return false;
            }
            st.phase = if deadline.is_some() {
                "final push"
            } else {
                "pushing"
            };
            st.sent = 0;
            st.total = 0;
        }
        let src = self.fs.transfer();
        let progress = |sent: u64, total: u64| {
            let mut st = self.lock();
            st.sent = sent;
            st.total = total;
        };
        // A background push under way when the unmount's wait ends (or
        // with --no-wait) stops between bundles too.
        let cancel = || {
            let fin = self.lock().finish;
            fin.is_some_and(|f| f.no_wait)
                || deadline
                    .or(fin.map(|f| f.deadline))
                    .is_some_and(|d| Instant::now() >= d)
        };
        let r = push::push_with(
            &src,
            &self.dir,
            &self.cfg,
            Some(&self.branch),
            true,
            &Hooks {
                progress: &progress,
                cancel: &cancel,
            },
        );
        let mut st = self.lock();
        st.phase = "idle";
        match r {
            Ok(rep) => {
                if rep.bytes > 0 || rep.head_moved {
                    tracing::info!(
                        "sync: pushed {} {} to {}: {} objects, {} chunks, {} bytes",
                        rep.branch,
                        &rep.commit[..12],
                        self.cfg.name,
                        rep.objects,
                        rep.chunks,
                        rep.bytes
                    );
                }
                st.last_sent = Some((rep.objects, rep.chunks, rep.bytes));
                *pushed = Some(rep.commit);
                st.failures = 0;
                st.next_try = None;
                st.last_error = None;
                st.refused = false;
                st.last_push = Some(SystemTime::now());
                st.pushes += 1;
                pushed.as_deref() == Some(head.as_str())
            }
            Err(e) => {
                st.refused = e.downcast_ref::<push::Diverged>().is_some();
                st.failures += 1;
                let d = backoff(st.failures);
                st.next_try = Some(Instant::now() + d);
                st.phase = "waiting to retry";
                let e = format!("{e:#}");
                tracing::warn!(
                    "sync: push to {} failed ({} in a row), retrying in {:.1} s: {e}",
                    self.cfg.name,
                    st.failures,
                    d.as_secs_f64()
                );
                st.last_error = Some(e);
                false
            }
        }
    }

    /// The unmount's last commit and push.
    fn final_sync(
        &self,
        f: Finish,
        pushed: &mut Option<String>,
        last_key: &mut Option<(u64, u64, u64)>,
    ) -> Value {
        let t = Instant::now();
        self.phase("final commit");
        self.commit(last_key, true);
        let mut reason = "no-wait";
        if !f.no_wait {
            self.lock().next_try = None;
            reason = "timeout";
            while Instant::now() < f.deadline {
                if self.try_push(pushed, Some(f.deadline)) {
                    reason = "pushed";
                    break;
                }
                // Another store's head: waiting cannot change it.
                if self.lock().refused {
                    reason = "refused";
                    break;
                }
                let wait = self
                    .lock()
                    .next_try
                    .map(|n| n.saturating_duration_since(Instant::now()))
                    .unwrap_or(Duration::from_millis(100));
                let left = f.deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(wait.min(left));
                self.lock().next_try = None;
            }
        }
        self.phase("stopped");
        let mut v = json!({
            "remote": self.cfg.name, "url": self.cfg.url, "branch": self.branch,
            "pushed": reason == "pushed", "reason": reason,
            "error": self.lock().last_error,
            "waited_s": (t.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        });
        let src = self.fs.transfer();
        match src.head(Some(&self.branch)) {
            Ok((_, Some(h))) => {
                v["commit"] = json!(hex_id(&h));
                if reason != "pushed" {
                    if let Err(e) = self.pending_into(&src, &h, pushed.as_deref(), &mut v) {
                        v["pending_error"] = json!(format!("{e:#}"));
                    }
                } else {
                    for k in [
                        "pending_commits",
                        "pending_objects",
                        "pending_chunks",
                        "pending_bytes",
                    ] {
                        v[k] = json!(0);
                    }
                }
            }
            _ => {
                v["reason"] = json!("no commits");
                v["pushed"] = json!(true);
            }
        }
        tracing::info!("sync: final push to {}: {v}", self.cfg.name);
        v
    }

    fn pending_into(
        &self,
        src: &Transfer,
        head: &ObjectId,
        pushed: Option<&str>,
        v: &mut Value,
    ) -> Result<()> {
        let held = state::held(&self.dir, &self.cfg.name)?;
        let out = src
            .outgoing(Some(&self.branch), &|k, id| held.contains(&(k, *id)))
            .map_err(|e| anyhow!("{e}"))?;
        let remote = pushed.and_then(push::parse_hex);
        let seen = state::status(&self.dir, &self.cfg.name).heads.get(&self.branch).and_then(|h| push::parse_hex(h));
        let (n, _) = lag(src, head, remote.as_ref(), seen.as_ref())?;
        v["pending_commits"] = json!(n);
        v["pending_objects"] = json!(out.objects.len());
        v["pending_chunks"] = json!(out.chunks.len());
        v["pending_bytes"] = json!(out.bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_dates() {
        assert_eq!(iso(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso(1_796_266_180), "2026-12-03T02:49:40Z");
    }

    #[test]
    fn backoff_doubles_to_its_cap_with_jitter() {
        for (n, lo, hi) in [
            (1, 0.5, 1.0),
            (2, 1.0, 2.0),
            (3, 2.0, 4.0),
            (10, 15.0, 30.0),
            (40, 15.0, 30.0),
        ] {
            let d = backoff(n).as_secs_f64();
            assert!(d >= lo && d < hi, "failure {n}: {d}");
        }
    }

    #[test]
    fn ages_and_sizes() {
        assert_eq!(human_age(5), "5 s");
        assert_eq!(human_age(185), "3 min 5 s");
        assert_eq!(human_bytes(1_234_567), "1.2 MB");
        assert_eq!(
            (count(1, "commit"), count(2, "chunk")),
            ("1 commit".to_string(), "2 chunks".to_string())
        );
    }
}
