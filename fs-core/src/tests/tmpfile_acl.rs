//! Tests of POSIX ACLs (the mode kept in step, chmod, default-ACL
//! inheritance and the umask, persistence).

use super::*;

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
