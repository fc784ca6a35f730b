//! The error document: what every `--json` command prints on stdout when it
//! fails (docs/FORMATS.md "Error document"), so that a program reading the
//! output always gets one JSON document:
//!
//! ```json
//! {"version": 1, "error": {"kind": "not_a_mount", "message": "…", "hint": "…"}, "exit_code": 125}
//! ```
//!
//! `main` builds it for every command from the error it got ([`ErrorDoc::of`])
//! or from clap's usage error ([`ErrorDoc::usage`]); the exit status is the
//! one the command has without `--json`. The kind comes from the error's
//! chain: a [`Failure`] (an error made with its kind, [`failure`] or
//! [`tagged`]), else a typed error of the layers below (a program not run,
//! a store error, an I/O error), else the command's fallback (`remote` for
//! the remote commands, else `other`).

use std::fmt;

use serde::Serialize;

/// The version of the error document (docs/FORMATS.md).
pub const ERROR_DOC_VERSION: u32 = 1;

/// What went wrong, for a program to branch on (serialized in snake_case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The command line is wrong: an unknown flag, a missing or bad value,
    /// flags that do not go together.
    Usage,
    /// Something named does not exist: a program not found (exit 127), a
    /// `--cwd` directory, a store directory, a file.
    NotFound,
    /// The path given is not the mountpoint of a running `ringfs mount`.
    NotAMount,
    /// The path is a ringfs mount but no daemon answers it (killed).
    NoDaemon,
    /// The program was found but could not be run (exit 126), or the
    /// sandbox it was to run in could not be set up.
    NotRun,
    /// The store is held by another process (a daemon serving it).
    StoreInUse,
    /// The store is damaged (`ringfs fsck` / `ringfs salvage`).
    StoreDamaged,
    /// An input/output error of the operating system (a full disk, a
    /// permission, a read error).
    Io,
    /// A remote failed or refused (unreachable, diverged, a bad marker).
    Remote,
    /// Anything else (the message says what).
    Other,
}

/// An error made with its [`ErrorKind`] and, apart from the message, the
/// fix (`hint`). Its text (`Display`) is `message: hint`, as the plain
/// text output always was; the error document carries the two apart.
#[derive(Debug)]
pub struct Failure {
    pub kind: ErrorKind,
    pub message: String,
    pub hint: Option<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.hint {
            Some(h) => write!(f, "{}: {h}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Failure {}

/// An error of `kind` saying `message`, with the fix `hint` (`None`: none to give).
pub fn failure(kind: ErrorKind, message: impl Into<String>, hint: Option<String>) -> anyhow::Error {
    anyhow::Error::new(Failure { kind, message: message.into(), hint })
}

/// `e` with the kind `kind`: the same text (its whole chain), now classified.
pub fn tagged(kind: ErrorKind, e: anyhow::Error) -> anyhow::Error {
    if e.chain().any(|c| c.downcast_ref::<Failure>().is_some()) {
        return e;
    }
    failure(kind, format!("{e:#}"), None)
}

/// The `error` member of the document.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorBody {
    pub kind: ErrorKind,
    pub message: String,
    /// The fix, when one is known apart from the message (else `null`).
    pub hint: Option<String>,
}

/// The error document (see the module doc).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorDoc {
    pub version: u32,
    pub error: ErrorBody,
    pub exit_code: i32,
}

impl ErrorDoc {
    /// The document of `e`, a command's error, exiting with `exit_code`;
    /// `fallback`: the kind when nothing in the chain says one.
    pub fn of(e: &anyhow::Error, fallback: ErrorKind, exit_code: i32) -> ErrorDoc {
        let (kind, hint) = classify(e).unwrap_or((fallback, None));
        // The chain as `{:#}` prints it, the hint taken out of its Failure.
        let message = e
            .chain()
            .map(|c| match c.downcast_ref::<Failure>() {
                Some(f) => f.message.clone(),
                None => c.to_string(),
            })
            .collect::<Vec<_>>()
            .join(": ");
        ErrorDoc { version: ERROR_DOC_VERSION, error: ErrorBody { kind, message, hint }, exit_code }
    }

    /// The document of clap's usage error `e` (its first line the message,
    /// the usage and the `--help` tip the hint).
    pub fn usage(e: &clap::Error, exit_code: i32) -> ErrorDoc {
        let text = e.render().to_string();
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let message = lines.next().unwrap_or("bad command line").trim_start_matches("error: ").to_string();
        let rest: Vec<&str> = lines.collect();
        let hint = (!rest.is_empty()).then(|| rest.join(" "));
        ErrorDoc { version: ERROR_DOC_VERSION, error: ErrorBody { kind: ErrorKind::Usage, message, hint }, exit_code }
    }

    /// The document as JSON text (pretty, as the other `--json` documents).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| format!("{{\"version\": {ERROR_DOC_VERSION}, \"error\": {{\"kind\": \"other\", \"message\": \"\", \"hint\": null}}, \"exit_code\": {}}}", self.exit_code))
    }
}

/// The kind (and hint) of the first element of `e`'s chain that says one.
fn classify(e: &anyhow::Error) -> Option<(ErrorKind, Option<String>)> {
    use fs_core::StoreError;
    for c in e.chain() {
        if let Some(f) = c.downcast_ref::<Failure>() {
            return Some((f.kind, f.hint.clone()));
        }
        if let Some(n) = c.downcast_ref::<crate::run::NotRun>() {
            return Some((if n.found { ErrorKind::NotRun } else { ErrorKind::NotFound }, None));
        }
        if let Some(s) = c.downcast_ref::<StoreError>() {
            return Some((
                match s {
                    StoreError::Locked { .. } => ErrorKind::StoreInUse,
                    StoreError::Corrupt { .. } | StoreError::Damaged { .. } => ErrorKind::StoreDamaged,
                    StoreError::Io { .. } | StoreError::Unusable { .. } => ErrorKind::Io,
                    _ => ErrorKind::Other,
                },
                None,
            ));
        }
        if c.downcast_ref::<clap::Error>().is_some() {
            return Some((ErrorKind::Usage, None));
        }
    }
    // An I/O error at the root: a file that is not there, or the system's.
    e.chain().find_map(|c| c.downcast_ref::<std::io::Error>()).map(|io| {
        (if io.kind() == std::io::ErrorKind::NotFound { ErrorKind::NotFound } else { ErrorKind::Io }, None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn a_failure_keeps_its_text_and_gives_kind_and_hint_apart() {
        let e = failure(ErrorKind::NotAMount, "/x is not a ringfs mount", Some("give the mountpoint".into()));
        assert_eq!(format!("{e:#}"), "/x is not a ringfs mount: give the mountpoint");
        let e = e.context("status");
        let d = ErrorDoc::of(&e, ErrorKind::Other, 1);
        assert_eq!(d.error.kind, ErrorKind::NotAMount);
        assert_eq!(d.error.message, "status: /x is not a ringfs mount");
        assert_eq!(d.error.hint.as_deref(), Some("give the mountpoint"));
        let v: serde_json::Value = serde_json::from_str(&d.to_json()).unwrap();
        assert_eq!(v["version"], 1);
        assert_eq!(v["error"]["kind"], "not_a_mount");
        assert_eq!(v["exit_code"], 1);
    }

    #[test]
    fn typed_errors_below_are_classified() {
        let nr = |found| anyhow::Error::new(crate::run::NotRun { program: "p".into(), found, why: "w".into() });
        assert_eq!(ErrorDoc::of(&nr(false), ErrorKind::Other, 127).error.kind, ErrorKind::NotFound);
        assert_eq!(ErrorDoc::of(&nr(true), ErrorKind::Other, 126).error.kind, ErrorKind::NotRun);
        let locked = anyhow::Error::new(fs_core::StoreError::Locked { pid: None, path: "/s".into() });
        assert_eq!(ErrorDoc::of(&locked, ErrorKind::Other, 1).error.kind, ErrorKind::StoreInUse);
        let io: anyhow::Result<()> = Err(std::io::Error::from_raw_os_error(libc::ENOSPC)).context("writing");
        assert_eq!(ErrorDoc::of(&io.unwrap_err(), ErrorKind::Other, 1).error.kind, ErrorKind::Io);
        let plain = anyhow::anyhow!("something");
        assert_eq!(ErrorDoc::of(&plain, ErrorKind::Remote, 1).error.kind, ErrorKind::Remote);
        let t = tagged(ErrorKind::Usage, anyhow::anyhow!("inner").context("outer"));
        assert_eq!(format!("{t:#}"), "outer: inner");
        assert_eq!(ErrorDoc::of(&t, ErrorKind::Other, 1).error, ErrorBody { kind: ErrorKind::Usage, message: "outer: inner".into(), hint: None });
    }

    #[test]
    fn kinds_are_snake_case() {
        let all = [
            (ErrorKind::Usage, "usage"),
            (ErrorKind::NotFound, "not_found"),
            (ErrorKind::NotAMount, "not_a_mount"),
            (ErrorKind::NoDaemon, "no_daemon"),
            (ErrorKind::NotRun, "not_run"),
            (ErrorKind::StoreInUse, "store_in_use"),
            (ErrorKind::StoreDamaged, "store_damaged"),
            (ErrorKind::Io, "io"),
            (ErrorKind::Remote, "remote"),
            (ErrorKind::Other, "other"),
        ];
        for (k, s) in all {
            assert_eq!(serde_json::to_value(k).unwrap(), s);
        }
    }
}
