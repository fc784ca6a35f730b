//! Schema migration: a store written by an earlier release is brought to
//! [`SCHEMA_VERSION`] in place when it is opened, inside the same durable
//! transaction that loads it (a crash before that commit leaves the old
//! schema, migrated again at the next open). Before that, the database file
//! is copied to `DIR/store.redb.schema<N>` ([`backup`]), kept until the first
//! clean shutdown at the new schema ([`discard_backup`]), so a release that
//! turns out wrong can be rolled back with the file.
//!
//! Versions (docs/ARCHITECTURE.md):
//! - 1 → 2: inode records gain `btime` ((0, 0): unknown) and `flags` (0).
//! - 2 → 3: chunk bytes move from the `chunks` table into pack files
//!   (appended, then synced before the loading transaction commits); the
//!   index `chunk_index` takes their locations and the counts of
//!   `chunk_refs`; both old tables are deleted, and after the commit the
//!   database file is compacted ([`compact_db`]) so the space comes back.
//! - 3 → 4: tables added only (`objects`, `refs`, `snap_inodes`,
//!   `manifest_sizes`; `schema::create_tables` makes them); nothing is
//!   rewritten. Manifests stored before have no size row: a snapshot takes
//!   the inode record's size for them.
//! - 4 → 5: snapshot objects move from the `objects` table (id → bytes)
//!   into pack records (appended to the open pack, synced before the
//!   loading transaction commits), `object_index` taking their locations;
//!   the old table is deleted and the database file compacted after the
//!   commit ([`compact_db`]). Ids and encodings are unchanged.
//! - 5 → 6: each file's live manifest moves from one `manifests` row (the
//!   whole chunk list) to a root over shared segments (`crate::live`);
//!   chunk references move from one per manifest entry to one per entry of
//!   each distinct segment; the old table is deleted and the database file
//!   compacted after the commit.
//! - 6 → 7: table `object_files` added only (`schema::create_tables`);
//!   nothing is rewritten (objects stay in `object_index` until the next
//!   commit's flush, `store::oidx`).
//!
//! Must not touch: the inode table in memory, working copies.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use redb::{ReadableDatabase, ReadableTable, WriteTransaction};

use crate::schema::*;
use crate::store::pack::Packs;

/// The schema version a database holds (`None`: a new, empty database).
pub(crate) fn schema_of(db: &redb::Database) -> Option<u64> {
    let rtx = db.begin_read().ok()?;
    let t = rtx.open_table(META).ok()?;
    let v = t.get("schema").ok()??.value();
    Some(v)
}

/// Where the database of schema `from` is kept while a migration is recent.
pub(crate) fn backup_path(dir: &Path, from: u64) -> PathBuf {
    dir.join(format!("store.redb.schema{from}"))
}

/// Copies `DIR/store.redb` to [`backup_path`] (durably) before a migration
/// from `from`, unless a copy is already there (an earlier attempt).
pub(crate) fn backup(dir: &Path, from: u64) -> std::io::Result<()> {
    let to = backup_path(dir, from);
    if to.exists() {
        return Ok(());
    }
    let tmp = dir.join(format!(".store.redb.schema{from}.tmp"));
    // Made 0600 (D87), whatever the original's mode; std::io::copy uses
    // copy_file_range(2) between two files.
    let mut to_file = crate::private::create(&tmp)?;
    std::io::copy(&mut std::fs::File::open(dir.join("store.redb"))?, &mut to_file)?;
    to_file.sync_all()?;
    drop(to_file);
    std::fs::rename(&tmp, &to)?;
    std::fs::File::open(dir)?.sync_all()
}

/// After a clean shutdown at the current schema: the copies of earlier
/// schemas go.
pub(crate) fn discard_backup(dir: &Path) {
    for v in 1..SCHEMA_VERSION {
        let p = backup_path(dir, v);
        if p.exists() {
            match std::fs::remove_file(&p) {
                Ok(()) => tracing::info!("store migrated to schema {SCHEMA_VERSION}: removed the copy of schema {v} ({})", p.display()),
                Err(e) => tracing::warn!("removing {}: {e}", p.display()),
            }
        }
    }
}

/// Migrates the tables in `txn` from schema `from` to [`SCHEMA_VERSION`] and
/// records the new version. Returns the number of records rewritten.
pub(crate) fn migrate(txn: &WriteTransaction, from: u64, packs: &Packs) -> std::result::Result<usize, String> {
    let mut n = 0;
    if from < 2 {
        for table in [INODES, LOCAL_INODES] {
            let mut t = txn.open_table(table).map_err(|e| e.to_string())?;
            let mut recs = Vec::new();
            for r in t.iter().map_err(|e| e.to_string())? {
                let (k, v) = r.map_err(|e| e.to_string())?;
                let rec = dec_inode(v.value(), 1).map_err(|e| format!("inode {}: {e}", k.value()))?;
                recs.push((k.value(), rec));
            }
            for (k, rec) in recs {
                t.insert(k, &enc(&rec)[..]).map_err(|e| e.to_string())?;
                n += 1;
            }
        }
    }
    if from < 3 {
        n += chunks_to_packs(txn, packs).map_err(|e| format!("moving chunks into {}: {e}", packs.dir().display()))?;
    }
    if from == 4 {
        n += objects_to_packs(txn, packs).map_err(|e| format!("moving snapshot objects into {}: {e}", packs.dir().display()))?;
    }
    if from < 6 {
        n += manifests_to_live(txn).map_err(|e| format!("moving live manifests into segments: {e}"))?;
    }
    txn.open_table(META).map_err(|e| e.to_string())?.insert("schema", SCHEMA_VERSION).map_err(|e| e.to_string())?;
    Ok(n)
}

/// 2 → 3: every chunk of `chunks` appended to the open pack, indexed in
/// `chunk_index` with its count from `chunk_refs` (a chunk no manifest
/// counts is dropped); the old tables deleted. Returns the chunks moved.
fn chunks_to_packs(txn: &WriteTransaction, packs: &Packs) -> std::result::Result<usize, redb::Error> {
    let mut touched: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let (mut n, mut bytes) = (0u64, 0u64);
    {
        let old = txn.open_table(CHUNKS_V2)?;
        let refs = txn.open_table(CHUNK_REFS_V2)?;
        let mut index = txn.open_table(CHUNKS)?;
        for r in old.iter()? {
            let (k, v) = r?;
            let Ok(hash) = <[u8; 32]>::try_from(k.value()) else { continue };
            let count = refs.get(k.value())?.map(|g| g.value()).unwrap_or(0);
            if count == 0 || index.get(&hash[..])?.is_some() {
                continue;
            }
            let loc = packs.append(&hash, v.value()).map_err(redb::Error::Io)?;
            index.insert(&hash[..], (loc.pack, loc.offset, loc.len, count))?;
            let t = touched.entry(loc.pack).or_default();
            t.0 += PACK_RECORD_HEADER + loc.len as u64;
            t.1 = loc.offset + loc.len as u64;
            n += 1;
            bytes += loc.len as u64;
        }
    }
    packs.note(txn, &touched)?;
    // The counters count what moved (a chunk no manifest counted is gone).
    let mut m = txn.open_table(META)?;
    m.insert("chunk_count", n)?;
    m.insert("chunk_bytes", bytes)?;
    drop(m);
    txn.delete_table(CHUNKS_V2)?;
    txn.delete_table(CHUNK_REFS_V2)?;
    Ok(n as usize)
}

/// 4 → 5: every row of the old `objects` table appended to the open pack
/// (in id order) and indexed in `object_index`; the old table deleted.
/// Returns the objects moved.
fn objects_to_packs(txn: &WriteTransaction, packs: &Packs) -> std::result::Result<usize, String> {
    let mut n = 0;
    {
        let old = txn.open_table(OBJECTS_V4).map_err(|e| e.to_string())?;
        let mut new = crate::store::objects::write(txn, packs)?;
        for r in old.iter().map_err(|e| e.to_string())? {
            let (k, v) = r.map_err(|e| e.to_string())?;
            // A key that is not an id: fsck of the kept schema-4 copy names it.
            let Ok(id) = <[u8; 32]>::try_from(k.value()) else { continue };
            if new.put(&id, v.value())? {
                n += 1;
            }
        }
        drop(old);
        // Puts only: no object index file is replaced.
        let _ = new.finish(txn)?;
    }
    txn.delete_table(OBJECTS_V4).map_err(|e| e.to_string())?;
    Ok(n)
}

/// 5 → 6: every row of the old `manifests` table written as a live root
/// over segments ([`crate::live::write`]): the entries of each segment
/// created take a chunk reference, then the row's own entries drop theirs
/// (adds first, so no chunk still named reaches zero); the old table
/// deleted. Returns the manifests moved.
fn manifests_to_live(txn: &WriteTransaction) -> std::result::Result<usize, redb::Error> {
    let mut n = 0;
    let (mut dc, mut db) = (0i64, 0i64);
    {
        let old = txn.open_table(MANIFESTS_V5)?;
        for r in old.iter()? {
            let (k, v) = r?;
            let ino = k.value();
            // An undecodable row keeps its references (fsck of the kept
            // schema-5 copy names it); the file is re-hashed from its
            // working copy if it has one.
            let Ok(m) = dec::<Vec<ChunkRef>>(v.value()) else {
                tracing::warn!("migrating: the manifest of inode {ino} does not decode; dropped");
                continue;
            };
            let (moves, _) = crate::live::write(txn, ino, &m)?;
            let mut chunks = txn.open_table(CHUNKS)?;
            for c in &moves.add {
                let cur = chunks.get(&c.hash[..])?.map(|g| g.value());
                if let Some((p, o, l, refs)) = cur {
                    chunks.insert(&c.hash[..], (p, o, l, refs + 1))?;
                }
            }
            let mut packs = txn.open_table(PACKS)?;
            let (c, b) = drop_refs(&mut chunks, &mut packs, &m)?;
            dc -= c as i64;
            db -= b as i64;
            n += 1;
        }
    }
    bump_chunk_counters(txn, dc, db)?;
    txn.delete_table(MANIFESTS_V5)?;
    Ok(n)
}

/// After a migration to schema 3 or 5 committed: compacts the database
/// file so the pages the chunk bytes (3) or object bytes (5) held are given back to the filesystem. A
/// failure is logged (the store works, only bigger).
pub(crate) fn compact_db(db: &mut redb::Database, path: &Path) {
    let before = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    match db.compact() {
        Ok(_) => {
            let after = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            tracing::info!("store migrated: {} compacted from {before} to {after} bytes", path.display());
        }
        Err(e) => tracing::warn!("store migrated, but compacting {} failed ({e}): it keeps its old size", path.display()),
    }
}
