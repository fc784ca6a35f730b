//! A fork after a long history (issue 13, DECISIONS D62), through a real
//! mount: what `ringfs fork --no-mount` writes is its index rows — one
//! `object_index` row per object of the history (48 bytes) and one
//! `chunk_index` entry per chunk those objects name (56 bytes) — packed
//! into redb's leaves in key order, so the new store takes at most an
//! eighth more than those rows plus 64 KiB (96 KiB since D65: fewer rows,
//! the same fixed pages) (the other tables' pages);
//! written in hash order the leaves were about two-thirds full (2.05 MiB
//! for the benchmark's 1.48 MiB of rows; here 540 672 bytes for 365 536,
//! over the bound, where key order writes 458 752). The fork is then whole: fsck
//! clean before and after its first mount, the head's files and the
//! whole log as the origin's.
//!
//! Since D65 the origin's `object_index` rows move into object index files
//! as the history grows (here every 1 024 rows, `RINGFS_TEST_OIDX_FLUSH_AT`,
//! test-only), which the fork hard-links: it copies only the rows not
//! flushed yet (under 1 024 + one commit's), so its bound counts those
//! rows and the chunk entries, not the history's objects.

mod common;

use common::*;

#[test]
fn fork_after_long_history_writes_about_its_rows() {
    if raw_mode() {
        return;
    }
    let m = TestMount::builder(Backend::Store).env("RINGFS_TEST_OIDX_FLUSH_AT", "1024").mount();
    // 2 000 small distinct files in 20 directories, then 30 commits after
    // changing 40 files spread over them.
    m.sh_ok("for d in $(seq 0 19); do mkdir d$d; for i in $(seq 0 99); do echo \"file $d $i\" > d$d/f$i; done; done");
    json(&["commit", mp(&m), "-m", "first"]);
    for r in 1..=30 {
        m.sh_ok(&format!("for j in $(seq 0 39); do i=$(( (j * 50 + {r} * 7) % 2000 )); echo \"round {r}\" >> d$((i / 100))/f$((i % 100)); done"));
        json(&["commit", mp(&m), "-m", &format!("r{r}")]);
    }
    let want = tree(m.path());
    let log = json(&["log", mp(&m)]);

    let mut f = TestMount::new(Backend::Store);
    f.unmount_checked();
    std::fs::remove_dir_all(f.store_dir()).unwrap();
    let store = f.store_dir().to_str().unwrap().to_string();
    let r = json(&["fork", mp(&m), "--new-store", &store, "--no-mount"]);
    let (objects, chunks, new_bytes) = (
        r["objects"].as_u64().unwrap(),
        r["chunks"].as_u64().unwrap(),
        r["new_bytes"].as_u64().unwrap(),
    );
    assert!(objects > 3000 && chunks > 2000, "{r}");
    // The rows the fork copied (the unflushed tail) and the files it linked.
    let tail = {
        use redb::{ReadableDatabase, ReadableTableMetadata};
        let db = redb::Database::open(std::path::Path::new(&store).join("store.redb")).unwrap();
        let rtx = db.begin_read().unwrap();
        let n = rtx.open_table(fs_core::store::OBJECTS).unwrap().len().unwrap();
        n
    };
    let linked = std::fs::read_dir(std::path::Path::new(&store).join("packs")).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".oidx")).count();
    assert!(linked >= 2 && tail < 1024 + 200, "{linked} index files linked, {tail} rows copied of {objects}");
    let rows = 48 * tail + 56 * chunks;
    eprintln!(
        "fork: {objects} objects ({tail} as rows, {linked} index files linked), {chunks} chunks, {rows} bytes of rows, {new_bytes} bytes written"
    );
    assert!(
        new_bytes <= rows + rows / 8 + (96 << 10),
        "the fork wrote {new_bytes} bytes for {rows} bytes of index rows: {r}"
    );
    // du of the new store (its packs are links) says the same.
    let du = std::process::Command::new("du")
        .args(["-sk", "--exclude=packs", &store])
        .output()
        .unwrap();
    let du_kib: u64 = String::from_utf8_lossy(&du.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        du_kib * 1024 <= rows + rows / 8 + (96 << 10),
        "du {du_kib} KiB for {rows} bytes of rows"
    );

    let o = ringfs(&["fsck", "--store", &store, "--full"]);
    assert!(
        o.status.success(),
        "fsck of the never-mounted fork: {:?}",
        out_str(&o)
    );
    f.mount_again();
    assert_eq!(tree(f.path()), want);
    assert_eq!(json(&["log", mp(&f)])["commits"], log["commits"]);
    f.unmount_checked();
    let o = ringfs(&["fsck", "--store", &store, "--full"]);
    assert!(o.status.success(), "fsck of the fork: {:?}", out_str(&o));
}
