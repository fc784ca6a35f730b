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
//!
//! Must not touch: the inode table in memory, working copies.

use std::path::{Path, PathBuf};

use redb::{ReadableDatabase, ReadableTable, WriteTransaction};

use crate::schema::*;

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
    std::fs::copy(dir.join("store.redb"), &tmp)?;
    std::fs::File::open(&tmp)?.sync_all()?;
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
pub(crate) fn migrate(txn: &WriteTransaction, from: u64) -> std::result::Result<usize, String> {
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
    txn.open_table(META).map_err(|e| e.to_string())?.insert("schema", SCHEMA_VERSION).map_err(|e| e.to_string())?;
    Ok(n)
}
