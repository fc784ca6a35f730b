//! `fuse-uring`: the FUSE session of ringfs.
//!
//! Layers, each its own module, with hard edges:
//! - [`abi`]: the kernel's wire structs and constants (`include/uapi/linux/fuse.h`,
//!   protocol 7.45), nothing else.
//! - [`request`]: the one request decoder, raw bytes → [`Operation`]. Bounds-checked:
//!   malformed input gives an error (answered EIO), never a panic.
//! - [`reply`]: the one reply encoder, a reusable [`ReplyBuf`] (`fuse_out_header` +
//!   body) plus the READDIR/READDIRPLUS sinks.
//! - [`dispatch`]: [`Dispatcher`] ties them to the [`Filesystem`] trait; [`negotiate`]
//!   answers INIT.
//! - [`session`]: the `/dev/fuse` transport — [`mount`], [`Session::run`] worker
//!   threads on cloned fds, [`unmount`], [`Notifier`], passthrough backing ids.
//! - [`ring`]: the FUSE-over-io_uring transport (one queue per possible CPU,
//!   a worker pool for slow requests), started by [`mount`] when
//!   [`MountOptions::transport`] allows it.
//! - [`transport`]: choosing ([`Transport`]) and reporting ([`TransportInfo`],
//!   [`Session::transport_info`]) the transport.
//! - [`stats`]: per-opcode request counters ([`OpStats`]).
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
pub mod stats;
pub mod transport;

pub use dispatch::{negotiate, Dispatcher, InitDecision, InitOptions};
pub use fs::*;
pub use reply::{DirentPlusWriter, DirentWriter, ReplyBuf};
pub use request::{Operation, ParseError, Request};
pub use dev::{backing_close, backing_open, clone_fd, FuseDev, Notifier};
pub use session::{mount, unmount, MountOptions, OpStatsHandle, Session, Unmounter};
pub use stats::{OpCount, OpStats};
pub use transport::{possible_cpus, uring_available, Transport, TransportInfo, TransportKind};
