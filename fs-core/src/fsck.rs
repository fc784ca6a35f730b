//! Offline consistency check of a store directory.
//!
//! Owns: what "consistent" means for the tables (manifests, chunks and
//! their reference counts, directory entries, link counts). Must not
//! touch: a store in use (it takes a shared store lock), the live inode
//! table, the store's files (it opens them read-only and repairs nothing;
//! recovery at mount does).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use redb::ReadableTable;

use crate::inode::ROOT;
use crate::store::pack::check::{check_chunks, check_chunks_v2, chunk_lens};
use crate::store::readonly::{open_read_only, shared_lock};
use crate::schema::*;
use crate::types::{count, StoreError};

/// One inconsistency: what is wrong and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Where: a table and key, e.g. "chunks/ab12…" or "inode 42".
    pub place: String,
    /// What is wrong.
    pub what: String,
}

/// The result of [`fsck`]: counts of what was checked and the problems found.
#[derive(Clone, Debug, Default)]
pub struct FsckReport {
    pub store: PathBuf,
    pub inodes: u64,
    pub dirents: u64,
    pub manifests: u64,
    /// Snapshot objects (schema 4).
    pub objects: u64,
    pub chunks: u64,
    pub chunk_bytes: u64,
    /// Pack files the index lists.
    pub packs: u64,
    /// Pack files the index does not list (a crash left them; the next
    /// mount removes them; a problem only after a clean shutdown).
    pub unreferenced_packs: u64,
    /// Manifests of inodes that do not exist, after an unclean shutdown: a
    /// restore (or a new file's content) the crash cut short before its
    /// inodes were written; the next mount drops them with their chunk
    /// references (recovery). A problem only after a clean shutdown.
    pub orphan_manifests: u64,
    /// Chunks whose bytes are only on a remote (a lazy clone fetches them
    /// on first open and in the background), and their bytes: not missing.
    pub remote_only_chunks: u64,
    pub remote_only_bytes: u64,
    /// The store was shut down cleanly (a daemon that crashed leaves it
    /// false; the next open recovers).
    pub clean_shutdown: bool,
    pub problems: Vec<Problem>,
    /// Working copies compared with their inodes (and, with `full`, their
    /// manifests) by [`crate::fsck_store`].
    pub working_copies: u64,
    /// Whether working copies were hashed ([`crate::FsckOptions::full`]).
    pub full: bool,
    /// What was not checked, and why (one line each).
    pub notes: Vec<String>,
    /// The store could not be checked past its first problem (the database
    /// cannot be opened or read, or its pack directory cannot be used): the
    /// counts are 0.
    pub unreadable: bool,
}

impl FsckReport {
    /// No problems found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
    fn bad(&mut self, place: impl Into<String>, what: impl Into<String>) {
        self.problems.push(Problem { place: place.into(), what: what.into() });
    }
}

impl fmt::Display for FsckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.unreadable {
            writeln!(f, "store {}: not checked past the problem below", self.store.display())?;
        } else {
            self.fmt_counts(f)?;
        }
        if self.working_copies > 0 {
            writeln!(f, "{} compared with the store ({})", count(self.working_copies, "working copy", "working copies"), if self.full { "sizes and content" } else { "sizes; --full also compares content" })?;
        }
        if self.orphan_manifests > 0 {
            writeln!(f, "{} manifest(s) of inodes nothing holds, left by a restore or write the crash cut short: the next mount drops them", self.orphan_manifests)?;
        }
        if self.unreferenced_packs > 0 && !self.clean_shutdown {
            writeln!(f, "{} pack file(s) no index entry uses, left by the crash: the next mount removes them", self.unreferenced_packs)?;
        }
        if self.remote_only_chunks > 0 {
            let verb = if self.remote_only_chunks == 1 { "is" } else { "are" };
            writeln!(f, "{} ({} bytes) {verb} only on the remote (a lazy clone): fetched when a file needs them, not missing", count(self.remote_only_chunks, "chunk", "chunks"), self.remote_only_bytes)?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        if self.problems.is_empty() {
            writeln!(f, "clean: no problems found")
        } else {
            writeln!(f, "{} problem(s):", self.problems.len())?;
            for p in &self.problems {
                writeln!(f, "  {}: {}", p.place, p.what)?;
            }
            Ok(())
        }
    }
}

impl FsckReport {
    fn fmt_counts(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "store {}: {}, {}, {}, {} ({} bytes){}{}",
            self.store.display(),
            count(self.inodes, "inode", "inodes"),
            count(self.dirents, "directory entry", "directory entries"),
            count(self.manifests, "manifest", "manifests"),
            count(self.chunks, "chunk", "chunks"),
            self.chunk_bytes,
            if self.objects > 0 { format!(", {}", count(self.objects, "snapshot object", "snapshot objects")) } else { String::new() },
            if self.clean_shutdown { "" } else { ", not shut down cleanly" }
        )
    }
}

/// Checks a store directory: every chunk's BLAKE3 hash and location in its
/// pack file (see `store::pack::check`), pack files no index entry uses, that every
/// manifest's chunks exist and are contiguous, chunk reference counts,
/// that directory entries join live directories to live inodes, link
/// counts (files: number of names; directories: 2 + subdirectories), and
/// the meta counters. Opens the database read-only and writes nothing
/// (a shared flock on `ringfs.lock` when that file exists):
/// [`StoreError::Locked`] while a daemon holds it. Inodes with no links
/// after an unclean shutdown (removed while open) are the orphans the next
/// mount frees, not problems; so are manifests of inodes that do not exist
/// then (a restore the crash cut short: [`FsckReport::orphan_manifests`]). Errors from redb stop the check
/// ([`StoreError::Corrupt`]); `ringfs fsck` goes through
/// [`crate::fsck_store`], which reports them and never panics.
pub fn fsck(store_dir: &Path) -> Result<FsckReport, StoreError> {
    fsck_opts(store_dir, true)
}

/// [`fsck`], reading and hashing every chunk in its pack only if `full`
/// (otherwise a chunk's location is checked against its pack's size).
pub fn fsck_opts(store_dir: &Path, full: bool) -> Result<FsckReport, StoreError> {
    // Checked before the lock: nothing is created in a directory that is no store.
    let dbpath = store_dir.join("store.redb");
    if !dbpath.exists() {
        return Err(StoreError::Corrupt { path: dbpath, reason: "no store database".into() });
    }
    // Read-only: a shared lock if the lock file is there, the database
    // opened without write access (works on a read-only filesystem).
    let _lock = shared_lock(store_dir)?;
    let db = open_read_only(store_dir)?;
    let c = |e: redb::Error| StoreError::Corrupt { path: dbpath.clone(), reason: e.to_string() };
    let rtx = db.begin_read().map_err(|e| c(e.into()))?;
    let mut rep = FsckReport { store: store_dir.to_path_buf(), ..Default::default() };

    let meta = rtx.open_table(META).map_err(|e| c(e.into()))?;
    let mget = |k: &str| meta.get(k).ok().flatten().map(|g| g.value());
    let schema = mget("schema").unwrap_or(SCHEMA_VERSION);
    match mget("schema") {
        Some(v) if v <= SCHEMA_VERSION => {}
        Some(v) => return Err(StoreError::NewerSchema { found: v, supported: SCHEMA_VERSION, path: dbpath }),
        None => rep.bad("meta", "no schema version"),
    }
    rep.clean_shutdown = mget("clean") == Some(1);
    let next_ino = mget("next_ino").unwrap_or(0);

    // Inodes.
    let mut inodes: HashMap<u64, InodeRec> = HashMap::new();
    for r in rtx.open_table(INODES).map_err(|e| c(e.into()))?.iter().map_err(|e| c(e.into()))? {
        let (k, v) = r.map_err(|e| c(e.into()))?;
        match dec_inode(v.value(), schema) {
            Ok(rec) => {
                if let Some(why) = rec.implausible() {
                    rep.bad(format!("inode {}", k.value()), format!("impossible record: {why}"));
                }
                inodes.insert(k.value(), rec);
            }
            Err(e) => rep.bad(format!("inode {}", k.value()), format!("undecodable record: {e}")),
        }
    }
    rep.inodes = inodes.len() as u64;
    if !inodes.get(&ROOT).map(|r| r.mode & libc::S_IFMT == libc::S_IFDIR).unwrap_or(false) {
        rep.bad("inode 1", "root directory missing");
    }
    for &ino in inodes.keys() {
        if ino >= next_ino && ino != ROOT {
            rep.bad(format!("inode {ino}"), format!("number not below next_ino {next_ino}"));
        }
    }

    // Directory entries.
    let mut names: HashMap<u64, u32> = HashMap::new();
    let mut subdirs: HashMap<u64, u32> = HashMap::new();
    let mut cookies: HashSet<(u64, u64)> = HashSet::new();
    for r in rtx.open_table(DIRENTS).map_err(|e| c(e.into()))?.iter().map_err(|e| c(e.into()))? {
        let (k, v) = r.map_err(|e| c(e.into()))?;
        rep.dirents += 1;
        let (parent, name) = k.value();
        let (child, cookie) = v.value();
        let place = format!("dirent {parent}/{}", String::from_utf8_lossy(name));
        match inodes.get(&parent) {
            Some(p) if p.mode & libc::S_IFMT == libc::S_IFDIR => {
                if cookie < 3 || cookie >= p.next_cookie.max(3) {
                    rep.bad(&place, format!("cookie {cookie} outside 3..{}", p.next_cookie));
                }
            }
            Some(_) => rep.bad(&place, "parent is not a directory"),
            None => rep.bad(&place, "parent inode missing"),
        }
        if !cookies.insert((parent, cookie)) {
            rep.bad(&place, format!("cookie {cookie} used twice"));
        }
        match inodes.get(&child) {
            Some(ch) => {
                *names.entry(child).or_default() += 1;
                if ch.mode & libc::S_IFMT == libc::S_IFDIR {
                    *subdirs.entry(parent).or_default() += 1;
                    if ch.parent != parent {
                        rep.bad(&place, format!("directory {child} records parent {}", ch.parent));
                    }
                }
            }
            None => rep.bad(&place, format!("points at missing inode {child}")),
        }
    }
    let mut ids: Vec<_> = inodes.keys().copied().collect();
    ids.sort();
    for ino in &ids {
        let rec = &inodes[ino];
        let place = format!("inode {ino}");
        let n = names.get(ino).copied().unwrap_or(0);
        if *ino != ROOT && rec.nlink == 0 && n == 0 && !rep.clean_shutdown {
            // Removed while still open when the daemon died: an orphan the
            // next mount frees (recovery), not damage.
            continue;
        }
        if rec.mode & libc::S_IFMT == libc::S_IFDIR {
            let want = 2 + subdirs.get(ino).copied().unwrap_or(0);
            if rec.nlink != want {
                rep.bad(&place, format!("directory nlink {} but 2 + subdirectories = {want}", rec.nlink));
            }
            let n = names.get(ino).copied().unwrap_or(0);
            if *ino != ROOT && n != 1 {
                rep.bad(&place, format!("directory has {n} names"));
            }
        } else {
            let n = names.get(ino).copied().unwrap_or(0);
            if rec.nlink != n {
                rep.bad(&place, format!("nlink {} but {n} directory entries", rec.nlink));
            }
        }
    }

    // Manifests and chunk references.
    let chunks = chunk_lens(&rtx, schema).map_err(c)?;
    let mut want_refs: HashMap<[u8; 32], u64> = HashMap::new();
    let mut all = Vec::new();
    let cs = |e: String| StoreError::Corrupt { path: dbpath.clone(), reason: e };
    crate::live::each(&rtx, &mut |ino, m| all.push((ino, m))).map_err(cs)?;
    crate::live::chunk_refs(&rtx, &mut want_refs, &mut |p, w| rep.bad(p, w)).map_err(cs)?;
    let has_manifest: HashSet<u64> = all.iter().map(|(i, _)| *i).collect();
    for (ino, m) in all {
        rep.manifests += 1;
        let place = format!("manifest {ino}");
        match inodes.get(&ino) {
            Some(rec) if rec.mode & libc::S_IFMT == libc::S_IFREG => {}
            Some(_) => rep.bad(&place, "inode is not a regular file"),
            None if !rep.clean_shutdown => rep.orphan_manifests += 1,
            None => rep.bad(&place, "inode missing"),
        }
        let m: Vec<ChunkRef> = match m {
            Ok(m) => m,
            Err(e) => {
                rep.bad(&place, format!("undecodable: {e}"));
                continue;
            }
        };
        // Chunks cover the file's data extents in order; holes between
        // them (sparse files) are not stored.
        let mut off = 0;
        let end = m.last().map(|c| c.offset + c.len as u64).unwrap_or(0);
        if let Some(rec) = inodes.get(&ino) {
            if rep.clean_shutdown && rec.size < end {
                rep.bad(&place, format!("holds data up to byte {end} but the inode's size is {}", rec.size));
            }
        }
        for cr in &m {
            if cr.offset < off {
                rep.bad(&place, format!("chunk at {} overlaps the previous one (ends at {off})", cr.offset));
            }
            off = cr.offset + cr.len as u64;
            match chunks.get(&cr.hash) {
                Some(&len) if len == cr.len => {}
                Some(len) => rep.bad(&place, format!("chunk {} is {len} bytes, manifest says {}", hex(&cr.hash), cr.len)),
                None => rep.bad(&place, format!("chunk {} at offset {} missing", hex(&cr.hash), cr.offset)),
            }
        }
    }
    // Snapshot objects: sound, whole, and their chunk references.
    let objects = crate::snap::check::check_objects(&rtx, &store_dir.join("packs"), &mut want_refs, &mut |p, w| rep.bad(p, w)).map_err(c)?;
    rep.objects = objects;
    let counts = if schema >= 3 {
        check_chunks(&rtx, &store_dir.join("packs"), &want_refs, full, rep.clean_shutdown, &mut |p, w| rep.bad(p, w))
    } else {
        check_chunks_v2(&rtx, &want_refs, &mut |p, w| rep.bad(p, w))
    }
    .map_err(c)?;
    rep.chunks = counts.chunks;
    rep.chunk_bytes = counts.bytes;
    rep.packs = counts.packs;
    rep.unreferenced_packs = counts.unreferenced_packs;
    (rep.remote_only_chunks, rep.remote_only_bytes) = counts.remote_only;
    if mget("chunk_count") != Some(rep.chunks) || mget("chunk_bytes") != Some(rep.chunk_bytes) {
        rep.bad("meta", format!("chunk counters {:?}/{:?} but store holds {}/{}", mget("chunk_count"), mget("chunk_bytes"), rep.chunks, rep.chunk_bytes));
    }

    if rep.clean_shutdown {
        for ino in &ids {
            let rec = &inodes[ino];
            if rec.mode & libc::S_IFMT == libc::S_IFREG && rec.size > 0 && !has_manifest.contains(ino) {
                rep.bad(format!("inode {ino}"), format!("regular file of {} bytes has no stored content", rec.size));
            }
        }
    }

    // Symlinks and xattrs belong to live inodes.
    for r in rtx.open_table(SYMLINKS).map_err(|e| c(e.into()))?.iter().map_err(|e| c(e.into()))? {
        let (k, _) = r.map_err(|e| c(e.into()))?;
        if !inodes.get(&k.value()).map(|r| r.mode & libc::S_IFMT == libc::S_IFLNK).unwrap_or(false) {
            rep.bad(format!("symlink {}", k.value()), "no such symlink inode");
        }
    }
    for r in rtx.open_table(XATTRS).map_err(|e| c(e.into()))?.iter().map_err(|e| c(e.into()))? {
        let (k, _) = r.map_err(|e| c(e.into()))?;
        if !inodes.contains_key(&k.value().0) {
            rep.bad(format!("xattr {}", k.value().0), "inode missing");
        }
    }
    for (ino, rec) in &inodes {
        if rec.mode & libc::S_IFMT == libc::S_IFLNK {
            // checked above from the other side; a symlink without target:
            let t = rtx.open_table(SYMLINKS).map_err(|e| c(e.into()))?;
            if t.get(*ino).map_err(|e| c(e.into()))?.is_none() {
                rep.bad(format!("inode {ino}"), "symlink without target");
            }
        }
    }
    Ok(rep)
}
