//! How one group commit's [`Batch`] is written ([`Store::write_batch`]):
//! synced inodes, names and xattrs into the main tables with coalesced
//! journal records, local-only ones into the `local_*` tables without any;
//! what changed sides is removed from the other side. Must not touch: the
//! inode table (the batch is a copy taken under its lock by
//! [`State::drain`](crate::inode::State::drain)).

use std::collections::HashSet;

use redb::{ReadableDatabase, ReadableTable};

use crate::inode::batch::Batch;
use crate::store::db::Store;
use crate::live::remove_manifest;
use crate::schema::*;

impl Store {
    /// Writes one group commit. Synced inodes, names and xattrs go to the
    /// main tables with journal records; local-only ones (`loc`) to the
    /// LOCAL_* tables without any. An inode or name that changed sides is
    /// removed from the other side (for the synced side that is journaled
    /// as its disappearance, and a synced file's manifest is dropped).
    ///
    /// `local_tables`: the `local_*` tables may hold records (ignore
    /// patterns now, or local-only inodes from an earlier mount), so names
    /// and inodes are also removed there. Returns the last journal sequence
    /// number written and the chunk count and bytes deltas.
    pub(crate) fn write_batch(
        &self,
        txn: &redb::WriteTransaction,
        b: &Batch,
        local_tables: bool,
        clean: Option<bool>,
    ) -> std::result::Result<(u64, i64, i64), redb::Error> {
        let Batch { inodes, dirents, xattrs, freed, freed_local, loc, next_ino, pool, drops: _ } = b;
        let next_ino = *next_ino;
        let mut seq = self.journal_last(txn)?;
        let mut journal: Vec<JournalRecord> = Vec::new();
        let has_local = local_tables || !freed_local.is_empty();
        let (mut dc, mut db) = (0i64, 0i64);
        {
            let mut t = txn.open_table(DIRENTS)?;
            let mut lt = txn.open_table(LOCAL_DIRENTS)?;
            for ((p, name), v) in dirents {
                let local = loc.contains(p) || matches!(v, Some((c, _)) if loc.contains(c));
                match v {
                    Some((child, cookie)) if !local => {
                        t.insert((*p, &name[..]), (*child, *cookie))?;
                        journal.push(JournalRecord::Linked { parent: *p, name: name.clone(), child: *child });
                        if has_local {
                            lt.remove((*p, &name[..]))?;
                        }
                    }
                    Some((child, cookie)) => {
                        lt.insert((*p, &name[..]), (*child, *cookie))?;
                        if t.remove((*p, &name[..]))?.is_some() {
                            journal.push(JournalRecord::Unlinked { parent: *p, name: name.clone() });
                        }
                    }
                    None => {
                        let had = t.remove((*p, &name[..]))?.is_some();
                        if had || (!has_local && !loc.contains(p)) {
                            journal.push(JournalRecord::Unlinked { parent: *p, name: name.clone() });
                        }
                        if has_local {
                            lt.remove((*p, &name[..]))?;
                        }
                    }
                }
            }
            let mut t = txn.open_table(INODES)?;
            let mut s = txn.open_table(SYMLINKS)?;
            let mut lt = txn.open_table(LOCAL_INODES)?;
            let mut ls = txn.open_table(LOCAL_SYMLINKS)?;
            for (ino, v) in inodes {
                let Some((rec, link)) = v else { continue };
                // A file of a fork's tree whose blocks nobody needed yet
                // (D60): the row the tree's writing made (from its object)
                // holds them.
                let known;
                let rec = if rec.blocks == crate::inode::BLOCKS_UNKNOWN {
                    let mut r = rec.clone();
                    r.blocks = match t.get(*ino)?.map(|g| dec::<InodeRec>(g.value())) {
                        Some(Ok(o)) if o.blocks != crate::inode::BLOCKS_UNKNOWN => o.blocks,
                        _ => {
                            tracing::warn!("store {}: inode {ino} of the fork's tree has no row to take its block count from; its size's used", self.desc);
                            r.size.div_ceil(512)
                        }
                    };
                    known = r;
                    &known
                } else {
                    rec
                };
                if loc.contains(ino) {
                    lt.insert(*ino, &enc(rec)[..])?;
                    if let Some(l) = link {
                        ls.insert(*ino, &l[..])?;
                    }
                    // It left the synced side: drop its record and content.
                    let had = t.remove(*ino)?.is_some();
                    s.remove(*ino)?;
                    let had_manifest = crate::live::has(txn, *ino)?;
                    if had_manifest {
                        let (c, b) = remove_manifest(txn, *ino)?;
                        dc -= c as i64;
                        db -= b as i64;
                    }
                    if had || had_manifest {
                        journal.push(JournalRecord::Removed { ino: *ino });
                    }
                } else {
                    t.insert(*ino, &enc(rec)[..])?;
                    if let Some(l) = link {
                        s.insert(*ino, &l[..])?;
                    }
                    journal.push(JournalRecord::Attrs { ino: *ino });
                    if has_local {
                        lt.remove(*ino)?;
                        ls.remove(*ino)?;
                    }
                }
            }
            let mut x = txn.open_table(XATTRS)?;
            let mut lx = txn.open_table(LOCAL_XATTRS)?;
            for ((ino, name), v) in xattrs {
                let local = loc.contains(ino) || freed_local.contains(ino);
                match (v, local) {
                    (Some(val), false) => {
                        x.insert((*ino, &name[..]), &val[..])?;
                        if has_local {
                            lx.remove((*ino, &name[..]))?;
                        }
                    }
                    (Some(val), true) => {
                        lx.insert((*ino, &name[..]), &val[..])?;
                        x.remove((*ino, &name[..]))?;
                    }
                    (None, _) => {
                        x.remove((*ino, &name[..]))?;
                        if has_local {
                            lx.remove((*ino, &name[..]))?;
                        }
                    }
                };
                if !freed.contains(ino) && !local {
                    journal.push(JournalRecord::Attrs { ino: *ino });
                }
            }
            for ino in freed {
                t.remove(*ino)?;
                s.remove(*ino)?;
            }
            for ino in freed_local {
                lt.remove(*ino)?;
                ls.remove(*ino)?;
            }
        }
        for ino in freed {
            let (c, b) = remove_manifest(txn, *ino)?;
            dc -= c as i64;
            db -= b as i64;
            journal.push(JournalRecord::Removed { ino: *ino });
        }
        // Coalesce: one Attrs record per inode, none for freed ones.
        let mut seen_attrs = HashSet::new();
        journal.retain(|r| match r {
            JournalRecord::Attrs { ino } => !freed.contains(ino) && seen_attrs.insert(*ino),
            _ => true,
        });
        {
            let mut j = txn.open_table(JOURNAL)?;
            for r in &journal {
                seq += 1;
                j.insert(seq, &enc(r)[..])?;
            }
        }
        bump_chunk_counters(txn, dc, db)?;
        let mut m = txn.open_table(META)?;
        m.insert("next_ino", next_ino)?;
        if let Some(c) = clean {
            m.insert("clean", c as u64)?;
        }
        if let Some(pool) = pool {
            // Replaced whole: only the clean shutdown's ready files count.
            let mut t = txn.open_table(POOL)?;
            t.retain(|_, _| false)?;
            for (side, inos) in pool.iter().enumerate() {
                for ino in inos {
                    t.insert(*ino, side as u8)?;
                }
            }
        }
        Ok((seq, dc, db))
    }
}

/// The ready backing files a clean shutdown left (`pool` table), per side
/// (`[POOL_WC]`, `[POOL_LOCAL]`), for the open of a store whose meta said
/// clean. Inodes the table holds are dropped (never a pool file), and so is
/// everything at or past `next_ino`. A missing or unreadable table is
/// no ready files (the files then stay unused: empty, under numbers below
/// `next_ino`, never taken again).
pub(crate) fn saved_pool(db: &redb::Database, next_ino: u64, used: impl Fn(u64) -> bool) -> [Vec<u64>; 2] {
    let mut out: [Vec<u64>; 2] = Default::default();
    let Ok(rtx) = db.begin_read() else { return out };
    let Ok(t) = rtx.open_table(POOL) else { return out };
    let Ok(it) = t.iter() else { return out };
    for (k, v) in it.flatten() {
        let (ino, side) = (k.value(), v.value() as usize);
        if side < 2 && ino < next_ino && !used(ino) {
            out[side].push(ino);
        }
    }
    out
}
