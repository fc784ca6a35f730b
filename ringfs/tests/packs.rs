//! Pack files through a real mount: `ringfs gc MOUNTPOINT` (through the
//! daemon) and `ringfs gc --store DIR` (unmounted) reclaim the packs of
//! deleted files and keep every other file's bytes.

mod common;

use common::*;

fn packs(store: &std::path::Path) -> usize {
    std::fs::read_dir(store.join("packs")).map(|d| d.filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".pack"))).count()).unwrap_or(0)
}

#[test]
fn gc_on_a_mount_and_on_an_unmounted_store() {
    if raw_mode() {
        return; // about ringfs's own store
    }
    let mut m = TestMount::new(Backend::Store);
    let store = m.store_dir().to_path_buf();
    // 3 × 24 MiB of incompressible bytes, fsynced: more than two 32 MiB packs.
    for f in ["a", "b", "c"] {
        m.sh_ok(&format!("head -c 25165824 /dev/urandom > {f} && dd if={f} of={f}.x bs=1M conv=fsync status=none && mv {f}.x {f}"));
    }
    let sum = m.sh_ok("sha256sum c");
    // fsync makes the working copies durable; the files are stored (cut into
    // packs) in the background moments later (docs/SEMANTICS.md, Durability).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while packs(&store) < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let before = packs(&store);
    assert!(before >= 2, "{before} packs");
    m.sh_ok("rm a b && sync");
    let o = ringfs(&["gc", m.path().to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "gc on the mount: {out} {err}");
    assert!(out.contains("packs before:") && out.contains("reclaimed:"), "{out}");
    assert!(!out.contains("reclaimed:    0.0 MiB"), "the deleted files' packs are reclaimed: {out}");
    assert!(packs(&store) < before, "{out}");
    assert_eq!(m.sh_ok("sha256sum c"), sum);
    m.unmount_checked();
    let o = ringfs(&["gc", "--store", store.to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "gc --store: {out} {err}");
    assert!(out.contains("packs after:"), "{out}");
    let o = ringfs(&["fsck", "--store", store.to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "fsck after gc: {out} {err}");
    // The bytes come back from the packs alone.
    std::fs::remove_dir_all(store.join("wc")).unwrap();
    m.mount_again();
    assert_eq!(m.sh_ok("sha256sum c"), sum);
    m.unmount_checked();
}

#[test]
fn gc_refuses_a_store_in_use_and_a_non_store() {
    if raw_mode() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    let store = m.store_dir().to_path_buf();
    let o = ringfs(&["gc", "--store", store.to_str().unwrap()]);
    let (out, err) = out_str(&o);
    assert!(!o.status.success(), "{out}");
    assert!(err.contains("give its mountpoint instead") && err.lines().count() == 1, "{err}");
    m.unmount_checked();
    let o = ringfs(&["gc", "--store", m.host_tmp().to_str().unwrap()]);
    let (_, err) = out_str(&o);
    assert!(!o.status.success() && err.contains("is not a ringfs store"), "{err}");
}
