//! The remote side of an exec receipt (`durability.remote` and
//! `durability.sync`) on a `mount --remote` workspace: what the sync thread
//! has pushed and what is pending, from the daemon's own `remote status`
//! document (the `remote_status` request with `local`: from the store's
//! record, the remote not contacted), not computed again here.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::control::{self, Request};

/// The synced branch at the end of the call (docs/SEMANTICS.md "exec
/// receipts"): the fields of `ringfs remote status --json`'s branch entry
/// and sync state that say what is on the remote and what is not yet.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RemoteSync {
    /// The remote's name and URL.
    pub remote: String,
    pub url: String,
    /// The branch the mount syncs.
    pub branch: String,
    /// The branch's head here (after the call, and its `--commit`).
    pub local: Option<String>,
    /// The branch's head on the remote, as last pushed or seen there.
    pub pushed: Option<String>,
    /// What a push would send now: commits, objects, chunks, bytes.
    pub pending_commits: u64,
    pub pending_objects: u64,
    pub pending_chunks: u64,
    pub pending_bytes: u64,
    /// The lag: age (s) of the oldest commit not on the remote.
    pub oldest_pending_age_s: Option<u64>,
    /// The last successful push (ISO 8601 UTC) and its age in seconds.
    pub last_push: Option<String>,
    pub last_push_age_s: Option<u64>,
    /// Why the last push failed, when it did.
    pub last_error: Option<String>,
    /// The sync thread's phase (`idle`, `pushing`, `waiting to retry`, …)
    /// and interval (s).
    pub phase: String,
    pub interval_s: f64,
}

/// The receipt's remote line and state on a `mount --remote` workspace
/// (`sync`: the `sync` member of the daemon's stats document at the call's
/// end), `None` on a mount without it. `changed_uncommitted`: the call
/// changed synced paths and made no commit (the sync's next commit takes
/// them). A failing request is said in the line, never fails the receipt.
pub fn remote_state(mp: &Path, sync: &Value, changed_uncommitted: bool) -> Option<(String, Option<RemoteSync>)> {
    let name = sync["remote"].as_str()?;
    let reply = control::call(mp, &Request::RemoteStatus { remote: Some(name.to_string()), local: true });
    let doc = match reply {
        Ok(v) if v.get("refused").is_none() => v,
        Ok(v) => return Some((format!("remote {name}: state unknown ({})", v["refused"].as_str().unwrap_or("refused")), None)),
        Err(e) => return Some((format!("remote {name}: state unknown ({e:#})"), None)),
    };
    let r = &doc["remotes"][0];
    let branch = sync["branch"].as_str().unwrap_or_default();
    let b = r["branches"].as_array().and_then(|bs| bs.iter().find(|b| b["branch"] == branch)).cloned().unwrap_or_default();
    let s = |v: &Value| v.as_str().map(str::to_string);
    let n = |k: &str| b[k].as_u64().unwrap_or(0);
    let st = RemoteSync {
        remote: name.to_string(),
        url: s(&r["url"]).unwrap_or_default(),
        branch: branch.to_string(),
        local: s(&b["local"]),
        pushed: s(&b["remote"]),
        pending_commits: n("pending_commits"),
        pending_objects: n("pending_objects"),
        pending_chunks: n("pending_chunks"),
        pending_bytes: n("pending_bytes"),
        oldest_pending_age_s: b["oldest_pending_age_s"].as_u64(),
        last_push: s(&b["last_push"]).or_else(|| s(&r["last_push"])),
        last_push_age_s: b["last_push_age_s"].as_u64().or(r["last_push_age_s"].as_u64()),
        last_error: s(&b["last_error"]).or_else(|| s(&sync["last_error"])),
        phase: s(&sync["phase"]).unwrap_or_default(),
        interval_s: sync["interval_s"].as_f64().unwrap_or(0.0),
    };
    Some((line(&st, changed_uncommitted), Some(st)))
}

/// The human line: on the remote or not yet, how much, since when.
pub fn line(st: &RemoteSync, changed_uncommitted: bool) -> String {
    let short = |h: &Option<String>| h.as_deref().map(|h| h[..h.len().min(12)].to_string()).unwrap_or_else(|| "-".into());
    let ago = st.last_push_age_s.map(|a| format!("last push {a} s ago")).unwrap_or_else(|| "never pushed yet".into());
    let mut o = if st.pending_commits == 0 && st.pending_bytes == 0 && st.local.is_some() {
        format!("on remote {}: {} at {} ({ago})", st.remote, st.branch, short(&st.pushed))
    } else {
        format!(
            "NOT yet on remote {}: {} {} ({} bytes) to push{}; the sync pushes every {} s ({ago})",
            st.remote,
            st.pending_commits,
            if st.pending_commits == 1 { "commit" } else { "commits" },
            st.pending_bytes,
            st.oldest_pending_age_s.map(|a| format!(", oldest {a} s old")).unwrap_or_default(),
            st.interval_s
        )
    };
    if changed_uncommitted {
        o += "; this call's changes go with the sync's next commit";
    }
    if let Some(e) = &st.last_error {
        o += &format!("; last push failed: {e}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_pushed_or_pending() {
        let mut st = RemoteSync {
            remote: "origin".into(),
            branch: "main".into(),
            local: Some("ab".repeat(32)),
            pushed: Some("ab".repeat(32)),
            last_push_age_s: Some(3),
            interval_s: 5.0,
            ..Default::default()
        };
        assert_eq!(line(&st, false), "on remote origin: main at abababababab (last push 3 s ago)");
        st.pending_commits = 1;
        st.pending_bytes = 1200;
        st.oldest_pending_age_s = Some(2);
        st.last_error = Some("unreachable".into());
        assert_eq!(
            line(&st, true),
            "NOT yet on remote origin: 1 commit (1200 bytes) to push, oldest 2 s old; the sync pushes every 5 s (last push 3 s ago); this call's changes go with the sync's next commit; last push failed: unreachable"
        );
    }
}
