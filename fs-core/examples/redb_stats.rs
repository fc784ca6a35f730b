//! `cargo run --release -p fs-core --example redb_stats -- COPY_OF_STORE.redb`:
//! what a store's database holds, for measurements (DECISIONS D62): redb's
//! allocated pages against the file's size, then per table its rows, leaf
//! and branch pages, the bytes its rows take (`stored`), redb's per-row
//! metadata and the unused bytes of its pages (`fragmented`). Opens the
//! file read-write (redb may repair it), so give it a copy, never the
//! store.redb of a mounted or live store.

use redb::{Database, ReadableDatabase, ReadableTableMetadata, TableHandle};

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: redb_stats COPY_OF_STORE.redb");
        std::process::exit(2);
    };
    let db = Database::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    {
        let w = db.begin_write().expect("write transaction");
        let s = w.stats().expect("stats");
        println!(
            "file {len} bytes; allocated {} pages of {} bytes ({} bytes); tables: leaf {} branch {} stored {} metadata {} fragmented {}",
            s.allocated_pages(),
            s.page_size(),
            s.allocated_pages() * s.page_size() as u64,
            s.leaf_pages(),
            s.branch_pages(),
            s.stored_bytes(),
            s.metadata_bytes(),
            s.fragmented_bytes()
        );
        w.abort().expect("abort");
    }
    let r = db.begin_read().expect("read transaction");
    for h in r.list_tables().expect("tables") {
        let t = r.open_untyped_table(h.clone()).expect("table");
        let s = t.stats().expect("table stats");
        println!(
            "{:20} rows {:9} leaf {:6} branch {:5} stored {:10} metadata {:9} fragmented {:9}",
            h.name(),
            t.len().expect("len"),
            s.leaf_pages(),
            s.branch_pages(),
            s.stored_bytes(),
            s.metadata_bytes(),
            s.fragmented_bytes()
        );
    }
}
