//! Transport microbenchmark: FUSE request round trips through `/dev/fuse`
//! vs FUSE-over-io_uring, in the same run, on the same tiny in-memory
//! filesystem (so only the transport differs).
//!
//! Workloads, each with 1 and 2 parallel clients (threads):
//! - `stat`: `stat(2)` of a file whose attribute timeout is 0 (one GETATTR
//!   per call; the dentry stays cached);
//! - `create+unlink`: create (and close) a new file, then unlink it (LOOKUP,
//!   CREATE, FLUSH, UNLINK; RELEASE is asynchronous, and declared cheap by
//!   this filesystem's `is_slow`, so io_uring serves it inline);
//! - `read 4KiB`: `pread` of 4 KiB from a file opened with FOPEN_DIRECT_IO,
//!   passthrough off (one READ per call, no page cache);
//! - `write + fdatasync`: WRITE then FSYNC, which the io_uring transport
//!   hands to its worker pool (measures that hop).
//!
//! Both mounts are up at once and every round measures both transports back
//! to back (alternating which goes first), so background load hits both
//! alike. Reported: the median over rounds of µs per operation as one client
//! sees it (round time / ops of that client).
//!
//! Run (root, enable_uring=Y): `scripts/bench-transport.sh` or
//! `cargo run --release -p fuse-uring --example transport_bench [rounds] [ops-per-round]`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use fuse_uring::abi::{FOPEN_DIRECT_IO, FUSE_ROOT_ID};
use fuse_uring::*;

const DATA_LEN: usize = 1 << 20;

/// A flat directory of files; attribute timeout 0, entry timeout 60 s.
struct BenchFs {
    names: Mutex<HashMap<Vec<u8>, u64>>,
    next: AtomicU64,
    data: Vec<u8>,
}

const DATA_INO: u64 = 2;

impl BenchFs {
    fn new() -> Self {
        BenchFs {
            names: Mutex::new(HashMap::from([(b"data".to_vec(), DATA_INO)])),
            next: AtomicU64::new(3),
            data: (0..DATA_LEN).map(|i| (i % 253) as u8).collect(),
        }
    }
    fn attr(&self, ino: u64) -> Attr {
        let (mode, size, nlink) = if ino == FUSE_ROOT_ID {
            (libc::S_IFDIR | 0o755, 0, 2)
        } else if ino == DATA_INO {
            (libc::S_IFREG | 0o644, DATA_LEN as u64, 1)
        } else {
            (libc::S_IFREG | 0o644, 0, 1)
        };
        Attr { ino, mode, size, nlink, blksize: 4096, ..Default::default() }
    }
    fn entry(&self, ino: u64) -> Entry {
        Entry { attr: self.attr(ino), generation: 0, entry_timeout: Duration::from_secs(60), attr_timeout: Duration::ZERO }
    }
}

impl Filesystem for BenchFs {
    fn lookup(&self, _: &RequestCtx, _: u64, name: &OsStr) -> Result<Entry> {
        match self.names.lock().unwrap().get(name.as_bytes()) {
            Some(&ino) => Ok(self.entry(ino)),
            None => Err(Errno(libc::ENOENT)),
        }
    }
    fn getattr(&self, _: &RequestCtx, ino: u64, _: Option<u64>) -> Result<AttrReply> {
        Ok(AttrReply { attr: self.attr(ino), timeout: Duration::ZERO })
    }
    fn create(&self, _: &RequestCtx, _: u64, name: &OsStr, _: u32, _: u32, _: u32) -> Result<(Entry, Opened)> {
        let ino = self.next.fetch_add(1, Ordering::Relaxed);
        self.names.lock().unwrap().insert(name.as_bytes().to_vec(), ino);
        Ok((self.entry(ino), Opened::default()))
    }
    fn unlink(&self, _: &RequestCtx, _: u64, name: &OsStr) -> Result<()> {
        self.names.lock().unwrap().remove(name.as_bytes()).map(drop).ok_or(Errno(libc::ENOENT))
    }
    fn open(&self, _: &RequestCtx, _: u64, _: u32) -> Result<Opened> {
        Ok(Opened { fh: 0, open_flags: FOPEN_DIRECT_IO, backing_id: 0 })
    }
    fn read(&self, _: &RequestCtx, _: u64, _: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let s = (offset as usize).min(DATA_LEN);
        Ok(self.data[s..(s + size as usize).min(DATA_LEN)].to_vec())
    }
    fn flush(&self, _: &RequestCtx, _: u64, _: u64, _: u64) -> Result<()> {
        Ok(())
    }
    fn release(&self, _: &RequestCtx, _: u64, _: u64, _: u32) -> Result<()> {
        Ok(())
    }
    fn write(&self, _: &RequestCtx, _: u64, _: u64, _: u64, data: &[u8], _: u32) -> Result<u32> {
        Ok(data.len() as u32)
    }
    fn fsync(&self, _: &RequestCtx, _: u64, _: u64, _: bool) -> Result<()> {
        Ok(())
    }
    /// RELEASE is trivial here: serve it inline (default: on the pool).
    fn is_slow(&self, opcode: u32, size: u32) -> bool {
        opcode != fuse_uring::abi::FUSE_RELEASE && fuse_uring::is_slow_default(opcode, size)
    }
}

struct BenchMount {
    mnt: PathBuf,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    info: TransportInfo,
}

impl BenchMount {
    fn new(dir: &Path, t: Transport) -> BenchMount {
        let mnt = dir.join(t.as_str());
        std::fs::create_dir_all(&mnt).unwrap();
        let opts = MountOptions { transport: t, ..Default::default() };
        let session = mount(&mnt, &opts).expect("mount (needs root; io_uring needs enable_uring=Y)");
        let info = session.transport_info();
        let thread = std::thread::spawn(move || session.run(Arc::new(BenchFs::new()), 2));
        BenchMount { mnt, thread: Some(thread), info }
    }
}

impl Drop for BenchMount {
    fn drop(&mut self) {
        let _ = unmount(&self.mnt);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Work {
    Stat,
    CreateUnlink,
    Read4k,
    WriteFsync,
}

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Stat => "stat (attr timeout 0)",
            Work::CreateUnlink => "create+unlink",
            Work::Read4k => "read 4 KiB (direct, no passthrough)",
            Work::WriteFsync => "write 100 B + fdatasync (pool hop)",
        }
    }
}

/// One round: `clients` threads each doing `ops` operations; µs/op per client, averaged.
#[allow(clippy::needless_range_loop)] // `i` also picks offsets
fn round(mnt: &Path, work: Work, clients: usize, ops: usize, tag: &mut u64) -> f64 {
    *tag += 1;
    let barrier = Barrier::new(clients);
    let times: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..clients)
            .map(|c| {
                let barrier = &barrier;
                let tag = *tag;
                s.spawn(move || {
                    let stat_path = mnt.join("data");
                    let file = std::fs::OpenOptions::new().read(true).write(true).open(mnt.join("data")).unwrap();
                    let mut buf = vec![0u8; 4096];
                    let names: Vec<PathBuf> =
                        if work == Work::CreateUnlink { (0..ops).map(|i| mnt.join(format!("c{tag}-{c}-{i}"))).collect() } else { vec![] };
                    // Warm the dentries.
                    std::fs::metadata(&stat_path).unwrap();
                    barrier.wait();
                    let t0 = Instant::now();
                    for i in 0..ops {
                        match work {
                            Work::Stat => {
                                std::fs::metadata(&stat_path).unwrap();
                            }
                            Work::CreateUnlink => {
                                drop(std::fs::File::create(&names[i]).unwrap());
                                std::fs::remove_file(&names[i]).unwrap();
                            }
                            Work::Read4k => {
                                let off = ((i * 7 + c * 131) % (DATA_LEN / 4096)) as u64 * 4096;
                                assert_eq!(file.read_at(&mut buf, off).unwrap(), 4096);
                            }
                            Work::WriteFsync => {
                                assert_eq!(file.write_at(&buf[..100], 0).unwrap(), 100);
                                file.sync_data().unwrap();
                            }
                        }
                    }
                    t0.elapsed().as_secs_f64() * 1e6 / ops as f64
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    times.iter().sum::<f64>() / times.len() as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(21);
    let ops: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let dir = tempfile::tempdir().unwrap();
    let dev = BenchMount::new(dir.path(), Transport::Dev);
    let uring = BenchMount::new(dir.path(), Transport::Uring);
    assert_eq!(uring.info.kind, TransportKind::IoUring, "{}", uring.info);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "transport microbenchmark: {rounds} rounds x {ops} ops per client, medians in µs/op; {cpus} CPUs; \
         /dev/fuse: 2 reader threads; io_uring: {}",
        uring.info
    );
    println!();
    println!("| workload | clients | /dev/fuse µs/op | io_uring µs/op | io_uring vs /dev/fuse |");
    println!("|---|---:|---:|---:|---:|");
    let mut tag = 0;
    for work in [Work::Stat, Work::CreateUnlink, Work::Read4k, Work::WriteFsync] {
        for clients in [1, 2] {
            // Warm-up round on each.
            round(&dev.mnt, work, clients, ops / 10 + 1, &mut tag);
            round(&uring.mnt, work, clients, ops / 10 + 1, &mut tag);
            let (mut d, mut u) = (Vec::new(), Vec::new());
            for r in 0..rounds {
                if r % 2 == 0 {
                    d.push(round(&dev.mnt, work, clients, ops, &mut tag));
                    u.push(round(&uring.mnt, work, clients, ops, &mut tag));
                } else {
                    u.push(round(&uring.mnt, work, clients, ops, &mut tag));
                    d.push(round(&dev.mnt, work, clients, ops, &mut tag));
                }
            }
            let (md, mu) = (median(&mut d), median(&mut u));
            println!("| {} | {clients} | {md:.2} | {mu:.2} | {:+.0} % |", work.name(), (mu - md) / md * 100.0);
        }
    }
    drop(uring);
    drop(dev);
}
