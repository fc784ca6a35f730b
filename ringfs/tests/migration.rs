//! A store written by the previous release (schema 1) mounts with this one:
//! it is migrated in place at mount, its old database is kept as
//! `store.redb.schema1` until the first clean unmount, and nothing in it is
//! lost. The fixture (ringfs/tests/fixtures/store-schema1, made by
//! `scripts/make-schema1-fixture.sh` with the release before schema 2) holds:
//! `a.txt` ("hello\n", user.k=v), `dir/` (0750) with `b` (0640, 1 MiB of a
//! pattern, several chunks), `link` → a.txt, `hard` = a hard link of
//! `dir/b`, and an empty file `empty`.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn fixture() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/store-schema1"))
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            fs::copy(e.path(), &t).unwrap();
        }
    }
}

fn pattern() -> Vec<u8> {
    (0..1u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect()
}

fn check_contents(m: &TestMount) {
    assert_eq!(fs::read_to_string(m.p("a.txt")).unwrap(), "hello\n");
    let v = m.sh_ok("getfattr --only-values -n user.k a.txt");
    assert_eq!(v, "v");
    assert_eq!(fs::read(m.p("dir/b")).unwrap(), pattern(), "dir/b bytes");
    assert_eq!(fs::metadata(m.p("dir")).unwrap().permissions().mode() & 0o7777, 0o750);
    assert_eq!(fs::metadata(m.p("dir/b")).unwrap().permissions().mode() & 0o7777, 0o640);
    assert_eq!(fs::read_link(m.p("link")).unwrap(), Path::new("a.txt"));
    assert_eq!(fs::metadata(m.p("hard")).unwrap().ino(), fs::metadata(m.p("dir/b")).unwrap().ino());
    assert_eq!(fs::metadata(m.p("hard")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(m.p("empty")).unwrap().len(), 0);
}

#[test]
fn schema1_store_is_migrated_and_kept_until_clean_unmount() {
    if raw_mode() {
        return; // about ringfs's own store
    }
    let mut m = TestMount::new(Backend::Store);
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    fs::remove_dir_all(&store).unwrap();
    copy_dir(fixture(), &store);
    // fsck reads the old schema as it is (read-only check, no migration).
    let o = ringfs(&["fsck", "--store", store.to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck of the schema-1 store: {out} {err}");
    m.mount_again();
    let backup = store.join("store.redb.schema1");
    assert!(backup.exists(), "the schema-1 database is kept while the migration is new");
    check_contents(&m);
    // Inodes from schema 1 have no birth time; new ones do.
    assert_eq!(m.sh_ok("stat -c %W a.txt").trim(), "0");
    m.sh_ok("echo new > new.txt");
    assert_ne!(m.sh_ok("stat -c %W new.txt").trim(), "0");
    m.unmount_checked();
    assert!(!backup.exists(), "the old database goes at the first clean unmount");
    let o = ringfs(&["fsck", "--store", store.to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck after the migration: {out} {err}");
    m.mount_again();
    check_contents(&m);
    assert_eq!(fs::read_to_string(m.p("new.txt")).unwrap(), "new\n");
}

#[test]
fn crash_before_first_clean_unmount_keeps_the_old_database() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    fs::remove_dir_all(&store).unwrap();
    copy_dir(fixture(), &store);
    m.mount_again();
    m.kill_daemon();
    let backup = store.join("store.redb.schema1");
    assert!(backup.exists(), "a crash keeps the schema-1 copy");
    // The copy is a whole schema-1 database: with the working copies it is
    // a store fsck finds clean (what a rollback to the old release opens).
    let old = m.host_tmp().join("rollback");
    copy_dir(&store.join("wc"), &old.join("wc"));
    fs::copy(&backup, old.join("store.redb")).unwrap();
    let o = ringfs(&["fsck", "--store", old.to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck of the kept schema-1 database: {out} {err}");
    m.mount_again();
    check_contents(&m);
    m.unmount_checked();
    assert!(!backup.exists());
}
