//! Tests of O_TMPFILE (unnamed inodes, link(2) of them, freeing and crash
//! recovery, the local-only side) and POSIX ACLs (the mode kept in step,
//! chmod, default-ACL inheritance and the umask, persistence).

use super::*;

const TMP: u32 = (libc::O_TMPFILE | libc::O_RDWR) as u32;
const NONE: u32 = u32::MAX;

/// An ACL xattr value from (tag, perm, id) entries.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// u::rw-, u:65534:r--, g::r--, m::r--, o::---
fn nobody_reads() -> Vec<u8> {
    acl(&[(1, 6, NONE), (2, 4, 65534), (4, 4, NONE), (0x10, 4, NONE), (0x20, 0, NONE)])
}

fn xattr(fs: &Fs, ino: u64, name: &str) -> Option<Vec<u8>> {
    match fs.getxattr(ino, os(name), 65536) {
        Ok(XattrValue::Data(d)) => Some(d),
        Ok(XattrValue::Size(_)) => unreachable!(),
        Err(e) => {
            assert_eq!(e.0, libc::ENODATA, "{name}");
            None
        }
    }
}

#[test]
fn tmpfile_is_unnamed_until_linked_and_freed_otherwise() {
    let fs = mem();
    let d = fs.mkdir(&C, ROOT, os("d"), 0o755).unwrap().ino;
    let before = fs.stats().inodes;
    let (a, fh) = fs.tmpfile(&C, d, 0o600, TMP).unwrap();
    assert_eq!((a.nlink, a.mode), (0, libc::S_IFREG | 0o600));
    assert!(list(&fs, d).iter().all(|e| e.0 == b"." || e.0 == b".."), "no name");
    fs.write(fh, 0, b"hello").unwrap();
    let l = fs.link(&C, a.ino, d, os("named")).unwrap();
    assert_eq!((l.ino, l.nlink), (a.ino, 1));
    fs.release(fh).unwrap();
    assert_eq!(read_all(&fs, a.ino), b"hello");
    // Unlinked again, it cannot be linked a second time (I_LINKABLE is gone).
    let fh = fs.open(&C, a.ino, libc::O_RDONLY as u32).unwrap();
    fs.unlink(&C, d, os("named")).unwrap();
    assert_eq!(fs.link(&C, a.ino, d, os("again")).unwrap_err().0, libc::ENOENT);
    fs.release(fh).unwrap();
    fs.forget(a.ino, 2);
    // O_EXCL: never linkable. Without a name it goes at the last release and FORGET.
    let (b, fh) = fs.tmpfile(&C, d, 0o644, TMP | libc::O_EXCL as u32).unwrap();
    assert_eq!(fs.link(&C, b.ino, d, os("x")).unwrap_err().0, libc::ENOENT);
    fs.write(fh, 0, b"junk").unwrap();
    fs.release(fh).unwrap();
    fs.forget(b.ino, 1);
    assert_eq!(fs.stats().inodes, before);
    assert_eq!(fs.getattr(b.ino, None).unwrap_err().0, libc::ENOENT);
    // The umask applies as for creat(2).
    let (c, fh) = fs.tmpfile(&Caller { umask: 0o027, ..C }, d, 0o666, TMP).unwrap();
    assert_eq!(c.mode & 0o777, 0o640);
    fs.release(fh).unwrap();
    fs.forget(c.ino, 1);
}

#[test]
fn tmpfile_does_not_survive_a_crash() {
    let t = tempfile::tempdir().unwrap();
    {
        let fs = dir_fs(t.path());
        write_file(&fs, ROOT, "kept", b"k");
        let (_, fh) = fs.tmpfile(&C, ROOT, 0o600, TMP).unwrap();
        fs.write(fh, 0, b"unnamed bytes").unwrap();
        fs.fsync(fh, false).unwrap();
        let (b, fh2) = fs.tmpfile(&C, ROOT, 0o600, TMP).unwrap();
        fs.write(fh2, 0, b"named").unwrap();
        fs.link(&C, b.ino, ROOT, os("linked")).unwrap();
        fs.fsync(fh2, false).unwrap();
        assert_eq!(fs.stats().inodes, 4);
        fs.simulate_crash();
    }
    let fs = dir_fs(t.path());
    assert_eq!(fs.stats().inodes, 3, "root, kept, linked");
    assert_eq!(read_all(&fs, lookup(&fs, ROOT, "linked").unwrap().ino), b"named");
    fs.shutdown().unwrap();
    drop(fs);
    fsck_clean(t.path());
}

#[test]
fn tmpfile_takes_the_side_of_its_directory_and_of_its_name() {
    let t = tempfile::tempdir().unwrap();
    let mut c = cfg(StoreLocation::Dir(t.path().to_path_buf()));
    c.local = LocalConfig { ignore: vec!["cache".into()], dir: None, native_roots: false };
    let fs = Fs::open_store(c).unwrap();
    let cache = fs.mkdir(&C, ROOT, os("cache"), 0o755).unwrap().ino;
    let (a, fh) = fs.tmpfile(&C, cache, 0o600, TMP).unwrap();
    assert_eq!(fs.is_local(a.ino), Some(true));
    fs.write(fh, 0, b"local").unwrap();
    fs.link(&C, a.ino, cache, os("l")).unwrap();
    fs.release(fh).unwrap();
    assert!(t.path().join("local").join(a.ino.to_string()).exists());
    // Made in a synced directory, named in a local-only one: it moves (a file
    // with a name would get EXDEV).
    let (b, fh) = fs.tmpfile(&C, ROOT, 0o600, TMP).unwrap();
    assert_eq!(fs.is_local(b.ino), Some(false));
    fs.write(fh, 0, b"moved").unwrap();
    fs.link(&C, b.ino, cache, os("m")).unwrap();
    assert_eq!(fs.is_local(b.ino), Some(true));
    assert_eq!(fs.link(&C, b.ino, ROOT, os("m2")).unwrap_err().0, libc::EXDEV);
    fs.release(fh).unwrap();
    assert_eq!(read_all(&fs, b.ino), b"moved");
    assert!(t.path().join("local").join(b.ino.to_string()).exists());
    fs.shutdown().unwrap();
    let s = fs.stats();
    assert_eq!((s.chunks, s.chunk_bytes), (0, 0), "nothing local-only is chunked");
}

#[test]
fn access_acl_sets_the_mode_and_chmod_sets_the_acl() {
    let fs = mem();
    let f = write_file(&fs, ROOT, "f", b"x");
    fs.setattr(&C, f, &SetAttr { mode: Some(0o600), ..Default::default() }).unwrap();
    fs.setxattr(&C, f, os("system.posix_acl_access"), &nobody_reads(), 0).unwrap();
    assert_eq!(fs.getattr(f, None).unwrap().mode & 0o7777, 0o640, "group bits are the mask");
    assert_eq!(xattr(&fs, f, "system.posix_acl_access"), Some(nobody_reads()));
    // chmod: the mask (not the group entry) and owner/other follow the mode.
    fs.setattr(&C, f, &SetAttr { mode: Some(0o751), ..Default::default() }).unwrap();
    let want = acl(&[(1, 7, NONE), (2, 4, 65534), (4, 4, NONE), (0x10, 5, NONE), (0x20, 1, NONE)]);
    assert_eq!(xattr(&fs, f, "system.posix_acl_access"), Some(want));
    // An ACL the mode says in full is not stored: it only sets the mode.
    fs.setxattr(&C, f, os("system.posix_acl_access"), &acl(&[(1, 6, NONE), (4, 0, NONE), (0x20, 4, NONE)]), 0).unwrap();
    assert_eq!(fs.getattr(f, None).unwrap().mode & 0o7777, 0o604);
    assert_eq!(xattr(&fs, f, "system.posix_acl_access"), None);
    // Removing an absent ACL succeeds (ext4); other absent names: ENODATA.
    fs.removexattr(&C, f, os("system.posix_acl_access")).unwrap();
    assert_eq!(fs.removexattr(&C, f, os("user.none")).unwrap_err().0, libc::ENODATA);
    // Invalid ACLs, default ACLs on files.
    let no_mask = acl(&[(1, 6, NONE), (2, 4, 1), (4, 4, NONE), (0x20, 0, NONE)]);
    assert_eq!(fs.setxattr(&C, f, os("system.posix_acl_access"), &no_mask, 0).unwrap_err().0, libc::EINVAL);
    assert_eq!(fs.setxattr(&C, f, os("system.posix_acl_default"), &nobody_reads(), 0).unwrap_err().0, libc::EACCES);
    // The kernel's ACL_KILL_SGID: a caller outside the group sets an ACL.
    fs.setattr(&C, f, &SetAttr { mode: Some(0o2750), ..Default::default() }).unwrap();
    fs.setxattr(&C, f, os("system.posix_acl_access"), &nobody_reads(), XATTR_ACL_KILL_SGID).unwrap();
    assert_eq!(fs.getattr(f, None).unwrap().mode & 0o7777, 0o640);
}

#[test]
fn default_acl_is_inherited_and_replaces_the_umask() {
    let t = tempfile::tempdir().unwrap();
    let masked = Caller { umask: 0o022, ..C };
    let (d, f, sub, plain);
    {
        let fs = dir_fs(t.path());
        d = fs.mkdir(&masked, ROOT, os("d"), 0o777).unwrap().ino;
        assert_eq!(fs.getattr(d, None).unwrap().mode & 0o777, 0o755, "umask without a default ACL");
        // u::rwx, u:65534:rwx, g::r-x, m::rwx, o::r-x
        let def = acl(&[(1, 7, NONE), (2, 7, 65534), (4, 5, NONE), (0x10, 7, NONE), (0x20, 5, NONE)]);
        fs.setxattr(&C, d, os("system.posix_acl_default"), &def, 0).unwrap();
        let (a, fh) = fs.create(&masked, d, os("f"), 0o666, libc::O_RDWR as u32).unwrap();
        fs.release(fh).unwrap();
        f = a.ino;
        assert_eq!(a.mode & 0o777, 0o664, "the ACL, not the umask");
        let fa = acl(&[(1, 6, NONE), (2, 7, 65534), (4, 5, NONE), (0x10, 6, NONE), (0x20, 4, NONE)]);
        assert_eq!(xattr(&fs, f, "system.posix_acl_access"), Some(fa));
        assert_eq!(xattr(&fs, f, "system.posix_acl_default"), None);
        let s = fs.mkdir(&masked, d, os("sub"), 0o777).unwrap();
        sub = s.ino;
        assert_eq!(s.mode & 0o777, 0o775);
        assert_eq!(xattr(&fs, sub, "system.posix_acl_default"), Some(def.clone()));
        assert_eq!(xattr(&fs, sub, "system.posix_acl_access"), Some(def));
        // A symlink takes nothing.
        let l = fs.symlink(&masked, d, os("l"), os("f")).unwrap();
        assert_eq!((l.mode & 0o777, xattr(&fs, l.ino, "system.posix_acl_access")), (0o777, None));
        plain = write_file(&fs, ROOT, "plain", b"p");
        fs.shutdown().unwrap();
    }
    fsck_clean(t.path());
    let fs = dir_fs(t.path());
    assert!(xattr(&fs, d, "system.posix_acl_default").is_some());
    assert!(xattr(&fs, f, "system.posix_acl_access").is_some());
    assert!(xattr(&fs, sub, "system.posix_acl_default").is_some());
    assert_eq!(xattr(&fs, plain, "system.posix_acl_access"), None);
    fs.shutdown().unwrap();
}
