//! POSIX ACLs in their extended-attribute form (`system.posix_acl_access`,
//! `system.posix_acl_default`; `include/uapi/linux/posix_acl_xattr.h`) and
//! the rules ext4 applies to them, after `fs/posix_acl.c`: when an access
//! ACL is only the mode in another form (and is then not stored), what a
//! new inode takes from its directory's default ACL, and what chmod does to
//! an access ACL.
//!
//! With FUSE_POSIX_ACL the kernel checks permissions against these ACLs
//! itself; keeping the mode and the ACL in step, and inheriting default
//! ACLs, is the filesystem's job (`fuse_set_acl` in fs/fuse/acl.c). Owns
//! the format and those rules; must not touch the inode table or the store.

use crate::types::{Errno, Result};

/// The access ACL's xattr name.
pub(crate) const ACCESS: &[u8] = b"system.posix_acl_access";
/// The default ACL's xattr name (directories only).
pub(crate) const DEFAULT: &[u8] = b"system.posix_acl_default";

/// POSIX_ACL_XATTR_VERSION.
const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
/// rwx: the only permission bits an entry may hold.
const RWX: u16 = 0o7;

/// Is `name` one of the two ACL xattrs?
pub(crate) fn is_acl(name: &[u8]) -> bool {
    name == ACCESS || name == DEFAULT
}

/// One ACL entry: tag (ACL_USER_OBJ, …), rwx permissions, and the uid or
/// gid for ACL_USER / ACL_GROUP (ACL_UNDEFINED_ID otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// A valid ACL (`posix_acl_valid`), in the order the kernel wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Acl(Vec<Entry>);

impl Acl {
    /// Decodes an xattr value: EOPNOTSUPP for another version, EINVAL for a
    /// bad size, no entries, or an invalid ACL (entries out of order, a
    /// missing or repeated USER_OBJ / GROUP_OBJ / OTHER, named entries
    /// without a MASK, bits other than rwx).
    pub(crate) fn parse(v: &[u8]) -> Result<Acl> {
        if v.len() < 4 {
            return Err(Errno(libc::EINVAL));
        }
        if u32::from_le_bytes(v[..4].try_into().unwrap()) != VERSION {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        let body = &v[4..];
        if body.is_empty() || body.len() % 8 != 0 {
            return Err(Errno(libc::EINVAL));
        }
        let entries = body
            .chunks_exact(8)
            .map(|e| Entry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect();
        let acl = Acl(entries);
        acl.valid()?;
        Ok(acl)
    }

    /// `posix_acl_valid`: the state machine USER_OBJ, USER*, GROUP_OBJ,
    /// GROUP*, MASK?, OTHER, with a MASK whenever a named entry exists.
    fn valid(&self) -> Result<()> {
        #[derive(PartialEq)]
        enum S {
            UserObj,
            User,
            Group,
            Other,
            Done,
        }
        let bad = Err(Errno(libc::EINVAL));
        let mut state = S::UserObj;
        let mut needs_mask = false;
        for e in &self.0 {
            if e.perm & !RWX != 0 {
                return bad;
            }
            state = match (e.tag, state) {
                (USER_OBJ, S::UserObj) => S::User,
                (USER, S::User) => {
                    needs_mask = true;
                    S::User
                }
                (GROUP_OBJ, S::User) => S::Group,
                (GROUP, S::Group) => {
                    needs_mask = true;
                    S::Group
                }
                (MASK, S::Group) => S::Other,
                (OTHER, S::Other) => S::Done,
                (OTHER, S::Group) if !needs_mask => S::Done,
                _ => return bad,
            };
        }
        if state == S::Done {
            Ok(())
        } else {
            bad
        }
    }

    /// The xattr value.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(4 + 8 * self.0.len());
        v.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.0 {
            v.extend_from_slice(&e.tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            v.extend_from_slice(&e.id.to_le_bytes());
        }
        v
    }

    /// `posix_acl_equiv_mode`: `mode` with its rwx bits taken from the ACL
    /// (the group bits from the MASK when there is one), and whether the
    /// ACL says more than those bits can (named entries or a MASK). An
    /// access ACL that does not is not stored: the mode is all of it.
    pub(crate) fn equiv_mode(&self, mode: u32) -> (u32, bool) {
        let mut bits = 0u32;
        let mut not_equiv = false;
        for e in &self.0 {
            let p = (e.perm & RWX) as u32;
            match e.tag {
                USER_OBJ => bits |= p << 6,
                GROUP_OBJ => bits |= p << 3,
                OTHER => bits |= p,
                MASK => {
                    bits = (bits & !0o070) | (p << 3);
                    not_equiv = true;
                }
                _ => not_equiv = true,
            }
        }
        ((mode & !0o777) | bits, not_equiv)
    }

    /// `posix_acl_create_masq`: a new inode of `mode` in a directory whose
    /// default ACL is `self` becomes this ACL, each entry limited by the
    /// mode's bits, and the mode limited by the ACL's. Returns the new mode
    /// and whether the ACL must be stored (see [`Acl::equiv_mode`]).
    pub(crate) fn create_masq(&mut self, mode: u32) -> (u32, bool) {
        let mut m = mode & 0o777;
        let mut not_equiv = false;
        let (mut group_obj, mut mask) = (None, None);
        for (i, e) in self.0.iter_mut().enumerate() {
            match e.tag {
                USER_OBJ => {
                    e.perm &= ((m >> 6) & 7) as u16;
                    m &= ((e.perm as u32) << 6) | !0o700;
                }
                USER | GROUP => not_equiv = true,
                GROUP_OBJ => group_obj = Some(i),
                OTHER => {
                    e.perm &= (m & 7) as u16;
                    m &= (e.perm as u32) | !0o007;
                }
                MASK => {
                    mask = Some(i);
                    not_equiv = true;
                }
                _ => {}
            }
        }
        // A valid ACL has a GROUP_OBJ; the MASK, when present, stands for the group bits.
        if let Some(i) = mask.or(group_obj) {
            let e = &mut self.0[i];
            e.perm &= ((m >> 3) & 7) as u16;
            m &= ((e.perm as u32) << 3) | !0o070;
        }
        ((mode & !0o777) | m, not_equiv)
    }

    /// `posix_acl_chmod`: after chmod to `mode`, USER_OBJ, OTHER and the
    /// MASK (or GROUP_OBJ when there is no MASK) take the mode's bits; named
    /// entries keep theirs.
    pub(crate) fn chmod(&mut self, mode: u32) {
        let mut group = None;
        for (i, e) in self.0.iter_mut().enumerate() {
            match e.tag {
                USER_OBJ => e.perm = ((mode >> 6) & 7) as u16,
                OTHER => e.perm = (mode & 7) as u16,
                GROUP_OBJ if group.is_none() => group = Some(i),
                MASK => group = Some(i),
                _ => {}
            }
        }
        if let Some(i) = group {
            self.0[i].perm = ((mode >> 3) & 7) as u16;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: u32 = u32::MAX;

    fn acl(e: &[(u16, u16, u32)]) -> Acl {
        Acl(e.iter().map(|&(tag, perm, id)| Entry { tag, perm, id }).collect())
    }

    #[test]
    fn parse_validates_and_round_trips() {
        let a = acl(&[(USER_OBJ, 6, NONE), (USER, 4, 65534), (GROUP_OBJ, 4, NONE), (MASK, 4, NONE), (OTHER, 0, NONE)]);
        assert_eq!(Acl::parse(&a.encode()).unwrap(), a);
        let minimal = acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 5, NONE), (OTHER, 5, NONE)]);
        assert_eq!(Acl::parse(&minimal.encode()).unwrap(), minimal);
        for bad in [
            acl(&[(USER_OBJ, 6, NONE), (USER, 4, 1), (GROUP_OBJ, 4, NONE), (OTHER, 0, NONE)]), // no mask
            acl(&[(GROUP_OBJ, 4, NONE), (USER_OBJ, 6, NONE), (OTHER, 0, NONE)]),               // order
            acl(&[(USER_OBJ, 6, NONE), (GROUP_OBJ, 4, NONE)]),                                 // no other
            acl(&[(USER_OBJ, 8, NONE), (GROUP_OBJ, 4, NONE), (OTHER, 0, NONE)]),               // bits
        ] {
            assert_eq!(Acl::parse(&bad.encode()), Err(Errno(libc::EINVAL)), "{bad:?}");
        }
        assert_eq!(Acl::parse(&[2, 0, 0, 0]), Err(Errno(libc::EINVAL)), "no entries");
        assert_eq!(Acl::parse(&[1, 0, 0, 0, 1, 0, 6, 0, 255, 255, 255, 255]), Err(Errno(libc::EOPNOTSUPP)));
        assert_eq!(Acl::parse(&minimal.encode()[..13]), Err(Errno(libc::EINVAL)), "short");
    }

    #[test]
    fn equiv_mode_takes_the_mask_for_the_group_bits() {
        let minimal = acl(&[(USER_OBJ, 6, NONE), (GROUP_OBJ, 4, NONE), (OTHER, 0, NONE)]);
        assert_eq!(minimal.equiv_mode(0o100777), (0o100640, false));
        let named = acl(&[(USER_OBJ, 6, NONE), (USER, 7, 5), (GROUP_OBJ, 0, NONE), (MASK, 5, NONE), (OTHER, 0, NONE)]);
        assert_eq!(named.equiv_mode(0o104000), (0o104650, true));
    }

    #[test]
    fn create_masq_limits_acl_and_mode_both_ways() {
        // setfacl -d -m u::rwx,u:nobody:rwx,g::r-x,m::rwx,o::r-x; then creat(0666).
        let mut d = acl(&[(USER_OBJ, 7, NONE), (USER, 7, 65534), (GROUP_OBJ, 5, NONE), (MASK, 7, NONE), (OTHER, 5, NONE)]);
        let (mode, store) = d.create_masq(0o100666);
        assert_eq!((mode, store), (0o100664, true));
        assert_eq!(d, acl(&[(USER_OBJ, 6, NONE), (USER, 7, 65534), (GROUP_OBJ, 5, NONE), (MASK, 6, NONE), (OTHER, 4, NONE)]));
        // A default ACL without named entries only narrows the mode.
        let mut m = acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 0, NONE), (OTHER, 0, NONE)]);
        assert_eq!(m.create_masq(0o40777), (0o40700, false));
    }

    #[test]
    fn chmod_sets_owner_mask_and_other() {
        let mut a = acl(&[(USER_OBJ, 6, NONE), (USER, 7, 5), (GROUP_OBJ, 4, NONE), (MASK, 7, NONE), (OTHER, 4, NONE)]);
        a.chmod(0o640);
        assert_eq!(a, acl(&[(USER_OBJ, 6, NONE), (USER, 7, 5), (GROUP_OBJ, 4, NONE), (MASK, 4, NONE), (OTHER, 0, NONE)]));
        let mut b = acl(&[(USER_OBJ, 6, NONE), (GROUP_OBJ, 4, NONE), (OTHER, 4, NONE)]);
        b.chmod(0o751);
        assert_eq!(b, acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 5, NONE), (OTHER, 1, NONE)]));
    }
}
