//! Snapshots: immutable, content-addressed trees of the synced workspace
//! (docs/FORMATS.md "Snapshot objects, version 1"; docs/SEMANTICS.md
//! "Snapshots").
//!
//! - [`object`]: the objects (file manifest, directory, commit), their
//!   encoding and ids;
//! - [`manifest`]: file manifests as trees of nodes (version 2), read back
//!   as chunk lists whatever their version;
//! - `build`: the tree the store's tables hold, rebuilt only along what the
//!   journal says changed since the last commit;
//! - [`diff`]: comparing two trees, skipping equal subtrees;
//! - [`restore`]: the steps that make the live tree a commit's;
//! - [`point`]: exec points, trees written without moving a branch, whose
//!   diff is what one `ringfs exec` call changed.
//!
//! This module writes a commit ([`commit_tree`]: objects, the chunk
//! references of new file manifests, the `snap_inodes` rows, the branch
//! head, in one durable transaction), reads the history ([`log_of`]),
//! resolves names of commits ([`resolve`]) and diffs ([`diff_of`]).
//! Must not touch: the inode table or working copies (the caller hashes and
//! flushes them first: `Fs::snapshot_commit`).

pub(crate) mod build;
pub(crate) mod check;
pub mod point;
pub mod gc;
pub mod diff;
pub mod manifest;
pub(crate) mod lazy;
pub mod materialize;
pub(crate) mod overlay;
pub mod object;
pub mod refs;
pub mod switch;
pub mod transfer;
pub mod restore;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use redb::{Durability, ReadTransaction, ReadableTable, WriteTransaction};

use crate::schema::*;
use crate::store::db::Store;
use crate::store::objects::{self as objstore, Objects, Row};
use crate::store::pack::Packs;
use diff::{diff_in, diff_trees, Change, ChangeKind};
use object::*;

/// The branch commits go to (`HEAD` names it).
pub const MAIN: &str = "main";

/// Errors of snapshot commands, each one line naming the problem and the fix.
/// The names of [`SnapError::Unknown`] joined by commas ("none (no
/// branches: no commits yet)" without any), its notes (in parentheses)
/// after them: `main, exp (or a commit by …)`.
fn known_list(candidates: &[String]) -> String {
    let (notes, names): (Vec<&str>, Vec<&str>) = candidates.iter().map(String::as_str).partition(|c| c.starts_with('('));
    let names = if names.is_empty() { "none (no branches: no commits yet)".to_string() } else { names.join(", ") };
    std::iter::once(names.as_str()).chain(notes).collect::<Vec<_>>().join(" ")
}

#[derive(Debug, thiserror::Error)]
pub enum SnapError {
    /// A name is neither `live`, a branch, nor the start of a commit id.
    #[error("no commit or branch named {name:?}; known: {}", known_list(candidates))]
    Unknown { name: String, candidates: Vec<String> },
    /// A hex prefix names more than one commit.
    #[error("{prefix:?} is the start of {} commit ids ({}): give more of the id", matches.len(), matches.join(", "))]
    Ambiguous { prefix: String, matches: Vec<String> },
    /// There is no commit yet (diff against the last commit, log).
    #[error("the workspace has no commits yet (ringfs commit MOUNTPOINT makes the first)")]
    NoCommits,
    /// `ringfs restore` was given `live`, which is no commit.
    #[error("restore needs a commit or branch, not {0:?} (ringfs log MOUNTPOINT lists the commits)")]
    NotACommit(String),
    /// A `--path` of `ringfs restore` that cannot be restored.
    #[error("--path {path}: {why}")]
    BadPath { path: String, why: String },
    /// The store refused (redb, a record or object that does not decode).
    #[error("store: {0}")]
    Store(String),
    /// A branch name breaks the rules ([`refs::check_name`]).
    #[error("{name:?} is not a usable branch name: {why}")]
    BadName { name: String, why: String },
    /// `ringfs branch NAME` when NAME exists (without `--force`).
    #[error("branch {name} already exists (at {head}): --force moves it")]
    BranchExists { name: String, head: String },
    /// Deleting the checked-out branch.
    #[error("branch {name} is checked out (HEAD names it): it cannot be deleted; mount another branch first")]
    CheckedOut { name: String },
    /// A commit whose branch head is not the commit the live tree descends
    /// from (docs/SEMANTICS.md "Head moved").
    #[error("head moved: branch {branch} is at {head}, but this workspace descends from {base}; nothing was committed and the branch is unchanged. To commit this work anyway, name the other head (`ringfs branch MOUNTPOINT NAME {head}`), move {branch} back (`ringfs branch MOUNTPOINT {branch} {base} --force`) and commit again; to drop the work and take the branch's state: `ringfs restore MOUNTPOINT {branch}`")]
    HeadMoved { branch: String, head: String, base: String },
    /// A switch of branch when the live tree is not its branch head's tree.
    #[error("the workspace on branch {branch} has changes a switch would lose: {why}; commit them first (mount it, `ringfs commit`), or fork the other branch instead (`ringfs fork`)")]
    Dirty { branch: String, why: String },
}

pub(crate) fn se<E: std::fmt::Display>(e: E) -> SnapError {
    // A SnapError::Store passed on keeps one "store: " (D71).
    let s = e.to_string();
    SnapError::Store(s.strip_prefix("store: ").map(str::to_string).unwrap_or(s))
}

/// What `ringfs commit` asks for: a message, who commits (`user@host`), and
/// whether a commit whose tree equals its parent's is made anyway.
#[derive(Clone, Debug, Default)]
pub struct CommitOptions {
    pub message: String,
    pub author: String,
    pub allow_empty: bool,
}

/// What a commit did. `id`: the new commit (or the head when nothing
/// changed and `created` is false). Paths added, modified and removed
/// against the parent (see [`diff::Change`]); objects written and their
/// encoded bytes (`new`), objects computed again that the store already had
/// (`reused`; unchanged subtrees are shared without being read and are not
/// counted); journal records read and inodes they named; the phases'
/// durations in order (hash, flush, build, diff, write, durable; a commit
/// not made ends at write).
#[derive(Clone, Debug, Default)]
pub struct CommitReport {
    pub id: String,
    pub created: bool,
    pub parent: Option<String>,
    pub branch: String,
    pub added: u64,
    pub modified: u64,
    pub removed: u64,
    pub objects_new: u64,
    pub bytes_new: u64,
    pub objects_reused: u64,
    pub bytes_reused: u64,
    pub journal_pos: u64,
    pub records: u64,
    pub changed_inodes: u64,
    pub phases: Vec<(&'static str, Duration)>,
}

/// One commit of a history (`ringfs log`): ids in hex, time in seconds and
/// nanoseconds since the epoch, the journal position it covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub id: String,
    pub parents: Vec<String>,
    pub root: String,
    pub time: (i64, u32),
    pub journal_pos: u64,
    pub author: String,
    pub message: String,
}

/// A diff between two trees: what each side is (a commit id, or `live`)
/// and the changed paths in path order.
#[derive(Clone, Debug, Default)]
pub struct DiffReport {
    pub from: String,
    pub to: String,
    pub changes: Vec<Change>,
}

/// A side of a diff: a commit, or the live tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    Commit(ObjectId),
    Live,
}

/// The head of `HEAD`'s branch: (branch, commit id or `None` before the first commit).
fn head<T: ReadableTable<&'static str, &'static [u8]>>(refs: &T) -> Result<(String, Option<ObjectId>), SnapError> {
    let branch = match refs.get("HEAD").map_err(se)? {
        Some(g) => String::from_utf8_lossy(g.value()).strip_prefix("ref: ").unwrap_or(MAIN).to_string(),
        None => MAIN.to_string(),
    };
    let id = refs.get(branch.as_str()).map_err(se)?.and_then(|g| <[u8; 32]>::try_from(g.value()).ok());
    Ok((branch, id))
}

/// Writes a commit of the tree the store's tables hold now on `HEAD`'s
/// branch, in one durable transaction (a crash leaves the previous head).
/// The caller has stored changed files and flushed the inode table first.
/// Nothing changed since the head (a diff against it lists no path: at
/// most directory mtimes moved) and not `allow_empty`: no commit, the
/// report says `created: false` with the head's id. `dirs`: the decoded
/// directory objects of the last commit, if kept: the build starts from
/// them, and once the commit is durable they are those of this one.
pub(crate) fn commit_tree(store: &Store, opts: &CommitOptions, mut phases: Vec<(&'static str, Duration)>, dirs: Option<&build::DirCache>) -> Result<CommitReport, SnapError> {
    let t = Instant::now();
    let mut txn = store.begin_write().map_err(se)?;
    txn.set_durability(Durability::Immediate).map_err(se)?;
    let (branch, head_id) = head(&txn.open_table(REFS).map_err(se)?)?;
    // Never over a head that moved since the live tree's base (refs::BASE_KEY).
    refs::check_head(&txn, &branch, head_id)?;
    let base = base_pos(&txn, head_id.is_some())?;
    let built = build::build(&txn, &store.packs, base, dirs).map_err(SnapError::Store)?;
    phases.push(("build", t.elapsed()));
    let t = Instant::now();
    let parent = match &head_id {
        Some(h) => Some(dec_commit(&object_in(&txn, &store.packs, h)?).map_err(se)?),
        None => None,
    };
    // The root's own attributes (mode, owner, xattrs) count as a modified
    // path, as `ringfs diff` lists them (".").
    let mut changes: Vec<Change> = parent.as_ref().and_then(|p| diff::root_change(&p.root_meta, &built.root_meta)).into_iter().collect();
    {
        let objects = objstore::read_in(&txn, &store.packs).map_err(SnapError::Store)?;
        let mut src = Loaded { built: &built, objects: &objects };
        diff_in(&mut src, parent.as_ref().map(|p| &p.root), Some(&built.root), b"", &mut changes).map_err(SnapError::Store)?;
    }
    phases.push(("diff", t.elapsed()));
    let t = Instant::now();
    let mut rep = CommitReport {
        branch: branch.clone(),
        parent: head_id.as_ref().map(hex_id),
        journal_pos: built.covered,
        records: built.records,
        changed_inodes: built.changed_inodes,
        objects_reused: built.reused.0,
        bytes_reused: built.reused.1,
        ..Default::default()
    };
    for c in &changes {
        match c.kind {
            ChangeKind::Added => rep.added += 1,
            ChangeKind::Modified => rep.modified += 1,
            ChangeKind::Removed => rep.removed += 1,
        }
    }
    // Nothing a diff lists (at most directory mtimes moved, by a change
    // undone): no commit.
    let root_same = |p: &CommitObj| (Meta { mtime: built.root_meta.mtime, ..p.root_meta.clone() }) == built.root_meta;
    let same = parent.as_ref().map(|p| changes.is_empty() && root_same(p)).unwrap_or(false);
    if same && !opts.allow_empty {
        txn.abort().map_err(se)?;
        rep.id = rep.parent.clone().unwrap_or_default();
        rep.parent = parent.as_ref().and_then(|p| p.parents.first()).map(hex_id);
        phases.push(("write", t.elapsed()));
        rep.phases = phases;
        return Ok(rep);
    }
    let store_id = meta_get(&txn, "store_id").map_err(se)?.unwrap_or(0);
    let c = CommitObj {
        root: built.root,
        root_meta: built.root_meta.clone(),
        parents: head_id.into_iter().collect(),
        time: crate::posix::now(),
        journal_pos: built.covered,
        store_id,
        author: opts.author.clone(),
        message: opts.message.clone(),
    };
    let cb = enc_commit(&c);
    let cid = id_of(&cb);
    write_built(&txn, &store.packs, &built, &branch, &cid, cb, &mut rep).map_err(se)?;
    phases.push(("write", t.elapsed()));
    let t = Instant::now();
    // The manifests' chunks stored since the last durable commit are
    // durable before this commit is (started early by the caller, which
    // this waits for; anything appended since, this commit's objects
    // included, is synced here).
    store.packs.sync().map_err(se)?;
    // The rows of a long history move into an object index file, which is
    // durable before this commit records it (D65).
    // A file that cannot be written (ENOSPC…) changes no table: the rows
    // stay, and the next commit tries again.
    match crate::store::oidx::flush_if_due(&txn, store.packs.oidx()) {
        // Tests: killed with the file durable and not yet recorded.
        Ok(Some(_)) => gc::failpoint("commit-after-oidx-flush"),
        Ok(None) => {}
        Err(e) => tracing::warn!("commit: object_index rows not moved into an index file: {e}"),
    }
    txn.commit().map_err(se)?;
    if let Some(d) = dirs {
        d.update(&built);
    }
    rep.id = hex_id(&cid);
    rep.created = true;
    phases.push(("durable", t.elapsed()));
    rep.phases = phases;
    Ok(rep)
}

/// The journal position the `snap_inodes` rows describe, from which a
/// build need only follow the journal: `snap_pos` once a commit (`head`)
/// or an exec point ([`point`]) wrote rows; `None` (build everything)
/// before either.
pub(crate) fn base_pos(txn: &WriteTransaction, head: bool) -> Result<Option<u64>, SnapError> {
    if !head && txn.open_table(SNAP_INODES).map_err(se)?.get(crate::inode::ROOT).map_err(se)?.is_none() {
        return Ok(None);
    }
    meta_get(txn, "snap_pos").map_err(se)
}

/// Stores what [`build::build`] computed, the commit object, the branch
/// head and the journal position its `snap_inodes` rows describe. A new
/// file manifest object or manifest node adds one reference to each chunk
/// entry it holds itself ([`manifest::own_chunks`]).
fn write_built(txn: &WriteTransaction, packs: &Packs, built: &build::Built, branch: &str, cid: &ObjectId, cb: Vec<u8>, rep: &mut CommitReport) -> Result<(), String> {
    let e = |e: redb::Error| e.to_string();
    (rep.objects_new, rep.bytes_new) = write_objects(txn, packs, built, Some((cid, &cb)))?;
    {
        let mut refs = txn.open_table(REFS).map_err(|x| e(x.into()))?;
        refs.insert(branch, &cid[..]).map_err(|x| e(x.into()))?;
        refs.insert(refs::BASE_KEY, &cid[..]).map_err(|x| e(x.into()))?;
        if refs.get("HEAD").map_err(|x| e(x.into()))?.is_none() {
            refs.insert("HEAD", format!("ref: {branch}").as_bytes()).map_err(|x| e(x.into()))?;
        }
    }
    txn.open_table(META).map_err(|x| e(x.into()))?.insert("snap_pos", built.covered).map_err(|x| e(x.into()))?;
    Ok(())
}

/// Stores the objects [`build::build`] computed (and `extra`, a commit
/// object) as records of the open pack (not durable until the caller's
/// `Packs::sync`), adding one chunk reference per chunk entry a new file
/// manifest or node holds itself, and the `snap_inodes` rows; not the refs
/// nor `snap_pos`. Returns the objects written and their encoded bytes.
pub(crate) fn write_objects(txn: &WriteTransaction, packs: &Packs, built: &build::Built, extra: Option<(&ObjectId, &Vec<u8>)>) -> Result<(u64, u64), String> {
    let e = |e: redb::Error| e.to_string();
    let (mut n, mut bytes_new) = (0u64, 0u64);
    let mut objects = objstore::write(txn, packs)?;
    let mut chunks = txn.open_table(CHUNKS).map_err(|x| e(x.into()))?;
    // In key order: consecutive inserts into one leaf share its copy.
    let mut new: Vec<(&ObjectId, &Vec<u8>)> = built.new_objects.iter().chain(extra).collect();
    new.sort_unstable_by_key(|(id, _)| **id);
    for (id, bytes) in new {
        kind_of(bytes)?;
        if !objects.put(id, bytes)? {
            continue;
        }
        for h in manifest::own_chunks(bytes)? {
            let Some((pack, off, len, refs)) = chunks.get(&h[..]).map_err(|x| e(x.into()))?.map(|g| g.value()) else {
                return Err(format!("chunk {} of a file being committed is not in the chunk index", hex(&h)));
            };
            chunks.insert(&h[..], (pack, off, len, refs + 1)).map_err(|x| e(x.into()))?;
        }
        n += 1;
        bytes_new += bytes.len() as u64;
    }
    drop(chunks);
    // Puts only: no object index file is replaced.
    let _ = objects.finish(txn)?;
    let mut snap = txn.open_table(SNAP_INODES).map_err(|x| e(x.into()))?;
    for ino in &built.uncache {
        snap.remove(*ino).map_err(|x| e(x.into()))?;
    }
    // An inode removed from the synced side and back again is in both:
    // it was rebuilt, so its new row stands.
    let mut rows: Vec<(&u64, &SnapEntry)> = built.cache.iter().collect();
    rows.sort_unstable_by_key(|(ino, _)| **ino);
    for (ino, row) in rows {
        snap.insert(*ino, &enc(row)[..]).map_err(|x| e(x.into()))?;
    }
    Ok((n, bytes_new))
}

/// An object's bytes from a write transaction. Errors: missing.
fn object_in(txn: &WriteTransaction, packs: &Packs, id: &ObjectId) -> Result<Vec<u8>, SnapError> {
    objstore::read_in(txn, packs).and_then(|o| o.need(id)).map_err(SnapError::Store)
}

/// A loader for [`diff_trees`]: objects computed in this transaction, then
/// the stored ones through `get`.
fn loader<'a>(
    new: &'a HashMap<ObjectId, Vec<u8>>,
    get: impl Fn(&ObjectId) -> Result<Option<Vec<u8>>, String> + 'a,
) -> impl FnMut(&ObjectId) -> Result<Vec<u8>, String> + 'a {
    move |id: &ObjectId| match new.get(id) {
        Some(b) => Ok(b.clone()),
        None => get(id)?.ok_or_else(|| format!("object {} is missing", hex_id(id))),
    }
}

/// A diff [`diff::Source`] for a tree just built: the directory objects
/// the build holds decoded, its new objects, then the stored ones.
struct Loaded<'a, 'p, T: ReadableTable<&'static [u8], Row>> {
    built: &'a build::Built,
    objects: &'a Objects<'p, T>,
}

impl<T: ReadableTable<&'static [u8], Row>> diff::Source for Loaded<'_, '_, T> {
    fn dir(&mut self, id: &ObjectId) -> Result<std::sync::Arc<DirObj>, String> {
        if let Some(d) = self.built.dirs.get(id) {
            return Ok(d.clone());
        }
        let b = self.bytes(id)?;
        Ok(std::sync::Arc::new(dec_dir(&b).map_err(|e| format!("directory object {}: {e}", hex_id(id)))?))
    }
    fn bytes(&mut self, id: &ObjectId) -> Result<Vec<u8>, String> {
        if let Some(b) = self.built.new_objects.get(id) {
            return Ok(b.clone());
        }
        self.objects.need(id)
    }
}

/// The history of `HEAD`'s branch, newest first (first parents), from a
/// read transaction. Empty before the first commit.
pub(crate) fn log_of(rtx: &ReadTransaction, packs: &Packs) -> Result<Vec<LogEntry>, SnapError> {
    let refs = rtx.open_table(REFS).map_err(se)?;
    let objects = objstore::read(rtx, packs).map_err(SnapError::Store)?;
    let (_, mut at) = head(&refs)?;
    let mut out = Vec::new();
    while let Some(id) = at {
        let b = objects.get(&id).map_err(SnapError::Store)?.ok_or_else(|| SnapError::Store(format!("commit {} is missing", hex_id(&id))))?;
        let c = dec_commit(&b).map_err(|e| SnapError::Store(format!("commit {}: {e}", hex_id(&id))))?;
        out.push(LogEntry {
            id: hex_id(&id),
            parents: c.parents.iter().map(hex_id).collect(),
            root: hex_id(&c.root),
            time: c.time,
            journal_pos: c.journal_pos,
            author: c.author,
            message: c.message,
        });
        at = c.parents.first().copied();
    }
    Ok(out)
}

/// The history of an unmounted store (`ringfs log --store DIR`), opened
/// read-only (nothing in it is written). Errors: the store's (locked by a
/// daemon, missing, damaged) as text.
pub fn log_store(dir: &Path) -> Result<Vec<LogEntry>, crate::types::StoreError> {
    let db = crate::store::readonly::open_read_only(dir)?;
    let rtx = db.begin_read().map_err(|e| crate::store::db::corrupt(&dir.join("store.redb"), e))?;
    match rtx.open_table(REFS) {
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(crate::store::db::corrupt(&dir.join("store.redb"), e)),
        Ok(_) => {}
    }
    older_schema(&rtx, dir)?;
    let packs = Packs::read_only(dir.join("packs"));
    log_of(&rtx, &packs).map_err(|e| crate::store::db::corrupt(&dir.join("store.redb"), e))
}

/// Refuses a store whose snapshot objects are not where this build reads
/// them (schema 4: in the database; the first mount migrates them).
fn older_schema(rtx: &ReadTransaction, dir: &Path) -> Result<(), crate::types::StoreError> {
    match crate::store::scan::schema_of(rtx) {
        Some(v) if v < SCHEMA_VERSION => Err(crate::store::db::io_err(
            &dir.join("store.redb"),
            std::io::Error::other(format!("the store has schema {v} (this ringfs uses {SCHEMA_VERSION}): mount it once with this ringfs (which migrates it) and unmount, then try again")),
        )),
        _ => Ok(()),
    }
}

/// `ringfs diff --store DIR FROM TO` on an unmounted store, opened
/// read-only: the diff of two commits (`from`, `to`: branches, `HEAD`, or
/// commit ids or their starts). `live` is refused (the live tree is built
/// in a write transaction; mount the store for it). Errors: the store's
/// (locked by a daemon, missing, damaged) as [`crate::types::StoreError`];
/// the names' as [`SnapError`] inside `Ok(Err(..))`.
pub fn diff_store(dir: &Path, from: &str, to: &str) -> Result<Result<DiffReport, SnapError>, crate::types::StoreError> {
    let db = crate::store::readonly::open_read_only(dir)?;
    let rtx = db.begin_read().map_err(|e| crate::store::db::corrupt(&dir.join("store.redb"), e))?;
    match rtx.open_table(REFS) {
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Err(SnapError::NoCommits)),
        Err(e) => return Err(crate::store::db::corrupt(&dir.join("store.redb"), e)),
        Ok(_) => {}
    }
    older_schema(&rtx, dir)?;
    let packs = Packs::read_only(dir.join("packs"));
    Ok((|| {
        let side = |name: &str| match resolve(&rtx, &packs, name)? {
            Point::Live => Err(SnapError::Store("`live` needs the mounted workspace (ringfs diff MOUNTPOINT ...); --store diffs two commits".into())),
            Point::Commit(id) => Ok(id),
        };
        let (a, b) = (side(from)?, side(to)?);
        let objects = objstore::read(&rtx, &packs).map_err(SnapError::Store)?;
        let get = |id: &ObjectId| -> Result<Vec<u8>, String> { objects.need(id) };
        let root = |id: &ObjectId| -> Result<ObjectId, SnapError> { Ok(dec_commit(&get(id).map_err(SnapError::Store)?).map_err(|e| SnapError::Store(format!("commit {}: {e}", hex_id(id))))?.root) };
        let (ra, rb) = (root(&a)?, root(&b)?);
        let mut rep = DiffReport { from: hex_id(&a), to: hex_id(&b), changes: Vec::new() };
        let mut load = |id: &ObjectId| get(id);
        diff_trees(&mut load, Some(&ra), Some(&rb), b"", &mut rep.changes).map_err(SnapError::Store)?;
        Ok(rep)
    })())
}

/// What `name` names: `live`, a branch, the start (4+ hex digits) of any
/// stored commit's id, or a shorter start on `HEAD`'s history. Errors: [`SnapError::Unknown`] listing the
/// branches and the newest commits, [`SnapError::Ambiguous`].
pub(crate) fn resolve(rtx: &ReadTransaction, packs: &Packs, name: &str) -> Result<Point, SnapError> {
    if name == "live" {
        return Ok(Point::Live);
    }
    let refs = rtx.open_table(REFS).map_err(se)?;
    // A branch, HEAD, or a unique start (4+ hex digits) of any stored
    // commit (a restore to a commit another branch holds, or that a moved
    // branch left); shorter starts on HEAD's history below.
    match refs::resolve_commit(&refs, &objstore::read(rtx, packs).map_err(SnapError::Store)?, name) {
        Ok(id) => return Ok(Point::Commit(id)),
        Err(e @ SnapError::Ambiguous { .. }) => return Err(e),
        Err(_) => {}
    }
    let mut branches = Vec::new();
    for r in refs.iter().map_err(se)? {
        let (k, v) = r.map_err(se)?;
        if k.value() == "HEAD" || k.value() == refs::BASE_KEY {
            continue;
        }
        if k.value() == name {
            if let Ok(id) = <[u8; 32]>::try_from(v.value()) {
                return Ok(Point::Commit(id));
            }
        }
        branches.push(k.value().to_string());
    }
    let log = log_of(rtx, packs)?;
    let lname = name.to_ascii_lowercase();
    let matches: Vec<&LogEntry> = if refs::all_hex(&lname) { log.iter().filter(|e| e.id.starts_with(&lname)).collect() } else { Vec::new() };
    match matches.len() {
        1 => {
            let mut id = [0u8; 32];
            for (i, b) in id.iter_mut().enumerate() {
                *b = u8::from_str_radix(&matches[0].id[2 * i..2 * i + 2], 16).map_err(se)?;
            }
            Ok(Point::Commit(id))
        }
        0 => {
            let mut candidates: Vec<String> = vec!["live".into()];
            candidates.extend(branches);
            candidates.extend(log.iter().take(5).map(|e| e.id[..12].to_string()));
            if log.len() > 5 {
                candidates.push(format!("… ({} older commits: ringfs log)", log.len() - 5));
            }
            Err(SnapError::Unknown { name: name.to_string(), candidates })
        }
        _ => Err(SnapError::Ambiguous { prefix: name.to_string(), matches: matches.iter().map(|e| e.id[..16].to_string()).collect() }),
    }
}

/// Inodes the journal names since the position the last commit covers
/// (Linked children, Attrs, Content): with the inode table's dirty set,
/// hash queue and open files, every file whose content may have changed
/// since (a change to content moves its mtime or size, so it is journaled
/// at the next group commit). `None` before the first commit. Costs the
/// records since that commit.
pub(crate) fn journaled_since_commit(store: &Store) -> Result<Option<std::collections::HashSet<u64>>, SnapError> {
    let rtx = store.begin_read().map_err(se)?;
    let refs = rtx.open_table(REFS).map_err(se)?;
    if head(&refs)?.1.is_none() && rtx.open_table(SNAP_INODES).map_err(se)?.get(crate::inode::ROOT).map_err(se)?.is_none() {
        return Ok(None);
    }
    let Some(base) = rtx.open_table(META).map_err(se)?.get("snap_pos").map_err(se)?.map(|g| g.value()) else { return Ok(None) };
    let mut out = std::collections::HashSet::new();
    for r in rtx.open_table(JOURNAL).map_err(se)?.range(base + 1..).map_err(se)? {
        let (_, v) = r.map_err(se)?;
        match dec::<JournalRecord>(v.value()).map_err(se)? {
            JournalRecord::Linked { child, .. } => out.insert(child),
            JournalRecord::Attrs { ino } | JournalRecord::Content { ino, .. } => out.insert(ino),
            _ => false,
        };
    }
    Ok(Some(out))
}

/// The commit the live tree descends from (`refs["BASE"]`: what `ringfs
/// diff MNT` compares the live tree with — the changes no commit has, also
/// after the branch head moved under the workspace), else the branch head.
/// Errors: [`SnapError::NoCommits`].
pub(crate) fn base_commit(rtx: &ReadTransaction) -> Result<ObjectId, SnapError> {
    let refs = rtx.open_table(REFS).map_err(se)?;
    match refs::ref_id(&refs, refs::BASE_KEY)? {
        Some(id) => Ok(id),
        None => head(&refs)?.1.ok_or(SnapError::NoCommits),
    }
}

/// The diff from `from` to `to` (the caller has stored and flushed changed
/// files when either is [`Point::Live`]). The live tree is built as a
/// commit would build it, in a write transaction that is then aborted, so
/// it costs what changed since the last commit. `dirs`: the decoded
/// directory objects of the last commit, if kept (read, not changed).
pub(crate) fn diff_of(store: &Store, from: Point, to: Point, dirs: Option<&build::DirCache>) -> Result<DiffReport, SnapError> {
    let name = |p: &Point| match p {
        Point::Live => "live".to_string(),
        Point::Commit(id) => hex_id(id),
    };
    let mut rep = DiffReport { from: name(&from), to: name(&to), changes: Vec::new() };
    // Plain: a fork whose tree is still deferred (D60) keeps it so; its live
    // tree is then its base commit's, diffed as that commit (D64's item).
    let txn = store.begin_write_plain().map_err(se)?;
    let deferred_base = crate::snap::lazy::pending(&txn.open_table(META).map_err(se)?).map_err(SnapError::Store)?;
    let (from, to) = match deferred_base {
        Some(base) => {
            let live = |p: Point| if p == Point::Live { Point::Commit(base) } else { p };
            (live(from), live(to))
        }
        None => (from, to),
    };
    let (_, head_id) = head(&txn.open_table(REFS).map_err(se)?)?;
    let built = if from == Point::Live || to == Point::Live {
        let base = match head_id {
            Some(_) => meta_get(&txn, "snap_pos").map_err(se)?,
            None => None,
        };
        Some(build::build(&txn, &store.packs, base, dirs).map_err(SnapError::Store)?)
    } else {
        None
    };
    let root_of = |p: &Point| -> Result<(ObjectId, Meta), SnapError> {
        match p {
            Point::Live => Ok(built.as_ref().map(|b| (b.root, b.root_meta.clone())).unwrap_or_default()),
            Point::Commit(id) => {
                let c = dec_commit(&object_in(&txn, &store.packs, id)?).map_err(|e| SnapError::Store(format!("commit {}: {e}", hex_id(id))))?;
                Ok((c.root, c.root_meta))
            }
        }
    };
    let ((a, am), (b, bm)) = (root_of(&from)?, root_of(&to)?);
    rep.changes.extend(diff::root_change(&am, &bm));
    {
        let objects = objstore::read_in(&txn, &store.packs).map_err(SnapError::Store)?;
        match &built {
            Some(built) => diff_in(&mut Loaded { built, objects: &objects }, Some(&a), Some(&b), b"", &mut rep.changes),
            None => {
                let mut load = |id: &ObjectId| objects.need(id);
                diff_trees(&mut load, Some(&a), Some(&b), b"", &mut rep.changes)
            }
        }
        .map_err(SnapError::Store)?;
    }
    txn.abort().map_err(se)?;
    Ok(rep)
}

/// The root object id of a tree built from scratch from the tables (no
/// remembered ids, nothing written): what an incremental commit must
/// equal. For tests.
#[cfg(test)]
pub(crate) fn full_root(store: &Store) -> Result<(ObjectId, ObjectId), SnapError> {
    let txn = store.begin_write().map_err(se)?;
    let built = build::build(&txn, &store.packs, None, None).map_err(SnapError::Store)?;
    let (_, head_id) = head(&txn.open_table(REFS).map_err(se)?)?;
    let head_root = match head_id {
        Some(h) => dec_commit(&object_in(&txn, &store.packs, &h)?).map_err(se)?.root,
        None => [0; 32],
    };
    txn.abort().map_err(se)?;
    Ok((built.root, head_root))
}
