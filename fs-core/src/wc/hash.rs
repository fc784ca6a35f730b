//! Hashing: a released (or fsynced) working copy is cut into
//! content-defined chunks ([`crate::chunk`]), each named by its BLAKE3 hash,
//! and stored with its manifest ([`Wc::hash_file`]); the queue of files
//! waiting for it ([`Hasher`]) and the priority of the worker threads.
//!
//! Owns: when a file's content counts as stored (`hashed_gen` catching up
//! with `content_gen`), one hash at a time per inode. Must not touch: FUSE,
//! the group commit (a content transaction is committed non-durably; the
//! next durable group commit covers it).

use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use redb::Durability;

use crate::chunk;
use crate::inode::{lock, State};
use crate::posix::is_reg;
use crate::store::db::db_errno;
use crate::schema::ChunkRef;
use crate::types::{Errno, Result};
use crate::wc::Wc;

/// How long a file released after writing waits before it is hashed (the
/// working copy is the truth meanwhile; fsync hashes at once).
pub(crate) const HASH_DELAY: std::time::Duration = std::time::Duration::from_millis(300);

/// Hashing runs in the background: a lower CPU priority (nice 5: about a
/// quarter of a foreground thread's share when they compete, never starved)
/// and the lowest best-effort I/O priority (ioprio_set(2)) for this thread,
/// so that the processes using the workspace go first on a busy machine.
pub(crate) fn background_priority() {
    // SAFETY: per-thread settings of the calling thread (its tid).
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 5);
        const IOPRIO_WHO_PROCESS: libc::c_long = 1;
        const IOPRIO_CLASS_BE: libc::c_long = 2;
        libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid as libc::c_long, (IOPRIO_CLASS_BE << 13) | 7);
    }
}



/// The queue of files to hash: (inode, not before), read by the workers.
#[derive(Default)]
pub(crate) struct Hasher {
    tx: Mutex<Option<mpsc::Sender<(u64, Instant)>>>,
}

impl Hasher {
    /// Opens the queue; the workers read the returned receiver.
    pub(crate) fn open(&self) -> mpsc::Receiver<(u64, Instant)> {
        let (tx, rx) = mpsc::channel();
        *self.tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        rx
    }

    /// Closes the queue: the workers end once they drained it.
    pub(crate) fn close(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// Queues `ino` for hashing after [`HASH_DELAY`] (once while queued);
    /// after [`Hasher::close`] nothing is queued.
    pub(crate) fn queue(&self, st: &mut State, ino: u64) {
        if st.hash_queued.insert(ino) {
            let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
            match tx.as_ref() {
                Some(tx) if tx.send((ino, std::time::Instant::now() + HASH_DELAY)).is_ok() => {}
                _ => {
                    st.hash_queued.remove(&ino);
                }
            }
        }
    }
}

impl Wc<'_> {
    /// Cuts, hashes and stores the working copy of `ino` if its content
    /// changed since the last time. Returns once the manifest is committed
    /// (non-durably; the next group commit makes it durable).
    pub(crate) fn hash_file(&self, ino: u64) -> Result<()> {
        let hl = {
            let mut st = lock(self.table);
            st.hash_queued.remove(&ino);
            match st.nodes.get(&ino) {
                Some(n) if is_reg(n.rec.mode) && !n.local && n.content_gen != n.hashed_gen => crate::inode::hash_lock(ino),
                _ => return Ok(()),
            }
        };
        let _g = hl.lock().unwrap_or_else(|p| p.into_inner());
        let (gen, data_local) = {
            let st = lock(self.table);
            match st.nodes.get(&ino) {
                Some(n) if !n.local && n.content_gen != n.hashed_gen => (n.content_gen, n.data_local),
                _ => return Ok(()),
            }
        };
        let f = match self.dirs.data_dir(data_local).open_ro(&ino.to_string()) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let mut manifest = Vec::new();
        let size = f.metadata()?.len();
        // Only the data extents are cut and hashed (lseek(2) SEEK_DATA /
        // SEEK_HOLE): holes are not in the manifest, and a restore leaves
        // them unwritten (set_len), so a 1 TiB sparse file costs nothing.
        for (start, end) in data_extents(&f, size)? {
            let reader = std::io::Read::take(ReadAt { file: &f, pos: start }, end - start);
            chunk::chunk_stream(std::io::BufReader::with_capacity(1 << 20, reader), |off, b| {
                manifest.push(ChunkRef { offset: start + off, len: b.len() as u32, hash: *blake3::hash(b).as_bytes() });
                Ok(())
            })?;
        }
        let blocks = f.metadata().map(|m| std::os::unix::fs::MetadataExt::blocks(&m)).unwrap_or(0);
        let mut txn = self.store.begin_write().map_err(db_errno)?;
        txn.set_durability(Durability::None).map_err(db_errno)?;
        {
            let st = lock(self.table);
            match st.nodes.get(&ino) {
                Some(n) if n.content_gen == gen && !n.local => {}
                _ => {
                    let _ = txn.abort();
                    return Ok(()); // freed, changed again (a later release re-hashes) or now local-only
                }
            }
        }
        let stored = self.store.put_content(&txn, ino, size, &manifest, |c, buf| {
            f.read_exact_at(buf, c.offset).is_ok() && blake3::hash(buf).as_bytes() == &c.hash
        });
        match stored {
            Ok(Some((_, dc, db))) => {
                txn.commit().map_err(db_errno)?;
                self.store.content_committed(ino, dc, db);
                let mut st = lock(self.table);
                if let Some(n) = st.nodes.get_mut(&ino) {
                    if n.hashed_gen < gen {
                        n.hashed_gen = gen;
                    }
                    // Only if nothing changed the file since we checked.
                    if n.content_gen == gen && (n.rec.size != size || n.rec.blocks != blocks) {
                        n.rec.size = size;
                        n.rec.blocks = blocks;
                        st.dirty_inodes.insert(ino);
                    }
                }
                Ok(())
            }
            Ok(None) => {
                let _ = txn.abort();
                Ok(())
            }
            Err(e) => {
                let _ = txn.abort();
                tracing::error!("storing content of inode {ino}: {e}");
                Err(Errno::EIO)
            }
        }
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
