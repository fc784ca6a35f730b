//! fs-core: the ringfs filesystem model, independent of FUSE.
//!
//! [`Fs`] serves POSIX operations on inode numbers (the FUSE nodeids; the
//! root is 1) with ext4 semantics. Metadata lives in memory and is
//! group-committed to a redb store; each regular file's bytes live in a
//! working copy on the host disk and are cut into content-defined chunks,
//! hashed with BLAKE3 and stored after release, fsync and shutdown.
//! [`fsck`] checks a store offline.

pub mod chunk;
mod fs;
mod fsck;
pub mod store;
mod types;

pub use fs::Fs;
pub use fsck::{fsck, FsckReport, Problem};
pub use types::*;

#[cfg(test)]
mod tests;
