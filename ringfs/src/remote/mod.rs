//! Remote sync (DECISIONS D38, docs/SEMANTICS.md "Remotes", docs/FORMATS.md
//! "Remote layout"): `ringfs remote add|status`, `push`, `pull`, `clone`.
//! On a mount, push and status go through the daemon's control socket
//! (requests `push` and `remote_status`, answered by [`answer`] on the
//! control thread, never on the FUSE request path); with `--store DIR` they
//! work on an unmounted store, its lock held.
//!
//! Modules: `store` (URL, backend, runtime, verified fetches), `state`
//! (the local record `STORE/remotes/NAME/`), `heads` (the head guard per
//! server kind), `push`, `fetch` (clone and pull), `lazy` (a lazy
//! clone's remote-only chunks: record, fetch, prefetch), `nocas` (tests),
//! `sync` (continuous sync of `mount --remote`).
//!
//! JSON shapes (`--json`): push `{"remote", "branch", "commit",
//! "objects_sent", "chunks_sent", "bytes_sent", "bundles_sent",
//! "head_moved", "remote_reset", "heads", "push_ms"}`; clone and pull `{"store", "branch",
//! "commit", "objects", "chunks", "packs", "bytes_fetched", "files",
//! "live_updated", "ms"}` (pull also `"up_to_date"`, clone also
//! `"remote_only_chunks", "remote_only_bytes"`); remote status
//! `{"remote_only_chunks", "remote_only_bytes", "lazy_fetch": {"gets", "first_opens", "waits", "chunks", "bytes", "wc_built", "chunk_opens"}, "remotes": [{"name", "url", "writer", "heads", "reachable", "error",
//! "last_push", "last_push_age_s", "last_error", "sync", "branches":
//! [{"branch", "local", "remote", "current", "pending_commits",
//! "pending_objects", "pending_chunks", "pending_bytes", "oldest_pending",
//! "oldest_pending_age_s", "last_push", "last_push_age_s",
//! "last_error"}]}]}` (times ISO 8601 UTC, ages in seconds; `sync`: the
//! live state of a `mount --remote` of this remote, see [`sync`], else
//! null). A refusal on a mount is `{"refused": "one line"}`.

mod fetch;
mod heads;
pub mod lazy;
mod nocas;
mod push;
mod state;
mod store;
pub mod sync;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use fs_core::snap::object::hex_id;
use fs_core::snap::transfer::{build_clone, import_into, Offline, Transfer};
use fs_core::Fs;
use serde_json::{json, Value};

use crate::cli::{CloneArgs, PullArgs, PushArgs, RemoteAction, RemoteArgs};
use crate::{ask, control, plan};

/// Tests: whether failpoint `name` is set in RINGFS_FAILPOINT (the process
/// then aborts, as kill -9 would, at that point).
pub(crate) fn failpoint(name: &str) -> bool {
    std::env::var("RINGFS_FAILPOINT")
        .map(|v| v.split(',').any(|x| x == name))
        .unwrap_or(false)
}

/// A byte progress bar on stderr, hidden when `quiet` or stderr is no tty.
pub(crate) fn progress(total: u64, quiet: bool, what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(total);
    if let Ok(s) = indicatif::ProgressStyle::with_template(&format!(
        "{what} {{bar:30}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} eta {{eta}}"
    )) {
        b.set_style(s);
    }
    b
}

fn print(v: &Value, json: bool, text: String) {
    if json {
        println!("{v}");
    } else {
        println!("{text}");
    }
}

/// The store directory of a mount (asked of its daemon) or `--store DIR`.
fn store_of(mountpoint: Option<&Path>, store: Option<&Path>) -> Result<(bool, PathBuf)> {
    match (mountpoint, store) {
        (Some(m), None) => {
            let st = ask(m, control::Request::Status)?;
            let s = st
                .get("store")
                .and_then(|s| s.as_str())
                .unwrap_or("memory")
                .to_string();
            if s == "memory" {
                bail!("{} is a memory workspace: remotes need a durable store (mount with --store DIR)", m.display());
            }
            if let Some((c, o)) = crate::branch::at_view_of(&st) {
                let tail = format!("remotes belong to the store itself (give `--store {}` while it is unmounted, or a mount of it)", o.display());
                bail!("{}", crate::branch::at_view_line(m, &c, &o, &tail));
            }
            Ok((true, PathBuf::from(s)))
        }
        (None, Some(s)) => {
            plan::store_there("--store", s)?;
            Ok((false, s.canonicalize()?))
        }
        _ => bail!("give a MOUNTPOINT or --store DIR, not both"),
    }
}

fn check(v: Value) -> Result<Value> {
    if let Some(why) = v.get("refused").and_then(|x| x.as_str()) {
        bail!("{why}");
    }
    Ok(v)
}

/// The unmounted store `dir`, its lock held. `cmd`: the command that takes
/// a mountpoint instead (`push`, `remote add`), named when a daemon holds
/// the store; None (pull: not on a mount) gives the lock's own line.
fn offline(dir: &Path, cmd: Option<&str>) -> Result<Offline> {
    use fs_core::snap::refs::BranchStoreError;
    Offline::open(dir).map_err(|e| match (e, cmd) {
        (BranchStoreError::Store(e), Some(cmd)) => plan::store_command_error(e, dir, cmd),
        (BranchStoreError::Store(e), None) => plan::explain_store_error(e, "--store"),
        (e, _) => anyhow!("{e}"),
    })
}

/// `p` with every symbolic link resolved: its nearest existing ancestor
/// made canonical, the rest appended (`..` taken lexically there).
fn real_path(p: &Path) -> PathBuf {
    use std::path::Component;
    let comps: Vec<Component> = p.components().collect();
    for k in (0..=comps.len()).rev() {
        let pre: PathBuf = comps[..k].iter().collect();
        let Ok(mut out) = pre.canonicalize() else { continue };
        for c in &comps[k..] {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(n) => out.push(n),
                _ => {}
            }
        }
        return out;
    }
    p.to_path_buf()
}

/// Refuses a `file://` remote inside the store `store` or the workspace
/// mounted at `mountpoint` it is for (canonical paths, through symbolic
/// links): every push would write its bundles into what it pushes (the
/// live tree takes them in, the next push sends them again). Other URLs
/// pass.
fn not_inside(url: &str, store: &Path, mountpoint: Option<&Path>) -> Result<()> {
    let Ok(store::Url::File(d)) = store::parse_url(url) else { return Ok(()) };
    let real = real_path(&d);
    for (what, p) in [("store", Some(store)), ("workspace", mountpoint)] {
        let Some(p) = p else { continue };
        let Ok(rp) = p.canonicalize() else { continue };
        if real.starts_with(&rp) {
            bail!(
                "remote {url} is inside the {what} it would hold ({}{}): every push would write into what it pushes; give a directory outside {}",
                rp.display(),
                if real != d { format!("; {} is {}", d.display(), real.display()) } else { String::new() },
                rp.display()
            );
        }
    }
    Ok(())
}

/// `ringfs remote add|status`.
pub fn cmd_remote(args: RemoteArgs) -> Result<()> {
    match args.action {
        RemoteAction::Add { args, store, json } => {
            let (mp, name, url) = match (args.len(), &store) {
                (2, Some(_)) => (None, args[0].clone(), args[1].clone()),
                (3, None) => (
                    Some(PathBuf::from(&args[0])),
                    args[1].clone(),
                    args[2].clone(),
                ),
                (_, Some(_)) => bail!("with --store DIR give NAME URL"),
                _ => bail!("give MOUNTPOINT NAME URL, or --store DIR NAME URL"),
            };
            // Everything checked before anything is written.
            state::check_name(&name)?;
            store::parse_url(&url)?;
            let (mounted, dir) = store_of(mp.as_deref(), store.as_deref())?;
            // An unmounted store stays locked until the remote is recorded;
            // one a daemon holds is refused (give its mountpoint).
            let _lock = if mounted { None } else { Some(offline(&dir, Some("remote add"))?) };
            not_inside(&url, &dir, mp.as_deref())?;
            if !mounted {
                // It is written to: made private if an earlier version
                // left it open (D87; a mount does this for a mounted one).
                fs_core::private::fix_store(&dir, true);
            }
            if state::names(&dir).contains(&name) {
                bail!(
                    "a remote named {name:?} exists already in {} (its URL: {})",
                    dir.display(),
                    state::load(&dir, &name)?.url
                );
            }
            let made = match store::parse_url(&url)? {
                store::Url::File(d) if !d.exists() && d.parent().is_some_and(|p| p.is_dir()) => Some(d),
                _ => None,
            };
            let r = store::Remote::open(&url, made.is_some())?;
            let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
            let probe_writer = blake3::hash(seed.as_bytes()).to_hex()[..16].to_string();
            // What this command sets up on the remote (the marker, a
            // file:// directory) goes again if the add fails: nothing
            // half-made stays.
            let fresh = heads::marker(&r)?.is_none();
            let undo = || {
                if fresh {
                    let _ = r.delete(heads::MARKER);
                }
                if let Some(d) = &made {
                    let _ = std::fs::remove_dir(d);
                }
            };
            let guard = heads::init(&r, &probe_writer).inspect_err(|_| undo())?;
            let c = state::add(&dir, &name, &url).map_err(|e| {
                undo();
                let text = format!("{e:#}");
                if fs_core::says_full(&text) {
                    anyhow!("{} ({text}); the remote was not added", fs_core::full_disk(&dir, "recording the remote in the store"))
                } else {
                    e
                }
            })?;
            state::check_identity(&dir, &c.name, &heads::identity(&r)?)?;
            let v = json!({ "name": c.name, "url": c.url, "writer": c.writer, "heads": guard.as_str(), "store": dir });
            print(
                &v,
                json,
                format!(
                    "remote {} = {} (heads guarded by {})",
                    c.name,
                    c.url,
                    if guard == heads::Guard::Cas {
                        "compare-and-swap"
                    } else {
                        "per-writer keys (no compare-and-swap on this server)"
                    }
                ),
            );
            Ok(())
        }
        RemoteAction::Status {
            mountpoint,
            store,
            remote,
            json,
        } => {
            let (mounted, dir) = store_of(mountpoint.as_deref(), store.as_deref())?;
            let v = if mounted {
                check(ask(
                    mountpoint.as_deref().unwrap(),
                    control::Request::RemoteStatus { remote, local: false },
                )?)?
            } else {
                let off = offline(&dir, Some("remote status"))?;
                status_doc(&off.transfer(), &dir, remote.as_deref(), true)?
            };
            print(&v, json, status_text(&v));
            Ok(())
        }
    }
}

/// `ringfs remote status`'s document (see the module doc). Without
/// `contact`, from the store's record alone: the remote's heads are the
/// ones last seen there, `reachable` and `heads` null.
pub fn status_doc(src: &Transfer, dir: &Path, only: Option<&str>, contact: bool) -> Result<Value> {
    let names = match only {
        Some(n) => vec![state::load(dir, n)?.name],
        None => state::names(dir),
    };
    let mut out = Vec::new();
    for n in names {
        let c = state::load(dir, &n)?;
        let st = state::status(dir, &n);
        let held = state::held(dir, &n)?;
        let reach = contact.then(|| {
            store::Remote::open(&c.url, false).and_then(|r| {
                r.ping()?;
                let g = heads::read_guard(&r)?;
                Ok((r, g))
            })
        });
        let (reachable, error) = match &reach {
            Some(Ok(_)) => (Some(true), None),
            Some(Err(e)) => (Some(false), Some(format!("{e:#}"))),
            None => (None, None),
        };
        let reach = reach.and_then(Result::ok);
        let mut branches = Vec::new();
        let now = sync::now_unix();
        for b in src.branches().map_err(|e| anyhow!("{e}"))? {
            let out = src
                .outgoing(Some(&b.name), &|k, id| held.contains(&(k, *id)))
                .map_err(|e| anyhow!("{e}"))?;
            let remote = match &reach {
                Some((r, g)) => heads::head(r, *g, &b.name).ok().flatten().map(|h| h.commit),
                None => st.heads.get(&b.name).cloned(),
            };
            let (commits, oldest) = match push::parse_hex(&b.head) {
                Some(h) => sync::lag(src, &h, remote.as_deref().and_then(push::parse_hex).as_ref(), st.heads.get(&b.name).and_then(|x| push::parse_hex(x)).as_ref())?,
                None => (0, None),
            };
            let bs = st.branches.get(&b.name).cloned().unwrap_or_default();
            branches.push(json!({
                "branch": b.name, "local": b.head, "remote": remote, "current": b.current,
                "pending_commits": commits, "pending_objects": out.objects.len(), "pending_chunks": out.chunks.len(), "pending_bytes": out.bytes(),
                "oldest_pending": oldest.map(sync::iso), "oldest_pending_age_s": oldest.map(|t| now.saturating_sub(t)),
                "last_push": bs.last_push.map(sync::iso), "last_push_age_s": bs.last_push.map(|t| now.saturating_sub(t)),
                "last_error": bs.last_error,
            }));
        }
        let live = sync::active().filter(|s| s.remote() == c.name).map(|s| s.doc());
        out.push(json!({
            "name": c.name, "url": c.url, "writer": c.writer, "heads": reach.as_ref().map(|x| x.1.as_str()),
            "reachable": reachable, "error": error,
            "last_push": st.last_push.map(sync::iso), "last_push_age_s": st.last_push.map(|t| now.saturating_sub(t)),
            "last_error": st.last_error, "sync": live, "branches": branches,
        }));
    }
    let (rc, rb) = lazy::remote_only(src);
    Ok(json!({ "remote_only_chunks": rc, "remote_only_bytes": rb, "lazy_fetch": lazy::stats(), "remotes": out }))
}

fn status_text(v: &Value) -> String {
    let mut s = String::new();
    let rs = v["remotes"].as_array().cloned().unwrap_or_default();
    if rs.is_empty() {
        return "no remotes (add one with `ringfs remote add … NAME URL`)".into();
    }
    if v["remote_only_chunks"].as_u64().unwrap_or(0) > 0 {
        s += &format!(
            "{} ({} bytes) still only on the remote (a lazy clone: fetched on first open and in the background while mounted)\n",
            sync::count(v["remote_only_chunks"].as_u64().unwrap_or(0), "chunk"), v["remote_only_bytes"]
        );
    }
    for r in rs {
        s += &format!(
            "{} {} ({})\n",
            r["name"].as_str().unwrap_or(""),
            r["url"].as_str().unwrap_or(""),
            if r["reachable"] == true {
                "reachable"
            } else {
                "UNREACHABLE"
            }
        );
        if let Some(e) = r["error"].as_str() {
            s += &format!("  error: {e}\n");
        }
        // (Not again when it is the error just met.)
        if let Some(e) = r["last_error"].as_str().filter(|e| Some(*e) != r["error"].as_str()) {
            s += &format!("  last push failed: {e}\n");
        }
        let when = |t: &Value, age: &Value| match (t.as_str(), age.as_u64()) {
            (Some(t), Some(a)) => format!("{t} ({} ago)", sync::human_age(a)),
            _ => "never".into(),
        };
        s += &format!("  last successful push: {}\n", when(&r["last_push"], &r["last_push_age_s"]));
        let y = &r["sync"];
        if y.is_object() {
            s += &format!(
                "  continuous sync (mount --remote) of {} every {} s: {}{}\n",
                y["branch"].as_str().unwrap_or(""),
                y["interval_s"],
                y["phase"].as_str().unwrap_or(""),
                match (y["failures"].as_u64(), y["retry_in_s"].as_f64()) {
                    (Some(f), Some(t)) if f > 0 => format!(" ({f} failed pushes in a row, next try in {t} s)"),
                    _ => String::new(),
                }
            );
        }
        for b in r["branches"].as_array().into_iter().flatten() {
            let short = |x: &Value| {
                x.as_str()
                    .map(|h| h[..12.min(h.len())].to_string())
                    .unwrap_or_else(|| "-".into())
            };
            let lag = match b["pending_commits"].as_u64().unwrap_or(0) {
                0 if b["pending_bytes"] == 0 => "up to date".to_string(),
                n => format!(
                    "lag: {}, {}, {}, {}{}",
                    sync::count(n, "commit"),
                    sync::count(b["pending_objects"].as_u64().unwrap_or(0), "object"),
                    sync::count(b["pending_chunks"].as_u64().unwrap_or(0), "chunk"),
                    sync::human_bytes(b["pending_bytes"].as_u64().unwrap_or(0)),
                    b["oldest_pending_age_s"]
                        .as_u64()
                        .map(|a| format!(", oldest unpushed commit {} old", sync::human_age(a)))
                        .unwrap_or_default()
                ),
            };
            s += &format!(
                "  {}{}: local {} remote {}; {lag}; last successful push {}\n",
                if b["current"] == true { "* " } else { "" },
                b["branch"].as_str().unwrap_or(""),
                short(&b["local"]),
                short(&b["remote"]),
                when(&b["last_push"], &b["last_push_age_s"])
            );
            // (The remote's line above already says it when it is the same.)
            if let Some(e) = b["last_error"].as_str().filter(|e| Some(*e) != r["last_error"].as_str()) {
                s += &format!("    last error: {e}\n");
            }
        }
    }
    s.trim_end().to_string()
}

/// The daemon's answer to a `push` or `remote_status` request.
pub fn answer(fs: &Fs, store: Option<&Path>, req: &control::Request) -> Value {
    let Some(dir) = store else {
        return json!({ "refused": "a memory workspace has no remotes" });
    };
    let r = match req {
        control::Request::Push { branch, remote } => state::pick(dir, remote.as_deref())
            .and_then(|c| push::push(&fs.transfer(), dir, &c, branch.as_deref(), true))
            .map(|r| r.doc()),
        control::Request::RemoteStatus { remote, local } => {
            status_doc(&fs.transfer(), dir, remote.as_deref(), !local)
        }
        _ => Err(anyhow!("not a remote request")),
    };
    r.unwrap_or_else(|e| json!({ "refused": format!("{e:#}") }))
}

fn push_text(v: &Value) -> String {
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let what = if n("bundles_sent") == 0 {
        "nothing to send: the remote had everything".to_string()
    } else {
        format!(
            "{}, {}, {} in {}",
            sync::count(n("objects_sent"), "object"),
            sync::count(n("chunks_sent"), "chunk"),
            sync::count(n("bytes_sent"), "byte"),
            sync::count(n("bundles_sent"), "bundle")
        )
    };
    let what = match n("bundles_found") {
        0 => what,
        f => format!("{what}; {} an earlier push had sent found on the remote (only its index written)", sync::count(f, "bundle")),
    };
    format!(
        "pushed {} {} to {}: {what} ({} ms)",
        v["branch"].as_str().unwrap_or(""),
        &v["commit"].as_str().unwrap_or("")[..12],
        v["remote"].as_str().unwrap_or(""),
        v["push_ms"]
    )
}

/// `ringfs push`.
pub fn cmd_push(args: PushArgs) -> Result<()> {
    let (mounted, dir) = store_of(args.mountpoint.as_deref(), args.store.as_deref())?;
    // (Refused at `remote add`; a remote added before that was checked is refused here.)
    not_inside(&state::pick(&dir, args.remote.as_deref())?.url, &dir, args.mountpoint.as_deref())?;
    let v = if mounted {
        check(ask(
            args.mountpoint.as_deref().unwrap(),
            control::Request::Push {
                branch: args.branch.clone(),
                remote: args.remote.clone(),
            },
        )?)?
    } else {
        let c = state::pick(&dir, args.remote.as_deref())?;
        let off = offline(&dir, Some("push"))?;
        push::push(&off.transfer(), &dir, &c, args.branch.as_deref(), args.json)?.doc()
    };
    if v["remote_reset"] == true {
        eprintln!(
            "ringfs push: remote {} is not the remote this store pushed to before (emptied, replaced or recreated): \
             sent everything the branch needs again",
            v["remote"].as_str().unwrap_or("")
        );
    }
    print(&v, args.json, push_text(&v));
    Ok(())
}

fn fetch_doc(
    dir: &Path,
    f: &fetch::Fetched,
    rep: &fs_core::snap::transfer::ImportReport,
    t: Instant,
) -> Value {
    json!({
        "store": dir, "branch": f.head.branch, "commit": f.head.commit, "objects": rep.objects, "chunks": rep.chunks,
        "packs": rep.packs, "bytes_fetched": f.bytes, "files": rep.files, "live_updated": rep.live_updated,
        "ms": (t.elapsed().as_secs_f64() * 1e6).round() / 1e3,
    })
}

/// `ringfs pull`.
pub fn cmd_pull(args: PullArgs) -> Result<()> {
    if let Some(m) = &args.mountpoint {
        bail!("pull into a mounted workspace is not supported yet: `ringfs umount {0}`, `ringfs pull --store DIR`, then mount it again", m.display());
    }
    let t = Instant::now();
    let (_, dir) = store_of(None, args.store.as_deref())?;
    let c = state::pick(&dir, args.remote.as_deref())?;
    let r = store::Remote::open(&c.url, false)?;
    r.ping()?;
    let off = offline(&dir, None)?;
    let src = off.transfer();
    let (branch, local) = src
        .head(args.branch.as_deref())
        .map_err(|e| anyhow!("{e}"))?;
    let head = fetch::remote_head(&r, Some(&branch))?;
    let theirs = push::parse_hex(&head.commit)
        .ok_or_else(|| anyhow!("remote {}: head of {branch} is not a commit id", c.url))?;
    // A head naming an object this store holds is not fetched: check it is a commit here.
    if let Some(why) = src.object(&theirs).ok().flatten().and_then(|b| fetch::not_a_commit(&b)) {
        return Err(heads::damaged(&r, &head, &why));
    }
    if Some(theirs) == local || local.is_some_and(|l| src.is_ancestor(&theirs, &l).unwrap_or(false))
    {
        let ahead = Some(theirs) != local;
        let v = json!({ "store": dir, "branch": branch, "commit": local.map(|l| hex_id(&l)), "up_to_date": true, "ahead": ahead });
        let text = if ahead {
            format!("{branch} is ahead of {}: nothing to pull (`ringfs push` sends it)", c.name)
        } else {
            format!("{branch} is up to date with {}", c.name)
        };
        print(&v, args.json, text);
        return Ok(());
    }
    let staging = state::remotes_dir(&dir).join(&c.name).join("incoming");
    let have_o = |id: &[u8; 32]| src.object(id).ok().flatten().is_some();
    let have_c = |id: &[u8; 32]| src.has_chunk(id).unwrap_or(false);
    let f = fetch::fetch(&r, head, &have_o, &have_c, &staging, args.json, false, false)?;
    // Fast-forward only: the local head must be in the fetched history.
    if let Some(l) = local {
        let reaches = {
            // Objects already held locally are not fetched: walk the fetched commits' parents.
            let fetched: std::collections::HashMap<_, _> =
                f.objects.iter().map(|o| (o.0, &o.1)).collect();
            let mut stack = vec![theirs];
            let mut found = false;
            let mut seen = std::collections::HashSet::new();
            while let Some(cid) = stack.pop() {
                if cid == l {
                    found = true;
                    break;
                }
                if !seen.insert(cid) {
                    continue;
                }
                if let Some(b) = fetched.get(&cid) {
                    if let Ok(cm) = fs_core::snap::object::dec_commit(b) {
                        stack.extend(cm.parents);
                    }
                } else if src.is_ancestor(&l, &cid).unwrap_or(false) {
                    found = true;
                    break;
                }
            }
            found
        };
        if !reaches {
            let _ = std::fs::remove_dir_all(&staging);
            bail!(
                "branch {branch} has diverged: this store's head {} is not in the history of {}'s head {} (pushed by writer {}). Nothing was changed; pull does not merge (nor does push go over their head): keep your work on a new branch and push that (`ringfs branch --store {d} NEWNAME`, then `ringfs push --store {d} --branch NEWNAME`); to work on theirs, clone the remote into a new store (`ringfs clone {u} --store NEWDIR`)",
                &hex_id(&l)[..12], c.name, &f.head.commit[..12], f.head.writer, d = dir.display(), u = c.url
            );
        }
    }
    let rep = import_into(&off, f.objects.clone(), &f.bundles, &branch, local, theirs)
        .map_err(|e| anyhow!("{e}"))?;
    let _ = std::fs::remove_dir_all(&staging);
    // What was fetched is held by the remote: the next push sends none of
    // it (without this, a push after a pull sent everything pulled again).
    state::check_identity(&dir, &c.name, &heads::identity(&r)?)?;
    state::add_held(&dir, &c.name, &fetched_ids(&f.objects))?;
    let mut st = state::status(&dir, &c.name);
    st.heads.insert(branch.clone(), f.head.commit.clone());
    let _ = state::save_status(&dir, &c.name, &st);
    let mut v = fetch_doc(&dir, &f, &rep, t);
    v["up_to_date"] = json!(false);
    print(
        &v,
        args.json,
        format!(
            "pulled {branch} to {}: {}, {}, {} fetched{}",
            &f.head.commit[..12],
            sync::count(rep.objects, "object"),
            sync::count(rep.chunks, "chunk"),
            sync::count(f.bytes, "byte"),
            if rep.live_updated {
                "; the live tree follows"
            } else {
                ""
            }
        ),
    );
    Ok(())
}

/// `ringfs clone`.
pub fn cmd_clone(args: CloneArgs) -> Result<()> {
    let t = Instant::now();
    store::parse_url(&args.url)?;
    fs_core::snap::materialize::check_dest(&args.store).map_err(|e| anyhow!("{e}"))?;
    fs_core::snap::transfer::sweep_clones(&args.store);
    let r = store::Remote::open(&args.url, false)?;
    r.ping()?;
    let head = fetch::remote_head(&r, args.branch.as_deref())?;
    let t_head = t.elapsed();
    let dest = if args.store.is_absolute() {
        args.store.clone()
    } else {
        std::env::current_dir()?.join(&args.store)
    };
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "store".into());
    // Bundles fetched so far stay here if the clone is cut short: running
    // the same clone again fetches only the rest.
    let staging = dest.with_file_name(format!(".{name}.clone-staging"));
    let f = fetch::fetch(
        &r,
        head,
        &|_| false,
        &|_| false,
        &staging,
        args.json,
        !args.eager,
        true,
    )
    .map_err(|e| {
        let text = format!("{e:#}");
        if !fs_core::says_full(&text) {
            return e;
        }
        let held: u64 = std::fs::read_dir(&staging).into_iter().flatten().flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum();
        anyhow!(
            "{} ({text}); no store was made; the {} of bundles fetched so far stay in {} (the same clone run again resumes from them; remove it to give the space back)",
            fs_core::full_disk(staging.parent().unwrap_or(Path::new(".")), "fetching the bundles"),
            sync::human_bytes(held),
            staging.display()
        )
    })?;
    let t_fetch = t.elapsed();
    let theirs = push::parse_hex(&f.head.commit).unwrap();
    let identity = heads::identity(&r)?;
    let ids = fetched_ids(&f.objects);
    let lens: std::collections::HashMap<[u8; 32], u32> =
        f.remote.iter().map(|(h, p)| (*h, p.2)).collect();
    // The remote becomes `origin`, recorded in the new store before it is
    // renamed into place: everything fetched is known held, and a lazy
    // clone's remote-only chunks are recorded with their places.
    let prepare = |tmp: &Path| -> std::result::Result<(), String> {
        (|| -> Result<()> {
            let c = state::add(tmp, "origin", &args.url)
                .context("recording the remote in the new store")?;
            state::check_identity(tmp, &c.name, &identity)?;
            state::add_held(tmp, &c.name, &ids)?;
            if !f.remote.is_empty() {
                lazy::write(tmp, &c.name, &f.remote)?;
            }
            let mut st = state::Status::default();
            st.heads
                .insert(f.head.branch.clone(), f.head.commit.clone());
            state::save_status(tmp, &c.name, &st)
        })()
        .map_err(|e| format!("{e:#}"))
    };
    let rep = build_clone(
        &dest,
        f.objects.clone(),
        &f.bundles,
        &f.head.branch,
        theirs,
        &lens,
        &prepare,
    )
    .map_err(|e| anyhow!("{e}"))?;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    tracing::debug!(
        "clone: head {:.1} ms, fetch {:.1} ms, store built {:.1} ms",
        ms(t_head),
        ms(t_fetch - t_head),
        ms(t.elapsed() - t_fetch)
    );
    let _ = std::fs::remove_dir_all(&staging);
    let mut v = fetch_doc(&dest, &f, &rep, t);
    let remote_bytes: u64 = lens.values().map(|l| *l as u64).sum();
    v["remote_only_chunks"] = json!(lens.len());
    v["remote_only_bytes"] = json!(remote_bytes);
    let lazy_note = if lens.is_empty() {
        String::new()
    } else {
        format!(
            "; {} ({} bytes) left on the remote until a file needs them (fetched in the background while mounted)",
            sync::count(lens.len() as u64, "chunk"),
            remote_bytes
        )
    };
    print(
        &v,
        args.json,
        format!(
            "cloned {} {} into {}: {}, {}, {}, {} fetched{lazy_note}; mount it with `ringfs mount MNT --store {}`",
            f.head.branch,
            &f.head.commit[..12],
            dest.display(),
            sync::count(rep.files, "file"),
            sync::count(rep.objects, "object"),
            sync::count(rep.chunks, "chunk"),
            sync::count(f.bytes, "byte"),
            dest.display()
        ),
    );
    Ok(())
}

/// The objects fetched from a remote and every chunk they name, as the
/// `held` record keys them: all of it is on that remote.
fn fetched_ids(objects: &[(fs_core::snap::object::ObjectId, Vec<u8>)]) -> Vec<(u8, [u8; 32])> {
    let mut ids: Vec<(u8, [u8; 32])> = objects.iter().map(|o| (b'o', o.0)).collect();
    for (_, b) in objects {
        if let Ok((_, ch)) = fs_core::snap::transfer::children(b) {
            ids.extend(ch.into_iter().map(|h| (b'c', h)));
        }
    }
    ids
}
