//! Stores written by earlier releases (schema 1, schema 2) mount with this
//! one: migrated in place at mount (schema 3: chunk bytes move into pack
//! files and the database is compacted), the old database kept as
//! `store.redb.schema<N>` until the first clean unmount, and nothing in them
//! lost. The fixtures (ringfs/tests/fixtures/store-schema1 and
//! store-schema2, made by `scripts/make-store-fixture.sh 1` and
//! `scripts/make-store-fixture.sh 2` with the releases before schema 2 and
//! before schema 3) hold:
//! `a.txt` ("hello\n", user.k=v), `dir/` (0750) with `b` (0640, 1 MiB of a
//! pattern, several chunks), `link` → a.txt, `hard` = a hard link of
//! `dir/b`, and an empty file `empty`.
//!
//! store-schema4 (`scripts/make-store-fixture.sh 4` with d08f47e, the
//! release before D37) holds the same files, one commit of them ("fixture",
//! snapshot objects version 1) and chunks cut at ~512 KiB: it is migrated
//! to schema 5 at mount (its objects move from the database into pack
//! records, ids unchanged), and its old commit, old chunks and new version
//! 2 objects work together (diff, commit, fsck).
//!
//! store-schema5 (`scripts/make-store-fixture.sh 5` with 0d67997, the
//! release before D55) holds the same files and one commit, with each
//! file's live manifest one `manifests` row: migrated to schema 6 at mount
//! (live manifests as roots over shared segments, chunk references
//! recounted), fsck clean before and after, its commit id kept.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use redb::{ReadableDatabase, ReadableTableMetadata};
use std::path::Path;

fn fixture(schema: u32) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/store-schema{schema}"))
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

/// A fixture copied to `to`, closed to other users as `fsck`'s fix for a
/// store of an earlier version says (`chmod 700`, D87): these tests are
/// about the schema.
fn copy_fixture(from: &Path, to: &Path) {
    copy_dir(from, to);
    fs::set_permissions(to, fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn schema1_store_is_migrated_and_kept_until_clean_unmount() {
    migrated_and_kept_until_clean_unmount(1);
}

#[test]
fn schema2_store_is_migrated_and_kept_until_clean_unmount() {
    migrated_and_kept_until_clean_unmount(2);
}

fn migrated_and_kept_until_clean_unmount(schema: u32) {
    if raw_mode() {
        return; // about ringfs's own store
    }
    let mut m = TestMount::new(Backend::Store);
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    fs::remove_dir_all(&store).unwrap();
    copy_fixture(&fixture(schema), &store);
    let old_size = fs::metadata(store.join("store.redb")).unwrap().len();
    // fsck reads the old schema as it is (read-only check, no migration).
    let o = ringfs(&["fsck", "--store", store.to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck of the schema-{schema} store: {out} {err}");
    m.mount_again();
    let backup = store.join(format!("store.redb.schema{schema}"));
    assert!(backup.exists(), "the schema-{schema} database is kept while the migration is new");
    check_contents(&m);
    // The chunk bytes are in pack files now, and the database gave their space back.
    let packs = fs::read_dir(store.join("packs")).unwrap().count();
    assert!(packs >= 1, "no pack files after the migration");
    let new_size = fs::metadata(store.join("store.redb")).unwrap().len();
    assert!(new_size < old_size, "store.redb compacted: {old_size} -> {new_size} bytes");
    // Inodes from schema 1 have no birth time; schema 2 kept theirs; new ones have one.
    let btime = m.sh_ok("stat -c %W a.txt");
    if schema == 1 {
        assert_eq!(btime.trim(), "0");
    } else {
        assert_ne!(btime.trim(), "0");
    }
    m.sh_ok("echo new > new.txt");
    assert_ne!(m.sh_ok("stat -c %W new.txt").trim(), "0");
    m.unmount_checked();
    assert!(!backup.exists(), "the old database goes at the first clean unmount");
    let o = ringfs(&["fsck", "--store", store.to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck after the migration: {out} {err}");
    // Every file's bytes come back from the packs alone.
    fs::remove_dir_all(store.join("wc")).unwrap();
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
    copy_fixture(&fixture(1), &store);
    m.mount_again();
    m.kill_daemon();
    let backup = store.join("store.redb.schema1");
    assert!(backup.exists(), "a crash keeps the schema-1 copy");
    // The copy is a whole schema-1 database: with the working copies it is
    // a store fsck finds clean (what a rollback to the old release opens).
    let old = m.host_tmp().join("rollback");
    copy_dir(&store.join("wc"), &old.join("wc"));
    fs::copy(&backup, old.join("store.redb")).unwrap();
    fs::set_permissions(&old, fs::Permissions::from_mode(0o700)).unwrap();
    let o = ringfs(&["fsck", "--store", old.to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck of the kept schema-1 database: {out} {err}");
    m.mount_again();
    check_contents(&m);
    m.unmount_checked();
    assert!(!backup.exists());
}

#[test]
fn schema4_store_with_version1_objects_and_big_chunks_works() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    fs::remove_dir_all(&store).unwrap();
    copy_fixture(&fixture(4), &store);
    let s = store.to_str().unwrap().to_string();
    let o = ringfs(&["fsck", "--store", &s]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck of the schema-4 store: {out} {err}");
    // The fixture's commit, read from its `objects`-era tables.
    let fixture_head: String = {
        let db = redb::Database::open(store.join("store.redb")).unwrap();
        let rtx = db.begin_read().unwrap();
        let refs = rtx.open_table(fs_core::store::REFS).unwrap();
        let v = refs.get("main").unwrap().expect("branch main").value().to_vec();
        let n = rtx.open_table(fs_core::store::OBJECTS_V4).unwrap().len().unwrap();
        assert!(n >= 5, "the fixture holds its objects in the database ({n})");
        v.iter().map(|b| format!("{b:02x}")).collect()
    };
    m.mount_again();
    check_contents(&m);
    assert!(store.join("store.redb.schema4").exists(), "the schema-4 database is kept until a clean unmount");
    let mp = m.path().to_str().unwrap().to_string();
    let json = |args: &[&str]| -> serde_json::Value {
        let o = ringfs(args);
        let (out, err) = out_str(&o);
        assert!(o.status.success(), "ringfs {args:?}: {out} {err}");
        serde_json::from_str(&out).unwrap()
    };
    let log = json(&["log", &mp, "--json"]);
    assert_eq!(log["commits"].as_array().unwrap().len(), 1, "{log}");
    let first = log["commits"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(first, fixture_head, "the migration keeps object ids");
    // Attributes touched, content not: the file's entry is rebuilt with a
    // version 2 manifest of the same chunks, which is no change.
    m.sh_ok("chown 0:0 dir/b && chmod 640 dir/b");
    let c = json(&["commit", &mp, "-m", "same", "--json"]);
    assert_eq!(c["created"], false, "a v1 and a v2 manifest of the same chunks differ: {c}");
    // A 10-byte overwrite in the middle of dir/b: new small chunks beside the old big ones.
    m.sh_ok("printf 0123456789 | dd of=dir/b bs=1 seek=600000 conv=notrunc status=none");
    let c = json(&["commit", &mp, "-m", "edit", "--json"]);
    assert_eq!(c["created"], true, "{c}");
    let d = json(&["diff", &mp, &first, "main", "--json"]);
    let paths: Vec<&str> = d["changes"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["dir/b", "hard"], "{d}");
    let mut want = pattern();
    want[600000..600010].copy_from_slice(b"0123456789");
    assert_eq!(fs::read(m.p("dir/b")).unwrap(), want);
    m.unmount_checked();
    let o = ringfs(&["fsck", "--store", &s]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck after commits of version 2 objects: {out} {err}");
    {
        let db = redb::Database::open(store.join("store.redb")).unwrap();
        let rtx = db.begin_read().unwrap();
        assert_eq!(rtx.open_table(fs_core::store::META).unwrap().get("schema").unwrap().unwrap().value(), fs_core::store::SCHEMA_VERSION);
        assert!(
            matches!(rtx.open_table(fs_core::store::OBJECTS_V4), Err(redb::TableError::TableDoesNotExist(_))),
            "the schema-4 objects table is gone"
        );
        let n = rtx.open_table(fs_core::store::OBJECTS).unwrap().len().unwrap();
        assert!(n >= 7, "the fixture's objects and the new commits' are indexed ({n})");
    }
    assert!(!store.join("store.redb.schema4").exists(), "the copy goes at the clean unmount");
    // The bytes come back from the packs alone (old and new chunks).
    fs::remove_dir_all(store.join("wc")).unwrap();
    m.mount_again();
    assert_eq!(fs::read(m.p("dir/b")).unwrap(), want);
    assert_eq!(fs::read_to_string(m.p("a.txt")).unwrap(), "hello\n");
}

#[test]
fn schema5_store_with_whole_manifest_rows_is_migrated() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    fs::remove_dir_all(&store).unwrap();
    copy_fixture(&fixture(5), &store);
    let s = store.to_str().unwrap().to_string();
    let o = ringfs(&["fsck", "--store", &s]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck of the schema-5 store: {out} {err}");
    let (fixture_head, rows) = {
        let db = redb::Database::open(store.join("store.redb")).unwrap();
        let rtx = db.begin_read().unwrap();
        let v = rtx.open_table(fs_core::store::REFS).unwrap().get("main").unwrap().expect("branch main").value().to_vec();
        let n = rtx.open_table(fs_core::store::MANIFESTS_V5).unwrap().len().unwrap();
        (v.iter().map(|b| format!("{b:02x}")).collect::<String>(), n)
    };
    assert!(rows >= 2, "the fixture's manifests are rows ({rows})");
    // Its working copies go: every byte must come from the migrated manifests.
    fs::remove_dir_all(store.join("wc")).unwrap();
    m.mount_again();
    check_contents(&m);
    assert!(store.join("store.redb.schema5").exists(), "the schema-5 database is kept until a clean unmount");
    let mp = m.path().to_str().unwrap().to_string();
    let json = |args: &[&str]| -> serde_json::Value {
        let o = ringfs(args);
        let (out, err) = out_str(&o);
        assert!(o.status.success(), "ringfs {args:?}: {out} {err}");
        serde_json::from_str(&out).unwrap()
    };
    let log = json(&["log", &mp, "--json"]);
    assert_eq!(log["commits"][0]["id"].as_str().unwrap(), fixture_head, "the migration keeps the commit");
    let c = json(&["commit", &mp, "-m", "same", "--json"]);
    assert_eq!(c["created"], false, "nothing changed: {c}");
    m.sh_ok("printf 0123456789 | dd of=dir/b bs=1 seek=600000 conv=notrunc status=none && rm a.txt");
    let c = json(&["commit", &mp, "-m", "edit", "--json"]);
    assert_eq!(c["created"], true, "{c}");
    let mut want = pattern();
    want[600000..600010].copy_from_slice(b"0123456789");
    m.unmount_checked();
    let o = ringfs(&["fsck", "--store", &s]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck after the migration and a commit: {out} {err}");
    {
        let db = redb::Database::open(store.join("store.redb")).unwrap();
        let rtx = db.begin_read().unwrap();
        assert_eq!(rtx.open_table(fs_core::store::META).unwrap().get("schema").unwrap().unwrap().value(), fs_core::store::SCHEMA_VERSION);
        assert!(
            matches!(rtx.open_table(fs_core::store::MANIFESTS_V5), Err(redb::TableError::TableDoesNotExist(_))),
            "the schema-5 manifests table is gone"
        );
        assert_eq!(rtx.open_table(fs_core::store::LIVE_ROOTS).unwrap().len().unwrap(), 1, "dir/b's live manifest (a.txt removed)");
    }
    assert!(!store.join("store.redb.schema5").exists(), "the copy goes at the clean unmount");
    fs::remove_dir_all(store.join("wc")).unwrap();
    m.mount_again();
    assert_eq!(fs::read(m.p("dir/b")).unwrap(), want);
    assert_eq!(fs::read(m.p("hard")).unwrap(), want);
    m.unmount_checked();
}
