//! The workloads: fs-bench's 14 rows (bash bodies in scripts/fsbench/) and the npm installs.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Row number (1..14) or 0 for the npm workloads.
    pub n: u32,
    /// Stable key: the script name without ".sh".
    pub key: &'static str,
    pub title: &'static str,
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
