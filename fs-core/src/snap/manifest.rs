//! File manifests as trees (docs/FORMATS.md "Snapshot objects, version
//! 2"): a file's chunk list is split at content-defined points (after a
//! chunk whose hash says so) into nodes of ~16 entries, those nodes' ids
//! again, up to one root, the file manifest object. Entries hold lengths
//! and gaps, never absolute offsets, so an edit rewrites the node holding
//! the changed chunk and the nodes above it, and a prepend the first node
//! of each level: the other nodes keep their ids and are not stored again.
//! A file of few chunks is one object (height 0, chunks inline).
//!
//! Owns: the version 2 encoding of file manifests and manifest nodes,
//! where a chunk list is split, reading a manifest (either version) back as
//! a chunk list. Must not touch: redb (objects come and go through the
//! caller's closures).

use crate::schema::ChunkRef;
use crate::snap::object::*;

/// The version byte of file manifest and manifest node objects written by
/// this build (directory and commit objects are still version 1).
pub const FILE_VERSION: u8 = 2;
/// Object kind of a manifest node (version 2).
pub const KIND_NODE: u8 = 4;

/// A list is cut after an entry whose key (chunk hash or node id) has its
/// first 4 bytes ≡ 0 mod `FANOUT` (~16 entries a node on average) …
const FANOUT: u32 = 16;
/// … or after `MAX_ENTRIES`, whichever comes first.
const MAX_ENTRIES: usize = 64;

/// A chunk entry of a height-0 node: `skip` bytes of hole after the end of
/// the previous entry (or the node's start), then the chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    pub skip: u64,
    pub len: u32,
    pub hash: ObjectId,
}

/// A child entry of a node of height > 0: the bytes it spans from its
/// start (its first entry's skip included) to the end of its last chunk,
/// and the child node's id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Child {
    pub span: u64,
    pub id: ObjectId,
}

/// The body of a file manifest (version 2) or a manifest node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Chunks(Vec<Leaf>),
    Children { height: u8, children: Vec<Child> },
}

impl Node {
    fn height(&self) -> u8 {
        match self {
            Node::Chunks(_) => 0,
            Node::Children { height, .. } => *height,
        }
    }
}

fn varint(w: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        w.push(x as u8 | 0x80);
        x >>= 7;
    }
    w.push(x as u8);
}

fn header(kind: u8) -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    v.extend_from_slice(MAGIC);
    v.push(FILE_VERSION);
    v.push(kind);
    v
}

fn enc_node_body(w: &mut Vec<u8>, n: &Node) {
    w.push(n.height());
    match n {
        Node::Chunks(l) => {
            w.extend_from_slice(&(l.len() as u32).to_le_bytes());
            for e in l {
                varint(w, e.skip);
                varint(w, e.len as u64);
                w.extend_from_slice(&e.hash);
            }
        }
        Node::Children { children, .. } => {
            w.extend_from_slice(&(children.len() as u32).to_le_bytes());
            for c in children {
                varint(w, c.span);
                w.extend_from_slice(&c.id);
            }
        }
    }
}

/// Encodes a file manifest, version 2: the file's size, then its root node.
pub fn enc_file_v2(size: u64, root: &Node) -> Vec<u8> {
    let mut w = header(KIND_FILE);
    w.extend_from_slice(&size.to_le_bytes());
    enc_node_body(&mut w, root);
    w
}

/// Encodes a manifest node (kind 4, version 2).
pub fn enc_node(n: &Node) -> Vec<u8> {
    let mut w = header(KIND_NODE);
    enc_node_body(&mut w, n);
    w
}

struct Rd<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len()).ok_or_else(|| format!("truncated at byte {}", self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn varint(&mut self) -> Result<u64, String> {
        let mut x = 0u64;
        for i in 0..10 {
            let b = self.take(1)?[0];
            x |= ((b & 0x7f) as u64) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(x);
            }
        }
        Err(format!("varint too long at byte {}", self.at))
    }
    fn node(&mut self) -> Result<Node, String> {
        let height = self.take(1)?[0];
        let n = u32::from_le_bytes(self.take(4)?.try_into().unwrap());
        let cap = n.min(1 << 16) as usize;
        let node = if height == 0 {
            let mut l = Vec::with_capacity(cap);
            for _ in 0..n {
                let skip = self.varint()?;
                let len = u32::try_from(self.varint()?).map_err(|_| "chunk length over 4 GiB".to_string())?;
                l.push(Leaf { skip, len, hash: self.take(32)?.try_into().unwrap() });
            }
            Node::Chunks(l)
        } else {
            let mut c = Vec::with_capacity(cap);
            for _ in 0..n {
                let span = self.varint()?;
                c.push(Child { span, id: self.take(32)?.try_into().unwrap() });
            }
            Node::Children { height, children: c }
        };
        if self.at != self.b.len() {
            return Err(format!("{} bytes after the object", self.b.len() - self.at));
        }
        Ok(node)
    }
}

/// What a file manifest object (either version) or a manifest node holds
/// at its top: a version 1 manifest as a whole, or a version 2 size and
/// node (a node object's size is `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Manifest {
    V1(FileObj),
    V2 { size: Option<u64>, node: Node },
}

/// Decodes a file manifest (version 1 or 2, kind 1) or a manifest node
/// (version 2, kind 4). Errors: another kind or version, truncated or
/// trailing bytes.
pub fn dec_manifest(b: &[u8]) -> Result<Manifest, String> {
    if b.len() < 6 || &b[..4] != MAGIC {
        return Err("not a snapshot object (no RFSO magic)".into());
    }
    match (b[4], b[5]) {
        (1, KIND_FILE) => Ok(Manifest::V1(dec_file(b)?)),
        (FILE_VERSION, KIND_FILE) => {
            let mut r = Rd { b, at: 6 };
            let size = u64::from_le_bytes(r.take(8)?.try_into().unwrap());
            Ok(Manifest::V2 { size: Some(size), node: r.node()? })
        }
        (FILE_VERSION, KIND_NODE) => Ok(Manifest::V2 { size: None, node: Rd { b, at: 6 }.node()? }),
        (v, k) => Err(format!("object version {v} kind {k} is not a file manifest or manifest node")),
    }
}

/// The chunk hashes an object holds itself, one per entry: every chunk of
/// a version 1 file manifest, the chunks of a height-0 version 2 manifest
/// or node, none for anything else (what a stored object adds to the
/// chunks' reference counts). Errors: a manifest that does not decode.
pub fn own_chunks(b: &[u8]) -> Result<Vec<ObjectId>, String> {
    if b.len() < 6 || &b[..4] != MAGIC || !(b[5] == KIND_FILE || b[5] == KIND_NODE) {
        return Ok(Vec::new());
    }
    Ok(match dec_manifest(b)? {
        Manifest::V1(f) => f.chunks.into_iter().map(|c| c.hash).collect(),
        Manifest::V2 { node: Node::Chunks(l), .. } => l.into_iter().map(|e| e.hash).collect(),
        Manifest::V2 { .. } => Vec::new(),
    })
}

/// The manifest nodes a version 2 file manifest or node names (none for
/// anything else). Errors: a manifest that does not decode.
pub fn child_nodes(b: &[u8]) -> Result<Vec<ObjectId>, String> {
    if b.len() < 6 || &b[..4] != MAGIC || !(b[5] == KIND_FILE || b[5] == KIND_NODE) {
        return Ok(Vec::new());
    }
    Ok(match dec_manifest(b)? {
        Manifest::V2 { node: Node::Children { children, .. }, .. } => children.into_iter().map(|c| c.id).collect(),
        _ => Vec::new(),
    })
}

fn cut_here(key: &ObjectId, n: usize) -> bool {
    n >= MAX_ENTRIES || u32::from_le_bytes(key[..4].try_into().unwrap()) % FANOUT == 0
}

/// Builds the version 2 manifest of a file of `size` bytes whose chunks
/// are `chunks` (absolute offsets, in order, not overlapping): every
/// object of the tree is handed to `note` (encoded bytes → its id; the
/// caller stores the ones it lacks), the root last. Returns the root's id.
pub fn build_file(size: u64, chunks: &[ChunkRef], note: &mut dyn FnMut(Vec<u8>) -> Result<ObjectId, String>) -> Result<ObjectId, String> {
    // Level 0: chunk entries, grouped at cut points.
    let mut groups: Vec<(u64, Vec<Leaf>)> = Vec::new();
    let mut cur: Vec<Leaf> = Vec::new();
    let (mut start, mut end) = (0u64, 0u64);
    for c in chunks {
        cur.push(Leaf { skip: c.offset.saturating_sub(end), len: c.len, hash: c.hash });
        end = c.offset + c.len as u64;
        if cut_here(&c.hash, cur.len()) {
            groups.push((end - start, std::mem::take(&mut cur)));
            start = end;
        }
    }
    if !cur.is_empty() {
        groups.push((end - start, cur));
    }
    if groups.len() <= 1 {
        let l = groups.pop().map(|g| g.1).unwrap_or_default();
        return note(enc_file_v2(size, &Node::Chunks(l)));
    }
    let mut level: Vec<Child> = Vec::with_capacity(groups.len());
    for (span, l) in groups {
        level.push(Child { span, id: note(enc_node(&Node::Chunks(l)))? });
    }
    let mut height = 1u8;
    loop {
        let mut groups: Vec<Vec<Child>> = Vec::new();
        let mut cur = Vec::new();
        for c in level {
            let id = c.id;
            cur.push(c);
            if cut_here(&id, cur.len()) {
                groups.push(std::mem::take(&mut cur));
            }
        }
        if !cur.is_empty() {
            groups.push(cur);
        }
        if groups.len() <= 1 {
            let children = groups.pop().unwrap_or_default();
            return note(enc_file_v2(size, &Node::Children { height, children }));
        }
        level = Vec::with_capacity(groups.len());
        for children in groups {
            let span = children.iter().map(|c| c.span).sum();
            level.push(Child { span, id: note(enc_node(&Node::Children { height, children }))? });
        }
        height = height.checked_add(1).ok_or("manifest tree too high")?;
    }
}

/// A file manifest (either version) read back whole: the file's size and
/// its chunks at their absolute offsets. `load` gives an object's bytes by
/// id (the nodes of a version 2 manifest). Errors: an object missing or not
/// decoding, a node of the wrong height.
pub fn read_file(bytes: &[u8], load: &mut dyn FnMut(&ObjectId) -> Result<Vec<u8>, String>) -> Result<FileObj, String> {
    match dec_manifest(bytes)? {
        Manifest::V1(f) => Ok(f),
        Manifest::V2 { size: Some(size), node } => {
            let mut chunks = Vec::new();
            walk(&node, 0, load, &mut chunks)?;
            Ok(FileObj { size, chunks })
        }
        Manifest::V2 { size: None, .. } => Err("a manifest node, not a file manifest".into()),
    }
}

fn walk(node: &Node, mut at: u64, load: &mut dyn FnMut(&ObjectId) -> Result<Vec<u8>, String>, out: &mut Vec<ChunkRef>) -> Result<u64, String> {
    match node {
        Node::Chunks(l) => {
            for e in l {
                at += e.skip;
                out.push(ChunkRef { offset: at, len: e.len, hash: e.hash });
                at += e.len as u64;
            }
        }
        Node::Children { height, children } => {
            for c in children {
                let b = load(&c.id)?;
                let n = match dec_manifest(&b).map_err(|e| format!("manifest node {}: {e}", hex_id(&c.id)))? {
                    Manifest::V2 { size: None, node } if node.height() + 1 == *height => node,
                    _ => return Err(format!("manifest node {}: not a node of height {}", hex_id(&c.id), height - 1)),
                };
                let end = walk(&n, at, load, out)?;
                if end - at != c.span {
                    return Err(format!("manifest node {}: spans {} bytes, its parent says {}", hex_id(&c.id), end - at, c.span));
                }
                at = end;
            }
        }
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn chunks(n: usize, seed: u64, holes: bool) -> Vec<ChunkRef> {
        let mut off = 0u64;
        (0..n)
            .map(|i| {
                let h = *blake3::hash(&[seed.to_le_bytes(), (i as u64).to_le_bytes()].concat()).as_bytes();
                let len = 4096 + (h[5] as u32) * 37;
                if holes && i % 7 == 3 {
                    off += 1 << 20;
                }
                let c = ChunkRef { offset: off, len, hash: h };
                off += len as u64;
                c
            })
            .collect()
    }

    fn store(m: &mut HashMap<ObjectId, Vec<u8>>, size: u64, c: &[ChunkRef]) -> (ObjectId, usize) {
        let mut new = 0;
        let id = build_file(size, c, &mut |b| {
            let id = id_of(&b);
            if m.insert(id, b.clone()).is_none() {
                new += b.len();
            }
            Ok(id)
        })
        .unwrap();
        (id, new)
    }

    #[test]
    fn round_trip_and_small_edits_write_little() {
        for (n, holes) in [(0, false), (1, false), (10, true), (4096, false), (5000, true)] {
            let mut m = HashMap::new();
            let c = chunks(n, 1, holes);
            let size = c.last().map(|c| c.offset + c.len as u64 + 5).unwrap_or(0);
            let (id, _) = store(&mut m, size, &c);
            let f = read_file(&m[&id].clone(), &mut |i| m.get(i).cloned().ok_or("missing".into())).unwrap();
            assert_eq!(f, FileObj { size, chunks: c.clone() }, "n {n}");
            for b in m.values() {
                assert!(b.len() < 64 * 50, "object of {} bytes", b.len());
            }
            if n < 1000 {
                continue;
            }
            // One chunk replaced: a few objects of a few KiB.
            let mut e = c.clone();
            e[n / 2].hash = [9; 32];
            let (_, new) = store(&mut m, size, &e);
            assert!(new < 8 << 10, "edit wrote {new} bytes");
            // A prepend: every offset moves, only the first nodes change.
            let p: Vec<ChunkRef> = std::iter::once(ChunkRef { offset: 0, len: 10, hash: [7; 32] })
                .chain(c.iter().map(|x| ChunkRef { offset: x.offset + 10, ..x.clone() }))
                .collect();
            let (id, new) = store(&mut m, size + 10, &p);
            assert!(new < 8 << 10, "prepend wrote {new} bytes");
            let f = read_file(&m[&id].clone(), &mut |i| m.get(i).cloned().ok_or("missing".into())).unwrap();
            assert_eq!(f.chunks, p);
        }
        assert_eq!(own_chunks(&enc_file(&FileObj { size: 1, chunks: chunks(2, 3, false) })).unwrap().len(), 2);
        // A version 1 manifest reads back as the same chunk list as its version 2 tree.
        let mut m = HashMap::new();
        let c = chunks(300, 4, true);
        let v1 = FileObj { size: 1 << 40, chunks: c.clone() };
        let (id, _) = store(&mut m, 1 << 40, &c);
        let no = &mut |_: &ObjectId| -> Result<Vec<u8>, String> { Err("v1 loads nothing".into()) };
        assert_eq!(read_file(&enc_file(&v1), no).unwrap(), read_file(&m[&id].clone(), &mut |i| m.get(i).cloned().ok_or("missing".into())).unwrap());
    }
}
