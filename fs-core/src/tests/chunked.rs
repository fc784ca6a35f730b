//! Read-only opens served from the store's chunks (D67): a stored file
//! whose working copy is missing reads back byte-equal (holes as zeros, any
//! offset and length) with no working copy made; a writer's bytes and a
//! truncate show through such a handle; write access through it is EBADF.

use super::*;

fn pattern(n: usize) -> Vec<u8> {
    (0..n as u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect()
}

#[test]
fn a_stored_file_without_a_working_copy_reads_from_its_chunks() {
    let t = tempfile::tempdir().unwrap();
    let mut data = pattern(700_000);
    data[200_000..400_000].fill(0);
    let ino;
    {
        let fs = dir_fs(t.path());
        let (a, fh) = fs.create(&C, ROOT, os("f"), 0o644, libc::O_RDWR as u32).unwrap();
        ino = a.ino;
        fs.write(fh, 0, &data[..200_000]).unwrap();
        fs.write(fh, 400_000, &data[400_000..]).unwrap();
        fs.release(fh).unwrap();
        fs.store_now().unwrap();
        fs.shutdown().unwrap();
    }
    let wc = t.path().join("wc").join(ino.to_string());
    std::fs::remove_file(&wc).unwrap();
    let fs = dir_fs(t.path());
    let before = fs.getattr(ino, None).unwrap();
    let fh = fs.open(&C, ino, libc::O_RDONLY as u32).unwrap();
    assert!(fs.served_from_chunks(fh));
    // Reads at odd offsets and lengths, across chunk ends and the hole.
    for (off, len) in [(0u64, 1u32), (5, 100_000), (199_990, 20), (300_000, 4096), (399_999, 70_000), (699_990, 100), (700_000, 10), (800_000, 10)] {
        let got = fs.read(fh, off, len).unwrap();
        let start = (off as usize).min(data.len());
        let end = (off as usize + len as usize).min(data.len());
        assert_eq!(got, data[start..end.max(start)], "read {len} at {off}");
    }
    assert_eq!(fs.lseek(fh, 0, libc::SEEK_END as u32).unwrap(), data.len() as u64);
    assert_eq!(fs.write(fh, 0, b"x").unwrap_err(), Errno(libc::EBADF));
    assert_eq!(read_all(&fs, ino), data);
    assert!(!wc.exists(), "a read-only open made a working copy");
    let after = fs.getattr(ino, None).unwrap();
    assert_eq!((after.size, after.blocks), (before.size, before.blocks));
    // A writer (its working copy restored) and a truncate, seen through the
    // chunk-served handle.
    let w = fs.open(&C, ino, libc::O_RDWR as u32).unwrap();
    assert!(!fs.served_from_chunks(w));
    fs.write(w, 10, b"NEW").unwrap();
    assert_eq!(fs.read(fh, 8, 7).unwrap(), [&data[8..10], b"NEW", &data[13..15]].concat());
    fs.release(w).unwrap();
    fs.setattr(&C, ino, &SetAttr { size: Some(12), ..Default::default() }).unwrap();
    assert_eq!(fs.read(fh, 0, 100).unwrap(), [&data[..10], b"NE"].concat());
    fs.release(fh).unwrap();
    fs.shutdown().unwrap();
    fsck_clean(t.path());
}
