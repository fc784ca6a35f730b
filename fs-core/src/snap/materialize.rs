//! A commit made into a store's live tables, and forks (docs/SEMANTICS.md
//! "Snapshots", docs/DECISIONS.md D35).
//!
//! - [`write_tree`]: the inode records, directory entries, manifests (with
//!   `manifest_sizes`), xattrs, symlinks and `snap_inodes` rows of a
//!   commit's tree, read from its objects, so the store opens as that tree;
//!   working copies are not written (each is rebuilt from its chunks when
//!   the file is first opened, `wc::Wc::open_wc`).
//! - [`fork_from`]: a new store directory from a commit of this one: its
//!   objects' `object_index` rows copied and its object index files
//!   hard-linked (D65; their records stay in the linked packs), the tree deferred (`snap::lazy`: the commit named, only the
//!   root's record written; [`write_tree`] runs at the first mount), the
//!   chunk index entries its objects use (references counted afresh), the
//!   packs holding them hard-linked and recorded sealed at their committed
//!   length (docs/FORMATS.md "Shared packs"). Built in a temporary sibling
//!   directory and renamed into place: a fork cut short leaves nothing
//!   under the new name.
//!
//! Must not touch: the origin's tables (only read) or pack files (only
//! linked), the inode table.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::{Durability, ReadableTable, ReadableTableMetadata, WriteTransaction};

use crate::inode::ROOT;
use crate::schema::*;
use crate::snap::object::*;
use crate::snap::refs::{commit_obj, BASE_KEY, HEAD_KEY};
use crate::snap::{se, SnapError};
use crate::store::db::Store;
use crate::store::pack::{pack_name, Packs, HEADER_LEN, RECORD_HEADER};

/// What [`write_tree`] wrote: the next free inode number, counts, and the
/// chunk entries of the live manifests (hash → entries naming it).
#[derive(Debug, Default)]
pub(crate) struct Written {
    pub next_ino: u64,
    pub files: u64,
    pub dirs: u64,
    pub uses: HashMap<[u8; 32], u64>,
}

/// The record of a commit's root directory (`m`: its meta), before its
/// entries are known (link count 2).
pub(crate) fn root_rec_of(m: &Meta) -> InodeRec {
    crate::snap::overlay::rec_of(EntryKind::Dir, m, ROOT, crate::posix::now())
}

/// Writes the tree of commit `c` into the (empty of synced inodes) live
/// tables of `txn`: the root keeps inode 1, the others are numbered from
/// `first_ino` in tree order (`snap::overlay::walk_tree`, the numbering a
/// mount of a deferred tree serves from memory). `now`: every record's
/// ctime and birth time. A hard link in the commit (one manifest object
/// under several names) becomes one file per name. `load` gives an
/// object's bytes by id. Errors: a missing or undecodable object, redb.
pub(crate) fn write_tree(txn: &WriteTransaction, load: &mut dyn FnMut(&ObjectId) -> Result<Vec<u8>, String>, c: &CommitObj, first_ino: u64, now: (i64, u32)) -> Result<Written, String> {
    use crate::snap::overlay::Visit;
    let e = |x: redb::TableError| x.to_string();
    let s = |x: redb::StorageError| x.to_string();
    let mut inodes = txn.open_table(INODES).map_err(e)?;
    let mut dirents = txn.open_table(DIRENTS).map_err(e)?;
    let mut sizes = txn.open_table(MANIFEST_SIZES).map_err(e)?;
    let mut xattrs = txn.open_table(XATTRS).map_err(e)?;
    let mut symlinks = txn.open_table(SYMLINKS).map_err(e)?;
    let mut snap = txn.open_table(SNAP_INODES).map_err(e)?;
    let mut w = Written { next_ino: first_ino, ..Default::default() };
    let put_xattrs = |xattrs: &mut redb::Table<(u64, &[u8]), &[u8]>, ino: u64, m: &Meta| -> Result<(), String> {
        for (k, v) in &m.xattrs {
            xattrs.insert((ino, &k[..]), &v[..]).map_err(s)?;
        }
        Ok(())
    };
    w.next_ino = crate::snap::overlay::walk_tree(load, c, first_ino, now, true, &mut |v| {
        match v {
            Visit::Entry { dir: d, ino, cookie, en, rec, fid, file } => {
                dirents.insert((d, &en.name[..]), (ino, cookie)).map_err(s)?;
                let links = vec![(d, en.name.clone())];
                match (&en.kind, &en.target, fid.zip(file)) {
                    (EntryKind::Dir, _, _) => return Ok(()),
                    (_, _, Some((fid, f))) => {
                        // Live manifests share segments: only the entries of
                        // segments this tree creates take chunk references.
                        let (moves, _) = crate::live::write(txn, ino, &f.chunks).map_err(|x| x.to_string())?;
                        for ch in &moves.add {
                            *w.uses.entry(ch.hash).or_default() += 1;
                        }
                        sizes.insert(ino, f.size).map_err(s)?;
                        snap.insert(ino, &enc(&SnapEntry { id: fid, links })[..]).map_err(s)?;
                        w.files += 1;
                    }
                    (_, Target::Symlink(t), _) => {
                        symlinks.insert(ino, &t[..]).map_err(s)?;
                        snap.insert(ino, &enc(&SnapEntry { id: [0; 32], links })[..]).map_err(s)?;
                    }
                    _ => {
                        snap.insert(ino, &enc(&SnapEntry { id: [0; 32], links })[..]).map_err(s)?;
                    }
                }
                inodes.insert(ino, &enc(&rec)[..]).map_err(s)?;
                put_xattrs(&mut xattrs, ino, &en.meta)?;
            }
            Visit::Dir { ino: d, id, meta, parent, name, rec } => {
                inodes.insert(d, &enc(&rec)[..]).map_err(s)?;
                put_xattrs(&mut xattrs, d, meta)?;
                let links = if d == ROOT { Vec::new() } else { vec![(parent, name.to_vec())] };
                snap.insert(d, &enc(&SnapEntry { id, links })[..]).map_err(s)?;
                w.dirs += 1;
            }
        }
        Ok(())
    })?;
    Ok(w)
}

/// What a fork made: the new store, the commit and branch it is on, what
/// it holds, what it took on disk (bytes of files it wrote; the packs are
/// links) and how long it took.
#[derive(Clone, Debug, Default)]
pub struct ForkReport {
    pub store: PathBuf,
    pub commit: String,
    pub branch: String,
    pub files: u64,
    pub dirs: u64,
    pub objects: u64,
    pub chunks: u64,
    pub packs_linked: u64,
    pub new_bytes: u64,
    pub elapsed: Duration,
    /// Where the time went, in order: `objects` (copied), `tree` (its
    /// directory objects read and counted, the root's record and the
    /// deferred-tree rows written), `chunks` (index entries and pack links), `commit`
    /// (the durable transaction and directory syncs), `rename`.
    pub phases: Vec<(&'static str, Duration)>,
}

/// Checks a fork's destination before anything is made: its parent exists
/// and it is a new or empty directory. One line naming the problem.
pub fn check_dest(dest: &Path) -> Result<(), String> {
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(format!("{} does not exist: create it first, or give another place for the new store", parent.display()));
    }
    if dest.exists() && !dest.is_dir() {
        return Err(format!("{} exists and is not a directory: give a new directory for the new store", dest.display()));
    }
    if std::fs::read_dir(dest).map(|mut r| r.next().is_some()).unwrap_or(false) {
        return Err(format!("{} is not empty: give a new (or empty) directory for the new store", dest.display()));
    }
    Ok(())
}

/// The temporary directory a new store at `dest` is built in by process
/// `pid` (a sibling, so packs can be hard-linked and the rename is
/// atomic): `.NAME.TAG-PID`, TAG `forking` (a fork) or `cloning` (a clone,
/// `transfer::build_clone`).
pub(crate) fn temp_for(dest: &Path, tag: &str, pid: u32) -> PathBuf {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "store".into());
    dest.with_file_name(format!(".{name}.{tag}-{pid}"))
}

/// Removes what builds into `dest` cut short (kill -9) left: temporary
/// siblings ([`temp_for`] with `tag`) whose process is gone.
pub(crate) fn sweep(dest: &Path, tag: &str) {
    let (Some(parent), Some(name)) = (dest.parent(), dest.file_name()) else { return };
    let prefix = format!(".{}.{tag}-", name.to_string_lossy());
    let Ok(rd) = std::fs::read_dir(if parent.as_os_str().is_empty() { Path::new(".") } else { parent }) else { return };
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = n.strip_prefix(&prefix).and_then(|p| p.parse::<u32>().ok()) {
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

pub(crate) fn sync_dir(p: &Path) -> std::io::Result<()> {
    std::fs::File::open(p)?.sync_all()
}

/// Makes a new store at `dest` from commit `commit` of `store`, on branch
/// `branch` (its only branch; `HEAD` and `BASE` name it and the commit).
/// The origin's open pack is synced first, so every pack byte the fork
/// records is durable. A pack the origin compacts away meanwhile makes the
/// fork start again (up to three times). Errors: [`SnapError::Store`] with
/// the path and the cause (a pack on another filesystem cannot be linked).
pub(crate) fn fork_from(store: &Store, commit: ObjectId, branch: &str, dest: &Path) -> Result<ForkReport, SnapError> {
    check_dest(dest).map_err(SnapError::Store)?;
    sweep(dest, "forking");
    let mut last = String::new();
    for _ in 0..3 {
        match fork_once(store, commit, branch, dest) {
            Ok(r) => return Ok(r),
            Err((retry, e)) => {
                if !retry {
                    return Err(SnapError::Store(if_full(dest, "building the new store", e)));
                }
                last = e;
            }
        }
    }
    Err(SnapError::Store(last))
}

/// The error `e` of a new store built beside `dest` (a fork, a clone),
/// which removed what it had made: on a full disk, the line naming the
/// disk holding `dest` and what to free ([`crate::full_disk`]), with `e`.
pub(crate) fn if_full(dest: &Path, doing: &str, e: String) -> String {
    if !crate::says_full(&e) {
        return e;
    }
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    format!("{} ({e}); nothing was made (the partly built store was removed)", crate::full_disk(parent, doing))
}

/// One attempt; `Err((true, _))`: a pack went away under it, try again.
fn fork_once(store: &Store, commit: ObjectId, branch: &str, dest: &Path) -> Result<ForkReport, (bool, String)> {
    let t = Instant::now();
    let fatal = |e: String| (false, e);
    let tmp = temp_for(dest, "forking", std::process::id());
    let _ = std::fs::remove_dir_all(&tmp);
    let r = build(store, commit, branch, &tmp);
    let mut rep = match r {
        Ok(rep) => rep,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    // Tests: the process dies here, as kill -9 would, with the new store
    // built but not in place (it must never be found under `dest`).
    if std::env::var_os("RINGFS_TEST_DIE_IN_FORK").is_some() {
        std::process::abort();
    }
    // Into place: an empty directory given as the destination goes first.
    if dest.is_dir() {
        std::fs::remove_dir(dest).map_err(|e| fatal(format!("{}: {e}", dest.display())))?;
    }
    if let Err(e) = std::fs::rename(&tmp, dest) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(fatal(format!("moving the new store to {}: {e}", dest.display())));
    }
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    sync_dir(parent).map_err(|e| fatal(format!("{}: {e}", parent.display())))?;
    rep.store = dest.to_path_buf();
    rep.elapsed = t.elapsed();
    let built: Duration = rep.phases.iter().map(|p| p.1).sum();
    rep.phases.push(("rename", rep.elapsed.saturating_sub(built)));
    Ok(rep)
}

fn build(store: &Store, commit: ObjectId, branch: &str, tmp: &Path) -> Result<ForkReport, (bool, String)> {
    let fatal = |e: String| (false, e);
    let io = |p: &Path, e: std::io::Error| (false, format!("{}: {e}", p.display()));
    let rtx = store.begin_read().map_err(|e| fatal(e.to_string()))?;
    // Every pack byte the read transaction's index points at is durable
    // before the fork records it (a later crash of the origin truncates
    // only past its last valid record).
    store.packs.sync().map_err(|e| fatal(format!("syncing {}: {e}", store.packs.dir().display())))?;
    let src_objects = crate::store::objects::read(&rtx, &store.packs).map_err(fatal)?;
    let src_chunks = rtx.open_table(CHUNKS).map_err(|e| fatal(e.to_string()))?;
    let src_packs = rtx.open_table(PACKS).map_err(|e| fatal(e.to_string()))?;
    let src_meta = rtx.open_table(META).map_err(|e| fatal(e.to_string()))?;
    let c = commit_obj(&src_objects, &commit).map_err(|e| fatal(e.to_string()))?;
    crate::private::create_dir(tmp).map_err(|e| io(tmp, e))?;
    for sub in ["packs", "wc"] {
        crate::private::create_dir(&tmp.join(sub)).map_err(|e| io(&tmp.join(sub), e))?;
    }
    let db = crate::store::db::open_db(tmp).map_err(|e| fatal(e.with_cause()))?;
    let mut txn = db.begin_write().map_err(|e| fatal(e.to_string()))?;
    txn.set_durability(Durability::Immediate).map_err(|e| fatal(e.to_string()))?;
    create_tables(&txn).map_err(|e| fatal(e.to_string()))?;
    let mut rep = ForkReport { commit: hex_id(&commit), branch: branch.to_string(), ..Default::default() };
    let mut mark = Instant::now();
    let mut phase = |rep: &mut ForkReport, name: &'static str| {
        rep.phases.push((name, mark.elapsed()));
        mark = Instant::now();
    };
    let ee = |e: redb::StorageError| fatal(e.to_string());
    // Every object of the origin (the new store's history, and what a
    // diff or a fork of it may name): its `object_index` row, the record
    // staying in the linked pack; their chunk entries count. Rows go in in
    // key order (the source's order), which fills redb's leaves (D62);
    // the records are then read in pack order (sequential reads).
    let mut uses: BTreeMap<[u8; 32], u64> = BTreeMap::new();
    let mut live: BTreeMap<u32, u64> = BTreeMap::new();
    let mut next_oidx = 0u64;
    {
        let mut index = txn.open_table(OBJECTS).map_err(|e| fatal(e.to_string()))?;
        let mut rows: Vec<(ObjectId, (u32, u64, u32))> = Vec::new();
        for r in src_objects.index.iter().map_err(ee)? {
            let (k, v) = r.map_err(ee)?;
            let Ok(id) = <ObjectId>::try_from(k.value()) else { continue };
            let row = v.value();
            index.insert(&id[..], row).map_err(ee)?;
            rows.push((id, row));
        }
        // The origin's object index files: hard-linked and recorded under
        // their numbers, not copied (D65); their entries count like rows.
        let mut files = txn.open_table(OBJECT_FILES).map_err(|e| fatal(e.to_string()))?;
        for f in src_objects.files() {
            let name = crate::store::oidx::file_name(f.n);
            let (from, to) = (store.packs.dir().join(&name), tmp.join("packs").join(&name));
            match std::fs::hard_link(&from, &to) {
                Ok(()) => {}
                // Rewritten by a gc since the read began: start again.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err((true, format!("{}: {e}", from.display()))),
                Err(e) => return Err(fatal(format!("linking {} to {}: {e}", from.display(), to.display()))),
            }
            files.insert(f.n, (f.len() as u64, f.file_len)).map_err(ee)?;
            next_oidx = next_oidx.max(f.n + 1);
            rows.extend(f.iter());
        }
        for (_, row) in &rows {
            *live.entry(row.0).or_default() += RECORD_HEADER + row.2 as u64;
        }
        rep.objects = rows.len() as u64;
        rows.sort_unstable_by_key(|(_, (pack, offset, _))| (*pack, *offset));
        // Neighbouring records in one read each (16 020 records: a few
        // hundred reads instead of one each).
        let locs: Vec<_> = rows.iter().map(|(_, (pack, offset, len))| crate::store::pack::Loc { pack: *pack, offset: *offset, len: *len }).collect();
        store
            .packs
            .read_many(&locs, |i, bytes| {
                // Damage is not copied into a new store (D71).
                crate::store::objects::check(&rows[i].0, locs[i], bytes)?;
                // A file manifest or manifest node counts the chunk entries
                // it holds itself (as the commit that stored it did).
                for h in crate::snap::manifest::own_chunks(bytes)? {
                    *uses.entry(h).or_default() += 1;
                }
                Ok::<(), String>(())
            })
            .map_err(|(i, e)| match e {
                Ok(e) => (e.kind() == std::io::ErrorKind::NotFound, format!("object {}: reading {}: {e}", hex_id(&rows[i].0), pack_name(rows[i].1 .0))),
                Err(m) => fatal(m),
            })?;
    }
    phase(&mut rep, "objects");
    // The tree itself is deferred (snap/lazy.rs): the root's record and
    // the marker naming the commit; its rows are written at the first
    // mount. Its directory objects are read here, to count and check them.
    let mut load = |id: &ObjectId| -> Result<Vec<u8>, String> {
        src_objects.need(id)
    };
    (rep.files, rep.dirs) = crate::snap::lazy::count(&mut load, &c).map_err(fatal)?;
    crate::snap::lazy::root_row(&txn, &root_rec_of(&c.root_meta)).map_err(fatal)?;
    phase(&mut rep, "tree");
    // The chunk index entries used, and the packs holding them (and the
    // objects); in key order, as above (a hash order left the leaves about
    // two-thirds full: 2.05 MiB of new disk where 1.67 do, D62).
    let (mut count, mut bytes) = (0u64, 0u64);
    {
        let mut chunks = txn.open_table(CHUNKS).map_err(|e| fatal(e.to_string()))?;
        let (mut remote_only, mut remote_bytes) = (0u64, 0u64);
        // The origin's entries: one ordered pass over its index when it is
        // not much larger than what the fork names (both in key order),
        // else a lookup each.
        let mut scan = if src_chunks.len().map_err(ee)? <= 4 * uses.len() as u64 { Some(src_chunks.iter().map_err(ee)?) } else { None };
        let mut cur: Option<(Vec<u8>, (u32, u64, u32, u64))> = None;
        for (h, n) in &uses {
            let found = match scan.as_mut() {
                None => src_chunks.get(&h[..]).map_err(ee)?.map(|g| g.value()),
                Some(it) => {
                    while cur.as_ref().is_none_or(|(k, _)| k.as_slice() < &h[..]) {
                        match it.next() {
                            Some(r) => {
                                let (k, v) = r.map_err(ee)?;
                                cur = Some((k.value().to_vec(), v.value()));
                            }
                            None => {
                                cur = None;
                                break;
                            }
                        }
                    }
                    cur.as_ref().filter(|(k, _)| k.as_slice() == &h[..]).map(|(_, v)| *v)
                }
            };
            let Some((pack, off, len, _)) = found else {
                return Err(fatal(format!("chunk {} named by the commit's objects is not in the origin's chunk index (run `ringfs fsck` on it)", hex(h))));
            };
            // A lazy clone's chunk not fetched yet (D51): in no pack, so
            // nothing a fork could share by hard link. Counted, refused below.
            if pack == crate::store::REMOTE_PACK {
                remote_only += 1;
                remote_bytes += len as u64;
                continue;
            }
            chunks.insert(&h[..], (pack, off, len, *n)).map_err(ee)?;
            *live.entry(pack).or_default() += RECORD_HEADER + len as u64;
            count += 1;
            bytes += len as u64;
        }
        if remote_only > 0 {
            return Err(fatal(format!(
                "the origin is a lazy clone: {remote_only} chunks ({remote_bytes} bytes) its commits name are still only on its remote, and a fork (or `mount --at`) shares only chunks in the origin's packs; mount the origin (`ringfs mount MOUNTPOINT --store DIR`) until `ringfs remote status` shows no chunk still only on the remote, or clone with --eager, then try again"
            )));
        }
        let mut packs = txn.open_table(PACKS).map_err(|e| fatal(e.to_string()))?;
        for (&id, &l) in &live {
            let Some((total, _, _)) = src_packs.get(id).map_err(ee)?.map(|g| g.value()) else {
                return Err(fatal(format!("pack {} is in the origin's chunk or object index but not its pack table (run `ringfs fsck` on it)", pack_name(id))));
            };
            let (from, to) = (store.packs.path(id), tmp.join("packs").join(pack_name(id)));
            match std::fs::hard_link(&from, &to) {
                Ok(()) => {}
                // Compacted away since the read began: start again.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err((true, format!("{}: {e}", from.display()))),
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                    return Err(fatal(format!("{} is on another filesystem than the origin's packs ({}): a fork shares them by hard link; give a place on the same filesystem", tmp.display(), from.display())))
                }
                Err(e) => return Err(fatal(format!("linking {} to {}: {e}", from.display(), to.display()))),
            }
            // Sealed for this store at the origin's committed length: the
            // origin may go on appending to the file (FORMATS "Shared packs").
            packs.insert(id, (total.max(HEADER_LEN), l, true)).map_err(ee)?;
            rep.packs_linked += 1;
        }
    }
    rep.chunks = count;
    phase(&mut rep, "chunks");
    let src_next_pack = src_meta.get("next_pack").map_err(ee)?.map(|g| g.value()).unwrap_or(0);
    let next_pack = src_next_pack.max(live.keys().next_back().map(|m| *m as u64 + 1).unwrap_or(0));
    {
        let mut m = txn.open_table(META).map_err(|e| fatal(e.to_string()))?;
        write_new_meta(&mut m, tmp, ROOT + 1, count, bytes, next_pack).map_err(ee)?;
        crate::snap::lazy::mark(&mut m, &commit).map_err(ee)?;
        let src_next_oidx = src_meta.get("next_oidx").map_err(ee)?.map(|g| g.value()).unwrap_or(0);
        if next_oidx.max(src_next_oidx) > 0 {
            m.insert("next_oidx", next_oidx.max(src_next_oidx)).map_err(ee)?;
        }
        let mut refs = txn.open_table(REFS).map_err(|e| fatal(e.to_string()))?;
        refs.insert(branch, &commit[..]).map_err(ee)?;
        refs.insert(HEAD_KEY, format!("ref: {branch}").as_bytes()).map_err(ee)?;
        refs.insert(BASE_KEY, &commit[..]).map_err(ee)?;
    }
    txn.commit().map_err(|e| fatal(e.to_string()))?;
    drop(db);
    crate::private::create(&tmp.join("ringfs.lock")).map_err(|e| io(tmp, e))?;
    // The linked packs and object index files are the origin's inodes,
    // with the origin's modes: an origin made by an earlier version shares
    // 0644 files, made private here (D87; the origin's names too, as the
    // next open of the origin would).
    crate::private::make_private(tmp).map_err(|e| io(tmp, e))?;
    // The links in packs/ and the entries of the store directory (wc/ is
    // empty: its entry in the store directory is what must last).
    for d in [tmp.join("packs"), tmp.to_path_buf()] {
        sync_dir(&d).map_err(|e| io(&d, e))?;
    }
    phase(&mut rep, "commit");
    rep.new_bytes = dir_bytes(tmp, true);
    Ok(rep)
}

/// Bytes of the files under `dir` (packs left out when `skip_packs`:
/// they are links to the origin's).
fn dir_bytes(dir: &Path, skip_packs: bool) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                if !(skip_packs && e.file_name() == "packs") {
                    n += dir_bytes(&e.path(), false);
                }
            } else {
                use std::os::unix::fs::MetadataExt;
                n += m.blocks() * 512;
            }
        }
    }
    n
}

/// The commit and branch a fork of `at` starts from: `None` is the
/// checked-out branch's head (and that branch), a branch name its head
/// (and that branch), a commit id (or a unique start) that commit on
/// `main`. Errors: as [`crate::snap::refs::resolve_commit`],
/// [`SnapError::NoCommits`].
pub(crate) fn fork_point(store: &Store, at: Option<&str>) -> Result<(ObjectId, String), SnapError> {
    let rtx = store.begin_read().map_err(se)?;
    let refs = rtx.open_table(REFS).map_err(se)?;
    match at {
        None => {
            let b = crate::snap::refs::head_branch(&refs)?;
            let id = crate::snap::refs::ref_id(&refs, &b)?.ok_or(SnapError::NoCommits)?;
            Ok((id, b))
        }
        Some(name) => {
            let objects = crate::store::objects::read(&rtx, &store.packs).map_err(SnapError::Store)?;
            let id = crate::snap::refs::resolve_commit(&refs, &objects, name)?;
            let branch = if name == HEAD_KEY {
                crate::snap::refs::head_branch(&refs)?
            } else if name != BASE_KEY && crate::snap::refs::ref_id(&refs, name)?.is_some() {
                name.to_string()
            } else {
                crate::snap::MAIN.to_string()
            };
            Ok((id, branch))
        }
    }
}

/// `ringfs fork --store DIR[@AT] --to NEWMNT --store NEWDIR` on an
/// unmounted store: [`fork_point`] and [`fork_from`] with its lock held.
pub fn fork_store(dir: &Path, at: Option<&str>, dest: &Path) -> Result<ForkReport, crate::snap::refs::BranchStoreError> {
    use crate::snap::refs::BranchStoreError as E;
    check_dest(dest).map_err(|e| E::Snap(SnapError::Store(e)))?;
    let store = crate::snap::refs::open_offline(dir).map_err(E::Store)?;
    let r = fork_point(&store, at).and_then(|(id, b)| fork_from(&store, id, &b, dest)).map_err(E::Snap);
    store.release_lock();
    r
}

/// The `meta` rows of a store made from a commit (fork, clone): schema,
/// a fresh `store_id` (from the time, the pid and the directory `tmp` being
/// built), `next_ino`, clean, chunk count and bytes, `next_pack`, and
/// `snap_pos` 0 (no journal yet).
pub(crate) fn write_new_meta(
    m: &mut redb::Table<&str, u64>,
    tmp: &Path,
    next_ino: u64,
    chunk_count: u64,
    chunk_bytes: u64,
    next_pack: u64,
) -> Result<(), redb::StorageError> {
    let seed = format!("{:?}{}{}", std::time::SystemTime::now(), std::process::id(), tmp.display());
    let id = u64::from_le_bytes(blake3::hash(seed.as_bytes()).as_bytes()[..8].try_into().unwrap());
    for (k, v) in [
        ("schema", SCHEMA_VERSION),
        ("store_id", id),
        ("next_ino", next_ino),
        ("clean", 1),
        ("chunk_count", chunk_count),
        ("chunk_bytes", chunk_bytes),
        ("next_pack", next_pack),
        ("snap_pos", 0),
    ] {
        m.insert(k, v)?;
    }
    Ok(())
}

/// Writes a deferred tree (`snap::lazy`) into the live tables of `txn`
/// (which must hold no synced inode but the root), adds the live manifests' chunk
/// references, sets `next_ino` and removes the marker. `None`: the store
/// had no deferred tree (nothing written). Errors: a missing or
/// undecodable object, a chunk missing from the index, redb (as text).
pub(crate) fn write_deferred(txn: &WriteTransaction, packs: &Packs) -> Result<Option<Written>, String> {
    let e = |x: redb::Error| x.to_string();
    let Some(c) = crate::snap::lazy::pending(&txn.open_table(META).map_err(|x| e(x.into()))?)? else { return Ok(None) };
    let w = {
        let objects = crate::store::objects::read_in(txn, packs)?;
        let commit = commit_obj(&objects, &c).map_err(|x| format!("the deferred tree's commit {}: {x}", hex_id(&c)))?;
        let mut load = |id: &ObjectId| -> Result<Vec<u8>, String> { objects.need(id) };
        // Numbered and timed as a mount serves it before (snap/overlay.rs).
        write_tree(txn, &mut load, &commit, ROOT + 1, crate::snap::overlay::tree_time(&commit))?
    };
    {
        let mut chunks = txn.open_table(CHUNKS).map_err(|x| e(x.into()))?;
        for (h, n) in &w.uses {
            let Some((p, o, l, r)) = chunks.get(&h[..]).map_err(|x| e(x.into()))?.map(|g| g.value()) else {
                return Err(format!("chunk {} of the deferred tree is not in the chunk index (run `ringfs fsck`)", hex(h)));
            };
            chunks.insert(&h[..], (p, o, l, r + n)).map_err(|x| e(x.into()))?;
        }
        let mut m = txn.open_table(META).map_err(|x| e(x.into()))?;
        let next = m.get("next_ino").map_err(|x| e(x.into()))?.map(|g| g.value()).unwrap_or(2);
        m.insert("next_ino", next.max(w.next_ino)).map_err(|x| e(x.into()))?;
        m.remove(crate::snap::lazy::LAZY_KEY).map_err(|x| e(x.into()))?;
        for k in crate::snap::lazy::BASE_KEYS {
            m.remove(k).map_err(|x| e(x.into()))?;
        }
    }
    Ok(Some(w))
}

/// What a mount keeps of a deferred tree beside its nodes: each regular
/// file's manifest object, for its content until the rows are written.
pub(crate) struct Deferred {
    files: crate::snap::overlay::FileMap,
}

impl crate::store::db::DeferredTree for Deferred {
    fn write(&self, store: &crate::store::db::Store, txn: &redb::WriteTransaction) -> Result<bool, String> {
        Ok(crate::snap::materialize::write_deferred(txn, &store.packs)?.is_some())
    }

    fn chunks(&self, store: &crate::store::db::Store, rtx: &redb::ReadTransaction, ino: u64) -> Result<Option<Vec<crate::schema::ChunkRef>>, String> {
        let Some(fid) = self.files.get(&ino) else { return Ok(None) };
        let meta = rtx.open_table(crate::schema::META).map_err(|e| e.to_string())?;
        if crate::snap::lazy::pending(&meta)?.is_none() {
            return Ok(None);
        }
        let objects = crate::store::objects::read(rtx, &store.packs)?;
        let b = objects.need(fid)?;
        let f = crate::snap::manifest::read_file(&b, &mut |n: &ObjectId| objects.need(n)).map_err(|x| format!("file object {}: {x}", hex_id(fid)))?;
        Ok(Some(f.chunks))
    }

    fn blocks(&self, store: &crate::store::db::Store, rtx: &redb::ReadTransaction, inos: &[u64]) -> Result<Vec<Option<u64>>, String> {
        let meta = rtx.open_table(crate::schema::META).map_err(|e| e.to_string())?;
        if crate::snap::lazy::pending(&meta)?.is_none() {
            return Ok(vec![None; inos.len()]);
        }
        let objects = crate::store::objects::read(rtx, &store.packs)?;
        let mut out = Vec::with_capacity(inos.len());
        for ino in inos {
            let Some(fid) = self.files.get(ino) else {
                out.push(None);
                continue;
            };
            let b = objects.need(fid)?;
            let f = crate::snap::manifest::read_file(&b, &mut |n: &ObjectId| objects.need(n)).map_err(|x| format!("file object {}: {x}", hex_id(fid)))?;
            out.push(Some(crate::schema::data_blocks(&f.chunks)));
        }
        Ok(out)
    }
}

/// The deferred tree of the store in `db` (whose packs are `packs`), read
/// from its commit's objects for a mount: its nodes for the load, and what
/// the store keeps. `None`: the store has no deferred tree. Errors: a
/// format version this build does not know, a missing or undecodable
/// object, redb (as text).
pub(crate) fn read_base(db: &redb::Database, packs: &crate::store::pack::Packs) -> Result<Option<(crate::store::recovery::BaseNodes, Deferred)>, String> {
    use redb::ReadableDatabase;
    read_base_in(&db.begin_read().map_err(|e| e.to_string())?, packs)
}

/// [`read_base`] in read transaction `rtx` (the mount's check reads it
/// beside the tables, over packs opened read-only: D70).
pub(crate) fn read_base_in(rtx: &redb::ReadTransaction, packs: &crate::store::pack::Packs) -> Result<Option<(crate::store::recovery::BaseNodes, Deferred)>, String> {
    let meta = match rtx.open_table(crate::schema::META) {
        Ok(m) => m,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let Some(c) = crate::snap::lazy::pending(&meta)? else { return Ok(None) };
    let t0 = Instant::now();
    let objects = crate::store::objects::read(rtx, packs)?;
    let t_index = t0.elapsed();
    let commit = crate::snap::refs::commit_obj(&objects, &c).map_err(|x| format!("the deferred tree's commit {}: {x}", hex_id(&c)))?;
    let t = crate::snap::overlay::load_base(&mut |id: &ObjectId| objects.need(id), &commit)?;
    tracing::info!(
        "fork's tree served from commit {} ({} files, {} directories, read from its objects in {:.1} ms, {:.1} ms of it the object index): no rows written until its first change",
        hex_id(&c),
        t.files.len(),
        t.dirs,
        t0.elapsed().as_secs_f64() * 1000.0,
        t_index.as_secs_f64() * 1000.0
    );
    let nodes = crate::store::recovery::BaseNodes { nodes: t.nodes, files: t.files.keys().copied().collect(), next_ino: t.next_ino };
    Ok(Some((nodes, Deferred { files: t.files })))
}
