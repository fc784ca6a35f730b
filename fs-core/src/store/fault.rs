//! Damage found while a store is served (docs/SEMANTICS.md "Damaged
//! stores"): redb panics on some damaged pages (`unreachable!` in its
//! B-tree code) and returns corruption errors on others. Either, in any
//! transaction of the live [`Store`](crate::store::db::Store), turns the
//! store read-only for the rest of the mount instead of killing the thread
//! (or the daemon) that met it.
//!
//! Owns: [`Tx`], the handle every `Store::begin_write`/`begin_read` gives
//! out — the one choke point every daemon path (FUSE requests, the control
//! socket, group commits, hash workers, the final commit) reaches redb
//! through: a redb panic unwinding through it marks the store damaged;
//! [`Fault`], the store's damage state; the process's panic hook (redb's
//! panics inside a [`Tx`] or under `readonly::guarded` are not printed: the
//! damage is logged as one line instead, [`Fault`]'s); which redb errors
//! are damage ([`is_damage`]). Must not touch: the inode table, working
//! copies, FUSE. Where the panic is caught (so the thread lives on) is the
//! caller's boundary: the transports answer EIO, `ringfs`'s control socket
//! answers a refusal, the group-commit and hash threads go on, `Fs::shutdown`
//! skips the final commit. (A redb panic inside a [`Tx`] is not printed, so
//! a caller without such a boundary loses its message; `Fs::damaged` names
//! the damage all the same.)

use std::cell::{Cell, RefCell};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};

use crate::types::StoreDamaged;

thread_local! {
    /// Set while `readonly::guarded` runs on this thread: its panics are reported, not printed.
    pub(crate) static QUIET: Cell<bool> = const { Cell::new(false) };
    /// Store transactions ([`Tx`]) alive on this thread: a redb panic
    /// inside one is the store's damage, logged by [`Fault`], not printed.
    static IN_TX: Cell<u32> = const { Cell::new(0) };
    /// The last redb panic on this thread (message and place), for the
    /// [`Tx`] it unwinds through.
    static REDB_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Whether `file` (a panic's location) is in redb's source.
fn in_redb(file: &str) -> bool {
    file.contains("/redb-") || file.starts_with("redb-")
}

/// Installs (once per process) the panic hook: a panic located in redb's
/// source is remembered for the [`Tx`] it unwinds through and, inside one
/// (or under `guarded`), not printed; every other panic is printed by the
/// hook that was there before.
pub(crate) fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let redb = info.location().filter(|l| in_redb(l.file()));
            if let Some(l) = redb {
                let file = l.file().rsplit_once("/redb-").map(|(_, f)| format!("redb-{f}")).unwrap_or_else(|| l.file().to_string());
                let msg = info.payload().downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| info.payload().downcast_ref::<String>().cloned()).unwrap_or_else(|| "panic".into());
                REDB_PANIC.with(|p| *p.borrow_mut() = Some(format!("redb panicked on a damaged page ({msg} at {file}:{})", l.line())));
            }
            let quiet = QUIET.with(|q| q.get()) || (redb.is_some() && IN_TX.with(|n| n.get()) > 0);
            if !quiet {
                prev(info);
            }
        }));
    });
}

/// Forgets this thread's last redb panic (one `guarded` caught: it is
/// reported there, and must not be taken for a later panic's).
pub(crate) fn forget_panic() {
    REDB_PANIC.with(|p| p.borrow_mut().take());
}

/// A redb error that says the database is damaged (not an I/O error, which
/// reopens the handle, nor a misuse; a transaction poisoned by a panic was
/// noted by its [`Tx`], one poisoned by an I/O error is not damage).
pub(crate) fn is_damage(e: &redb::Error) -> bool {
    matches!(e, redb::Error::Corrupted(_))
}

/// Whether a store met damage while served, and what it was.
#[derive(Default)]
pub(crate) struct Fault {
    /// Set at the first damage: writes are refused from then on.
    hit: AtomicBool,
    /// What the first damage was (a redb panic's message, an error).
    first: Mutex<Option<String>>,
    /// The damage named by table, once resolved (and logged).
    named: OnceLock<StoreDamaged>,
    /// Held while the damage is being named (one scan).
    naming: Mutex<()>,
}

impl Fault {
    /// Records damage (`what` happened); the first one is kept.
    pub(crate) fn note(&self, what: String) {
        let mut f = self.first.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(what);
        }
        self.hit.store(true, Ordering::SeqCst);
    }

    /// Records `e` when it is damage ([`is_damage`]); true if it was.
    pub(crate) fn note_error(&self, e: &redb::Error, doing: &str) -> bool {
        if is_damage(e) {
            self.note(format!("{e} ({doing})"));
        }
        is_damage(e)
    }

    /// Whether the store met damage (cheap: for every write request).
    pub(crate) fn is_hit(&self) -> bool {
        self.hit.load(Ordering::Relaxed)
    }

    /// The damage, named: `name` (run once, outside every transaction)
    /// finds the table, given what was first noted; logged once.
    pub(crate) fn named(&self, name: impl FnOnce(&str) -> StoreDamaged) -> Option<StoreDamaged> {
        if !self.is_hit() {
            return None;
        }
        if let Some(d) = self.named.get() {
            return Some(d.clone());
        }
        let _g = self.naming.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = self.named.get() {
            return Some(d.clone());
        }
        let first = self.first.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_default();
        let d = name(&first);
        tracing::error!("{d}");
        Some(self.named.get_or_init(|| d).clone())
    }
}

/// A transaction of the live store (`T` is redb's write or read
/// transaction, reached through `Deref`). A redb panic that unwinds through
/// it marks the store damaged ([`Fault::note`]).
pub(crate) struct Tx<T> {
    inner: Option<T>,
    fault: Arc<Fault>,
}

impl<T> Tx<T> {
    /// `t`, watched for the store whose damage state is `fault`.
    pub(crate) fn new(t: T, fault: Arc<Fault>) -> Tx<T> {
        install_hook();
        IN_TX.with(|n| n.set(n.get() + 1));
        Tx { inner: Some(t), fault }
    }

    /// Runs `f` on the transaction, taken out of the handle, while the
    /// handle still watches (`commit`, `abort`, which consume it).
    fn consume<R>(mut self, f: impl FnOnce(T) -> R) -> R {
        let t = self.inner.take().expect("a live transaction");
        f(t)
    }
}

impl Tx<redb::WriteTransaction> {
    /// [`redb::WriteTransaction::commit`]; a corruption error is damage.
    pub(crate) fn commit(self) -> Result<(), redb::CommitError> {
        let fault = self.fault.clone();
        let r = self.consume(|t| t.commit());
        match &r {
            Err(redb::CommitError::Storage(redb::StorageError::Corrupted(m))) => fault.note(format!("redb: {m} (committing)")),
            _ => {}
        }
        r
    }

    /// [`redb::WriteTransaction::abort`].
    pub(crate) fn abort(self) -> Result<(), redb::StorageError> {
        self.consume(|t| t.abort())
    }
}

impl<T> Deref for Tx<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.inner.as_ref().expect("a live transaction")
    }
}

impl<T> DerefMut for Tx<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.inner.as_mut().expect("a live transaction")
    }
}

impl<T> Drop for Tx<T> {
    fn drop(&mut self) {
        IN_TX.with(|n| n.set(n.get().saturating_sub(1)));
        if std::thread::panicking() {
            if let Some(what) = REDB_PANIC.with(|p| p.borrow_mut().take()) {
                self.fault.note(what);
            }
        }
        // The transaction itself is dropped after this (redb leaves the
        // database usable after a panic inside a write transaction).
    }
}
