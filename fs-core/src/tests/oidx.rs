//! Object index files (D65) through `Fs`: compaction moving the records of
//! objects that a file names rewrites the file (new number, old one gone),
//! and every commit stays readable and fsck clean.

use super::*;
use redb::ReadableTableMetadata;

fn commit(fs: &Fs, msg: &str) -> crate::snap::CommitReport {
    fs.snapshot_commit(&crate::snap::CommitOptions { message: msg.into(), author: "t@h".into(), allow_empty: false }).unwrap()
}

/// Moves every `object_index` row into a file now (threshold 1).
fn flush_all(fs: &Fs) -> u64 {
    let store = fs.test_store();
    let mut txn = store.begin_write().unwrap();
    txn.set_durability(redb::Durability::Immediate).unwrap();
    // None: the commit flushed them already (RINGFS_TEST_OIDX_FLUSH_AT).
    let n = crate::store::oidx::flush_at_least(&txn, store.packs.oidx(), 1).unwrap().map(|(n, _)| n);
    txn.commit().unwrap();
    n.unwrap_or_else(|| *files(fs).last().unwrap())
}

fn files(fs: &Fs) -> Vec<u64> {
    let rtx = fs.test_store().begin_read().unwrap();
    crate::store::oidx::recorded(&rtx).unwrap().into_iter().map(|r| r.0).collect()
}

#[test]
fn compaction_rewrites_the_index_files_naming_what_it_moves() {
    let t = tempfile::tempdir().unwrap();
    let fs = dir_fs(t.path());
    fs.test_store().packs.set_seal_at(400 << 10);
    // Dead bytes in the first pack: a file stored, then removed before any
    // commit names it.
    let gone = write_file(&fs, ROOT, "gone", &body(1, 150_000));
    fs.store_now().unwrap();
    fs.unlink(&C, ROOT, os("gone")).unwrap();
    fs.forget(gone, 1);
    // Objects in the same pack, then moved into a file.
    for i in 0..20u32 {
        write_file(&fs, ROOT, &format!("s{i}"), format!("small {i}").as_bytes());
    }
    let c1 = commit(&fs, "one");
    let first = flush_all(&fs);
    assert_eq!(files(&fs), vec![first]);
    {
        let rtx = fs.test_store().begin_read().unwrap();
        assert_eq!(rtx.open_table(crate::schema::OBJECTS).unwrap().len().unwrap(), 0);
    }
    // More bytes: the first pack is sealed.
    let big = write_file(&fs, ROOT, "big", &body(2, 500_000));
    let _ = big;
    fs.store_now().unwrap();
    let c2 = commit(&fs, "two");
    let r = fs.gc().unwrap();
    assert!(r.packs_compacted >= 1 && r.chunks_moved >= 20, "{r:?}");
    let now = files(&fs);
    assert!(!now.contains(&first) && !now.is_empty(), "the file was replaced: {first} -> {now:?}");
    assert!(!t.path().join("packs").join(crate::store::oidx::file_name(first)).exists(), "the old file is unlinked");
    let log = fs.snapshot_log().unwrap();
    assert_eq!(log.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), vec![c2.id.clone(), c1.id.clone()]);
    let d = fs.snapshot_diff(Some(&c1.id), Some(&c2.id)).unwrap();
    assert_eq!(d.changes.len(), 1, "{d:?}");
    fs.shutdown().unwrap();
    drop(fs);
    fsck_clean(t.path());
    // Reopened: the objects are found through the new file.
    let fs = dir_fs(t.path());
    assert_eq!(fs.snapshot_log().unwrap().len(), 2);
    fs.shutdown().unwrap();
}
