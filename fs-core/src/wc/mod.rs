//! Working copies: the host file that holds a regular file's bytes while
//! it lives (`STORE/wc/<ino>` for synced files, `LOCAL/<ino>` for
//! local-only ones), read and written by the kernel through passthrough or
//! by the daemon with pread/pwrite.
//!
//! - this module: the two backing directories ([`Dirs`]), opening a working
//!   copy and rebuilding a missing one from the store ([`Wc::open_wc`]),
//!   noticing writes that bypassed the daemon ([`note_bypass`]);
//! - [`pool`]: ready empty backing files for new files, so a create does no
//!   file-system create on the request path;
//! - [`hash`]: cutting and hashing working copies into the store, many
//!   small files to a transaction, and the background priority of the hash
//!   workers;
//! - [`prebuild`]: working copies built ahead of their first open (a lazy
//!   clone's prefetch), and the per-inode guard every rebuild takes;
//! - [`queue`]: the files waiting to be hashed, their delays, the batches
//!   the workers take.
//!
//! Must not touch: FUSE, the group commit, path policy.

pub(crate) mod hash;
pub(crate) mod pool;
pub(crate) mod prebuild;
pub(crate) mod queue;

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::inode::{lock, wc_stamp, OpenFile, State};
use crate::local::BackDir;
use crate::store::db::Store;
use crate::types::Result;

/// The backing directories, used only through their descriptors (confined,
/// see [`BackDir`]).
pub(crate) struct Dirs {
    /// The working-copy directory's path (statfs).
    pub(crate) wc_dir: PathBuf,
    pub(crate) wc: BackDir,
    pub(crate) local: BackDir,
}

impl Dirs {
    /// Where a file's bytes live: the local-only directory or `wc/`.
    pub(crate) fn data_dir(&self, data_local: bool) -> &BackDir {
        if data_local {
            &self.local
        } else {
            &self.wc
        }
    }

    /// Deletes set-aside backing files of removed files, `(inode, in the
    /// local directory)` ([`crate::local::doomed_name`], D76).
    pub(crate) fn unlink_doomed(&self, doomed: Vec<(u64, bool)>) {
        for (ino, data_local) in doomed {
            let _ = self.data_dir(data_local).unlink(&crate::local::doomed_name(ino));
        }
    }
}

/// What opening and hashing working copies needs: the inode table, the
/// store, the backing directories.
pub(crate) struct Wc<'a> {
    pub(crate) table: &'a Mutex<State>,
    pub(crate) store: &'a Store,
    pub(crate) dirs: &'a Dirs,
    /// The hash queue (a file busy hashing is queued again).
    pub(crate) hasher: &'a queue::Hasher,
    /// Who builds which missing working copy now (one builder per inode).
    pub(crate) builds: &'a prebuild::Builds,
}

impl Wc<'_> {
    /// The working copy of a regular file if it is on disk (checked as
    /// [`Wc::open_wc`] checks it), `None` if it is missing: nothing is
    /// restored. Errors: the open's, other than ENOENT.
    pub(crate) fn open_existing(&self, ino: u64) -> Result<Option<File>> {
        let data_local = lock(self.table).node(ino)?.data_local;
        match self.dirs.data_dir(data_local).open_rw(&ino.to_string()) {
            Ok(f) => self.checked(ino, f).map(Some),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens (and if needed restores) the working copy of a regular file.
    pub(crate) fn open_wc(&self, ino: u64) -> Result<File> {
        if let Some(f) = self.open_existing(ino)? {
            return Ok(f);
        }
        let name = ino.to_string();
        // One builder per inode (another open, or the background build of
        // `prebuild`): wait for it, then look again below.
        let _g = self.builds.claim(ino);
        // A rename across the local-only boundary may have moved the bytes
        // between reading the side and opening (`apply_sides` moves them
        // under the lock): look again with the lock held, so that ENOENT
        // means the file is really missing — never rebuild or empty a file
        // that is only elsewhere.
        let (data_local, local, mtime) = {
            let st = lock(self.table);
            let n = st.node(ino)?;
            match self.dirs.data_dir(n.data_local).open_rw(&name) {
                Ok(f) => return Ok(f),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e.into()),
            }
            (n.data_local, n.local, n.rec.mtime)
        };
        let dir = self.dirs.data_dir(data_local);
        if local {
            // Local-only bytes have no copy in the store.
            let f = dir.create(&name, false)?;
            set_mtime(&f, mtime);
            return Ok(f);
        }
        // Missing: rebuild from the manifest, or start empty, in a file
        // that gets its name only once it is whole. Nothing else makes
        // this name while we hold the build guard (it was missing under the
        // table lock); should something have, the restored bytes replace
        // it, as a rename would.
        rebuild(self.store, dir, ino, || Ok(lock(self.table).node(ino)?.rec.size), mtime)
    }

    /// The working copy `f` of `ino` as it was just opened — unless the file
    /// is stored, not open, and the working copy's size is not the stored
    /// size: then it was changed outside ringfs (truncated, replaced), and
    /// it is rebuilt from the store before anything serves it or writes to
    /// it (a warning names it). Checked and rebuilt under the table lock, so
    /// no handle can write to the file meanwhile (it is rare).
    fn checked(&self, ino: u64, f: File) -> Result<File> {
        let len = f.metadata()?.len();
        let st = lock(self.table);
        let n = st.node(ino)?;
        if n.local || n.file.is_some() || n.opens > 0 || n.content_gen != n.hashed_gen || len == n.rec.size {
            return Ok(f);
        }
        let (size, mtime, dir) = (n.rec.size, n.rec.mtime, self.dirs.data_dir(n.data_local));
        tracing::warn!(
            "working copy {}/{ino} is {len} bytes but the stored file is {size}: changed outside ringfs; rebuilt from the store",
            dir.path().display()
        );
        let tmp = format!(".restore-{ino}");
        let g = dir.create(&tmp, true)?;
        self.store.restore_content(ino, &g)?;
        g.set_len(size)?;
        set_mtime(&g, mtime);
        dir.rename_to(&tmp, dir, &ino.to_string())?;
        drop(st);
        Ok(g)
    }
}

/// Writes the stored bytes of `ino` into a new file `dir/<ino>`, whole or
/// not at all: an unnamed file (see [`Staged`]) holding the store's content,
/// cut or extended to `size()` bytes, with times `mtime`, then given the
/// name; a file that has the name already is replaced (the store's bytes
/// win). Used to rebuild a missing working copy ([`Wc::open_wc`]) and to
/// write out the bytes of a file that moves to the local-only side
/// (`fs::sides`, D71). Errors: the store's (EIO: a chunk missing or
/// damaged; a lazy clone's chunk the remote cannot give), `size`'s, I/O;
/// nothing is left behind.
pub(crate) fn rebuild(store: &Store, dir: &BackDir, ino: u64, size: impl FnOnce() -> Result<u64>, mtime: (i64, u32)) -> Result<File> {
    let name = ino.to_string();
    let staged = Staged::new(dir, format!(".restore-{ino}"))?;
    let r = (|| -> Result<()> {
        store.restore_content(ino, &staged.file)?;
        staged.file.set_len(size()?)?;
        set_mtime(&staged.file, mtime);
        match staged.install(dir, &name) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                dir.unlink(&name)?;
                staged.install(dir, &name)?;
            }
            r => r?,
        }
        Ok(())
    })();
    if r.is_err() {
        staged.discard(dir);
    }
    r?;
    Ok(staged.file)
}

/// A working copy being restored before it gets its name: an unnamed file
/// (O_TMPFILE: its inode allocated outside the directory's lock, nothing
/// left by a crash) where the filesystem allows, else a named temporary
/// (`.restore-*`, which recovery removes).
pub(crate) struct Staged {
    pub(crate) file: File,
    /// The named temporary, when O_TMPFILE is not available.
    tmp: Option<String>,
}

impl Staged {
    /// A new empty file in `dir`; `tmp` names the fallback temporary.
    pub(crate) fn new(dir: &BackDir, tmp: String) -> std::io::Result<Staged> {
        match dir.tmpfile() {
            Ok(file) => Ok(Staged { file, tmp: None }),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                ) =>
            {
                Ok(Staged {
                    file: dir.create(&tmp, true)?,
                    tmp: Some(tmp),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Gives the file `name` in `dir`, never replacing anything (EEXIST).
    pub(crate) fn install(&self, dir: &BackDir, name: &str) -> std::io::Result<()> {
        match &self.tmp {
            None => dir.link_tmpfile(&self.file, name),
            Some(t) => dir.rename_noreplace(t, dir, name),
        }
    }

    /// Removes the named temporary of a file not installed (an unnamed one
    /// goes with its last descriptor).
    pub(crate) fn discard(&self, dir: &BackDir) {
        if let Some(t) = &self.tmp {
            let _ = dir.unlink(t);
        }
    }
}

/// Sets a backing file's mtime (atime untouched).
pub(crate) fn set_mtime(f: &File, t: (i64, u32)) {
    let ts = [libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }, libc::timespec { tv_sec: t.0 as _, tv_nsec: t.1 as _ }];
    // SAFETY: futimens reads two timespecs from a valid array.
    unsafe { libc::futimens(f.as_raw_fd(), ts.as_ptr()) };
}

/// Takes in writes that bypassed us (FUSE passthrough): they show in the
/// working copy's size and mtime. Marks the content changed if so.
pub(crate) fn note_bypass(st: &mut State, ino: u64, f: &OpenFile) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = f.file.metadata() else { return };
    let Some(n) = st.nodes.get_mut(&ino) else { return };
    let wm = (m.mtime(), m.mtime_nsec() as u32);
    let stamp = wc_stamp(&m);
    // Any change since we last looked (the coarse host clock can leave a
    // passthrough write's mtime below ours, so compare stamps too).
    let seen_moved = f.seen().replace(stamp).is_some_and(|s| s != stamp);
    let moved = wm > n.rec.mtime || n.rec.size != m.size() || seen_moved;
    // A fork's file whose blocks nobody needed yet (D60) is not changed
    // by a read: they come from its object when needed.
    if moved || (n.rec.blocks != crate::inode::BLOCKS_UNKNOWN && n.rec.blocks != m.blocks()) {
        n.rec.size = m.size();
        n.rec.blocks = m.blocks();
        if wm > n.rec.mtime {
            n.rec.mtime = wm;
            n.rec.ctime = n.rec.ctime.max(wm);
        }
        if moved {
            n.content_gen += 1;
        }
        st.dirty_inodes.insert(ino);
    }
}
