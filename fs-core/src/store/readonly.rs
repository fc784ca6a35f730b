//! Reading a store's database without writing to it: for fsck, for the
//! check `Fs::open_store` makes before it serves a store, and for salvage.
//!
//! Owns: opening `DIR/store.redb` read-only ([`open_read_only`]; a database
//! a crash left needing repair is repaired in memory, over an
//! [`Overlay`] of the file, so the file itself is never written), the
//! shared store lock fsck takes ([`shared_lock`]), and running redb calls
//! that may panic on damaged pages ([`guarded`], without the default panic
//! hook's message and backtrace). Must not touch: the live `Store`, the
//! inode table, working copies.

use std::ops::Bound;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use redb::{Database, ReadOnlyDatabase, ReadTransaction, ReadableDatabase, StorageBackend};

use crate::types::StoreError;

/// Runs `f`, turning a panic inside it (redb's `unreachable!` on a damaged
/// page, a decoder's out-of-bounds index) into `Err(message)`. The panic
/// hook prints nothing for such panics (other threads' panics are printed
/// as before; `store::fault::install_hook`).
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    crate::store::fault::install_hook();
    use crate::store::fault::QUIET;
    let was = QUIET.with(|q| q.replace(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    crate::store::fault::forget_panic();
    r.map_err(|p| {
        let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "panic".into());
        format!("redb could not read it (a damaged page: {msg})")
    })
}

/// redb's page cache for these reads, in bytes: they read every page once,
/// so a large cache only grows the process (redb's default is 1 GiB).
const CACHE_BYTES: usize = 16 << 20;

/// A redb builder with the small [`CACHE_BYTES`] cache.
fn builder() -> redb::Builder {
    let mut b = redb::Builder::new();
    b.set_cache_size(CACHE_BYTES);
    b
}

/// A database opened without write access to its file.
pub(crate) enum RoDb {
    /// Shut down cleanly: redb's own read-only open.
    ReadOnly(ReadOnlyDatabase),
    /// It needed repair (a crash): repaired in memory over an [`Overlay`].
    Repaired(Database),
    /// Its last commit was cut short by a crash (it fails its checksums and
    /// is not a clean shutdown's): the commit before it, as redb's own
    /// recovery, and so the next mount, takes it.
    Previous(Database),
}

impl RoDb {
    /// A read transaction on the database's last committed state.
    pub(crate) fn begin_read(&self) -> Result<ReadTransaction, redb::TransactionError> {
        match self {
            RoDb::ReadOnly(d) => d.begin_read(),
            RoDb::Repaired(d) | RoDb::Previous(d) => d.begin_read(),
        }
    }
}

/// Opens `DIR/store.redb` without writing to it. A database left needing
/// repair by a crash is opened over an in-memory [`Overlay`] of the file
/// (redb's repair writes go to memory). Errors: [`StoreError::Locked`]
/// while a daemon has it open, [`StoreError::Io`] when the file cannot be
/// read, [`StoreError::Corrupt`] when redb refuses it (with redb's reason),
/// also when redb panics.
pub(crate) fn open_read_only(dir: &Path) -> Result<RoDb, StoreError> {
    let p = dir.join("store.redb");
    let map = |e: redb::DatabaseError| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Locked { pid: None, path: dir.to_path_buf() },
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if !matches!(io.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof) =>
        {
            StoreError::Io { path: p.clone(), source: io }
        }
        e => StoreError::Corrupt { path: p.clone(), reason: e.to_string() },
    };
    let first = guarded(|| builder().open_read_only(&p)).map_err(|m| StoreError::Corrupt { path: p.clone(), reason: m })?;
    match first {
        Ok(db) => Ok(RoDb::ReadOnly(db)),
        Err(redb::DatabaseError::RepairAborted) => {
            tracing::debug!("{} needs repair (a crash, or a commit without allocator state): repairing it in memory", p.display());
            let file = File::open(&p).map_err(|e| StoreError::Io { path: p.clone(), source: e })?;
            let ov = Overlay::new(file).map_err(|e| StoreError::Io { path: p.clone(), source: e })?;
            // redb's repair calls back at progress 0.3 only when the last
            // commit fails its checksums and it is about to fall back to the
            // one before (losing what came after, silently): refused here.
            let fell_back = Arc::new(AtomicBool::new(false));
            let flag = fell_back.clone();
            let mut b = builder();
            b.set_repair_callback(move |s: &mut redb::RepairSession| {
                // (0.0: repair starts; 0.3: the fallback; 0.6, 0.9: rebuilding
                // the allocator state; redb 4.6, db.rs do_repair.)
                if (s.progress() - 0.3).abs() < 0.05 {
                    flag.store(true, Ordering::SeqCst);
                    s.abort();
                }
            });
            let r = guarded(|| b.create_with_backend(ov)).map_err(|m| StoreError::Corrupt { path: p.clone(), reason: m })?;
            match r {
                Ok(db) => Ok(RoDb::Repaired(db)),
                Err(redb::DatabaseError::RepairAborted) if fell_back.load(Ordering::SeqCst) => {
                    // A commit a crash cut short fails its checksums too (redb
                    // commits in one phase), and going back to the one before
                    // is then right: it never returned. Damage it is only when
                    // that last commit is the clean shutdown's (meta clean = 1,
                    // read from it as it is), which had returned. When that
                    // commit cannot be read at all, the lock file tells: a
                    // daemon that died left its pid there.
                    if last_commit_clean(dir) == Some(false) || crate::store::db::died_holding_lock(dir) {
                        tracing::warn!("{}: the last commit before the crash is incomplete; reading the commit before it (as the next mount recovers)", p.display());
                        return open_fallback(dir).map(|d| match d {
                            RoDb::Repaired(d) | RoDb::Previous(d) => RoDb::Previous(d),
                            other => other,
                        });
                    }
                    Err(StoreError::Corrupt {
                        path: p.clone(),
                        reason: "its last commit fails its checksums (redb would fall back to an earlier commit and lose everything after it)".into(),
                    })
                }
                Err(e) => Err(map(e)),
            }
        }
        Err(e) => Err(map(e)),
    }
}

/// Opens `DIR/store.redb` for salvage when [`open_read_only`] refused it:
/// repaired in memory over an [`Overlay`], letting redb fall back to the
/// commit before a damaged last one (what salvage can still read). The file
/// is never written. Errors as [`open_read_only`].
pub(crate) fn open_fallback(dir: &Path) -> Result<RoDb, StoreError> {
    let p = dir.join("store.redb");
    let file = File::open(&p).map_err(|e| StoreError::Io { path: p.clone(), source: e })?;
    let ov = Overlay::new(file).map_err(|e| StoreError::Io { path: p.clone(), source: e })?;
    match guarded(|| builder().create_with_backend(ov)) {
        Ok(Ok(db)) => Ok(RoDb::Repaired(db)),
        Ok(Err(e)) => Err(StoreError::Corrupt { path: p, reason: e.to_string() }),
        Err(m) => Err(StoreError::Corrupt { path: p, reason: m }),
    }
}

/// Opens `DIR/store.redb`'s last commit as it is, without redb's repair
/// and so without its checksum walk: a shared reader
/// ([`redb::ConcurrencyMode::SingleWriter`]) over an [`Overlay`] whose lock
/// answers let it read a file no writer closed. Pages are read unverified:
/// a damaged one shows as a read error, a redb panic (see [`guarded`]) or
/// records that do not decode. For salvage, to read what the last commit
/// holds outside its damaged pages; never for a store to be served.
pub(crate) fn open_unverified(dir: &Path) -> Result<RoDb, StoreError> {
    let p = dir.join("store.redb");
    let file = File::open(&p).map_err(|e| StoreError::Io { path: p.clone(), source: e })?;
    let ov = Overlay::new(file).map_err(|e| StoreError::Io { path: p.clone(), source: e })?;
    let mut b = builder();
    b.set_concurrency_mode(redb::ConcurrencyMode::SingleWriter);
    match guarded(|| b.open_read_only_with_backend(ov)) {
        Ok(Ok(db)) => Ok(RoDb::ReadOnly(db)),
        Ok(Err(e)) => Err(StoreError::Corrupt { path: p, reason: e.to_string() }),
        Err(m) => Err(StoreError::Corrupt { path: p, reason: m }),
    }
}

/// The meta `clean` flag of the last commit, read as it is
/// ([`open_unverified`]): `Some(true)` for a clean shutdown's commit,
/// `Some(false)` for a running daemon's, `None` when unreadable.
fn last_commit_clean(dir: &Path) -> Option<bool> {
    let db = open_unverified(dir).ok()?;
    guarded(|| {
        let rtx = db.begin_read().ok()?;
        let t = rtx.open_table(crate::schema::META).ok()?;
        let v = t.get("clean").ok()??.value();
        Some(v == 1)
    })
    .ok()
    .flatten()
}

/// Takes a shared flock on `DIR/ringfs.lock` if that file exists and can be
/// opened for reading (a daemon's exclusive lock makes it
/// [`StoreError::Locked`]); `Ok(None)` when there is no lock file to take
/// (nothing is created). The file is never written.
pub(crate) fn shared_lock(dir: &Path) -> Result<Option<File>, StoreError> {
    let p = dir.join("ringfs.lock");
    let Ok(f) = File::open(&p) else { return Ok(None) };
    match crate::store::db::flock_past_own_children(&f, libc::LOCK_SH) {
        Ok(Ok(())) => {}
        Ok(Err(pid)) => return Err(StoreError::Locked { pid, path: dir.to_path_buf() }),
        Err(_) => return Ok(None),
    }
    Ok(Some(f))
}

/// Block size of the [`Overlay`]'s copies.
const BLOCK: u64 = 4096;

/// A redb storage backend over a file opened read-only: reads come from the
/// file, writes (redb's repair of a crashed database) go to 4 KiB blocks
/// held in memory, so the file is never modified.
#[derive(Debug)]
pub(crate) struct Overlay {
    file: File,
    state: Mutex<OverlayState>,
}

#[derive(Debug)]
struct OverlayState {
    /// The storage's length now.
    len: u64,
    /// Bytes of the file at or past this offset read as zero (a shrink cut them).
    zero_from: u64,
    /// Block number → its current bytes.
    blocks: HashMap<u64, Box<[u8]>>,
}

impl Overlay {
    /// An overlay of `file` (its length now).
    pub(crate) fn new(file: File) -> std::io::Result<Overlay> {
        let len = file.metadata()?.len();
        Ok(Overlay { file, state: Mutex::new(OverlayState { len, zero_from: len, blocks: HashMap::new() }) })
    }

    /// The bytes of block `b` as the file (cut at `zero_from`) has them.
    fn base_block(&self, st: &OverlayState, b: u64) -> std::io::Result<Box<[u8]>> {
        let mut buf = vec![0u8; BLOCK as usize].into_boxed_slice();
        let start = b * BLOCK;
        if start < st.zero_from {
            let n = (st.zero_from - start).min(BLOCK) as usize;
            let mut done = 0;
            while done < n {
                match self.file.read_at(&mut buf[done..n], start + done as u64)? {
                    0 => break,
                    k => done += k,
                }
            }
        }
        Ok(buf)
    }
}

impl StorageBackend for Overlay {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.state.lock().unwrap_or_else(|p| p.into_inner()).len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if offset + out.len() as u64 > st.len {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past the end"));
        }
        let mut done = 0usize;
        while done < out.len() {
            let at = offset + done as u64;
            let (b, inb) = (at / BLOCK, (at % BLOCK) as usize);
            let n = (BLOCK as usize - inb).min(out.len() - done);
            match st.blocks.get(&b) {
                Some(blk) => out[done..done + n].copy_from_slice(&blk[inb..inb + n]),
                None => {
                    let blk = self.base_block(&st, b)?;
                    out[done..done + n].copy_from_slice(&blk[inb..inb + n]);
                }
            }
            done += n;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if len < st.len {
            st.zero_from = st.zero_from.min(len);
            let keep = len.div_ceil(BLOCK);
            st.blocks.retain(|b, _| *b < keep);
            if len % BLOCK != 0 {
                if let Some(blk) = st.blocks.get_mut(&(len / BLOCK)) {
                    blk[(len % BLOCK) as usize..].fill(0);
                }
            }
        }
        st.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        Ok(())
    }

    // Locks: an overlay is private to this process, so every lock is
    // granted. A query answers "held" only for redb's consistent-file byte
    // (2^62 + 4, redb 4.6 db.rs `CONSISTENT_BYTE`, held by a live writer),
    // which lets a shared reader ([`open_unverified`]) read the last commit
    // of a file no writer closed, without repairing it.
    fn try_lock_range(&self, _: Bound<u64>, _: Bound<u64>) -> Result<bool, redb::BackendError> {
        Ok(true)
    }
    fn try_lock_shared_range(&self, _: Bound<u64>, _: Bound<u64>) -> Result<bool, redb::BackendError> {
        Ok(true)
    }
    fn lock_range(&self, _: Bound<u64>, _: Bound<u64>) -> Result<(), redb::BackendError> {
        Ok(())
    }
    fn lock_shared_range(&self, _: Bound<u64>, _: Bound<u64>) -> Result<(), redb::BackendError> {
        Ok(())
    }
    fn unlock_range(&self, _: Bound<u64>, _: Bound<u64>) -> Result<(), redb::BackendError> {
        Ok(())
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, redb::BackendError> {
        const CONSISTENT_BYTE: u64 = (1 << 62) + 4;
        Ok(start == Bound::Included(CONSISTENT_BYTE) && end == Bound::Included(CONSISTENT_BYTE))
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let (b, inb) = (at / BLOCK, (at % BLOCK) as usize);
            let n = (BLOCK as usize - inb).min(data.len() - done);
            if !st.blocks.contains_key(&b) {
                let blk = self.base_block(&st, b)?;
                st.blocks.insert(b, blk);
            }
            st.blocks.get_mut(&b).expect("block just inserted")[inb..inb + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        st.len = st.len.max(offset + data.len() as u64);
        Ok(())
    }
}
