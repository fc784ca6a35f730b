//! Snapshot objects, version 1 (docs/FORMATS.md "Snapshot objects"): file
//! manifests, directory objects and commit objects, their byte encoding
//! (hand-written, fixed field order, little-endian; docs/DECISIONS.md
//! "snapshot object encoding") and their ids (BLAKE3 of the encoded bytes,
//! which begin with the magic, the version and the kind).
//!
//! Owns: the bytes of an object. Must not touch: redb, the inode table.

use crate::schema::ChunkRef;

/// An object id: BLAKE3 of the object's encoded bytes.
pub type ObjectId = [u8; 32];

/// The first bytes of every encoded object.
pub const MAGIC: &[u8; 4] = b"RFSO";
/// The encoding version this build writes and reads.
pub const OBJECT_VERSION: u8 = 1;

/// Object kinds (the byte after the version).
pub const KIND_FILE: u8 = 1;
pub const KIND_DIR: u8 = 2;
pub const KIND_COMMIT: u8 = 3;

/// A file manifest: the file's size in bytes and its chunks in offset
/// order (holes between them are not stored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileObj {
    pub size: u64,
    pub chunks: Vec<ChunkRef>,
}

/// What kind of inode a directory entry names (the byte in the entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    File = 1,
    Dir = 2,
    Symlink = 3,
    Fifo = 4,
    CharDev = 5,
    BlockDev = 6,
    Socket = 7,
}

impl EntryKind {
    /// The `S_IFMT` bits of this kind (the inverse of [`EntryKind::of_mode`]).
    pub fn type_bits(self) -> u32 {
        match self {
            EntryKind::File => libc::S_IFREG,
            EntryKind::Dir => libc::S_IFDIR,
            EntryKind::Symlink => libc::S_IFLNK,
            EntryKind::Fifo => libc::S_IFIFO,
            EntryKind::CharDev => libc::S_IFCHR,
            EntryKind::BlockDev => libc::S_IFBLK,
            EntryKind::Socket => libc::S_IFSOCK,
        }
    }

    /// The kind of an `st_mode` (`None` for an unknown file type).
    pub fn of_mode(mode: u32) -> Option<EntryKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => EntryKind::File,
            libc::S_IFDIR => EntryKind::Dir,
            libc::S_IFLNK => EntryKind::Symlink,
            libc::S_IFIFO => EntryKind::Fifo,
            libc::S_IFCHR => EntryKind::CharDev,
            libc::S_IFBLK => EntryKind::BlockDev,
            libc::S_IFSOCK => EntryKind::Socket,
            _ => return None,
        })
    }
    fn from_byte(b: u8) -> Option<EntryKind> {
        Some(match b {
            1 => EntryKind::File,
            2 => EntryKind::Dir,
            3 => EntryKind::Symlink,
            4 => EntryKind::Fifo,
            5 => EntryKind::CharDev,
            6 => EntryKind::BlockDev,
            7 => EntryKind::Socket,
            _ => return None,
        })
    }
    /// A short name for diffs: "file", "dir", "symlink", "fifo", "chardev",
    /// "blockdev", "socket".
    pub fn name(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Symlink => "symlink",
            EntryKind::Fifo => "fifo",
            EntryKind::CharDev => "chardev",
            EntryKind::BlockDev => "blockdev",
            EntryKind::Socket => "socket",
        }
    }
}

/// The attributes a snapshot keeps of an inode: permission bits
/// (`mode & 0o7777`), owner, mtime (seconds, nanoseconds), size (regular
/// files: bytes; symlinks: target length; others 0), device number, inode
/// flags (FS_IOC_GETFLAGS) and xattrs sorted by name. Not kept: atime,
/// ctime, birth time, link count, inode number.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: (i64, u32),
    pub size: u64,
    pub rdev: u32,
    pub flags: u32,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// What an entry points at: a file manifest or directory object, a
/// symlink's target (inline), or nothing (devices, fifos, sockets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Object(ObjectId),
    Symlink(Vec<u8>),
    None,
}

/// One entry of a directory object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: Vec<u8>,
    pub kind: EntryKind,
    pub meta: Meta,
    pub target: Target,
}

/// A directory object: its entries sorted by name bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirObj {
    pub entries: Vec<Entry>,
}

/// A commit object: the root directory object and the root's own
/// attributes, parent commits (none for the first), the time it was made
/// (seconds, nanoseconds since the epoch), the journal position it covers
/// (every change up to it is in the tree), the store it was made in
/// (`meta["store_id"]`), who made it (`user@host`) and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitObj {
    pub root: ObjectId,
    pub root_meta: Meta,
    pub parents: Vec<ObjectId>,
    pub time: (i64, u32),
    pub journal_pos: u64,
    pub store_id: u64,
    pub author: String,
    pub message: String,
}

/// The id of encoded bytes.
pub fn id_of(bytes: &[u8]) -> ObjectId {
    *blake3::hash(bytes).as_bytes()
}

/// Lower-case hex of an id.
pub fn hex_id(id: &ObjectId) -> String {
    crate::schema::hex(id)
}

struct W(Vec<u8>);

impl W {
    fn new(kind: u8) -> W {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(MAGIC);
        v.push(OBJECT_VERSION);
        v.push(kind);
        W(v)
    }
    fn u8(&mut self, x: u8) {
        self.0.push(x);
    }
    fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn i64(&mut self, x: i64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn id(&mut self, id: &ObjectId) {
        self.0.extend_from_slice(id);
    }
    fn meta(&mut self, m: &Meta) {
        self.u32(m.mode);
        self.u32(m.uid);
        self.u32(m.gid);
        self.i64(m.mtime.0);
        self.u32(m.mtime.1);
        self.u64(m.size);
        self.u32(m.rdev);
        self.u32(m.flags);
        self.u32(m.xattrs.len() as u32);
        for (k, v) in &m.xattrs {
            self.bytes(k);
            self.bytes(v);
        }
    }
}

/// Encodes a file manifest.
pub fn enc_file(f: &FileObj) -> Vec<u8> {
    let mut w = W::new(KIND_FILE);
    w.u64(f.size);
    w.u32(f.chunks.len() as u32);
    for c in &f.chunks {
        w.u64(c.offset);
        w.u32(c.len);
        w.id(&c.hash);
    }
    w.0
}

/// Encodes a directory object (the entries must be sorted by name).
pub fn enc_dir(d: &DirObj) -> Vec<u8> {
    let mut w = W::new(KIND_DIR);
    w.u32(d.entries.len() as u32);
    for e in &d.entries {
        w.bytes(&e.name);
        w.u8(e.kind as u8);
        w.meta(&e.meta);
        match &e.target {
            Target::Object(id) => w.id(id),
            Target::Symlink(t) => w.bytes(t),
            Target::None => {}
        }
    }
    w.0
}

/// Encodes a commit object.
pub fn enc_commit(c: &CommitObj) -> Vec<u8> {
    let mut w = W::new(KIND_COMMIT);
    w.id(&c.root);
    w.meta(&c.root_meta);
    w.u32(c.parents.len() as u32);
    for p in &c.parents {
        w.id(p);
    }
    w.i64(c.time.0);
    w.u32(c.time.1);
    w.u64(c.journal_pos);
    w.u64(c.store_id);
    w.bytes(c.author.as_bytes());
    w.bytes(c.message.as_bytes());
    w.0
}

struct R<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len()).ok_or_else(|| format!("truncated at byte {}", self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn i64(&mut self) -> Result<i64, String> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn id(&mut self) -> Result<ObjectId, String> {
        Ok(self.take(32)?.try_into().unwrap())
    }
    /// One directory entry (name, kind, meta, target).
    fn entry(&mut self) -> Result<Entry, String> {
        let name = self.bytes()?;
        let kb = self.u8()?;
        let kind = EntryKind::from_byte(kb).ok_or_else(|| format!("entry kind {kb}"))?;
        let meta = self.meta()?;
        let target = match kind {
            EntryKind::File | EntryKind::Dir => Target::Object(self.id()?),
            EntryKind::Symlink => Target::Symlink(self.bytes()?),
            _ => Target::None,
        };
        Ok(Entry { name, kind, meta, target })
    }
    /// Past a length-prefixed byte string ([`R::bytes`] without the copy).
    fn skip_bytes(&mut self) -> Result<(), String> {
        let n = self.u32()? as usize;
        self.take(n).map(|_| ())
    }
    /// Past one [`R::meta`] (same layout), allocating nothing.
    fn skip_meta(&mut self) -> Result<(), String> {
        // mode, uid, gid, mtime (i64, u32), size, rdev, flags; xattrs.
        self.take(4 + 4 + 4 + 8 + 4 + 8 + 4 + 4)?;
        for _ in 0..u64::from(self.u32()?) * 2 {
            self.skip_bytes()?;
        }
        Ok(())
    }
    fn meta(&mut self) -> Result<Meta, String> {
        let mut m = Meta { mode: self.u32()?, uid: self.u32()?, gid: self.u32()?, ..Default::default() };
        m.mtime = (self.i64()?, self.u32()?);
        m.size = self.u64()?;
        m.rdev = self.u32()?;
        m.flags = self.u32()?;
        let n = self.u32()?;
        for _ in 0..n {
            let k = self.bytes()?;
            let v = self.bytes()?;
            m.xattrs.push((k, v));
        }
        Ok(m)
    }
    fn end(&self) -> Result<(), String> {
        if self.at == self.b.len() {
            Ok(())
        } else {
            Err(format!("{} bytes after the object", self.b.len() - self.at))
        }
    }
}

/// The kind byte of encoded object bytes, after checking the magic and
/// version: version 1 of kinds 1–3, version 2 of kinds 1 (file manifest)
/// and 4 (manifest node, [`crate::snap::manifest`]). Errors: not an
/// object, or a version this build does not read.
pub fn kind_of(b: &[u8]) -> Result<u8, String> {
    if b.len() < 6 || &b[..4] != MAGIC {
        return Err("not a snapshot object (no RFSO magic)".into());
    }
    match (b[4], b[5]) {
        (OBJECT_VERSION, _) | (2, KIND_FILE) | (2, 4) => Ok(b[5]),
        (v, k) => Err(format!("object version {v} of kind {k} (this build reads version {OBJECT_VERSION}, and 2 of kinds 1 and 4)")),
    }
}

fn reader(b: &[u8], kind: u8) -> Result<R<'_>, String> {
    let k = kind_of(b)?;
    if b[4] != OBJECT_VERSION {
        return Err(format!("object version {} of kind {k} (this decoder reads version {OBJECT_VERSION})", b[4]));
    }
    if k != kind {
        return Err(format!("object of kind {k} ({}), expected {kind} ({})", kind_name(k), kind_name(kind)));
    }
    Ok(R { b, at: 6 })
}

/// What an object of kind `k` is, in words ("a commit", "a directory"…).
pub fn kind_name(k: u8) -> &'static str {
    match k {
        KIND_FILE => "a file manifest",
        KIND_DIR => "a directory",
        KIND_COMMIT => "a commit",
        4 => "a manifest node",
        _ => "unknown",
    }
}

/// Decodes a file manifest. Errors: wrong kind, truncated or trailing bytes.
pub fn dec_file(b: &[u8]) -> Result<FileObj, String> {
    let mut r = reader(b, KIND_FILE)?;
    let size = r.u64()?;
    let n = r.u32()?;
    let mut chunks = Vec::with_capacity(n.min(1 << 16) as usize);
    for _ in 0..n {
        chunks.push(ChunkRef { offset: r.u64()?, len: r.u32()?, hash: r.id()? });
    }
    r.end()?;
    Ok(FileObj { size, chunks })
}

/// Decodes a directory object. Errors as [`dec_file`], and an unknown entry kind.
pub fn dec_dir(b: &[u8]) -> Result<DirObj, String> {
    let mut r = reader(b, KIND_DIR)?;
    let n = r.u32()?;
    let mut entries = Vec::with_capacity(n.min(1 << 16) as usize);
    for _ in 0..n {
        entries.push(r.entry()?);
    }
    r.end()?;
    Ok(DirObj { entries })
}

/// The number of entries of directory object `b` and its subdirectories'
/// entries with their indexes, in order: what a walk needs to number a
/// tree (`snap::overlay::number_tree`), without allocating for the other
/// entries. Errors as [`dec_dir`].
pub fn dec_dir_subdirs(b: &[u8]) -> Result<(u32, Vec<(u32, Entry)>), String> {
    let mut r = reader(b, KIND_DIR)?;
    let n = r.u32()?;
    let mut dirs = Vec::new();
    for i in 0..n {
        let start = r.at;
        r.skip_bytes()?;
        let kb = r.u8()?;
        let kind = EntryKind::from_byte(kb).ok_or_else(|| format!("entry kind {kb}"))?;
        if kind == EntryKind::Dir {
            r.at = start;
            dirs.push((i, r.entry()?));
            continue;
        }
        r.skip_meta()?;
        match kind {
            EntryKind::File => {
                r.take(32)?;
            }
            EntryKind::Symlink => r.skip_bytes()?,
            _ => {}
        }
    }
    r.end()?;
    Ok((n, dirs))
}

/// Decodes a commit object. Errors as [`dec_file`], and a non-UTF-8 author or message.
pub fn dec_commit(b: &[u8]) -> Result<CommitObj, String> {
    let mut r = reader(b, KIND_COMMIT)?;
    let root = r.id()?;
    let root_meta = r.meta()?;
    let n = r.u32()?;
    let mut parents = Vec::new();
    for _ in 0..n {
        parents.push(r.id()?);
    }
    let time = (r.i64()?, r.u32()?);
    let journal_pos = r.u64()?;
    let store_id = r.u64()?;
    let author = String::from_utf8(r.bytes()?).map_err(|_| "author is not UTF-8".to_string())?;
    let message = String::from_utf8(r.bytes()?).map_err(|_| "message is not UTF-8".to_string())?;
    r.end()?;
    Ok(CommitObj { root, root_meta, parents, time, journal_pos, store_id, author, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_round_trip() {
        let f = FileObj { size: 10, chunks: vec![ChunkRef { offset: 0, len: 10, hash: [7; 32] }] };
        assert_eq!(dec_file(&enc_file(&f)).unwrap(), f);
        let meta = Meta { mode: 0o644, uid: 1, gid: 2, mtime: (3, 4), size: 10, rdev: 0, flags: 0, xattrs: vec![(b"user.a".to_vec(), b"v".to_vec())] };
        let d = DirObj {
            entries: vec![
                Entry { name: b"a".to_vec(), kind: EntryKind::File, meta: meta.clone(), target: Target::Object(id_of(&enc_file(&f))) },
                Entry { name: b"l".to_vec(), kind: EntryKind::Symlink, meta: meta.clone(), target: Target::Symlink(b"a".to_vec()) },
                Entry { name: b"p".to_vec(), kind: EntryKind::Fifo, meta: meta.clone(), target: Target::None },
            ],
        };
        assert_eq!(dec_dir(&enc_dir(&d)).unwrap(), d);
        // The numbering's scan: the count, and the subdirectories in full.
        let mut d2 = d.clone();
        d2.entries.insert(1, Entry { name: b"d".to_vec(), kind: EntryKind::Dir, meta: meta.clone(), target: Target::Object([9; 32]) });
        let b = enc_dir(&d2);
        assert_eq!(dec_dir_subdirs(&b).unwrap(), (4, vec![(1, d2.entries[1].clone())]));
        assert_eq!(dec_dir_subdirs(&enc_dir(&d)).unwrap(), (3, vec![]));
        for cut in [b.len() - 1, b.len() / 2, 12] {
            assert!(dec_dir_subdirs(&b[..cut]).is_err(), "truncated at {cut}");
        }
        let c = CommitObj { root: [1; 32], root_meta: meta, parents: vec![[2; 32]], time: (5, 6), journal_pos: 7, store_id: 8, author: "me@h".into(), message: "m".into() };
        assert_eq!(dec_commit(&enc_commit(&c)).unwrap(), c);
        assert!(dec_dir(&enc_commit(&c)).is_err());
        // The encoding is the id's input: fixed, so ids are stable.
        assert_eq!(&enc_file(&FileObj { size: 0, chunks: vec![] })[..], b"RFSO\x01\x01\0\0\0\0\0\0\0\0\0\0\0\0");
    }
}
