//! `--json` failures are the error document on stdout (issue 41 item 8,
//! docs/FORMATS.md "Error document"): `{"version": 1, "error": {"kind",
//! "message", "hint"}, "exit_code"}`, the exit status the one without
//! `--json`, for every command that has `--json`: ringfs failing before
//! `ringfs exec`'s command runs (not found 127, a bad --cwd or a path that
//! is not a mount 125), the other commands on a path that is no mount or a
//! store that is not there, and clap's usage errors.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// Runs `ringfs ARGS`; asserts stdout is one error document whose
/// `exit_code` is the exit status, and returns (status, error member).
fn error_doc(args: &[&str]) -> (i32, Value) {
    let mut c = Command::new(RINGFS);
    c.args(args);
    let o = run_timeout(&mut c, Duration::from_secs(60));
    let (out, err) = out_str(&o);
    let code = o.status.code().unwrap_or(-1);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("ringfs {args:?} (exit {code}): stdout is no JSON document ({e}): {out:?} / stderr {err}"));
    assert_eq!(v["version"], 1, "{args:?}: {v}");
    assert_eq!(v["exit_code"].as_i64(), Some(i64::from(code)), "{args:?}: {v}");
    assert_ne!(code, 0, "{args:?}: {v}");
    let e = v["error"].clone();
    assert!(e["kind"].is_string() && !e["message"].as_str().unwrap_or("").is_empty(), "{args:?}: {v}");
    assert!(e.get("hint").is_some(), "{args:?}: hint (null when none): {v}");
    // The text is still on stderr.
    assert!(err.contains("ringfs"), "{args:?}: stderr {err:?}");
    (code, e)
}

#[test]
fn exec_json_failures_before_the_command_are_error_documents() {
    let m = TestMount::new(Backend::Store);
    let (code, e) = error_doc(&["exec", mp(&m), "--json", "--", "no-such-program-41"]);
    assert_eq!((code, e["kind"].as_str()), (127, Some("not_found")), "{e}");
    assert!(e["message"].as_str().unwrap().contains("no-such-program-41"), "{e}");
    let (code, e) = error_doc(&["exec", mp(&m), "--json", "--cwd", "no/such/dir", "--", "true"]);
    assert_eq!((code, e["kind"].as_str()), (125, Some("not_found")), "{e}");
    m.sh_ok("echo x > notexec");
    let (code, e) = error_doc(&["exec", mp(&m), "--json", "--", "./notexec"]);
    assert_eq!((code, e["kind"].as_str()), (126, Some("not_run")), "{e}");
    let (code, e) = error_doc(&["exec", mp(&m), "--json", "--timeout", "-1", "--", "true"]);
    assert_eq!((code, e["kind"].as_str()), (125, Some("usage")), "{e}");
    // A directory that is not a mount.
    let d = tempfile::tempdir().unwrap();
    let (code, e) = error_doc(&["exec", d.path().to_str().unwrap(), "--json", "--", "true"]);
    assert_eq!((code, e["kind"].as_str()), (125, Some("not_a_mount")), "{e}");
    let (code, e) = error_doc(&["exec", "/no/such/mountpoint", "--json", "--", "true"]);
    assert_eq!((code, e["kind"].as_str()), (125, Some("not_a_mount")), "{e}");
    // Success is still the receipt.
    let o = ringfs(&["exec", mp(&m), "--json", "--", "true"]);
    let v: Value = serde_json::from_str(&out_str(&o).0).unwrap();
    assert_eq!(v["exit_code"], 0, "{v}");
}

#[test]
fn every_json_command_fails_with_the_error_document() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_str().unwrap();
    let missing = d.path().join("missing");
    let missing = missing.to_str().unwrap();
    // A directory that is no mount: every MOUNTPOINT command says so.
    for args in [
        vec!["status", dir],
        vec!["stats", dir],
        vec!["commit", dir],
        vec!["log", dir],
        vec!["diff", dir],
        vec!["restore", dir, "main"],
        vec!["gc", dir],
        vec!["branch", dir, "--list"],
        vec!["push", dir],
        vec!["remote", "status", dir],
    ] {
        let mut a = args.clone();
        a.push("--json");
        let (code, e) = error_doc(&a);
        assert_eq!(code, 1, "{a:?}: {e}");
        assert_eq!(e["kind"], "not_a_mount", "{a:?}: {e}");
        assert!(e["hint"].as_str().is_some_and(|h| h.contains("findmnt")), "{a:?}: {e}");
    }
    // The --store and URL forms, and the rest.
    for (args, kind) in [
        (vec!["log", "--store", missing], "not_found"),
        (vec!["diff", "--store", missing, "a", "b"], "not_found"),
        (vec!["gc", "--store", missing], "not_found"),
        (vec!["branch", "--store", missing, "--list"], "not_found"),
        (vec!["fork", "--store", missing, "--to", dir], "not_found"),
        (vec!["remote", "add", "--store", missing, "origin", "file:///nonexistent-41"], "not_found"),
        (vec!["pull", "--store", missing], "not_found"),
        (vec!["clone", "nope://x", "--store", missing], "remote"),
    ] {
        let mut a = args.clone();
        a.push("--json");
        let (code, e) = error_doc(&a);
        assert_eq!((code, e["kind"].as_str()), (1, Some(kind)), "{a:?}: {e}");
    }
}

#[test]
fn usage_errors_with_json_are_error_documents() {
    let (code, e) = error_doc(&["status", "--json", "--no-such-flag"]);
    assert_eq!((code, e["kind"].as_str()), (2, Some("usage")), "{e}");
    assert!(e["message"].as_str().unwrap().contains("--no-such-flag"), "{e}");
    assert!(e["hint"].as_str().is_some_and(|h| h.contains("--help")), "{e}");
    // exec's own usage errors keep 125; a `--json` after `--` is the command's.
    let (code, e) = error_doc(&["exec", "/x", "--json", "--bogus", "--", "true"]);
    assert_eq!((code, e["kind"].as_str()), (125, Some("usage")), "{e}");
    let o = ringfs(&["exec", "/x", "--bogus", "--", "echo", "--json"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(out_str(&o).0.is_empty(), "no --json: no document: {:?}", out_str(&o));
    // --help is no error: printed as ever.
    let o = ringfs(&["status", "--json", "--help"]);
    assert!(o.status.success() && out_str(&o).0.contains("Usage"), "{:?}", out_str(&o));
}
