//! Reading every record of every table of a database that may be damaged:
//! for fsck's report, for the check before a mount serves a store
//! ([`check_for_mount`]: whole after an unclean shutdown or on request, the
//! inode tables only after a clean one; [`check_before_open`] for the
//! offline commands), and for salvage, which keeps what can be read.
//!
//! Owns: walking one table forward and, past a damaged stretch, backward
//! from its end ([`walk`]), so the records on both sides of it are read;
//! naming the damage by table and key. Must not touch: the live `Store`,
//! working copies.

use std::fmt::Debug;
use std::path::Path;

use redb::{Key, ReadTransaction, ReadableTable, TableDefinition, TableHandle, Value};

use crate::laps::Laps;
use crate::schema::*;
use crate::store::readonly::{guarded, open_read_only, RoDb};
use crate::store::recovery::{read_state_parallel, Read};
use crate::types::StoreError;

/// Damage found in one table: where and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The table, with the last key read before the damage when there is
    /// one, e.g. "dirents after key (1, \"a\")".
    pub place: String,
    /// What redb or the decoder said.
    pub what: String,
}

/// What [`walk`] read of one table.
#[derive(Clone, Debug, Default)]
pub(crate) struct Walked {
    /// Records handed to the callback (both directions).
    pub(crate) records: u64,
    /// Where reading stopped, when it did not reach the end.
    pub(crate) damage: Option<Damage>,
}

/// Hands every readable record of `def` to `f` (keys and values as redb
/// decodes them), guarded against panics. Reading forward stops at the first
/// error; the table is then read backward from its end up to the damage
/// (stopping at an error again, or at the last key read forward), so one
/// damaged stretch costs only the records in it. A table that cannot be
/// opened is damage too (a missing table is not: its records are none).
pub(crate) fn walk<K, V>(rtx: &ReadTransaction, def: TableDefinition<K, V>, mut f: impl FnMut(K::SelfType<'_>, V::SelfType<'_>)) -> Walked
where
    K: Key + 'static,
    V: Value + 'static,
    for<'a> K::SelfType<'a>: Debug,
{
    let name = def.name().to_string();
    let mut w = Walked::default();
    let table = match guarded(|| rtx.open_table(def)) {
        Ok(Ok(t)) => t,
        Ok(Err(redb::TableError::TableDoesNotExist(_))) => return w,
        Ok(Err(e)) => {
            w.damage = Some(Damage { place: name, what: e.to_string() });
            return w;
        }
        Err(m) => {
            w.damage = Some(Damage { place: name, what: m });
            return w;
        }
    };
    // The last key read forward, as bytes in one reused buffer: described
    // (Debug, or hex for chunk ids) only when there is damage to report, so
    // a clean walk formats nothing (it runs on every mount's check).
    let mut last_key: Vec<u8> = Vec::new();
    let mut read_any = false;
    let fwd = guarded(|| -> Result<(), String> {
        for r in table.iter().map_err(|e| e.to_string())? {
            let (k, v) = r.map_err(|e| e.to_string())?;
            last_key.clear();
            last_key.extend_from_slice(K::as_bytes(&k.value()).as_ref());
            read_any = true;
            f(k.value(), v.value());
            w.records += 1;
        }
        Ok(())
    });
    let err = match fwd {
        Ok(Ok(())) => return w,
        Ok(Err(e)) => e,
        Err(m) => m,
    };
    let last_fwd = read_any.then_some(last_key);
    let place = match &last_fwd {
        // Keys that are hashes: hex, not a list of 32 numbers.
        Some(l) if matches!(name.as_str(), "chunks" | "chunk_refs" | "chunk_index" | "live_segments" | "live_segment_refs") => {
            format!("{name} after key {}", hex(l))
        }
        Some(l) => format!("{name} after key {:?}", K::from_bytes(l)),
        None => format!("{name} (from its first key)"),
    };
    w.damage = Some(Damage { place, what: err });
    // Backward from the end, until the damage or the forward walk's last key.
    let _ = guarded(|| -> Result<(), String> {
        for r in table.iter().map_err(|e| e.to_string())?.rev() {
            let (k, v) = r.map_err(|e| e.to_string())?;
            if let Some(l) = &last_fwd {
                if K::compare(K::as_bytes(&k.value()).as_ref(), l) != std::cmp::Ordering::Greater {
                    break;
                }
            }
            f(k.value(), v.value());
            w.records += 1;
        }
        Ok(())
    });
    w
}

/// Every live manifest still readable from a database that may be damaged,
/// of either layout (schema 6's roots over segments, schemas 1–5's whole
/// rows), and the damage met: an undecodable record, or a root naming a
/// segment that is missing (that manifest is left out).
pub(crate) fn manifests(rtx: &ReadTransaction) -> (std::collections::HashMap<u64, Vec<ChunkRef>>, Vec<Damage>) {
    let mut out = std::collections::HashMap::new();
    let mut damage = Vec::new();
    let w = walk(rtx, MANIFESTS_V5, |k, v| match dec::<Vec<ChunkRef>>(v) {
        Ok(c) => {
            out.insert(k, c);
        }
        Err(e) => damage.push(Damage { place: format!("manifests key {k}"), what: format!("undecodable: {e}") }),
    });
    damage.extend(w.damage);
    let mut segs: std::collections::HashMap<Vec<u8>, Vec<u8>> = std::collections::HashMap::new();
    let w = walk(rtx, LIVE_SEGMENTS, |k, v| {
        segs.insert(k.to_vec(), v.to_vec());
    });
    damage.extend(w.damage);
    let w = walk(rtx, LIVE_ROOTS, |k, v| {
        let mut get = |id: &[u8; 32]| -> Result<Option<Vec<u8>>, String> { Ok(segs.get(&id[..]).cloned()) };
        match crate::live::expand_root(v, &mut get) {
            Ok(c) => {
                out.insert(k, c);
            }
            Err(e) => damage.push(Damage { place: format!("live_manifests key {k}"), what: e }),
        }
    });
    damage.extend(w.damage);
    (out, damage)
}

/// Reads every record of every table of `rtx` (and decodes inode records
/// and manifests, schema `schema`), returning the damage found, at most one
/// entry per table plus one per undecodable record.
pub(crate) fn scan_tables(rtx: &ReadTransaction, schema: u64) -> Vec<Damage> {
    let mut out = Vec::new();
    let mut undecodable = Vec::new();
    let mut note = |w: Walked| out.extend(w.damage);
    for def in [INODES, LOCAL_INODES] {
        note(walk(rtx, def, |k, v| {
            if let Err(e) = dec_inode(v, schema) {
                undecodable.push(Damage { place: format!("{} key {k}", def.name()), what: format!("undecodable inode record: {e}") });
            }
        }));
    }
    note(walk(rtx, MANIFESTS_V5, |k, v| {
        if let Err(e) = dec::<Vec<ChunkRef>>(v) {
            undecodable.push(Damage { place: format!("manifests key {k}"), what: format!("undecodable manifest: {e}") });
        }
    }));
    note(walk(rtx, LIVE_ROOTS, |k, v| {
        if let Err(e) = dec::<crate::live::Root>(v) {
            undecodable.push(Damage { place: format!("live_manifests key {k}"), what: format!("undecodable live manifest: {e}") });
        }
    }));
    note(walk(rtx, LIVE_SEGMENTS, |k, v| {
        if let Err(e) = dec::<crate::live::Segment>(v) {
            undecodable.push(Damage { place: format!("live_segments key {}", hex(k)), what: format!("undecodable live segment: {e}") });
        }
    }));
    note(walk(rtx, LIVE_SEGMENT_REFS, |_, _| {}));
    note(walk(rtx, JOURNAL, |k, v| {
        if let Err(e) = dec::<JournalRecord>(v) {
            undecodable.push(Damage { place: format!("journal key {k}"), what: format!("undecodable journal record: {e}") });
        }
    }));
    note(walk(rtx, META, |_, _| {}));
    note(walk(rtx, DIRENTS, |_, _| {}));
    note(walk(rtx, LOCAL_DIRENTS, |_, _| {}));
    note(walk(rtx, CHUNKS, |_, _| {}));
    note(walk(rtx, PACKS, |_, _| {}));
    // Schema 1/2 stores (not migrated yet) keep chunk bytes in redb.
    note(walk(rtx, CHUNKS_V2, |_, _| {}));
    note(walk(rtx, CHUNK_REFS_V2, |_, _| {}));
    note(walk(rtx, XATTRS, |_, _| {}));
    note(walk(rtx, LOCAL_XATTRS, |_, _| {}));
    note(walk(rtx, SYMLINKS, |_, _| {}));
    note(walk(rtx, LOCAL_SYMLINKS, |_, _| {}));
    out.extend(undecodable);
    out
}

/// The schema version in meta, guarded (`None` when unreadable or absent).
pub(crate) fn schema_of(rtx: &ReadTransaction) -> Option<u64> {
    guarded(|| rtx.open_table(META).ok().and_then(|t| t.get("schema").ok().flatten().map(|g| g.value()))).ok().flatten()
}

/// Damage that reads as a valid database, found from outside it: `None`
/// when there is none. (1) No `meta` table (a database redb initialised
/// afresh, e.g. over an emptied file) while working copies or packs exist.
/// (2) A clean shutdown's commit lost: `ringfs.lock` is empty — a clean
/// shutdown empties it, a daemon that died leaves its pid (docs/FORMATS.md)
/// — yet the commit redb reads says the store was in use (`meta clean` 0),
/// so redb fell back past the newest commit. Both name the fix (salvage).
/// `lock_empty`: whether the lock file was empty before this process took
/// it ([`lock_file_empty`]).
pub(crate) fn damage_outside(dir: &Path, rtx: &ReadTransaction, lock_empty: bool) -> Option<String> {
    if schema_of(rtx).is_none() {
        let (wc, packs) = (has_entries(dir, "wc"), has_entries(dir, "packs"));
        if wc + packs > 0 {
            return Some(format!("its database store.redb holds no store (no meta table: made afresh over a lost one?) but the directory holds {wc} working copies (wc/) and {packs} pack files (packs/)"));
        }
    }
    if let Some(what) = missing_pack(dir, rtx) {
        return Some(what);
    }
    let clean = guarded(|| rtx.open_table(META).ok().and_then(|t| t.get("clean").ok().flatten().map(|g| g.value()))).ok().flatten();
    if lock_empty && clean == Some(0) {
        return Some("its newest commit is lost: the store was shut down cleanly (ringfs.lock is empty) but store.redb reads as an earlier commit made while it was mounted (the newest one is damaged); files changed since survive in the working copies".into());
    }
    None
}

/// A file of `dir/packs` that the database says is there but that is
/// missing (removed by hand, lost with a disk): a pack file table `packs`
/// lists with bytes in it, else an object index file (D65) table
/// `object_files` records. One line naming every missing one of the first
/// kind found, what is lost and the fix. `None` when all are there, or the
/// table cannot be read (the table checks report that).
fn missing_pack(dir: &Path, rtx: &ReadTransaction) -> Option<String> {
    let packs = guarded(|| -> Option<Vec<String>> {
        let t = rtx.open_table(crate::schema::PACKS).ok()?;
        let rows = t.iter().ok()?;
        rows.filter_map(|r| r.ok().filter(|(_, v)| v.value().0 > 0).map(|(k, _)| Some(crate::store::pack::pack_name(k.value())))).collect()
    });
    let oidx = guarded(|| crate::store::oidx::recorded(rtx).ok().map(|v| v.into_iter().map(|(n, _, _)| crate::store::oidx::file_name(n)).collect::<Vec<_>>()));
    let kinds = [
        (packs, "pack file", "table packs lists it with bytes in it, so the chunks and snapshot objects stored in it are lost to this store", "table packs lists them with bytes in them, so the chunks and snapshot objects stored in them are lost to this store"),
        (oidx, "object index file", "table object_files records it, so the snapshot objects it indexes cannot be found", "table object_files records them, so the snapshot objects they index cannot be found"),
    ];
    for (names, kind, why_one, why_more) in kinds {
        let paths: Vec<String> = names
            .ok()
            .flatten()
            .unwrap_or_default()
            .iter()
            .map(|n| dir.join("packs").join(n))
            .filter(|p| std::fs::symlink_metadata(p).is_err())
            .map(|p| p.display().to_string())
            .collect();
        match &paths[..] {
            [] => continue,
            [one] => return Some(format!("{kind} {one} is missing: {why_one}: put the file back from a copy of the store (a fork made on this disk links the same file)")),
            more => return Some(format!("{} {kind}s are missing ({}): {why_more}: put the files back from a copy of the store (a fork made on this disk links the same files)", more.len(), more.join(", "))),
        }
    }
    None
}

/// Whether `dir/sub` holds any entry.
fn has_entries(dir: &Path, sub: &str) -> usize {
    std::fs::read_dir(dir.join(sub)).map(|r| r.filter_map(|e| e.ok()).count()).unwrap_or(0)
}

/// The checks of a store directory `dir` that need no database open: its
/// pack directory and pack files usable ([`StoreError::Unusable`] naming
/// the path and the fix); a database missing or empty (0 bytes) while
/// working copies (`wc/`) or packs (`packs/`) exist is
/// [`StoreError::Damaged`] (never a new empty workspace). `Ok(true)` when a
/// database is there to open, `Ok(false)` for a new store.
pub(crate) fn check_files(dir: &Path) -> Result<bool, StoreError> {
    if let Some(what) = crate::store::pack::usable::packs_trouble(dir) {
        return Err(StoreError::Unusable { dir: dir.to_path_buf(), what });
    }
    let db = dir.join("store.redb");
    let len = match std::fs::metadata(&db) {
        Ok(m) => Some(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(StoreError::Io { path: db, source: e }),
    };
    if len.unwrap_or(0) == 0 {
        let (wc, packs) = (has_entries(dir, "wc"), has_entries(dir, "packs"));
        if wc + packs > 0 {
            let what = format!(
                "its database store.redb is {} but it holds {wc} working copies (wc/) and {packs} pack files (packs/)",
                if len.is_none() { "missing" } else { "empty (0 bytes)" }
            );
            return Err(StoreError::Damaged { dir: dir.to_path_buf(), what });
        }
        return Ok(false);
    }
    Ok(true)
}

/// Whether `dir/ringfs.lock` exists and is empty (what a clean shutdown
/// leaves), read before the lock is taken.
pub(crate) fn lock_file_empty(dir: &Path) -> bool {
    std::fs::metadata(dir.join("ringfs.lock")).is_ok_and(|m| m.len() == 0)
}

/// The read transaction of a read-only open of `dir/store.redb`, with
/// redb's refusals as [`StoreError::Damaged`].
fn begin_read_only(dir: &Path) -> Result<(RoDb, ReadTransaction), StoreError> {
    let ro = match open_read_only(dir) {
        Ok(d) => d,
        Err(StoreError::Corrupt { reason, .. }) => {
            return Err(StoreError::Damaged { dir: dir.to_path_buf(), what: format!("redb cannot open store.redb: {reason}") })
        }
        Err(e) => return Err(e),
    };
    let rtx = match guarded(|| ro.begin_read()) {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return Err(StoreError::Damaged { dir: dir.to_path_buf(), what: format!("store.redb cannot be read: {e}") }),
        Err(m) => return Err(StoreError::Damaged { dir: dir.to_path_buf(), what: format!("store.redb cannot be read: {m}") }),
    };
    Ok((ro, rtx))
}

/// Every table of `rtx` read ([`scan_tables`]): the first damage as
/// [`StoreError::Damaged`] naming the table and key.
fn full_scan(dir: &Path, rtx: &ReadTransaction) -> Result<(), StoreError> {
    let schema = schema_of(rtx).unwrap_or(SCHEMA_VERSION);
    let damage = scan_tables(rtx, schema);
    if let Some(d) = damage.first() {
        let more = if damage.len() > 1 { format!(" (and {} more)", damage.len() - 1) } else { String::new() };
        return Err(StoreError::Damaged { dir: dir.to_path_buf(), what: format!("table {}: {}{more}", d.place, d.what) });
    }
    Ok(())
}

/// What `ringfs gc --store` and the `--store` forms of branch and fork
/// check before they take the lock or write anything in an existing store
/// directory `dir`: [`check_files`], then the database opened read-only and
/// every table read ([`scan_tables`]): damage is [`StoreError::Damaged`]
/// naming the first damaged table and key, a database redb refuses
/// [`StoreError::Damaged`] too. `Ok` for a new store, and when a daemon
/// holds the database (the lock then says so).
pub(crate) fn check_before_open(dir: &Path) -> Result<(), StoreError> {
    if !check_files(dir)? {
        return Ok(());
    }
    let lock_empty = lock_file_empty(dir);
    let (_ro, rtx) = match begin_read_only(dir) {
        Ok(r) => r,
        Err(StoreError::Locked { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    if let Some(what) = damage_outside(dir, &rtx, lock_empty) {
        return Err(StoreError::Damaged { dir: dir.to_path_buf(), what });
    }
    full_scan(dir, &rtx)
}

/// The check `Fs::open_store` makes of an existing database in `dir` (after
/// [`check_files`], holding the store lock; `lock_empty`: the lock file was
/// empty before it was taken), without writing to it. Always: redb opens
/// it read-only, and no damage is visible from outside ([`damage_outside`]).
/// A store shut down cleanly (meta `clean` = 1) of the current schema,
/// unless `full`: the pack list, meta, the chunk index and the live
/// manifests' segment tables are read (undecoded), and the inode tables into memory ([`read_state_parallel`], returned
/// for `load`; what a mount loads anyway) — manifest and journal records
/// are decoded, and snapshot tables read, when used. Otherwise (an unclean shutdown, a migration ahead,
/// or `full`): every table read ([`scan_tables`]), `Ok(None)`. On the
/// clean path `side` runs over the same read transaction while another
/// thread reads the tables, and its result is returned beside them
/// (`None`: not run — the other path, or no thread could be started: the
/// caller then does that work itself). Errors:
/// [`StoreError::Damaged`] naming the table (and key) that cannot be read.
pub(crate) fn check_for_mount<T: Send>(dir: &Path, lock_empty: bool, full: bool, laps: &mut Laps, side: impl FnOnce(&ReadTransaction) -> T + Send) -> Result<(Option<Read>, Option<T>), StoreError> {
    let (_ro, rtx) = begin_read_only(dir)?;
    if let Some(what) = damage_outside(dir, &rtx, lock_empty) {
        return Err(StoreError::Damaged { dir: dir.to_path_buf(), what });
    }
    let meta = |k: &str| guarded(|| rtx.open_table(META).ok().and_then(|t| t.get(k).ok().flatten().map(|g| g.value()))).ok().flatten();
    let clean = meta("clean") == Some(1);
    laps.lap("read-only open");
    if full || !clean || schema_of(&rtx) != Some(SCHEMA_VERSION) {
        full_scan(dir, &rtx)?;
        laps.lap("every table");
        return Ok((None, None));
    }
    let damaged = |what: String| StoreError::Damaged { dir: dir.to_path_buf(), what };
    let tables = || -> Result<Read, StoreError> {
        // Read whole besides the inode tables: the ones every mount or its
        // first writes walk (the pack list, meta, the chunk index the hash
        // workers insert into, the live manifests' segments and their
        // counts, which storing a changed big file rewrites: D89),
        // undecoded. Manifest roots and journal values are decoded only
        // when used.
        let segments = [walk(&rtx, LIVE_SEGMENTS, |_, _| {}), walk(&rtx, LIVE_SEGMENT_REFS, |_, _| {})];
        for w in [walk(&rtx, PACKS, |_, _| {}), walk(&rtx, META, |_, _| {}), walk(&rtx, CHUNKS, |_, _| {})].into_iter().chain(segments) {
            if let Some(d) = w.damage {
                return Err(damaged(format!("table {}: {}", d.place, d.what)));
            }
        }
        match guarded(|| read_state_parallel(&rtx, meta("next_ino").unwrap_or(2))) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(m)) | Err(m) => Err(damaged(m)),
        }
    };
    // `side` (a fork's tree read from its objects, D70) on this thread, on
    // the same snapshot as the tables read on another (nothing writes while
    // the lock is held); the allocating work stays on the thread whose
    // heap is warm.
    std::thread::scope(|s| {
        let Ok(other) = std::thread::Builder::new().name("ringfs-check".into()).spawn_scoped(s, tables) else {
            let r = tables()?;
            laps.lap("tables");
            return Ok((Some(r), None));
        };
        let t = side(&rtx);
        laps.lap("side");
        let r = other.join().unwrap_or_else(|_| Err(damaged("reading the tables: the thread panicked".into())))?;
        laps.lap("tables");
        Ok((Some(r), Some(t)))
    })
}

impl crate::store::db::Store {
    /// The damage this store met while serving (`store::fault`), named by
    /// table: every table read once ([`scan_tables`], over a read
    /// transaction outside any `Tx`, redb's panics caught) the first time
    /// it is asked, and logged then as one line. `None`: none met.
    pub(crate) fn damage(&self) -> Option<crate::types::StoreDamaged> {
        self.fault.named(|first| {
            let found = self.with_plain_read(|rtx| guarded(|| scan_tables(rtx, SCHEMA_VERSION).into_iter().next()).ok().flatten());
            let dir = self.dir().map(Path::to_path_buf).unwrap_or_else(|| "memory".into());
            match found {
                Some(d) => crate::types::StoreDamaged { table: d.place, detail: d.what, dir },
                None => crate::types::StoreDamaged { table: "store.redb (no table reads as damaged now)".into(), detail: first.to_string(), dir },
            }
        })
    }
}
