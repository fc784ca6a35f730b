//! [`Store`]: the handle on one workspace's redb database.
//!
//! Owns: opening the database ([`open_db`]) and the store lock
//! (`DIR/ringfs.lock`, [`take_lock_noting`]); write and read transactions, with the
//! database reopened after an I/O error (ENOSPC, EIO) poisoned the handle;
//! which content transactions are not yet durable; the chunk counters and
//! the sync position (the last journal sequence number). Must not touch: the
//! inode table (after a reopen it tells the hook set with
//! [`Store::on_reopen`] which files lost their stored content), working
//! copies, FUSE.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use redb::{Database, ReadableDatabase};

use crate::schema::META;
use crate::store::fault::{Fault, Tx};
use crate::store::pack::Packs;
use crate::throttle::LogThrottle;
use crate::types::{Errno, StoreError};

/// Told, after the database was reopened at its last durable commit, the
/// inodes whose content was stored only non-durably before (now gone).
pub(crate) type ReopenHook = Box<dyn Fn(&[u64]) + Send + Sync>;

/// The database of a workspace and what the process knows about it.
pub(crate) struct Store {
    /// The redb handle; `None` after an I/O error closed it until it is
    /// reopened (see [`Store::begin_write`]).
    db: RwLock<Option<Database>>,
    /// An I/O error (ENOSPC, EIO) poisoned the handle: reopen before the next transaction.
    db_broken: AtomicBool,
    /// Files whose content transaction committed non-durably since the last
    /// durable commit: lost if the database must be reopened, so re-hashed then.
    pub(crate) nondurable: Mutex<HashSet<u64>>,
    /// A content transaction committed non-durably since the last durable
    /// group commit.
    pub(crate) content_pending: AtomicBool,
    /// The store directory (`None`: a memory store).
    dir: Option<PathBuf>,
    /// "memory" or the directory, for messages and `ringfs stats`.
    pub(crate) desc: String,
    /// The last journal sequence number written.
    pub(crate) sync_pos: AtomicU64,
    pub(crate) chunk_count: AtomicU64,
    pub(crate) chunk_bytes: AtomicU64,
    /// Failing store commits (a full disk retries every commit interval).
    pub(crate) trouble: LogThrottle,
    /// Deleting freed files' working copies before their commit, on a full disk.
    pub(crate) full_disk_drops: LogThrottle,
    /// Held for the life of the store: the flock on DIR/ringfs.lock.
    lock_file: Mutex<Option<File>>,
    /// What the lock file says after [`Store::release_lock`] when not
    /// empty: a command on an unmounted store whose daemon died keeps the
    /// dead pid there ([`Store::keep_unclean_mark`]), so the next mount
    /// still knows the shutdown was not clean.
    lock_after: Mutex<Option<Vec<u8>>>,
    on_reopen: OnceLock<ReopenHook>,
    /// The pack files holding chunk bytes.
    pub(crate) packs: Packs,
    /// One compaction at a time (automatic or `ringfs gc`).
    pub(crate) compacting: Mutex<()>,
    /// The chunk counters at the last automatic compaction check.
    pub(crate) compact_seen: AtomicU64,
    /// Exec points in use (token → root directory object): gc keeps what
    /// they reach (`crate::snap::point`).
    pins: Mutex<(u64, std::collections::HashMap<u64, [u8; 32]>)>,
    /// File content stored since the store was opened, in bytes: chunks
    /// written to packs (new) and chunks the store already had (reused).
    pub(crate) content_new: AtomicU64,
    pub(crate) content_reused: AtomicU64,
    /// Remote-only chunks: where they come from, what was fetched.
    pub(crate) remote: crate::store::source::Remote,
    /// A fork's tree still deferred (served from its objects, D60): written
    /// by the first write transaction ([`Store::begin_write`]) or group
    /// commit with changes; `None` once the tables hold it.
    deferred: RwLock<Option<Arc<dyn DeferredTree>>>,
    /// Damage met while serving (a redb panic or corruption error in a
    /// transaction): writes are refused from then on ([`Store::damage`]).
    pub(crate) fault: Arc<Fault>,
}

/// A live tree the tables do not hold yet (a fork's, served from its
/// commit's objects: `snap::overlay`).
pub(crate) trait DeferredTree: Send + Sync {
    /// Writes the tree's rows into `txn` if the store's tables still defer
    /// it. `Ok(false)`: they no longer do (nothing written). Errors: as
    /// text (a missing object, redb).
    fn write(&self, store: &Store, txn: &redb::WriteTransaction) -> Result<bool, String>;
    /// The chunk list of file `ino` of the deferred tree, when `rtx` still
    /// defers it (`None`: not a file of the tree, or the tables hold it).
    fn chunks(&self, store: &Store, rtx: &redb::ReadTransaction, ino: u64) -> Result<Option<Vec<crate::schema::ChunkRef>>, String>;
    /// The block counts (`schema::data_blocks` of their chunks) of files
    /// `inos` of the deferred tree, in their order, when `rtx` still
    /// defers it (`None`s: not files of the tree, or the tables hold it).
    fn blocks(&self, store: &Store, rtx: &redb::ReadTransaction, inos: &[u64]) -> Result<Vec<Option<u64>>, String>;
}

impl Store {
    /// A handle on `db`, opened from `dir` (`None` for a memory store) under
    /// `lock`, at sync position `sync_pos` with the chunk counters
    /// `chunks` (count, bytes).
    pub(crate) fn new(db: Database, dir: Option<PathBuf>, desc: String, lock: Option<File>, sync_pos: u64, chunks: (u64, u64), packs: Packs) -> Store {
        Store {
            db: RwLock::new(Some(db)),
            db_broken: AtomicBool::new(false),
            nondurable: Mutex::new(HashSet::new()),
            content_pending: AtomicBool::new(false),
            dir,
            desc,
            sync_pos: AtomicU64::new(sync_pos),
            chunk_count: AtomicU64::new(chunks.0),
            chunk_bytes: AtomicU64::new(chunks.1),
            trouble: LogThrottle::default(),
            full_disk_drops: LogThrottle::default(),
            lock_file: Mutex::new(lock),
            lock_after: Mutex::new(None),
            on_reopen: OnceLock::new(),
            packs,
            compacting: Mutex::new(()),
            compact_seen: AtomicU64::new(u64::MAX),
            pins: Mutex::new((0, std::collections::HashMap::new())),
            content_new: AtomicU64::new(0),
            content_reused: AtomicU64::new(0),
            remote: Default::default(),
            deferred: RwLock::new(None),
            fault: Default::default(),
        }
    }

    /// Serves the live tree from `t` until a change writes its rows.
    pub(crate) fn set_deferred(&self, t: Arc<dyn DeferredTree>) {
        *self.deferred.write().unwrap_or_else(|p| p.into_inner()) = Some(t);
    }

    /// The deferred tree, if the store has one.
    pub(crate) fn deferred(&self) -> Option<Arc<dyn DeferredTree>> {
        self.deferred.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Writes a deferred tree's rows into `txn` (the group commit's, when
    /// it has changes to write). Errors: as [`DeferredTree::write`], as a
    /// redb corruption error.
    pub(crate) fn write_deferred_in(&self, txn: &redb::WriteTransaction) -> std::result::Result<(), redb::Error> {
        let Some(t) = self.deferred() else { return Ok(()) };
        match t.write(self, txn) {
            Ok(true) => {
                tracing::info!("store {}: the fork's tree is written into the tables (its first change)", self.desc);
                Ok(())
            }
            Ok(false) => {
                *self.deferred.write().unwrap_or_else(|p| p.into_inner()) = None;
                Ok(())
            }
            Err(e) => Err(redb::Error::Corrupted(format!("writing the fork's tree: {e}"))),
        }
    }

    /// Pins the tree rooted at `root` (gc keeps it) until [`Store::unpin`]
    /// with the token returned.
    pub(crate) fn pin(&self, root: [u8; 32]) -> u64 {
        let mut p = self.pins.lock().unwrap_or_else(|e| e.into_inner());
        p.0 += 1;
        let t = p.0;
        p.1.insert(t, root);
        t
    }

    /// Drops a pin; returns the root it held (`None`: no such token).
    pub(crate) fn unpin(&self, token: u64) -> Option<[u8; 32]> {
        self.pins.lock().unwrap_or_else(|e| e.into_inner()).1.remove(&token)
    }

    /// The root a pin holds.
    pub(crate) fn pinned(&self, token: u64) -> Option<[u8; 32]> {
        self.pins.lock().unwrap_or_else(|e| e.into_inner()).1.get(&token).copied()
    }

    /// Every pinned root.
    pub(crate) fn pinned_roots(&self) -> Vec<[u8; 32]> {
        self.pins.lock().unwrap_or_else(|e| e.into_inner()).1.values().copied().collect()
    }

    /// Sets the hook told which files must be stored again after a reopen
    /// (once; later calls are ignored).
    pub(crate) fn on_reopen(&self, hook: ReopenHook) {
        let _ = self.on_reopen.set(hook);
    }

    /// The store directory (`None`: a memory store).
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// `DIR/store.redb`, or "memory".
    pub(crate) fn db_path(&self) -> PathBuf {
        self.dir.as_ref().map(|d| d.join("store.redb")).unwrap_or_else(|| PathBuf::from("memory"))
    }

    /// Releases `ringfs.lock` after the final (clean) commit, emptying it
    /// first (a lock file that still names a pid nobody holds it for says
    /// the daemon died without a clean shutdown, [`died_holding_lock`]) —
    /// or writing back the dead daemon's pid a command on the unmounted
    /// store found there ([`Store::keep_unclean_mark`]).
    pub(crate) fn release_lock(&self) {
        if let Some(f) = self.lock_file.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = f.set_len(0);
            if let Some(b) = self.lock_after.lock().unwrap_or_else(|p| p.into_inner()).take() {
                let _ = f.write_all_at(&b, 0);
            }
        }
    }

    /// For a store opened by a command while unmounted (`--store DIR`):
    /// when the lock file held `before` naming a daemon that died (an
    /// unclean shutdown), [`Store::release_lock`] writes it back instead of
    /// emptying the file, because such a command makes no clean shutdown:
    /// the next mount must still run recovery and must not take the
    /// commit redb reads for a lost newer one.
    pub(crate) fn keep_unclean_mark(&self, before: Option<Vec<u8>>) {
        if let Some(b) = before.filter(|b| names_a_pid(b)) {
            *self.lock_after.lock().unwrap_or_else(|p| p.into_inner()) = Some(b);
        }
    }

    /// The handle is unusable after an I/O error: reopen it before the next transaction.
    pub(crate) fn mark_broken(&self) {
        self.db_broken.store(true, Ordering::SeqCst);
    }

    /// Takes the set of files stored non-durably (a durable commit covers them).
    pub(crate) fn take_nondurable(&self) -> HashSet<u64> {
        std::mem::take(&mut *self.nondurable.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Adds signed deltas to the in-memory chunk counters.
    pub(crate) fn bump_counters(&self, dc: i64, db: i64) {
        let f = |a: &AtomicU64, d: i64| {
            let _ = a.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some((v as i64 + d).max(0) as u64));
        };
        f(&self.chunk_count, dc);
        f(&self.chunk_bytes, db);
    }

    /// The last journal sequence number in `txn` (its table's last key, or
    /// the counter if that is larger: positions are never reused). Records
    /// are numbered from it inside the write transaction, so two writers in
    /// turn never give two records one key, whatever order they update
    /// [`Store::sync_pos`] in (a record overwritten so was a change a
    /// snapshot commit missed).
    pub(crate) fn journal_last(&self, txn: &redb::WriteTransaction) -> std::result::Result<u64, redb::Error> {
        use redb::ReadableTable;
        let last = txn.open_table(crate::schema::JOURNAL)?.last()?.map(|(k, _)| k.value()).unwrap_or(0);
        Ok(last.max(self.sync_pos.load(Ordering::SeqCst)))
    }

    /// A write transaction, reopening the database first if an I/O error
    /// closed it (a durable store only; a memory store cannot fail so). A
    /// deferred tree (a fork's, D60) is written first, in a transaction of
    /// its own committed non-durably (durable with the caller's next
    /// durable commit): every writer finds the live tables whole.
    pub(crate) fn begin_write(&self) -> std::result::Result<Tx<redb::WriteTransaction>, redb::Error> {
        if self.deferred().is_some() {
            let mut txn = self.begin_write_plain()?;
            txn.set_durability(redb::Durability::None)?;
            self.write_deferred_in(&txn)?;
            txn.commit()?;
            *self.deferred.write().unwrap_or_else(|p| p.into_inner()) = None;
        }
        self.begin_write_plain()
    }

    /// [`Store::begin_write`] without writing a deferred tree first (the
    /// group commit writes it in its own transaction when it has changes).
    /// Refused once the store met damage ([`Store::damage`]: read-only).
    pub(crate) fn begin_write_plain(&self) -> std::result::Result<Tx<redb::WriteTransaction>, redb::Error> {
        if self.fault.is_hit() {
            return Err(redb::Error::Corrupted("the store is read-only: it met damage while serving (`ringfs status` names it)".into()));
        }
        self.reopen_if_broken()?;
        let g = self.db.read().unwrap_or_else(|p| p.into_inner());
        let db = g.as_ref().ok_or(redb::Error::PreviousIo)?;
        let t = db.begin_write().map_err(|e| {
            let e = redb::Error::from(e);
            if is_io_error(&e) {
                self.db_broken.store(true, Ordering::SeqCst);
            }
            e
        })?;
        Ok(Tx::new(t, self.fault.clone()))
    }

    /// Closes the database handle after the final commit (a clean shutdown):
    /// redb then records its allocator state and marks the file as needing
    /// no repair, so the next open — the mount's read-only check, then its
    /// own — reads only the pages it uses instead of verifying and walking
    /// the whole file (D48). A handle still open at process exit leaves the
    /// file to be repaired at every open. Later transactions fail
    /// ([`redb::Error::PreviousIo`]).
    pub(crate) fn close(&self) {
        let mut g = self.db.write().unwrap_or_else(|p| p.into_inner());
        drop(g.take());
    }

    /// `f` over a read transaction outside [`Tx`] (`None`: the handle is
    /// closed or redb refuses one): for naming damage already noted.
    pub(crate) fn with_plain_read<T>(&self, f: impl FnOnce(&redb::ReadTransaction) -> Option<T>) -> Option<T> {
        let g = self.db.read().unwrap_or_else(|p| p.into_inner());
        let rtx = g.as_ref()?.begin_read().ok()?;
        f(&rtx)
    }

    /// A read transaction (also after damage was met: what can be read
    /// still serves; a redb panic inside it is damage, [`Tx`]).
    pub(crate) fn begin_read(&self) -> std::result::Result<Tx<redb::ReadTransaction>, redb::Error> {
        self.reopen_if_broken()?;
        let g = self.db.read().unwrap_or_else(|p| p.into_inner());
        let t = g.as_ref().ok_or(redb::Error::PreviousIo)?.begin_read()?;
        Ok(Tx::new(t, self.fault.clone()))
    }

    /// After an I/O error: closes the handle and opens the database again
    /// (its last committed state). Err while that still fails.
    pub(crate) fn reopen_if_broken(&self) -> std::result::Result<(), redb::Error> {
        if !self.db_broken.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Some(dir) = &self.dir else { return Ok(()) };
        let mut g = self.db.write().unwrap_or_else(|p| p.into_inner());
        if !self.db_broken.load(Ordering::SeqCst) {
            return Ok(()); // another thread reopened it
        }
        drop(g.take());
        match open_db(dir) {
            Ok(db) => {
                // The reopened database is at its last durable commit: the
                // chunk counters come from it, and content stored since then
                // is gone, so those files are hashed again.
                if let Ok(rtx) = db.begin_read() {
                    let get = |k: &str| rtx.open_table(META).ok().and_then(|t| t.get(k).ok().flatten().map(|v| v.value()));
                    if let (Some(c), Some(b)) = (get("chunk_count"), get("chunk_bytes")) {
                        self.chunk_count.store(c, Ordering::SeqCst);
                        self.chunk_bytes.store(b, Ordering::SeqCst);
                    }
                }
                *g = Some(db);
                self.db_broken.store(false, Ordering::SeqCst);
                drop(g);
                let lost: Vec<u64> = std::mem::take(&mut *self.nondurable.lock().unwrap_or_else(|p| p.into_inner())).into_iter().collect();
                if let Some(hook) = self.on_reopen.get() {
                    hook(&lost);
                }
                if self.trouble.due() {
                    tracing::warn!("store: database reopened after an I/O error; retrying queued changes and re-storing {} files", lost.len());
                }
                Ok(())
            }
            Err(e) => {
                tracing::error!("store: reopening the database failed: {e}");
                Err(redb::Error::Io(std::io::Error::other(e.to_string())))
            }
        }
    }
}

/// ENOSPC, EIO and the like: the handle must be reopened.
pub(crate) fn is_io_error(e: &redb::Error) -> bool {
    matches!(e, redb::Error::Io(_) | redb::Error::PreviousIo)
}

/// Did `e` fail for want of space (ENOSPC, EDQUOT)?
pub(crate) fn is_enospc(e: &redb::Error) -> bool {
    matches!(e, redb::Error::Io(io) if matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)))
}

/// A store error on a request path: logged, answered EIO.
pub(crate) fn db_errno<E: std::fmt::Display>(e: E) -> Errno {
    tracing::error!("store: {e}");
    Errno::EIO
}

pub(crate) fn io_err(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io { path: path.to_path_buf(), source: e }
}

pub(crate) fn corrupt(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt { path: path.to_path_buf(), reason: e.to_string() }
}

/// Does `dir/ringfs.lock` still name the pid of a daemon (which, when
/// nobody holds the lock, died without a clean shutdown — a clean one
/// empties it, [`Store::release_lock`])? False when it is missing, empty or
/// unreadable.
pub(crate) fn died_holding_lock(dir: &Path) -> bool {
    std::fs::read(dir.join("ringfs.lock")).is_ok_and(|b| names_a_pid(&b))
}

/// Whether lock file contents name a pid (what a daemon writes, and leaves
/// when it dies without a clean shutdown).
fn names_a_pid(b: &[u8]) -> bool {
    std::str::from_utf8(b).ok().and_then(|s| s.trim().parse::<u32>().ok()).is_some()
}

/// Takes the exclusive flock on `dir/ringfs.lock` and writes our pid into
/// it, also returning what the lock file held before (`None`:
/// it did not exist), for [`restore_lock`] when the open is refused.
pub(crate) fn take_lock_noting(dir: &Path) -> std::result::Result<(File, Option<Vec<u8>>), StoreError> {
    let p = dir.join("ringfs.lock");
    let before = match std::fs::read(&p) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&p, e)),
    };
    let f = take_lock_file(dir)?;
    Ok((f, before))
}

/// The access and modification times of `dir/ringfs.lock`, if it exists
/// (taken before [`take_lock_noting`], given back to [`restore_lock`]).
pub(crate) fn lock_times(dir: &Path) -> Option<std::fs::FileTimes> {
    let m = std::fs::metadata(dir.join("ringfs.lock")).ok()?;
    Some(std::fs::FileTimes::new().set_accessed(m.accessed().ok()?).set_modified(m.modified().ok()?))
}

/// Puts back what the lock file `f` of `dir` held before [`take_lock_noting`]
/// (removing it when it did not exist), and its times (`times`, from
/// [`lock_times`]), so a refused open leaves the store as it found it; the
/// flock goes with `f`.
pub(crate) fn restore_lock(dir: &Path, f: File, before: Option<Vec<u8>>, times: Option<std::fs::FileTimes>) {
    match before {
        Some(b) => {
            let _ = f.set_len(0);
            let _ = f.write_all_at(&b, 0);
            if let Some(t) = times {
                let _ = f.set_times(t);
            }
        }
        None => {
            let _ = std::fs::remove_file(dir.join("ringfs.lock"));
        }
    }
}

/// The flock of [`take_lock_noting`] and our pid written.
fn take_lock_file(dir: &Path) -> std::result::Result<File, StoreError> {
    let p = dir.join("ringfs.lock");
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(crate::private::FILE_MODE).open(&p).map_err(|e| io_err(&p, e))?;
    match flock_past_own_children(&f, libc::LOCK_EX) {
        Ok(Ok(())) => {}
        Ok(Err(pid)) => return Err(StoreError::Locked { pid, path: dir.to_path_buf() }),
        Err(e) => return Err(io_err(&p, e)),
    }
    let _ = f.set_len(0);
    let _ = f.write_all_at(format!("{}\n", std::process::id()).as_bytes(), 0);
    Ok(f)
}

/// flock(2) `op` (LOCK_EX or LOCK_SH) on the lock file `f` without blocking:
/// `Ok(Err(pid))` when another holder has it (the pid written in the file).
/// A lock naming our own pid is a descriptor a child of ours, forked and not
/// yet exec'd, still shares: it goes within moments, so that is retried for
/// up to 2 s.
pub(crate) fn flock_past_own_children(f: &File, op: i32) -> std::io::Result<std::result::Result<(), Option<u32>>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        // SAFETY: flock on a descriptor the caller owns.
        if unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
            return Ok(Ok(()));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(e);
        }
        let mut b = [0u8; 32];
        let n = f.read_at(&mut b, 0).unwrap_or(0);
        let pid: Option<u32> = String::from_utf8_lossy(&b[..n]).trim().parse().ok();
        // Our own pid (a child of ours still holds a descriptor of our
        // lock), or none yet or any more (a holder between its flock and
        // writing its pid, or a clean shutdown's emptied file whose
        // descriptor a child still holds): wait a little.
        if (n == 0 || pid == Some(std::process::id())) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        return Ok(Err(pid));
    }
}

/// redb's page cache for a store, in bytes: 8 MiB, set explicitly so the
/// daemon's memory does not grow with the database (redb's default is
/// 1 GiB). Small because the inode table is in memory: redb is read once at
/// mount and then written by group commits (32 MiB cost ~30 MiB of RSS at
/// 200 000 files for no measured gain; see docs/DECISIONS.md "memory per
/// file").
pub const DB_CACHE_BYTES: usize = 8 << 20;

/// Opens (creating if missing, mode 0600) `DIR/store.redb` with a
/// [`DB_CACHE_BYTES`] cache. Errors: [`StoreError::Locked`] if another handle has it open,
/// [`StoreError::Io`], [`StoreError::Corrupt`] (what redb says).
pub(crate) fn open_db(dir: &Path) -> std::result::Result<Database, StoreError> {
    let p = dir.join("store.redb");
    // Made 0600 first (redb would create it 0644 less the umask): private
    // to the store's owner (D87). An existing file is opened as it is.
    if let Err(e) = crate::private::options().write(true).create(true).truncate(false).open(&p) {
        return Err(io_err(&p, e));
    }
    redb::Builder::new().set_cache_size(DB_CACHE_BYTES).create(&p).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Locked { pid: None, path: dir.to_path_buf() },
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if !matches!(io.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof) =>
        {
            io_err(&p, io)
        }
        e => corrupt(&p, e),
    })
}
