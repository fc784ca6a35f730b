//! Moving snapshot history between a store and somewhere else, without
//! knowing where: [`Transfer`] reads what a push sends (the objects and
//! chunks a branch head needs that the other side lacks, children before
//! parents) and answers ancestry questions; [`import_into`] adds fetched
//! objects and chunk bundles to an unmounted store and fast-forwards a
//! branch; [`build_clone`] makes a new store from them. A bundle is a file
//! in pack format v1 (docs/FORMATS.md), added as a sealed pack unchanged.
//!
//! Owns: the walk of what a commit needs, adding bundles as packs. Must
//! not know: transports, keys and the remote layout (the `ringfs` binary's
//! `remote` module, docs/FORMATS.md "Remote layout").

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use redb::{Durability, ReadableTable};

use crate::inode::ROOT;
use crate::schema::*;
use crate::snap::manifest::{child_nodes, own_chunks, KIND_NODE};
use crate::snap::materialize::{check_dest, sync_dir, write_new_meta, write_tree};
use crate::snap::object::*;
use crate::snap::refs::{
    branch_names, commit_obj, head_branch, list, open_offline, ref_id, BranchInfo, BranchStoreError, BASE_KEY,
    HEAD_KEY,
};
use crate::snap::{se, SnapError};
use crate::store::db::Store;
use crate::store::pack::{pack_name, scan_pack, Loc, RECORD_HEADER};

/// The ids an encoded object names: (objects, chunks it holds itself).
/// Commits name their root and parents, directories their entries' objects,
/// file manifests and nodes their child nodes and chunks. Errors: the
/// object does not decode (one line).
pub fn children(b: &[u8]) -> Result<(Vec<ObjectId>, Vec<ObjectId>), String> {
    Ok(match kind_of(b)? {
        KIND_COMMIT => {
            let c = dec_commit(b)?;
            let mut v = vec![c.root];
            v.extend(c.parents);
            (v, Vec::new())
        }
        KIND_DIR => (
            dec_dir(b)?
                .entries
                .into_iter()
                .filter_map(|e| {
                    if let Target::Object(id) = e.target {
                        Some(id)
                    } else {
                        None
                    }
                })
                .collect(),
            Vec::new(),
        ),
        KIND_FILE | KIND_NODE => (child_nodes(b)?, own_chunks(b)?),
        k => return Err(format!("unknown object kind {k}")),
    })
}

/// What a push of one branch sends: objects in post-order (an object after
/// everything it names), and the chunks they name, with where they are.
#[derive(Debug, Default)]
pub struct Outgoing {
    pub branch: String,
    pub head: ObjectId,
    /// The head's depth in its history (a root commit 1).
    pub height: u64,
    pub objects: Vec<(ObjectId, Vec<u8>)>,
    pub chunks: Vec<(ObjectId, Loc)>,
}

impl Outgoing {
    /// Bytes of the objects and chunks to send.
    pub fn bytes(&self) -> u64 {
        self.objects.iter().map(|o| o.1.len() as u64).sum::<u64>()
            + self.chunks.iter().map(|c| c.1.len as u64).sum::<u64>()
    }
}

/// Read access to a store's history for a transfer (a mounted store's, or
/// an unmounted one's through [`Offline`]).
pub struct Transfer<'a> {
    pub(crate) store: &'a Store,
}

/// An unmounted store opened for a transfer, its lock held until dropped.
pub struct Offline {
    store: Store,
    dir: PathBuf,
}

impl Offline {
    /// Opens the unmounted store `dir` (its lock taken). Errors: as
    /// `ringfs branch --store` (busy, damaged, an older schema).
    pub fn open(dir: &Path) -> Result<Offline, BranchStoreError> {
        Ok(Offline {
            store: open_offline(dir).map_err(BranchStoreError::Store)?,
            dir: dir.to_path_buf(),
        })
    }
    pub fn transfer(&self) -> Transfer<'_> {
        Transfer { store: &self.store }
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Offline {
    fn drop(&mut self) {
        self.store.release_lock();
    }
}

impl Transfer<'_> {
    /// The branches (name, head hex, checked out).
    pub fn branches(&self) -> Result<Vec<BranchInfo>, SnapError> {
        let rtx = self.store.begin_read().map_err(se)?;
        list(&rtx.open_table(REFS).map_err(se)?)
    }

    /// The checked-out branch and a branch's head (None: no such branch).
    pub fn head(&self, branch: Option<&str>) -> Result<(String, Option<ObjectId>), SnapError> {
        let rtx = self.store.begin_read().map_err(se)?;
        let refs = rtx.open_table(REFS).map_err(se)?;
        let b = match branch {
            Some(b) => b.to_string(),
            None => head_branch(&refs)?,
        };
        let id = ref_id(&refs, &b)?;
        Ok((b, id))
    }

    /// An object's bytes, if stored.
    pub fn object(&self, id: &ObjectId) -> Result<Option<Vec<u8>>, SnapError> {
        let rtx = self.store.begin_read().map_err(se)?;
        crate::store::objects::read(&rtx, &self.store.packs).and_then(|o| o.get(id)).map_err(SnapError::Store)
    }

    /// Whether chunk `id` is in the chunk index.
    pub fn has_chunk(&self, id: &ObjectId) -> Result<bool, SnapError> {
        let rtx = self.store.begin_read().map_err(se)?;
        let t = rtx.open_table(CHUNKS).map_err(se)?;
        let v = t.get(&id[..]).map_err(se)?.is_some();
        Ok(v)
    }

    /// Whether `anc` is `of` or one of its ancestors (commits stored here;
    /// a commit not stored here is nobody's ancestor).
    pub fn is_ancestor(&self, anc: &ObjectId, of: &ObjectId) -> Result<bool, SnapError> {
        let rtx = self.store.begin_read().map_err(se)?;
        let objects = crate::store::objects::read(&rtx, &self.store.packs).map_err(SnapError::Store)?;
        let mut seen = HashSet::new();
        let mut stack = vec![*of];
        while let Some(c) = stack.pop() {
            if &c == anc {
                return Ok(true);
            }
            if !seen.insert(c) {
                continue;
            }
            if !objects.contains(&c).map_err(SnapError::Store)? {
                continue;
            }
            stack.extend(commit_obj(&objects, &c)?.parents);
        }
        Ok(false)
    }

    /// A commit's height: 1 + the greatest height of its parents (1 for a
    /// root commit), over the commits stored here.
    pub fn height(&self, head: &ObjectId) -> Result<u64, SnapError> {
        let rtx = self.store.begin_read().map_err(se)?;
        let objects = crate::store::objects::read(&rtx, &self.store.packs).map_err(SnapError::Store)?;
        let mut h: HashMap<ObjectId, u64> = HashMap::new();
        let mut stack = vec![(*head, false)];
        while let Some((c, done)) = stack.pop() {
            if h.contains_key(&c) {
                continue;
            }
            if !objects.contains(&c).map_err(SnapError::Store)? {
                h.insert(c, 0);
                continue;
            }
            let parents = commit_obj(&objects, &c)?.parents;
            if done {
                let m = parents
                    .iter()
                    .map(|p| h.get(p).copied().unwrap_or(0))
                    .max()
                    .unwrap_or(0);
                h.insert(c, m + 1);
            } else {
                stack.push((c, true));
                stack.extend(
                    parents
                        .into_iter()
                        .filter(|p| !h.contains_key(p))
                        .map(|p| (p, false)),
                );
            }
        }
        Ok(h[head])
    }

    /// What `branch` (None: the checked-out one) needs that `held` says the
    /// other side lacks: `held(b'o', id)` for objects, `held(b'c', id)` for
    /// chunks. An object held is taken to have everything it names held
    /// too (pushes send children first). Errors: [`SnapError::NoCommits`]
    /// (the branch has no head), a missing object or chunk (run fsck).
    pub fn outgoing(
        &self,
        branch: Option<&str>,
        held: &dyn Fn(u8, &ObjectId) -> bool,
    ) -> Result<Outgoing, SnapError> {
        let given = branch.is_some();
        let (branch, head) = self.head(branch)?;
        let head = match head {
            Some(h) => h,
            // A branch asked for by name that does not exist: say so, with the branches there are.
            None if given => {
                let rtx = self.store.begin_read().map_err(se)?;
                let refs = rtx.open_table(REFS).map_err(se)?;
                let candidates = branch_names(&refs)?;
                if candidates.is_empty() {
                    return Err(SnapError::NoCommits);
                }
                return Err(SnapError::Unknown { name: branch, candidates });
            }
            None => return Err(SnapError::NoCommits),
        };
        let height = self.height(&head)?;
        let rtx = self.store.begin_read().map_err(se)?;
        let objects = crate::store::objects::read(&rtx, &self.store.packs).map_err(SnapError::Store)?;
        let chunks = rtx.open_table(CHUNKS).map_err(se)?;
        let mut out = Outgoing {
            branch,
            head,
            height,
            ..Default::default()
        };
        let mut entered: HashSet<ObjectId> = HashSet::new();
        let mut queued: HashSet<ObjectId> = HashSet::new();
        let mut stack: Vec<(ObjectId, Option<Vec<u8>>)> = vec![(head, None)];
        while let Some((id, bytes)) = stack.pop() {
            if let Some(b) = bytes {
                for h in children(&b)
                    .map_err(|e| SnapError::Store(format!("object {}: {e}", hex_id(&id))))?
                    .1
                {
                    if !held(b'c', &h) && queued.insert(h) {
                        let Some((pack, offset, len, _)) =
                            chunks.get(&h[..]).map_err(se)?.map(|g| g.value())
                        else {
                            return Err(SnapError::Store(format!("chunk {} of object {} is not in the chunk index (run `ringfs fsck`)", hex(&h), hex_id(&id))));
                        };
                        out.chunks.push((h, Loc { pack, offset, len }));
                    }
                }
                out.objects.push((id, b));
                continue;
            }
            if held(b'o', &id) || !entered.insert(id) {
                continue;
            }
            let Some(b) = objects.get(&id).map_err(SnapError::Store)? else {
                return Err(SnapError::Store(format!(
                    "object {} is reachable but missing (run `ringfs fsck`)",
                    hex_id(&id)
                )));
            };
            let kids = children(&b)
                .map_err(|e| SnapError::Store(format!("object {}: {e}", hex_id(&id))))?
                .0;
            stack.push((id, Some(b)));
            stack.extend(
                kids.into_iter()
                    .filter(|k| !entered.contains(k) && !held(b'o', k))
                    .map(|k| (k, None)),
            );
        }
        Ok(out)
    }

    /// A chunk's bytes (located again if a compaction moved it).
    pub fn chunk(&self, id: &ObjectId, loc: Loc) -> Result<Vec<u8>, SnapError> {
        let mut buf = Vec::new();
        match self.store.packs.read(loc, &mut buf) {
            Ok(()) if id_of(&buf) == *id => return Ok(buf),
            _ => {}
        }
        let rtx = self.store.begin_read().map_err(se)?;
        let chunks = rtx.open_table(CHUNKS).map_err(se)?;
        let Some((pack, offset, len, _)) = chunks.get(&id[..]).map_err(se)?.map(|g| g.value())
        else {
            return Err(SnapError::Store(format!(
                "chunk {} is not in the chunk index any more",
                hex(id)
            )));
        };
        self.store
            .packs
            .read(Loc { pack, offset, len }, &mut buf)
            .map_err(|e| SnapError::Store(format!("reading chunk {}: {e}", hex(id))))?;
        if id_of(&buf) != *id {
            return Err(SnapError::Store(format!(
                "chunk {} in pack {} does not match its hash (run `ringfs fsck`)",
                hex(id),
                pack_name(pack)
            )));
        }
        Ok(buf)
    }
}

/// Remote-only chunks of a lazy clone ([`crate::store::remote`]).
impl Transfer<'_> {
    /// Installs where this store's remote-only chunks come from (once per
    /// process; false if one was installed already).
    pub fn set_chunk_source(&self, src: std::sync::Arc<dyn crate::store::remote::ChunkSource>) -> bool {
        self.store.remote.source.set(src).is_ok()
    }

    /// Every remote-only chunk of this store: (hash, length).
    pub fn remote_only(&self) -> Result<Vec<([u8; 32], u32)>, SnapError> {
        self.store.remote_only().map_err(se)
    }

    /// Fetches the still remote-only chunks of `want` (hash, length) into
    /// the local packs, durable with the next group commit (see
    /// [`crate::store::remote::ChunkSource`]). Returns how many were
    /// stored. Errors: one line (no source, the source's error, a hash
    /// mismatch, the store's).
    pub fn fetch_remote(&self, want: &[([u8; 32], u32)]) -> Result<u64, String> {
        self.store.fetch_remote(want)
    }

    /// Stores chunks fetched from the remote (hash, bytes; e.g. a
    /// background prefetch's batch): each is checked against its hash, and
    /// those matching and still remote-only move into the local packs in
    /// one transaction, durable with the next group commit. Returns how
    /// many were stored and the hashes that did not match (not stored).
    /// Errors: one line (the store's).
    pub fn store_remote_chunks(&self, got: &[([u8; 32], bytes::Bytes)]) -> Result<(u64, Vec<[u8; 32]>), String> {
        self.store.store_fetched(got)
    }

    /// Chunks and bytes fetched from the remote since the store was opened.
    pub fn remote_fetched(&self) -> (u64, u64) {
        (
            self.store.remote.fetched.load(std::sync::atomic::Ordering::Relaxed),
            self.store.remote.fetched_bytes.load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

/// What [`import_into`] or [`build_clone`] did.
#[derive(Clone, Debug, Default)]
pub struct ImportReport {
    pub objects: u64,
    pub chunks: u64,
    pub packs: u64,
    /// The live tree was moved to the new head (its branch is checked out
    /// and had no uncommitted change).
    pub live_updated: bool,
    pub files: u64,
}

/// Scans bundle `path` (pack format v1): each valid record's hash, offset
/// of its bytes and length, and the valid length. Errors: I/O, not a pack,
/// or a torn or corrupt record (`what` names the bundle).
fn scan_bundle(path: &Path, what: &str) -> Result<(Vec<(ObjectId, u64, u32)>, u64), String> {
    let mut recs = Vec::new();
    let valid = scan_pack(path, |off, h, b| recs.push((*h, off, b.len() as u32)))
        .map_err(|e| format!("{what}: {e}"))?;
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{what}: {e}"))?
        .len();
    if valid != len {
        return Err(format!(
            "{what}: a record at byte {valid} does not match its hash"
        ));
    }
    Ok((recs, len))
}

/// Moves bundles into `packs_dir` as packs numbered from `next`, and
/// indexes the chunks in `want` not yet in `have` (the first copy wins).
/// Returns the new packs (id, total) and the chunks (hash → location).
fn place_bundles(
    bundles: &[PathBuf],
    packs_dir: &Path,
    mut next: u32,
    want: &HashSet<ObjectId>,
    have: &dyn Fn(&ObjectId) -> bool,
) -> Result<(Vec<(u32, u64, u64)>, HashMap<ObjectId, Loc>), String> {
    let mut packs = Vec::new();
    let mut locs: HashMap<ObjectId, Loc> = HashMap::new();
    for b in bundles {
        let (recs, len) = scan_bundle(b, &b.display().to_string())?;
        let mut live = 0u64;
        let id = next;
        for (h, off, l) in recs {
            if want.contains(&h) && !have(&h) && !locs.contains_key(&h) {
                locs.insert(
                    h,
                    Loc {
                        pack: id,
                        offset: off,
                        len: l,
                    },
                );
                live += RECORD_HEADER + l as u64;
            }
        }
        if live == 0 {
            continue;
        }
        let to = packs_dir.join(pack_name(id));
        std::fs::rename(b, &to)
            .map_err(|e| format!("moving {} to {}: {e}", b.display(), to.display()))?;
        // A pack of the store: 0600 (D87), as fetched or not.
        crate::private::restrict(&to).map_err(|e| format!("{}: {e}", to.display()))?;
        std::fs::File::open(&to)
            .and_then(|f| f.sync_all())
            .map_err(|e| format!("{}: {e}", to.display()))?;
        packs.push((id, len, live));
        next += 1;
    }
    sync_dir(packs_dir).map_err(|e| format!("{}: {e}", packs_dir.display()))?;
    Ok((packs, locs))
}

/// Every chunk the objects hold themselves, counted per object.
fn chunk_uses(objects: &[(ObjectId, Vec<u8>)]) -> Result<HashMap<ObjectId, u64>, String> {
    let mut uses: HashMap<ObjectId, u64> = HashMap::new();
    for (id, b) in objects {
        for h in own_chunks(b).map_err(|e| format!("object {}: {e}", hex_id(id)))? {
            *uses.entry(h).or_default() += 1;
        }
    }
    Ok(uses)
}

/// Adds fetched `objects` (each checked against its id) and chunk
/// `bundles` (pack format v1 files, moved into the store as sealed packs;
/// only the chunks the new objects name are indexed) to the unmounted
/// store `off`, then moves `branch` from `old` to `new` in the same
/// durable transaction. When `branch` is checked out and the live tree is
/// its old head's tree, the live tree becomes the new head's (as `mount
/// --branch` does); otherwise the live tree is left as it is (a commit
/// then reports "head moved"). Errors: the branch is not at `old` any
/// more, an object does not match its id, a chunk is missing, the store's.
pub fn import_into(
    off: &Offline,
    objects: Vec<(ObjectId, Vec<u8>)>,
    bundles: &[PathBuf],
    branch: &str,
    old: Option<ObjectId>,
    new: ObjectId,
) -> Result<ImportReport, SnapError> {
    let store = &off.store;
    for (id, b) in &objects {
        if id_of(b) != *id {
            return Err(SnapError::Store(format!(
                "object {} does not match its hash",
                hex_id(id)
            )));
        }
    }
    let mut rep = ImportReport::default();
    let mut txn = store.begin_write().map_err(se)?;
    txn.set_durability(Durability::Immediate).map_err(se)?;
    {
        let refs = txn.open_table(REFS).map_err(se)?;
        if ref_id(&refs, branch)? != old {
            return Err(SnapError::Store(format!(
                "branch {branch} moved in this store during the pull: pull again"
            )));
        }
    }
    let mut fresh = Vec::new();
    {
        let t = crate::store::objects::read_in(&txn, &store.packs).map_err(SnapError::Store)?;
        for (id, b) in objects {
            if !t.contains(&id).map_err(SnapError::Store)? {
                fresh.push((id, b));
            }
        }
    }
    let uses = chunk_uses(&fresh).map_err(SnapError::Store)?;
    let want: HashSet<ObjectId> = uses.keys().copied().collect();
    let next = meta_get(&txn, "next_pack").map_err(se)?.unwrap_or(0) as u32;
    let (packs, locs) = {
        let chunks = txn.open_table(CHUNKS).map_err(se)?;
        let have = |h: &ObjectId| chunks.get(&h[..]).ok().flatten().is_some();
        place_bundles(bundles, &off.dir.join("packs"), next, &want, &have)
            .map_err(SnapError::Store)?
    };
    {
        let mut chunks = txn.open_table(CHUNKS).map_err(se)?;
        let (mut dc, mut db) = (0i64, 0i64);
        for (h, n) in &uses {
            let cur = chunks.get(&h[..]).map_err(se)?.map(|g| g.value());
            let v = match (cur, locs.get(h)) {
                (Some((p, o, l, r)), _) => (p, o, l, r + n),
                (None, Some(loc)) => {
                    dc += 1;
                    db += loc.len as i64;
                    (loc.pack, loc.offset, loc.len, *n)
                }
                (None, None) => {
                    return Err(SnapError::Store(format!(
                        "chunk {} named by a fetched object was in no fetched bundle",
                        hex(h)
                    )))
                }
            };
            chunks.insert(&h[..], v).map_err(se)?;
        }
        rep.chunks = dc as u64;
        drop(chunks);
        bump_chunk_counters(&txn, dc, db).map_err(se)?;
        let mut pt = txn.open_table(PACKS).map_err(se)?;
        for (id, total, live) in &packs {
            pt.insert(*id, (*total, *live, true)).map_err(se)?;
        }
        rep.packs = packs.len() as u64;
        drop(pt);
        {
            let mut m = txn.open_table(META).map_err(se)?;
            if !packs.is_empty() {
                m.insert("next_pack", (next as u64) + packs.len() as u64)
                    .map_err(se)?;
            }
        }
        // The new objects: one more sealed pack, after the bundles'.
        let at = next + packs.len() as u32;
        rep.objects = crate::store::objects::put_as_pack(&txn, &off.dir.join("packs"), at, &fresh)
            .map_err(SnapError::Store)?;
        rep.packs += (rep.objects > 0) as u64;
        commit_obj(&crate::store::objects::read_in(&txn, &store.packs).map_err(SnapError::Store)?, &new)?;
        txn.open_table(REFS)
            .map_err(se)?
            .insert(branch, &new[..])
            .map_err(se)?;
    }
    txn.commit().map_err(se)?;
    // The live tree follows when it was exactly the old head's.
    let (cur, base) = {
        let rtx = store.begin_read().map_err(se)?;
        let refs = rtx.open_table(REFS).map_err(se)?;
        (head_branch(&refs)?, ref_id(&refs, BASE_KEY)?)
    };
    if cur == branch && base == old && old != Some(new) {
        match crate::snap::switch::refresh(store, &off.dir, branch) {
            Ok(r) => {
                rep.live_updated = r.switched;
                rep.files = r.files;
            }
            Err(SnapError::Dirty { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(rep)
}

/// Removes the build directories (`.NAME.cloning-PID`) that clones into
/// `dest` killed before their rename left, as a fork's leftovers are
/// (`materialize::sweep`): those whose process is gone. `ringfs clone`
/// calls it before it fetches; [`build_clone`] again.
pub fn sweep_clones(dest: &Path) {
    crate::snap::materialize::sweep(dest, "cloning");
}

/// Makes a new store at `dest` on `branch` at commit `head` from fetched
/// `objects` (everything `head` reaches; each checked against its id) and
/// chunk `bundles` (moved in as sealed packs), built beside `dest` and
/// renamed into place, as a fork is (docs/FORMATS.md "fork"). A chunk in
/// no bundle but in `remote_only` (hash → length) is indexed as
/// remote-only (a lazy clone, [`crate::store::remote`]). `prepare` is
/// called with the new store's directory before it is renamed into place
/// (the caller's records, e.g. `remotes/NAME/`). Errors: the destination
/// (as a fork's), a missing object or chunk, `prepare`'s, I/O.
pub fn build_clone(
    dest: &Path,
    objects: Vec<(ObjectId, Vec<u8>)>,
    bundles: &[PathBuf],
    branch: &str,
    head: ObjectId,
    remote_only: &HashMap<ObjectId, u32>,
    prepare: &dyn Fn(&Path) -> Result<(), String>,
) -> Result<ImportReport, SnapError> {
    check_dest(dest).map_err(SnapError::Store)?;
    sweep_clones(dest);
    let tmp = crate::snap::materialize::temp_for(dest, "cloning", std::process::id());
    let _ = std::fs::remove_dir_all(&tmp);
    // Private to its owner (D87), bundles fetched by an earlier version
    // included.
    let r = clone_into(&tmp, objects, bundles, branch, head, remote_only)
        .and_then(|r| prepare(&tmp).map(|()| r))
        .and_then(|r| crate::private::make_private(&tmp).map(|_| r).map_err(|e| format!("{}: {e}", tmp.display())));
    let rep = match r {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(SnapError::Store(crate::snap::materialize::if_full(dest, "building the new store", e)));
        }
    };
    // Tests: the process dies here, as kill -9 would, with the new store
    // built but not in place (the next clone there removes it).
    if std::env::var_os("RINGFS_TEST_DIE_IN_CLONE").is_some() {
        std::process::abort();
    }
    if dest.is_dir() {
        std::fs::remove_dir(dest)
            .map_err(|e| SnapError::Store(format!("{}: {e}", dest.display())))?;
    }
    if let Err(e) = std::fs::rename(&tmp, dest) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(SnapError::Store(format!(
            "moving the new store to {}: {e}",
            dest.display()
        )));
    }
    let parent = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    sync_dir(parent).map_err(|e| SnapError::Store(format!("{}: {e}", parent.display())))?;
    Ok(rep)
}

fn clone_into(
    tmp: &Path,
    objects: Vec<(ObjectId, Vec<u8>)>,
    bundles: &[PathBuf],
    branch: &str,
    head: ObjectId,
    remote_only: &HashMap<ObjectId, u32>,
) -> Result<ImportReport, String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    for (id, b) in &objects {
        if id_of(b) != *id {
            return Err(format!("object {} does not match its hash", hex_id(id)));
        }
    }
    crate::private::create_dir(tmp).map_err(|e| io(tmp, e))?;
    for sub in ["packs", "wc"] {
        crate::private::create_dir(&tmp.join(sub)).map_err(|e| io(&tmp.join(sub), e))?;
    }
    let mut rep = ImportReport::default();
    let mut uses = chunk_uses(&objects)?;
    let map: HashMap<ObjectId, Vec<u8>> = objects.into_iter().collect();
    let db = crate::store::db::open_db(tmp).map_err(|e| e.with_cause())?;
    let mut txn = db.begin_write().map_err(|e| e.to_string())?;
    txn.set_durability(Durability::Immediate)
        .map_err(|e| e.to_string())?;
    create_tables(&txn).map_err(|e| e.to_string())?;
    rep.objects = map.len() as u64;
    let c = dec_commit(
        map.get(&head)
            .ok_or_else(|| format!("commit {} was not fetched", hex_id(&head)))?,
    )?;
    let mut load = |id: &ObjectId| -> Result<Vec<u8>, String> {
        map.get(id)
            .cloned()
            .ok_or_else(|| format!("object {} is missing from the remote", hex_id(id)))
    };
    let w = write_tree(&txn, &mut load, &c, ROOT + 1, crate::posix::now())?;
    rep.files = w.files;
    for (h, n) in w.uses {
        *uses.entry(h).or_default() += n;
    }
    let want: HashSet<ObjectId> = uses.keys().copied().collect();
    let (packs, locs) = place_bundles(bundles, &tmp.join("packs"), 0, &want, &|_| false)?;
    let (mut count, mut bytes) = (0u64, 0u64);
    {
        let mut chunks = txn.open_table(CHUNKS).map_err(|e| e.to_string())?;
        for (h, n) in &uses {
            let Some(l) = locs.get(h).copied().or_else(|| {
                remote_only.get(h).map(|&len| Loc {
                    pack: crate::store::remote::REMOTE_PACK,
                    offset: 0,
                    len,
                })
            }) else {
                return Err(format!(
                    "chunk {} named by the commit's objects is in no bundle on the remote",
                    hex(h)
                ));
            };
            chunks
                .insert(&h[..], (l.pack, l.offset, l.len, *n))
                .map_err(|e| e.to_string())?;
            count += 1;
            bytes += l.len as u64;
        }
        let mut pt = txn.open_table(PACKS).map_err(|e| e.to_string())?;
        for (id, total, live) in &packs {
            pt.insert(*id, (*total, *live, true))
                .map_err(|e| e.to_string())?;
        }
    }
    rep.chunks = count;
    rep.packs = packs.len() as u64;
    let by_pack: BTreeMap<u32, ()> = packs.iter().map(|p| (p.0, ())).collect();
    {
        let mut m = txn.open_table(META).map_err(|e| e.to_string())?;
        let next_pack = by_pack
            .keys()
            .next_back()
            .map(|m| *m as u64 + 1)
            .unwrap_or(0);
        write_new_meta(&mut m, tmp, w.next_ino, count, bytes, next_pack).map_err(|e| e.to_string())?;
        drop(m);
        // The objects: one sealed pack after the bundles' (it moves
        // META next_pack past itself).
        let all: Vec<(ObjectId, Vec<u8>)> = map.iter().map(|(k, v)| (*k, v.clone())).collect();
        crate::store::objects::put_as_pack(&txn, &tmp.join("packs"), next_pack as u32, &all)?;
        let mut refs = txn.open_table(REFS).map_err(|e| e.to_string())?;
        refs.insert(branch, &head[..]).map_err(|e| e.to_string())?;
        refs.insert(HEAD_KEY, format!("ref: {branch}").as_bytes())
            .map_err(|e| e.to_string())?;
        refs.insert(BASE_KEY, &head[..])
            .map_err(|e| e.to_string())?;
    }
    txn.commit().map_err(|e| e.to_string())?;
    drop(db);
    crate::private::create(&tmp.join("ringfs.lock")).map_err(|e| io(tmp, e))?;
    for d in [tmp.join("packs"), tmp.join("wc"), tmp.to_path_buf()] {
        sync_dir(&d).map_err(|e| io(&d, e))?;
    }
    Ok(rep)
}
