//! The daemon's native roots: bind-mounts every native root of the
//! workspace (found at mount time, or made by mkdir later) over its
//! directory in the FUSE mount, on its own thread so that no FUSE worker
//! ever waits for a mount and the walk's own LOOKUPs are served; detaches
//! them all before the FUSE mount goes (unmount, SIGTERM) and one by one
//! on `ringfs unroot`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// `ringfs mount --native-roots`: the mode and, when off, why.
#[derive(Clone, Debug)]
pub struct Mode {
    pub requested: &'static str,
    /// None: on. Some(reason): no bind mounts are placed.
    pub off_reason: Option<String>,
}

#[derive(Default)]
struct State {
    placed: HashMap<u64, native_roots::Placed>,
    /// Per root inode: "mounted", "pending", "unrooted …", "failed: …".
    states: BTreeMap<u64, String>,
    unrooted: HashSet<u64>,
    stopping: bool,
    /// The roots found at mount have had their placement attempted.
    initial_done: bool,
}

/// Sent after the roots found at mount: marks them all attempted.
const INITIAL_DONE: u64 = u64::MAX;

/// The native roots of one mount.
pub struct Roots {
    fs: Arc<fs_core::Fs>,
    mountpoint: PathBuf,
    mode: Mode,
    st: Mutex<State>,
    cv: std::sync::Condvar,
    tx: Mutex<Option<mpsc::Sender<u64>>>,
}

impl Roots {
    /// Starts the mount thread (when the mode is on) and queues every
    /// native root the store already has; from now on `fs` tells us each
    /// new one.
    pub fn start(fs: Arc<fs_core::Fs>, mountpoint: PathBuf, mode: Mode) -> std::io::Result<Arc<Roots>> {
        let roots = Arc::new(Roots {
            fs: fs.clone(),
            mountpoint,
            mode,
            st: Mutex::new(State::default()),
            cv: std::sync::Condvar::new(),
            tx: Mutex::new(None),
        });
        if roots.mode.off_reason.is_some() {
            roots.lock().initial_done = true;
            return Ok(roots);
        }
        let (tx, rx) = mpsc::channel::<u64>();
        for r in fs.native_roots() {
            roots.lock().states.insert(r.ino, "pending".into());
            let _ = tx.send(r.ino);
        }
        let _ = tx.send(INITIAL_DONE);
        {
            // Called by FUSE workers: only a channel send, never our lock.
            let tx = Mutex::new(tx.clone());
            fs.set_root_listener(move |ino| {
                let _ = tx.lock().unwrap_or_else(|p| p.into_inner()).send(ino);
            });
        }
        *roots.tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        let worker = roots.clone();
        std::thread::Builder::new().name("ringfs-roots".into()).spawn(move || {
            while let Ok(ino) = rx.recv() {
                if ino == INITIAL_DONE {
                    worker.lock().initial_done = true;
                    worker.cv.notify_all();
                    continue;
                }
                if worker.lock().stopping {
                    break;
                }
                worker.place(ino);
            }
            worker.lock().initial_done = true;
            worker.cv.notify_all();
        })?;
        Ok(roots)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Places the bind mount of root `ino` (on the roots thread). Holds no
    /// lock while placing: the walk's LOOKUPs are answered by FUSE workers,
    /// which may be telling us about another root meanwhile.
    fn place(&self, ino: u64) {
        {
            let st = self.lock();
            if st.stopping || st.unrooted.contains(&ino) || st.placed.contains_key(&ino) {
                return;
            }
        }
        // The mount root, opened for this placement only: a descriptor kept
        // open would keep a lazily unmounted (umount -l) FUSE mount alive.
        use rustix::fs::{Mode, OFlags};
        let root = match rustix::fs::open(&self.mountpoint, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .and_then(|fd| rustix::fs::fstat(&fd).map(|s| (fd, s.st_dev)))
        {
            Ok(x) => x,
            Err(e) => {
                self.lock().states.insert(ino, format!("failed: opening the mount root: {e}; served by the daemon"));
                return;
            }
        };
        // We are told of a new root before the kernel has the mkdir reply:
        // until it does, the walk may meet the old negative dentry (ENOENT);
        // a parent renamed meanwhile changes the path: look it up each time.
        let mut tries = 0;
        let (r, placed) = loop {
            let Some(r) = self.fs.native_roots().into_iter().find(|r| r.ino == ino) else {
                self.lock().states.remove(&ino);
                return; // removed since
            };
            match native_roots::place(root.0.as_fd(), &r.path, root.1, ino, &r.backing) {
                Err(native_roots::Error::Target { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) && tries < 400 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    if self.lock().stopping {
                        return;
                    }
                }
                p => break (r, p),
            }
        };
        drop(root);
        let mut st = self.lock();
        match placed {
            Ok(p) if st.stopping || st.unrooted.contains(&ino) => {
                drop(st);
                let _ = p.detach();
            }
            Ok(p) => {
                tracing::info!("native root {} mounted from {}", r.path.display(), r.backing.display());
                st.placed.insert(ino, p);
                st.states.insert(ino, "mounted".into());
            }
            Err(e) => {
                tracing::warn!("native root {}: {e}; the daemon serves it", r.path.display());
                st.states.insert(ino, format!("failed: {e}; served by the daemon"));
            }
        }
    }

    /// Waits (at most `limit`) until every root found at mount has had its
    /// bind mount placed or failed: `mount --daemon` returns after that.
    pub fn wait_initial(&self, limit: std::time::Duration) {
        let st = self.lock();
        let _ = self.cv.wait_timeout_while(st, limit, |s| !s.initial_done && !s.stopping);
    }

    /// Detaches every native root (before the FUSE mount is unmounted);
    /// no new ones are placed afterwards.
    pub fn stop(&self) {
        let placed: Vec<native_roots::Placed> = {
            let mut st = self.lock();
            st.stopping = true;
            st.placed.drain().map(|(_, p)| p).collect()
        };
        *self.tx.lock().unwrap_or_else(|p| p.into_inner()) = None;
        for p in placed {
            let path = p.path.clone();
            match p.detach() {
                // Already gone with the whole tree (umount -l of the workspace).
                Err(native_roots::Error::Detach { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => tracing::warn!("native root {}: {e}", path.display()),
                Ok(()) => {}
            }
        }
    }

    /// `ringfs unroot PATH`: detaches the native root at `path` (absolute,
    /// or relative to the mountpoint); the daemon serves it from then on.
    pub fn unroot(&self, path: &Path) -> Result<String, String> {
        let rel = path.strip_prefix(&self.mountpoint).unwrap_or(path);
        let rel = rel.strip_prefix("/").unwrap_or(rel);
        let Some(r) = self.fs.native_roots().into_iter().find(|r| r.path == rel) else {
            return Err(format!("{} is not a native root of {} (see `ringfs status`)", path.display(), self.mountpoint.display()));
        };
        let mut st = self.lock();
        st.unrooted.insert(r.ino);
        st.states.insert(r.ino, "unrooted: served by the daemon".into());
        match st.placed.remove(&r.ino) {
            Some(p) => p.detach().map(|_| format!("detached {}; the daemon serves it now", self.mountpoint.join(rel).display())).map_err(|e| e.to_string()),
            None => Ok(format!("{} was not bind-mounted; the daemon serves it", self.mountpoint.join(rel).display())),
        }
    }

    /// The `native_roots` part of `ringfs status --json`.
    pub fn status(&self) -> Value {
        let list = self.fs.native_roots();
        let st = self.lock();
        json!({
            "mode": self.mode.requested,
            "enabled": self.mode.off_reason.is_none(),
            "reason": self.mode.off_reason.clone().unwrap_or_else(|| "on".into()),
            "roots": list.iter().map(|r| json!({
                "path": self.mountpoint.join(&r.path),
                "backing": r.backing,
                "state": st.states.get(&r.ino).cloned().unwrap_or_else(|| if self.mode.off_reason.is_some() { "served by the daemon (native roots off)".into() } else { "pending".into() }),
            })).collect::<Vec<_>>(),
        })
    }
}
