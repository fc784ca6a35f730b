//! `fuse-uring`: the FUSE session of ringfs.
//!
//! Layers, bottom first, numbered as in the `LAYERS` table of
//! `scripts/check-layout.py`, which checks that a module imports only from
//! its own layer or the ones below it, never from above:
//! 0. [`abi`]: the kernel's wire structs and constants
//!    (`include/uapi/linux/fuse.h`, protocol 7.45), nothing else.
//! 1. [`request`]: the one request decoder, raw bytes → [`Operation`],
//!    bounds-checked (malformed input gives an error, answered EIO, never a
//!    panic). [`stats`]: per-opcode request counters ([`OpStats`]).
//! 2. [`fs`]: the [`Filesystem`] trait and the values it speaks in, and the
//!    default slow-request policy ([`is_slow_default`]).
//! 3. [`reply`]: the one reply encoder, a reusable [`ReplyBuf`]
//!    (`fuse_out_header` + body) plus the READDIR/READDIRPLUS sinks. With
//!    `abi` and `request` it is the protocol, but it encodes the trait's
//!    values and implements its sinks, hence sits above `fs`. `slow` (private):
//!    the pool of threads both transports hand slow requests to.
//! 4. [`dispatch`]: [`Dispatcher`] ties decoder, trait and encoder together
//!    for every transport; [`negotiate`] answers INIT from [`InitOptions`].
//! 5. Transport foundations. [`dev`]: the `/dev/fuse` device ([`FuseDev`],
//!    the read → dispatch → write loop, [`clone_fd`], [`Notifier`],
//!    passthrough backing ids [`backing_open`] / [`backing_close`]).
//!    [`transport`]: choosing ([`Transport`]) and reporting
//!    ([`TransportInfo`]) the transport, and the facts that rests on
//!    ([`uring_available`], [`possible_cpus`], aborting a connection).
//! 6. [`ring`]: the FUSE-over-io_uring transport (one queue per possible
//!    CPU, slow requests handed to the pool) on a [`FuseDev`].
//! 7. [`session`]: [`mount`] (`mount(2)`, INIT, starting and probing the
//!    ring when [`MountOptions::transport`] allows it, else or on failure
//!    `/dev/fuse`), [`Session::run`], [`unmount`] / [`Unmounter`].
//!
//! # Transport neutrality
//!
//! A transport only moves bytes. `/dev/fuse` reads one whole request into a buffer
//! and calls `Dispatcher::dispatch(&request, &mut reply) -> bool` (true: send the
//! reply), then `write(2)`s [`ReplyBuf::as_bytes`]. The FUSE-over-io_uring transport
//! ([`ring`]) holds a request in three places — the in-header in the ring
//! entry's `in_out` area, the first argument struct in `op_in`, the remaining
//! arguments in the payload buffer — and calls
//! [`Dispatcher::dispatch_parts`]`(in_out, op_in, payload, &mut reply)`; it then
//! copies [`ReplyBuf::header`] into `in_out` and [`ReplyBuf::body`] into the
//! payload (`payload_sz = body().len()`) and commits. Both paths run the same
//! decoder ([`request::Args`] abstracts where the argument bytes are), the same
//! filesystem call and the same encoder.
//!
//! # Choosing and reporting the transport
//!
//! [`MountOptions::transport`] is [`Transport::Auto`] (default),
//! [`Transport::Uring`] or [`Transport::Dev`] (parse `"auto"|"uring"|"dev"`
//! with `FromStr`); [`MountOptions::queue_depth`] (default 4) sets the
//! registered entries per queue. [`mount`] starts the ring (one queue per
//! possible CPU, threads started right there), probes it and, if it does not
//! work, aborts that connection and remounts on `/dev/fuse` (`Auto`) or
//! returns an error (`Uring`): never a hung mount. [`Session::transport_info`]
//! returns a [`TransportInfo`]: `kind` ("io_uring" | "/dev/fuse"), `queues`,
//! `depth`, `payload_size`, `requested`, and `reason` (why `/dev/fuse` when
//! `Auto` did not get io_uring). Its `Display` is one line for `ringfs status`.
//! `Session::run(fs, workers)` is unchanged: with io_uring, `workers` is the
//! size of the pool for slow requests ([`Filesystem::is_slow`]).
//!
//! # Example
//!
//! ```no_run
//! # use std::sync::Arc;
//! # struct MyFs; impl fuse_uring::Filesystem for MyFs {}
//! let opts = fuse_uring::MountOptions { transport: "auto".parse().unwrap(), ..Default::default() };
//! let session = fuse_uring::mount("/mnt/ws".as_ref(), &opts)?;
//! println!("transport: {}", session.transport_info()); // e.g. "io_uring (2 queues x 4 entries)"
//! let stats = session.stats();        // Arc<OpStats>, e.g. for `ringfs stats`
//! let notifier = session.notifier();  // cache invalidations
//! let unmounter = session.unmounter();
//! let t = std::thread::spawn(move || session.run(Arc::new(MyFs), 2));
//! // ... later:
//! unmounter.unmount()?;
//! t.join().unwrap()?;
//! # Ok::<(), std::io::Error>(())
//! ```

#![warn(missing_docs)]

pub mod abi;
pub mod dev;
pub mod dispatch;
pub mod fs;
pub mod reply;
pub mod request;
pub mod ring;
pub mod session;
mod slow;
pub mod stats;
pub mod transport;

pub use dispatch::{negotiate, Dispatcher, InitDecision, InitOptions};
pub use fs::*;
pub use reply::{DirentPlusWriter, DirentWriter, ReplyBuf};
pub use request::{Operation, ParseError, Request};
pub use dev::{backing_close, backing_open, clone_fd, FuseDev, Notifier};
pub use session::{dev_readers, mount, remount, unmount, MountAtime, MountOptions, OpStatsHandle, Session, Unmounter};
pub use stats::{OpCount, OpStats};
pub use transport::{possible_cpus, uring_available, Transport, TransportInfo, TransportKind};
