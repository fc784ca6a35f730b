//! What `ringfs fsck` runs: [`fsck_store`], the table checks of
//! [`crate::fsck`] wrapped so that no redb error or panic escapes (each
//! becomes a [`Problem`] naming the table and key), the database and its
//! neighbours checked for the damage a mount would otherwise hide (missing
//! or empty beside working copies), and the working copies of files stored
//! at a clean shutdown compared with their manifests.
//!
//! Owns: which damage fsck reports beyond the table checks. Must not touch:
//! the store's files (read-only throughout), a store in use, the live inode
//! table.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::fsck::{fsck_opts, FsckReport, Problem};
use crate::schema::*;
use crate::store::readonly::{guarded, open_read_only, open_unverified, shared_lock};
use crate::store::scan::{damage_outside, scan_tables, schema_of, walk};
use crate::types::StoreError;

/// How much [`fsck_store`] checks.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsckOptions {
    /// Also hash every working copy of a stored file, range by range as its
    /// manifest cuts it, and compare with the manifest's BLAKE3 hashes
    /// (reads every byte; without it only sizes are compared).
    pub full: bool,
}

fn problem(rep: &mut FsckReport, place: impl Into<String>, what: impl Into<String>) {
    rep.problems.push(Problem { place: place.into(), what: what.into() });
}

/// Entries in `dir/sub` (0 when it is missing).
fn entries(dir: &Path, sub: &str) -> usize {
    std::fs::read_dir(dir.join(sub)).map(|r| r.filter_map(|e| e.ok()).count()).unwrap_or(0)
}

/// Checks the store directory `dir` and never panics: the database opened
/// read-only (nothing written, a shared lock when `ringfs.lock` exists, so
/// a read-only filesystem works), every table read and its records decoded,
/// then [`fsck`]'s consistency checks, then the working copies (`wc/N`) of
/// regular files against their manifests: the size always, the content with
/// [`FsckOptions::full`]. Every redb error, undecodable record or redb panic
/// is a [`Problem`] in the report (place: table and key, or file).
///
/// A pack directory or pack file that cannot be used (not a directory or
/// regular file, unreadable) is the one [`Problem`] reported, place `packs`.
///
/// Errors (the store could not be checked at all): [`StoreError::Locked`]
/// while a daemon serves it, [`StoreError::Io`] when its files cannot be
/// read, [`StoreError::NewerSchema`].
pub fn fsck_store(dir: &Path, opts: FsckOptions) -> Result<FsckReport, StoreError> {
    let mut rep = FsckReport { store: dir.to_path_buf(), ..Default::default() };
    let dbpath = dir.join("store.redb");
    let len = std::fs::metadata(&dbpath).map(|m| m.len()).ok();
    if len.unwrap_or(0) == 0 {
        let (wc, packs) = (entries(dir, "wc"), entries(dir, "packs"));
        let state = if len.is_none() { "missing" } else { "empty (0 bytes)" };
        problem(&mut rep, "store.redb", format!("the database is {state} but the store holds {wc} working copies (wc/) and {packs} pack files (packs/)"));
        rep.unreadable = true;
        return Ok(rep);
    }
    let lock = shared_lock(dir)?;
    // Other users can read it (a store made by an earlier version: D87).
    if let Some(what) = crate::private::finding(dir) {
        problem(&mut rep, "permissions", what);
    }
    if let Some(what) = crate::store::pack::usable::packs_trouble(dir) {
        // Every chunk is in the packs: nothing past this can be checked.
        problem(&mut rep, "packs", what);
        rep.unreadable = true;
        return Ok(rep);
    }
    let db = match open_read_only(dir) {
        Ok(db) => db,
        Err(StoreError::Corrupt { reason, .. }) => {
            problem(&mut rep, "store.redb", format!("redb cannot open the database: {reason}"));
            rep.unreadable = true;
            locate_damage(dir, &mut rep);
            return Ok(rep);
        }
        Err(e) => return Err(e),
    };
    let rtx = match guarded(|| db.begin_read()) {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            problem(&mut rep, "store.redb", format!("cannot be read: {e}"));
            rep.unreadable = true;
            return Ok(rep);
        }
        Err(m) => {
            problem(&mut rep, "store.redb", format!("cannot be read: {m}"));
            rep.unreadable = true;
            return Ok(rep);
        }
    };
    if let Some(what) = damage_outside(dir, &rtx, crate::store::scan::lock_file_empty(dir)) {
        problem(&mut rep, "store.redb", what);
        rep.unreadable = true;
        return Ok(rep);
    }
    let schema = schema_of(&rtx).unwrap_or(SCHEMA_VERSION);
    if schema > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema { found: schema, supported: SCHEMA_VERSION, path: dbpath });
    }
    let damage = scan_tables(&rtx, schema);
    let damaged = !damage.is_empty();
    for d in damage {
        problem(&mut rep, d.place, d.what);
    }
    drop(rtx);
    drop(db);
    // The consistency checks (they stop at the first redb error, which the
    // scan above has then already placed).
    match guarded(|| fsck_opts(dir, opts.full)) {
        Ok(Ok(r)) => {
            let mut problems = std::mem::take(&mut rep.problems);
            rep = r;
            problems.append(&mut rep.problems);
            rep.problems = problems;
        }
        Ok(Err(StoreError::Corrupt { reason, .. })) if !damaged => problem(&mut rep, "store.redb", reason),
        Ok(Err(StoreError::Corrupt { .. })) => {}
        Ok(Err(e)) => return Err(e),
        Err(m) if !damaged => problem(&mut rep, "store.redb", m),
        Err(_) => {}
    }
    check_working_copies(dir, opts, &mut rep);
    if lock.is_none() {
        rep.notes.push("no ringfs.lock to take (or it cannot be opened): checked without the store lock, so a daemon starting meanwhile is not kept out".into());
    }
    Ok(rep)
}

/// Where the damage of a database redb refuses is: its last commit read
/// without redb's checksums ([`open_unverified`]), every table walked and
/// every chunk hashed, each finding a [`Problem`] (table and key).
fn locate_damage(dir: &Path, rep: &mut FsckReport) {
    let Ok(db) = open_unverified(dir) else { return };
    let Ok(Ok(rtx)) = guarded(|| db.begin_read()) else { return };
    let schema = schema_of(&rtx).unwrap_or(SCHEMA_VERSION);
    for d in scan_tables(&rtx, schema) {
        problem(rep, d.place, d.what);
    }
    let mut bad = Vec::new();
    // Schema 1/2: bytes in the database. Schema 3: in pack files.
    walk(&rtx, CHUNKS_V2, |k, v| {
        if blake3::hash(v).as_bytes()[..] != *k {
            bad.push(hex(k));
        }
    });
    let packs = dir.join("packs");
    walk(&rtx, CHUNKS, |k, (pack, offset, len, _)| {
        if pack == crate::store::remote::REMOTE_PACK {
            return; // only on the remote (a lazy clone)
        }
        let loc = crate::store::pack::Loc { pack, offset, len };
        let ok = crate::store::pack::read_chunk(&packs, loc).map(|b| blake3::hash(&b).as_bytes()[..] == *k).unwrap_or(false);
        if !ok {
            bad.push(hex(k));
        }
    });
    for h in bad {
        problem(rep, format!("chunks/{h}"), "content missing or not matching its BLAKE3 hash");
    }
}

/// Compares the working copies `dir/wc/N` of regular files with their inode
/// records and manifests, when the store was shut down cleanly (otherwise
/// the working copies are the truth and the next mount re-hashes them). A
/// missing working copy is fine (it is rebuilt from the store when opened).
fn check_working_copies(dir: &Path, opts: FsckOptions, rep: &mut FsckReport) {
    if !rep.clean_shutdown {
        rep.notes.push("not shut down cleanly: working copies are newer than the store until the next mount re-hashes them; not compared".into());
        return;
    }
    let Ok(Ok(db)) = guarded(|| open_read_only(dir)) else { return };
    let Ok(Ok(rtx)) = guarded(|| db.begin_read()) else { return };
    let schema = schema_of(&rtx).unwrap_or(SCHEMA_VERSION);
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    walk(&rtx, INODES, |k, v| {
        if let Ok(r) = dec_inode(v, schema) {
            if r.mode & libc::S_IFMT == libc::S_IFREG {
                sizes.insert(k, r.size);
            }
        }
    });
    let manifests: HashMap<u64, Vec<ChunkRef>> = crate::store::scan::manifests(&rtx).0;
    let mut ids: Vec<u64> = sizes.keys().copied().collect();
    ids.sort();
    for ino in ids {
        let p = dir.join("wc").join(ino.to_string());
        let Ok(f) = File::open(&p) else { continue };
        let Ok(meta) = f.metadata() else { continue };
        rep.working_copies += 1;
        let place = format!("wc/{ino}");
        let size = sizes[&ino];
        if !meta.is_file() {
            problem(rep, &place, format!("working copy is not a regular file (a directory or other): remove {} while the store is not mounted, it is rebuilt from the store at the next open", p.display()));
            continue;
        }
        if meta.len() != size {
            problem(
                rep,
                &place,
                format!(
                    "working copy is {} bytes but its inode (as stored) is {size} bytes (written outside ringfs?): to get the stored content back, remove {} while the store is not mounted",
                    meta.len(),
                    p.display()
                ),
            );
            continue;
        }
        if !opts.full {
            continue;
        }
        let Some(m) = manifests.get(&ino) else { continue };
        let mut buf = Vec::new();
        for c in m {
            buf.resize(c.len as usize, 0);
            let ok = f.read_exact_at(&mut buf, c.offset).is_ok() && blake3::hash(&buf).as_bytes() == &c.hash;
            if !ok {
                problem(rep, &place, format!(
                        "bytes {}..{} differ from the stored chunk {} (written outside ringfs?): to get the stored content back, remove {} while the store is not mounted (it is rebuilt from the store at the next open)",
                        c.offset,
                        c.offset + c.len as u64,
                        hex(&c.hash),
                        p.display()
                    ));
                break;
            }
        }
    }
    rep.full = opts.full;
}
