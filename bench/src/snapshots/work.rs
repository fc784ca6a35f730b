//! The workloads of the snapshots section: the same steps on ringfs (its
//! snapshot commands) and on an ext4 directory (git, `cp -a`), each timed as
//! a whole command.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::store::work::{tree_content, tree_path};
use crate::sys;

/// Runs commands of one side: `ringfs` (the binary under test) or `git`, with
/// their output captured in `scratch` and the section's timeout.
pub struct Runner {
    pub ringfs: PathBuf,
    pub scratch: PathBuf,
    pub timeout: Duration,
}

/// What a `ringfs … --json` command printed, with its wall time.
pub struct Doc {
    pub doc: Value,
    /// The command's wall time (process start to exit), ms.
    pub wall_ms: f64,
}

impl Doc {
    /// The daemon's own time (`total_ms`), when the document has one.
    pub fn total_ms(&self) -> Option<f64> {
        self.doc["total_ms"].as_f64()
    }
}

impl Runner {
    /// `ringfs ARGS --json`, which must succeed and print one JSON document.
    pub fn ringfs(&self, args: &[&str]) -> Result<Doc> {
        let mut c = Command::new(&self.ringfs);
        c.args(args).arg("--json");
        let r = sys::run_ok(c, &self.scratch, self.timeout)?;
        let doc: Value = serde_json::from_str(r.stdout.trim()).with_context(|| format!("ringfs {} printed no JSON: {}", args.join(" "), r.stdout))?;
        Ok(Doc { doc, wall_ms: r.ms })
    }

    /// `ringfs ARGS` (no --json); its wall time in ms.
    pub fn ringfs_plain(&self, args: &[&str]) -> Result<f64> {
        let mut c = Command::new(&self.ringfs);
        c.args(args);
        Ok(sys::run_ok(c, &self.scratch, self.timeout)?.ms)
    }

    /// `git -C dir ARGS` (identity and gc settings fixed); (stdout, wall ms).
    pub fn git(&self, dir: &Path, args: &[&str]) -> Result<(String, f64)> {
        let mut c = Command::new("git");
        c.arg("-C").arg(dir);
        c.args(["-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "gc.auto=0", "-c", "core.fsync=none"]);
        c.args(args);
        let r = sys::run_ok(c, &self.scratch, self.timeout)?;
        Ok((r.stdout, r.ms))
    }

    /// git's snapshot of the tree: `git add -A` then `git commit`; wall ms.
    pub fn git_commit(&self, dir: &Path, msg: &str) -> Result<f64> {
        let a = self.git(dir, &["add", "-A"])?.1;
        let b = self.git(dir, &["commit", "-q", "--allow-empty", "-m", msg])?.1;
        Ok(a + b)
    }

    /// `git rev-parse HEAD`.
    pub fn git_head(&self, dir: &Path) -> Result<String> {
        Ok(self.git(dir, &["rev-parse", "HEAD"])?.0.trim().to_string())
    }

    /// A command that must succeed (cp -a, npm); wall ms.
    pub fn cmd(&self, mut c: Command) -> Result<f64> {
        Ok(sys::run_ok(std::mem::replace(&mut c, Command::new("true")), &self.scratch, self.timeout)?.ms)
    }
}

/// Edit `k` of the `n` small files of a tree spread over it (every
/// `n / k`-th, shifted by `round` so successive rounds touch other files):
/// each gets its content plus a line naming the round.
pub fn edit_spread(root: &Path, n: usize, k: usize, round: usize) -> Result<()> {
    let step = (n / k.max(1)).max(1);
    for j in 0..k {
        let i = (j * step + round * 7) % n;
        let p = tree_path(root, i);
        let mut c = tree_content(i);
        c.extend_from_slice(format!("\nround {round}\n").as_bytes());
        std::fs::write(&p, c).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// What a store holds beyond its working copies (`wc/`, `local/`), as
/// written: the pack files (chunks and objects, appended) and the other
/// files at their sizes, and the database (`store.redb`) at the bytes its
/// written pages take on disk (`st_blocks`), not its file size. redb grows
/// its file in steps (set_len: a sparse tail until pages are written
/// there), so the file size would count as a 10-byte change's growth the
/// megabyte step it happened to trigger (issue 41; DECISIONS "store growth
/// measured as written"). A store not there is 0.
pub fn store_bytes(store: &Path) -> Result<u64> {
    fn walk(p: &Path, top: bool) -> Result<u64> {
        let rd = match std::fs::read_dir(p) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
        };
        let mut n = 0;
        for e in rd {
            let e = e.with_context(|| format!("reading {}", p.display()))?;
            let name = e.file_name();
            if top && (name == "wc" || name == "local") {
                continue;
            }
            // (A file the daemon removed meanwhile counts nothing.)
            let Ok(m) = std::fs::symlink_metadata(e.path()) else { continue };
            n += if m.is_dir() {
                walk(&e.path(), false)?
            } else if top && name == "store.redb" {
                use std::os::unix::fs::MetadataExt;
                m.blocks() * 512
            } else {
                m.len()
            };
        }
        Ok(n)
    }
    walk(store, true)
}

/// Bytes of a git repository's object database (`du -sb .git`).
pub fn git_bytes(dir: &Path) -> Result<u64> {
    Ok(crate::store::measure::du(&dir.join(".git"))?.0)
}

/// A file of `size` pseudo-random bytes (incompressible, seed fixed).
pub fn random_file(path: &Path, size: u64, seed: u64) -> Result<()> {
    use std::io::Write;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?);
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill(&mut buf[..n]);
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(())
}

/// Ten bytes written at the `i`-th of `n` offsets spread over a file of
/// `size` bytes (in place, no truncation).
pub fn overwrite10(path: &Path, size: u64, i: u64, n: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).with_context(|| format!("opening {}", path.display()))?;
    let off = (size / n) * i + 4093;
    f.write_all_at(format!("edit{i:06}").as_bytes(), off)?;
    Ok(())
}

/// The prepend of LayerFS's dedup case: 10 bytes written to a temp file, the
/// whole file appended, the temp renamed over it.
pub fn prepend10(path: &Path) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut data = b"PREPEND-10".to_vec();
    data.extend(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?);
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The files of a tree (relative paths, sorted), for picking edits in an
/// installed npm tree.
pub fn files_of(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                if e.file_name() != ".git" {
                    stack.push(e.path());
                }
            } else if t.is_file() {
                out.push(e.path().strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    if out.is_empty() {
        bail!("no files under {}", root.display());
    }
    Ok(out)
}

/// One tool call of the agent loop: append a line to 5 of `files`
/// (iteration `it` picks them), and create one new file.
pub fn agent_edit(root: &Path, files: &[PathBuf], it: usize) -> Result<()> {
    use std::io::Write;
    for j in 0..5 {
        let p = root.join(&files[(it * 37 + j * 101) % files.len()]);
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).with_context(|| format!("appending to {}", p.display()))?;
        writeln!(f, "// agent edit {it}.{j}")?;
    }
    std::fs::write(root.join(format!("agent-note-{it}.txt")), format!("iteration {it}\n"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step of store.redb's file (a sparse tail) is not growth; pages
    /// written are, and so are pack bytes; working copies are not counted.
    #[test]
    fn store_bytes_counts_what_was_written_not_the_database_file_step() {
        use std::io::{Seek, SeekFrom, Write};
        let d = tempfile::tempdir().unwrap();
        let s = d.path();
        std::fs::create_dir_all(s.join("packs")).unwrap();
        std::fs::create_dir_all(s.join("wc")).unwrap();
        std::fs::create_dir_all(s.join("local")).unwrap();
        std::fs::write(s.join("wc/big"), vec![7u8; 1 << 20]).unwrap();
        std::fs::write(s.join("local/x"), vec![7u8; 1 << 16]).unwrap();
        std::fs::write(s.join("packs/00000001.pack"), vec![1u8; 1000]).unwrap();
        let mut db = std::fs::File::create(s.join("store.redb")).unwrap();
        db.write_all(&[9u8; 4096]).unwrap();
        db.set_len(1 << 20).unwrap();
        db.sync_all().unwrap();
        let before = store_bytes(s).unwrap();
        assert!((1000 + 4096..1000 + 4096 + 65536).contains(&before), "{before}");
        // redb's step: the file grows by 1 MiB, nothing written there.
        db.set_len(2 << 20).unwrap();
        db.sync_all().unwrap();
        assert_eq!(store_bytes(s).unwrap(), before, "a file-size step is no growth");
        // A page written in the new region, and 10 bytes appended to a pack.
        db.seek(SeekFrom::Start((1 << 20) + 8192)).unwrap();
        db.write_all(&[3u8; 4096]).unwrap();
        db.sync_all().unwrap();
        let mut p = std::fs::OpenOptions::new().append(true).open(s.join("packs/00000001.pack")).unwrap();
        p.write_all(b"0123456789").unwrap();
        let after = store_bytes(s).unwrap();
        assert!((4096 + 10..4096 + 10 + 65536).contains(&(after - before)), "{before} -> {after}");
        assert_eq!(store_bytes(&s.join("nothing-here")).unwrap(), 0);
    }
}
