//! Property test: random namespace and content operations on [`Fs`] against
//! a plain in-memory reference model (paths → directory or file identity;
//! file identity → content), on Memory and Dir stores, with a remount.

use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

#[derive(Clone, Debug)]
pub(super) enum Op {
    Create(String),
    Mkdir(String),
    Unlink(String),
    Rmdir(String),
    Rename(String, String, u32),
    Link(String, String),
    Write(String, u16, Vec<u8>),
    Truncate(String, u16),
    Readdir(String),
    Remount,
    /// fsyncdir, then stop as if killed, fsck, reopen (Dir stores only).
    Crash,
}

pub(super) fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]), 1..=3).prop_map(|v| v.join("/"))
}

pub(super) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => path().prop_map(Op::Create),
        3 => path().prop_map(Op::Mkdir),
        2 => path().prop_map(Op::Unlink),
        2 => path().prop_map(Op::Rmdir),
        3 => (path(), path(), prop::sample::select(vec![0u32, 0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE])).prop_map(|(a, b, f)| Op::Rename(a, b, f)),
        2 => (path(), path()).prop_map(|(a, b)| Op::Link(a, b)),
        3 => (path(), 0u16..300, prop::collection::vec(any::<u8>(), 0..40)).prop_map(|(p, o, d)| Op::Write(p, o, d)),
        1 => (path(), 0u16..300).prop_map(|(p, s)| Op::Truncate(p, s)),
        2 => prop_oneof![Just(String::new()), path()].prop_map(Op::Readdir),
        1 => Just(Op::Remount),
        1 => Just(Op::Crash),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ent {
    Dir,
    File(u32),
}

#[derive(Default)]
struct Model {
    tree: BTreeMap<String, Ent>,
    content: HashMap<u32, Vec<u8>>,
    next: u32,
}

fn split(p: &str) -> (&str, &str) {
    match p.rfind('/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => ("", p),
    }
}

impl Model {
    /// Errors from resolving the directory `dir` ("" is the root).
    fn dir_ok(&self, dir: &str) -> std::result::Result<(), i32> {
        if dir.is_empty() {
            return Ok(());
        }
        let mut cur = String::new();
        for c in dir.split('/') {
            if !cur.is_empty() {
                cur.push('/');
            }
            cur.push_str(c);
            match self.tree.get(&cur) {
                None => return Err(libc::ENOENT),
                Some(Ent::File(_)) => return Err(libc::ENOTDIR),
                Some(Ent::Dir) => {}
            }
        }
        Ok(())
    }
    fn get(&self, p: &str) -> std::result::Result<Ent, i32> {
        self.dir_ok(split(p).0)?;
        self.tree.get(p).copied().ok_or(libc::ENOENT)
    }
    fn empty_dir(&self, p: &str) -> bool {
        let pre = format!("{p}/");
        !self.tree.keys().any(|k| k.starts_with(&pre))
    }
    fn move_tree(&mut self, from: &str, to: &str) -> BTreeMap<String, Ent> {
        let pre = format!("{from}/");
        let mut moved = BTreeMap::new();
        let keys: Vec<String> = self.tree.keys().filter(|k| *k == from || k.starts_with(&pre)).cloned().collect();
        for k in keys {
            let v = self.tree.remove(&k).unwrap();
            moved.insert(format!("{to}{}", &k[from.len()..]), v);
        }
        moved
    }
    fn apply(&mut self, op: &Op) -> std::result::Result<(), i32> {
        match op {
            Op::Create(p) | Op::Mkdir(p) => {
                self.dir_ok(split(p).0)?;
                if self.tree.contains_key(p) {
                    return Err(libc::EEXIST);
                }
                let e = if matches!(op, Op::Mkdir(_)) {
                    Ent::Dir
                } else {
                    self.next += 1;
                    self.content.insert(self.next, Vec::new());
                    Ent::File(self.next)
                };
                self.tree.insert(p.clone(), e);
                Ok(())
            }
            Op::Unlink(p) => match self.get(p)? {
                Ent::Dir => Err(libc::EISDIR),
                Ent::File(_) => {
                    self.tree.remove(p);
                    Ok(())
                }
            },
            Op::Rmdir(p) => match self.get(p)? {
                Ent::File(_) => Err(libc::ENOTDIR),
                Ent::Dir if !self.empty_dir(p) => Err(libc::ENOTEMPTY),
                Ent::Dir => {
                    self.tree.remove(p);
                    Ok(())
                }
            },
            Op::Rename(a, b, flags) => {
                self.dir_ok(split(a).0)?;
                self.dir_ok(split(b).0)?;
                let src = self.tree.get(a).copied().ok_or(libc::ENOENT)?;
                let dst = self.tree.get(b).copied();
                if *flags == libc::RENAME_EXCHANGE {
                    let dst = dst.ok_or(libc::ENOENT)?;
                    if a == b {
                        return Ok(());
                    }
                    if b.starts_with(&format!("{a}/")) || a.starts_with(&format!("{b}/")) {
                        return Err(libc::EINVAL);
                    }
                    let _ = dst;
                    let ma = self.move_tree(a, "\0tmp");
                    let mb = self.move_tree(b, a);
                    self.tree.extend(mb);
                    for (k, v) in ma {
                        self.tree.insert(format!("{b}{}", &k[4..]), v);
                    }
                    return Ok(());
                }
                if b.starts_with(&format!("{a}/")) {
                    return Err(libc::EINVAL);
                }
                if let Some(d) = dst {
                    if *flags == libc::RENAME_NOREPLACE {
                        return Err(libc::EEXIST);
                    }
                    if d == src && (a == b || matches!(d, Ent::File(_))) {
                        return Ok(());
                    }
                    match (src, d) {
                        (Ent::Dir, Ent::File(_)) => return Err(libc::ENOTDIR),
                        (Ent::File(_), Ent::Dir) => return Err(libc::EISDIR),
                        (Ent::Dir, Ent::Dir) if !self.empty_dir(b) => return Err(libc::ENOTEMPTY),
                        _ => {}
                    }
                    self.tree.remove(b);
                }
                let m = self.move_tree(a, b);
                self.tree.extend(m);
                Ok(())
            }
            Op::Link(a, b) => {
                let src = self.get(a)?;
                self.dir_ok(split(b).0)?;
                if src == Ent::Dir {
                    return Err(libc::EPERM);
                }
                if self.tree.contains_key(b) {
                    return Err(libc::EEXIST);
                }
                self.tree.insert(b.clone(), src);
                Ok(())
            }
            Op::Write(p, off, data) => match self.get(p)? {
                Ent::Dir => Err(libc::EISDIR),
                Ent::File(id) => {
                    let c = self.content.get_mut(&id).unwrap();
                    if data.is_empty() {
                        return Ok(());
                    }
                    let end = *off as usize + data.len();
                    if c.len() < end && !data.is_empty() {
                        c.resize(end, 0);
                    }
                    c[*off as usize..*off as usize + data.len()].copy_from_slice(data);
                    Ok(())
                }
            },
            Op::Truncate(p, size) => match self.get(p)? {
                Ent::Dir => Err(libc::EISDIR),
                Ent::File(id) => {
                    self.content.get_mut(&id).unwrap().resize(*size as usize, 0);
                    Ok(())
                }
            },
            Op::Readdir(p) => {
                if !p.is_empty() {
                    match self.get(p)? {
                        Ent::File(_) => return Err(libc::ENOTDIR),
                        Ent::Dir => {}
                    }
                }
                Ok(())
            }
            Op::Remount | Op::Crash => Ok(()),
        }
    }
    fn children(&self, dir: &str) -> Vec<(String, Ent)> {
        self.tree
            .iter()
            .filter(|(k, _)| split(k).0 == dir)
            .map(|(k, v)| (split(k).1.to_string(), *v))
            .collect()
    }
}

/// Drives an `Fs` by path, forgetting every lookup it took after each op.
pub(super) struct Harness {
    pub(super) fs: Option<Fs>,
    pub(super) loc: StoreLocation,
    pub(super) looked: Vec<u64>,
}

impl Harness {
    pub(super) fn fs(&self) -> &Fs {
        self.fs.as_ref().unwrap()
    }
    pub(super) fn lookup(&mut self, parent: u64, name: &str) -> std::result::Result<Attr, i32> {
        let a = self.fs().lookup(&C, parent, os(name)).map_err(|e| e.0)?;
        self.looked.push(a.ino);
        Ok(a)
    }
    pub(super) fn dir(&mut self, p: &str) -> std::result::Result<u64, i32> {
        let mut ino = ROOT;
        if p.is_empty() {
            return Ok(ino);
        }
        for c in p.split('/') {
            let a = self.lookup(ino, c)?;
            if a.mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(libc::ENOTDIR);
            }
            ino = a.ino;
        }
        Ok(ino)
    }
    pub(super) fn parent(&mut self, p: &str) -> std::result::Result<(u64, String), i32> {
        let (d, n) = split(p);
        Ok((self.dir(d)?, n.to_string()))
    }
    pub(super) fn forget_all(&mut self) {
        for ino in std::mem::take(&mut self.looked) {
            self.fs().forget(ino, 1);
        }
    }
    pub(super) fn apply(&mut self, op: &Op) -> std::result::Result<(), i32> {
        let r = self.apply_inner(op);
        self.forget_all();
        r
    }
    fn apply_inner(&mut self, op: &Op) -> std::result::Result<(), i32> {
        let e = |r: Result<()>| r.map_err(|e| e.0);
        match op {
            Op::Create(p) => {
                let (d, n) = self.parent(p)?;
                let (a, fh) = self.fs().create(&C, d, os(&n), 0o644, (libc::O_CREAT | libc::O_EXCL | libc::O_RDWR) as u32).map_err(|e| e.0)?;
                self.looked.push(a.ino);
                e(self.fs().release(fh))
            }
            Op::Mkdir(p) => {
                let (d, n) = self.parent(p)?;
                let a = self.fs().mkdir(&C, d, os(&n), 0o755).map_err(|e| e.0)?;
                self.looked.push(a.ino);
                Ok(())
            }
            Op::Unlink(p) => {
                let (d, n) = self.parent(p)?;
                e(self.fs().unlink(&C, d, os(&n)))
            }
            Op::Rmdir(p) => {
                let (d, n) = self.parent(p)?;
                e(self.fs().rmdir(&C, d, os(&n)))
            }
            Op::Rename(a, b, f) => {
                let (da, na) = self.parent(a)?;
                let (db, nb) = self.parent(b)?;
                e(self.fs().rename(&C, da, os(&na), db, os(&nb), *f))
            }
            Op::Link(a, b) => {
                let (da, na) = self.parent(a)?;
                let src = self.lookup(da, &na)?.ino;
                let (db, nb) = self.parent(b)?;
                let at = self.fs().link(&C, src, db, os(&nb)).map_err(|e| e.0)?;
                self.looked.push(at.ino);
                Ok(())
            }
            Op::Write(p, off, data) => {
                let (d, n) = self.parent(p)?;
                let ino = self.lookup(d, &n)?.ino;
                let fh = self.fs().open(&C, ino, libc::O_RDWR as u32).map_err(|e| e.0)?;
                let r = self.fs().write(fh, *off as u64, data).map(|_| ()).map_err(|e| e.0);
                e(self.fs().release(fh))?;
                r
            }
            Op::Truncate(p, s) => {
                let (d, n) = self.parent(p)?;
                let ino = self.lookup(d, &n)?.ino;
                self.fs().setattr(&C, ino, &SetAttr { size: Some(*s as u64), ..Default::default() }).map(|_| ()).map_err(|e| e.0)
            }
            Op::Readdir(p) => {
                let ino = self.dir(p)?;
                let a = self.fs().getattr(ino, None).map_err(|e| e.0)?;
                if a.mode & libc::S_IFMT != libc::S_IFDIR {
                    return Err(libc::ENOTDIR);
                }
                Ok(())
            }
            Op::Crash => {
                self.forget_all();
                let fs = self.fs.take().unwrap();
                fs.fsyncdir(0).unwrap();
                fs.simulate_crash();
                let StoreLocation::Dir(d) = &self.loc else { unreachable!() };
                let r = fsck(d).unwrap();
                assert!(r.is_clean(), "after crash: {r}");
                self.fs = Some(dir_fs(d));
                Ok(())
            }
            Op::Remount => {
                self.forget_all();
                let fs = self.fs.take().unwrap();
                fs.shutdown().unwrap();
                drop(fs);
                if let StoreLocation::Dir(d) = &self.loc {
                    let r = fsck(d).unwrap();
                    assert!(r.is_clean(), "{r}");
                    self.fs = Some(dir_fs(d));
                } else {
                    // A memory store does not survive; keep using a fresh
                    // handle-free view of the same Fs instead.
                    unreachable!()
                }
                Ok(())
            }
        }
    }

    /// Compares the whole tree with the model: names, kinds, contents,
    /// link identity and counts, directory nlink.
    fn check(&mut self, m: &Model) {
        let mut ids: HashMap<u32, u64> = HashMap::new();
        let mut dirs = vec![(String::new(), ROOT)];
        let mut nlinks: HashMap<u32, u32> = HashMap::new();
        for e in m.tree.values() {
            if let Ent::File(id) = e {
                *nlinks.entry(*id).or_default() += 1;
            }
        }
        while let Some((p, ino)) = dirs.pop() {
            let mut got: Vec<(String, u64, u32)> = list(self.fs(), ino)
                .into_iter()
                .filter(|e| e.0 != b"." && e.0 != b"..")
                .map(|e| (String::from_utf8(e.0).unwrap(), e.1, e.3))
                .collect();
            got.sort();
            let want = m.children(&p);
            assert_eq!(got.iter().map(|g| g.0.clone()).collect::<Vec<_>>(), want.iter().map(|w| w.0.clone()).collect::<Vec<_>>(), "entries of {p:?}");
            let mut subdirs = 0;
            for ((name, cino, kind), (_, ent)) in got.into_iter().zip(want) {
                let full = if p.is_empty() { name } else { format!("{p}/{name}") };
                let a = self.fs().getattr(cino, None).unwrap();
                match ent {
                    Ent::Dir => {
                        assert_eq!(kind, libc::DT_DIR as u32);
                        subdirs += 1;
                        dirs.push((full, cino));
                    }
                    Ent::File(id) => {
                        assert_eq!(kind, libc::DT_REG as u32);
                        assert_eq!(*ids.entry(id).or_insert(cino), cino, "link identity of {full}");
                        assert_eq!(a.nlink, nlinks[&id], "nlink of {full}");
                        assert_eq!(a.size as usize, m.content[&id].len(), "size of {full}");
                        assert_eq!(read_all(self.fs(), cino), m.content[&id], "content of {full}");
                    }
                }
            }
            assert_eq!(self.fs().getattr(ino, None).unwrap().nlink, 2 + subdirs, "nlink of dir {p:?}");
        }
    }
}

fn run(ops: Vec<Op>, loc: StoreLocation) {
    let fs = Fs::open_store(cfg(loc.clone())).unwrap();
    let mut h = Harness { fs: Some(fs), loc: loc.clone(), looked: Vec::new() };
    let mut m = Model::default();
    for (i, op) in ops.iter().enumerate() {
        if matches!(op, Op::Remount | Op::Crash) && loc == StoreLocation::Memory {
            continue;
        }
        let want = m.apply(op);
        let got = h.apply(op);
        assert_eq!(got, want, "op {i}: {op:?}");
        if let Op::Readdir(_) = op {
            h.check(&m);
        }
    }
    h.check(&m);
    // Nothing leaked: only live inodes remain once lookups are forgotten.
    let live = 1 + m.tree.values().filter(|e| **e == Ent::Dir).count()
        + m.tree.values().filter_map(|e| if let Ent::File(id) = e { Some(*id) } else { None }).collect::<std::collections::HashSet<_>>().len();
    assert_eq!(h.fs().stats().inodes as usize, live, "inodes");
    let fs = h.fs.take().unwrap();
    fs.shutdown().unwrap();
    drop(fs);
    if let StoreLocation::Dir(d) = &loc {
        let r = fsck(d).unwrap();
        assert!(r.is_clean(), "{r}");
        h.fs = Some(dir_fs(d));
        h.check(&m);
        h.fs.take().unwrap().shutdown().unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn model_memory(ops in prop::collection::vec(op(), 1..60)) {
        run(ops, StoreLocation::Memory);
    }

    #[test]
    fn model_dir(ops in prop::collection::vec(op(), 1..40)) {
        let t = tempfile::tempdir().unwrap();
        run(ops, StoreLocation::Dir(t.path().join("store")));
    }
}
