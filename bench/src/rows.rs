//! The workloads: fs-bench's 14 rows (bash bodies in scripts/fsbench/) and the npm installs.

use std::collections::BTreeSet;
use std::sync::Mutex;

use serde::{Deserialize, Deserializer, Serialize};

/// A name known for the whole run. An alias, not `&'static str` written out, so
/// that serde's derive does not take it for a string borrowed from the input
/// (it comes from [`intern`] when a results.json is read back).
pub type Name = &'static str;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// Row number (1..14) or 0 for the npm workloads.
    pub n: u32,
    /// Stable key: the script name without ".sh".
    #[serde(deserialize_with = "de_static")]
    pub key: Name,
    #[serde(deserialize_with = "de_static")]
    pub title: Name,
}

impl Row {
    pub fn script(&self) -> String {
        format!("{}.sh", self.key)
    }
}

pub const ROWS: &[Row] = &[
    Row { n: 1, key: "01-create", title: "create 1000 files" },
    Row { n: 2, key: "02-create-stat", title: "1000 creates + 1000 stat" },
    Row { n: 3, key: "03-create-rm", title: "1000 creates + rm f*" },
    Row { n: 4, key: "04-mkdir-tree", title: "mkdir tree (100 mkdir, 1000 touch)" },
    Row { n: 5, key: "05-tree-find", title: "tree + find | wc -l" },
    Row { n: 6, key: "06-dd", title: "dd 64 MiB" },
    Row { n: 7, key: "07-dd-cp", title: "dd + cp" },
    Row { n: 8, key: "08-dd-cat", title: "dd + cat" },
    Row { n: 9, key: "09-read", title: "pure read (cat 64 MiB)" },
    Row { n: 10, key: "10-copy", title: "pure copy (cp 64 MiB)" },
    Row { n: 11, key: "11-overwrite", title: "overwrite (dd conv=notrunc)" },
    Row { n: 12, key: "12-git-commit", title: "git init + 100 files + commit" },
    Row { n: 13, key: "13-git-clone", title: "git clone --depth 1 (1 MB, file://)" },
    Row { n: 14, key: "14-npm-tiny", title: "npm init + install is-number" },
];

pub const NPM: &[Row] = &[
    Row { n: 0, key: "npm-express", title: "npm install express" },
    Row { n: 0, key: "npm-toolchain", title: "npm install toolchain (ts, vite, webpack, eslint, react)" },
];

pub fn row(n: u32) -> Option<&'static Row> {
    ROWS.iter().find(|r| r.n == n)
}

pub fn npm(name: &str) -> Option<&'static Row> {
    NPM.iter().find(|r| r.key == format!("npm-{name}") || r.key == name)
}

/// One `&'static str` per distinct string: the names a results.json read back
/// (`ringfs-bench report --from`) gives to rows, sections and modes. Each distinct
/// string is leaked once; a report reads one document.
pub(crate) fn intern(s: &str) -> &'static str {
    static SET: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut set = SET.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(x) = set.get(s) {
        return x;
    }
    let x: &'static str = Box::leak(s.to_owned().into_boxed_str());
    set.insert(x);
    x
}

pub(crate) fn de_static<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let s = String::deserialize(d)?;
    Ok(intern(&s))
}

pub(crate) fn de_static_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'static str>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    Ok(s.map(|s| intern(&s)))
}
