//! Opening a store's tables: the schema check, loading the inode table
//! ([`load`]), and after an unclean shutdown the repairs a crash can need —
//! inodes with no links freed, manifests without an inode dropped, dangling
//! directory entries removed, working copies without an inode kept in
//! `STORE/lost+found` (never deleted), files with no stored content
//! re-hashed from their working copies.
//!
//! Owns: what "recovered" means. The one module of the store that builds the
//! in-memory inode table ([`crate::inode`]). Must not touch: FUSE, threads.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::path::Path;
use std::time::SystemTime;

use redb::{Database, Durability, Key, ReadableTable, TableDefinition, TableHandle, Value};

use crate::inode::{root_rec, InoHasher, Name, Node, State, ROOT};
use crate::store::readonly::guarded;
use crate::local::BackDir;
use crate::posix::is_reg;
use crate::live::remove_manifest;
use crate::schema::*;
use crate::store::db::corrupt;
use crate::store::migrate;
use crate::store::pack::Packs;
use crate::types::StoreError;

/// A set of inode numbers (hashed with [`InoHasher`]).
pub(crate) type InoSet = HashSet<u64, BuildHasherDefault<InoHasher>>;

/// What [`read_state`] read of a store's tables: the inode table with its
/// directory entries, symlinks and xattrs, the inodes that have a manifest,
/// the journal's last position, and directory entries that name no inode
/// or a parent that is no directory (`(synced, parent, name)`: removed by
/// [`load`]).
pub(crate) struct Read {
    pub(crate) st: State,
    pub(crate) has_manifest: InoSet,
    pub(crate) sync_pos: u64,
    pub(crate) bad: Vec<(bool, u64, Vec<u8>)>,
}

/// What [`read_links`] read: directory entries as `(parent, name, child,
/// cookie)` (synced, then local-only), the inodes with a live manifest,
/// the journal's last key.
pub(crate) struct Links {
    dirents: [Vec<(u64, Name, u64, u64)>; 2],
    has_manifest: InoSet,
    sync_pos: u64,
}

/// A transaction the tables can be read from: a read transaction (of the
/// read-only open made before a mount writes anything) or the write
/// transaction of [`load`]. Errors are messages naming the table.
pub(crate) trait Tables {
    /// Hands every record of `def` to `f` in key order; a table that does
    /// not exist has none. Stops at the first error (redb's or `f`'s).
    fn each<K, V, F>(&self, def: TableDefinition<K, V>, f: F) -> Result<(), String>
    where
        K: Key + 'static,
        V: Value + 'static,
        F: FnMut(K::SelfType<'_>, V::SelfType<'_>) -> Result<(), String>;
    /// The journal's last key (0 when empty or missing).
    fn journal_last(&self) -> Result<u64, String>;
    /// How many records `def` holds (0 when missing or unknown).
    fn count<K: Key + 'static, V: Value + 'static>(&self, def: TableDefinition<K, V>) -> u64;
}

macro_rules! impl_tables {
    ($t:ty) => {
        impl Tables for $t {
            fn each<K, V, F>(&self, def: TableDefinition<K, V>, mut f: F) -> Result<(), String>
            where
                K: Key + 'static,
                V: Value + 'static,
                F: FnMut(K::SelfType<'_>, V::SelfType<'_>) -> Result<(), String>,
            {
                let name = def.name().to_string();
                let t = match self.open_table(def) {
                    Ok(t) => t,
                    Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
                    Err(e) => return Err(format!("table {name}: {e}")),
                };
                for r in t.iter().map_err(|e| format!("table {name}: {e}"))? {
                    let (k, v) = r.map_err(|e| format!("table {name}: {e}"))?;
                    f(k.value(), v.value())?;
                }
                Ok(())
            }
            fn count<K: Key + 'static, V: Value + 'static>(&self, def: TableDefinition<K, V>) -> u64 {
                use redb::ReadableTableMetadata;
                self.open_table(def).ok().and_then(|t| t.len().ok()).unwrap_or(0)
            }
            fn journal_last(&self) -> Result<u64, String> {
                let t = match self.open_table(JOURNAL) {
                    Ok(t) => t,
                    Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
                    Err(e) => return Err(format!("table journal: {e}")),
                };
                let last = t.last().map_err(|e| format!("table journal: {e}"))?;
                Ok(last.map(|(k, _)| k.value()).unwrap_or(0))
            }
        }
    };
}
impl_tables!(redb::ReadTransaction);
impl_tables!(redb::WriteTransaction);

/// Reads the inode table (inodes, symlinks, xattrs, their local-only
/// counterparts, directory entries) from `src`, a store of the current
/// schema, and which inodes have manifests. `next_ino`: meta's counter.
/// Errors: a message naming the table (and inode) that could not be read
/// or decoded.
pub(crate) fn read_state(src: &impl Tables, next_ino: u64) -> Result<Read, String> {
    let st = read_nodes(src, next_ino)?;
    let links = read_links(src)?;
    Ok(link(st, links))
}

/// [`read_state`] of a read transaction, in two threads (D61): the
/// directory entries and manifest keys are read ([`read_links`]) while
/// this thread reads the inodes; each thread's redb panics (a damaged
/// page) are caught as errors. Sequential when no thread can be started.
pub(crate) fn read_state_parallel(rtx: &redb::ReadTransaction, next_ino: u64) -> Result<Read, String> {
    std::thread::scope(|s| {
        let other = std::thread::Builder::new().name("ringfs-load".into()).spawn_scoped(s, || guarded(|| read_links(rtx)));
        let Ok(other) = other else {
            return read_state(rtx, next_ino);
        };
        let st = guarded(|| read_nodes(rtx, next_ino));
        let links = other.join().unwrap_or_else(|_| Err("reading directory entries: the thread panicked".into()));
        let (st, links) = (st??, links??);
        Ok(link(st, links))
    })
}

/// The inodes, symlinks and xattrs, synced and local-only, of `src`
/// (directories still empty).
fn read_nodes(src: &impl Tables, next_ino: u64) -> Result<State, String> {
    let mut st = State { next_ino: next_ino.max(2), ..Default::default() };
    // Sized once: growing a map of 10 000 boxes rehashes it a dozen times.
    st.nodes.reserve((src.count(INODES) + src.count(LOCAL_INODES)) as usize);
    src.each(INODES, |k, v| {
        let rec: InodeRec = dec(v).map_err(|e| format!("table inodes key {k}: undecodable inode record: {e}"))?;
        st.next_ino = st.next_ino.max(k + 1);
        st.nodes.insert(k, Box::new(Node::new(rec)));
        Ok(())
    })?;
    src.each(SYMLINKS, |k, v| {
        if let Some(n) = st.nodes.get_mut(&k) {
            n.set_symlink(Some(v.to_vec()));
        }
        Ok(())
    })?;
    src.each(XATTRS, |(ino, name), v| {
        if let Some(n) = st.nodes.get_mut(&ino) {
            n.xattrs_mut().insert(name.to_vec(), v.to_vec());
        }
        Ok(())
    })?;
    // Local-only inodes: same layouts in the LOCAL_* tables.
    src.each(LOCAL_INODES, |k, v| {
        let rec: InodeRec = dec(v).map_err(|e| format!("table local_inodes key {k}: undecodable inode record: {e}"))?;
        st.next_ino = st.next_ino.max(k + 1);
        if k == ROOT || st.nodes.contains_key(&k) {
            return Ok(()); // the synced record wins
        }
        let mut n = Node::new(rec);
        n.local = true;
        n.data_local = true;
        st.nodes.insert(k, Box::new(n));
        Ok(())
    })?;
    src.each(LOCAL_SYMLINKS, |k, v| {
        if let Some(n) = st.nodes.get_mut(&k).filter(|n| n.local) {
            n.set_symlink(Some(v.to_vec()));
        }
        Ok(())
    })?;
    src.each(LOCAL_XATTRS, |(ino, name), v| {
        if let Some(n) = st.nodes.get_mut(&ino).filter(|n| n.local) {
            n.xattrs_mut().insert(name.to_vec(), v.to_vec());
        }
        Ok(())
    })?;
    Ok(st)
}

/// The directory entries (names allocated as they will be kept), the
/// inodes with a live manifest and the journal's last key of `src`.
fn read_links(src: &impl Tables) -> Result<Links, String> {
    let mut has_manifest = InoSet::with_capacity_and_hasher(src.count(LIVE_ROOTS) as usize, Default::default());
    src.each(LIVE_ROOTS, |k, _| {
        has_manifest.insert(k);
        Ok(())
    })?;
    let sync_pos = src.journal_last()?;
    let mut dirents: [Vec<(u64, Name, u64, u64)>; 2] = Default::default();
    for (v, table) in dirents.iter_mut().zip([DIRENTS, LOCAL_DIRENTS]) {
        v.reserve(src.count(table) as usize);
        src.each(table, |(parent, name), (child, cookie)| {
            v.push((parent, Name::from(name), child, cookie));
            Ok(())
        })?;
    }
    Ok(Links { dirents, has_manifest, sync_pos })
}

/// Puts `links`' directory entries into `st`'s directories; an entry that
/// names no inode, a parent that is no directory, or a name its parent
/// already has is left out and listed in [`Read::bad`].
fn link(mut st: State, links: Links) -> Read {
    let Links { dirents, has_manifest, sync_pos } = links;
    let mut bad = Vec::new();
    for (entries, synced) in dirents.into_iter().zip([true, false]) {
        // Rows come in key order, (parent, name): one directory's entries
        // are a run, put in place together (D68) — its name map sized once
        // and its cookie map built in one pass, not grown entry by entry.
        let mut entries = entries.into_iter().peekable();
        let mut cookies: Vec<(u64, Name)> = Vec::new();
        while let Some(first) = entries.next() {
            let parent = first.0;
            let mut run = vec![first];
            while let Some(e) = entries.next_if(|e| e.0 == parent) {
                run.push(e);
            }
            let Some(p) = st.nodes.get(&parent).filter(|p| p.dir.is_some()) else {
                bad.extend(run.into_iter().map(|(parent, name, _, _)| (synced, parent, name.to_vec())));
                continue;
            };
            let mut next_cookie = p.rec.next_cookie;
            // Which children exist, and which are directories (their own
            // name is set below), read before the parent is borrowed.
            let kinds: Vec<Option<bool>> = run.iter().map(|(_, _, child, _)| st.nodes.get(child).map(|c| c.dir.is_some())).collect();
            let p = st.nodes.get_mut(&parent).expect("checked above");
            let d = p.dir.as_mut().expect("a directory");
            d.by_name.reserve(run.len());
            cookies.clear();
            let mut subdirs = Vec::new();
            for ((_, name, child, cookie), kind) in run.into_iter().zip(kinds) {
                let Some(child_dir) = kind else {
                    bad.push((synced, parent, name.to_vec()));
                    continue;
                };
                match d.by_name.entry(name.clone()) {
                    std::collections::hash_map::Entry::Occupied(_) => {
                        bad.push((synced, parent, name.to_vec()));
                        continue;
                    }
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert((child, cookie));
                    }
                }
                next_cookie = next_cookie.max(cookie + 1);
                if child_dir {
                    subdirs.push((child, name.clone()));
                }
                cookies.push((cookie, name));
            }
            if d.by_cookie.is_empty() {
                d.by_cookie = cookies.drain(..).collect();
            } else {
                d.by_cookie.extend(cookies.drain(..));
            }
            p.rec.next_cookie = next_cookie;
            for (child, name) in subdirs {
                if let Some(d) = st.nodes.get_mut(&child).and_then(|ch| ch.dir.as_mut()) {
                    d.dname = name[..].into();
                }
            }
        }
    }
    Read { st, has_manifest, sync_pos, bad }
}

/// A fork's deferred tree as nodes (`snap::overlay::read_base`): they
/// replace the root's record the tables hold and are the live tree until
/// its first change writes their rows (D60). `files`: its regular files
/// (their content is their base object's, not a manifest row);
/// `next_ino`: the first number after them.
pub(crate) struct BaseNodes {
    pub(crate) nodes: crate::inode::NodeMap,
    pub(crate) files: Vec<u64>,
    pub(crate) next_ino: u64,
}

/// The inode table and counters of a store just opened.
pub(crate) struct Loaded {
    /// The schema the store was migrated from, if it was.
    pub(crate) migrated: Option<u64>,
    pub(crate) clean: bool,
    pub(crate) state: State,
    pub(crate) sync_pos: u64,
    pub(crate) chunk_count: u64,
    pub(crate) chunk_bytes: u64,
    pub(crate) rehash: Vec<u64>,
}

/// Creates or loads the tables, checks the schema, and after an unclean
/// shutdown repairs what a crash can leave behind. Marks the store in use
/// (clean = 0) durably. `pre`: the tables as [`read_state`] already read
/// them (a clean store of the current schema, read before the database was
/// opened for writing); `None` reads them in the write transaction.
/// `base`: a fork's deferred tree, merged before any repair.
pub(crate) fn load(db: &Database, dbpath: &Path, wc: &BackDir, local: &BackDir, packs: &Packs, pre: Option<Read>, base: Option<BaseNodes>) -> std::result::Result<Loaded, StoreError> {
    let c = |e: redb::Error| corrupt(dbpath, e);
    let mut txn = db.begin_write().map_err(|e| c(e.into()))?;
    txn.set_durability(Durability::Immediate).map_err(|e| c(e.into()))?;
    create_tables(&txn).map_err(c)?;
    let schema = meta_get(&txn, "schema").map_err(c)?;
    let mut migrated = None;
    match schema {
        None => {
            let mut m = txn.open_table(META).map_err(|e| c(e.into()))?;
            let id = u64::from_le_bytes(blake3::hash(format!("{:?}{}", SystemTime::now(), std::process::id()).as_bytes()).as_bytes()[..8].try_into().unwrap());
            for (k, v) in [("schema", SCHEMA_VERSION), ("store_id", id), ("next_ino", 2), ("clean", 1), ("chunk_count", 0), ("chunk_bytes", 0)] {
                m.insert(k, v).map_err(|e| c(e.into()))?;
            }
            drop(m);
            let mut t = txn.open_table(INODES).map_err(|e| c(e.into()))?;
            t.insert(ROOT, &enc(&root_rec())[..]).map_err(|e| c(e.into()))?;
        }
        Some(v) if v > SCHEMA_VERSION => {
            return Err(StoreError::NewerSchema { found: v, supported: SCHEMA_VERSION, path: dbpath.to_path_buf() });
        }
        Some(v) if v < SCHEMA_VERSION => {
            let n = migrate::migrate(&txn, v, packs).map_err(|e| corrupt(dbpath, format!("migrating from schema {v}: {e}")))?;
            migrated = Some(v);
            tracing::info!("store migrated from schema {v} to {SCHEMA_VERSION} ({n} records rewritten)");
        }
        Some(_) => {}
    }
    let clean = meta_get(&txn, "clean").map_err(c)? == Some(1);
    let next_ino = meta_get(&txn, "next_ino").map_err(c)?.unwrap_or(2);
    let read = match pre {
        Some(r) => r,
        None => read_state(&txn, next_ino).map_err(|e| corrupt(dbpath, e))?,
    };
    let Read { mut st, mut has_manifest, mut sync_pos, bad } = read;
    if let Some(b) = base {
        // A deferred tree: the tables hold only the fork's root record.
        st.next_ino = st.next_ino.max(b.next_ino);
        // The base's map is the large one: the tables' few nodes go into it
        // (the base's win where both have an inode, as an extend would
        // give), not 10 000 boxes into the tables' map (D70).
        let mut nodes = b.nodes;
        for (ino, n) in std::mem::take(&mut st.nodes) {
            nodes.entry(ino).or_insert(n);
        }
        st.nodes = nodes;
        has_manifest.extend(b.files);
        st.lazy_atime = Some(Default::default());
    }
    let chunk_count = meta_get(&txn, "chunk_count").map_err(c)?.unwrap_or(0);
    let chunk_bytes = meta_get(&txn, "chunk_bytes").map_err(c)?.unwrap_or(0);
    if !bad.is_empty() {
        tracing::warn!("store recovery: removing {} dangling directory entries", bad.len());
        for (synced, p, n) in bad {
            let table = if synced { DIRENTS } else { LOCAL_DIRENTS };
            txn.open_table(table).map_err(|e| c(e.into()))?.remove((p, &n[..])).map_err(|e| c(e.into()))?;
            // A snapshot finds the directories that changed in the journal.
            if synced {
                sync_pos += 1;
                txn.open_table(JOURNAL)
                    .map_err(|e| c(e.into()))?
                    .insert(sync_pos, &enc(&JournalRecord::Unlinked { parent: p, name: n })[..])
                    .map_err(|e| c(e.into()))?;
            }
        }
    }
    if !clean {
        put_back_doomed(&st, wc, local);
    }
    // Where each file's bytes are, and directory link counts over both sides.
    let local_names: HashSet<u64> = local.names().iter().filter_map(|n| n.parse().ok()).collect();
    let any_local = !local_names.is_empty() || st.nodes.values().any(|n| n.local);
    if any_local {
        for (ino, n) in st.nodes.iter_mut() {
            n.data_local = local_names.contains(ino);
        }
        let subdirs: Vec<(u64, u32)> = st
            .nodes
            .iter()
            .filter_map(|(&i, n)| {
                n.dir.as_ref().map(|d| (i, d.by_name.values().filter(|(c, _)| st.nodes.get(c).map(|c| c.dir.is_some()).unwrap_or(false)).count() as u32))
            })
            .collect();
        for (i, k) in subdirs {
            let n = st.nodes.get_mut(&i).unwrap();
            if n.rec.nlink > 0 {
                n.rec.nlink = 2 + k;
            }
        }
    }
    let data_exists = |st: &State, ino: u64| {
        let dl = st.nodes.get(&ino).map(|n| n.data_local).unwrap_or(false);
        if dl {
            local_names.contains(&ino)
        } else {
            wc.exists(&ino.to_string())
        }
    };
    let mut rehash = Vec::new();
    let (mut dcount, mut dbytes) = (0i64, 0i64);
    if !clean {
        // Inodes with no links (unlinked while open, or freed after the
        // last commit): nothing can reach them after a restart.
        let orphans: Vec<u64> = st.nodes.iter().filter(|(&i, n)| i != ROOT && n.rec.nlink == 0).map(|(&i, _)| i).collect();
        for ino in &orphans {
            let n = st.nodes.remove(ino).unwrap();
            for (it, st_) in [(INODES, SYMLINKS), (LOCAL_INODES, LOCAL_SYMLINKS)] {
                txn.open_table(it).map_err(|e| c(e.into()))?.remove(*ino).map_err(|e| c(e.into()))?;
                txn.open_table(st_).map_err(|e| c(e.into()))?.remove(*ino).map_err(|e| c(e.into()))?;
            }
            for xtab in [XATTRS, LOCAL_XATTRS] {
                let mut xt = txn.open_table(xtab).map_err(|e| c(e.into()))?;
                for name in n.xattrs().keys() {
                    xt.remove((*ino, &name[..])).map_err(|e| c(e.into()))?;
                }
            }
        }
        // Manifests whose inode is gone (or local-only now).
        for ino in has_manifest.iter().copied().collect::<Vec<_>>() {
            if !st.nodes.get(&ino).map(|n| is_reg(n.rec.mode) && !n.local).unwrap_or(false) {
                let (cn, cb) = remove_manifest(&txn, ino).map_err(c)?;
                dcount -= cn as i64;
                dbytes -= cb as i64;
                has_manifest.remove(&ino);
            }
        }
        // Working copies with no inode: a file made after the last commit
        // (its name was lost with the crash). Empty ones (the pool) go; any
        // with bytes are kept in STORE/lost+found, never deleted.
        let lost = dbpath.parent().filter(|p| !p.as_os_str().is_empty()).and_then(|p| BackDir::open(&p.join("lost+found")).ok());
        let mut saved = 0;
        let mut orphan = |dir: &BackDir, name: &str, prefix: &str| {
            let bytes = dir.open_ro(name).and_then(|f| f.metadata()).map(|m| m.len()).unwrap_or(0);
            if bytes == 0 {
                let _ = dir.unlink(name);
                return;
            }
            // Names already taken (an earlier crash's) are never replaced.
            let candidates = |base: String| (0..10_000).map(move |i| if i == 0 { base.clone() } else { format!("{base}.{i}") });
            // Into lost+found: a rename, or (--local-dir on another
            // filesystem) a copy; failing both, a name the daemon never uses.
            let into_lost = |l: &BackDir| {
                for to in candidates(format!("{prefix}{name}")) {
                    let r = dir.rename_noreplace(name, l, &to).or_else(|e| match e.raw_os_error() {
                        Some(libc::EXDEV) => (|| -> std::io::Result<()> {
                            let mut src = dir.open_ro(name)?;
                            let mut dst = l.create_new(&to)?;
                            std::io::copy(&mut src, &mut dst)?;
                            dst.sync_all()?;
                            dir.unlink(name)
                        })(),
                        _ => Err(e),
                    });
                    match r {
                        Ok(()) => return true,
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                        Err(_) => return false,
                    }
                }
                false
            };
            if lost.as_ref().is_some_and(into_lost) {
                saved += 1;
                return;
            }
            for to in candidates(format!("lost-{name}")) {
                match dir.rename_noreplace(name, dir, &to) {
                    Ok(()) => {
                        tracing::warn!("a file without a name after the crash is kept as {}/{to}", dir.path().display());
                        return;
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                    Err(_) => break,
                }
            }
            tracing::error!("a file without a name after the crash is left as {}/{name}", dir.path().display());
        };
        // The bytes of inodes the store knew as unlinked (deleted while
        // open, or O_TMPFILE never named) go, as ext4 frees its orphans.
        let unlinked: HashSet<String> = orphans.iter().map(|i| i.to_string()).collect();
        for name in wc.names() {
            let keep = name.parse::<u64>().ok().map(|i| st.nodes.get(&i).map(|n| is_reg(n.rec.mode) && !n.data_local).unwrap_or(false)).unwrap_or(false);
            if unlinked.contains(&name) {
                let _ = wc.unlink(&name);
            } else if !keep {
                orphan(wc, &name, "wc-");
            }
        }
        // In the local directory only our own names (numbers, restores).
        for name in local.names() {
            let ours = name.parse::<u64>().ok();
            let keep = ours.map(|i| st.nodes.get(&i).map(|n| is_reg(n.rec.mode) && n.data_local).unwrap_or(false)).unwrap_or(true);
            if name.starts_with(".restore-") || unlinked.contains(&name) {
                let _ = local.unlink(&name);
            } else if !keep {
                orphan(local, &name, "local-");
            }
        }
        if saved > 0 {
            tracing::warn!(
                "{saved} files made (or deleted while open) after the last commit have no name after the crash; their bytes are kept in {}",
                dbpath.parent().unwrap_or(Path::new(".")).join("lost+found").display()
            );
        }
        let regular: Vec<u64> = st.nodes.iter().filter(|(_, n)| is_reg(n.rec.mode)).map(|(&i, _)| i).collect();
        for ino in regular {
            if !data_exists(&st, ino) {
                continue;
            }
            let n = st.nodes.get_mut(&ino).unwrap();
            // The backing file is the truth for what it holds: a local-only
            // file's bytes never go to the store, and fsync may have made
            // only a synced file's working copy durable (its size and mtime,
            // until it is re-hashed: docs/SEMANTICS.md, "Durability").
            if !n.local {
                n.content_gen = 1;
                rehash.push(ino);
            }
            let dir = if n.local || n.data_local { local } else { wc };
            if let Ok(m) = dir.open_ro(&ino.to_string()).and_then(|f| f.metadata()) {
                use std::os::unix::fs::MetadataExt;
                let wm = (m.mtime(), m.mtime_nsec() as u32);
                if wm > n.rec.mtime || m.size() != n.rec.size || m.blocks() != n.rec.blocks {
                    n.rec.size = m.size();
                    n.rec.blocks = m.blocks();
                    n.rec.mtime = n.rec.mtime.max(wm);
                    n.rec.ctime = n.rec.ctime.max(wm);
                    st.dirty_inodes.insert(ino);
                }
            }
        }
        tracing::info!("store recovery after unclean shutdown: {} orphan inodes freed, {} working copies to re-hash", orphans.len(), rehash.len());
    }
    let candidates: Vec<u64> = st
        .nodes
        .iter()
        .filter(|(i, n)| is_reg(n.rec.mode) && (n.local || !has_manifest.contains(i)) && n.content_gen == 0 && n.rec.size > 0)
        .map(|(&i, _)| i)
        .collect();
    let mut lost = Vec::new();
    for ino in candidates {
        // No stored content and no working copy to re-hash: the data is lost.
        if !data_exists(&st, ino) {
            let n = st.nodes.get_mut(&ino).unwrap();
            n.rec.size = 0;
            n.rec.blocks = 0;
            lost.push(ino);
        } else if !st.nodes[&ino].local && !rehash.contains(&ino) {
            // A synced file whose hashing failed (say on a full disk): its
            // working copy is the truth; store it now.
            st.nodes.get_mut(&ino).unwrap().content_gen = 1;
            rehash.push(ino);
        }
    }
    st.dirty_inodes.extend(lost);
    bump_chunk_counters(&txn, dcount, dbytes).map_err(c)?;
    {
        let mut m = txn.open_table(META).map_err(|e| c(e.into()))?;
        m.insert("clean", 0).map_err(|e| c(e.into()))?;
        m.insert("next_ino", st.next_ino).map_err(|e| c(e.into()))?;
    }
    // PACKS rows of packs no longer open say sealed.
    packs.note(&txn, &Default::default()).map_err(c)?;
    // Chunks the migration appended are durable before the index is.
    packs.sync().map_err(|e| corrupt(dbpath, format!("syncing {}: {e}", packs.dir().display())))?;
    txn.commit().map_err(|e| c(e.into()))?;
    Ok(Loaded {
        migrated,
        clean,
        state: st,
        sync_pos,
        chunk_count: (chunk_count as i64 + dcount).max(0) as u64,
        chunk_bytes: (chunk_bytes as i64 + dbytes).max(0) as u64,
        rehash,
    })
}

/// After a crash: backing files of removed files set aside as
/// `.doomed-<inode>` (`Inner::set_aside`, D76) go back to `<inode>` when
/// the store still names that regular file (its removal was not durable:
/// the working copy may hold the only copy of fsynced bytes) and it has no
/// other backing file; the others (the removal is durable) are deleted.
fn put_back_doomed(st: &State, wc: &BackDir, local: &BackDir) {
    for dir in [wc, local] {
        for name in dir.names() {
            let Some(ino) = crate::local::doomed_ino(&name) else { continue };
            let named = st.nodes.get(&ino).is_some_and(|n| is_reg(n.rec.mode));
            let plain = ino.to_string();
            if named && !wc.exists(&plain) && !local.exists(&plain) {
                if let Err(e) = dir.rename_to(&name, dir, &plain) {
                    tracing::warn!("putting back {}/{name} (a removal the crash undid): {e}", dir.path().display());
                }
            } else {
                let _ = dir.unlink(&name);
            }
        }
    }
}
