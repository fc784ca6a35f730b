//! Read-only opens served from the store's chunks, with no working copy
//! (D67): a read-only open (no O_TRUNC) of a stored, synced regular file
//! whose working copy is missing — a lazy clone's file, a fork's file not
//! yet touched, one whose working copy was removed — gets a handle that
//! reads the file's chunks from the packs (remote-only ones fetched at the
//! open, through the lazy clone's source) instead of restoring a working
//! copy first: no host file is created for a read.
//!
//! Such a handle follows the file: once the inode has a working copy open
//! (a writer's open restored it) or its content changed (`content_gen`
//! moved: a truncate, a write), its reads come from the working copy, as
//! every other handle's do. Nothing here changes the file: no working copy,
//! no hashing, no size or block count; atime moves as on any read.
//!
//! Owns: which opens are served from chunks ([`Fs::open_from_chunks`]) and
//! their reads. Must not touch: names, the store's tables (the chunks come
//! through [`crate::store::stored`]), the kernel's I/O modes (the FUSE
//! adapter gives these handles no passthrough).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::fs::Fs;
use crate::inode::{Chunked, Handle, OpenFile};
use crate::posix::*;
use crate::types::*;

/// Opens served from chunks by this process, and when the last one was
/// (milliseconds since the Unix epoch; 0: none yet).
static OPENS: AtomicU64 = AtomicU64::new(0);
static LAST_OPEN_MS: AtomicU64 = AtomicU64::new(0);

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// How many opens this process served from the store's chunks, with no
/// working copy (D67), since it started.
pub fn chunk_served_opens() -> u64 {
    OPENS.load(Ordering::Relaxed)
}

/// How long ago this process last served an open from chunks (None: never).
/// The working-copy builder waits while this is short (a reader is busy).
pub fn since_chunk_open() -> Option<std::time::Duration> {
    match LAST_OPEN_MS.load(Ordering::Relaxed) {
        0 => None,
        t => Some(std::time::Duration::from_millis(now_ms().saturating_sub(t))),
    }
}

/// What [`Fs::open_from_chunks`] did with an open.
pub(super) enum FirstOpen {
    /// Served from chunks: the new handle.
    Chunks(u64),
    /// Open it the usual way ([`Fs::attach`]), with the working copy when
    /// it was opened already.
    Usual(Option<std::fs::File>),
}

impl Fs {
    /// open(2) of `ino` with `flags`, served from the store's chunks when
    /// it can be: read-only, no O_TRUNC, a linked synced regular file with
    /// no working copy open or on disk. Otherwise the usual way, with the
    /// working copy when this looked for it and found it on disk (opened
    /// once, for [`Fs::attach`]). Remote-only chunks are fetched now (EIO if
    /// that fails, as a restore's fetch would).
    pub(super) fn open_from_chunks(&self, ino: u64, flags: u32) -> Result<FirstOpen> {
        if flags as i32 & libc::O_ACCMODE != libc::O_RDONLY || flags as i32 & libc::O_TRUNC != 0 {
            return Ok(FirstOpen::Usual(None));
        }
        let gen = {
            let st = self.inner.lock();
            let n = st.node(ino)?;
            if !is_reg(n.rec.mode) || n.file.is_some() || n.local || n.data_local || n.rec.nlink == 0 {
                return Ok(FirstOpen::Usual(None));
            }
            n.content_gen
        };
        if let Some(f) = self.inner.wc().open_existing(ino)? {
            return Ok(FirstOpen::Usual(Some(f)));
        }
        let manifest = self.inner.store.stored_manifest(ino, "read")?;
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        // Changed or opened for writing meanwhile: the usual way.
        if n.file.is_some() || n.content_gen != gen || n.local || n.data_local {
            return Ok(FirstOpen::Usual(None));
        }
        n.opens += 1;
        let chunks = Arc::new(Chunked { gen, manifest, last: Mutex::new(None) });
        st.handles.insert(fh, Handle { ino, flags, file: None, chunks: Some(chunks), dir_end: u64::MAX });
        OPENS.fetch_add(1, Ordering::Relaxed);
        LAST_OPEN_MS.store(now_ms(), Ordering::Relaxed);
        Ok(FirstOpen::Chunks(fh))
    }

    /// Is `fh` a handle served from chunks (no working copy of its own; the
    /// FUSE adapter must not register a passthrough backing file for it)?
    pub fn served_from_chunks(&self, fh: u64) -> bool {
        self.inner.lock().handles.get(&fh).is_some_and(|h| h.chunks.is_some())
    }

    /// `fh`'s inode and chunks, if it is served from chunks.
    pub(super) fn chunk_handle(&self, fh: u64) -> Option<(u64, Arc<Chunked>)> {
        let st = self.inner.lock();
        let h = st.handles.get(&fh)?;
        h.chunks.clone().map(|c| (h.ino, c))
    }

    /// The working copy a handle served from chunks must read now: the
    /// inode's open one, or — once the file changed since the open — its
    /// working copy opened (restored if needed) and kept as the inode's
    /// open one. None: the chunks are still the file's bytes; then also
    /// the file's size.
    pub(super) fn chunk_handle_wc(&self, ino: u64, c: &Chunked) -> Result<(Option<Arc<OpenFile>>, u64)> {
        let (file, changed, size) = {
            let st = self.inner.lock();
            let n = st.node(ino)?;
            (n.file.clone(), n.content_gen != c.gen, n.rec.size)
        };
        if file.is_some() || !changed {
            return Ok((file, size));
        }
        let f = self.inner.open_wc(ino)?;
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        let f = match &n.file {
            Some(f) => f.clone(),
            None => {
                let f = Arc::new(OpenFile::new(f));
                n.file = Some(f.clone());
                f
            }
        };
        Ok((Some(f), size))
    }

    /// READ through handle `c` of `ino` served from chunks: at most `size`
    /// bytes at `offset`, fewer only at the end of the file; holes read as
    /// zeros. From the working copy once the file has one open or changed.
    pub(super) fn read_chunked(&self, ino: u64, c: &Chunked, offset: u64, size: u32) -> Result<Vec<u8>> {
        let (wc, file_size) = self.chunk_handle_wc(ino, c)?;
        if let Some(f) = wc {
            let r = pread_full(&f.file, offset, size)?;
            self.touch_atime(ino);
            return Ok(r);
        }
        let end = offset.saturating_add(size as u64).min(file_size);
        if offset >= end {
            self.touch_atime(ino);
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; (end - offset) as usize];
        let m = &c.manifest;
        let first = m.partition_point(|r| r.offset + r.len as u64 <= offset);
        let idx: Vec<usize> = (first..m.len()).take_while(|&i| m[i].offset < end).collect();
        let cached = c.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let is_cached = |i: usize| cached.as_ref().is_some_and(|(j, _)| *j == i);
        let need: Vec<crate::schema::ChunkRef> = idx.iter().filter(|&&i| !is_cached(i)).map(|&i| m[i]).collect();
        let mut got = self.inner.store.read_stored_chunks(ino, &need)?.into_iter();
        let mut last = None;
        for i in idx {
            let bytes = match &cached {
                Some((j, b)) if *j == i => b.clone(),
                _ => Arc::new(got.next().ok_or(Errno(libc::EIO))?),
            };
            let r = &m[i];
            let from = offset.max(r.offset);
            let to = end.min(r.offset + bytes.len() as u64);
            if from < to {
                buf[(from - offset) as usize..(to - offset) as usize].copy_from_slice(&bytes[(from - r.offset) as usize..(to - r.offset) as usize]);
            }
            last = Some((i, bytes));
        }
        if last.is_some() {
            *c.last.lock().unwrap_or_else(|p| p.into_inner()) = last;
        }
        self.touch_atime(ino);
        Ok(buf)
    }

    /// lseek(2) through a handle served from chunks while the file has no
    /// working copy: SEEK_SET and SEEK_END computed, SEEK_DATA / SEEK_HOLE
    /// answered as for a file with no holes (its data ends at its size;
    /// ENXIO past it).
    pub(super) fn lseek_chunked(size: u64, offset: u64, whence: u32) -> Result<u64> {
        match whence as i32 {
            libc::SEEK_SET => Ok(offset),
            libc::SEEK_END => Ok(size.saturating_add(offset)),
            libc::SEEK_DATA if offset < size => Ok(offset),
            libc::SEEK_HOLE if offset < size => Ok(size),
            libc::SEEK_DATA | libc::SEEK_HOLE => err(libc::ENXIO),
            _ => err(libc::EINVAL),
        }
    }
}
