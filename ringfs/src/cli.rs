//! Command-line interface (clap). The subcommand names and flags here are
//! relied on by scripts, CI and the other issues; change them with care and
//! keep README.md in agreement.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

/// ringfs: a FUSE workspace filesystem for AI agents and developers.
///
/// A workspace is mounted at a path; its files are kept in a content-addressed
/// store (BLAKE3 chunks in redb) with a change journal.
#[derive(Debug, Parser)]
#[command(name = "ringfs", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mount a workspace at MOUNTPOINT (foreground unless --daemon).
    Mount(MountArgs),
    /// Cleanly stop the daemon serving MOUNTPOINT (flush, commit, unmount).
    ///
    /// On a `mount --remote`, waits for the push of the last changes too
    /// (--no-wait leaves it pending). If the daemon is gone (killed),
    /// removes the stale mount instead.
    Umount(UmountArgs),
    /// Show the store, transport, negotiated kernel features and counters of a mount.
    Status(StatusArgs),
    /// Per-opcode request counts and latency percentiles, bytes through the
    /// daemon, store size and journal position of a mount.
    Stats(StatsArgs),
    /// Verify a store: the pack directory and pack files usable, every table
    /// readable, chunk locations inside their
    /// pack files, manifests, reference counts, dirents, working copies'
    /// sizes (with --full: every chunk's and working copy's hash).
    ///
    /// Read-only: writes nothing, works on a read-only filesystem. Exits 0
    /// when the store is clean, 1 with a report of what is damaged and where
    /// (rebuild with `ringfs salvage`), 2 when the store cannot be checked
    /// (no store there, or held by a running daemon).
    Fsck(FsckArgs),
    /// Collect garbage: delete the snapshot objects no ref reaches, then
    /// compact the pack files so chunks nothing uses give their space back.
    ///
    /// Kept: every commit a branch reaches (through all parents), their
    /// trees and chunks, the tree of the store's last commit, and every
    /// live file's chunks; everything else goes (a commit only a deleted
    /// branch reached, and the chunks only it named). On a mount
    /// (MOUNTPOINT) the daemon does it while serving (a commit waits for
    /// it, or it for the commit); --store DIR works on a store no daemon
    /// holds. Prints the objects, commits and chunks freed, the packs
    /// before and after and the bytes reclaimed.
    Gc(GcArgs),
    /// Rebuild a damaged store into a new one from what survives: whatever
    /// metadata its database still yields, the working copies (the truth for
    /// their files), and chunks from the database or pack files.
    ///
    /// The damaged store is only read. Files whose names are lost, or whose
    /// records disagree with what survives (a manifest naming chunks no pack
    /// holds, a size its working copy does not have), go to lost+found/ in
    /// the new workspace (named by inode number). Prints what
    /// was recovered with names, what went to lost+found and what was lost;
    /// exits 0 when every file the surviving metadata names was recovered
    /// whole, 1 otherwise, 2 when nothing could be built.
    Salvage(SalvageArgs),
    /// Detach the native root at PATH: the directory stays, served by the
    /// daemon, until the next mount.
    Unroot(UnrootArgs),
    /// Record a snapshot (commit) of the workspace's synced files on its
    /// branch (main): prints the commit id, paths added/modified/removed,
    /// objects and bytes written vs reused, and the time per phase.
    ///
    /// Costs what changed since the last commit, not the size of the tree.
    /// Local-only paths and native roots are not in snapshots. When nothing
    /// changed no commit is made (the head is printed; --allow-empty makes one).
    Commit(CommitArgs),
    /// List the commits of the workspace's branch, newest first.
    Log(LogArgs),
    /// Run one command in the workspace and print a receipt of what it
    /// changed and cost.
    ///
    /// argv goes to the program directly (no shell); stdout and stderr are
    /// streamed (or captured, --output-limit); the exit status is the
    /// command's (128+N for a signal N, 125 when ringfs failed, 127 for a
    /// command not found). The receipt (stderr; --json: stdout, and a
    /// failure of ringfs the error document of docs/FORMATS.md) has the
    /// wall time, the command's time and the fixed overhead, CPU and peak
    /// RSS, the daemon's requests by opcode and bytes, the paths added,
    /// modified and removed with sizes, content stored new vs reused,
    /// local-only paths apart, and whether every change is durable (on a
    /// `mount --remote`: what is on the remote and what is pending).
    /// Processes the command leaves running (setsid'd ones too: they
    /// carry RINGFS_EXEC_CALL) are killed when it exits and counted.
    Exec(ringfs::exec_cli::ExecArgs),
    /// What changed between two commits, or a commit and the live tree:
    /// per path added/modified/removed with old and new size, kind and mode.
    ///
    /// FROM and TO are a commit id (or a unique start of one), a branch
    /// name, or `live`; FROM defaults to the last commit, TO to `live`.
    /// `ringfs diff --store DIR FROM TO` diffs two commits of an unmounted
    /// store (read-only). `--json` carries `total_ms`.
    Diff(DiffArgs),
    /// Create, move, delete or list branches (names of commits).
    ///
    /// `ringfs branch MOUNTPOINT NAME [FROM]` makes NAME point at FROM (a
    /// branch or commit id; default: the checked-out branch's head);
    /// --force moves an existing NAME. `--list` shows them (* marks the
    /// checked-out one), `-d NAME` deletes one (never the checked-out one).
    /// --store DIR works on an unmounted store.
    Branch(BranchArgs),
    /// A new writable workspace from a commit, sharing the chunks: the new
    /// store's packs are hard links to the origin's.
    ///
    /// SOURCE is MOUNTPOINT or --store DIR, optionally followed by @COMMIT
    /// or @BRANCH (default: the checked-out branch's head). The new store
    /// is --new-store NEWDIR (default: ORIGIN_STORE.fork-NAME, NAME being
    /// the last component of --to, beside the origin's store: hard links
    /// need the same filesystem), then mounted at --to NEWMNT as `ringfs
    /// mount --daemon` does (not with --no-mount).
    Fork(ForkArgs),
    /// Remotes of a workspace: `remote add` records one (file:///DIR or
    /// s3://BUCKET/PREFIX), `remote status` shows per branch the local and
    /// remote heads, what a push would send, the last push and its error.
    ///
    /// S3 settings come from the environment at each use (AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION); no secret is
    /// ever written or printed.
    Remote(RemoteArgs),
    /// Send a branch's commits to a remote: only the objects and chunks the
    /// remote lacks (by a local record, no per-object round trips), then
    /// the branch head, never over another store's head.
    Push(PushArgs),
    /// Bring a branch's new commits from a remote into an unmounted store
    /// (fast-forward only; a diverged branch is reported, not merged). The
    /// live tree follows when the branch is checked out and has no
    /// uncommitted change.
    Pull(PullArgs),
    /// A new store from a remote's branch, mountable with `ringfs mount MNT
    /// --store DIR` before any file byte arrives (chunks are fetched on a
    /// file's first open and in the background; --eager: all at once); the
    /// remote is recorded as `origin`.
    Clone(CloneArgs),
    /// Make the live tree a commit's (whole, or only the paths given):
    /// files absent from the commit are removed, changed files rewritten,
    /// attributes set, the kernel's caches invalidated. Prints paths
    /// added/removed/rewritten/changed, content bytes restored and the time
    /// per phase.
    ///
    /// Open files keep what they had (as after rm); local-only paths are
    /// left alone. Durable when it returns; a crash during it leaves the
    /// tree before or after. Costs what differs, not the size of the tree.
    Restore(RestoreArgs),
    /// Install ringfs: the binary, the mount(8) helper mount.fuse.ringfs, the
    /// systemd unit ringfs@.service, shell completions and man pages.
    Install(InstallArgs),
    /// Print the shell completion script for SHELL on stdout.
    Completions(CompletionsArgs),
}

impl Command {
    /// Was `--json` asked? Then a failure is the error document on stdout
    /// (src/errors.rs, docs/FORMATS.md "Error document"), as success is a
    /// JSON document.
    pub fn json(&self) -> bool {
        match self {
            Command::Status(a) => a.json,
            Command::Stats(a) => a.json,
            Command::Commit(a) => a.json,
            Command::Log(a) => a.json,
            Command::Diff(a) => a.json,
            Command::Restore(a) => a.json,
            Command::Gc(a) => a.json,
            Command::Branch(a) => a.json,
            Command::Fork(a) => a.json,
            Command::Remote(a) => match &a.action {
                RemoteAction::Add { json, .. } | RemoteAction::Status { json, .. } => *json,
            },
            Command::Push(a) => a.json,
            Command::Pull(a) => a.json,
            Command::Clone(a) => a.json,
            Command::Exec(a) => a.json,
            Command::Mount(_) | Command::Umount(_) | Command::Fsck(_) | Command::Salvage(_) | Command::Unroot(_) | Command::Install(_) | Command::Completions(_) => false,
        }
    }

    /// The error kind of a failure nothing in its chain classifies: `remote`
    /// for the commands that talk to a remote, else `other`.
    pub fn fallback_kind(&self) -> ringfs::errors::ErrorKind {
        match self {
            Command::Remote(_) | Command::Push(_) | Command::Pull(_) | Command::Clone(_) => ringfs::errors::ErrorKind::Remote,
            _ => ringfs::errors::ErrorKind::Other,
        }
    }
}

/// Does the command line `argv` (argv[0] first) ask for `--json`? For a
/// line clap refused: the flag anywhere before `--` (after it, the words
/// are `ringfs exec`'s command's).
pub fn asks_json(argv: &[std::ffi::OsString]) -> bool {
    argv.iter().skip(1).take_while(|a| *a != "--").any(|a| a == "--json")
}

#[derive(Clone, Debug, Args)]
#[command(after_help = MOUNT_AFTER_HELP)]
pub struct MountArgs {
    /// Existing empty directory to mount the workspace on (see --nonempty).
    pub mountpoint: PathBuf,

    /// Durable store directory (created if missing). Give --store DIR or
    /// --memory (also as -o store=DIR, -o memory).
    #[arg(long, value_name = "DIR", conflicts_with = "memory")]
    pub store: Option<PathBuf>,

    /// Keep the store in memory (redb's in-memory backend); contents vanish at unmount.
    #[arg(long)]
    pub memory: bool,

    /// Mount options, comma-separated, repeatable: ro, rw, nosuid, suid,
    /// nodev, dev, noexec, exec, relatime (default), noatime, strictatime,
    /// remount (change the options of a mounted MOUNTPOINT), nonempty, the
    /// kernel's nodiratime, lazytime, sync, dirsync, nosymfollow, silent,
    /// iversion and their opposites (passed on; under sync/dirsync each
    /// change is committed durably before it is answered), and every long
    /// option below as NAME=VALUE or NAME (-o store=DIR, -o memory,
    /// -o ignore=node_modules). The fstab/mount(8) options defaults, auto,
    /// noauto, nofail, _netdev, comment=… and x-…, and mand, are ignored.
    #[arg(short = 'o', value_name = "OPTS", action = clap::ArgAction::Append)]
    pub options: Vec<String>,

    /// Honour set-user-ID and set-group-ID bits (the mount is nosuid unless
    /// this or -o suid). Root only.
    #[arg(long)]
    pub suid: bool,

    /// Honour device files (the mount is nodev unless this or -o dev). Root only.
    #[arg(long)]
    pub dev: bool,

    /// Mount even though MOUNTPOINT is not empty (its files are hidden while mounted).
    #[arg(long)]
    pub nonempty: bool,

    /// Read every table of the store's database before serving it, as after
    /// an unclean shutdown (a store shut down cleanly has only its inode
    /// tables, pack list, chunk index and manifest segment tables read;
    /// `ringfs fsck` checks everything without mounting).
    #[arg(long)]
    pub check: bool,

    /// Detach once the mount is ready (the command returns 0 when it is visible).
    #[arg(long)]
    pub daemon: bool,

    /// Upper bound, in milliseconds, on how long a change that was not fsynced
    /// may wait before it is committed durably (group commit interval).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub commit_interval_ms: u64,

    /// Size of the pool that serves slow requests (fsync, release, large
    /// reads and writes) on both transports; /dev/fuse also reads requests
    /// with min(N, CPUs) threads, each on its own cloned fd.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = at_least_one)]
    pub workers: usize,

    /// Kernel transport: `auto` uses FUSE-over-io_uring (kernel ≥ 6.14) when
    /// /sys/module/fuse/parameters/enable_uring is Y, else /dev/fuse with one
    /// log line; `uring` refuses to mount without it; `dev` always uses /dev/fuse.
    #[arg(long, value_enum, value_name = "KIND", default_value_t = TransportArg::Auto, overrides_with = "transport")]
    pub transport: TransportArg,

    /// io_uring: registered ring entries per queue (one queue per possible CPU).
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub queue_depth: u16,

    /// Number of threads that cut and hash released files.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = at_least_one)]
    pub hash_threads: usize,

    /// Write the daemon's log here (with --daemon; default: next to the
    /// control socket, /run/ringfs/<id>.log; a foreground mount logs to
    /// stderr). Its directory must exist.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,

    /// FUSE passthrough (kernel serves file reads, writes and mmap from the
    /// backing file): `auto` uses it where the kernel (≥ 6.9) and
    /// CAP_SYS_ADMIN allow, `on` refuses to mount without it, `off` sends
    /// all data through the daemon.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = Passthrough::Auto, overrides_with = "passthrough")]
    pub passthrough: Passthrough,

    /// Keep paths matching GLOB local-only: on the host disk (--local-dir),
    /// never in the store or journal. gitignore syntax (`node_modules`
    /// matches at any depth, `/dist` only at the root, `**/target`,
    /// `!pattern` re-includes). Repeatable; also read from RINGFS_IGNORE
    /// (newline- or comma-separated).
    #[arg(long = "ignore", value_name = "GLOB")]
    pub ignore: Vec<String>,

    /// Backing directory of local-only files. Default: DIR/local for
    /// --store DIR, a temporary directory for --memory.
    #[arg(long, value_name = "DIR")]
    pub local_dir: Option<PathBuf>,

    /// Native roots: `auto` bind-mounts every local-only directory whose
    /// parent is synced (e.g. node_modules, made by mkdir or found at
    /// mount) from the host disk over its place, so nothing below it
    /// reaches the daemon (needs root); `off` serves them through the
    /// daemon. rmdir/rename of a native root itself fail with EBUSY.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = NativeRootsArg::Auto, overrides_with = "native_roots")]
    pub native_roots: NativeRootsArg,

    /// Mount the store checked out on branch NAME: a store on another
    /// branch has its live tree replaced by NAME's head first (refused
    /// when the live tree holds changes not in its last commit).
    #[arg(long, value_name = "NAME", requires = "store", conflicts_with = "at")]
    pub branch: Option<String>,

    /// Browse commit COMMIT (an id or its start, or a branch) of --store
    /// DIR read-only, without touching the store's live tree: a temporary
    /// fork beside the store, removed at unmount. Needs --read-only.
    #[arg(long, value_name = "COMMIT", requires = "store")]
    pub at: Option<String>,

    /// Set by `--at` on the mount it serves (not an option): the commit's
    /// full id and the origin store. Such a mount stays read-only and
    /// refuses commit, branch changes, gc, restore, push and exec.
    #[arg(skip)]
    pub at_view: Option<(String, PathBuf)>,

    /// Mount read-only (as -o ro).
    #[arg(long)]
    pub read_only: bool,

    /// Continuous sync to remote NAME of the store (`ringfs remote add`):
    /// the live tree is committed onto the mounted branch (as `ringfs
    /// commit` would, message "ringfs sync") every --sync-interval and
    /// after fsync bursts, and that branch is pushed in the background,
    /// retried with backoff while the remote is unreachable. A lost host
    /// loses at most the changes of the last interval plus the push under
    /// way. `ringfs umount` waits for the last push (--no-wait, --timeout).
    #[arg(long, value_name = "NAME", requires = "store")]
    pub remote: Option<String>,

    /// With --remote: seconds between automatic commits and pushes (at least 0.1).
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub sync_interval: f64,
}

/// `ringfs mount --native-roots`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NativeRootsArg {
    Auto,
    Off,
}

#[derive(Debug, Args)]
pub struct UnrootArgs {
    /// A native root directory inside a ringfs mount (see `ringfs status`).
    pub path: PathBuf,
}

/// `ringfs mount --transport`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    /// io_uring when the kernel offers it and enable_uring is Y, else /dev/fuse.
    Auto,
    /// FUSE-over-io_uring or fail.
    Uring,
    /// /dev/fuse worker threads.
    Dev,
}

impl From<TransportArg> for fuse_uring::Transport {
    fn from(t: TransportArg) -> Self {
        match t {
            TransportArg::Auto => fuse_uring::Transport::Auto,
            TransportArg::Uring => fuse_uring::Transport::Uring,
            TransportArg::Dev => fuse_uring::Transport::Dev,
        }
    }
}

/// `ringfs mount --passthrough`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Passthrough {
    Auto,
    On,
    Off,
}

#[derive(Debug, Args)]
pub struct UmountArgs {
    /// The mountpoint a `ringfs mount` serves.
    pub mountpoint: PathBuf,
    /// Seconds to wait for the daemon to finish its final commit and, on a
    /// `mount --remote`, the push of the last changes (not pushed by then:
    /// they stay pending in the store, and umount fails saying how much).
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// On a `mount --remote`: do not wait for the push of the last changes;
    /// they stay committed in the store and pending (umount says how many
    /// objects and bytes), sent by the next `ringfs push --store DIR` or
    /// `ringfs mount … --remote NAME`.
    #[arg(long)]
    pub no_wait: bool,
    /// Detach the mount even while processes use it (as umount -l); the
    /// daemon commits and exits once the last of them lets go. Without it a
    /// busy mount is refused (EBUSY) and the processes holding it are listed.
    #[arg(long, short = 'l')]
    pub lazy: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The mountpoint a `ringfs mount` serves.
    pub mountpoint: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The mountpoint a `ringfs mount` serves.
    pub mountpoint: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "prometheus")]
    pub json: bool,
    /// Print the Prometheus text exposition format.
    #[arg(long)]
    pub prometheus: bool,
}

#[derive(Debug, Args)]
pub struct CommitArgs {
    /// The mountpoint a `ringfs mount` serves.
    pub mountpoint: PathBuf,
    /// The commit message.
    #[arg(short, long, value_name = "MSG", default_value = "")]
    pub message: String,
    /// Make a commit even when the tree equals the last commit's.
    #[arg(long)]
    pub allow_empty: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// The mountpoint a `ringfs mount` serves.
    #[arg(required_unless_present = "store", conflicts_with = "store")]
    pub mountpoint: Option<PathBuf>,
    /// An unmounted store directory instead (opened read-only).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The mountpoint a `ringfs mount` serves (with `--store DIR`: left
    /// out, `ringfs diff --store DIR FROM TO`).
    #[arg(required_unless_present = "store")]
    pub mountpoint: Option<PathBuf>,
    /// The old side: a commit id or its start, a branch, or `live` (default: the last commit).
    pub from: Option<String>,
    /// The new side (default: `live`).
    pub to: Option<String>,
    /// An unmounted store directory instead (opened read-only): the diff
    /// of two commits, both named (`live` needs the mount).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The mountpoint a `ringfs mount` serves.
    pub mountpoint: PathBuf,
    /// The commit: its id or a unique start of one, or a branch name.
    pub commit: String,
    /// Restore only this path (relative to the workspace root, or an
    /// absolute path below the mountpoint); repeatable. A path absent from
    /// the commit is removed.
    #[arg(long = "path", value_name = "P")]
    pub paths: Vec<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Installation prefix: the binary goes to PREFIX/bin, completions and
    /// man pages under PREFIX/share, the systemd unit to PREFIX/lib/systemd/system.
    #[arg(long, value_name = "DIR", default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// Where the mount(8) helper mount.fuse.ringfs goes. Default: /sbin
    /// (where mount(8) looks) for the prefixes /usr and /usr/local, else PREFIX/sbin.
    #[arg(long, value_name = "DIR")]
    pub sbin_dir: Option<PathBuf>,
    /// Where ringfs@.service goes. Default: PREFIX/lib/systemd/system.
    #[arg(long, value_name = "DIR")]
    pub unit_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `ringfs mount --help`'s closing section.
const MOUNT_AFTER_HELP: &str = "\
mount(8) and fstab: `ringfs install` puts the helper mount.fuse.ringfs in /sbin, so that
  mount -t fuse.ringfs /var/lib/ringfs/ws /work/ws -o noatime,ignore=node_modules
and the fstab line
  /var/lib/ringfs/ws  /work/ws  fuse.ringfs  noatime,ignore=node_modules  0 0
mount a workspace (the source is the store directory, or `memory`); umount(8) stops it
(it returns once the kernel detached the mount, the daemon's final commit follows; with native
roots mounted it answers EBUSY, they being submounts: use `ringfs umount`, which waits).";

/// A count that must be at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// `ringfs gc`: exactly one of MOUNTPOINT and `--store DIR` (an
/// [`ArgGroup`] so that clap's error and usage name both forms).
#[derive(Debug, Args)]
#[command(
    override_usage = "ringfs gc MOUNTPOINT [--json]\n       ringfs gc --store DIR [--json]",
    group(ArgGroup::new("target").required(true).multiple(false).args(["mountpoint", "store"]))
)]
pub struct GcArgs {
    /// The mountpoint a `ringfs mount` serves (the daemon compacts while serving).
    pub mountpoint: Option<PathBuf>,
    /// An unmounted store directory instead (no daemon may hold it).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct FsckArgs {
    /// The store directory to verify (must not be in use by a daemon). It is
    /// opened read-only and nothing in it is written (a read-only
    /// filesystem is fine).
    #[arg(long, value_name = "DIR")]
    pub store: PathBuf,
    /// Also hash every chunk in the pack files and every working copy
    /// (STORE/wc) of a stored file against its manifest (reads every byte;
    /// without it, chunk locations and working-copy sizes are checked).
    #[arg(long)]
    pub full: bool,
}

#[derive(Debug, Args)]
pub struct SalvageArgs {
    /// The damaged store directory (only read; must not be in use by a daemon).
    #[arg(long, value_name = "DIR")]
    pub store: PathBuf,
    /// Where the new store is built: a directory that does not exist yet or is empty.
    #[arg(long, value_name = "NEWDIR")]
    pub to: PathBuf,
}

/// `ringfs branch`.
#[derive(Debug, Args)]
#[command(override_usage = "ringfs branch MOUNTPOINT NAME [FROM] [--force]\n       ringfs branch MOUNTPOINT --list [--json]\n       ringfs branch MOUNTPOINT -d NAME\n       ringfs branch --store DIR NAME [FROM] [--force] | --list | -d NAME")]
pub struct BranchArgs {
    /// MOUNTPOINT (the mountpoint a `ringfs mount` serves; not with
    /// --store), then NAME (the branch to create, move or delete), then
    /// FROM (a branch or a commit id, or a unique start of one; default:
    /// the checked-out branch's head).
    #[arg(value_name = "MOUNTPOINT NAME FROM", num_args = 0..=3)]
    pub args: Vec<String>,
    /// An unmounted store directory instead of MOUNTPOINT (its lock is taken meanwhile).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// List the branches (* marks the checked-out one).
    #[arg(long, conflicts_with_all = ["delete", "force"])]
    pub list: bool,
    /// Delete NAME (never the checked-out branch).
    #[arg(short = 'd', long, conflicts_with_all = ["force"])]
    pub delete: bool,
    /// Move NAME when it exists.
    #[arg(long)]
    pub force: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `ringfs fork`.
#[derive(Debug, Args)]
#[command(
    override_usage = "ringfs fork MOUNTPOINT[@COMMIT|@BRANCH] --to NEWMNT [--new-store NEWDIR]\n       ringfs fork --store DIR[@COMMIT|@BRANCH] --to NEWMNT [--new-store NEWDIR]\n       ringfs fork … --new-store NEWDIR --no-mount",
    group(ArgGroup::new("source").required(true).multiple(false).args(["mountpoint", "store"]))
)]
pub struct ForkArgs {
    /// The origin's mountpoint, optionally with @COMMIT or @BRANCH.
    pub mountpoint: Option<String>,
    /// An unmounted origin store instead, optionally with @COMMIT or @BRANCH.
    #[arg(long, value_name = "DIR[@AT]")]
    pub store: Option<String>,
    /// Where to mount the new workspace (an existing empty directory).
    #[arg(long, value_name = "NEWMNT", required_unless_present = "no_mount")]
    pub to: Option<PathBuf>,
    /// The new store directory (must not exist, or be empty). Default:
    /// ORIGIN_STORE.fork-NAME (NAME: the last component of --to).
    #[arg(long, value_name = "NEWDIR")]
    pub new_store: Option<PathBuf>,
    /// Only create the new store (needs --new-store); mount it later with
    /// `ringfs mount NEWMNT --store NEWDIR` (its mounts serve the tree from
    /// the commit's objects; the first change writes the tree's rows, D60).
    #[arg(long, requires = "new_store")]
    pub no_mount: bool,
    /// Mount options for the new workspace, as `ringfs mount -o`.
    #[arg(short = 'o', value_name = "OPTS", action = clap::ArgAction::Append)]
    pub options: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `ringfs remote`.
#[derive(Debug, Args)]
pub struct RemoteArgs {
    #[command(subcommand)]
    pub action: RemoteAction,
}

#[derive(Debug, Subcommand)]
pub enum RemoteAction {
    /// Record remote NAME at URL (file:///ABSOLUTE/DIR or s3://BUCKET[/PREFIX]):
    /// the URL is checked and the remote contacted (set up when new) before
    /// anything is written.
    #[command(
        override_usage = "ringfs remote add MOUNTPOINT NAME URL\n       ringfs remote add --store DIR NAME URL"
    )]
    Add {
        /// [MOUNTPOINT] NAME URL (no MOUNTPOINT with --store).
        #[arg(value_name = "ARG", num_args = 2..=3, required = true)]
        args: Vec<String>,
        /// A store directory instead of MOUNTPOINT.
        #[arg(long, value_name = "DIR")]
        store: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Per remote and branch: local head, remote head, the lag (commits,
    /// objects, chunks and bytes a push would send, age of the oldest
    /// unpushed commit), last push (ISO 8601 UTC and how long ago) and last
    /// error; on a `mount --remote`, the sync thread's state (retries).
    #[command(
        override_usage = "ringfs remote status MOUNTPOINT [--remote NAME] [--json]\n       ringfs remote status --store DIR [--remote NAME] [--json]"
    )]
    Status {
        /// The mountpoint a `ringfs mount` serves.
        mountpoint: Option<PathBuf>,
        /// An unmounted store directory instead.
        #[arg(long, value_name = "DIR", conflicts_with = "mountpoint")]
        store: Option<PathBuf>,
        /// Only this remote.
        #[arg(long, value_name = "NAME")]
        remote: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// `ringfs push`.
#[derive(Debug, Args)]
#[command(
    override_usage = "ringfs push MOUNTPOINT [--branch B] [--remote NAME] [--json]\n       ringfs push --store DIR [--branch B] [--remote NAME] [--json]",
    group(ArgGroup::new("target").required(true).multiple(false).args(["mountpoint", "store"]))
)]
pub struct PushArgs {
    /// The mountpoint a `ringfs mount` serves (the daemon pushes while serving).
    pub mountpoint: Option<PathBuf>,
    /// An unmounted store directory instead.
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// The branch to push (default: the checked-out one).
    #[arg(long, value_name = "B")]
    pub branch: Option<String>,
    /// The remote (default: the only one, or origin).
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    /// Print JSON instead of text (no progress bar).
    #[arg(long)]
    pub json: bool,
}

/// `ringfs pull`.
#[derive(Debug, Args)]
#[command(
    override_usage = "ringfs pull --store DIR [--branch B] [--remote NAME] [--json]",
    group(ArgGroup::new("target").required(true).multiple(false).args(["mountpoint", "store"]))
)]
pub struct PullArgs {
    /// A mountpoint (refused for now: unmount, pull --store, mount again).
    pub mountpoint: Option<PathBuf>,
    /// The unmounted store directory to pull into.
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// The branch to pull (default: the checked-out one).
    #[arg(long, value_name = "B")]
    pub branch: Option<String>,
    /// The remote (default: the only one, or origin).
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    /// Print JSON instead of text (no progress bar).
    #[arg(long)]
    pub json: bool,
}

/// `ringfs clone`.
#[derive(Debug, Args)]
#[command(override_usage = "ringfs clone URL --store DIR [--branch B] [--eager] [--json]")]
pub struct CloneArgs {
    /// The remote: file:///ABSOLUTE/DIR or s3://BUCKET[/PREFIX].
    pub url: String,
    /// The new store directory (must not exist, or be empty).
    #[arg(long, value_name = "DIR")]
    pub store: PathBuf,
    /// The branch to clone (default: the remote's only branch, or main).
    #[arg(long, value_name = "B")]
    pub branch: Option<String>,
    /// Fetch every chunk before returning. Default (lazy): only the
    /// snapshot objects are fetched; the store is mountable at once, a
    /// file's chunks are fetched on its first open and the rest in the
    /// background while it is mounted.
    #[arg(long)]
    pub eager: bool,
    /// Print JSON instead of text (no progress bar).
    #[arg(long)]
    pub json: bool,
}
