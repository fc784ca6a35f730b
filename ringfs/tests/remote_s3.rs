//! Remote sync against a real S3 server (issue 14, "Real S3 in tests: Garage"): Garage
//! on loopback (tests/common/garage.rs), through real mounts.
//!
//! - push from a mounted workspace to `s3://BUCKET/PREFIX`, clone on a fresh store,
//!   mount the clone: the trees are byte-equal;
//! - two stores pushing the same branch: the second is refused, the remote head is
//!   intact. Garage 2.5 does not enforce conditional PUT (tests/garage_s3.rs), so this
//!   relies on the per-writer head records (checked: the remote says `"heads":
//!   "writers"`), not on compare-and-swap (docs/SEMANTICS.md
//!   "Remote servers", DECISIONS D39);
//! - a 3-node cluster with replication 3: clone and push succeed with one node stopped.
//!
//! Credentials and endpoint reach `ringfs` (the CLI and the mount daemon, which
//! fetches chunks on first open) only through the AWS_* environment.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::garage::Garage;
use common::*;

/// `ringfs ARGS` with the cluster's AWS_* environment, 60 s at most.
fn rg(g: &Garage, args: &[&str]) -> Output {
    let mut c = Command::new(RINGFS);
    c.args(args);
    g.apply_env(&mut c);
    run_timeout(&mut c, Duration::from_secs(60))
}

/// As [`rg`], which must succeed: its stdout.
fn rg_ok(g: &Garage, args: &[&str]) -> String {
    let o = rg(g, args);
    let (out, err) = out_str(&o);
    assert!(
        o.status.success(),
        "ringfs {args:?} failed ({}):\n{out}\n{err}",
        o.status
    );
    out
}

/// A store-backed mount whose daemon has the cluster's AWS_* environment.
fn mount_with(g: &Garage, name: &str) -> TestMount {
    let mut b = TestMount::builder(Backend::Store).name(name);
    for (k, v) in g.env() {
        b = b.env(k, v);
    }
    b.mount()
}

/// A mount of a fresh clone of `url` (branch main): a TestMount whose store is
/// replaced, while unmounted, by `ringfs clone URL --store DIR`.
fn clone_and_mount(g: &Garage, url: &str, name: &str) -> TestMount {
    let mut m = mount_with(g, name);
    m.unmount_checked();
    let store = m.store_dir().to_path_buf();
    fs::remove_dir_all(&store).unwrap();
    rg_ok(g, &["clone", url, "--store", store.to_str().unwrap()]);
    m.mount_again();
    m
}

/// Everything under `root`: relative path → (kind and mode, content or link target).
fn tree(root: &Path) -> BTreeMap<String, (String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (String, Vec<u8>)>) {
        let mut es: Vec<_> = fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
            .map(|e| e.unwrap())
            .collect();
        es.sort_by_key(|e| e.file_name());
        for e in es {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let md = fs::symlink_metadata(&p).unwrap();
            let mode = md.permissions().mode() & 0o7777;
            if md.file_type().is_symlink() {
                out.insert(
                    rel,
                    (
                        "link".into(),
                        fs::read_link(&p)
                            .unwrap()
                            .into_os_string()
                            .into_encoded_bytes(),
                    ),
                );
            } else if md.is_dir() {
                out.insert(rel, (format!("dir {mode:o}"), Vec::new()));
                walk(root, &p, out);
            } else {
                out.insert(
                    rel,
                    (
                        format!("file {mode:o}"),
                        fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display())),
                    ),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn assert_same_tree(a: &Path, b: &Path) {
    let (ta, tb) = (tree(a), tree(b));
    let ka: Vec<&String> = ta.keys().collect();
    let kb: Vec<&String> = tb.keys().collect();
    assert_eq!(
        ka,
        kb,
        "paths differ between {} and {}",
        a.display(),
        b.display()
    );
    for (k, (kind, bytes)) in &ta {
        let (kind2, bytes2) = &tb[k];
        assert_eq!(kind, kind2, "{k}: kind/mode");
        assert!(
            bytes == bytes2,
            "{k}: {} bytes vs {} bytes, contents differ",
            bytes.len(),
            bytes2.len()
        );
    }
}

/// The remote's `ringfs-remote.json` (docs/FORMATS.md "Remote layout") under `prefix`,
/// read straight from the bucket.
fn remote_doc(g: &Garage, prefix: &str) -> serde_json::Value {
    use object_store::ObjectStoreExt;
    let s = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(g.endpoint())
        .with_region(common::garage::REGION)
        .with_bucket_name(&g.bucket)
        .with_access_key_id(&g.key_id)
        .with_secret_access_key(&g.secret)
        .with_allow_http(true)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let key = object_store::path::Path::from(format!("{prefix}/ringfs-remote.json"));
    let bytes = rt.block_on(async { s.get(&key).await.unwrap_or_else(|e| panic!("get {key}: {e}")).bytes().await.unwrap() });
    serde_json::from_slice(&bytes).unwrap()
}

/// A small project: nested dirs, an empty file, an executable, a symlink, a 3 MiB
/// file of many chunks.
fn populate(m: &TestMount, tag: &str) {
    m.sh_ok(&format!(
        "mkdir -p proj/src/lib proj/docs proj/empty-dir && \
         echo 'fn main() {{}} // {tag}' > proj/src/main.rs && echo lib > proj/src/lib/mod.rs && \
         : > proj/docs/empty && printf '#!/bin/sh\\necho {tag}\\n' > proj/run.sh && chmod 755 proj/run.sh && \
         ln -s src/main.rs proj/link && head -c 3145728 /dev/urandom > proj/blob.bin"
    ));
}

#[test]
fn push_clone_mount_byte_equal() {
    let g = Garage::single();
    let url = g.url("ws/push-clone");
    let a = mount_with(&g, "origin");
    populate(&a, "origin");
    rg_ok(&g, &["remote", "add", mp(&a), "origin", &url]);
    rg_ok(&g, &["commit", mp(&a), "-m", "first"]);
    rg_ok(&g, &["push", mp(&a)]);

    let b = clone_and_mount(&g, &url, "clone");
    assert_same_tree(&a.p("proj"), &b.p("proj"));

    // A second change goes up and a second fresh clone sees it.
    a.sh_ok("echo changed >> proj/src/lib/mod.rs && rm proj/docs/empty && head -c 100000 /dev/urandom > proj/docs/new.bin");
    rg_ok(&g, &["commit", mp(&a), "-m", "second"]);
    rg_ok(&g, &["push", mp(&a)]);
    let c = clone_and_mount(&g, &url, "clone2");
    assert_same_tree(&a.p("proj"), &c.p("proj"));
}

#[test]
fn second_writer_on_a_branch_is_refused_and_head_kept() {
    let g = Garage::single();
    let url = g.url("ws/two-writers");
    let a = mount_with(&g, "writer-a");
    populate(&a, "a1");
    rg_ok(&g, &["remote", "add", mp(&a), "origin", &url]);
    rg_ok(&g, &["commit", mp(&a), "-m", "a1"]);
    rg_ok(&g, &["push", mp(&a)]);

    // The start-up probe found create-if-absent ignored: heads are per-writer keys.
    assert_eq!(remote_doc(&g, "ws/two-writers")["heads"], "writers", "Garage 2.5 should get the per-writer head scheme");

    // B starts from A's head, then A moves on and pushes again.
    let b = clone_and_mount(&g, &url, "writer-b");
    a.sh_ok("echo a2 > proj/a2.txt");
    rg_ok(&g, &["commit", mp(&a), "-m", "a2"]);
    rg_ok(&g, &["push", mp(&a)]);

    // B commits on the old head and pushes the same branch: refused.
    b.sh_ok("echo b2 > proj/b2.txt");
    rg_ok(&g, &["commit", mp(&b), "-m", "b2"]);
    let o = rg(&g, &["push", mp(&b)]);
    let (out, err) = out_str(&o);
    assert!(
        !o.status.success(),
        "a second writer's push of a diverged branch succeeded:\n{out}\n{err}"
    );
    assert!(
        err.to_lowercase().contains("fork"),
        "the refusal should suggest a fork: {err}"
    );

    // A store with an unrelated history pushing the same branch: refused too.
    let d = mount_with(&g, "writer-d");
    populate(&d, "d1");
    rg_ok(&g, &["remote", "add", mp(&d), "origin", &url]);
    rg_ok(&g, &["commit", mp(&d), "-m", "d1"]);
    let o = rg(&g, &["push", mp(&d)]);
    assert!(
        !o.status.success(),
        "an unrelated store's push of the same branch succeeded: {}",
        out_str(&o).1
    );

    // The remote head is still A's second commit: a fresh clone has A's tree.
    let c = clone_and_mount(&g, &url, "check");
    assert_same_tree(&a.p("proj"), &c.p("proj"));
    assert!(!c.p("proj/b2.txt").exists());
}

#[test]
fn cluster_of_three_serves_clone_and_push_with_one_node_down() {
    let mut g = Garage::cluster();
    let url = g.url("ws/cluster");
    let a = mount_with(&g, "origin");
    populate(&a, "cluster");
    rg_ok(&g, &["remote", "add", mp(&a), "origin", &url]);
    rg_ok(&g, &["commit", mp(&a), "-m", "first"]);
    rg_ok(&g, &["push", mp(&a)]);

    // Node 2 down: replication 3 keeps a quorum of 2.
    g.stop_node(2);
    let b = clone_and_mount(&g, &url, "clone");
    assert_same_tree(&a.p("proj"), &b.p("proj"));
    a.sh_ok("echo more > proj/more.txt && head -c 2000000 /dev/urandom > proj/docs/big2.bin");
    rg_ok(&g, &["commit", mp(&a), "-m", "second"]);
    rg_ok(&g, &["push", mp(&a)]);
    let c = clone_and_mount(&g, &url, "clone2");
    assert_same_tree(&a.p("proj"), &c.p("proj"));
}

/// A lazy clone (D51) through Garage: mounted with nothing fetched (no
/// background prefetch, so the count of remote-only chunks shows what the
/// open path fetched), `ls -R` fetches nothing, reading every file fetches
/// every chunk by range GETs, byte-equal; a lazy clone with the prefetch
/// reads the same; an `--eager` clone has none left.
#[test]
fn lazy_clone_fetches_by_range_gets_on_open() {
    let g = Garage::single();
    let url = g.url("ws/lazy");
    let a = mount_with(&g, "origin");
    populate(&a, "origin");
    rg_ok(&g, &["remote", "add", mp(&a), "origin", &url]);
    rg_ok(&g, &["commit", mp(&a), "-m", "first"]);
    rg_ok(&g, &["push", mp(&a)]);
    let left = |m: &TestMount| -> u64 {
        let v: serde_json::Value =
            serde_json::from_str(&rg_ok(&g, &["remote", "status", mp(m), "--json"])).unwrap();
        v["remote_only_chunks"].as_u64().unwrap()
    };
    let mut b = TestMount::builder(Backend::Store).name("lazy");
    for (k, v) in g.env() {
        b = b.env(k, v);
    }
    let mut b = b.env("RINGFS_TEST_NO_PREFETCH", "1").mount();
    b.unmount_checked();
    fs::remove_dir_all(b.store_dir()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&rg_ok(
        &g,
        &["clone", &url, "--store", b.store_dir().to_str().unwrap(), "--json"],
    ))
    .unwrap();
    let n = v["remote_only_chunks"].as_u64().unwrap();
    assert!(n > 10, "{v}");
    b.mount_again();
    b.sh_ok("ls -lR . >/dev/null");
    assert_eq!(left(&b), n);
    assert_same_tree(&a.p("proj"), &b.p("proj"));
    assert_eq!(left(&b), 0);
    let e = clone_and_mount(&g, &url, "lazy-prefetch");
    assert_same_tree(&a.p("proj"), &e.p("proj"));
    let mut c = mount_with(&g, "eager");
    c.unmount_checked();
    fs::remove_dir_all(c.store_dir()).unwrap();
    rg_ok(&g, &["clone", &url, "--store", c.store_dir().to_str().unwrap(), "--eager"]);
    c.mount_again();
    assert_eq!(left(&c), 0);
    assert_same_tree(&a.p("proj"), &c.p("proj"));
}
