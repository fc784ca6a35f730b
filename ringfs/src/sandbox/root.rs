//! The root a sandboxed command sees, made for it (bubblewrap's model,
//! built in-process with the new mount API): a tmpfs holding read-only
//! binds of the program trees ([`PROGRAM_TREES`]; a tree that is a
//! symbolic link on the host, as `/bin` → `usr/bin` on a merged-/usr
//! system, is the same link), a fresh `/tmp` (tmpfs), a `/dev` of its own
//! (null, zero, full, random, urandom, `/dev/shm`, the `fd`/`std*` links;
//! no terminal), `/proc` of the sandbox's PID namespace (`hidepid=2`: the
//! command sees only its own user's processes), the workspace read-write,
//! and the binds asked for with `--bind`/`--ro-bind`. Nothing else of the
//! host: no `/var`, `/run`, `/home`, `/root`, `/srv`, `/mnt`, no store,
//! no control socket, no other workspace. Every mount is `nosuid,nodev`
//! (the workspace too, whatever its own flags) except `/dev`, which is
//! `nosuid,noexec` and read-only, holding only the five nodes above. The
//! root itself is read-only once built. docs/SECURITY.md.
//!
//! [`RootPlan`] is made before the fork (it allocates); [`build`] runs in
//! the sandbox's PID 1 with raw system calls only.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The host trees bound read-only (those that exist), the programs a
/// command runs and what they read.
pub const PROGRAM_TREES: &[&str] = &["/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/// Where the new root is put together before `pivot_root` (a tmpfs
/// mounted over it in the sandbox's own mount namespace; the trees to bind
/// are cloned before, so a source under it is not hidden).
const NEWROOT: &str = "/tmp";

/// At most this many binds (program trees, the workspace, `--bind`,
/// `--ro-bind`) in one sandbox.
pub const MAX_BINDS: usize = 48;

/// Device nodes of the sandbox's `/dev`: (name, major, minor).
const NODES: &[(&str, u32, u32)] = &[("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9)];
/// Links of the sandbox's `/dev`: (name, target).
const DEV_LINKS: &[(&str, &str)] = &[
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

/// One `--bind SRC[:DST]` or `--ro-bind SRC[:DST]`: the host path `src`
/// (absolute, resolved), seen at `dst` in the sandbox (absolute; default
/// the same path), writable or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindSpec {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub writable: bool,
}

impl BindSpec {
    /// Parses `SRC[:DST]` (`flag` names the option in errors). SRC must
    /// exist; DST must be absolute, without `..`.
    pub fn parse(s: &str, writable: bool) -> Result<BindSpec> {
        let flag = if writable { "--bind" } else { "--ro-bind" };
        let (src, dst) = match s.split_once(':') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let src = Path::new(src)
            .canonicalize()
            .with_context(|| format!("{flag} {s}: no such file or directory {src} on the host"))?;
        let dst = match dst {
            Some(d) => PathBuf::from(d),
            None => src.clone(),
        };
        if !dst.is_absolute() || dst.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)) {
            bail!("{flag} {s}: the path in the sandbox must be absolute, without . or .. (SRC[:DST], e.g. /opt/tool:/opt/tool)");
        }
        if dst == Path::new("/") {
            bail!("{flag} {s}: cannot bind over the sandbox's root: give a directory, e.g. /opt/x");
        }
        Ok(BindSpec { src, dst, writable })
    }
}

#[derive(Debug)]
enum Kind {
    /// A host tree, cloned (with its submounts) into `slot` first.
    Bind { src: CString, slot: usize, dir: bool, writable: bool },
    Tmpfs { data: CString },
    /// `/dev`: nodes (path, dev_t), links (target, path), `shm`.
    Dev { nodes: Vec<(CString, libc::dev_t)>, links: Vec<(CString, CString)>, shm: CString },
    Proc,
    Symlink { target: CString },
}

#[derive(Debug)]
struct Entry {
    kind: Kind,
    /// Its place in the sandbox.
    dst: PathBuf,
    /// `NEWROOT` + dst, and the directories above it to make.
    at: CString,
    parents: Vec<CString>,
}

/// The sandbox's root, planned: entries in mount order (parents first).
#[derive(Debug)]
pub struct RootPlan {
    entries: Vec<Entry>,
    newroot: CString,
}

fn c(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).with_context(|| format!("{}: a path with a NUL byte", p.display()))
}

fn under_newroot(dst: &Path) -> Result<CString> {
    c(&Path::new(NEWROOT).join(dst.strip_prefix("/").unwrap_or(dst)))
}

impl RootPlan {
    /// Plans the root for the workspace mounted at `workspace` (read-write)
    /// and the `extra` binds. Errors: a bind that cannot hold (inside the
    /// workspace, over /proc or /dev, too many).
    pub fn new(workspace: &Path, extra: &[BindSpec]) -> Result<RootPlan> {
        let mut raw: Vec<(PathBuf, Kind)> = Vec::new();
        let mut slot = 0;
        let mut bind = |raw: &mut Vec<(PathBuf, Kind)>, src: &Path, dst: &Path, writable: bool| -> Result<()> {
            if slot == MAX_BINDS {
                bail!("--sandbox: more than {MAX_BINDS} binds: give fewer --bind/--ro-bind");
            }
            let dir = src.is_dir();
            raw.push((dst.to_path_buf(), Kind::Bind { src: c(src)?, slot, dir, writable }));
            slot += 1;
            Ok(())
        };
        for t in PROGRAM_TREES {
            let p = Path::new(t);
            match p.symlink_metadata() {
                Ok(m) if m.file_type().is_symlink() => {
                    let target = std::fs::read_link(p).with_context(|| format!("reading the link {t}"))?;
                    raw.push((p.to_path_buf(), Kind::Symlink { target: c(&target)? }));
                }
                Ok(m) if m.is_dir() => bind(&mut raw, p, p, false)?,
                _ => {}
            }
        }
        raw.push(("/tmp".into(), Kind::Tmpfs { data: CString::from(c"mode=1777") }));
        let dev = Path::new("/dev");
        let under = |n: &str| under_newroot(&dev.join(n));
        raw.push((
            dev.to_path_buf(),
            Kind::Dev {
                nodes: NODES
                    .iter()
                    .map(|(n, ma, mi)| Ok((under(n)?, libc::makedev(*ma, *mi))))
                    .collect::<Result<_>>()?,
                links: DEV_LINKS
                    .iter()
                    .map(|(n, t)| Ok((CString::new(*t)?, under(n)?)))
                    .collect::<Result<_>>()?,
                shm: under("shm")?,
            },
        ));
        raw.push(("/proc".into(), Kind::Proc));
        bind(&mut raw, workspace, workspace, true)?;
        for b in extra {
            let flag = if b.writable { "--bind" } else { "--ro-bind" };
            if b.dst.starts_with(workspace) {
                bail!("{flag} {}:{}: the destination is inside the workspace {} (a bind there would change the workspace): give a path outside it, e.g. /opt/x", b.src.display(), b.dst.display(), workspace.display());
            }
            if b.dst.starts_with("/proc") || b.dst.starts_with("/dev") || PROGRAM_TREES.iter().any(|t| Path::new(t) == b.dst) {
                bail!("{flag} {}:{}: {} is the sandbox's own: give another destination", b.src.display(), b.dst.display(), b.dst.display());
            }
            // The directories above a bind are made as root before the
            // pivot: never inside another bind, whose contents (links
            // above all) a command may have placed there.
            if let Some(o) = extra.iter().find(|o| !std::ptr::eq(*o, b) && b.dst.starts_with(&o.dst)) {
                bail!("{flag} {}:{}: the destination is inside the bind at {} (binds may not nest): give a path outside it", b.src.display(), b.dst.display(), o.dst.display());
            }
            bind(&mut raw, &b.src, &b.dst, b.writable)?;
        }
        // Parents before children; equal depths in the order above.
        raw.sort_by_key(|(d, _)| d.components().count());
        let entries = raw
            .into_iter()
            .map(|(dst, kind)| {
                let mut parents = Vec::new();
                let mut acc = PathBuf::from("/");
                let comps: Vec<_> = dst.components().skip(1).collect();
                for comp in comps.iter().take(comps.len().saturating_sub(1)) {
                    acc.push(comp);
                    parents.push(under_newroot(&acc)?);
                }
                Ok(Entry { at: under_newroot(&dst)?, dst, kind, parents })
            })
            .collect::<Result<_>>()?;
        Ok(RootPlan { entries, newroot: c(Path::new(NEWROOT))? })
    }

    /// The place in the sandbox of entry `i` with a space before it, or
    /// nothing for a step about no entry (for errors).
    pub fn shown(&self, i: usize) -> String {
        self.entries.get(i).map(|e| format!(" {}", e.dst.display())).unwrap_or_default()
    }

    /// The host file the sandbox's path `p` is (through the binds and the
    /// program trees' links), or `None` when it is not the host's (the
    /// sandbox's own /tmp, /dev, /proc, root) or not there.
    pub fn host_path(&self, p: &Path) -> Option<PathBuf> {
        self.host_path_depth(p, 0)
    }

    fn host_path_depth(&self, p: &Path, depth: u32) -> Option<PathBuf> {
        if depth > 8 {
            return None;
        }
        let e = self.entries.iter().rev().find(|e| p.starts_with(&e.dst))?;
        let rest = p.strip_prefix(&e.dst).ok()?;
        match &e.kind {
            Kind::Bind { src, .. } => Some(Path::new(std::ffi::OsStr::from_bytes(src.as_bytes())).join(rest)),
            Kind::Symlink { target } => {
                let t = Path::new(std::ffi::OsStr::from_bytes(target.as_bytes()));
                let base = if t.is_absolute() { t.to_path_buf() } else { e.dst.parent().unwrap_or(Path::new("/")).join(t) };
                self.host_path_depth(&base.join(rest), depth + 1)
            }
            _ => None,
        }
    }
}

/// What [`build`] failed at: the step (an index of [`STEPS`]) and the
/// entry it was making (`usize::MAX`: none).
pub type Failed = (usize, usize);

/// The steps of [`build`], named in errors.
pub const STEPS: &[&str] = &[
    "make mounts private",
    "clone the tree to bind at",
    "make nosuid,nodev (and read-only) the tree to bind at",
    "mount the new root",
    "make the directories above",
    "mount",
    "make the device nodes of",
    "make the root read-only",
    "enter the new root",
];

const AT_RECURSIVE: u32 = 0x8000;
const OPEN_TREE_CLONE: u32 = 1;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Builds the planned root and makes it this process's (`pivot_root`);
/// the old root is detached. Run in the sandbox's PID 1, in a fresh mount
/// namespace, as root: raw system calls on the plan only (no allocation).
///
/// # Safety
/// The caller is a forked child of a threaded process: it must not
/// allocate, and the plan must have been made before the fork.
pub unsafe fn build(plan: &RootPlan) -> std::result::Result<(), Failed> {
    use native_roots::{mount_setattr, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
    // SAFETY (all below): raw system calls on C strings of the plan.
    unsafe {
        let old_umask = libc::umask(0);
        let null = std::ptr::null::<libc::c_char>();
        if libc::mount(null, c"/".as_ptr(), null, libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
            return Err((0, usize::MAX));
        }
        let mut fds = [-1i32; MAX_BINDS];
        for (i, e) in plan.entries.iter().enumerate() {
            if let Kind::Bind { src, slot, writable, .. } = &e.kind {
                let fd = libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, src.as_ptr(), OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as u32) as i32;
                if fd < 0 {
                    return Err((1, i));
                }
                fds[*slot] = fd;
                let set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | if *writable { 0 } else { MOUNT_ATTR_RDONLY };
                if mount_setattr(fd, c"", libc::AT_EMPTY_PATH as u32 | AT_RECURSIVE, set, 0) != 0 {
                    return Err((2, i));
                }
            }
        }
        let nosuid_nodev = libc::MS_NOSUID | libc::MS_NODEV;
        if libc::mount(c"tmpfs".as_ptr(), plan.newroot.as_ptr(), c"tmpfs".as_ptr(), nosuid_nodev, c"mode=0755".as_ptr().cast()) != 0 {
            return Err((3, usize::MAX));
        }
        let mkdir = |p: &CString| libc::mkdir(p.as_ptr(), 0o755) == 0 || errno() == libc::EEXIST;
        for (i, e) in plan.entries.iter().enumerate() {
            if !e.parents.iter().all(mkdir) {
                return Err((4, i));
            }
            let made = match &e.kind {
                Kind::Symlink { target } => libc::symlink(target.as_ptr(), e.at.as_ptr()) == 0 || errno() == libc::EEXIST,
                Kind::Bind { dir: false, .. } => {
                    let f = libc::open(e.at.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o644);
                    f >= 0 && libc::close(f) == 0
                }
                _ => mkdir(&e.at),
            };
            if !made {
                return Err((4, i));
            }
            let mounted = match &e.kind {
                Kind::Bind { slot, .. } => {
                    let r = libc::syscall(libc::SYS_move_mount, fds[*slot], c"".as_ptr(), libc::AT_FDCWD, e.at.as_ptr(), MOVE_MOUNT_F_EMPTY_PATH);
                    libc::close(fds[*slot]);
                    r == 0
                }
                Kind::Tmpfs { data } => libc::mount(c"tmpfs".as_ptr(), e.at.as_ptr(), c"tmpfs".as_ptr(), nosuid_nodev, data.as_ptr().cast()) == 0,
                Kind::Proc => libc::mount(c"proc".as_ptr(), e.at.as_ptr(), c"proc".as_ptr(), nosuid_nodev | libc::MS_NOEXEC, c"hidepid=2".as_ptr().cast()) == 0,
                Kind::Dev { .. } => libc::mount(c"tmpfs".as_ptr(), e.at.as_ptr(), c"tmpfs".as_ptr(), libc::MS_NOSUID | libc::MS_NOEXEC, c"mode=0755,size=64k".as_ptr().cast()) == 0,
                Kind::Symlink { .. } => true,
            };
            if !mounted {
                return Err((5, i));
            }
            if let Kind::Dev { nodes, links, shm } = &e.kind {
                let ok = nodes.iter().all(|(p, d)| libc::mknod(p.as_ptr(), libc::S_IFCHR | 0o666, *d) == 0)
                    && links.iter().all(|(t, p)| libc::symlink(t.as_ptr(), p.as_ptr()) == 0)
                    && mkdir(shm)
                    && libc::mount(c"tmpfs".as_ptr(), shm.as_ptr(), c"tmpfs".as_ptr(), nosuid_nodev | libc::MS_NOEXEC, c"mode=1777".as_ptr().cast()) == 0
                    && mount_setattr(libc::AT_FDCWD, &e.at, 0, MOUNT_ATTR_RDONLY, 0) == 0;
                if !ok {
                    return Err((6, i));
                }
            }
        }
        if mount_setattr(libc::AT_FDCWD, &plan.newroot, 0, MOUNT_ATTR_RDONLY, 0) != 0 {
            return Err((7, usize::MAX));
        }
        // pivot_root(2)'s "new_root and put_old the same directory": the
        // old root lands on top of the new one and is detached from there.
        if libc::chdir(plan.newroot.as_ptr()) != 0
            || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
            || libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0
            || libc::chdir(c"/".as_ptr()) != 0
        {
            return Err((8, usize::MAX));
        }
        libc::umask(old_umask);
        Ok(())
    }
}
