//! `ringfs salvage`: a new store built from what survives in a damaged one.
//!
//! Owns: which source wins for a file's bytes (its working copy `wc/N`,
//! else its manifest's chunks from the database or from pack files), where
//! files without a name go (`lost+found/` in the new workspace, named by
//! inode number), and the report of what was recovered and what was not.
//! The new store is written only through the public [`Fs`] API (as a mount
//! would), so it is an ordinary store. Must not touch: the damaged store
//! (everything in it is opened read-only; redb's repair of a crashed
//! database happens in memory).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::fmt;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use redb::ReadTransaction;

use crate::fs::Fs;
use crate::inode::ROOT;
use crate::schema::*;
use crate::store::readonly::{guarded, open_fallback, open_read_only, open_unverified, shared_lock, RoDb};
use crate::store::scan::{schema_of, walk, Damage};
use crate::types::{Caller, Config, SetAttr, SetTime, StoreError, StoreLocation};

/// What [`salvage`] recovered and what it could not.
#[derive(Clone, Debug, Default)]
pub struct SalvageReport {
    pub from: PathBuf,
    pub to: PathBuf,
    /// Where the metadata came from (one line).
    pub metadata: String,
    /// What the pack files gave (one line, from [`salvage_packs`]).
    pub packs: String,
    /// Damage met reading the database (table and key).
    pub damage: Vec<Damage>,
    /// Paths (in the new workspace) recovered under their names, directories excepted.
    pub named: Vec<String>,
    /// Directories recovered under their names (the root excepted).
    pub dirs: u64,
    /// (path under lost+found/, where its bytes came from).
    pub lost_found: Vec<(String, String)>,
    /// (path, what was missing): named files not (or not wholly) recovered.
    pub lost: Vec<(String, String)>,
    /// Other facts (one line each).
    pub notes: Vec<String>,
}

impl SalvageReport {
    /// Every file the surviving metadata names was recovered whole.
    pub fn complete(&self) -> bool {
        self.lost.is_empty()
    }
}

impl fmt::Display for SalvageReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "salvage {} -> {}", self.from.display(), self.to.display())?;
        writeln!(f, "metadata: {}", self.metadata)?;
        for d in &self.damage {
            writeln!(f, "  damaged: {}: {}", d.place, d.what)?;
        }
        writeln!(f, "{}", self.packs)?;
        let (n, d) = (crate::count(self.named.len() as u64, "file", "files"), crate::count(self.dirs, "directory", "directories"));
        writeln!(f, "recovered with their names: {n}, {d}")?;
        if self.named.len() <= 20 {
            for p in &self.named {
                writeln!(f, "  {p}")?;
            }
        }
        writeln!(f, "recovered to lost+found (names lost): {}", self.lost_found.len())?;
        for (p, from) in &self.lost_found {
            writeln!(f, "  {p} (from {from})")?;
        }
        writeln!(f, "lost: {}", self.lost.len())?;
        for (p, what) in &self.lost {
            writeln!(f, "  {p}: {what}")?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

/// Chunks found in pack files: hash → (pack file, offset of the bytes, length).
#[derive(Debug, Default)]
pub struct PackChunks {
    pub index: HashMap<[u8; 32], (PathBuf, u64, u32)>,
    /// One line for the report, e.g. "packs: none found".
    pub summary: String,
}

/// Indexes the valid records of every `STORE/packs/*.pack` (pack format v1,
/// docs/FORMATS.md) by hash, to rebuild files whose working copy is missing
/// and whose index entry is unreadable: a record is valid iff its bytes hash
/// to its hash, so a damaged or torn pack still gives every record before
/// the damage. The summary names the packs read and those cut short.
pub fn salvage_packs(store: &Path) -> PackChunks {
    let dir = store.join("packs");
    let mut short = Vec::new();
    let ids = crate::store::pack::pack_files(&dir).unwrap_or_else(|e| {
        short.push(format!("{} cannot be listed ({e}), no chunk was read from it", dir.display()));
        Default::default()
    });
    let mut index = HashMap::new();
    for id in &ids {
        let p = dir.join(crate::store::pack::pack_name(*id));
        let size = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        match crate::store::pack::scan_pack(&p, |off, hash, bytes| {
            index.insert(*hash, (p.clone(), off, bytes.len() as u32));
        }) {
            Ok(valid) if valid < size => short.push(format!("{} valid up to byte {valid} of {size}", p.display())),
            Ok(_) => {}
            Err(e) => short.push(format!("{}: {e}", p.display())),
        }
    }
    let summary = if ids.is_empty() && short.is_empty() {
        "packs: none found".to_string()
    } else if short.is_empty() {
        format!("packs: {} pack files read, {} chunks", ids.len(), index.len())
    } else {
        format!("packs: {} pack files read, {} chunks; cut short: {}", ids.len(), index.len(), short.join("; "))
    };
    PackChunks { index, summary }
}

/// An inode's xattrs: (name, value).
type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// What the damaged database still yields.
#[derive(Default)]
struct Meta {
    /// ino → (record, local-only).
    inodes: HashMap<u64, (InodeRec, bool)>,
    /// parent → (name, child), in key order; synced entries first.
    dirents: BTreeMap<u64, Vec<(Vec<u8>, u64)>>,
    symlinks: HashMap<u64, Vec<u8>>,
    xattrs: HashMap<u64, Xattrs>,
    manifests: HashMap<u64, Vec<ChunkRef>>,
    /// The store's meta says it was shut down cleanly: every file's bytes
    /// are in the store, so a working copy that disagrees is damage.
    clean: bool,
}

/// Whether an inode record read without redb's checksums can be real:
/// [`InodeRec::implausible`] says nothing against it, and its times are
/// within ±2^34 s (about year 2500). Random bytes that happen to decode
/// fail this nearly always.
fn plausible(r: &InodeRec) -> bool {
    let secs = |t: (i64, u32)| t.0.unsigned_abs() < (1 << 34);
    r.implausible().is_none() && [r.atime, r.mtime, r.ctime, r.btime].into_iter().all(secs)
}

/// Whether `name` can be a directory entry's name: not empty, not `.` or
/// `..`, no `/` or NUL, at most 255 bytes (NAME_MAX).
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && name.len() <= 255 && !name.iter().any(|b| *b == b'/' || *b == 0)
}

/// Whether the working copy at `p` holds what `manifest` (a file of `size`
/// bytes) says: its size, and each chunk's range hashing to the chunk.
fn wc_matches(p: &Path, size: u64, manifest: &[ChunkRef]) -> bool {
    let Ok(f) = File::open(p) else { return false };
    if f.metadata().map(|m| m.len()).ok() != Some(size) {
        return false;
    }
    let mut buf = Vec::new();
    manifest.iter().all(|c| {
        buf.resize(c.len as usize, 0);
        f.read_exact_at(&mut buf, c.offset).is_ok() && blake3::hash(&buf).as_bytes() == &c.hash
    })
}

/// Reads every table it can, record by record (see [`walk`]).
fn read_meta(rtx: &ReadTransaction, damage: &mut Vec<Damage>) -> Meta {
    let schema = schema_of(rtx).unwrap_or(SCHEMA_VERSION);
    let mut m = Meta::default();
    walk(rtx, META, |k, v| {
        if k == "clean" {
            m.clean = v == 1;
        }
    });
    for (def, local) in [(INODES, false), (LOCAL_INODES, true)] {
        let w = walk(rtx, def, |k, v| match dec_inode(v, schema) {
            Ok(r) if !plausible(&r) => damage.push(Damage {
                place: format!("{} key {k}", if local { "local_inodes" } else { "inodes" }),
                what: "a record that decodes but cannot be real (file type, times or mode out of range): taken as damage".into(),
            }),
            Ok(r) => {
                m.inodes.entry(k).or_insert((r, local));
            }
            Err(e) => damage.push(Damage { place: format!("{} key {k}", if local { "local_inodes" } else { "inodes" }), what: format!("undecodable: {e}") }),
        });
        damage.extend(w.damage);
    }
    for def in [DIRENTS, LOCAL_DIRENTS] {
        let w = walk(rtx, def, |(parent, name), (child, _)| m.dirents.entry(parent).or_default().push((name.to_vec(), child)));
        damage.extend(w.damage);
    }
    for def in [SYMLINKS, LOCAL_SYMLINKS] {
        let w = walk(rtx, def, |k, v| {
            m.symlinks.entry(k).or_insert_with(|| v.to_vec());
        });
        damage.extend(w.damage);
    }
    for def in [XATTRS, LOCAL_XATTRS] {
        let w = walk(rtx, def, |(ino, name), v| m.xattrs.entry(ino).or_default().push((name.to_vec(), v.to_vec())));
        damage.extend(w.damage);
    }
    let (found, d) = crate::store::scan::manifests(rtx);
    m.manifests.extend(found);
    damage.extend(d);
    m
}

/// Builds a new store at `to` (which must not exist or be empty; the
/// caller checks) from what survives in the store directory `from`, which
/// is never written: the metadata every table of its database still yields
/// (a database whose last commit is damaged is read at the commit before,
/// and said so), the working copies `wc/N` (the truth for inode N), and the
/// chunks of manifests (from the database, or from pack files via
/// [`salvage_packs`]) for files whose working copy is missing. Files and
/// directories whose names are lost go to `lost+found/<ino>` in the new
/// workspace, as do the files `from/lost+found` kept after earlier crashes.
///
/// Errors: [`StoreError::Locked`] while a daemon serves `from`;
/// [`StoreError::Unusable`] for a fork whose tree is unwritten (D54, D60: its live tree
/// is a commit, not rows; nothing is created); errors
/// creating the new store (`to`) as [`Fs::open_store`] gives them.
pub fn salvage(from: &Path, to: &Path) -> Result<SalvageReport, StoreError> {
    let _lock = shared_lock(from)?;
    let mut rep = SalvageReport { from: from.to_path_buf(), to: to.to_path_buf(), ..Default::default() };
    // The database, read-only; at the commit before a damaged last one.
    let db: Option<RoDb> = match std::fs::metadata(from.join("store.redb")).map(|m| m.len()) {
        Err(_) => {
            rep.metadata = "none: store.redb is missing (every file goes to lost+found)".into();
            None
        }
        Ok(0) => {
            rep.metadata = "none: store.redb is empty (every file goes to lost+found)".into();
            None
        }
        Ok(_) => match open_read_only(from) {
            Ok(db) => {
                rep.metadata = "read from store.redb".into();
                Some(db)
            }
            Err(StoreError::Locked { pid, path }) => return Err(StoreError::Locked { pid, path }),
            // Damaged (redb would fall back on its own): the commit before.
            Err(e) => {
                let why = reason_of(&e);
                match open_unverified(from) {
                    Ok(db) => {
                        rep.metadata = format!("read from its last commit without redb's checksums ({why}); records in damaged pages are skipped");
                        Some(db)
                    }
                    Err(eu) => {
                        tracing::debug!("reading the last commit unverified: {eu}");
                        match open_fallback(from) {
                            Ok(db) => {
                                rep.metadata = format!("read from the last durable commit before the damaged one ({why}); files made or renamed since survive in the working copies, under lost+found");
                                Some(db)
                            }
                            Err(e2) => {
                                let why2 = reason_of(&e2);
                                let also = if why2 == why { String::new() } else { format!(": {why2}") };
                                rep.metadata = format!(
                                    "none: store.redb could not be read ({why}; its last durable commit neither{also}); what follows was recovered from the working copies and pack files alone, every file under lost+found"
                                );
                                None
                            }
                        }
                    }
                }
            }
        },
    };
    let rtx = db.as_ref().and_then(|d| guarded(|| d.begin_read()).ok().and_then(|r| r.ok()));
    if db.is_some() && rtx.is_none() {
        rep.metadata = "none: store.redb opens but no read transaction can begin on it; what follows was recovered from the working copies and pack files alone, every file under lost+found".into();
    }
    // A fork whose tree is unwritten (never mounted, or mounted and never
    // changed: D54, D60) keeps its live tree as a commit, not as rows:
    // rebuilt from its tables it would be an empty workspace reported
    // whole. Refused before anything is created; its tree is recovered by
    // what reads commits (a commit in a mount writes it, a fork copies it).
    // Guarded: reading meta of a damaged database can panic inside redb.
    let pending = rtx.as_ref().and_then(|r| guarded(|| r.open_table(META).ok().and_then(|m| crate::snap::lazy::pending(&m).ok().flatten())).ok().flatten());
    if let Some(c) = pending {
        let d = from.display();
        return Err(StoreError::Unusable {
            dir: from.to_path_buf(),
            what: format!(
                "store {d} is a fork whose tree was never written (never mounted, or mounted and never changed): its live tree is commit {} (kept as snapshot objects, not as the table rows salvage rebuilds from), so salvage would build an empty workspace; nothing was written. Mount it and commit (`ringfs mount MOUNTPOINT --store {d}`, then `ringfs commit MOUNTPOINT` writes its tree; `ringfs fsck --store {d}` checks it first), or fork that commit into a new store (`ringfs fork --store {d} --to NEWMNT --new-store NEWDIR`)",
                crate::snap::object::hex_id(&c)
            ),
        });
    }
    let mut damage = Vec::new();
    let meta = rtx.as_ref().map(|r| read_meta(r, &mut damage)).unwrap_or_default();
    rep.damage = damage;
    if rtx.is_none() {
        rep.notes.push("no metadata could be read: names, directories, owners, modes and times are lost; the files' bytes are in lost+found/ of the new workspace, named by inode number (`file` or `head` tells what each is)".into());
    }
    let packs = salvage_packs(from);
    rep.packs = packs.summary.clone();
    let chunks = Chunks { rtx: rtx.as_ref(), packs: &packs, packs_dir: from.join("packs") };

    let fs = Fs::open_store(Config::new(StoreLocation::Dir(to.to_path_buf())))?;
    let mut b = Builder {
        fs: &fs,
        from,
        meta: &meta,
        chunks: &chunks,
        placed: HashMap::new(),
        suspect: HashSet::new(),
        done_attrs: Vec::new(),
        lost_found: None,
        rep: &mut rep,
    };
    b.done_attrs.push((ROOT, ROOT));
    b.place_tree(ROOT, ROOT, String::new());
    b.place_unnamed();
    b.apply_attrs();
    drop(b);
    if let Err(e) = fs.shutdown() {
        rep.notes.push(format!("the new store's final commit failed: {e}"));
        rep.lost.push((String::from("(all)"), "the new store could not be committed".into()));
    }
    Ok(rep)
}

/// What went wrong with the damaged store's database, without the fix a
/// [`StoreError`]'s message gives (which for a damaged database is to run
/// salvage: the command printing this).
fn reason_of(e: &StoreError) -> String {
    match e {
        StoreError::Corrupt { reason, .. } => reason.clone(),
        StoreError::Damaged { what, .. } | StoreError::Unusable { what, .. } => what.clone(),
        StoreError::Io { path, source } => format!("{}: {source}", path.display()),
        e => e.to_string(),
    }
}

/// Where chunk bytes come from: the database's chunk table, then packs.
struct Chunks<'a> {
    rtx: Option<&'a ReadTransaction>,
    packs: &'a PackChunks,
    /// `STORE/packs`, where the index's locations point.
    packs_dir: PathBuf,
}

impl Chunks<'_> {
    /// The bytes of chunk `hash` (checked against it), if anything has them.
    fn get(&self, hash: &[u8; 32]) -> Option<Vec<u8>> {
        let from_db = self.rtx.and_then(|r| {
            guarded(|| {
                // Schema 1/2: bytes in the database; schema 3: its index says where in the packs.
                let v2 = r.open_table(CHUNKS_V2).ok().and_then(|t| t.get(&hash[..]).ok().flatten().map(|g| g.value().to_vec()));
                v2.or_else(|| {
                    let (pack, offset, len, _) = r.open_table(CHUNKS).ok()?.get(&hash[..]).ok()??.value();
                    crate::store::pack::read_chunk(&self.packs_dir, crate::store::pack::Loc { pack, offset, len }).ok()
                })
            })
            .ok()
            .flatten()
        });
        let ok = |b: &Vec<u8>| blake3::hash(b).as_bytes() == hash;
        if let Some(b) = from_db.filter(ok) {
            return Some(b);
        }
        let (p, off, len) = self.packs.index.get(hash)?;
        let mut buf = vec![0u8; *len as usize];
        File::open(p).ok()?.read_exact_at(&mut buf, *off).ok()?;
        Some(buf).filter(ok)
    }
}

const ROOT_CALLER: Caller = Caller { uid: 0, gid: 0, pid: 0, umask: 0 };

struct Builder<'a> {
    fs: &'a Fs,
    from: &'a Path,
    meta: &'a Meta,
    chunks: &'a Chunks<'a>,
    /// old ino → new ino.
    placed: HashMap<u64, u64>,
    /// Old inodes whose records did not verify ([`Builder::verify_file`]):
    /// placed under lost+found, never given a name (nor a hard link).
    suspect: HashSet<u64>,
    /// (old ino, new ino) in the order made, for attributes at the end.
    done_attrs: Vec<(u64, u64)>,
    lost_found: Option<u64>,
    rep: &'a mut SalvageReport,
}

impl Builder<'_> {
    /// Recreates the tree below the old directory `old` as the new
    /// directory `new` (at workspace path `path`), breadth first.
    fn place_tree(&mut self, old: u64, new: u64, path: String) {
        let mut queue = VecDeque::from([(old, new, path)]);
        let mut seen = HashSet::from([old]);
        while let Some((od, nd, p)) = queue.pop_front() {
            let Some(children) = self.meta.dirents.get(&od) else { continue };
            for (name, child) in children {
                let cp = format!("{p}/{}", String::from_utf8_lossy(name));
                if !valid_name(name) || *child == 0 || *child == od {
                    // Read unverified from a damaged page: not a real entry.
                    self.rep.notes.push(format!(
                        "a directory entry in {} (name {:?}, inode {child}) is not a possible one (garbage in a damaged page): skipped",
                        if p.is_empty() { "/" } else { &p },
                        String::from_utf8_lossy(name)
                    ));
                    continue;
                }
                if self.suspect.contains(child) {
                    continue; // under lost+found, its names not trusted
                }
                if let Some(&n) = self.placed.get(child) {
                    // Another name of a file already made: a hard link.
                    let is_dir = self.meta.inodes.get(child).map(|(r, _)| r.mode & libc::S_IFMT == libc::S_IFDIR).unwrap_or(false);
                    if !is_dir && self.fs.link(&ROOT_CALLER, n, nd, OsStr::from_bytes(name)).is_ok() {
                        self.rep.named.push(cp);
                    }
                    continue;
                }
                if let Some(newdir) = self.place_one(*child, nd, name, &cp) {
                    if seen.insert(*child) {
                        queue.push_back((*child, newdir, cp));
                    }
                }
            }
        }
    }

    /// Makes the inode `old` as `name` in the new directory `parent`.
    /// Returns the new inode when it is a directory (to be filled).
    fn place_one(&mut self, old: u64, parent: u64, name: &[u8], path: &str) -> Option<u64> {
        let name_os = OsStr::from_bytes(name);
        let Some((rec, local)) = self.meta.inodes.get(&old).cloned() else {
            // A name whose inode record is lost: a directory if entries name
            // it as their parent, else its working copy, if any.
            if self.meta.dirents.contains_key(&old) {
                match self.fs.mkdir(&ROOT_CALLER, parent, name_os, 0o755) {
                    Ok(a) => {
                        self.rep.dirs += 1;
                        self.placed.insert(old, a.ino);
                        self.rep.notes.push(format!("{path}: its inode record is lost; a directory (it has entries), mode 0755, owner root"));
                        return Some(a.ino);
                    }
                    Err(e) => {
                        self.rep.lost.push((path.to_string(), format!("mkdir: {e:?}")));
                        return None;
                    }
                }
            } else if let Some(t) = self.meta.symlinks.get(&old).cloned() {
                match self.fs.symlink(&ROOT_CALLER, parent, name_os, OsStr::from_bytes(&t)) {
                    Ok(a) => {
                        self.placed.insert(old, a.ino);
                        self.rep.named.push(path.to_string());
                        self.rep.notes.push(format!("{path}: its inode record is lost; a symlink (its target survives), owner root"));
                    }
                    Err(e) => self.rep.lost.push((path.to_string(), format!("symlink: {e:?}"))),
                }
            } else if self.wc_path(old, false).is_file() {
                if let Some(n) = self.make_file(old, parent, name_os, 0o644, None, false, path) {
                    self.placed.insert(old, n);
                    self.rep.named.push(path.to_string());
                    self.rep.notes.push(format!("{path}: its inode record is lost; mode 0644, owner root"));
                }
            } else {
                self.rep.lost.push((path.to_string(), format!("its inode {old} has no record and no working copy")));
            }
            return None;
        };
        let mut fmt = rec.mode & libc::S_IFMT;
        if fmt != libc::S_IFREG && fmt != libc::S_IFDIR && (self.wc_path(old, false).is_file() || self.wc_path(old, true).is_file()) {
            // Only regular files have working copies: the record is wrong.
            self.rep.notes.push(format!("{path}: its inode record says file type {fmt:o} but it has a working copy: recovered as a regular file"));
            fmt = libc::S_IFREG;
        }
        let made = match fmt {
            libc::S_IFDIR => match self.fs.mkdir(&ROOT_CALLER, parent, name_os, 0o700) {
                Ok(a) => {
                    self.rep.dirs += 1;
                    self.placed.insert(old, a.ino);
                    self.done_attrs.push((old, a.ino));
                    return Some(a.ino);
                }
                Err(e) => Err(format!("mkdir: {e:?}")),
            },
            libc::S_IFREG => {
                if let Err(why) = self.verify_file(old, &rec, local) {
                    self.place_suspect(old, &rec, local, path, &why);
                    return None;
                }
                match self.make_file(old, parent, name_os, 0o600, Some(&rec), local, path) {
                    Some(n) => Ok(n),
                    None => return None,
                }
            }
            libc::S_IFLNK => match self.meta.symlinks.get(&old) {
                Some(t) => self.fs.symlink(&ROOT_CALLER, parent, name_os, OsStr::from_bytes(t)).map(|a| a.ino).map_err(|e| format!("symlink: {e:?}")),
                None => Err("symlink whose target is lost".into()),
            },
            _ => self.fs.mknod(&ROOT_CALLER, parent, name_os, rec.mode, rec.rdev).map(|a| a.ino).map_err(|e| format!("mknod: {e:?}")),
        };
        match made {
            Ok(n) => {
                self.placed.insert(old, n);
                self.done_attrs.push((old, n));
                self.rep.named.push(path.to_string());
            }
            Err(e) => self.rep.lost.push((path.to_string(), e)),
        }
        None
    }

    /// Whether the inode record `rec` of the regular file `old` (read
    /// without redb's checksums, so possibly garbage that passed
    /// [`plausible`]) agrees with what survives independently of the
    /// database: its working copy's size equal to the record's (any size
    /// when the store was not shut down cleanly: the working copy is then
    /// the truth), or else its manifest: chunks in ascending order, not
    /// overlapping, inside the record's size (holes are not in manifests),
    /// each found in the database or a pack with bytes hashing to it. An
    /// empty file with neither verifies. `Err`: why not, one phrase.
    fn verify_file(&self, old: u64, rec: &InodeRec, local: bool) -> Result<(), String> {
        let wc = self.wc_candidates(old, local).into_iter().find(|p| p.is_file());
        let wc_len = wc.as_ref().and_then(|p| std::fs::metadata(p).ok()).map(|m| m.len());
        if wc_len.is_some_and(|l| !self.meta.clean || l == rec.size) {
            return Ok(());
        }
        let size = rec.size;
        let Some(m) = self.meta.manifests.get(&old) else {
            return match wc_len {
                None if size == 0 => Ok(()),
                None => Err(format!("its record says {size} bytes but it has neither a working copy nor a manifest")),
                Some(l) => Err(format!("its record says {size} bytes, its working copy has {l}, and it has no manifest")),
            };
        };
        let mut end = 0u64;
        for c in m {
            let (a, b) = (c.offset, c.offset + c.len as u64);
            if a < end || b > size {
                return Err(format!("its manifest's chunk at bytes {a}..{b} overlaps the one before or lies past the record's size {size}"));
            }
            end = b;
            if self.chunks.get(&c.hash).is_none() {
                return Err(format!("its manifest names chunk {} (bytes {a}..{b}), which neither the database nor a pack holds", hex(&c.hash)));
            }
        }
        Ok(())
    }

    /// Places the regular file `old`, whose records did not verify (`why`),
    /// as `lost+found/<old>` instead of under its name `path`, with
    /// whatever bytes survive (its working copy, else its manifest's chunks).
    fn place_suspect(&mut self, old: u64, rec: &InodeRec, local: bool, path: &str, why: &str) {
        self.suspect.insert(old);
        let Some(lf) = self.lost_found_dir() else {
            self.rep.lost.push((path.to_string(), format!("its records do not verify ({why}) and lost+found could not be made")));
            return;
        };
        let name = old.to_string();
        let lpath = format!("/lost+found/{name}");
        if let Some(n) = self.make_file(old, lf, OsStr::new(&name), 0o600, Some(rec), local, &lpath) {
            self.placed.insert(old, n);
            self.done_attrs.push((old, n));
            self.rep.lost_found.push((lpath, format!("inode {old}, named {path} by records that do not verify: {why}")));
        }
    }

    /// `from/wc/N` or (local-only) `from/local/N`.
    fn wc_path(&self, ino: u64, local: bool) -> PathBuf {
        self.from.join(if local { "local" } else { "wc" }).join(ino.to_string())
    }

    /// Where the backing file of inode `ino` may be, first match wins: its
    /// side's directory, the other side's, then the same set aside as
    /// `.doomed-N` by a removal that the surviving metadata does not
    /// record (D76: recovery would put it back).
    fn wc_candidates(&self, ino: u64, local: bool) -> [PathBuf; 4] {
        let doomed = |l: bool| self.from.join(if l { "local" } else { "wc" }).join(crate::local::doomed_name(ino));
        [self.wc_path(ino, local), self.wc_path(ino, !local), doomed(local), doomed(!local)]
    }

    /// Creates a regular file and fills it: from its working copy (the
    /// truth) when there is one, else from its manifest's chunks. Records
    /// in the report what could not be filled (the file is still made,
    /// with holes where chunks are missing). The new inode, or None.
    #[allow(clippy::too_many_arguments)]
    fn make_file(&mut self, old: u64, parent: u64, name: &OsStr, mode: u32, rec: Option<&InodeRec>, local: bool, path: &str) -> Option<u64> {
        let (attr, fh) = match self.fs.create(&ROOT_CALLER, parent, name, mode, libc::O_RDWR as u32) {
            Ok(x) => x,
            Err(e) => {
                self.rep.lost.push((path.to_string(), format!("create: {e:?}")));
                return None;
            }
        };
        let mut missing = Vec::new();
        let mut wc = self.wc_candidates(old, local).into_iter().find(|p| p.is_file());
        // After a clean shutdown the store holds every file's bytes: a
        // working copy that disagrees with its manifest is damage, and the
        // manifest wins when all its chunks are at hand.
        if let (Some(p), Some(r), Some(m)) = (&wc, rec, self.meta.manifests.get(&old)) {
            if self.meta.clean && !local && !wc_matches(p, r.size, m) && m.iter().all(|c| self.chunks.get(&c.hash).is_some()) {
                self.rep.notes.push(format!("{path}: its working copy {} does not match the stored content (size or chunk hashes); rebuilt from the store", p.display()));
                wc = None;
            }
        }
        if let Some(p) = wc {
            if let Err(e) = self.copy_from(&p, attr.ino, fh) {
                missing.push(format!("its working copy {} could not be read whole ({e})", p.display()));
            }
        } else {
            let size = rec.map(|r| r.size).unwrap_or(0);
            match self.meta.manifests.get(&old) {
                Some(m) => {
                    for c in m {
                        match self.chunks.get(&c.hash) {
                            Some(b) => {
                                let _ = self.fs.write(fh, c.offset, &b);
                            }
                            None => missing.push(format!("bytes {}..{} (chunk {}) are in neither a working copy, the database nor a pack", c.offset, c.offset + c.len as u64, hex(&c.hash))),
                        }
                    }
                }
                None if size > 0 => missing.push(format!("no working copy and no manifest for its {size} bytes")),
                None => {}
            }
            let s = SetAttr { size: Some(size), fh: Some(fh), ..Default::default() };
            let _ = self.fs.setattr(&ROOT_CALLER, attr.ino, &s);
        }
        let _ = self.fs.release(fh);
        if !missing.is_empty() {
            self.rep.lost.push((path.to_string(), missing.join("; ")));
        }
        Some(attr.ino)
    }

    /// Copies the file at `p` into the new file `ino` open as `fh`: its
    /// data extents only (lseek(2) SEEK_DATA / SEEK_HOLE, as the hash
    /// workers cut them), then its size, so a sparse file stays sparse.
    fn copy_from(&self, p: &Path, ino: u64, fh: u64) -> std::io::Result<()> {
        let f = File::open(p)?;
        let size = f.metadata()?.len();
        let mut buf = vec![0u8; 1 << 20];
        let io = |e: crate::types::Errno| std::io::Error::other(format!("{e:?}"));
        for (start, end) in crate::wc::hash::data_extents(&f, size)? {
            let mut off = start;
            while off < end {
                let want = buf.len().min((end - off) as usize);
                let n = f.read_at(&mut buf[..want], off)?;
                if n == 0 {
                    return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("ends at {off} of {size} bytes")));
                }
                self.fs.write(fh, off, &buf[..n]).map_err(io)?;
                off += n as u64;
            }
        }
        let s = SetAttr { size: Some(size), fh: Some(fh), ..Default::default() };
        self.fs.setattr(&ROOT_CALLER, ino, &s).map_err(io)?;
        Ok(())
    }

    /// The new workspace's `lost+found` directory (made at first use).
    fn lost_found_dir(&mut self) -> Option<u64> {
        if self.lost_found.is_none() {
            let name = OsStr::new("lost+found");
            let ino = match self.fs.mkdir(&ROOT_CALLER, ROOT, name, 0o700) {
                Ok(a) => Some(a.ino),
                Err(_) => self.fs.lookup(&ROOT_CALLER, ROOT, name).ok().filter(|a| a.mode & libc::S_IFMT == libc::S_IFDIR).map(|a| a.ino),
            };
            self.lost_found = ino;
        }
        self.lost_found
    }

    /// Everything with bytes or records but no name reached from the root:
    /// inodes (directories with their subtrees), working copies without an
    /// inode, and the files `from/lost+found` holds.
    fn place_unnamed(&mut self) {
        let mut orphans = 0;
        let mut ids: Vec<u64> = self.meta.inodes.keys().copied().filter(|i| *i != ROOT && !self.placed.contains_key(i)).collect();
        // The tops of unnamed subtrees first (inodes no unplaced directory
        // names), so that each subtree comes along with its directory
        // whatever the inode numbers; then whatever is left (cycles).
        let unplaced: HashSet<u64> = ids.iter().copied().collect();
        let named_inside: HashSet<u64> = unplaced.iter().filter_map(|d| self.meta.dirents.get(d)).flatten().map(|(_, c)| *c).collect();
        ids.sort_by_key(|i| (named_inside.contains(i), *i));
        for old in ids {
            if self.placed.contains_key(&old) {
                continue; // placed inside an unnamed directory's subtree
            }
            let rec = &self.meta.inodes[&old].0;
            if rec.nlink == 0 {
                orphans += 1; // removed while open: ext4 frees these too
                continue;
            }
            let Some(lf) = self.lost_found_dir() else { return };
            let name = old.to_string();
            let path = format!("/lost+found/{name}");
            let before = self.rep.named.len();
            if let Some(newdir) = self.place_one(old, lf, name.as_bytes(), &path) {
                self.place_tree(old, newdir, path.clone());
            }
            if self.placed.contains_key(&old) && !self.suspect.contains(&old) {
                self.rep.named.truncate(before.min(self.rep.named.len()));
                self.rep.lost_found.push((path, format!("inode {old}, whose name is lost")));
            }
        }
        if orphans > 0 {
            self.rep.notes.push(format!("{orphans} inodes removed while open before the damage were not recovered (as a restart frees them)"));
        }
        // Working copies of no placed inode.
        for dir in ["wc", "local"] {
            let mut names: Vec<String> = std::fs::read_dir(self.from.join(dir))
                .map(|r| r.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            names.sort_by_key(|n| (n.parse::<u64>().unwrap_or(u64::MAX), n.clone()));
            for n in names {
                if n.parse::<u64>().ok().is_some_and(|i| self.placed.contains_key(&i)) {
                    continue;
                }
                // Set aside by a removal (used above if its inode is named).
                if crate::local::doomed_ino(&n).is_some() {
                    continue;
                }
                let p = self.from.join(dir).join(&n);
                if !p.is_file() || std::fs::metadata(&p).map(|m| m.len() == 0).unwrap_or(true) {
                    continue; // the pool's empty files
                }
                self.lost_found_file(&p, if dir == "wc" { n.clone() } else { format!("local-{n}") });
            }
        }
        let mut kept: Vec<PathBuf> = std::fs::read_dir(self.from.join("lost+found")).map(|r| r.filter_map(|e| e.ok()).map(|e| e.path()).collect()).unwrap_or_default();
        kept.sort();
        for p in kept.into_iter().filter(|p| p.is_file()) {
            let n = format!("store-{}", p.file_name().unwrap_or_default().to_string_lossy());
            self.lost_found_file(&p, n);
        }
    }

    /// Copies the file `p` to `lost+found/<name>` in the new workspace.
    fn lost_found_file(&mut self, p: &Path, name: String) {
        let Some(lf) = self.lost_found_dir() else { return };
        let path = format!("/lost+found/{name}");
        match self.fs.create(&ROOT_CALLER, lf, OsStr::new(&name), 0o600, libc::O_RDWR as u32) {
            Ok((attr, fh)) => {
                let r = self.copy_from(p, attr.ino, fh);
                let _ = self.fs.release(fh);
                match r {
                    Ok(()) => self.rep.lost_found.push((path, p.display().to_string())),
                    Err(e) => self.rep.lost.push((path, format!("{} could not be read whole: {e}", p.display()))),
                }
            }
            Err(e) => self.rep.lost.push((path, format!("create: {e:?}"))),
        }
    }

    /// Owners, modes, times, xattrs and inode flags of everything made,
    /// last (a directory's mode may forbid what was made in it; flags such
    /// as immutable forbid any change).
    fn apply_attrs(&mut self) {
        for &(old, new) in self.done_attrs.iter().rev() {
            let Some((rec, _)) = self.meta.inodes.get(&old) else { continue };
            if let Some(xs) = self.meta.xattrs.get(&old) {
                for (n, v) in xs {
                    let _ = self.fs.setxattr(&ROOT_CALLER, new, OsStr::from_bytes(n), v, 0);
                }
            }
            let is_link = rec.mode & libc::S_IFMT == libc::S_IFLNK;
            let s = SetAttr {
                mode: (!is_link).then_some(rec.mode & 0o7777),
                uid: Some(rec.uid),
                gid: Some(rec.gid),
                atime: Some(SetTime::At(rec.atime.0, rec.atime.1)),
                mtime: Some(SetTime::At(rec.mtime.0, rec.mtime.1)),
                ..Default::default()
            };
            let _ = self.fs.setattr(&ROOT_CALLER, new, &s);
            if rec.flags != 0 {
                let _ = self.fs.set_flags(new, rec.flags);
            }
        }
    }
}
