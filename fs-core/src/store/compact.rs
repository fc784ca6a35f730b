//! Compaction of pack files ([`Store::compact_packs`]): a sealed pack that
//! is mostly dead bytes has its live records copied to the open pack, their
//! index entries moved in one durable commit (after the open pack is
//! synced), and then the old pack file is unlinked. Run after durable group
//! commits past the thresholds ([`AUTO_MIN_DEAD`], [`AUTO_MIN_DEAD_PERCENT`])
//! and by `ringfs gc` (every sealed pack with dead bytes).
//!
//! Crash safety: before the commit, the copies are dead bytes in the open
//! pack; after it and before the unlink, the old pack is a file the index
//! does not list, removed at the next open. Concurrent readers: one that
//! looked up the old location reads it through a cached descriptor (the
//! bytes stay until it closes) or finds the file gone and looks again
//! (`restore_content`).
//!
//! Owns: when and what to compact. Must not touch: manifests, the inode
//! table.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;

use redb::{Durability, ReadableTable};

use crate::schema::{CHUNKS, OBJECTS, PACKS, PACK_RECORD_HEADER, SCHEMA_VERSION};
use crate::store::db::{corrupt, io_err, open_db, take_lock_noting, Store};
use crate::store::migrate::schema_of;
use crate::store::pack::{known_packs, pack_name, scan_pack_until, Packs, HEADER_LEN};
use crate::types::StoreError;

/// Automatic compaction starts when the sealed packs hold at least this
/// many dead bytes in all: 64 MiB (two packs' worth, so small deletions
/// never rewrite a pack).
pub const AUTO_MIN_DEAD: u64 = 64 << 20;
/// … and then compacts each sealed pack at least this dead (percent of its
/// records' bytes): copying its live half costs at most what it frees.
pub const AUTO_MIN_DEAD_PERCENT: u64 = 50;

/// What `ringfs gc` did: snapshot objects collected first
/// (`snapshots`, [`crate::snap::gc::SnapGcReport`]), then the compaction:
/// packs and their bytes on disk before and after.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Objects no ref reaches deleted, and the chunks that freed.
    pub snapshots: SnapGcReport,
    pub packs_before: u64,
    pub bytes_before: u64,
    pub packs_after: u64,
    pub bytes_after: u64,
    /// Sealed packs removed (after copying their live chunks).
    pub packs_compacted: u64,
    /// Live chunks copied and the bytes they hold.
    pub chunks_moved: u64,
    pub bytes_moved: u64,
    /// Of `bytes_before` / `bytes_after`: bytes of pack files another
    /// store links too (a fork and its origin, D35; any hard link: `st_nlink`
    /// > 1), which removing this store's link does not give back.
    pub shared_before: u64,
    pub shared_after: u64,
    /// Sealed packs with dead bytes left as they are because another store
    /// links them: compacting would copy their live records into a pack of
    /// this store's own while the other link keeps the old file, so the
    /// disk would grow. Compacted once the other link is gone (a shared
    /// pack with nothing live here is unlinked: that costs nothing).
    pub packs_shared_kept: u64,
}

/// What the collection of snapshot objects before a compaction did
/// (`crate::snap::gc::collect`): objects kept (reachable) and deleted (of
/// which commits), chunks that left the index and their bytes (now dead in
/// their packs), chunk references dropped, and how long it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapGcReport {
    pub objects_kept: u64,
    pub objects_deleted: u64,
    pub commits_deleted: u64,
    pub chunks_freed: u64,
    pub chunk_bytes_freed: u64,
    pub refs_dropped: u64,
    pub time: std::time::Duration,
}

impl GcReport {
    /// Bytes of pack files given back to the filesystem: the bytes of
    /// the files only this store links, before minus after.
    pub fn reclaimed(&self) -> u64 {
        self.bytes_before.saturating_sub(self.shared_before).saturating_sub(self.bytes_after.saturating_sub(self.shared_after))
    }
}

/// Does another directory entry link this pack file too (`st_nlink` > 1:
/// a fork and its origin share packs by hard link, D35)?
fn is_shared(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    m.nlink() > 1
}

impl Store {
    /// The pack files on disk: (count, bytes, bytes of the files another
    /// store links too).
    fn pack_usage(&self) -> (u64, u64, u64) {
        let ids = crate::store::pack::pack_files(self.packs.dir()).unwrap_or_default();
        let (mut bytes, mut shared) = (0, 0);
        for m in ids.iter().filter_map(|id| std::fs::metadata(self.packs.path(*id)).ok()) {
            bytes += m.len();
            if is_shared(&m) {
                shared += m.len();
            }
        }
        (ids.len() as u64, bytes, shared)
    }

    /// After a durable group commit: compacts if the chunk bytes changed
    /// since the last look and the thresholds are passed. Errors are logged.
    pub(crate) fn auto_compact(&self) {
        let now = self.chunk_bytes.load(Ordering::SeqCst) ^ self.chunk_count.load(Ordering::SeqCst).rotate_left(40);
        if self.compact_seen.swap(now, Ordering::SeqCst) == now {
            return;
        }
        match self.compact_packs(false) {
            Ok(r) if r.packs_compacted > 0 => tracing::info!(
                "packs compacted: {} packs removed, {} chunks ({} bytes) moved, {} bytes reclaimed",
                r.packs_compacted,
                r.chunks_moved,
                r.bytes_moved,
                r.reclaimed()
            ),
            Ok(_) => {}
            Err(e) => {
                self.compact_seen.store(u64::MAX, Ordering::SeqCst);
                if self.trouble.due() {
                    tracing::error!("pack compaction failed: {e} (retried after the next commit)");
                }
            }
        }
    }

    /// Compacts sealed packs: with `all`, every one with dead bytes (`ringfs
    /// gc`); otherwise, once the sealed packs hold [`AUTO_MIN_DEAD`] dead
    /// bytes, those at least [`AUTO_MIN_DEAD_PERCENT`] dead. A sealed pack
    /// with no live bytes is always removed. One pack per durable
    /// transaction. A pack whose valid records do not account for its live
    /// bytes (damaged) is left alone and logged. Errors: redb or I/O errors
    /// (what was committed before stays).
    pub(crate) fn compact_packs(&self, all: bool) -> std::result::Result<GcReport, redb::Error> {
        let _one = self.compacting.lock().unwrap_or_else(|p| p.into_inner());
        let (packs_before, bytes_before, shared_before) = self.pack_usage();
        let mut rep = GcReport { packs_before, bytes_before, shared_before, ..Default::default() };
        let rows: BTreeMap<u32, (u64, u64, bool)> = {
            let rtx = self.begin_read()?;
            let t = rtx.open_table(PACKS)?;
            let mut m = BTreeMap::new();
            for r in t.iter()? {
                let (k, v) = r?;
                m.insert(k.value(), v.value());
            }
            m
        };
        // `ringfs gc`: the pack being appended to is sealed first when it
        // has dead bytes, so that they are reclaimed too.
        if let Some((total, live, _)) = self.packs.open_id().and_then(|id| rows.get(&id)).filter(|_| all) {
            if *live < total.saturating_sub(HEADER_LEN) {
                self.packs.seal_open();
            }
        }
        let open = self.packs.open_id();
        // (id, record bytes, dead bytes, linked by another store) of the
        // sealed packs. A shared pack's dead bytes include what the other
        // store appended (FORMATS "Shared packs"); none of them comes back
        // while the other link stays, so they count towards no threshold.
        let sealed: Vec<(u32, u64, u64, bool)> = rows
            .iter()
            .filter(|(id, _)| Some(**id) != open)
            .filter_map(|(id, (_, live, _))| {
                let m = std::fs::metadata(self.packs.path(*id)).ok()?;
                let recs = m.len().saturating_sub(HEADER_LEN);
                Some((*id, recs, recs.saturating_sub(*live), is_shared(&m)))
            })
            .collect();
        let total_dead: u64 = sealed.iter().filter(|s| !s.3).map(|s| s.2).sum();
        let mut chosen: Vec<u32> = Vec::new();
        for &(id, recs, dead, shared) in &sealed {
            let live = rows[&id].1;
            let due = live == 0 || (all && dead > 0) || (!shared && total_dead >= AUTO_MIN_DEAD && dead * 100 >= AUTO_MIN_DEAD_PERCENT * recs);
            if due && shared && live > 0 {
                rep.packs_shared_kept += 1;
            } else if due {
                chosen.push(id);
            }
        }
        for id in chosen {
            if let Some((n, b)) = self.compact_one(id)? {
                rep.packs_compacted += 1;
                rep.chunks_moved += n;
                rep.bytes_moved += b;
            }
        }
        (rep.packs_after, rep.bytes_after, rep.shared_after) = self.pack_usage();
        Ok(rep)
    }

    /// Moves the live records (chunks and snapshot objects) of sealed pack
    /// `id` to the open pack and removes it. `None`: left alone (damaged, or gone).
    fn compact_one(&self, id: u32) -> std::result::Result<Option<(u64, u64)>, redb::Error> {
        // Moves records only: a fork's deferred tree stays deferred (D60).
        let mut txn = self.begin_write_plain()?;
        let Some((_, live, _)) = txn.open_table(PACKS)?.get(id)?.map(|g| g.value()) else {
            txn.abort()?;
            return Ok(None);
        };
        let mut touched: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let (mut moved, mut bytes, mut found) = (0u64, 0u64, 0u64);
        // Objects of object index files moved: the files are rewritten (D65).
        let mut in_files: HashMap<[u8; 32], Option<(u32, u64, u32)>> = HashMap::new();
        let as_redb = |e: String| redb::Error::Io(std::io::Error::other(e));
        let files = crate::store::oidx::files_in(&txn, self.packs.oidx()).map_err(as_redb)?;
        if live > 0 {
            let mut err: Option<redb::Error> = None;
            let mut index = txn.open_table(CHUNKS)?;
            let mut objects = txn.open_table(OBJECTS)?;
            let path = self.packs.path(id);
            let scanned = scan_pack_until(&path, |off, hash, b| {
                let mut step = || -> std::result::Result<(), redb::Error> {
                    // A live snapshot object (schema 5): its row (or its
                    // entry in an object index file) moves.
                    let mut file = false;
                    let mut obj = objects.get(&hash[..])?.map(|g| g.value());
                    if obj.is_none() {
                        obj = files.iter().find_map(|f| f.get(&hash[..]));
                        file = obj.is_some();
                    }
                    if let Some((p, o, len)) = obj {
                        if p == id && o == off && len as usize == b.len() {
                            found += PACK_RECORD_HEADER + len as u64;
                            let loc = self.packs.append(hash, b).map_err(redb::Error::Io)?;
                            if file {
                                in_files.insert(*hash, Some((loc.pack, loc.offset, loc.len)));
                            } else {
                                objects.insert(&hash[..], (loc.pack, loc.offset, loc.len))?;
                            }
                            let t = touched.entry(loc.pack).or_default();
                            t.0 += PACK_RECORD_HEADER + loc.len as u64;
                            t.1 = loc.offset + loc.len as u64;
                            moved += 1;
                            bytes += len as u64;
                            return Ok(());
                        }
                    }
                    let cur = index.get(&hash[..])?.map(|g| g.value());
                    let Some((p, o, len, refs)) = cur else { return Ok(()) };
                    if p != id || o != off || len as usize != b.len() {
                        return Ok(()); // a dead copy
                    }
                    found += PACK_RECORD_HEADER + len as u64;
                    let loc = self.packs.append(hash, b).map_err(redb::Error::Io)?;
                    index.insert(&hash[..], (loc.pack, loc.offset, loc.len, refs))?;
                    let t = touched.entry(loc.pack).or_default();
                    t.0 += PACK_RECORD_HEADER + loc.len as u64;
                    t.1 = loc.offset + loc.len as u64;
                    moved += 1;
                    bytes += len as u64;
                    Ok(())
                };
                match step() {
                    Ok(()) => true,
                    Err(e) => {
                        err = Some(e);
                        false
                    }
                }
            });
            drop((index, objects));
            if let Some(e) = err {
                txn.abort()?;
                return Err(e);
            }
            if let Err(e) = scanned {
                txn.abort()?;
                return Err(redb::Error::Io(e));
            }
            if found != live {
                txn.abort()?;
                tracing::error!(
                    "packs: {} has {found} valid live bytes where the index expects {live}: left alone (ringfs fsck lists the damage)",
                    pack_name(id)
                );
                return Ok(None);
            }
        }
        let retired = crate::store::oidx::rewrite(&txn, self.packs.oidx(), &in_files).map_err(as_redb)?;
        txn.open_table(PACKS)?.remove(id)?;
        self.packs.note(&txn, &touched)?;
        // The copies are durable before the index points at them.
        self.packs.sync().map_err(redb::Error::Io)?;
        txn.set_durability(Durability::Immediate)?;
        txn.commit()?;
        crate::store::oidx::unlink_retired(self.packs.oidx(), retired);
        if let Err(e) = self.packs.remove(id) {
            tracing::warn!("packs: removing {} after compaction: {e} (removed at the next mount)", pack_name(id));
        }
        tracing::debug!("packs: compacted {} ({moved} chunks, {bytes} bytes moved)", pack_name(id));
        Ok(Some((moved, bytes)))
    }
}

/// `ringfs gc --store DIR` on a store no daemon holds
/// ([`crate::snap::gc::gc_store`]): takes the store lock, opens the
/// database and packs (the open pack's torn tail truncated, pack files the
/// index does not know removed), runs `first` (the collection of snapshot
/// objects; its error text is reported against the database) and compacts
/// every sealed pack with dead bytes. Recovery does not run (the next mount does). Errors:
/// [`StoreError::Locked`] while a daemon holds it, [`StoreError::Unusable`]
/// (its pack directory or a pack file cannot be used), [`StoreError::Corrupt`],
/// [`StoreError::Io`] (also for a store of an earlier schema, whose chunks
/// are not in packs until it is mounted once).
pub(crate) fn gc_store_with(
    dir: &std::path::Path,
    first: impl FnOnce(&Store) -> std::result::Result<SnapGcReport, String>,
) -> std::result::Result<GcReport, StoreError> {
    let dbpath = dir.join("store.redb");
    // Missing or empty: nothing to compact, and nothing is created (a mount
    // makes a new store, or refuses an emptied one beside data).
    if std::fs::metadata(&dbpath).map(|m| m.len() == 0).unwrap_or(true) {
        return Err(StoreError::Corrupt { path: dbpath, reason: "no store database (missing or empty)".into() });
    }
    // The checks a mount makes first (packs usable, the database readable,
    // not empty or lost beside working copies and packs): gc never opens
    // (or creates) a database a mount would refuse.
    crate::store::scan::check_before_open(dir)?;
    let (lock, before) = take_lock_noting(dir)?;
    // Made private if an earlier version left it open (D87).
    crate::private::fix_store(dir, true);
    let db = open_db(dir)?;
    match schema_of(&db) {
        Some(v) if v == SCHEMA_VERSION => {}
        Some(v) if v > SCHEMA_VERSION => return Err(StoreError::NewerSchema { found: v, supported: SCHEMA_VERSION, path: dbpath }),
        v => {
            return Err(io_err(
                &dbpath,
                std::io::Error::other(format!(
                    "the store has schema {} (this ringfs uses {SCHEMA_VERSION}); mount it once with this ringfs (which migrates it) and unmount, then gc",
                    v.unwrap_or(0)
                )),
            ))
        }
    }
    let (known, next) = known_packs(&db).map_err(|e| corrupt(&dbpath, e))?;
    let pd = dir.join("packs");
    let packs = Packs::open(pd.clone(), None, &known, next).map_err(|e| io_err(&pd, e))?;
    if let Err(e) = crate::store::oidx::sweep(&db, &pd) {
        tracing::warn!("packs: removing object index files no row records: {e}");
    }
    let store = Store::new(db, Some(dir.to_path_buf()), dir.display().to_string(), Some(lock), 0, (0, 0), packs);
    // A daemon that died leaves its pid: kept, so the next mount recovers.
    store.keep_unclean_mark(before);
    let r = first(&store).map_err(|e| io_err(&dbpath, std::io::Error::other(e))).and_then(|snapshots| {
        let r = store.compact_packs(true).map_err(|e| io_err(&pd, std::io::Error::other(e.to_string())))?;
        Ok(GcReport { snapshots, ..r })
    });
    // Done (or refused) without leaving the store mid-commit: let go of
    // the lock as a clean shutdown does (emptied), unless a daemon had died
    // holding it (its pid written back).
    store.release_lock();
    r
}
