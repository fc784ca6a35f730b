//! Hashing: a released (or fsynced) working copy is cut into
//! content-defined chunks ([`crate::chunk`]), each named by its BLAKE3 hash,
//! and stored with its manifest ([`Wc::hash_many`]: many small files to a
//! transaction, big ones each on its own); the priority of the worker threads.
//! Buffers are bounded: a small file ([`SMALL_FILE`]) is read whole, a
//! bigger one streamed through 1 MiB (`chunk_stream`) plus a 1 MiB read buffer.
//!
//! Owns: when a file's content counts as stored (`hashed_gen` catching up
//! with `content_gen`), one hash at a time per inode. Must not touch: FUSE,
//! the group commit (a content transaction is committed non-durably; the
//! next durable group commit covers it).

use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

use redb::Durability;

use crate::chunk;
use crate::inode::lock;
use crate::posix::is_reg;
use crate::store::db::db_errno;
use crate::schema::ChunkRef;
use crate::types::{Errno, Result};
use crate::wc::queue::{FSYNC_HASH_DELAY, HASH_DELAY};
use crate::wc::Wc;

/// Sets the calling thread's CPU priority (`nice`, setpriority(2)) and its
/// best-effort I/O priority level (`io_level` 0–7, ioprio_set(2)).
fn thread_priority(nice: i32, io_level: libc::c_long) {
    // SAFETY: per-thread settings of the calling thread (its tid).
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
        const IOPRIO_WHO_PROCESS: libc::c_long = 1;
        const IOPRIO_CLASS_BE: libc::c_long = 2;
        libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid as libc::c_long, (IOPRIO_CLASS_BE << 13) | io_level);
    }
}

/// Back to the default priorities (nice 0, best-effort I/O level 4) for
/// the calling thread: at shutdown somebody waits for the hashing. Lowering
/// the nice value needs CAP_SYS_NICE (or RLIMIT_NICE); without it the
/// thread stays at nice 5.
pub(crate) fn foreground_priority() {
    thread_priority(0, 4);
}

pub(crate) use crate::store::commit::give_back_memory;

/// Hashing runs in the background: a lower CPU priority (nice 5: about a
/// quarter of a foreground thread's share when they compete, never starved)
/// and the lowest best-effort I/O priority (ioprio_set(2)) for this thread,
/// so that the processes using the workspace go first on a busy machine.
pub(crate) fn background_priority() {
    thread_priority(5, 7);
}



/// A file at most this big is read into memory once and stored from there
/// in a shared transaction ([`Wc::hash_many`]); a bigger one is streamed
/// (bounded buffers) and stored in a transaction of its own.
pub(crate) const SMALL_FILE: u64 = 1 << 20;

/// A shared transaction is committed once it holds this many bytes of
/// small files (or [`crate::wc::queue::BATCH_FILES`] files).
const BATCH_BYTES: u64 = 16 << 20;

/// After hashing this many bytes the worker gives freed memory back to the
/// system (malloc_trim(3)).
pub(crate) const TRIM_AFTER: u64 = 64 << 20;

/// One file read and cut, ready to store.
struct Prepared {
    ino: u64,
    /// The `content_gen` it was read at.
    gen: u64,
    size: u64,
    blocks: u64,
    manifest: Vec<ChunkRef>,
    /// A small file's bytes (the first `size`); `None`: read from `file`.
    data: Option<Vec<u8>>,
    /// A big file's working copy (a small one's is closed once read, so a
    /// batch holds no descriptors).
    file: Option<std::fs::File>,
}

/// What became of one file of [`Wc::hash_many`].
enum Claim {
    /// Hash it: its generation and whether it lives in the local directory.
    Go(u64, bool),
    /// Nothing to do (clean, gone, local-only, or queued again for later).
    Skip,
}

impl Wc<'_> {
    /// Cuts, hashes and stores the working copy of each of `inos` whose
    /// content changed since it was last stored; returns once the manifests
    /// are committed (non-durably; the next durable group commit makes them
    /// durable). Small files ([`SMALL_FILE`]) many to a write transaction, committed
    /// every [`BATCH_BYTES`]; big ones one by one with bounded buffers.
    /// Returns the files that failed (with their error: EIO if the store
    /// refused the content, logged; the working copy's read errors) and the
    /// bytes read.
    /// `now`: no deferral of open files being written ([`Wc::claim`]).
    pub(crate) fn hash_many(&self, inos: &[u64], now: bool) -> (Vec<(u64, Errno)>, u64) {
        let mut failed = Vec::new();
        // A store that met damage is read-only (`store::fault`): the
        // changed bytes stay in their working copies (salvage takes them in).
        if self.store.fault.is_hit() {
            return (inos.iter().map(|&i| (i, Errno(libc::EROFS))).collect(), 0);
        }
        let mut read = 0u64;
        let mut small: Vec<Prepared> = Vec::new();
        let mut small_bytes = 0u64;
        for &ino in inos {
            let (gen, data_local) = match self.claim(ino, now) {
                Claim::Go(g, d) => (g, d),
                Claim::Skip => continue,
            };
            let p = match self.prepare(ino, gen, data_local) {
                Ok(Some(p)) => p,
                Ok(None) => {
                    self.unclaim(ino);
                    continue;
                }
                Err(e) => {
                    self.unclaim(ino);
                    failed.push((ino, e));
                    continue;
                }
            };
            read += p.size;
            if p.data.is_some() {
                small_bytes += p.size;
                small.push(p);
                if small_bytes >= BATCH_BYTES {
                    failed.extend(self.guard_small(std::mem::take(&mut small)));
                    small_bytes = 0;
                }
            } else {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.store_one(&p)));
                if let Err(e) = r.unwrap_or(Err(Errno::EIO)) {
                    failed.push((ino, e));
                }
                self.unclaim(ino);
            }
        }
        failed.extend(self.guard_small(small));
        (failed, read)
    }

    /// [`Wc::store_small`], a redb panic in it (a damaged page: its
    /// transaction marked the store damaged, `store::fault`) answered EIO
    /// for every file of the batch, each unclaimed.
    fn guard_small(&self, items: Vec<Prepared>) -> Vec<(u64, Errno)> {
        let inos: Vec<u64> = items.iter().map(|p| p.ino).collect();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.store_small(items))).unwrap_or_else(|_| {
            inos.iter().map(|&i| {
                self.unclaim(i);
                (i, Errno::EIO)
            }).collect()
        })
    }

    /// Takes `ino` for hashing if it needs it: changed, synced, and nobody
    /// hashes it now (else it is queued again). An open file written in the
    /// last [`FSYNC_HASH_DELAY`] waits until it pauses (unless `now`, or
    /// the queue is closed: shutdown hashes everything).
    fn claim(&self, ino: u64, now: bool) -> Claim {
        let mut st = lock(self.table);
        st.hash_queued.remove(&ino);
        let Some(n) = st.nodes.get_mut(&ino) else { return Claim::Skip };
        if !is_reg(n.rec.mode) || n.local || n.content_gen == n.hashed_gen {
            return Claim::Skip;
        }
        if n.hashing {
            self.hasher.queue_after(&mut st, ino, HASH_DELAY);
            return Claim::Skip;
        }
        if n.opens > 0 && !now && self.hasher.is_open() {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            let mtime = std::time::Duration::new(n.rec.mtime.0.max(0) as u64, n.rec.mtime.1.min(999_999_999));
            if let Some(quiet) = now.checked_sub(mtime).filter(|q| *q < FSYNC_HASH_DELAY) {
                self.hasher.queue_after(&mut st, ino, FSYNC_HASH_DELAY - quiet);
                return Claim::Skip;
            }
        }
        n.hashing = true;
        let go = Claim::Go(n.content_gen, n.data_local);
        st.hashing.insert(ino);
        go
    }

    /// Ends the hashing of `ino` that [`Wc::claim`] began.
    fn unclaim(&self, ino: u64) {
        let mut st = lock(self.table);
        st.hashing.remove(&ino);
        if let Some(n) = st.nodes.get_mut(&ino) {
            n.hashing = false;
        }
    }

    /// Reads and cuts the working copy of `ino` (at generation `gen`):
    /// `None` if it is gone. A small file's bytes are kept.
    fn prepare(&self, ino: u64, gen: u64, data_local: bool) -> Result<Option<Prepared>> {
        let f = match self.dirs.data_dir(data_local).open_ro(&ino.to_string()) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let meta = f.metadata()?;
        let mut size = meta.len();
        let blocks = std::os::unix::fs::MetadataExt::blocks(&meta);
        let mut manifest = Vec::new();
        let mut data = None;
        if size <= SMALL_FILE {
            let mut buf = vec![0u8; size as usize];
            let mut got = 0usize;
            while got < buf.len() {
                match f.read_at(&mut buf[got..], got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.into()),
                }
            }
            // Shrunk meanwhile: store what is there (a later change re-hashes).
            buf.truncate(got);
            size = got as u64;
            for (start, end) in data_extents(&f, size)? {
                chunk::chunk_slice(&buf[start as usize..end as usize], |off, b| {
                    manifest.push(ChunkRef { offset: start + off, len: b.len() as u32, hash: *blake3::hash(b).as_bytes() });
                    Ok::<(), std::convert::Infallible>(())
                })
                .unwrap_or_else(|e| match e {});
            }
            data = Some(buf);
        } else {
            // Only the data extents are cut and hashed (lseek(2) SEEK_DATA /
            // SEEK_HOLE): holes are not in the manifest, and a restore leaves
            // them unwritten (set_len), so a 1 TiB sparse file costs nothing.
            for (start, end) in data_extents(&f, size)? {
                let reader = std::io::Read::take(ReadAt { file: &f, pos: start }, end - start);
                // Chunk sizes by the file's size now (D37: ≥ 1 GiB keeps
                // ~512 KiB chunks); a file that crossed it is cut anew.
                chunk::chunk_stream_with(chunk::params_for(size), std::io::BufReader::with_capacity(1 << 20, reader), |off, b| {
                    manifest.push(ChunkRef { offset: start + off, len: b.len() as u32, hash: *blake3::hash(b).as_bytes() });
                    Ok(())
                })?;
            }
        }
        let file = if data.is_some() { None } else { Some(f) };
        Ok(Some(Prepared { ino, gen, size, blocks, manifest, data, file }))
    }

    /// Is `p` still what the file holds (same generation, still synced)?
    fn current(&self, p: &Prepared) -> bool {
        matches!(lock(self.table).nodes.get(&p.ino), Some(n) if n.content_gen == p.gen && !n.local)
    }

    /// After `p`'s transaction committed: its content counts as stored.
    fn stored(&self, p: &Prepared, dc: i64, db: i64) {
        self.store.content_committed(p.ino, dc, db);
        let mut st = lock(self.table);
        if let Some(n) = st.nodes.get_mut(&p.ino) {
            if n.hashed_gen < p.gen {
                n.hashed_gen = p.gen;
            }
            // Only if nothing changed the file since we read it.
            if n.content_gen == p.gen && (n.rec.size != p.size || n.rec.blocks != p.blocks) {
                n.rec.size = p.size;
                n.rec.blocks = p.blocks;
                st.dirty_inodes.insert(p.ino);
            }
        }
    }

    /// Stores a big file in a transaction of its own; its chunks are read
    /// again from the working copy and must still hash to the manifest.
    fn store_one(&self, p: &Prepared) -> Result<()> {
        let mut txn = self.store.begin_write().map_err(db_errno)?;
        txn.set_durability(Durability::None).map_err(db_errno)?;
        if !self.current(p) {
            let _ = txn.abort();
            return Ok(()); // freed, changed again (a later release re-hashes) or now local-only
        }
        let stored = self.store.put_content(&txn, p.ino, p.size, &p.manifest, |c, buf| match &p.data {
            Some(d) => {
                buf.copy_from_slice(&d[c.offset as usize..c.offset as usize + c.len as usize]);
                true
            }
            None => p.file.as_ref().is_some_and(|f| f.read_exact_at(buf, c.offset).is_ok()) && blake3::hash(buf).as_bytes() == &c.hash,
        });
        match stored {
            Ok(Some((_, dc, db))) => {
                txn.commit().map_err(|e| space_errno(e.into()))?;
                self.stored(p, dc, db);
                Ok(())
            }
            Ok(None) => {
                let _ = txn.abort();
                Ok(())
            }
            Err(e) => {
                let _ = txn.abort();
                tracing::error!("storing content of inode {}: {e}", p.ino);
                Err(space_errno(e))
            }
        }
    }

    /// Stores small files (bytes in memory) in one write transaction; if
    /// it fails, each on its own (so one bad file does not hold back the
    /// others). Unclaims them all. Returns the failures.
    fn store_small(&self, items: Vec<Prepared>) -> Vec<(u64, Errno)> {
        if items.is_empty() {
            return Vec::new();
        }
        let shared = (|| -> std::result::Result<Vec<(usize, i64, i64)>, redb::Error> {
            let mut txn = self.store.begin_write()?;
            txn.set_durability(Durability::None)?;
            let mut done = Vec::new();
            for (i, p) in items.iter().enumerate() {
                if !self.current(p) {
                    continue;
                }
                let d = p.data.as_ref().expect("small files keep their bytes");
                let r = self.store.put_content(&txn, p.ino, p.size, &p.manifest, |c, buf| {
                    buf.copy_from_slice(&d[c.offset as usize..c.offset as usize + c.len as usize]);
                    true
                });
                match r {
                    Ok(Some((_, dc, db))) => done.push((i, dc, db)),
                    Ok(None) => {}
                    Err(e) => {
                        let _ = txn.abort();
                        return Err(e);
                    }
                }
            }
            txn.commit()?;
            Ok(done)
        })();
        let mut failed = Vec::new();
        match shared {
            Ok(done) => {
                for (i, dc, db) in done {
                    self.stored(&items[i], dc, db);
                }
            }
            Err(e) => {
                tracing::warn!("storing {} small files in one transaction: {e}; storing them one by one", items.len());
                for p in &items {
                    if let Err(e) = self.store_one(p) {
                        failed.push((p.ino, e));
                    }
                }
            }
        }
        for p in &items {
            self.unclaim(p.ino);
        }
        failed
    }
}

/// A `Read` over a file from a position, with pread(2) (the file's own
/// offset is left alone).
struct ReadAt<'a> {
    file: &'a std::fs::File,
    pos: u64,
}

impl std::io::Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// The data extents `[start, end)` of the first `size` bytes of `f`, from
/// lseek(2) SEEK_DATA / SEEK_HOLE; the whole range if the host filesystem
/// does not support them.
pub(crate) fn data_extents(f: &std::fs::File, size: u64) -> std::io::Result<Vec<(u64, u64)>> {
    let fd = f.as_raw_fd();
    let seek = |off: u64, whence: i32| -> std::io::Result<Option<u64>> {
        // SAFETY: lseek on a valid fd; the file offset it moves is not used
        // by anyone else (all I/O on working copies is positional).
        let r = unsafe { libc::lseek(fd, off as libc::off_t, whence) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::ENXIO) { Ok(None) } else { Err(e) };
        }
        Ok(Some(r as u64))
    };
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        let start = match seek(pos, libc::SEEK_DATA) {
            Ok(Some(d)) => d,
            Ok(None) => break,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(vec![(0, size)]),
            Err(e) => return Err(e),
        };
        if start >= size {
            break;
        }
        let end = seek(start, libc::SEEK_HOLE)?.unwrap_or(size).min(size);
        if end <= start {
            break;
        }
        out.push((start, end));
        pos = end;
    }
    Ok(out)
}

/// A store error storing a file's content as the errno its caller gets
/// (fsync, a commit's settle): ENOSPC when the disk is full (so the
/// commit can say so), else EIO. Logged.
fn space_errno(e: redb::Error) -> Errno {
    if crate::store::db::is_enospc(&e) {
        tracing::warn!("store: {e}");
        Errno(libc::ENOSPC)
    } else {
        db_errno(e)
    }
}
