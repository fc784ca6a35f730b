//! `ringfs install` and `ringfs completions`: the binary, the mount(8)
//! helper, the systemd unit, shell completions and man pages, the last two
//! generated from the clap definition (clap_complete, clap_mangen) so that
//! they always agree with `--help`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::{Cli, CompletionsArgs, InstallArgs};

/// The unit shipped in the repository (`ringfs/systemd/ringfs@.service`).
pub const UNIT: &str = include_str!("../systemd/ringfs@.service");
/// The binary path written in [`UNIT`], replaced at install.
const UNIT_BINARY: &str = "/usr/local/bin/ringfs";

/// `ringfs completions SHELL`.
pub fn cmd_completions(args: CompletionsArgs) -> Result<()> {
    clap_complete::generate(args.shell, &mut Cli::command(), "ringfs", &mut std::io::stdout());
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file and a rename (a
/// running binary can be replaced so), with `mode`.
fn put(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().expect("install paths have a parent");
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{}.ringfs-install-{}", path.file_name().unwrap().to_string_lossy(), std::process::id()));
    let written = std::fs::write(&tmp, bytes)
        .and_then(|_| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("installing {}", path.display()));
    }
    println!("installed {}", path.display());
    Ok(())
}

/// The generated man pages: ringfs(1), one per command (ringfs-mount(1), …),
/// and mount.fuse.ringfs(8).
fn man_pages() -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let cmd = Cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    out.push(("man1/ringfs.1".to_string(), page));
    for sub in cmd.get_subcommands() {
        // clap names are &'static str; `ringfs install` runs once and exits.
        let name: &'static str = Box::leak(format!("ringfs-{}", sub.get_name()).into_boxed_str());
        let sub = sub.clone().name(name).bin_name(format!("ringfs {}", sub.get_name()));
        let mut page = Vec::new();
        clap_mangen::Man::new(sub).render(&mut page)?;
        out.push((format!("man1/{name}.1"), page));
    }
    out.push(("man8/mount.fuse.ringfs.8".to_string(), HELPER_MAN.as_bytes().to_vec()));
    Ok(out)
}

/// mount.fuse.ringfs(8), by hand: the helper has no clap definition of its own.
const HELPER_MAN: &str = r#".TH MOUNT.FUSE.RINGFS 8 "" "ringfs" "System Administration"
.SH NAME
mount.fuse.ringfs \- mount(8) helper for ringfs workspaces
.SH SYNOPSIS
\fBmount \-t fuse.ringfs\fR \fISTORE\fR \fIMOUNTPOINT\fR [\fB\-o\fR \fIOPTIONS\fR]
.br
\fBmount.fuse.ringfs\fR \fISTORE\fR \fIMOUNTPOINT\fR [\fB\-sfnv\fR] [\fB\-o\fR \fIOPTIONS\fR]
.SH DESCRIPTION
Runs \fBringfs mount\fR \fIMOUNTPOINT\fR \fB\-\-store\fR \fISTORE\fR \fB\-o\fR \fIOPTIONS\fR \fB\-\-daemon\fR
and returns once the workspace is mounted. \fISTORE\fR is the store directory
(created if missing), or \fBmemory\fR for an in\-memory store.
\fBumount\fR(8) of the mountpoint stops the daemon, which makes its final
commit after umount returned; while native roots are mounted umount(8)
answers EBUSY (they are submounts): use \fBringfs umount\fR, which waits.
.PP
An \fB/etc/fstab\fR line:
.PP
.nf
/var/lib/ringfs/ws  /work/ws  fuse.ringfs  noatime,ignore=node_modules  0 0
.fi
.SH OPTIONS
ro, rw, nosuid (default), suid, nodev (default), dev, noexec, exec, relatime
(default), noatime, strictatime, remount, nonempty, and every long option of
\fBringfs mount\fR as \fINAME\fR=\fIVALUE\fR or \fINAME\fR (store=DIR, memory,
ignore=GLOB, local\-dir=DIR, transport=KIND, passthrough=MODE, log\-file=FILE, ...).
defaults, auto, noauto, nofail, _netdev, comment=... and x\-... are ignored.
Unknown options are refused (ignored with \fB\-s\fR).
.SH SEE ALSO
\fBringfs\fR(1), \fBringfs\-mount\fR(1), \fBmount\fR(8), \fBfstab\fR(5)
"#;

/// `ringfs install`.
pub fn cmd_install(args: InstallArgs) -> Result<()> {
    let prefix = if args.prefix.is_absolute() { args.prefix.clone() } else { std::env::current_dir()?.join(&args.prefix) };
    let system_prefix = prefix == Path::new("/usr/local") || prefix == Path::new("/usr");
    let sbin = args.sbin_dir.clone().unwrap_or_else(|| if system_prefix { PathBuf::from("/sbin") } else { prefix.join("sbin") });
    let unit_dir = args.unit_dir.clone().unwrap_or_else(|| prefix.join("lib/systemd/system"));
    let bin = prefix.join("bin/ringfs");

    // The binary (unless we are it).
    let me = std::env::current_exe().context("finding the running binary")?;
    let same = bin.canonicalize().ok().is_some_and(|b| me.canonicalize().ok() == Some(b));
    if !same {
        put(&bin, &std::fs::read(&me).with_context(|| format!("reading {}", me.display()))?, 0o755)?;
    }

    // The mount(8) helper: a link to the binary.
    let helper = sbin.join("mount.fuse.ringfs");
    match std::fs::symlink_metadata(&helper) {
        Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(&helper).with_context(|| format!("replacing {}", helper.display()))?,
        Ok(_) => bail!("{} exists and is not a symbolic link: remove it if it is an old ringfs helper, then run ringfs install again", helper.display()),
        Err(_) => {}
    }
    std::fs::create_dir_all(&sbin).with_context(|| format!("creating {}", sbin.display()))?;
    std::os::unix::fs::symlink(&bin, &helper).with_context(|| format!("linking {} to {}", helper.display(), bin.display()))?;
    println!("installed {} -> {}", helper.display(), bin.display());

    // The systemd unit, run from the installed binary.
    let unit = UNIT.replace(UNIT_BINARY, &bin.to_string_lossy());
    put(&unit_dir.join("ringfs@.service"), unit.as_bytes(), 0o644)?;

    // Completions.
    let share = prefix.join("share");
    for (shell, path) in [
        (Shell::Bash, "bash-completion/completions/ringfs"),
        (Shell::Zsh, "zsh/site-functions/_ringfs"),
        (Shell::Fish, "fish/vendor_completions.d/ringfs.fish"),
    ] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "ringfs", &mut script);
        put(&share.join(path), &script, 0o644)?;
    }

    // Man pages.
    for (rel, page) in man_pages()? {
        put(&share.join("man").join(rel), &page, 0o644)?;
    }
    if Path::new("/run/systemd/system").exists() {
        println!("run `systemctl daemon-reload` so that systemd sees ringfs@.service");
    }
    Ok(())
}
