//! Building a snapshot tree from the store's tables in one write
//! transaction ([`build`]): what changed since the last commit is read from
//! the journal (the records after the position it covers), every inode the
//! records name has its entries rebuilt, the directories on their paths to
//! the root are re-encoded from their previous objects, and every other
//! subtree keeps the object id remembered in `snap_inodes`. Without a base
//! (the first commit, or a full walk for checking) the whole tree is built.
//! A changed directory's object is its previous entries (decoded once, or
//! taken decoded from [`DirCache`], the directories of the last commit)
//! with the changed names replaced; every directory object the build
//! decoded or made stays decoded in [`Built::dirs`] for the commit's diff.
//!
//! Owns: which objects a commit computes. Must not touch: the inode table in
//! memory (the tables are the truth the commit covers), writing (the caller
//! stores what [`Built`] holds).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use redb::{ReadableTable, Table, WriteTransaction};

use crate::inode::ROOT;
use crate::schema::*;
use crate::snap::manifest::build_file;
use crate::snap::object::*;

type Links = BTreeSet<(u64, Vec<u8>)>;

/// What [`build`] computed: the root directory object and the root's
/// attributes, the objects the store lacks (id → bytes), how many objects
/// it recomputed that the store already had (and their bytes), the
/// `snap_inodes` rows to write and to delete, and the journal position the
/// tree covers.
pub(crate) struct Built {
    pub(crate) root: ObjectId,
    pub(crate) root_meta: Meta,
    pub(crate) new_objects: HashMap<ObjectId, Vec<u8>>,
    pub(crate) reused: (u64, u64),
    pub(crate) cache: HashMap<u64, SnapEntry>,
    pub(crate) uncache: Vec<u64>,
    pub(crate) covered: u64,
    /// Journal records read and inodes they named (for the report).
    pub(crate) records: u64,
    pub(crate) changed_inodes: u64,
    /// Every directory object this build decoded or made, by id: what the
    /// commit's diff reads instead of decoding them again.
    pub(crate) dirs: HashMap<ObjectId, Arc<DirObj>>,
    /// The directory objects this build made, and the ids of the previous
    /// objects of the directories it rebuilt ([`DirCache::update`]).
    made: Vec<ObjectId>,
    replaced: Vec<ObjectId>,
}

/// Directory objects of the last commit, decoded, by id (one per mounted
/// workspace, `Fs`'s `snap_dirs`):
/// the next commit's build takes a changed directory's previous entries
/// from here instead of reading and decoding its object. Objects are
/// immutable and named by their content, so an entry is never stale; the
/// cache only saves work. Bounded: at most [`DirCache::MAX_ENTRIES`]
/// directory entries in all (else it keeps only the last build's).
#[derive(Default)]
pub(crate) struct DirCache(Mutex<HashMap<ObjectId, Arc<DirObj>>>);

impl DirCache {
    /// Directory entries the cache holds at most (about 150 bytes each).
    pub(crate) const MAX_ENTRIES: usize = 1 << 16;

    fn snapshot(&self) -> HashMap<ObjectId, Arc<DirObj>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// After a commit of `built`: the objects it replaced leave, the ones
    /// it made come in.
    pub(crate) fn update(&self, built: &Built) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for id in &built.replaced {
            m.remove(id);
        }
        let made = built.made.iter().filter_map(|id| built.dirs.get(id).map(|d| (*id, d.clone())));
        m.extend(made);
        let n: usize = m.values().map(|d| d.entries.len()).sum();
        if n > Self::MAX_ENTRIES {
            m.clear();
            let mut n = 0;
            for id in &built.made {
                if let Some(d) = built.dirs.get(id) {
                    n += d.entries.len();
                    if n > Self::MAX_ENTRIES {
                        break;
                    }
                    m.insert(*id, d.clone());
                }
            }
        }
    }
}

struct Src<'t, 'p> {
    inodes: Table<'t, u64, &'static [u8]>,
    dirents: Table<'t, (u64, &'static [u8]), (u64, u64)>,
    xattrs: Table<'t, (u64, &'static [u8]), &'static [u8]>,
    symlinks: Table<'t, u64, &'static [u8]>,
    manifests: Table<'t, u64, &'static [u8]>,
    segments: Table<'t, &'static [u8], &'static [u8]>,
    sizes: Table<'t, u64, u64>,
    snap: Table<'t, u64, &'static [u8]>,
    objects: crate::store::objects::Objects<'p, Table<'t, &'static [u8], crate::store::objects::Row>>,
}

fn e2s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

struct Builder<'t, 'p> {
    src: Src<'t, 'p>,
    changed: HashSet<u64>,
    names: HashMap<u64, BTreeSet<Vec<u8>>>,
    new_links: HashMap<u64, Links>,
    ids: HashMap<u64, ObjectId>,
    memo: HashMap<u64, ObjectId>,
    new_objects: HashMap<ObjectId, Vec<u8>>,
    reused: (u64, u64),
    /// Inodes the journal says left the synced side (freed, or moved to
    /// the local-only side) since the last commit: what is remembered of
    /// them is not used (one that came back is built from its tables).
    removed: HashSet<u64>,
    /// Directory objects decoded or made (see [`Built::dirs`]), those
    /// made, and the previous objects of rebuilt directories.
    dirs: HashMap<ObjectId, Arc<DirObj>>,
    made: Vec<ObjectId>,
    replaced: Vec<ObjectId>,
}

/// Builds the tree the tables hold now. `base`: the journal position the
/// last commit covered (its `snap_inodes` rows describe that tree); `None`
/// builds every object from the tables (the first commit, or a check of the
/// incremental build). `cache`: decoded directory objects to start from
/// (none: every previous directory object read is decoded). Errors: a
/// redb error or a record that does not decode, as text.
pub(crate) fn build(txn: &WriteTransaction, packs: &crate::store::pack::Packs, base: Option<u64>, cache: Option<&DirCache>) -> Result<Built, String> {
    let src = Src {
        inodes: txn.open_table(INODES).map_err(e2s)?,
        dirents: txn.open_table(DIRENTS).map_err(e2s)?,
        xattrs: txn.open_table(XATTRS).map_err(e2s)?,
        symlinks: txn.open_table(SYMLINKS).map_err(e2s)?,
        manifests: txn.open_table(LIVE_ROOTS).map_err(e2s)?,
        segments: txn.open_table(LIVE_SEGMENTS).map_err(e2s)?,
        sizes: txn.open_table(MANIFEST_SIZES).map_err(e2s)?,
        snap: txn.open_table(SNAP_INODES).map_err(e2s)?,
        objects: crate::store::objects::read_in(txn, packs)?,
    };
    let mut b = Builder {
        src,
        changed: HashSet::new(),
        names: HashMap::new(),
        new_links: HashMap::new(),
        ids: HashMap::new(),
        memo: HashMap::new(),
        new_objects: HashMap::new(),
        reused: (0, 0),
        removed: HashSet::new(),
        dirs: match (base, cache) {
            (Some(_), Some(c)) => c.snapshot(),
            _ => HashMap::new(),
        },
        made: Vec::new(),
        replaced: Vec::new(),
    };
    let journal = txn.open_table(JOURNAL).map_err(e2s)?;
    let covered = journal.last().map_err(e2s)?.map(|(k, _)| k.value()).unwrap_or(0);
    let mut removed = Vec::new();
    let mut records = 0u64;
    if let Some(base) = base {
        for r in journal.range(base + 1..).map_err(e2s)? {
            let (k, v) = r.map_err(e2s)?;
            records += 1;
            let rec: JournalRecord = dec(v.value()).map_err(|e| format!("journal record {}: {e}", k.value()))?;
            match rec {
                JournalRecord::Linked { parent, name, child } => {
                    b.names.entry(parent).or_default().insert(name);
                    b.changed.insert(child);
                }
                JournalRecord::Unlinked { parent, name } => {
                    b.names.entry(parent).or_default().insert(name);
                }
                JournalRecord::Attrs { ino } | JournalRecord::Content { ino, .. } => {
                    b.changed.insert(ino);
                }
                JournalRecord::Removed { ino } => removed.push(ino),
            }
        }
        b.removed = removed.iter().copied().collect();
        b.close_upwards()?;
    }
    drop(journal);
    let fresh = base.is_none();
    let root = b.build_dir(ROOT, fresh)?;
    let root_meta = match b.rec(ROOT)? {
        Some(r) => b.meta(ROOT, &r, 0)?,
        None => return Err("the root directory has no inode record".into()),
    };
    // The rows of snap_inodes for every inode whose entry was rebuilt: its
    // new id and the names it has now (old names not looked at are kept).
    let mut cache = HashMap::new();
    let new_links = std::mem::take(&mut b.new_links);
    for (ino, links) in new_links {
        let mut all: Links = links;
        if !fresh {
            if let Some(old) = b.cached(ino)? {
                for (p, n) in old.links {
                    let looked = b.names.get(&p).map(|s| s.contains(&n)).unwrap_or(false);
                    if !looked {
                        all.insert((p, n));
                    }
                }
            }
        }
        let id = b.ids.get(&ino).copied().unwrap_or([0; 32]);
        cache.insert(ino, SnapEntry { id, links: all.into_iter().collect() });
    }
    cache.insert(ROOT, SnapEntry { id: root, links: Vec::new() });
    let changed_inodes = b.changed.len() as u64;
    Ok(Built {
        root,
        root_meta,
        new_objects: b.new_objects,
        reused: b.reused,
        cache,
        uncache: removed,
        covered,
        records,
        changed_inodes,
        dirs: b.dirs,
        made: b.made,
        replaced: b.replaced,
    })
}

impl Builder<'_, '_> {
    fn cached(&self, ino: u64) -> Result<Option<SnapEntry>, String> {
        if self.removed.contains(&ino) {
            return Ok(None);
        }
        match self.src.snap.get(ino).map_err(e2s)? {
            Some(g) => Ok(Some(dec(g.value()).map_err(|e| format!("snap_inodes {ino}: {e}"))?)),
            None => Ok(None),
        }
    }

    fn rec(&self, ino: u64) -> Result<Option<InodeRec>, String> {
        match self.src.inodes.get(ino).map_err(e2s)? {
            Some(g) => Ok(Some(dec(g.value()).map_err(|e| format!("inode {ino}: {e}"))?)),
            None => Ok(None),
        }
    }

    /// Every changed inode's remembered names, and every directory with a
    /// changed name, mark the name of that directory in its parent, up to
    /// the root.
    fn close_upwards(&mut self) -> Result<(), String> {
        let changed: Vec<u64> = self.changed.iter().copied().collect();
        for c in changed {
            if let Some(e) = self.cached(c)? {
                for (p, n) in e.links {
                    self.names.entry(p).or_default().insert(n);
                }
            }
        }
        let mut work: Vec<u64> = self.names.keys().copied().collect();
        let mut seen = HashSet::new();
        while let Some(d) = work.pop() {
            if d == ROOT || !seen.insert(d) {
                continue;
            }
            if let Some(e) = self.cached(d)? {
                for (p, n) in e.links {
                    self.names.entry(p).or_default().insert(n);
                    work.push(p);
                }
            }
        }
        Ok(())
    }

    /// Encoded object bytes by id: computed in this build, or stored.
    fn object(&self, id: &ObjectId) -> Result<Option<Vec<u8>>, String> {
        if let Some(b) = self.new_objects.get(id) {
            return Ok(Some(b.clone()));
        }
        self.src.objects.get(id)
    }

    /// Keeps `bytes` as a new object unless the store has it.
    fn note(&mut self, bytes: Vec<u8>) -> Result<ObjectId, String> {
        let id = id_of(&bytes);
        if self.new_objects.contains_key(&id) || self.src.objects.contains(&id)? {
            self.reused.0 += 1;
            self.reused.1 += bytes.len() as u64;
        } else {
            self.new_objects.insert(id, bytes);
        }
        Ok(id)
    }

    /// The object of directory `d`. Unchanged (no changed name, a
    /// remembered id): that id. Changed: its previous entries with the
    /// changed names looked up again. `fresh` (or nothing remembered):
    /// every entry built from the tables, and so every subdirectory.
    fn build_dir(&mut self, d: u64, fresh: bool) -> Result<ObjectId, String> {
        if let Some(id) = self.memo.get(&d) {
            return Ok(*id);
        }
        let cached = if fresh { None } else { self.cached(d)?.filter(|c| c.id != [0; 32]) };
        let old = match &cached {
            Some(c) => self.dir_obj(&c.id)?,
            None => None,
        };
        let entries: Vec<Entry> = match (cached, old) {
            (Some(c), Some(old)) => {
                let Some(names) = self.names.get(&d).cloned() else {
                    self.memo.insert(d, c.id);
                    return Ok(c.id);
                };
                // The previous entries (sorted by name) with each changed
                // name looked up again: replaced, inserted or removed.
                let mut entries = old.entries.clone();
                for n in names {
                    let child = self.src.dirents.get((d, &n[..])).map_err(e2s)?.map(|g| g.value().0);
                    let new = match child {
                        Some(child) => self.entry(d, &n, child, false)?,
                        None => None,
                    };
                    match (entries.binary_search_by(|e| e.name.as_slice().cmp(&n[..])), new) {
                        (Ok(i), Some(e)) => entries[i] = e,
                        (Ok(i), None) => {
                            entries.remove(i);
                        }
                        (Err(i), Some(e)) => entries.insert(i, e),
                        (Err(_), None) => {}
                    }
                }
                self.replaced.push(c.id);
                entries
            }
            _ => {
                let mut kids = Vec::new();
                for r in self.src.dirents.range((d, &b""[..])..(d + 1, &b""[..])).map_err(e2s)? {
                    let (k, v) = r.map_err(e2s)?;
                    kids.push((k.value().1.to_vec(), v.value().0));
                }
                let mut out = Vec::with_capacity(kids.len());
                for (n, child) in kids {
                    if let Some(e) = self.entry(d, &n, child, true)? {
                        out.push(e);
                    }
                }
                out
            }
        };
        let obj = DirObj { entries };
        let id = self.note(enc_dir(&obj))?;
        if !self.dirs.contains_key(&id) {
            self.dirs.insert(id, Arc::new(obj));
        }
        self.made.push(id);
        self.memo.insert(d, id);
        self.ids.insert(d, id);
        Ok(id)
    }

    /// The directory object `id`, decoded: from this build or the cache,
    /// else read and decoded (`None`: missing or not a directory object,
    /// so the caller rebuilds the directory from the tables).
    fn dir_obj(&mut self, id: &ObjectId) -> Result<Option<Arc<DirObj>>, String> {
        if let Some(d) = self.dirs.get(id) {
            return Ok(Some(d.clone()));
        }
        let Some(d) = self.object(id)?.and_then(|b| dec_dir(&b).ok()) else { return Ok(None) };
        let d = Arc::new(d);
        self.dirs.insert(*id, d.clone());
        Ok(Some(d))
    }

    /// The attributes of `ino` a snapshot keeps (`size` given by the caller).
    fn meta(&self, ino: u64, rec: &InodeRec, size: u64) -> Result<Meta, String> {
        let mut xattrs = Vec::new();
        for r in self.src.xattrs.range((ino, &b""[..])..(ino + 1, &b""[..])).map_err(e2s)? {
            let (k, v) = r.map_err(e2s)?;
            xattrs.push((k.value().1.to_vec(), v.value().to_vec()));
        }
        Ok(Meta { mode: rec.mode & 0o7777, uid: rec.uid, gid: rec.gid, mtime: rec.mtime, size, rdev: rec.rdev, flags: rec.flags, xattrs })
    }

    /// The entry `name` of `d` for inode `child` (`None`: its record is
    /// missing or of an unknown type).
    fn entry(&mut self, d: u64, name: &[u8], child: u64, fresh: bool) -> Result<Option<Entry>, String> {
        let Some(rec) = self.rec(child)? else {
            tracing::warn!("snapshot: entry {:?} of directory {d} names inode {child}, which has no record; left out", String::from_utf8_lossy(name));
            return Ok(None);
        };
        let Some(kind) = EntryKind::of_mode(rec.mode) else { return Ok(None) };
        let (target, size) = match kind {
            EntryKind::File => {
                let (id, size) = self.file(child, &rec, fresh)?;
                self.ids.insert(child, id);
                (Target::Object(id), size)
            }
            EntryKind::Dir => (Target::Object(self.build_dir(child, fresh)?), 0),
            EntryKind::Symlink => {
                let t = self.src.symlinks.get(child).map_err(e2s)?.map(|g| g.value().to_vec()).unwrap_or_default();
                let n = t.len() as u64;
                (Target::Symlink(t), n)
            }
            _ => (Target::None, 0),
        };
        let meta = self.meta(child, &rec, size)?;
        self.new_links.entry(child).or_default().insert((d, name.to_vec()));
        Ok(Some(Entry { name: name.to_vec(), kind, meta, target }))
    }

    /// The manifest object of regular file `ino` (a version 2 tree: only
    /// its nodes the store lacks are new) and its size: remembered
    /// when the file did not change, else from its stored manifest and the
    /// size it was cut at (the record's size for a manifest stored before
    /// schema 4; a file never stored is empty).
    fn file(&mut self, ino: u64, rec: &InodeRec, fresh: bool) -> Result<(ObjectId, u64), String> {
        if !fresh && !self.changed.contains(&ino) {
            if let Some(c) = self.cached(ino)?.filter(|c| c.id != [0; 32]) {
                if let Some(b) = self.object(&c.id)? {
                    if b.len() >= 14 {
                        return Ok((c.id, u64::from_le_bytes(b[6..14].try_into().unwrap())));
                    }
                }
            }
        }
        let chunks: Option<Vec<ChunkRef>> = crate::live::read(&self.src.manifests, &self.src.segments, ino)?;
        let (size, chunks) = match chunks {
            Some(chunks) => (self.src.sizes.get(ino).map_err(e2s)?.map(|g| g.value()).unwrap_or(rec.size), chunks),
            None => (0, Vec::new()),
        };
        Ok((build_file(size, &chunks, &mut |b| self.note(b))?, size))
    }
}
