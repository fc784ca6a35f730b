//! [`Fs`]: the live filesystem, the public POSIX surface of fs-core. The
//! inode table, directory tree and open handles live in memory behind one
//! mutex; file bytes live in working copies read and written outside that
//! mutex; redb receives group commits from a background thread and content
//! manifests from the hash workers.
//!
//! `Fs` methods are the operations, one per FUSE request, grouped by concept:
//! [`namespace`] (names and directories), [`data`] (handles and bytes),
//! [`attr`] (attributes), [`xattr`]; [`sides`] moves inodes across the
//! local-only boundary and [`roots`] keeps native roots in step with the
//! model. This module opens a store (wiring the threads) and shuts it down.
//!
//! Must not know: FUSE's wire format or transports (the ringfs adapter maps
//! requests onto these methods).

mod attr;
mod chunked;
mod data;
mod fork;
mod namespace;
mod restore;
mod roots;
mod sides;
mod snap;
pub use chunked::{chunk_served_opens, since_chunk_open};
pub use snap::ExecEnd;
mod xattr;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use redb::{Database, Durability};

use crate::host::HostTrees;
use crate::inode::{self, meta_key, Freed, State, POOL_LOCAL, ROOT};
use crate::laps::Laps;
use crate::local::{BackDir, IgnorePolicy};
use crate::posix::*;
use crate::schema::SCHEMA_VERSION;
use crate::store::commit::run_group_commits;
use crate::store::db::{corrupt, io_err, lock_times, open_db, restore_lock, take_lock_noting, Store};
use crate::store::migrate;
use crate::store::pack::{known_packs, Packs};
use crate::store::readonly::guarded;
use crate::store::recovery::load;
use crate::store::scan::{check_files, check_for_mount};
use crate::types::*;
use crate::wc::hash::{background_priority, foreground_priority, give_back_memory, TRIM_AFTER};
use crate::wc::pool::Pools;
use crate::wc::queue::{Hasher, BATCH_FILES};
use crate::wc::{Dirs, Wc};

/// Called with the inode of each new native root.
type RootListener = Arc<dyn Fn(u64) + Send + Sync>;

/// What every part of the filesystem shares; `Fs` and its threads hold it.
pub(crate) struct Inner {
    /// The redb database: transactions, group commits, counters.
    store: Store,
    /// The inode table (see [`crate::inode`]).
    state: Mutex<State>,
    /// The working-copy directory and the local-only directory.
    dirs: Dirs,
    /// Files waiting to be hashed.
    hasher: Hasher,
    /// Working copies being built now (one builder per inode).
    builds: crate::wc::prebuild::Builds,
    /// Ready backing files for new files.
    pools: Pools,
    /// Native-root trees (`LOCAL/roots`), served here until bind-mounted.
    host: HostTrees,
    /// Make eligible new local-only directories native roots.
    native_roots: bool,
    /// Told the inode of every native root made (mkdir) or found (open).
    root_listener: Mutex<Option<RootListener>>,
    policy: Option<IgnorePolicy>,
    /// The LOCAL_* tables may hold records (patterns now, or local-only
    /// inodes loaded from an earlier mount): commits must clean them up.
    local_tables: bool,
    next_fh: AtomicU64,
    stopping: AtomicBool,
    stop: Mutex<bool>,
    stop_cv: Condvar,
    abandon: AtomicBool,
    shut: AtomicBool,
    commit_interval: std::time::Duration,
    /// [`crate::Atime`] as a number, for [`Fs::set_atime`].
    atime: std::sync::atomic::AtomicU8,
    _tmp: Option<tempfile::TempDir>,
    _tmp_local: Option<tempfile::TempDir>,
    /// Local-only paths changed while an exec point is pinned: what
    /// `ringfs exec` lists apart (`snap::note_local`), and per pinned
    /// point where its call began in it and the root's attributes then.
    local_log: Mutex<snap::LocalLog>,
    /// Directory objects of the last snapshot commit, decoded: what the
    /// next commit's build starts from (`snap::build::DirCache`).
    snap_dirs: crate::snap::build::DirCache,
}

/// A redb panic while opening `path` (a damaged page the check did not
/// read), as [`StoreError::Damaged`] of its store directory.
fn damaged(path: &Path, doing: &str, m: String) -> StoreError {
    let dir = if path.is_dir() { path.to_path_buf() } else { path.parent().unwrap_or(Path::new(".")).to_path_buf() };
    StoreError::Damaged { dir, what: format!("{doing}: {m}") }
}

/// The refusal for a fork's tree read that failed (`read`: `read_base`
/// under `guarded`): a panic is damage, an error names the database
/// (`dbpath`) as corrupt. `None` when it was read (or there is none).
fn base_read_error<T>(dbpath: &Path, read: &std::result::Result<std::result::Result<T, String>, String>) -> Option<StoreError> {
    match read {
        Err(m) => Some(damaged(dbpath, "reading the fork's tree", m.clone())),
        Ok(Err(e)) => Some(corrupt(dbpath, format!("reading the fork's tree: {e}"))),
        Ok(Ok(_)) => None,
    }
}

/// Where `Fs::open_store`'s time went, each a time since it began: the
/// check before open, the database and packs opened, the inode table
/// loaded, everything (threads started, sides planned). Logged at info.
#[derive(Default)]
struct OpenPhases {
    check: std::time::Duration,
    open: std::time::Duration,
    load: std::time::Duration,
    total: std::time::Duration,
    /// The same time in finer parts (the log line's split).
    laps: Laps,
}

impl OpenPhases {
    fn log(&self, desc: &str, inodes: usize) {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        tracing::info!(
            "store {desc} opened in {:.1} ms ({inodes} inodes): check {:.1} ms, database {:.1} ms, load {:.1} ms, threads and sides {:.1} ms [{}]",
            ms(self.total),
            ms(self.check),
            ms(self.open - self.check),
            ms(self.load - self.open),
            ms(self.total - self.load),
            self.laps
        );
    }
}

/// The filesystem. `Send + Sync`; every method takes `&self`. Inode numbers
/// are FUSE nodeids; the root is inode 1.
pub struct Fs {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        inode::lock(&self.state)
    }

    /// Where a file's bytes live: the local-only directory or `wc/`.
    fn data_dir(&self, data_local: bool) -> &BackDir {
        self.dirs.data_dir(data_local)
    }

    fn wc(&self) -> Wc<'_> {
        Wc { table: &self.state, store: &self.store, dirs: &self.dirs, hasher: &self.hasher, builds: &self.builds }
    }

    /// Opens (and if needed restores) the working copy of a regular file.
    fn open_wc(&self, ino: u64) -> Result<File> {
        self.wc().open_wc(ino)
    }

    fn queue_hash(&self, st: &mut State, ino: u64) {
        self.hasher.queue(st, ino)
    }

    /// One group commit of everything dirty (see [`Store::group_commit`]).
    /// After a durable one, the drained inodes count as durable
    /// ([`State::note_durable`]), which lets `fsync` skip later commits,
    /// and the backing files of files freed before it go to the pool thread
    /// to be deleted ([`State::drop_after_commit`]: a durable commit
    /// records their free, here or in an earlier non-durable commit it
    /// makes durable; deleted here once the threads have stopped).
    fn commit(&self, durability: Durability, force: bool, clean: Option<bool>) -> std::result::Result<(), redb::Error> {
        let durable = matches!(durability, Durability::Immediate);
        let mut drained = Vec::new();
        let mut drops = Vec::new();
        let mut drew = false;
        let drain = || {
            let mut st = self.lock();
            let mut b = st.drain(self.local_tables);
            if durable {
                // Freed before this drain: the free is in this batch or an
                // earlier one, which this durable commit covers.
                b.drops = std::mem::take(&mut st.drop_after_commit);
                drops = b.drops.clone();
            }
            if clean == Some(true) {
                // The clean shutdown's commit: the ready files outlive the mount.
                b.pool = Some(st.pool.clone());
            }
            if self.local_tables {
                snap::note_local(self, &st, &b);
            }
            if durable {
                drained = b.inodes.iter().filter_map(|(i, v)| v.as_ref().and(st.nodes.get(i)).map(|n| (*i, meta_key(&n.rec)))).collect();
            }
            st.commits_in_flight += 1;
            drew = true;
            b
        };
        // A redb panic (a damaged page) is damage (`store::fault`): caught
        // here, so every committer (the commit thread, fsync, the final
        // commit, a snapshot's flush) keeps its bookkeeping right.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.store.group_commit(durability, force, clean, self.local_tables, drain, |b| self.lock().put_back(b))))
            .unwrap_or_else(|_| Err(redb::Error::Corrupted("a group commit panicked".into())));
        if drew {
            let mut st = self.lock();
            st.commits_in_flight -= 1;
            if r.is_ok() {
                st.note_durable(drained);
                if !drops.is_empty() && !self.stopping.load(Ordering::SeqCst) {
                    // Off the committing thread (an fsync after a mass delete).
                    st.unlink_ready.append(&mut drops);
                    self.pools.cv.notify_all();
                }
            }
        }
        match &r {
            // The threads have stopped (the final commit): deleted here.
            Ok(()) => self.dirs.unlink_doomed(drops),
            // A full disk: the commit may need the space those files hold
            // (rm to make room must work), so they go now. A crash before
            // the next commit may then bring such a file back empty.
            Err(e) if crate::store::db::is_enospc(e) => {
                let drops = std::mem::take(&mut self.lock().drop_after_commit);
                if !drops.is_empty() && self.store.full_disk_drops.due() {
                    tracing::warn!("store: the disk is full; deleting the working copies of {} removed files before a commit records their removal", drops.len());
                }
                self.dirs.unlink_doomed(drops);
            }
            _ => {}
        }
        r
    }

    /// Sets aside the backing file of freed regular file `ino` (see
    /// `Fs::finish_free`): renamed to [`crate::local::doomed_name`] in its directory and
    /// queued for deletion after the next durable commit. Nothing to do if
    /// it has none; another error is logged and the file left as it is
    /// (a crash after the free is durable then keeps it in lost+found).
    pub(crate) fn set_aside(&self, ino: u64, data_local: bool) {
        let dir = self.data_dir(data_local);
        match dir.rename_to(&ino.to_string(), dir, &crate::local::doomed_name(ino)) {
            Ok(()) => self.lock().drop_after_commit.push((ino, data_local)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => tracing::warn!("setting aside the backing file {}/{ino} of a removed file: {e}; left in place", dir.path().display()),
        }
    }

    fn tell_root(&self, ino: u64) {
        let l = self.root_listener.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(l) = l {
            l(ino);
        }
    }
}

impl Fs {
    /// The stored regular files that have no working copy yet, and which
    /// of their chunks are still remote-only (see [`crate::WcPlan`]); for
    /// building working copies ahead of the first open (a lazy clone's
    /// prefetch). Errors: the store's, as one line.
    pub fn wc_plan(&self) -> std::result::Result<crate::WcPlan, String> {
        self.inner.wc().plan().map_err(|e| format!("planning working copies: {e}"))
    }

    /// Builds the working copy of `ino` from local chunks if it still has
    /// none and nobody has the file open (nothing fetched; the same
    /// per-inode guard as the open path; never replaces a working copy).
    /// Returns whether it built one. Errors: I/O or the store's (a
    /// damaged chunk: EIO, logged), as one line naming the inode.
    pub fn prebuild_wc(&self, ino: u64) -> std::result::Result<bool, String> {
        self.inner.wc().prebuild(ino).map_err(|e| format!("building the working copy of inode {ino}: {e}"))
    }

    /// Hands `put` the stored bytes of `ino` (1..=`max` bytes) for the
    /// kernel's page cache ahead of the file's first read, when the pages
    /// would be exactly what its next open serves (see `Wc::fill`: no
    /// working copy, no open handle, known to the kernel, unchanged since
    /// stored; a writer's open waits meanwhile). Ok(None): not done;
    /// Ok(Some(true)): the content moved while `put` ran, drop the pages.
    /// Errors as one line naming the inode.
    /// `known`: chunks already in memory and checked against their hashes.
    pub fn fill_page_cache(&self, ino: u64, max: u64, known: &std::collections::HashMap<[u8; 32], bytes::Bytes>, put: impl FnOnce(&[u8]) -> std::io::Result<()>) -> std::result::Result<Option<bool>, String> {
        self.inner.wc().fill(ino, max, known, put).map_err(|e| format!("filling the page cache of inode {ino}: {e}"))
    }

    /// Working copies built by [`Fs::prebuild_wc`] since the mount.
    pub fn wc_prebuilt(&self) -> u64 {
        self.inner.builds.built.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Opens (creating if missing) the store. (Named `open_store` because
    /// [`Fs::open`] is open(2).) For a `Dir` store takes an
    /// exclusive flock on `DIR/ringfs.lock` (holding our pid), opens
    /// `DIR/store.redb`, checks the schema version and, after an unclean
    /// shutdown, frees unlinked inodes, deletes working copies that have no
    /// inode and re-hashes the others in the background.
    ///
    /// Before any of that (the lock aside), an existing store directory is
    /// checked without writing to it: after an unclean shutdown every table
    /// of the database is read (redb's panics on damaged pages caught),
    /// after a clean one the inode tables (which the mount loads) and the
    /// others opened ([`OpenCheck::WhenUnclean`]); a database missing or
    /// empty beside working copies or packs is refused rather than started
    /// afresh.
    ///
    /// Errors: [`StoreError::Locked`] (another process holds it),
    /// [`StoreError::NewerSchema`], [`StoreError::Damaged`] (the check
    /// found damage; nothing was written), [`StoreError::Corrupt`] (redb
    /// cannot open it), [`StoreError::Io`].
    pub fn open_store(cfg: Config) -> std::result::Result<Fs, StoreError> {
        Self::open_store_checked(cfg, OpenCheck::WhenUnclean)
    }

    /// [`Fs::open_store`] with the check before it chosen: `check` says how
    /// much of an existing store is read before anything is written (a
    /// store shut down cleanly is not read whole unless [`OpenCheck::Full`];
    /// docs/SEMANTICS.md "Damaged stores"). A store refused by the check is
    /// left as it was found (its lock file included). Errors: those of
    /// [`Fs::open_store`].
    pub fn open_store_checked(cfg: Config, check: OpenCheck) -> std::result::Result<Fs, StoreError> {
        let t0 = std::time::Instant::now();
        let mut phases = OpenPhases::default();
        let policy = IgnorePolicy::new(&cfg.local.ignore).map_err(|(pattern, reason)| StoreError::Ignore { pattern, reason })?;
        let policy = if policy.is_empty() { None } else { Some(policy) };
        let mut pre = None;
        let mut early_base = None;
        let (mut db, wc_dir, desc, dir, lock, tmp, dbpath, packs) = match &cfg.store {
            StoreLocation::Dir(d) => {
                // A damaged database is refused before anything is written
                // (read-only; every table read after an unclean shutdown,
                // the inode tables after a clean one); so is a missing or
                // empty one beside working copies or packs.
                let has_db = d.is_dir() && check_files(d)?;
                crate::private::create_dir_all(d).map_err(|e| io_err(d, e))?;
                let times = lock_times(d);
                let (lock, before) = take_lock_noting(d)?;
                let lock_empty = before.as_deref().is_some_and(<[u8]>::is_empty);
                phases.laps.lap("files and lock");
                if has_db {
                    // A fork's deferred tree is read beside the check (D70).
                    let pd = d.join("packs");
                    let side = |rtx: &redb::ReadTransaction| guarded(|| crate::snap::materialize::read_base_in(rtx, &Packs::read_only(pd)));
                    match check_for_mount(d, lock_empty, check == OpenCheck::Full, &mut phases.laps, side) {
                        Ok((r, b)) => {
                            // A fork's tree that cannot be read is refused
                            // now, before the read-write open (D72).
                            if let Some(e) = b.as_ref().and_then(|b| base_read_error(&d.join("store.redb"), b)) {
                                restore_lock(d, lock, before, times);
                                return Err(e);
                            }
                            (pre, early_base) = (r, b)
                        }
                        Err(e) => {
                            restore_lock(d, lock, before, times);
                            return Err(e);
                        }
                    }
                }
                phases.check = t0.elapsed();
                // A store made by an earlier version (0755/0644) is made
                // private now, saying so once (D87).
                crate::private::fix_store(d, has_db);
                let wc = d.join("wc");
                crate::private::create_dir_all(&wc).map_err(|e| io_err(&wc, e))?;
                // redb panics on some damaged pages (`unreachable!`): past
                // the check, such damage (a page it did not read) is refused
                // the same way, not a crash.
                let db = guarded(|| open_db(d)).map_err(|m| damaged(d, "opening store.redb", m))??;
                phases.laps.lap("read-write open");
                // A store of an earlier schema is migrated by `load`; its
                // database is copied first (kept until a clean shutdown).
                if let Some(v) = migrate::schema_of(&db).filter(|v| *v < SCHEMA_VERSION) {
                    migrate::backup(d, v).map_err(|e| io_err(&migrate::backup_path(d, v), e))?;
                }
                let (known, next) = guarded(|| known_packs(&db)).map_err(|m| damaged(d, "table packs", m))?.map_err(|e| corrupt(&d.join("store.redb"), e))?;
                let pd = d.join("packs");
                let packs = Packs::open(pd.clone(), None, &known, next).map_err(|e| io_err(&pd, e))?;
                // Object index files a crash left unrecorded (D65).
                if let Err(e) = crate::store::oidx::sweep(&db, &pd) {
                    tracing::warn!("packs: removing object index files no row records: {e}");
                }
                phases.laps.lap("packs");
                (db, wc, d.display().to_string(), Some(d.clone()), Some(lock), None, d.join("store.redb"), packs)
            }
            StoreLocation::Memory => {
                let tmp = crate::private::temp_dir("ringfs-wc-").map_err(|e| io_err(&std::env::temp_dir(), e))?;
                let db = Database::builder().create_with_backend(redb::backends::InMemoryBackend::new()).map_err(|e| corrupt(Path::new("memory"), e))?;
                let ptmp = crate::private::temp_dir("ringfs-packs-").map_err(|e| io_err(&std::env::temp_dir(), e))?;
                let pd = ptmp.path().to_path_buf();
                let packs = Packs::open(pd.clone(), Some(ptmp), &Default::default(), 0).map_err(|e| io_err(&pd, e))?;
                (db, tmp.path().to_path_buf(), "memory".to_string(), None, None, Some(tmp), PathBuf::from("memory"), packs)
            }
        };
        let (local_dir, tmp_local) = match (&cfg.local.dir, &dir) {
            (Some(l), _) => (l.clone(), None),
            (None, Some(d)) => (d.join("local"), None),
            (None, None) => {
                let t = crate::private::temp_dir("ringfs-local-").map_err(|e| io_err(&std::env::temp_dir(), e))?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let wc = BackDir::open(&wc_dir).map_err(|e| io_err(&wc_dir, e))?;
        let local = BackDir::open(&local_dir).map_err(|e| io_err(&local_dir, e))?;
        if !wc.same_fs(&local) {
            tracing::warn!(
                "local-only directory {} is on another filesystem than {}: files renamed across the boundary keep their bytes where they are",
                local_dir.display(),
                wc_dir.display()
            );
        }
        let roots_dir = local_dir.join("roots");
        let host = HostTrees::open_dir(&roots_dir).map_err(|e| io_err(&roots_dir, e))?;
        phases.open = t0.elapsed();
        phases.laps.lap("directories");
        // A fork's deferred tree (snap/lazy.rs) is served from its objects:
        // no rows are written until its first change (D60).
        let base_read = early_base.unwrap_or_else(|| guarded(|| crate::snap::materialize::read_base(&db, &packs)));
        if let Some(e) = base_read_error(&dbpath, &base_read) {
            return Err(e);
        }
        let (base, deferred) = match base_read {
            Ok(Ok(Some((b, d)))) => (Some(b), Some(d)),
            _ => (None, None),
        };
        phases.laps.lap("fork tree");
        let loaded = guarded(|| load(&db, &dbpath, &wc, &local, &packs, pre, base)).map_err(|m| damaged(&dbpath, "loading the inode table", m))??;
        phases.load = t0.elapsed();
        phases.laps.lap("load");
        if loaded.migrated.is_some() {
            migrate::compact_db(&mut db, &dbpath);
        }
        // Whatever working copies exist now are durable before an fsync
        // relies on them (the directories are synced again only when an
        // entry is made, `BackDir::sync_entries`): after a crash (whose
        // recovery renamed and removed some) now; after a clean shutdown
        // at the first fsync, off the mount path (D61).
        for (d, p) in [(&wc, &wc_dir), (&local, &local_dir)] {
            if loaded.clean {
                d.note_unsynced();
            } else {
                d.sync().map_err(|e| io_err(p, e))?;
            }
        }
        phases.laps.lap("directory syncs");
        if !loaded.clean {
            tracing::warn!("store {desc} was not shut down cleanly; recovered");
        }
        let mut loaded = loaded;
        {
            // Loaded and unchanged by recovery: the store holds their records.
            let st = &mut loaded.state;
            let dirty = std::mem::take(&mut st.dirty_inodes);
            for (ino, n) in st.nodes.iter_mut() {
                if !dirty.contains(ino) {
                    n.durable_meta = Some(meta_key(&n.rec));
                }
            }
            st.dirty_inodes = dirty;
        }
        // A clean shutdown left its ready backing files (D52): the creates
        // of this mount take them, none is made on the request path.
        let mut saved_pool = if loaded.clean {
            let st = &loaded.state;
            crate::store::batch::saved_pool(&db, st.next_ino, |i| st.nodes.contains_key(&i))
        } else {
            Default::default() // recovery removed the empty files
        };
        // The local-only directory may be another one than last time (--local-dir).
        saved_pool[POOL_LOCAL].retain(|i| local.exists(&i.to_string()));
        let pool_sizes = saved_pool.each_ref().map(Vec::len);
        phases.laps.lap("durable marks, pool");
        loaded.state.pool = saved_pool;
        let local_tables = policy.is_some() || loaded.state.nodes.values().any(|n| n.local);
        let store = Store::new(db, dir, desc, lock, loaded.sync_pos, (loaded.chunk_count, loaded.chunk_bytes), packs);
        if let Some(d) = deferred {
            store.set_deferred(Arc::new(d));
        }
        let inner = Arc::new(Inner {
            store,
            dirs: Dirs { wc_dir, wc, local },
            host,
            native_roots: cfg.local.native_roots,
            root_listener: Mutex::new(None),
            policy,
            local_tables,
            state: Mutex::new(loaded.state),
            next_fh: AtomicU64::new(1),
            hasher: Hasher::default(),
            builds: Default::default(),
            pools: Pools::new(pool_sizes),
            stopping: AtomicBool::new(false),
            stop: Mutex::new(false),
            stop_cv: Condvar::new(),
            abandon: AtomicBool::new(false),
            shut: AtomicBool::new(false),
            commit_interval: cfg.commit_interval,
            atime: std::sync::atomic::AtomicU8::new(cfg.atime.as_u8()),
            _tmp: tmp,
            _tmp_local: tmp_local,
            local_log: Mutex::new(snap::LocalLog::default()),
            snap_dirs: Default::default(),
        });
        // After a reopen of the database (an I/O error), content stored
        // non-durably before it is gone: hash those files again.
        let weak = Arc::downgrade(&inner);
        inner.store.on_reopen(Box::new(move |lost: &[u64]| {
            let Some(inner) = weak.upgrade() else { return };
            let mut st = inner.lock();
            for ino in lost {
                if let Some(n) = st.nodes.get_mut(ino) {
                    n.hashed_gen = 0;
                    n.content_gen = n.content_gen.max(1);
                }
                inner.queue_hash(&mut st, *ino);
            }
        }));
        inner.attach_roots();
        phases.laps.lap("roots");
        let mut threads = Vec::new();
        inner.hasher.open();
        for i in 0..cfg.hash_threads.max(1) {
            let inner = inner.clone();
            threads.push(spawn_named(format!("ringfs-hash-{i}"), move || {
                background_priority();
                let mut since_trim = 0u64;
                // Batches of due files (all at once when shutting down):
                // small ones share a write transaction.
                let mut background = true;
                while let Some(batch) = inner.hasher.next_batch(BATCH_FILES) {
                    // A damaged store is read-only: the bytes stay in the working copies.
                    if inner.abandon.load(Ordering::SeqCst) || inner.store.fault.is_hit() {
                        continue;
                    }
                    if background && !inner.hasher.is_open() {
                        // The final commit: somebody waits for it.
                        foreground_priority();
                        background = false;
                    }
                    let (failed, read) = inner.wc().hash_many(&batch, false);
                    for (ino, e) in failed {
                        tracing::warn!("hashing inode {ino}: {e}");
                    }
                    since_trim += read;
                    if since_trim >= TRIM_AFTER {
                        give_back_memory();
                        since_trim = 0;
                    }
                }
            })?);
        }
        let pool = inner.clone();
        threads.push(spawn_named("ringfs-wcpool".into(), move || pool.pools.run(&pool.state, &pool.dirs, &pool.stopping))?);
        let c = inner.clone();
        threads.push(spawn_named("ringfs-commit".into(), move || {
            run_group_commits(&c.store, c.commit_interval, &c.stop, &c.stop_cv, || {
                c.commit(Durability::Immediate, false, None)?;
                // Past the dead-bytes thresholds, sealed packs are compacted here.
                c.store.auto_compact();
                Ok(())
            })
        })?);
        phases.laps.lap("threads");
        {
            let mut st = inner.lock();
            for ino in loaded.rehash {
                inner.queue_hash(&mut st, ino);
            }
            // The ignore patterns may differ from the last mount's: put
            // every inode on the side its path now calls for.
            let top: Vec<(Vec<u8>, u64, bool)> = st
                .node(ROOT)
                .ok()
                .and_then(|r| r.dir.as_ref())
                .map(|d| d.by_name.iter().map(|(k, (c, _))| (k.to_vec(), *c, st.nodes.get(c).map(|n| n.dir.is_some()).unwrap_or(false))).collect())
                .unwrap_or_default();
            let mut plan = Vec::new();
            for (name, c, dir) in top {
                let l = inner.policy.as_ref().map(|p| p.matches(&name, dir)).unwrap_or(false);
                if let Ok(p) = inner.plan_sides(&st, c, l, ROOT, &name, false) {
                    plan.extend(p);
                }
            }
            if !plan.is_empty() {
                tracing::info!("ignore patterns changed: {} inodes change sides", plan.len());
                inner.apply_sides(&mut st, &plan);
            }
        }
        inner.import_unmatched_roots();
        if inner.native_roots {
            inner.migrate_flat_roots();
        }
        phases.laps.lap("sides");
        phases.total = t0.elapsed();
        phases.log(&inner.store.desc, inner.lock().nodes.len());
        Ok(Fs { inner, threads: Mutex::new(threads) })
    }

    /// The store (tests: pack hooks, restore).
    #[cfg(test)]
    pub(crate) fn test_store(&self) -> &Store {
        &self.inner.store
    }

    /// `ringfs gc` on a mounted store: a durable group commit (so chunks
    /// freed by recent deletions count as dead), the snapshot objects no ref
    /// reaches deleted with their chunk references (one durable
    /// transaction, serialized with snapshot commits by the store's writer
    /// lock: [`crate::snap::gc::collect`]), then every sealed pack with dead
    /// bytes compacted. Errors: [`StoreError::Io`] naming the pack
    /// directory (what was collected or compacted before the error stays so).
    pub fn gc(&self) -> std::result::Result<crate::GcReport, StoreError> {
        let dir = self.inner.store.packs.dir().to_path_buf();
        let err = |e: String| StoreError::Io { path: dir.clone(), source: std::io::Error::other(e) };
        self.inner.commit(Durability::Immediate, true, None).map_err(|e| err(e.to_string()))?;
        let snapshots = crate::snap::gc::collect(&self.inner.store).map_err(|e| err(e.to_string()))?;
        crate::snap::gc::failpoint("gc-after-commit");
        let r = self.inner.store.compact_packs(true).map_err(|e| err(e.to_string()))?;
        Ok(crate::GcReport { snapshots, ..r })
    }

    /// The damage the store met while served (a redb panic or corruption
    /// error in one of its transactions), named by table: the store is
    /// read-only since ([`StoreDamaged`]). `None`: none met. The first call
    /// after the damage reads every table once to name it, and logs it.
    pub fn damaged(&self) -> Option<StoreDamaged> {
        self.inner.store.damage()
    }

    /// Whether the store met damage while served ([`Fs::damaged`]; cheap:
    /// asked before every change a request makes).
    pub fn is_damaged(&self) -> bool {
        self.inner.store.fault.is_hit()
    }

    /// A description of the store (`ringfs stats`).
    pub fn stats(&self) -> Stats {
        let st = self.inner.lock();
        Stats {
            store: self.inner.store.desc.clone(),
            inodes: st.nodes.len() as u64,
            chunks: self.inner.store.chunk_count.load(Ordering::SeqCst),
            chunk_bytes: self.inner.store.chunk_bytes.load(Ordering::SeqCst),
            sync_position: self.inner.store.sync_pos.load(Ordering::SeqCst),
            dirty: st.dirty_count(),
            unstored: st.nodes.values().filter(|n| is_reg(n.rec.mode) && !n.local && n.content_gen != n.hashed_gen).count() as u64,
            open_files: st.handles.len() as u64,
            closing: self.inner.shut.load(Ordering::SeqCst),
            content_new: self.inner.store.content_new.load(Ordering::Relaxed),
            content_reused: self.inner.store.content_reused.load(Ordering::Relaxed),
        }
    }

    /// Stores every changed working copy now (hashing in the calling
    /// thread, waiting for files a hash worker has in hand) and commits
    /// durably: afterwards the store alone holds every file's content as
    /// it is now. fsync does not do this (docs/SEMANTICS.md, "Durability").
    /// Errors: the first file that could not be stored (EIO), EIO if the
    /// commit fails.
    pub fn store_now(&self) -> Result<()> {
        self.store_changed()?;
        self.inner.commit(Durability::Immediate, true, None).map_err(crate::store::db::db_errno)
    }

    /// Local-only paths: the ignore patterns in force, the backing
    /// directory, and how many live inodes are local-only.
    pub fn local_info(&self) -> (Vec<String>, PathBuf, u64) {
        let n = self.inner.lock().nodes.values().filter(|n| n.local).count() as u64;
        (self.inner.policy.as_ref().map(|p| p.patterns().to_vec()).unwrap_or_default(), self.inner.dirs.local.path().to_path_buf(), n)
    }

    /// Is `ino` in a native root's host tree (or a root itself)? Its host
    /// files can change behind the daemon (through the bind mount), so the
    /// kernel must not cache its entries or attributes.
    pub fn is_host(&self, ino: u64) -> bool {
        self.inner.host.serves(ino)
    }

    /// Is inode `ino` local-only (its path matches an ignore pattern)?
    /// `None` for an unknown inode.
    pub fn is_local(&self, ino: u64) -> Option<bool> {
        if self.inner.host.serves(ino) {
            return Some(true);
        }
        self.inner.lock().nodes.get(&ino).map(|n| n.local)
    }

    fn stop_threads(&self, abandon: bool) {
        if abandon {
            self.inner.abandon.store(true, Ordering::SeqCst);
        }
        self.inner.stopping.store(true, Ordering::SeqCst);
        self.inner.pools.cv.notify_all();
        *self.inner.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.inner.stop_cv.notify_all();
        self.inner.hasher.close();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
        // Set-aside files the pool thread did not get to (their frees are
        // durable); a crash leaves them to recovery.
        if !abandon {
            let left = std::mem::take(&mut self.inner.lock().unlink_ready);
            self.inner.dirs.unlink_doomed(left);
        }
    }

    /// Clean shutdown: frees unlinked inodes, hashes every changed working
    /// copy, commits durably, marks the store clean and releases
    /// `ringfs.lock`. Idempotent. The `Fs` must not be used afterwards; redb
    /// keeps its database file open (and locked) until the `Fs` is dropped,
    /// so drop it before reopening the store.
    pub fn shutdown(&self) -> std::result::Result<(), StoreError> {
        if self.inner.shut.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let dbpath = self.inner.store.db_path();
        // Their backing files are set aside, deleted after the final commit.
        let freed: Vec<Freed> = {
            let mut st = self.inner.lock();
            st.handles.clear();
            let all: Vec<u64> = st.nodes.keys().copied().collect();
            let mut freed = Vec::new();
            for ino in &all {
                let n = st.nodes.get_mut(ino).unwrap();
                n.opens = 0;
                n.lookups = 0;
                n.file = None;
                freed.extend(st.maybe_free(*ino));
            }
            freed
        };
        for f in freed {
            self.finish_free(Some(f));
        }
        // Every changed file goes to the hash workers, which take them in
        // batches (due times ignored once the queue closes) and in
        // parallel; what is left then (a failure) is hashed here.
        {
            let mut st = self.inner.lock();
            let dirty: Vec<u64> = dirty_files(&st);
            for ino in dirty {
                self.inner.hasher.queue_after(&mut st, ino, std::time::Duration::ZERO);
            }
        }
        // This thread takes batches too, beside the workers.
        self.inner.hasher.close();
        if !self.inner.abandon.load(Ordering::SeqCst) && !self.inner.store.fault.is_hit() {
            while let Some(batch) = self.inner.hasher.next_batch(BATCH_FILES) {
                for (ino, e) in self.inner.wc().hash_many(&batch, true).0 {
                    tracing::warn!("shutdown: hashing inode {ino}: {e}");
                }
            }
        }
        // The pool's ready files stay: the final commit records them
        // (`pool` table) for the next mount's creates (D52).
        self.stop_threads(false);
        // Damage met while serving (`store::fault`): nothing more is
        // written; the lock file keeps our pid (as a crash leaves it), so
        // the next mount reads every table and refuses the store, naming
        // salvage, which takes the working copies in.
        let skipped = |d: StoreDamaged| {
            tracing::error!("final commit skipped: the store is damaged (logged above); changes since the last commit stay in the working copies");
            Err(StoreError::ServedDamaged(d))
        };
        if let Some(d) = self.inner.store.damage() {
            return skipped(d);
        }
        let dirty = dirty_files(&self.inner.lock());
        let (mut unstored, _) = self.inner.wc().hash_many(&dirty, true);
        for (ino, e) in &unstored {
            tracing::error!("shutdown: hashing inode {ino}: {e}");
        }
        // An I/O error (a full disk) closes the database; the next attempt
        // reopens it. Queued changes are kept across attempts.
        let mut last = None;
        for attempt in 0..3 {
            match self.inner.commit(Durability::Immediate, true, Some(true)) {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(_) if self.inner.store.fault.is_hit() => return skipped(self.inner.store.damage().expect("damage noted")),
                Err(e) => {
                    tracing::error!("final commit, attempt {}: {e}", attempt + 1);
                    last = Some(e);
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            }
        }
        if last.is_none() {
            // A reopen during those attempts may have dropped content stored
            // since the last durable commit: store it again (or report it).
            let again = dirty_files(&self.inner.lock());
            if !again.is_empty() {
                unstored.extend(self.inner.wc().hash_many(&again, true).0);
                if let Err(e) = self.inner.commit(Durability::Immediate, true, Some(true)) {
                    last = Some(e);
                }
            }
        }
        if let Some(e) = last {
            let dir = dbpath.parent().unwrap_or(Path::new(".")).to_path_buf();
            return Err(StoreError::Io {
                path: dbpath.clone(),
                source: std::io::Error::other(format!(
                    "the final commit failed ({e}): changes since the last commit are not in the store; \
                     file bytes stay in {}/wc and are kept in {}/lost+found at the next mount; free space (df {}) and mount again",
                    dir.display(),
                    dir.display(),
                    dir.display()
                )),
            });
        }
        if let Some(d) = self.inner.store.dir() {
            migrate::discard_backup(d);
        }
        // Committed: close redb's handle while the lock is held, so that it
        // records a clean close (the next mount need not repair the file).
        self.inner.store.close();
        self.inner.store.release_lock();
        if let Some((ino, e)) = unstored.first() {
            let dir = dbpath.parent().unwrap_or(Path::new(".")).to_path_buf();
            return Err(StoreError::Io {
                path: dbpath.clone(),
                source: std::io::Error::other(format!(
                    "{} changed files could not be stored (inode {ino}: {e}); their bytes are safe in {}/wc and are stored at the next mount (free space first: df {})",
                    unstored.len(),
                    dir.display(),
                    dir.display()
                )),
            });
        }
        // A memory store's temporary directories go now: the daemon may
        // exit without dropping the Fs (threads still hold it).
        if self.inner.store.dir().is_none() {
            let _ = std::fs::remove_dir_all(self.inner.store.packs.dir());
        }
        for t in [&self.inner._tmp, &self.inner._tmp_local].into_iter().flatten() {
            let _ = std::fs::remove_dir_all(t.path());
        }
        Ok(())
    }

    /// Test hook: stops like a killed process would — no final commit, the
    /// store stays marked unclean — and releases the store.
    #[doc(hidden)]
    pub fn simulate_crash(self) {
        self.inner.shut.store(true, Ordering::SeqCst);
        self.stop_threads(true);
    }
}

impl Drop for Fs {
    /// Dropping without [`Fs::shutdown`] behaves like a crash: the last
    /// group commit stands, and the next open recovers.
    fn drop(&mut self) {
        if !self.inner.shut.load(Ordering::SeqCst) {
            tracing::warn!("ringfs store {} dropped without shutdown", self.inner.store.desc);
        }
        self.stop_threads(true);
    }
}

/// The synced regular files whose working copy changed since it was last
/// stored (`content_gen` ahead of `hashed_gen`).
pub(crate) fn dirty_files(st: &State) -> Vec<u64> {
    st.nodes.iter().filter(|(_, n)| is_reg(n.rec.mode) && !n.local && n.content_gen != n.hashed_gen).map(|(&i, _)| i).collect()
}

/// Starts a named background thread of the store; a failure to start is a
/// [`StoreError::Io`].
fn spawn_named(name: String, f: impl FnOnce() + Send + 'static) -> std::result::Result<std::thread::JoinHandle<()>, StoreError> {
    std::thread::Builder::new().name(name).spawn(f).map_err(|e| io_err(Path::new("thread"), e))
}
