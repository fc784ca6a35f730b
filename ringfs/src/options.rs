//! `ringfs mount -o OPTS`: the mount options mount(8) users know (ro, nosuid,
//! noatime, …) and ringfs's own long options written as `-o NAME=VALUE`
//! (for fstab lines and the mount.fuse.ringfs helper).
//!
//! Before clap parses the command line, [`expand`] turns each ringfs long
//! option found in `-o` into the flag it names (`-o store=DIR` becomes
//! `--store DIR`), so that both spellings are checked by the same code.
//! What stays in `-o` is parsed by [`Vfs::parse`] into the mount's flags.

use std::ffi::OsString;

use anyhow::{bail, Result};
use clap::CommandFactory;

use crate::cli::{Cli, MountArgs};

/// Options of mount(8) and fstab that concern mount(8), systemd or the
/// helper's caller, not the filesystem: accepted and ignored.
fn userspace_only(name: &str) -> bool {
    matches!(name, "defaults" | "auto" | "noauto" | "nofail" | "_netdev" | "user" | "nouser" | "users")
        || name.starts_with("x-")
        || name.starts_with("comment=")
}

/// The FUSE superblock options mountinfo shows (the kernel's, set by the
/// daemon at mount); mount(8) hands them back to the helper with
/// `remount`, where they are ignored (a remount cannot change them).
fn fuse_superblock(name: &str) -> bool {
    matches!(name, "default_permissions" | "allow_other")
        || ["fd=", "rootmode=", "user_id=", "group_id=", "max_read=", "blksize="].iter().any(|p| name.starts_with(p))
}

/// The kernel-side options `-o` takes, with what each does.
const VFS_OPTIONS: &[&str] = &[
    "ro", "rw", "suid", "nosuid", "dev", "nodev", "exec", "noexec", "relatime", "noatime", "strictatime", "atime", "norelatime",
    "nostrictatime", "remount",
];

/// Where mountinfo shows a flag of [`KERNEL_FLAGS`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// Among the mount's own options (field 6).
    Mount,
    /// Among the superblock's options (after the source).
    Super,
    /// Nowhere: a remount through mountinfo does not keep it.
    Nowhere,
}

/// mount(8) options that name a `mount(2)` flag the kernel takes for a
/// FUSE mount and applies itself; ringfs passes them on as they are:
/// (option, its opposite or "", flag, where mountinfo shows it).
/// The daemon follows `sync` and `dirsync` too (see
/// [`Vfs::sync_writes`]); `nodiratime` holds as readdir moves no atime.
const KERNEL_FLAGS: &[(&str, &str, libc::c_ulong, Shown)] = &[
    ("nodiratime", "diratime", libc::MS_NODIRATIME, Shown::Mount),
    ("nosymfollow", "symfollow", libc::MS_NOSYMFOLLOW, Shown::Mount),
    ("lazytime", "nolazytime", libc::MS_LAZYTIME, Shown::Super),
    ("sync", "async", libc::MS_SYNCHRONOUS, Shown::Super),
    ("dirsync", "", libc::MS_DIRSYNC, Shown::Super),
    ("silent", "loud", libc::MS_SILENT, Shown::Nowhere),
    ("iversion", "noiversion", libc::MS_I_VERSION, Shown::Nowhere),
];

/// Options accepted and ignored because what they ask for cannot be had
/// on Linux at all: mandatory locking (`mand`) is gone since 5.15, which
/// ignores it on ext4 and refuses it (EINVAL) for FUSE; `default_permissions`
/// and `allow_other` are what every ringfs mount has already.
fn no_op(name: &str) -> bool {
    matches!(name, "mand" | "nomand" | "default_permissions" | "allow_other")
}

/// Is `opt` an option of [`KERNEL_FLAGS`] (either spelling)?
fn kernel_flag(opt: &str) -> Option<(bool, libc::c_ulong)> {
    KERNEL_FLAGS.iter().find_map(|(on, off, f, _)| {
        if *on == opt {
            Some((true, *f))
        } else if !off.is_empty() && *off == opt {
            Some((false, *f))
        } else {
            None
        }
    })
}

/// Long options of `ringfs mount` that `-o NAME[=VALUE]` may name, and
/// whether each takes a value.
fn mount_long_options() -> Vec<(String, bool)> {
    let cmd = Cli::command();
    let mount = cmd.find_subcommand("mount").expect("mount subcommand");
    mount
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            if matches!(long, "help" | "daemon") {
                return None;
            }
            Some((long.to_string(), a.get_action().takes_values()))
        })
        .collect()
}

/// Splits one `-o` value into options (commas separate them).
fn split(opts: &str) -> impl Iterator<Item = &str> {
    opts.split(',').map(str::trim).filter(|o| !o.is_empty())
}

/// One option of `-o` that is one of ringfs's long flags: the flag's
/// arguments (`--store DIR`, `--memory`). None: not such an option.
fn as_flag(opt: &str, longs: &[(String, bool)]) -> Result<Option<Vec<OsString>>> {
    let (name, value) = match opt.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (opt, None),
    };
    // `-o local_dir=…` as well as `-o local-dir=…` (fstab writers differ).
    let name = name.replace('_', "-");
    let Some((long, takes)) = longs.iter().find(|(l, _)| *l == name) else {
        return Ok(None);
    };
    match (takes, value) {
        (true, Some(v)) => Ok(Some(vec![format!("--{long}").into(), v.into()])),
        (true, None) => bail!("mount option `{opt}` needs a value: write -o {long}=VALUE (see ringfs mount --help)"),
        (false, None) => Ok(Some(vec![format!("--{long}").into()])),
        (false, Some(_)) => bail!("mount option `{opt}` takes no value: write -o {long}"),
    }
}

/// Rewrites the arguments of a `ringfs mount` command line (`args[0]` is
/// the program): ringfs long options inside `-o` become flags, the rest of
/// each `-o` stays. Other commands are returned unchanged. Unknown options
/// are refused here, with the list of known ones.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>> {
    if args.get(1).and_then(|a| a.to_str()) != Some("mount") {
        return Ok(args);
    }
    let longs = mount_long_options();
    let remount = args.windows(2).any(|w| w[0] == "-o" && w[1].to_str().is_some_and(|v| split(v).any(|o| o == "remount")))
        || args.iter().any(|a| a.to_str().and_then(|s| s.strip_prefix("-o")).is_some_and(|v| split(v).any(|o| o == "remount")));
    let mut out: Vec<OsString> = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    let mut flags: Vec<OsString> = Vec::new();
    while let Some(a) = it.next() {
        let value = match a.to_str() {
            Some("-o") => match it.next() {
                Some(v) => v,
                None => {
                    out.push(a);
                    continue;
                }
            },
            Some(s) if s.starts_with("-o") && s.len() > 2 => OsString::from(&s[2..]),
            Some("--") => {
                out.push(a);
                out.extend(it.by_ref());
                break;
            }
            _ => {
                out.push(a);
                continue;
            }
        };
        let Some(value) = value.to_str().map(str::to_string) else {
            bail!("mount options must be UTF-8: {value:?}");
        };
        let mut kept = Vec::new();
        for opt in split(&value) {
            if remount && fuse_superblock(opt) {
                continue;
            }
            if VFS_OPTIONS.contains(&opt) || userspace_only(opt) || no_op(opt) || kernel_flag(opt).is_some() {
                kept.push(opt.to_string());
            } else if let Some(f) = as_flag(opt, &longs)? {
                flags.extend(f);
            } else {
                bail!("{}", unknown(opt, &longs));
            }
        }
        if !kept.is_empty() {
            out.push("-o".into());
            out.push(kept.join(",").into());
        }
    }
    out.extend(flags);
    Ok(out)
}

fn unknown(opt: &str, longs: &[(String, bool)]) -> String {
    let ours: Vec<String> = longs
        .iter()
        .filter(|(l, _)| !matches!(l.as_str(), "suid" | "dev" | "nonempty"))
        .map(|(l, takes)| if *takes { format!("{l}=…") } else { l.clone() })
        .collect();
    let kernel: Vec<&str> = KERNEL_FLAGS.iter().flat_map(|(on, off, _, _)| [*on, *off]).filter(|o| !o.is_empty()).collect();
    format!(
        "unknown mount option `{opt}`: use {}, {}, nonempty, or ringfs's {} (see ringfs mount --help)",
        VFS_OPTIONS.join(", "),
        kernel.join(", "),
        ours.join(", ")
    )
}

/// The mount's kernel flags, from `-o` and `--suid`/`--dev`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vfs {
    pub read_only: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
    pub atime: fuse_uring::MountAtime,
    /// The flags of [`KERNEL_FLAGS`] that are on (`MS_NODIRATIME`, …).
    pub kernel: libc::c_ulong,
    /// `-o remount`: change the flags of a mounted MOUNTPOINT.
    pub remount: bool,
}

impl Default for Vfs {
    /// What a plain `ringfs mount` gets: rw, nosuid, nodev, exec, relatime.
    fn default() -> Vfs {
        Vfs { read_only: false, nosuid: true, nodev: true, noexec: false, atime: fuse_uring::MountAtime::Relatime, kernel: 0, remount: false }
    }
}

impl Vfs {
    /// Applies the `-o` options (after [`expand`]) in order, the last of
    /// two opposites winning, over `base`; `--suid`/`--dev` win over all.
    pub fn parse(args: &MountArgs, base: Vfs) -> Result<Vfs> {
        let mut v = base;
        for opts in &args.options {
            for o in split(opts) {
                v.apply(o)?;
            }
        }
        if args.suid {
            v.nosuid = false;
        }
        if args.dev {
            v.nodev = false;
        }
        if args.read_only {
            v.read_only = true;
        }
        Ok(v)
    }

    fn apply(&mut self, o: &str) -> Result<()> {
        use fuse_uring::MountAtime::*;
        match o {
            "ro" => self.read_only = true,
            "rw" => self.read_only = false,
            "suid" => self.nosuid = false,
            "nosuid" => self.nosuid = true,
            "dev" => self.nodev = false,
            "nodev" => self.nodev = true,
            "exec" => self.noexec = false,
            "noexec" => self.noexec = true,
            "relatime" => self.atime = Relatime,
            "noatime" => self.atime = Noatime,
            "strictatime" => self.atime = Strictatime,
            // Dropping one of the three flags leaves mount(2) with none of
            // them, which the kernel takes as relatime.
            "atime" if self.atime == Noatime => self.atime = Relatime,
            "nostrictatime" if self.atime == Strictatime => self.atime = Relatime,
            "atime" | "nostrictatime" | "norelatime" => {}
            "remount" => self.remount = true,
            o if userspace_only(o) || no_op(o) => {}
            o if kernel_flag(o).is_some() => {
                let (on, flag) = kernel_flag(o).unwrap_or_default();
                if on {
                    self.kernel |= flag;
                } else {
                    self.kernel &= !flag;
                }
            }
            o => bail!("{}", unknown(o, &mount_long_options())),
        }
        Ok(())
    }

    /// The flags as mount(8) writes them (`rw,nosuid,nodev,relatime`).
    pub fn describe(&self) -> String {
        let mut v = vec![if self.read_only { "ro" } else { "rw" }];
        if self.nosuid {
            v.push("nosuid");
        }
        if self.nodev {
            v.push("nodev");
        }
        if self.noexec {
            v.push("noexec");
        }
        v.push(match self.atime {
            fuse_uring::MountAtime::Relatime => "relatime",
            fuse_uring::MountAtime::Noatime => "noatime",
            fuse_uring::MountAtime::Strictatime => "strictatime",
        });
        v.extend(KERNEL_FLAGS.iter().filter(|(_, _, f, _)| self.kernel & f != 0).map(|(on, _, _, _)| *on));
        v.join(",")
    }

    /// The flags of a mounted filesystem, from its mountinfo options (the
    /// per-mount ones and the superblock's, for `ro`).
    pub fn from_mountinfo(mount_opts: &str, super_opts: &str) -> Vfs {
        let has = |o: &str| mount_opts.split(',').any(|x| x == o);
        let has_super = |o: &str| super_opts.split(',').any(|x| x == o);
        let kernel = KERNEL_FLAGS
            .iter()
            .filter(|(on, _, _, shown)| match shown {
                Shown::Mount => has(on),
                Shown::Super => has_super(on),
                Shown::Nowhere => false,
            })
            .fold(0, |a, (_, _, f, _)| a | f);
        let atime = if has("noatime") {
            fuse_uring::MountAtime::Noatime
        } else if has("relatime") {
            fuse_uring::MountAtime::Relatime
        } else {
            fuse_uring::MountAtime::Strictatime
        };
        Vfs {
            read_only: has("ro") || has_super("ro"),
            nosuid: has("nosuid"),
            nodev: has("nodev"),
            noexec: has("noexec"),
            atime,
            kernel,
            remount: false,
        }
    }

    /// What the daemon makes durable before it answers, under `sync` and
    /// `dirsync`: (directory changes, every metadata change). `sync`
    /// implies `dirsync`, as for ext4; file data under `sync` the kernel
    /// makes synchronous itself (an fsync after each write, or O_DSYNC
    /// writes to a passthrough file's working copy).
    pub fn sync_writes(&self) -> (bool, bool) {
        let all = self.kernel & libc::MS_SYNCHRONOUS != 0;
        (all || self.kernel & libc::MS_DIRSYNC != 0, all)
    }

    /// Sets the flags of `opts`.
    pub fn apply_to(&self, opts: &mut fuse_uring::MountOptions) {
        opts.read_only = self.read_only;
        opts.nosuid = self.nosuid;
        opts.nodev = self.nodev;
        opts.noexec = self.noexec;
        opts.atime = self.atime;
        opts.extra_flags = self.kernel;
    }

    /// The daemon's own atime policy under these flags: a read-only mount
    /// moves no atime.
    pub fn fs_atime(&self) -> fs_core::Atime {
        match (self.read_only, self.atime) {
            (true, _) | (_, fuse_uring::MountAtime::Noatime) => fs_core::Atime::Noatime,
            (_, fuse_uring::MountAtime::Strictatime) => fs_core::Atime::Strictatime,
            (_, fuse_uring::MountAtime::Relatime) => fs_core::Atime::Relatime,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn parse(v: &[&str]) -> Result<MountArgs> {
        let argv = expand(os(v))?;
        match Cli::try_parse_from(argv)?.command {
            crate::cli::Command::Mount(m) => Ok(m),
            _ => unreachable!(),
        }
    }

    #[test]
    fn ringfs_options_become_flags() {
        let m = parse(&["ringfs", "mount", "/m", "-o", "store=/s,noatime,ignore=node_modules", "-oignore=/dist,ro"]).unwrap();
        assert_eq!(m.store.as_deref(), Some(std::path::Path::new("/s")));
        assert_eq!(m.ignore, ["node_modules", "/dist"]);
        assert_eq!(m.options, ["noatime", "ro"]);
        let v = Vfs::parse(&m, Vfs::default()).unwrap();
        assert!(v.read_only && v.nosuid && v.nodev && v.atime == fuse_uring::MountAtime::Noatime);
        assert_eq!(v.describe(), "ro,nosuid,nodev,noatime");
        let m = parse(&["ringfs", "mount", "/m", "-o", "memory,local_dir=/l,workers=2,defaults,x-systemd.after=a"]).unwrap();
        assert!(m.memory && m.workers == 2 && m.local_dir.is_some());
        // What mount(8) hands the helper for `mount -o remount,rw,noatime`.
        let m = parse(&["ringfs", "mount", "/m", "-o", "rw,nosuid,nodev,relatime,remount,noatime,user_id=0,group_id=0,default_permissions,allow_other"]).unwrap();
        let v = Vfs::parse(&m, Vfs::default()).unwrap();
        assert!(v.remount && v.atime == fuse_uring::MountAtime::Noatime && !v.read_only);
        assert!(parse(&["ringfs", "mount", "/m", "--memory", "-o", "user_id=0"]).is_err(), "only with remount");
    }

    #[test]
    fn bad_options_are_refused() {
        let e = parse(&["ringfs", "mount", "/m", "--memory", "-o", "frob"]).unwrap_err().to_string();
        assert!(e.contains("unknown mount option `frob`") && e.contains("noatime") && e.contains("store=…"), "{e}");
        let e = parse(&["ringfs", "mount", "/m", "-o", "store"]).unwrap_err().to_string();
        assert!(e.contains("needs a value"), "{e}");
        let e = parse(&["ringfs", "mount", "/m", "-o", "memory=1"]).unwrap_err().to_string();
        assert!(e.contains("takes no value"), "{e}");
        assert!(parse(&["ringfs", "mount", "/m", "-o", "daemon"]).is_err());
        assert!(parse(&["ringfs", "mount", "/m", "--memory", "--workers", "0"]).is_err());
        assert!(parse(&["ringfs", "mount", "/m", "--memory", "--queue-depth", "0"]).is_err());
        assert!(parse(&["ringfs", "mount", "/m", "--memory", "--hash-threads", "0"]).is_err());
    }

    #[test]
    fn kernel_flags_pass_on() {
        let m = parse(&["ringfs", "mount", "/m", "--memory", "-o", "nodiratime,lazytime,sync,dirsync,nosymfollow,silent,iversion,mand,allow_other"]).unwrap();
        let v = Vfs::parse(&m, Vfs::default()).unwrap();
        assert_eq!(v.describe(), "rw,nosuid,nodev,relatime,nodiratime,nosymfollow,lazytime,sync,dirsync,silent,iversion");
        assert_eq!(v.sync_writes(), (true, true));
        let mut o = fuse_uring::MountOptions::default();
        v.apply_to(&mut o);
        assert_eq!(o.ms_flags() & libc::MS_MANDLOCK, 0, "mand is not passed on (FUSE refuses it)");
        assert_ne!(o.ms_flags() & libc::MS_NODIRATIME, 0);
        let m = parse(&["ringfs", "mount", "/m", "--memory", "-o", "sync,async,diratime,noatime,atime"]).unwrap();
        let v = Vfs::parse(&m, Vfs::default()).unwrap();
        assert_eq!((v.describe().as_str(), v.sync_writes()), ("rw,nosuid,nodev,relatime", (false, false)));
        let v = Vfs::from_mountinfo("rw,nosuid,nodiratime,relatime,nosymfollow", "rw,sync,dirsync,lazytime,user_id=0");
        assert_eq!(v.describe(), "rw,nosuid,relatime,nodiratime,nosymfollow,lazytime,sync,dirsync");
    }

    #[test]
    fn last_opposite_wins_and_flags_win() {
        let m = parse(&["ringfs", "mount", "/m", "--memory", "-o", "ro,rw,strictatime,suid", "--dev"]).unwrap();
        let v = Vfs::parse(&m, Vfs::default()).unwrap();
        assert_eq!(v.describe(), "rw,strictatime");
        assert_eq!(v.fs_atime(), fs_core::Atime::Strictatime);
        let v = Vfs::from_mountinfo("rw,nosuid,nodev,relatime", "ro,user_id=0");
        assert!(v.read_only && v.fs_atime() == fs_core::Atime::Noatime);
        assert_eq!(Vfs::from_mountinfo("rw,noexec", "rw").atime, fuse_uring::MountAtime::Strictatime);
    }
}
