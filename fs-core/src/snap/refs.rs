//! Branches (docs/SEMANTICS.md "Snapshots", docs/FORMATS.md `refs`): the
//! names of commits in the `refs` table, their rules, and the two
//! reserved keys: `HEAD` (`ref: NAME`, the branch commits go to) and
//! `BASE` (the commit the live tree descends from, so a commit can tell
//! that its branch's head moved since: [`SnapError::HeadMoved`]).
//!
//! Owns: creating, moving, deleting and listing branches
//! ([`branch_op`]), the name rules ([`check_name`]), resolving a commit
//! name over every branch and every stored commit ([`resolve_commit`]),
//! opening an unmounted store for a ref change ([`open_offline`]).
//! Must not touch: the inode table, the live tables (`materialize` does).

use std::path::Path;

use redb::{ReadableDatabase, ReadableTable, Table, WriteTransaction};

use crate::schema::*;
use crate::snap::object::{dec_commit, hex_id, kind_of, ObjectId, KIND_COMMIT};
use crate::snap::{se, SnapError, MAIN};
use crate::store::db::{corrupt, io_err, open_db, take_lock_noting, Store};
use crate::store::objects::{self as objstore, Objects, Row};
use crate::store::pack::Packs;
use crate::types::StoreError;

/// The `refs` key naming the checked-out branch (`ref: NAME`).
pub const HEAD_KEY: &str = "HEAD";
/// The `refs` key holding the commit the live tree descends from (32 bytes).
pub const BASE_KEY: &str = "BASE";

/// Is `s` one or more hex digits (what may be the start of a commit id)?
pub fn all_hex(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// Is `name` usable as a branch name? Git's rules, narrowed: 1–100 bytes
/// of printable non-space ASCII or UTF-8; none of `~ ^ : ? * [ \`, no
/// `..`, `//` or `@{`; not starting with `-`, `.` or `/`, not ending with
/// `/`, `.` or `.lock`; not `HEAD`, `BASE`, `live` or `@`; not hex digits
/// alone, of any length up to 64 (they would read as the start of a commit
/// id: diff and restore take starts of any length on the branch's history). Errors: one line
/// naming the rule broken.
pub fn check_name(name: &str) -> Result<(), SnapError> {
    let bad = |why: &str| Err(SnapError::BadName { name: name.to_string(), why: why.to_string() });
    if name.is_empty() || name.len() > 100 {
        return bad("a branch name is 1 to 100 bytes");
    }
    if [HEAD_KEY, BASE_KEY, "live", "@"].contains(&name) {
        return bad("that name is reserved");
    }
    if name.len() <= 64 && all_hex(name) {
        return bad("hex digits alone read as the start of a commit id");
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c)) {
        return bad("no spaces, control characters or any of ~ ^ : ? * [ \\");
    }
    if name.contains("..") || name.contains("//") || name.contains("@{") {
        return bad("no \"..\", \"//\" or \"@{\"");
    }
    if name.starts_with(['-', '.', '/']) || name.ends_with(['/', '.']) || name.ends_with(".lock") {
        return bad("it may not start with - . or /, nor end with / . or .lock");
    }
    Ok(())
}

/// A branch as `ringfs branch --list` shows it: its name, its head (hex)
/// and whether it is the checked-out one (`HEAD`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchInfo {
    pub name: String,
    pub head: String,
    pub current: bool,
}

/// A change to the branches (`ringfs branch`).
#[derive(Clone, Debug)]
pub enum BranchOp {
    /// List the branches.
    List,
    /// Create `name` at `from` (a branch or commit id; default: the
    /// checked-out branch's head); `force` moves an existing one.
    Create { name: String, from: Option<String>, force: bool },
    /// Delete `name` (never the checked-out branch).
    Delete { name: String },
}

/// What [`branch_op`] did: one line (empty for a list) and the branches after.
#[derive(Clone, Debug, Default)]
pub struct BranchReport {
    pub done: String,
    pub branches: Vec<BranchInfo>,
}

/// The checked-out branch: `HEAD`'s target, `main` when unset.
pub(crate) fn head_branch<T: ReadableTable<&'static str, &'static [u8]>>(refs: &T) -> Result<String, SnapError> {
    Ok(match refs.get(HEAD_KEY).map_err(se)? {
        Some(g) => String::from_utf8_lossy(g.value()).strip_prefix("ref: ").unwrap_or(MAIN).to_string(),
        None => MAIN.to_string(),
    })
}

/// The commit a ref names (`None`: no such ref, or not 32 bytes).
pub(crate) fn ref_id<T: ReadableTable<&'static str, &'static [u8]>>(refs: &T, name: &str) -> Result<Option<ObjectId>, SnapError> {
    Ok(refs.get(name).map_err(se)?.and_then(|g| <[u8; 32]>::try_from(g.value()).ok()))
}

/// The names of every branch, sorted ([`SnapError::Unknown`]'s candidates).
pub(crate) fn branch_names<T: ReadableTable<&'static str, &'static [u8]>>(refs: &T) -> Result<Vec<String>, SnapError> {
    Ok(list(refs)?.into_iter().map(|b| b.name).collect())
}

/// Every branch, sorted by name.
pub(crate) fn list<T: ReadableTable<&'static str, &'static [u8]>>(refs: &T) -> Result<Vec<BranchInfo>, SnapError> {
    let cur = head_branch(refs)?;
    let mut out = Vec::new();
    for r in refs.iter().map_err(se)? {
        let (k, v) = r.map_err(se)?;
        let name = k.value();
        if name == HEAD_KEY || name == BASE_KEY {
            continue;
        }
        if let Ok(id) = <[u8; 32]>::try_from(v.value()) {
            out.push(BranchInfo { name: name.to_string(), head: hex_id(&id), current: name == cur });
        }
    }
    Ok(out)
}

/// Parses a full or partial hex id into the range of ids it can start.
fn hex_range(p: &str) -> Option<([u8; 32], [u8; 32])> {
    if p.len() < 4 || p.len() > 64 || !all_hex(p) {
        return None;
    }
    let fill = |c: char| {
        let s: String = p.chars().chain(std::iter::repeat(c)).take(64).collect();
        let mut id = [0u8; 32];
        for (i, b) in id.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(id)
    };
    Some((fill('0')?, fill('f')?))
}

/// What `name` names: a branch (`HEAD`: the checked-out one), else a unique start (≥ 4 hex digits) of
/// the id of any stored commit (on any branch or none). Errors:
/// [`SnapError::Unknown`] (listing the branches), [`SnapError::Ambiguous`].
pub(crate) fn resolve_commit<R, O>(refs: &R, objects: &Objects<'_, O>, name: &str) -> Result<ObjectId, SnapError>
where
    R: ReadableTable<&'static str, &'static [u8]>,
    O: ReadableTable<&'static [u8], Row>,
{
    if name == HEAD_KEY {
        if let Some(id) = ref_id(refs, &head_branch(refs)?)? {
            return Ok(id);
        }
    } else if name != BASE_KEY {
        if let Some(id) = ref_id(refs, name)? {
            return Ok(id);
        }
    }
    let mut matches = Vec::new();
    if let Some((lo, hi)) = hex_range(&name.to_ascii_lowercase()) {
        // The table's rows and the object index files (D65).
        for id in objects.ids_in(&lo, &hi).map_err(SnapError::Store)? {
            let b = objects.get(&id).map_err(SnapError::Store)?.unwrap_or_default();
            if kind_of(&b) == Ok(KIND_COMMIT) {
                matches.push(id);
            }
            if matches.len() > 8 {
                break;
            }
        }
    }
    match matches.len() {
        1 => Ok(matches[0]),
        0 => {
            let mut candidates = branch_names(refs)?;
            if name.len() < 4 && all_hex(name) {
                candidates.push("(a commit is named here by 4 or more hex digits of its id)".into());
            } else {
                candidates.push("(or a commit by 4 or more hex digits of its id: ringfs log)".into());
            }
            Err(SnapError::Unknown { name: name.to_string(), candidates })
        }
        _ => Err(SnapError::Ambiguous { prefix: name.to_string(), matches: matches.iter().map(|m| hex_id(m)[..16].to_string()).collect() }),
    }
}

/// Runs a branch command in one durable write transaction. Errors:
/// [`SnapError::BadName`], [`SnapError::Unknown`] (FROM, or the branch to
/// delete), [`SnapError::BranchExists`] (create without `force`),
/// [`SnapError::CheckedOut`] (delete of `HEAD`'s branch),
/// [`SnapError::NoCommits`] (create with no FROM before the first commit).
pub(crate) fn branch_op(store: &Store, op: &BranchOp) -> Result<BranchReport, SnapError> {
    if let BranchOp::List = op {
        // A read: a fork's deferred tree (D60) stays unwritten (D64).
        let rtx = store.begin_read().map_err(se)?;
        let branches = match rtx.open_table(REFS) {
            Ok(t) => list(&t)?,
            Err(redb::TableError::TableDoesNotExist(_)) => Vec::new(),
            Err(e) => return Err(se(e)),
        };
        return Ok(BranchReport { done: String::new(), branches });
    }
    let mut txn = store.begin_write().map_err(se)?;
    txn.set_durability(redb::Durability::Immediate).map_err(se)?;
    let done = apply(&txn, &store.packs, op)?;
    let branches = list(&txn.open_table(REFS).map_err(se)?)?;
    if done.is_empty() {
        txn.abort().map_err(se)?;
    } else {
        txn.commit().map_err(se)?;
    }
    Ok(BranchReport { done, branches })
}

fn apply(txn: &WriteTransaction, packs: &Packs, op: &BranchOp) -> Result<String, SnapError> {
    let mut refs: Table<&str, &[u8]> = txn.open_table(REFS).map_err(se)?;
    let cur = head_branch(&refs)?;
    match op {
        BranchOp::List => Ok(String::new()),
        BranchOp::Create { name, from, force } => {
            check_name(name)?;
            let id = match from {
                Some(f) => {
                    let objects = objstore::read_in(txn, packs).map_err(SnapError::Store)?;
                    resolve_commit(&refs, &objects, f)?
                }
                None => ref_id(&refs, &cur)?.ok_or(SnapError::NoCommits)?,
            };
            let old = ref_id(&refs, name)?;
            match old {
                Some(o) if o == id => return Ok(format!("branch {name} already at {}", hex_id(&id))),
                Some(o) if !force => return Err(SnapError::BranchExists { name: name.clone(), head: hex_id(&o) }),
                _ => {}
            }
            refs.insert(name.as_str(), &id[..]).map_err(se)?;
            Ok(match old {
                Some(o) => format!("branch {name} moved from {} to {}", hex_id(&o), hex_id(&id)),
                None => format!("branch {name} created at {}", hex_id(&id)),
            })
        }
        BranchOp::Delete { name } => {
            if *name == cur {
                return Err(SnapError::CheckedOut { name: name.clone() });
            }
            let Some(old) = (if name == HEAD_KEY || name == BASE_KEY { None } else { ref_id(&refs, name)? }) else {
                return Err(SnapError::Unknown { name: name.clone(), candidates: branch_names(&refs)? });
            };
            refs.remove(name.as_str()).map_err(se)?;
            Ok(format!("branch {name} deleted (was {})", hex_id(&old)))
        }
    }
}

/// Refuses a commit on `branch` whose head is not the commit the live tree
/// descends from (`BASE`): someone moved the branch meanwhile (`ringfs
/// branch --force`, a fork's push, a pull). No `BASE` (a store from before
/// branches) is no refusal.
pub(crate) fn check_head(txn: &WriteTransaction, branch: &str, head: Option<ObjectId>) -> Result<(), SnapError> {
    let refs = txn.open_table(REFS).map_err(se)?;
    let Some(base) = ref_id(&refs, BASE_KEY)? else { return Ok(()) };
    if head != Some(base) {
        return Err(SnapError::HeadMoved { branch: branch.to_string(), head: head.map(|h| hex_id(&h)).unwrap_or_else(|| "(deleted)".into()), base: hex_id(&base) });
    }
    Ok(())
}

/// Records `id` as the commit the live tree descends from (`BASE`): for
/// whatever makes the live tree equal a commit of `HEAD`'s branch (a
/// restore to the branch head is one way out of "head moved").
pub(crate) fn set_base(txn: &WriteTransaction, id: &ObjectId) -> Result<(), SnapError> {
    txn.open_table(REFS).map_err(se)?.insert(BASE_KEY, &id[..]).map_err(se)?;
    Ok(())
}

/// After a whole-tree restore to `id`: when `id` is the head of `HEAD`'s
/// branch it becomes the live tree's `BASE`, durably (the way out of
/// "head moved"); a restore to any other commit leaves `BASE`, so the next
/// commit goes on the branch head with the restored tree (a revert).
/// Returns whether `BASE` was set.
pub(crate) fn base_after_restore(store: &Store, id: &ObjectId) -> Result<bool, SnapError> {
    let mut txn = store.begin_write().map_err(se)?;
    txn.set_durability(redb::Durability::Immediate).map_err(se)?;
    let head = {
        let refs = txn.open_table(REFS).map_err(se)?;
        let branch = head_branch(&refs)?;
        ref_id(&refs, &branch)?
    };
    if head != Some(*id) {
        txn.abort().map_err(se)?;
        return Ok(false);
    }
    set_base(&txn, id)?;
    txn.commit().map_err(se)?;
    Ok(true)
}

/// The commit a commit object id names, read (errors: missing, undecodable).
pub(crate) fn commit_obj<O: ReadableTable<&'static [u8], Row>>(objects: &Objects<'_, O>, id: &ObjectId) -> Result<crate::snap::object::CommitObj, SnapError> {
    let b = objects.get(id).map_err(SnapError::Store)?.ok_or_else(|| SnapError::Store(format!("commit {} is missing", hex_id(id))))?;
    dec_commit(&b).map_err(|e| SnapError::Store(format!("commit {}: {e}", hex_id(id))))
}

/// Opens an unmounted store for a ref change or a fork (`--store DIR`):
/// the checks a mount makes first, its lock taken (a running daemon
/// refuses: [`StoreError::Locked`]), the current schema required. Release the lock
/// with `Store::release_lock` when done.
pub(crate) fn open_offline(dir: &Path) -> Result<Store, StoreError> {
    let dbpath = dir.join("store.redb");
    if std::fs::metadata(&dbpath).map(|m| m.len() == 0).unwrap_or(true) {
        return Err(StoreError::Corrupt { path: dbpath, reason: "no store database (missing or empty)".into() });
    }
    crate::store::scan::check_before_open(dir)?;
    let (lock, before) = take_lock_noting(dir)?;
    // Made private if an earlier version left it open (D87).
    crate::private::fix_store(dir, true);
    let db = open_db(dir)?;
    let schema = {
        let rtx = db.begin_read().map_err(|e| corrupt(&dbpath, e))?;
        let m = rtx.open_table(META).map_err(|e| corrupt(&dbpath, e))?;
        let v = m.get("schema").map_err(|e| corrupt(&dbpath, e))?.map(|g| g.value());
        v
    };
    match schema {
        Some(SCHEMA_VERSION) => {}
        Some(v) if v > SCHEMA_VERSION => return Err(StoreError::NewerSchema { found: v, supported: SCHEMA_VERSION, path: dbpath }),
        v => {
            return Err(io_err(
                &dbpath,
                std::io::Error::other(format!("the store has schema {} (this ringfs uses {SCHEMA_VERSION}): mount it once with this ringfs (which migrates it) and unmount, then try again", v.unwrap_or(0))),
            ))
        }
    }
    // Read-only packs: nothing in them is deleted or truncated by a ref
    // change or a fork (a fork only reads and hard-links them).
    let packs = crate::store::pack::Packs::read_only(dir.join("packs"));
    let store = Store::new(db, Some(dir.to_path_buf()), dir.display().to_string(), Some(lock), 0, (0, 0), packs);
    store.keep_unclean_mark(before);
    Ok(store)
}

/// `ringfs branch --store DIR …`: [`BranchOp`] on an unmounted store (its
/// lock taken for the time of the change). Errors: the store's, as text
/// through [`SnapError::Store`], and [`branch_op`]'s.
pub fn branch_store(dir: &Path, op: &BranchOp) -> Result<BranchReport, BranchStoreError> {
    let store = open_offline(dir).map_err(BranchStoreError::Store)?;
    let r = branch_op(&store, op).map_err(BranchStoreError::Snap);
    store.release_lock();
    r
}

/// Why a command on an unmounted store failed: opening the store, or the
/// command itself.
#[derive(Debug, thiserror::Error)]
pub enum BranchStoreError {
    #[error(transparent)]
    Store(StoreError),
    #[error(transparent)]
    Snap(SnapError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names_follow_the_rules() {
        for ok in ["main", "exp", "feature/x", "v1.2", "fix-3", "über", "abcg", "12345g", "a@b"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        let long = "x".repeat(101);
        for bad in ["", "HEAD", "BASE", "live", "@", "abc", "7", "abcd", "0123456789abcdef", "a b", "a\tb", "a\u{7f}", "a~1", "a^", "a:b", "a?", "a*", "a[", "a\\b", "a..b", "a//b", "a@{1}", "-a", ".a", "/a", "a/", "a.", "a.lock", &long] {
            assert!(matches!(check_name(bad), Err(SnapError::BadName { .. })), "{bad:?}");
        }
    }

    #[test]
    fn hex_ranges_cover_every_id_with_the_prefix() {
        let (lo, hi) = hex_range("abc1").unwrap();
        assert_eq!((lo[0], lo[1], lo[2], hi[1], hi[2], hi[31]), (0xab, 0xc1, 0, 0xc1, 0xff, 0xff));
        let (lo, hi) = hex_range("abcde").unwrap();
        assert_eq!((lo[2], hi[2]), (0xe0, 0xef));
        assert!(hex_range("abc").is_none() && hex_range("xyz1").is_none() && hex_range(&"a".repeat(65)).is_none());
    }
}
