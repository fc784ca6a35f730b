//! Working copies built ahead of their first open (a lazy clone's
//! prefetch, docs/DECISIONS.md D58): a [`WcPlan`] lists the stored files
//! that have no working copy and which of their chunks are still
//! remote-only; as batches of chunks arrive it says which files became
//! complete, and [`Wc::prebuild`] builds their working copies from the
//! packs off the request path, so the first open finds one.
//!
//! One build per file at a time: [`Builds`] is the per-inode guard that
//! [`Wc::open_wc`] takes too before it rebuilds a missing working copy; a
//! build writes an unnamed file (O_TMPFILE; else `.restore-<ino>-pre`) and
//! links it into place without replacing anything (under the inode table's
//! lock, after checking the file is unchanged), so a half-written working
//! copy is never served.
//!
//! Owns: the plan, the guard, the background build. Must not know: remotes,
//! batches, FUSE.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crate::inode::lock;
use crate::posix::is_reg;
use crate::schema::CHUNKS;
use crate::store::db::db_errno;
use crate::store::remote::REMOTE_PACK;
use crate::types::Result;
use crate::wc::{set_mtime, Staged, Wc};

/// Lowers the calling thread's CPU and I/O priority to the hash workers'
/// (nice 5, lowest best-effort I/O level): for a thread that builds
/// working copies in the background, so first opens go first.
pub fn background_priority() {
    crate::wc::hash::background_priority()
}

/// The inodes whose working copy is being built now (by an open or in the
/// background), one builder each.
#[derive(Default)]
pub(crate) struct Builds {
    busy: Mutex<HashSet<u64>>,
    cv: Condvar,
    /// Working copies built ahead of their first open since the mount.
    pub(crate) built: AtomicU64,
}

/// Held while building the working copy of one inode; dropping it lets
/// the next builder of that inode in.
pub(crate) struct BuildGuard<'a> {
    builds: &'a Builds,
    ino: u64,
}

impl Builds {
    /// Waits until nobody builds `ino`'s working copy, then claims it.
    pub(crate) fn claim(&self, ino: u64) -> BuildGuard<'_> {
        let mut b = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while !b.insert(ino) {
            b = self.cv.wait(b).unwrap_or_else(|p| p.into_inner());
        }
        BuildGuard { builds: self, ino }
    }
}

impl Drop for BuildGuard<'_> {
    fn drop(&mut self) {
        let mut b = self.builds.busy.lock().unwrap_or_else(|p| p.into_inner());
        b.remove(&self.ino);
        self.builds.cv.notify_all();
    }
}

/// Stored files without a working copy, waiting for their remote-only
/// chunks: built from [`crate::Fs::wc_plan`], fed with the hashes of the
/// chunks stored since ([`WcPlan::stored`]).
#[derive(Default, Debug)]
pub struct WcPlan {
    /// Remote-only chunk → the planned files that use it.
    waiting: HashMap<[u8; 32], Vec<u64>>,
    /// Planned file → how many of its distinct chunks are still remote-only
    /// (0: ready to build).
    left: HashMap<u64, usize>,
}

impl WcPlan {
    /// Notes that the chunks `hashes` are local now; returns the planned
    /// files that have no remote-only chunk left (each returned once).
    pub fn stored<'h>(&mut self, hashes: impl IntoIterator<Item = &'h [u8; 32]>) -> Vec<u64> {
        let mut ready = Vec::new();
        for h in hashes {
            for ino in self.waiting.remove(h).unwrap_or_default() {
                if let Some(n) = self.left.get_mut(&ino) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.left.remove(&ino);
                        ready.push(ino);
                    }
                }
            }
        }
        ready
    }

    /// The planned files whose chunks were all local when planned (taken
    /// out of the plan).
    pub fn take_ready(&mut self) -> Vec<u64> {
        let mut r: Vec<u64> = self
            .left
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(i, _)| *i)
            .collect();
        for i in &r {
            self.left.remove(i);
        }
        r.sort_unstable();
        r
    }

    /// Every file still in the plan (taken out of it), e.g. after the
    /// prefetch ended: those whose chunks a first open fetched.
    pub fn rest(&mut self) -> Vec<u64> {
        self.waiting.clear();
        let mut r: Vec<u64> = self.left.drain().map(|(i, _)| i).collect();
        r.sort_unstable();
        r
    }

    /// How many files are still in the plan.
    pub fn len(&self) -> usize {
        self.left.len()
    }

    /// Whether the plan is empty.
    pub fn is_empty(&self) -> bool {
        self.left.is_empty()
    }
}

/// A linked, synced regular file whose bytes are all stored (unchanged
/// since its last hash) and which has no working copy open: what a
/// background build ([`Wc::prebuild`]) or a page cache fill ([`Wc::fill`])
/// may start from.
fn stored_without_open_wc(n: &crate::inode::Node) -> bool {
    is_reg(n.rec.mode) && !n.local && !n.data_local && n.file.is_none() && n.content_gen == n.hashed_gen && n.rec.nlink > 0
}

impl Wc<'_> {
    /// The plan of the stored regular files that have no working copy (see
    /// [`WcPlan`]). Errors: the store's (EIO).
    pub(crate) fn plan(&self) -> Result<WcPlan> {
        let inos: Vec<u64> = {
            let st = lock(self.table);
            st.nodes
                .iter()
                .filter(|(_, n)| {
                    is_reg(n.rec.mode)
                        && !n.local
                        && !n.data_local
                        && n.file.is_none()
                        && n.rec.nlink > 0
                        && n.rec.size > 0
                })
                .map(|(i, _)| *i)
                .collect()
        };
        let mut plan = WcPlan::default();
        let rtx = self.store.begin_read().map_err(db_errno)?;
        let chunks = rtx.open_table(CHUNKS).map_err(db_errno)?;
        for ino in inos {
            if self.dirs.wc.exists(&ino.to_string()) {
                continue;
            }
            let Ok(Some(m)) = crate::live::read_tx(&rtx, ino) else {
                continue;
            };
            let mut seen = HashSet::new();
            let mut remote = 0;
            for c in &m {
                if !seen.insert(c.hash) {
                    continue;
                }
                if let Some((REMOTE_PACK, ..)) = chunks
                    .get(&c.hash[..])
                    .map_err(db_errno)?
                    .map(|g| g.value())
                {
                    plan.waiting.entry(c.hash).or_default().push(ino);
                    remote += 1;
                }
            }
            plan.left.insert(ino, remote);
        }
        Ok(plan)
    }

    /// Builds the working copy of `ino` from the packs if it still has
    /// none, is a stored regular file nobody has open, and none of its
    /// chunks is remote-only (nothing is fetched here). Returns whether it
    /// built one. Takes the same per-inode guard as [`Wc::open_wc`]; the
    /// result is renamed into place only if the file did not change
    /// meanwhile and nothing took its name (else it is removed).
    pub(crate) fn prebuild(&self, ino: u64) -> Result<bool> {
        let name = ino.to_string();
        let _g = self.builds.claim(ino);
        let rec = {
            let st = lock(self.table);
            let Ok(n) = st.node(ino) else {
                return Ok(false);
            };
            if !stored_without_open_wc(n) {
                return Ok(false);
            }
            (n.rec.size, n.rec.mtime, n.content_gen)
        };
        if self.dirs.wc.exists(&name) {
            return Ok(false);
        }
        // Only from local chunks: a file with a remote-only chunk waits.
        if self.local_manifest(ino)?.is_none() {
            return Ok(false);
        }
        let dir = &self.dirs.wc;
        // Unnamed until whole; the fallback's name is not open_wc's
        // (recovery removes both: `.restore-` names).
        let staged = Staged::new(dir, format!(".restore-{ino}-pre"))?;
        let f = &staged.file;
        let built = (|| -> Result<bool> {
            self.store.restore_content(ino, f)?;
            f.set_len(rec.0)?;
            set_mtime(f, rec.1);
            let st = lock(self.table);
            let Ok(n) = st.node(ino) else {
                return Ok(false);
            };
            if n.local
                || n.data_local
                || n.file.is_some()
                || n.content_gen != rec.2
                || n.rec.size != rec.0
                || n.rec.mtime != rec.1
                || n.rec.nlink == 0
            {
                return Ok(false);
            }
            match staged.install(dir, &name) {
                Ok(()) => Ok(true),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
                Err(e) => Err(e.into()),
            }
        })();
        if !matches!(built, Ok(true)) {
            staged.discard(dir);
        }
        if matches!(built, Ok(true)) {
            self.builds.built.fetch_add(1, Ordering::Relaxed);
        }
        built
    }

    /// The live manifest of `ino` when every chunk it names is in a local
    /// pack (None: no live manifest — a fork's deferred file — or a chunk
    /// still remote-only).
    fn local_manifest(&self, ino: u64) -> Result<Option<Vec<crate::schema::ChunkRef>>> {
        let rtx = self.store.begin_read().map_err(db_errno)?;
        let Ok(Some(m)) = crate::live::read_tx(&rtx, ino) else {
            return Ok(None);
        };
        let chunks = rtx.open_table(CHUNKS).map_err(db_errno)?;
        for c in &m {
            if let Some((REMOTE_PACK, ..)) = chunks.get(&c.hash[..]).map_err(db_errno)?.map(|g| g.value()) {
                return Ok(None);
            }
        }
        Ok(Some(m))
    }

    /// Hands `put` the bytes of `ino` read from its local chunks, for the
    /// FUSE adapter to put in the kernel's page cache ahead of the file's
    /// first read (FUSE_NOTIFY_STORE; DECISIONS D79), when what the kernel
    /// would cache for the file is exactly those bytes: a linked, stored,
    /// synced regular file of 1..=`max` bytes the kernel holds (lookup
    /// count above 0), with no working copy (on disk or open) and no open
    /// handle — so its next read-only open is served from the same chunks
    /// with FOPEN_KEEP_CACHE, and a writer's open (which builds a working
    /// copy) waits for the per-inode guard held here. `put` runs with that
    /// guard and no other lock. Returns Ok(None) when the file does not
    /// qualify (nothing read, `put` not called), else Ok(Some(changed)):
    /// `changed` when the file's content moved while `put` ran (a path that
    /// takes no guard): the caller must then drop the pages it stored.
    /// Errors: the store's or `put`'s (EIO; a damaged chunk is logged).
    ///
    /// `known`: chunks the caller holds in memory, checked against their
    /// hashes already (the prefetch's batches): taken from there instead of
    /// the packs.
    pub(crate) fn fill(&self, ino: u64, max: u64, known: &HashMap<[u8; 32], bytes::Bytes>, put: impl FnOnce(&[u8]) -> std::io::Result<()>) -> Result<Option<bool>> {
        let _g = self.builds.claim(ino);
        let qualifies = |n: &crate::inode::Node| stored_without_open_wc(n) && n.opens == 0 && n.lookups > 0 && (1..=max).contains(&n.rec.size);
        let (size, gen) = {
            let st = lock(self.table);
            let Ok(n) = st.node(ino) else { return Ok(None) };
            if !qualifies(n) {
                return Ok(None);
            }
            (n.rec.size, n.content_gen)
        };
        if self.dirs.wc.exists(&ino.to_string()) {
            return Ok(None);
        }
        let Some(m) = self.local_manifest(ino)? else { return Ok(None) };
        let mut buf = vec![0u8; size as usize];
        // A chunk past the size (a shrink not stored yet) is cut.
        let mut copy = |c: &crate::schema::ChunkRef, b: &[u8]| {
            let (at, end) = (c.offset as usize, (c.offset as usize + b.len()).min(buf.len()));
            if at < end {
                buf[at..end].copy_from_slice(&b[..end - at]);
            }
        };
        let mut rest = Vec::new();
        for c in m {
            match known.get(&c.hash).filter(|b| b.len() == c.len as usize) {
                Some(b) => copy(&c, b),
                None => rest.push(c),
            }
        }
        self.store.each_stored_chunk(ino, "page cache fill", &rest, |c, b| {
            copy(c, b);
            Ok(())
        })?;
        {
            let st = lock(self.table);
            let Ok(n) = st.node(ino) else { return Ok(None) };
            if !qualifies(n) || n.content_gen != gen || n.rec.size != size {
                return Ok(None);
            }
        }
        put(&buf)?;
        let st = lock(self.table);
        Ok(Some(st.node(ino).map_or(true, |n| n.content_gen != gen || n.rec.size != size || n.file.is_some())))
    }
}
