//! Tests of the filesystem model against POSIX expectations and the store.

use super::*;
use redb::ReadableTable;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

const ROOT: u64 = 1;
const C: Caller = Caller { uid: 0, gid: 0, pid: 1, umask: 0 };
const U: Caller = Caller { uid: 1000, gid: 1000, pid: 2, umask: 0 };

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn cfg(store: StoreLocation) -> Config {
    Config { commit_interval: Duration::from_millis(50), ..Config::new(store) }
}

fn mem() -> Fs {
    Fs::open_store(cfg(StoreLocation::Memory)).unwrap()
}

fn dir_fs(d: &Path) -> Fs {
    Fs::open_store(cfg(StoreLocation::Dir(d.to_path_buf()))).unwrap()
}

fn write_file(fs: &Fs, parent: u64, name: &str, data: &[u8]) -> u64 {
    let (a, fh) = fs.create(&C, parent, os(name), 0o644, libc::O_RDWR as u32).unwrap();
    assert_eq!(fs.write(fh, 0, data).unwrap() as usize, data.len());
    fs.release(fh).unwrap();
    a.ino
}

/// Bytes no other file shares (so every file has chunks of its own).
fn body(i: u32, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    let mut x = blake3::hash(&i.to_le_bytes());
    while out.len() < n {
        out.extend_from_slice(x.as_bytes());
        x = blake3::hash(x.as_bytes());
    }
    out.truncate(n);
    out
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let fh = fs.open(&C, ino, libc::O_RDONLY as u32).unwrap();
    let mut out = Vec::new();
    loop {
        let b = fs.read(fh, out.len() as u64, 1 << 20).unwrap();
        if b.is_empty() {
            break;
        }
        out.extend_from_slice(&b);
    }
    fs.release(fh).unwrap();
    out
}

fn list(fs: &Fs, ino: u64) -> Vec<(Vec<u8>, u64, u64, u32)> {
    let mut v = Vec::new();
    fs.readdir(ino, 0, 0, &mut |e: &DirEntry| {
        v.push((e.name.to_vec(), e.ino, e.offset, e.kind));
        true
    })
    .unwrap();
    v
}

fn lookup(fs: &Fs, parent: u64, name: &str) -> Result<Attr> {
    fs.lookup(&C, parent, os(name))
}

/// Everything observable below `ino`, keyed by path: (attr minus atime,
/// readdir cookie, content or link target, xattrs).
type Snap = BTreeMap<String, (Attr, u64, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>)>;
fn snapshot(fs: &Fs) -> Snap {
    let mut out = BTreeMap::new();
    fn walk(fs: &Fs, ino: u64, path: &str, out: &mut Snap) {
        for (name, child, cookie, _) in list(fs, ino) {
            if name == b"." || name == b".." {
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&name));
            let mut a = fs.getattr(child, None).unwrap();
            a.atime = 0;
            a.atime_nsec = 0;
            let body = match a.mode & libc::S_IFMT {
                libc::S_IFREG => read_all(fs, child),
                libc::S_IFLNK => fs.readlink(child).unwrap(),
                _ => Vec::new(),
            };
            let mut xs = Vec::new();
            if let XattrValue::Data(names) = fs.listxattr(child, 65536).unwrap() {
                for n in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
                    if let XattrValue::Data(v) = fs.getxattr(child, OsStr::from_bytes(n), 65536).unwrap() {
                        xs.push((n.to_vec(), v));
                    }
                }
            }
            out.insert(p.clone(), (a, cookie, body, xs));
            if a.mode & libc::S_IFMT == libc::S_IFDIR {
                walk(fs, child, &p, out);
            }
        }
    }
    walk(fs, ROOT, "", &mut out);
    out
}

fn fsck_clean(d: &Path) {
    let r = fsck(d).unwrap();
    assert!(r.is_clean(), "{r}");
}

fn populate(fs: &Fs) {
    let d = fs.mkdir(&C, ROOT, os("dir"), 0o755).unwrap().ino;
    let sub = fs.mkdir(&U, d, os("sub"), 0o700).unwrap().ino;
    write_file(fs, d, "a.txt", b"hello world");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let b = write_file(fs, sub, "big.bin", &big);
    fs.link(&C, b, ROOT, os("big-link")).unwrap();
    fs.symlink(&C, d, os("ln"), os("../big-link")).unwrap();
    fs.mknod(&C, d, os("fifo"), libc::S_IFIFO | 0o600, 0).unwrap();
    fs.setxattr(&C, b, os("user.k"), b"v1", 0).unwrap();
    for i in 0..20 {
        write_file(fs, d, &format!("f{i}"), format!("{i}").as_bytes());
    }
    for i in (0..20).step_by(3) {
        fs.unlink(&C, d, os(&format!("f{i}"))).unwrap();
    }
    let _ = sub;
}

#[test]
fn fresh_root() {
    let fs = mem();
    let a = fs.getattr(ROOT, None).unwrap();
    assert_eq!(a.mode, libc::S_IFDIR | 0o755);
    assert_eq!((a.uid, a.gid, a.nlink, a.ino), (0, 0, 2, 1));
    let l = list(&fs, ROOT);
    assert_eq!(l.iter().map(|e| (e.0.clone(), e.2)).collect::<Vec<_>>(), vec![(b".".to_vec(), 1), (b"..".to_vec(), 2)]);
    fs.shutdown().unwrap();
}


#[test]
fn unlinked_but_open_c06() {
    let fs = mem();
    let d = fs.mkdir(&C, ROOT, os("d"), 0o755).unwrap().ino;
    let (a, fh) = fs.create(&C, d, os("f"), 0o644, libc::O_RDWR as u32).unwrap();
    fs.write(fh, 0, b"hello").unwrap();
    fs.unlink(&C, d, os("f")).unwrap();
    let st = fs.getattr(a.ino, Some(fh)).unwrap();
    assert_eq!((st.nlink, st.size), (0, 5));
    fs.setattr(&C, a.ino, &SetAttr { size: Some(3), fh: Some(fh), ..Default::default() }).unwrap();
    let st = fs.setattr(&C, a.ino, &SetAttr { mode: Some(0o600), fh: Some(fh), ..Default::default() }).unwrap();
    assert_eq!(st.mode, libc::S_IFREG | 0o600);
    assert_eq!(fs.read(fh, 0, 100).unwrap(), b"hel");
    assert_eq!(fs.link(&C, a.ino, ROOT, os("relink")).unwrap_err(), Errno(libc::ENOENT));
    assert_eq!(list(&fs, d).len(), 2);
    fs.rmdir(&C, ROOT, os("d")).unwrap();
    assert_eq!(lookup(&fs, ROOT, "d").unwrap_err(), Errno(libc::ENOENT));
    fs.release(fh).unwrap();
    assert!(fs.getattr(a.ino, None).is_ok(), "still looked up");
    fs.forget(a.ino, 1);
    assert_eq!(fs.getattr(a.ino, None).unwrap_err(), Errno(libc::ENOENT));
    // C05: closed then unlinked stays gone.
    let f = write_file(&fs, ROOT, "g", b"x");
    fs.unlink(&C, ROOT, os("g")).unwrap();
    fs.forget(f, 1);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(lookup(&fs, ROOT, "g").unwrap_err(), Errno(libc::ENOENT));
    assert_eq!(fs.stats().inodes, 2, "root and the forgotten dir d? {:?}", fs.stats());
    fs.shutdown().unwrap();
}

#[test]
fn rename_cases() {
    let fs = mem();
    let a = write_file(&fs, ROOT, "a", b"A");
    let b = write_file(&fs, ROOT, "b", b"B");
    // C01
    fs.rename(&C, ROOT, os("a"), ROOT, os("b"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(read_all(&fs, lookup(&fs, ROOT, "a").unwrap().ino), b"B");
    assert_eq!(lookup(&fs, ROOT, "b").unwrap().ino, a);
    assert_eq!(fs.rename(&C, ROOT, os("a"), ROOT, os("b"), libc::RENAME_NOREPLACE), Err(Errno(libc::EEXIST)));
    assert_eq!(fs.rename(&C, ROOT, os("a"), ROOT, os("b"), libc::RENAME_WHITEOUT | libc::RENAME_EXCHANGE), Err(Errno(libc::EINVAL)));
    assert_eq!(lookup(&fs, ROOT, "a").unwrap().ino, b);
    // C02
    let f1 = write_file(&fs, ROOT, "f1", b"");
    fs.link(&C, f1, ROOT, os("L")).unwrap();
    fs.unlink(&C, ROOT, os("L")).unwrap();
    let f2 = write_file(&fs, ROOT, "f2", b"");
    fs.link(&C, f1, ROOT, os("L")).unwrap();
    fs.rename(&C, ROOT, os("f2"), ROOT, os("L"), 0).unwrap();
    assert_eq!(lookup(&fs, ROOT, "L").unwrap().ino, f2);
    assert_eq!(fs.getattr(f1, None).unwrap().nlink, 1);
    // Over a hard link of itself: no-op success.
    fs.link(&C, f1, ROOT, os("f1b")).unwrap();
    fs.rename(&C, ROOT, os("f1"), ROOT, os("f1b"), 0).unwrap();
    assert_eq!(fs.rename(&C, ROOT, os("f1"), ROOT, os("f1b"), libc::RENAME_NOREPLACE), Err(Errno(libc::EEXIST)));
    assert!(lookup(&fs, ROOT, "f1").is_ok() && lookup(&fs, ROOT, "f1b").is_ok());
    // Directories: into own subtree, nlink, "..".
    let x = fs.mkdir(&C, ROOT, os("x"), 0o755).unwrap().ino;
    let y = fs.mkdir(&C, x, os("y"), 0o755).unwrap().ino;
    let z = fs.mkdir(&C, ROOT, os("z"), 0o755).unwrap().ino;
    assert_eq!(fs.rename(&C, ROOT, os("x"), y, os("x2"), 0), Err(Errno(libc::EINVAL)));
    assert_eq!(fs.rename(&C, ROOT, os("x"), ROOT, os("a"), 0), Err(Errno(libc::ENOTDIR)));
    assert_eq!(fs.rename(&C, ROOT, os("a"), ROOT, os("x"), 0), Err(Errno(libc::EISDIR)));
    assert_eq!(fs.rename(&C, ROOT, os("z"), ROOT, os("x"), 0), Err(Errno(libc::ENOTEMPTY)));
    fs.rename(&C, x, os("y"), z, os("y"), 0).unwrap();
    assert_eq!(fs.getattr(x, None).unwrap().nlink, 2);
    assert_eq!(fs.getattr(z, None).unwrap().nlink, 3);
    assert_eq!(list(&fs, y)[1].1, z);
    // Exchange a dir and a file across directories.
    let inx = write_file(&fs, x, "file", b"q");
    fs.rename(&C, z, os("y"), x, os("file"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(lookup(&fs, x, "file").unwrap().ino, y);
    assert_eq!(lookup(&fs, z, "y").unwrap().ino, inx);
    assert_eq!(fs.getattr(x, None).unwrap().nlink, 3);
    assert_eq!(fs.getattr(z, None).unwrap().nlink, 2);
    assert_eq!(list(&fs, y)[1].1, x);
    // Replacing an empty dir.
    let e = fs.mkdir(&C, ROOT, os("empty"), 0o755).unwrap().ino;
    fs.rename(&C, ROOT, os("z"), ROOT, os("empty"), 0).unwrap();
    assert_eq!(fs.getattr(e, None).unwrap().nlink, 0);
    assert_eq!(lookup(&fs, ROOT, "empty").unwrap().ino, z);
    fs.shutdown().unwrap();
}

#[test]
fn errnos_and_attrs() {
    let fs = mem();
    let long = "x".repeat(256);
    assert_eq!(fs.mkdir(&C, ROOT, os(&long), 0o755).unwrap_err(), Errno(libc::ENAMETOOLONG));
    assert_eq!(lookup(&fs, ROOT, &long).unwrap_err(), Errno(libc::ENAMETOOLONG));
    let f = write_file(&fs, ROOT, "f", b"12345");
    assert_eq!(fs.mkdir(&C, ROOT, os("f"), 0o755).unwrap_err(), Errno(libc::EEXIST));
    assert_eq!(fs.create(&C, ROOT, os("f"), 0o644, (libc::O_CREAT | libc::O_EXCL | libc::O_RDWR) as u32).unwrap_err(), Errno(libc::EEXIST));
    assert_eq!(fs.mkdir(&C, f, os("x"), 0o755).unwrap_err(), Errno(libc::ENOTDIR));
    assert_eq!(fs.lookup(&C, f, os("x")).unwrap_err(), Errno(libc::ENOTDIR));
    assert_eq!(fs.rmdir(&C, ROOT, os("f")).unwrap_err(), Errno(libc::ENOTDIR));
    let d = fs.mkdir(&C, ROOT, os("d"), 0o755).unwrap().ino;
    assert_eq!(fs.unlink(&C, ROOT, os("d")).unwrap_err(), Errno(libc::EISDIR));
    assert_eq!(fs.link(&C, d, ROOT, os("d2")).unwrap_err(), Errno(libc::EPERM));
    assert_eq!(fs.mknod(&U, ROOT, os("dev"), libc::S_IFCHR | 0o600, 0x0101).unwrap_err(), Errno(libc::EPERM));
    assert_eq!(fs.mknod(&C, ROOT, os("dev"), libc::S_IFCHR | 0o600, 0x0101).unwrap().rdev, 0x0101);
    write_file(&fs, d, "in", b"");
    assert_eq!(fs.rmdir(&C, ROOT, os("d")).unwrap_err(), Errno(libc::ENOTEMPTY));
    assert_eq!(fs.getattr(ROOT, None).unwrap().nlink, 3);
    // C13 ownership and setgid inheritance.
    let s = fs.mkdir(&C, ROOT, os("sg"), 0o2775).unwrap();
    fs.setattr(&C, s.ino, &SetAttr { gid: Some(50), ..Default::default() }).unwrap();
    let n = fs.mkdir(&U, s.ino, os("n"), 0o755).unwrap();
    assert_eq!((n.uid, n.gid, n.mode & libc::S_ISGID), (1000, 50, libc::S_ISGID));
    let (n2, fh) = fs.create(&U, ROOT, os("mine"), 0o444, (libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL) as u32).unwrap();
    assert_eq!((n2.uid, n2.gid), (1000, 1000));
    assert_eq!(fs.write(fh, 0, b"obj").unwrap(), 3); // C08
    fs.release(fh).unwrap();
    // C16 times.
    let t0 = SetTime::At(1_622_548_800, 0);
    fs.setattr(&C, f, &SetAttr { atime: Some(t0), mtime: Some(t0), ..Default::default() }).unwrap();
    let a = fs.setattr(&C, f, &SetAttr { atime: Some(SetTime::Now), ..Default::default() }).unwrap();
    assert_eq!(a.mtime, 1_622_548_800);
    assert!(a.atime > 1_700_000_000);
    // kill_suidgid
    let a = fs.setattr(&C, f, &SetAttr { mode: Some(0o6755), ..Default::default() }).unwrap();
    assert_eq!(a.mode & 0o7777, 0o6755);
    let a = fs.setattr(&C, f, &SetAttr { kill_suidgid: true, ..Default::default() }).unwrap();
    assert_eq!(a.mode & 0o7777, 0o755);
    // Setgid without group-exec stays (Linux), directories keep theirs, and
    // the write-path variant changes nothing (not even ctime) without set-id bits.
    fs.setattr(&C, f, &SetAttr { mode: Some(0o6745), ..Default::default() }).unwrap();
    fs.kill_suidgid(f).unwrap();
    assert_eq!(fs.getattr(f, None).unwrap().mode & 0o7777, 0o2745);
    let a = fs.setattr(&C, s.ino, &SetAttr { kill_suidgid: true, ..Default::default() }).unwrap();
    assert_eq!(a.mode & 0o7777, 0o2775);
    fs.setattr(&C, f, &SetAttr { mode: Some(0o644), ctime: Some((5, 0)), ..Default::default() }).unwrap();
    fs.kill_suidgid(f).unwrap();
    let a = fs.getattr(f, None).unwrap();
    assert_eq!((a.mode & 0o7777, a.ctime), (0o644, 5));
    fs.setattr(&C, f, &SetAttr { mode: Some(0o755), ..Default::default() }).unwrap();
    // Size on a closed file, C12 O_RDONLY|O_TRUNC, st_blocks (C30).
    let a = fs.setattr(&C, f, &SetAttr { size: Some(2), ..Default::default() }).unwrap();
    assert_eq!(a.size, 2);
    assert_eq!(read_all(&fs, f), b"12");
    let big = write_file(&fs, ROOT, "blk", &[1u8; 10000]);
    assert!(fs.getattr(big, None).unwrap().blocks > 0);
    let fh = fs.open(&C, big, (libc::O_RDONLY | libc::O_TRUNC) as u32).unwrap();
    assert_eq!(fs.getattr(big, Some(fh)).unwrap().size, 0);
    fs.release(fh).unwrap();
    // O_APPEND
    let fh = fs.open(&C, f, (libc::O_WRONLY | libc::O_APPEND) as u32).unwrap();
    fs.write(fh, 0, b"34").unwrap();
    fs.release(fh).unwrap();
    assert_eq!(read_all(&fs, f), b"1234");
    // C14 hard links are one inode.
    let l = fs.link(&C, f, ROOT, os("f-link")).unwrap();
    assert_eq!((l.ino, l.nlink), (f, 2));
    fs.setattr(&C, f, &SetAttr { mode: Some(0o600), ..Default::default() }).unwrap();
    assert_eq!(lookup(&fs, ROOT, "f-link").unwrap().mode & 0o777, 0o600);
    fs.shutdown().unwrap();
}

#[test]
fn xattrs_c27_c28() {
    let fs = mem();
    let f = write_file(&fs, ROOT, "f", b"");
    assert_eq!(fs.listxattr(f, 0).unwrap(), XattrValue::Size(0));
    assert_eq!(fs.listxattr(f, 100).unwrap(), XattrValue::Data(vec![]));
    assert_eq!(fs.getxattr(f, os("user.nope"), 100).unwrap_err(), Errno(libc::ENODATA));
    assert_eq!(fs.setxattr(&C, f, os("user.a"), b"1", libc::XATTR_REPLACE as u32).unwrap_err(), Errno(libc::ENODATA));
    fs.setxattr(&C, f, os("user.a"), b"123", libc::XATTR_CREATE as u32).unwrap();
    assert_eq!(fs.setxattr(&C, f, os("user.a"), b"1", libc::XATTR_CREATE as u32).unwrap_err(), Errno(libc::EEXIST));
    assert_eq!(fs.getxattr(f, os("user.a"), 0).unwrap(), XattrValue::Size(3));
    assert_eq!(fs.getxattr(f, os("user.a"), 2).unwrap_err(), Errno(libc::ERANGE));
    assert_eq!(fs.getxattr(f, os("user.a"), 3).unwrap(), XattrValue::Data(b"123".to_vec()));
    fs.setxattr(&C, f, os("user.b"), b"", 0).unwrap();
    assert_eq!(fs.listxattr(f, 100).unwrap(), XattrValue::Data(b"user.a\0user.b\0".to_vec()));
    assert_eq!(fs.listxattr(f, 3).unwrap_err(), Errno(libc::ERANGE));
    fs.removexattr(&C, f, os("user.a")).unwrap();
    assert_eq!(fs.removexattr(&C, f, os("user.a")).unwrap_err(), Errno(libc::ENODATA));
    fs.shutdown().unwrap();
}

#[test]
fn sparse_seek_fallocate_copy() {
    let fs = mem();
    let (a, fh) = fs.create(&C, ROOT, os("s"), 0o644, libc::O_RDWR as u32).unwrap();
    // C24 truncate up
    let st = fs.setattr(&C, a.ino, &SetAttr { size: Some(1 << 30), fh: Some(fh), ..Default::default() }).unwrap();
    assert_eq!(st.size, 1 << 30);
    assert!(st.blocks < 100);
    assert_eq!(fs.read(fh, 5 << 20, 4).unwrap(), vec![0; 4]);
    fs.setattr(&C, a.ino, &SetAttr { size: Some(0), fh: Some(fh), ..Default::default() }).unwrap();
    // C26
    fs.write(fh, 1 << 20, &[7u8; 4096]).unwrap();
    let p = fs.lseek(fh, 0, libc::SEEK_DATA as u32).unwrap();
    assert!(p == 0 || p == 1 << 20, "{p}");
    let h = fs.lseek(fh, 1 << 20, libc::SEEK_HOLE as u32).unwrap();
    assert_eq!(h, (1 << 20) + 4096);
    // C25 punch hole
    fs.setattr(&C, a.ino, &SetAttr { size: Some(0), fh: Some(fh), ..Default::default() }).unwrap();
    fs.write(fh, 0, &[b'x'; 12288]).unwrap();
    let keep = libc::FALLOC_FL_KEEP_SIZE as u32;
    fs.fallocate(fh, 4096, 4096, libc::FALLOC_FL_PUNCH_HOLE as u32 | keep).unwrap();
    assert_eq!(fs.getattr(a.ino, None).unwrap().size, 12288);
    assert_eq!(fs.read(fh, 4096, 4096).unwrap(), vec![0; 4096]);
    assert_eq!(fs.read(fh, 8192, 1).unwrap(), b"x");
    // Unaligned collapse: the working copy's filesystem says EINVAL; a mode fallocate(2) lacks: EOPNOTSUPP.
    assert_eq!(fs.fallocate(fh, 0, 10, libc::FALLOC_FL_COLLAPSE_RANGE as u32).unwrap_err(), Errno(libc::EINVAL));
    assert_eq!(fs.fallocate(fh, 0, 10, 0x04 /* FALLOC_FL_NO_HIDE_STALE */).unwrap_err(), Errno(libc::EOPNOTSUPP));
    fs.fallocate(fh, 0, 20000, 0).unwrap();
    assert_eq!(fs.getattr(a.ino, None).unwrap().size, 20000);
    // The modes the kernel's FUSE client does not pass on work here too.
    fs.setattr(&C, a.ino, &SetAttr { size: Some(0), fh: Some(fh), ..Default::default() }).unwrap();
    let blocks: Vec<u8> = (0..4 * 4096).map(|i| b'A' + (i / 4096) as u8).collect();
    fs.write(fh, 0, &blocks).unwrap();
    fs.fallocate(fh, 4096, 4096, libc::FALLOC_FL_ZERO_RANGE as u32).unwrap();
    assert_eq!(fs.read(fh, 4096, 4096).unwrap(), vec![0; 4096]);
    fs.fallocate(fh, 4096, 4096, libc::FALLOC_FL_COLLAPSE_RANGE as u32).unwrap();
    assert_eq!(fs.getattr(a.ino, None).unwrap().size, 3 * 4096);
    assert_eq!(fs.read(fh, 4096, 1).unwrap(), b"C");
    fs.fallocate(fh, 0, 4096, libc::FALLOC_FL_INSERT_RANGE as u32).unwrap();
    assert_eq!(fs.getattr(a.ino, None).unwrap().size, 4 * 4096);
    assert_eq!(fs.read(fh, 0, 1).unwrap(), b"\0");
    assert_eq!(fs.read(fh, 4096, 1).unwrap(), b"A");
    // C10 copy of a read-only file through handles.
    let t = write_file(&fs, ROOT, "t", b"foo\n");
    fs.setattr(&C, t, &SetAttr { mode: Some(0o444), ..Default::default() }).unwrap();
    let fin = fs.open(&U, t, libc::O_RDONLY as u32).unwrap();
    let (t2, fout) = fs.create(&U, ROOT, os("t2"), 0o644, libc::O_WRONLY as u32).unwrap();
    assert_eq!(fs.copy_file_range(fin, 0, fout, 0, 1 << 20).unwrap(), 4);
    assert_eq!(fs.getattr(t2.ino, Some(fout)).unwrap().size, 4);
    fs.release(fin).unwrap();
    fs.release(fout).unwrap();
    assert_eq!(read_all(&fs, t2.ino), b"foo\n");
    fs.release(fh).unwrap();
    fs.shutdown().unwrap();
}

#[test]
fn readdir_cookies_stable() {
    let fs = mem();
    let d = fs.mkdir(&C, ROOT, os("d"), 0o755).unwrap().ino;
    for i in 0..600 {
        fs.mknod(&C, d, os(&format!("e{i:03}")), libc::S_IFREG | 0o644, 0).unwrap();
    }
    // Read in pages of 100 while deleting entries already returned and ahead.
    let mut seen = Vec::new();
    let mut removed = std::collections::HashSet::new();
    let mut off = 0;
    loop {
        let mut page = Vec::new();
        fs.readdir(d, 0, off, &mut |e: &DirEntry| {
            if page.len() == 100 {
                return false;
            }
            page.push((e.name.to_vec(), e.offset));
            true
        })
        .unwrap();
        if page.is_empty() {
            break;
        }
        off = page.last().unwrap().1;
        for (n, _) in &page {
            assert!(!removed.contains(n), "removed entry returned");
        }
        for (n, _) in &page {
            if n.starts_with(b"e") {
                let i: usize = std::str::from_utf8(&n[1..]).unwrap().parse().unwrap();
                if i % 2 == 0 {
                    fs.unlink(&C, d, OsStr::from_bytes(n)).unwrap();
                }
                // Remove one further ahead too.
                let ahead = format!("e{:03}", i + 301);
                if fs.unlink(&C, d, os(&ahead)).is_ok() {
                    removed.insert(ahead.into_bytes());
                }
            }
        }
        seen.extend(page.into_iter().map(|p| p.0));
    }
    let mut uniq = seen.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), seen.len(), "no entry twice");
    assert!(seen.contains(&b"e299".to_vec()));
    assert!(seen.len() > 300 && seen.len() < 602);
    // readdirplus: lookups only for taken entries.
    let mut taken = Vec::new();
    fs.readdirplus(d, 0, 0, &mut |e: &DirEntry, a: Option<&Attr>| {
        if taken.len() == 5 {
            return false;
        }
        assert_eq!(a.is_none(), e.name == b"." || e.name == b"..");
        taken.push(e.ino);
        true
    })
    .unwrap();
    fs.rmdir(&C, ROOT, os("d")).unwrap_err();
    fs.shutdown().unwrap();
}

mod atime;
mod chunked;
mod damage;
mod local_only;
mod model;
mod oidx;
mod packs;
mod persistence;
mod snap;
mod snap_gc;
mod tmpfile_acl;

#[test]
fn fs_is_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Fs>();
}

fn kill_body(i: u32) -> Vec<u8> {
    let scale = if cfg!(debug_assertions) { 10_000 } else { 100_000 };
    (0..(i % 7) * scale + 10).map(|j| (j ^ i) as u8).collect()
}

/// Child half of `kill_9_leaves_consistent_store`: works on the store until killed.
#[test]
#[ignore]
fn kill_child() {
    let Ok(d) = std::env::var("RINGFS_KILL_DIR") else { return };
    let fs = Fs::open_store(Config { commit_interval: Duration::from_millis(5), ..cfg(StoreLocation::Dir(d.into())) }).unwrap();
    let dir = fs.mkdir(&C, ROOT, os("work"), 0o755).unwrap().ino;
    use std::io::Write;
    for i in 0u32.. {
        let name = format!("f{i}");
        let (a, fh) = fs.create(&C, dir, os(&name), 0o644, libc::O_RDWR as u32).unwrap();
        let body: Vec<u8> = kill_body(i);
        fs.write(fh, 0, &body).unwrap();
        if i % 3 == 0 {
            fs.fsync(fh, false).unwrap();
            println!("synced {i} {}", a.ino);
            std::io::stdout().flush().unwrap();
        }
        fs.release(fh).unwrap();
        if i % 4 == 1 {
            fs.rename(&C, dir, os(&name), ROOT, os(&format!("moved{i}")), 0).unwrap();
        }
        if i % 5 == 2 && i > 5 {
            let _ = fs.unlink(&C, dir, os(&format!("f{}", i - 5)));
        }
    }
}

#[test]
fn kill_9_leaves_consistent_store() {
    use std::io::BufRead;
    let t = tempfile::tempdir().unwrap();
    for round in 0..2 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::kill_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env("RINGFS_KILL_DIR", t.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut synced = Vec::new();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        for line in out.lines() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("synced ") {
                let v: Vec<u32> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
                synced.push((v[0], v[1] as u64));
                if synced.len() == 8 + round * 3 {
                    break;
                }
            }
        }
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        // The store as the kill left it is consistent...
        let r = fsck(t.path()).unwrap();
        assert!(r.is_clean(), "after kill: {r}");
        assert!(!r.clean_shutdown);
        // ...and opens with every fsynced file intact (unless later
        // removed): fsynced bytes come back from the working copies, which
        // recovery re-hashes.
        let check = |fs: &Fs| {
            for (i, ino) in &synced {
                let body: Vec<u8> = kill_body(*i);
                if fs.getattr(*ino, None).is_ok() {
                    assert_eq!(read_all(fs, *ino), body, "file f{i}");
                } else {
                    assert!(i % 5 == 2, "fsynced f{i} vanished");
                }
            }
            let last = synced.last().unwrap();
            assert_eq!(read_all(fs, last.1).len(), kill_body(last.0).len());
        };
        let fs = dir_fs(t.path());
        check(&fs);
        fs.shutdown().unwrap();
        drop(fs);
        fsck_clean(t.path());
        if round == 1 {
            // The store caught up at the clean shutdown: after a host crash
            // that lost the working copies, the files come back from the
            // store alone.
            std::fs::remove_dir_all(t.path().join("wc")).unwrap();
            let fs = dir_fs(t.path());
            check(&fs);
            fs.shutdown().unwrap();
            drop(fs);
        }
        // Next round runs on the recovered store (mkdir "work" exists: rename it away).
        let fs = dir_fs(t.path());
        fs.rename(&C, ROOT, os("work"), ROOT, os(&format!("work{round}")), 0).unwrap();
        fs.shutdown().unwrap();
    }
}

#[test]
fn passthrough_style_writes_are_seen() {
    // Writes straight to the working copy (as the kernel does with FUSE
    // passthrough) show in getattr and are hashed at release.
    let t = tempfile::tempdir().unwrap();
    let fs = dir_fs(t.path());
    let (a, fh) = fs.create(&C, ROOT, os("p"), 0o644, libc::O_RDWR as u32).unwrap();
    let t0 = SetTime::At(1_600_000_000, 0);
    fs.setattr(&C, a.ino, &SetAttr { mtime: Some(t0), fh: Some(fh), ..Default::default() }).unwrap();
    assert_eq!(fs.getattr(a.ino, Some(fh)).unwrap().mtime, 1_600_000_000);
    let fd = fs.backing_fd(fh).unwrap();
    let data = b"direct bytes";
    assert_eq!(unsafe { libc::pwrite(fd, data.as_ptr() as *const _, data.len(), 0) }, data.len() as isize);
    let st = fs.getattr(a.ino, Some(fh)).unwrap();
    assert_eq!(st.size, data.len() as u64);
    assert!(st.mtime > 1_600_000_000);
    fs.fsync(fh, false).unwrap();
    assert_eq!(fs.stats().unstored, 1, "fsync saw the bypassing write");
    fs.store_now().unwrap();
    let s1 = fs.stats();
    assert_eq!(s1.chunk_bytes, data.len() as u64, "the bypassing write is stored");
    fs.simulate_crash();
    std::fs::remove_dir_all(t.path().join("wc")).unwrap();
    let fs = dir_fs(t.path());
    assert_eq!(read_all(&fs, a.ino), data);
    fs.shutdown().unwrap();
}

#[test]
fn concurrent_clients() {
    let t = tempfile::tempdir().unwrap();
    let fs = std::sync::Arc::new(Fs::open_store(Config { commit_interval: Duration::from_millis(2), ..cfg(StoreLocation::Dir(t.path().into())) }).unwrap());
    let shared = fs.mkdir(&C, ROOT, os("shared"), 0o755).unwrap().ino;
    let threads: Vec<_> = (0..4)
        .map(|tid| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let d = fs.mkdir(&C, ROOT, os(&format!("t{tid}")), 0o755).unwrap().ino;
                for i in 0..if cfg!(debug_assertions) { 40u32 } else { 150 } {
                    let name = format!("f{i}");
                    let (a, fh) = fs.create(&C, d, os(&name), 0o644, libc::O_RDWR as u32).unwrap();
                    let body = vec![(i % 251) as u8; (i as usize % 5) * 70_000 + 1];
                    fs.write(fh, 0, &body).unwrap();
                    if i % 10 == 0 {
                        fs.fsync(fh, true).unwrap();
                    }
                    fs.release(fh).unwrap();
                    // Contend on one directory: move in, exchange, move back.
                    let tmp = format!("x{tid}-{i}");
                    fs.rename(&C, d, os(&name), shared, os(&tmp), 0).unwrap();
                    let _ = fs.rename(&C, shared, os(&tmp), shared, os("hot"), libc::RENAME_EXCHANGE);
                    let back = match fs.lookup(&C, shared, os(&tmp)) {
                        Ok(_) => tmp.clone(),
                        Err(_) => "hot".to_string(),
                    };
                    let _ = fs.rename(&C, shared, os(&back), d, os(&name), 0);
                    if i % 3 == 0 {
                        let _ = fs.unlink(&C, d, os(&name));
                    }
                    fs.forget(a.ino, 1);
                    let mut n = 0;
                    fs.readdirplus(shared, 0, 0, &mut |e: &DirEntry, a: Option<&Attr>| {
                        if a.is_some() {
                            n += 1;
                            fs.forget(e.ino, 1);
                        }
                        true
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    fs.shutdown().unwrap();
    drop(fs);
    fsck_clean(t.path());
    let fs = dir_fs(t.path());
    for tid in 0..4 {
        let d = lookup(&fs, ROOT, &format!("t{tid}")).unwrap().ino;
        for (name, ino, _, _) in list(&fs, d).into_iter().skip(2) {
            let a = fs.getattr(ino, None).unwrap();
            let data = read_all(&fs, ino);
            assert_eq!(data.len() as u64, a.size, "{}", String::from_utf8_lossy(&name));
        }
    }
    fs.shutdown().unwrap();
}

/// Not a test: prints the cost of metadata operations in this crate alone
/// (`cargo test --release -- --ignored --nocapture perf_numbers`).
#[test]
#[ignore]
fn perf_numbers() {
    let t = tempfile::tempdir().unwrap();
    for (label, loc) in [("memory", StoreLocation::Memory), ("dir", StoreLocation::Dir(t.path().into()))] {
        let fs = Fs::open_store(Config::new(loc)).unwrap();
        let d = fs.mkdir(&C, ROOT, os("d"), 0o755).unwrap().ino;
        let t0 = std::time::Instant::now();
        let (mut tc, mut tw, mut tr) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        for i in 0..1000 {
            let a = std::time::Instant::now();
            let (_, fh) = fs.create(&C, d, os(&format!("f{i}")), 0o644, libc::O_RDWR as u32).unwrap();
            let b = std::time::Instant::now();
            fs.write(fh, 0, b"hello").unwrap();
            let c = std::time::Instant::now();
            fs.release(fh).unwrap();
            tc += b - a;
            tw += c - b;
            tr += c.elapsed();
        }
        let create = t0.elapsed();
        eprintln!("{label}: create {:?} write {:?} release {:?}", tc / 1000, tw / 1000, tr / 1000);
        let t0 = std::time::Instant::now();
        for i in 0..1000 {
            fs.lookup(&C, d, os(&format!("f{i}"))).unwrap();
        }
        let lookup = t0.elapsed();
        let t0 = std::time::Instant::now();
        for i in 0..1000 {
            fs.mkdir(&C, d, os(&format!("d{i}")), 0o755).unwrap();
        }
        let mkdir = t0.elapsed();
        let t0 = std::time::Instant::now();
        fs.shutdown().unwrap();
        eprintln!(
            "{label}: create+write+release {:?}/file, lookup {:?}, mkdir {:?}, shutdown {:?}",
            create / 1000,
            lookup / 1000,
            mkdir / 1000,
            t0.elapsed()
        );
    }
}

/// `n` files of ~100 bytes, 1 000 to a directory (`d0/f0` …), written and
/// closed without fsync (the bulk measurements below).
fn make_small_files(fs: &Fs, n: u32) {
    let mut dir = ROOT;
    for i in 0..n {
        if i % 1000 == 0 {
            dir = fs.mkdir(&C, ROOT, os(&format!("d{}", i / 1000)), 0o755).unwrap().ino;
        }
        let (_, fh) = fs.create(&C, dir, os(&format!("f{i}")), 0o644, libc::O_RDWR as u32).unwrap();
        fs.write(fh, 0, format!("file {i} {}\n", "x".repeat(90)).as_bytes()).unwrap();
        fs.release(fh).unwrap();
    }
}

/// Measurement, not a check (run by hand): the final commit after
/// `RINGFS_BULK_FILES` (default 200 000) small files made faster than the
/// workers hash them. `cargo test --release -p fs-core bulk_final_commit -- --ignored --nocapture`
#[test]
#[ignore]
fn bulk_final_commit() {
    let n: u32 = std::env::var("RINGFS_BULK_FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let t = tempfile::tempdir().unwrap();
    let fs = dir_fs(t.path());
    let t0 = std::time::Instant::now();
    make_small_files(&fs, n);
    let made = t0.elapsed();
    let left = fs.stats();
    let t1 = std::time::Instant::now();
    fs.shutdown().unwrap();
    eprintln!("bulk: {n} files made in {made:?}; stats then {left:?}; shutdown took {:?}", t1.elapsed());
    drop(fs);
    fsck_clean(t.path());
}

/// Measurement, not a check (run by hand): the final commit right after a
/// recovery that re-hashes `RINGFS_BULK_FILES` (default 200 000) small
/// files, so that every one of them is still to store.
/// `cargo test --release -p fs-core bulk_recovery_commit -- --ignored --nocapture`
#[test]
#[ignore]
fn bulk_recovery_commit() {
    let n: u32 = std::env::var("RINGFS_BULK_FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let t = tempfile::tempdir().unwrap();
    let fs = dir_fs(t.path());
    make_small_files(&fs, n);
    fs.fsyncdir(0).unwrap();
    fs.simulate_crash();
    let t0 = std::time::Instant::now();
    let fs = dir_fs(t.path());
    let opened = t0.elapsed();
    let left = fs.stats();
    eprintln!("bulk-recovery: shutting down");
    if let Ok(w) = std::env::var("RINGFS_BULK_PAUSE_MS") {
        std::thread::sleep(Duration::from_millis(w.parse().unwrap_or(0)));
    }
    let t1 = std::time::Instant::now();
    fs.shutdown().unwrap();
    eprintln!("bulk-recovery: {n} files; open took {opened:?}; stats then {left:?}; shutdown took {:?}", t1.elapsed());
    drop(fs);
    fsck_clean(t.path());
}

/// The inode table's per-file sizes (issue #12, "bounded memory"); run with
/// `--nocapture` to see them. `Node` is boxed in the table.
#[test]
fn inode_table_sizes() {
    use crate::inode::{DirData, Node};
    use std::mem::size_of;
    let (node, rec, dir) = (size_of::<Node>(), size_of::<crate::schema::InodeRec>(), size_of::<DirData>());
    eprintln!("size_of: Node {node} B, InodeRec {rec} B, DirData {dir} B");
    assert!(node <= 216, "Node grew to {node} bytes; keep rarely used fields out of line");
}
