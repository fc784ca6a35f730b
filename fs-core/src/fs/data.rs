//! The file-data operations of [`Fs`]: open, create and O_TMPFILE (a new
//! regular file's backing file), read, write, flush, release, fsync, fallocate,
//! lseek, copy_file_range, and the working-copy descriptor handed to the
//! kernel for passthrough ([`Fs::backing_fd`]).
//!
//! Owns: file handles and their access modes, backing files of new and
//! new and freed inodes (`new_backing_file`, `finish_free`: a freed file's
//! is set aside, and deleted after a durable commit), when a changed file is
//! queued for hashing (release, fsync: neither reads the file). Must not touch:
//! names — create only looks its name up and asks
//! [`namespace`](super::namespace) to make or take it back (`make_in`,
//! `unmake`) — or the store's tables.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use redb::Durability;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::fs::Fs;
use crate::host::is_host_id;
use crate::fs::chunked::FirstOpen;
use crate::posix::*;
use crate::types::*;
use crate::host::copy_range;
use crate::inode::{wc_stamp, Freed, Handle, OpenFile};
use crate::store::db::db_errno;
use crate::wc::queue::FSYNC_HASH_DELAY;
use crate::wc::{note_bypass, set_mtime};

impl Fs {
    /// The backing file of a regular file `make_in` just made: the pooled
    /// one (`pooled`), or a new one in its side's directory.
    pub(super) fn new_backing_file(&self, ino: u64, pooled: bool) -> Result<File> {
        let (data_local, mtime) = {
            let st = self.inner.lock();
            let n = st.node(ino)?;
            (n.data_local, n.rec.mtime)
        };
        let f = self.inner.data_dir(data_local).create(&ino.to_string(), !pooled)?;
        if !pooled {
            // A file made just now is newer than our timestamps; only
            // writes that bypass us may make it newer.
            set_mtime(&f, mtime);
        }
        Ok(f)
    }

    /// Sets aside the backing file of a freed regular file: renamed to
    /// `.doomed-<inode>` in its directory now, deleted after the durable
    /// commit that records the free ([`crate::inode::State::drop_after_commit`],
    /// D76). Until then a crash finds it: recovery puts it back if the
    /// store still names the file, else deletes it. A file with no backing
    /// file (never opened, served from the store) has nothing to set aside.
    pub(super) fn finish_free(&self, f: Option<Freed>) {
        let Some(f) = f.filter(|f| f.regular) else { return };
        self.inner.set_aside(f.ino, f.data_local);
    }

    /// Attaches a new handle to `ino`, opening its working copy if this is
    /// the first handle. Returns the handle.
    pub(super) fn attach(&self, ino: u64, flags: u32, fresh: Option<File>) -> Result<(u64, Option<Arc<OpenFile>>)> {
        let (mode, existing) = {
            let st = self.inner.lock();
            let n = st.node(ino)?;
            (n.rec.mode, n.file.clone())
        };
        let file = if is_reg(mode) {
            Some(match existing {
                Some(f) => f,
                None => {
                    let f = match fresh {
                        Some(f) => f,
                        None => self.inner.open_wc(ino)?,
                    };
                    Arc::new(OpenFile::new(f))
                }
            })
        } else {
            None
        };
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        let mut st = self.inner.lock();
        let n = st.node_mut(ino)?;
        let file = match (&n.file, file) {
            (Some(f), Some(_)) => Some(f.clone()),
            (None, Some(f)) => {
                *f.seen() = f.file.metadata().ok().map(|m| wc_stamp(&m));
                n.file = Some(f.clone());
                Some(f)
            }
            (_, None) => None,
        };
        n.opens += 1;
        st.handles.insert(fh, Handle { ino, flags, file: file.clone(), chunks: None, dir_end: u64::MAX });
        Ok((fh, file))
    }

    pub(super) fn truncate_on_open(&self, ino: u64, file: &Option<Arc<OpenFile>>) -> Result<()> {
        if let Some(f) = file {
            f.file.set_len(0)?;
            let t = now();
            let mut st = self.inner.lock();
            let n = st.node_mut(ino)?;
            n.rec.size = 0;
            n.rec.blocks = 0;
            n.rec.mtime = t;
            n.rec.ctime = t;
            n.content_gen += 1;
            st.touch_inode(ino);
        }
        Ok(())
    }

    /// open(2) of an existing inode: returns a file handle. Honours
    /// O_TRUNC (even with O_RDONLY, as ext4) and remembers O_APPEND and the
    /// access mode. EISDIR when asking to write a directory.
    pub fn open(&self, _c: &Caller, ino: u64, flags: u32) -> Result<u64> {
        if self.inner.host.serves(ino) {
            return self.inner.host.open(ino, flags);
        }
        {
            let st = self.inner.lock();
            let n = st.node(ino)?;
            if is_dir(n.rec.mode) && can_write(flags) {
                return err(libc::EISDIR);
            }
            may_open(n.rec.flags, flags)?;
        }
        // A read-only open of a stored file with no working copy: served
        // from its chunks, no working copy made (D67).
        let fresh = match self.open_from_chunks(ino, flags)? {
            FirstOpen::Chunks(fh) => return Ok(fh),
            FirstOpen::Usual(f) => f,
        };
        let (fh, file) = self.attach(ino, flags, fresh)?;
        if flags as i32 & libc::O_TRUNC != 0 {
            if let Err(e) = self.truncate_on_open(ino, &file) {
                let _ = self.release(fh);
                return Err(e);
            }
        }
        Ok(fh)
    }

    /// open(2) with O_CREAT: creates a regular file `name` (+1 lookup) and
    /// opens it. If it exists: EEXIST with O_EXCL, EISDIR for a directory,
    /// else opens it (honouring O_TRUNC).
    pub fn create(&self, c: &Caller, parent: u64, name: &OsStr, mode: u32, flags: u32) -> Result<(Attr, u64)> {
        if self.inner.host.serves(parent) {
            return self.inner.host.create(c, parent, name.as_bytes(), mode, flags);
        }
        let existing = {
            let mut st = self.inner.lock();
            st.live_dir(parent)?;
            match st.child(parent, name.as_bytes()) {
                Some((ino, _)) => {
                    if flags as i32 & libc::O_EXCL != 0 {
                        return err(libc::EEXIST);
                    }
                    if is_dir(st.node(ino)?.rec.mode) {
                        return err(libc::EISDIR);
                    }
                    may_open(st.node(ino)?.rec.flags, flags)?;
                    st.node_mut(ino)?.lookups += 1;
                    st.note_name(ino, parent, name.as_bytes());
                    Some(ino)
                }
                None => None,
            }
        };
        let (ino, pooled) = match existing {
            Some(ino) => (ino, false),
            None => {
                let (a, pooled) = self.make_in(c, parent, Some(name), S_IFREG | (mode & 0o7777), 0, None, true)?;
                (a.ino, pooled)
            }
        };
        let r = (|| {
            let fresh = match existing {
                None => Some(self.new_backing_file(ino, pooled)?),
                Some(_) => None,
            };
            let (fh, file) = self.attach(ino, flags, fresh)?;
            if existing.is_some() && flags as i32 & libc::O_TRUNC != 0 {
                self.truncate_on_open(ino, &file)?;
            }
            Ok((self.attr_now(ino)?, fh))
        })();
        if r.is_err() {
            if existing.is_none() {
                // A failed creat(2) (no space for the backing file) leaves no name.
                self.unmake(parent, name, ino);
            } else {
                self.forget(ino, 1);
            }
        }
        r
    }

    /// open(2) with O_TMPFILE in directory `parent`: a regular file with no
    /// name (link count 0, +1 lookup), opened. link(2) can name it unless
    /// `flags` has O_EXCL; otherwise it is freed at its last release and
    /// FORGET, and after a crash recovery frees it (it has no links). Its
    /// bytes are never hashed while it has no name. Local-only if `parent`
    /// is; in a native root's tree it is the host's O_TMPFILE.
    pub fn tmpfile(&self, c: &Caller, parent: u64, mode: u32, flags: u32) -> Result<(Attr, u64)> {
        if self.inner.host.serves(parent) {
            return self.inner.host.tmpfile(c, parent, mode, flags);
        }
        let (a, pooled) = self.make_in(c, parent, None, S_IFREG | (mode & 0o7777), 0, None, true)?;
        let ino = a.ino;
        if let Ok(n) = self.inner.lock().node_mut(ino) {
            n.linkable = flags as i32 & libc::O_EXCL == 0;
        }
        let r = (|| {
            let fresh = self.new_backing_file(ino, pooled)?;
            let (fh, _) = self.attach(ino, flags, Some(fresh))?;
            Ok((self.attr_now(ino)?, fh))
        })();
        if r.is_err() {
            self.forget(ino, 1);
        }
        r
    }

    pub(super) fn handle(&self, fh: u64) -> Result<(u64, u32, Arc<OpenFile>)> {
        let st = self.inner.lock();
        let h = st.handles.get(&fh).ok_or(Errno(libc::EBADF))?;
        match &h.file {
            Some(f) => Ok((h.ino, h.flags, f.clone())),
            // Served from chunks (D67): read-only.
            None if h.chunks.is_some() => err(libc::EBADF),
            None => err(libc::EINVAL),
        }
    }

    /// pread(2) through a handle: at most `size` bytes, fewer only at end of file.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        if is_host_id(fh) {
            return self.inner.host.read(fh, offset, size);
        }
        let (ino, flags, f) = {
            let st = self.inner.lock();
            let h = st.handles.get(&fh).ok_or(Errno(libc::EBADF))?;
            match (&h.file, &h.chunks) {
                (Some(f), _) => (h.ino, h.flags, f.clone()),
                (None, Some(c)) => {
                    let (ino, c) = (h.ino, c.clone());
                    drop(st);
                    return self.read_chunked(ino, &c, offset, size);
                }
                (None, None) => return err(libc::EINVAL),
            }
        };
        if !can_read(flags) {
            return err(libc::EBADF);
        }
        let buf = pread_full(&f.file, offset, size)?;
        self.touch_atime(ino);
        Ok(buf)
    }

    /// The atime policy ([`Atime`], from [`Config::atime`] or the last
    /// [`Fs::set_atime`]).
    pub fn atime(&self) -> Atime {
        Atime::from_u8(self.inner.atime.load(Ordering::Relaxed))
    }

    /// Changes the atime policy (a remount with noatime, strictatime,
    /// relatime, or read-only, which reads as noatime).
    pub fn set_atime(&self, atime: Atime) {
        self.inner.atime.store(atime.as_u8(), Ordering::Relaxed);
    }

    /// After a read: relatime (as ext4 mounts by default) moves atime when it
    /// is not newer than mtime/ctime or is a day old, strictatime always,
    /// noatime never.
    pub(super) fn touch_atime(&self, ino: u64) {
        let mode = self.atime();
        if mode == Atime::Noatime {
            return;
        }
        let t = now();
        let mut g = self.inner.lock();
        let st = &mut *g;
        if let Some(n) = st.nodes.get_mut(&ino) {
            let r = &mut n.rec;
            if r.flags & crate::schema::FS_NOATIME_FL != 0 {
                return; // chattr +A
            }
            let due = match mode {
                Atime::Strictatime => r.atime != t,
                _ => r.atime <= r.mtime || r.atime <= r.ctime || r.atime.0 + 86400 <= t.0,
            };
            if due {
                r.atime = t;
                // A fork's deferred tree: no change of its own (D60).
                match st.lazy_atime.as_mut() {
                    Some(a) => a.insert(ino),
                    None => st.dirty_inodes.insert(ino),
                };
            }
        }
    }

    /// pwrite(2) through a handle (at end of file for O_APPEND handles).
    /// Returns the bytes written; updates mtime/ctime. EBADF on a
    /// read-only handle.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        if is_host_id(fh) {
            return self.inner.host.write(fh, offset, data);
        }
        // An append-only inode takes every write at its end, whatever the
        // handle says now (fcntl(F_SETFL) can drop O_APPEND without asking
        // us, and page writeback of a shared mapping carries offsets).
        let (ino, flags, f, append_only) = {
            let st = self.inner.lock();
            let h = st.handles.get(&fh).ok_or(Errno(libc::EBADF))?;
            let f = match &h.file {
                Some(f) => f.clone(),
                None if h.chunks.is_some() => return err(libc::EBADF),
                None => return err(libc::EINVAL),
            };
            let ao = st.nodes.get(&h.ino).is_some_and(|n| n.rec.flags & crate::schema::FS_APPEND_FL != 0);
            (h.ino, h.flags, f, ao)
        };
        if !can_write(flags) {
            return err(libc::EBADF);
        }
        let append = flags as i32 & libc::O_APPEND != 0 || append_only;
        let guard = if append { Some(f.append.lock().unwrap_or_else(|p| p.into_inner())) } else { None };
        let offset = if append { f.file.metadata()?.len() } else { offset };
        f.file.write_all_at(data, offset)?;
        drop(guard);
        let t = now();
        let mut g = self.inner.lock();
        let st = &mut *g;
        if let Some(n) = st.nodes.get_mut(&ino) {
            if !data.is_empty() {
                n.rec.size = n.rec.size.max(offset + data.len() as u64);
            }
            n.rec.mtime = t;
            n.rec.ctime = t;
            n.content_gen += 1;
            st.dirty_inodes.insert(ino);
        }
        Ok(data.len() as u32)
    }

    /// close(2) of one descriptor: nothing to do (data is hashed at release).
    pub fn flush(&self, fh: u64) -> Result<()> {
        if is_host_id(fh) {
            return Ok(());
        }
        let st = self.inner.lock();
        st.handles.get(&fh).map(|_| ()).ok_or(Errno(libc::EBADF))
    }

    /// The last close of an open file description. Returns at once; a
    /// changed file is queued for hashing. Frees an unlinked inode whose
    /// last handle this was.
    pub fn release(&self, fh: u64) -> Result<()> {
        if is_host_id(fh) {
            return self.inner.host.release(fh);
        }
        let (freed, last) = {
            let mut st = self.inner.lock();
            let h = st.handles.remove(&fh).ok_or(Errno(libc::EBADF))?;
            let ino = h.ino;
            let Some(n) = st.nodes.get_mut(&ino) else { return Ok(()) };
            n.opens = n.opens.saturating_sub(1);
            let last = if n.opens == 0 { n.file.take() } else { None };
            // Writes that bypassed us (FUSE passthrough) show in the working
            // copy's size and mtime.
            if let Some(f) = h.file.as_ref().filter(|_| can_write(h.flags)) {
                note_bypass(&mut st, ino, f);
            }
            let n = st.nodes.get_mut(&ino).unwrap();
            let dirty = n.content_gen != n.hashed_gen && n.rec.nlink > 0;
            if dirty {
                self.inner.queue_hash(&mut st, ino);
            }
            (st.maybe_free(ino), last)
        };
        drop(last);
        self.finish_free(freed);
        Ok(())
    }

    /// fsync(2)/fdatasync(2): makes the caller's bytes durable without
    /// reading the file: fdatasync(2) (`datasync`) or fsync(2) of the
    /// working copy, an fsync(2) of its directory if a working copy was made
    /// there since the last one ([`crate::local::BackDir::sync_entries`]),
    /// then a durable group commit of the pending metadata — unless all that
    /// is pending is sizes and times of files a durable commit already holds
    /// ([`crate::inode::State::only_data_pending`]): recovery after a crash
    /// takes those from the working copies, durable now. The content is queued for hashing ([`FSYNC_HASH_DELAY`]); until it is
    /// stored the working copy is the truth, and recovery re-hashes it after
    /// a crash (docs/SEMANTICS.md, "Durability"). Errors: the working
    /// copy's fsync errors (EIO), EIO if the commit fails, EBADF.
    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<()> {
        if is_host_id(fh) {
            return self.inner.host.fsync(fh, datasync);
        }
        let (ino, f, data_local) = {
            let mut st = self.inner.lock();
            let h = st.handles.get(&fh).ok_or(Errno(libc::EBADF))?;
            let (ino, f) = (h.ino, h.file.clone());
            if let Some(f) = &f {
                note_bypass(&mut st, ino, f);
            }
            (ino, f, st.node(ino)?.data_local)
        };
        let file = match f {
            Some(f) => Some(f),
            None => match self.inner.data_dir(data_local).open_ro(&ino.to_string()) {
                Ok(file) => Some(Arc::new(OpenFile::new(file))),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
                Err(e) => return Err(e.into()),
            },
        };
        if let Some(f) = file {
            if datasync {
                f.file.sync_data()?;
            } else {
                f.file.sync_all()?;
            }
        }
        self.inner.data_dir(data_local).sync_entries()?;
        {
            let mut st = self.inner.lock();
            let Some(n) = st.nodes.get(&ino) else { return Ok(()) };
            if !n.local && n.content_gen != n.hashed_gen && n.rec.nlink > 0 {
                self.inner.hasher.queue_after(&mut st, ino, FSYNC_HASH_DELAY);
            }
            // What is pending is only sizes and times of inodes the store
            // holds: recovery takes those from the working copies, which
            // are durable now. No commit (the next group commit writes them).
            if st.only_data_pending(ino) {
                return Ok(());
            }
        }
        self.inner.commit(Durability::Immediate, true, None).map_err(db_errno)?;
        Ok(())
    }

    /// fsync(2) on a directory: a durable commit of all pending metadata.
    pub fn fsyncdir(&self, _fh: u64) -> Result<()> {
        if is_host_id(_fh) {
            return self.inner.host.fsync(_fh, false);
        }
        self.sync_metadata()
    }

    /// Commits all pending metadata durably now (what fsyncdir does; a
    /// mount with `dirsync` or `sync` asks for it after each change).
    pub fn sync_metadata(&self) -> Result<()> {
        self.inner.commit(Durability::Immediate, true, None).map_err(db_errno)
    }

    /// fallocate(2) through a handle: mode 0, FALLOC_FL_KEEP_SIZE,
    /// FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE, FALLOC_FL_ZERO_RANGE (with
    /// or without KEEP_SIZE), FALLOC_FL_COLLAPSE_RANGE and
    /// FALLOC_FL_INSERT_RANGE, done on the working copy (its filesystem's
    /// errors, e.g. EINVAL for unaligned ranges); anything else EOPNOTSUPP.
    /// The kernel's FUSE client decides which of these reach the daemon
    /// (docs/SEMANTICS.md).
    pub fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: u32) -> Result<()> {
        if is_host_id(fh) {
            return self.inner.host.fallocate(fh, offset, length, mode);
        }
        let keep = libc::FALLOC_FL_KEEP_SIZE as u32;
        let punch = libc::FALLOC_FL_PUNCH_HOLE as u32;
        let zero = libc::FALLOC_FL_ZERO_RANGE as u32;
        let collapse = libc::FALLOC_FL_COLLAPSE_RANGE as u32;
        let insert = libc::FALLOC_FL_INSERT_RANGE as u32;
        // fallocate(2)'s valid combinations; the working copy's filesystem
        // does the work (and its EINVAL for unaligned collapse/insert ranges).
        if ![0, keep, punch | keep, zero, zero | keep, collapse, insert].contains(&mode) {
            return err(libc::EOPNOTSUPP);
        }
        if length == 0 {
            return err(libc::EINVAL);
        }
        let (ino, flags, f) = self.handle(fh)?;
        if !can_write(flags) {
            return err(libc::EBADF);
        }
        {
            // vfs_fallocate(): nothing on an immutable file, only plain
            // preallocation on an append-only one.
            let st = self.inner.lock();
            let iflags = st.node(ino)?.rec.flags;
            may_change(iflags)?;
            if mode & !keep != 0 {
                may_unlink(iflags)?;
            }
        }
        let r = unsafe { libc::fallocate(f.file.as_raw_fd(), mode as i32, offset as i64, length as i64) };
        if r != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let m = f.file.metadata()?;
        let t = now();
        let mut g = self.inner.lock();
        let st = &mut *g;
        if let Some(n) = st.nodes.get_mut(&ino) {
            use std::os::unix::fs::MetadataExt;
            n.rec.size = m.size();
            n.rec.blocks = m.blocks();
            n.rec.ctime = t;
            // Only preallocation beyond the end (KEEP_SIZE alone) leaves the
            // contents, hence mtime, as they were.
            if mode != keep {
                n.rec.mtime = t;
            }
            n.content_gen += 1;
            st.dirty_inodes.insert(ino);
        }
        Ok(())
    }

    /// lseek(2) through a handle: SEEK_DATA / SEEK_HOLE answered from the
    /// working copy (ENXIO past the end); SEEK_SET/SEEK_END computed;
    /// others EINVAL.
    pub fn lseek(&self, fh: u64, offset: u64, whence: u32) -> Result<u64> {
        if is_host_id(fh) {
            return self.inner.host.lseek(fh, offset, whence);
        }
        let f = match self.chunk_handle(fh) {
            // Served from chunks: the working copy once there is one.
            Some((ino, c)) => match self.chunk_handle_wc(ino, &c)? {
                (Some(f), _) => f,
                (None, size) => return Fs::lseek_chunked(size, offset, whence),
            },
            None => self.handle(fh)?.2,
        };
        match whence as i32 {
            libc::SEEK_SET => Ok(offset),
            libc::SEEK_END => Ok(f.file.metadata()?.len().saturating_add(offset)),
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                // pread-based I/O never uses the fd's position, so seeking the
                // shared fd is harmless.
                let r = unsafe { libc::lseek(f.file.as_raw_fd(), offset as i64, whence as i32) };
                if r < 0 {
                    Err(std::io::Error::last_os_error().into())
                } else {
                    Ok(r as u64)
                }
            }
            _ => err(libc::EINVAL),
        }
    }

    /// copy_file_range(2) between two open handles; returns bytes copied
    /// (0 at end of input). EBADF for a wrong access mode.
    pub fn copy_file_range(&self, fh_in: u64, off_in: u64, fh_out: u64, off_out: u64, len: u64) -> Result<u64> {
        match (is_host_id(fh_in), is_host_id(fh_out)) {
            (true, true) => {
                let host = &self.inner.host;
                let (a, b) = (host.handle_fd(fh_in).ok_or(Errno(libc::EBADF))?, host.handle_fd(fh_out).ok_or(Errno(libc::EBADF))?);
                return copy_range(a, off_in, b, off_out, len);
            }
            (false, false) => {}
            // Across a native root: the kernel falls back to read + write.
            _ => return err(libc::EOPNOTSUPP),
        }
        if self.chunk_handle(fh_in).is_some() {
            // The source is served from chunks (D67): read, then write.
            let (_, fout, dst) = self.handle(fh_out)?;
            if !can_write(fout) {
                return err(libc::EBADF);
            }
            let data = self.read(fh_in, off_in, len.min(1 << 20) as u32)?;
            dst.file.write_all_at(&data, off_out)?;
            let n = data.len() as u64;
            return self.copied(fh_out, off_out, n);
        }
        let (_, fin, src) = self.handle(fh_in)?;
        let (_, fout, dst) = self.handle(fh_out)?;
        if !can_read(fin) || !can_write(fout) {
            return err(libc::EBADF);
        }
        let mut oi = off_in as i64;
        let mut oo = off_out as i64;
        let len = len.min(1 << 30) as usize;
        let r = unsafe { libc::copy_file_range(src.file.as_raw_fd(), &mut oi, dst.file.as_raw_fd(), &mut oo, len, 0) };
        let n = if r >= 0 {
            r as u64
        } else {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EXDEV) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => {
                    let mut buf = vec![0u8; len.min(1 << 20)];
                    let got = src.file.read_at(&mut buf, off_in)?;
                    dst.file.write_all_at(&buf[..got], off_out)?;
                    got as u64
                }
                _ => return Err(e.into()),
            }
        };
        self.copied(fh_out, off_out, n)
    }

    /// After copy_file_range wrote `n` bytes at `off_out` through `fh_out`:
    /// the size, times and content generation of its inode. Returns `n`.
    fn copied(&self, fh_out: u64, off_out: u64, n: u64) -> Result<u64> {
        if n > 0 {
            let t = now();
            let mut st = self.inner.lock();
            let ino_out = st.handles.get(&fh_out).map(|h| h.ino).unwrap_or(0);
            if let Some(nd) = st.nodes.get_mut(&ino_out) {
                nd.rec.size = nd.rec.size.max(off_out + n);
                nd.rec.mtime = t;
                nd.rec.ctime = t;
                nd.content_gen += 1;
                st.dirty_inodes.insert(ino_out);
            }
        }
        Ok(n)
    }

    /// The working-copy file behind an open regular-file handle, for FUSE
    /// passthrough (register it as the backing file). The fd stays valid
    /// until the handle's inode has no open handles left.
    pub fn backing_fd(&self, fh: u64) -> Option<std::os::unix::io::RawFd> {
        if is_host_id(fh) {
            return self.inner.host.handle_fd(fh);
        }
        self.handle(fh).ok().map(|(_, _, f)| f.file.as_raw_fd())
    }
}

/// O_WRONLY or O_RDWR.
pub(crate) fn can_write(flags: u32) -> bool {
    let acc = flags as i32 & libc::O_ACCMODE;
    acc == libc::O_WRONLY || acc == libc::O_RDWR
}

/// O_RDONLY or O_RDWR.
pub(crate) fn can_read(flags: u32) -> bool {
    let acc = flags as i32 & libc::O_ACCMODE;
    acc == libc::O_RDONLY || acc == libc::O_RDWR
}
