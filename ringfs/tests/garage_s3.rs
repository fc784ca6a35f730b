//! Probe of the S3 servers the remote commands rely on (issue 14), through the
//! `object_store` crate the remote code uses: its `AmazonS3` against a real Garage node
//! on loopback (tests/common/garage.rs), and its `LocalFileSystem` for `file://`.
//!
//! Plain object operations (put/get/list/delete, a 20 MiB multipart upload), and the
//! conditional-put behaviour the remote head-safety scheme (docs/SEMANTICS.md "Remotes",
//! DECISIONS D39) depends on. Garage 2.5 checks no precondition on PutObject, so
//! `PutMode::Create` on an existing key and `PutMode::Update` with a stale ETag both
//! overwrite; these tests assert exactly that, so a Garage that starts honouring the
//! headers fails here and the documented guarantee gets revisited.

mod common;

use common::garage::{Garage, REGION};
use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::local::LocalFileSystem;
use object_store::path::Path as OPath;
use object_store::{
    GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
    WriteMultipart,
};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn s3(g: &Garage) -> AmazonS3 {
    AmazonS3Builder::new()
        .with_endpoint(g.endpoint())
        .with_region(REGION)
        .with_bucket_name(&g.bucket)
        .with_access_key_id(&g.key_id)
        .with_secret_access_key(&g.secret)
        .with_allow_http(true)
        .build()
        .expect("AmazonS3 for Garage")
}

/// Deterministic, incompressible-looking bytes (xorshift).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn get_bytes(s: &dyn ObjectStore, p: &OPath) -> Vec<u8> {
    s.get(p)
        .await
        .unwrap_or_else(|e| panic!("get {p}: {e}"))
        .bytes()
        .await
        .unwrap()
        .to_vec()
}

#[test]
fn garage_put_get_list_delete() {
    let g = Garage::single();
    let s = s3(&g);
    rt().block_on(async {
        let a = OPath::from("probe/objects/aa/one");
        let b = OPath::from("probe/objects/bb/two");
        let h = OPath::from("probe/heads/main");
        s.put(&a, PutPayload::from_static(b"first object"))
            .await
            .unwrap();
        s.put(&b, PutPayload::from(pattern(100_000, 7)))
            .await
            .unwrap();
        s.put(&h, PutPayload::from_static(b"c0ffee")).await.unwrap();
        assert_eq!(get_bytes(&s, &a).await, b"first object");
        assert_eq!(get_bytes(&s, &b).await, pattern(100_000, 7));
        let meta = s.head(&b).await.unwrap();
        assert_eq!(meta.size, 100_000);
        assert!(meta.e_tag.is_some(), "Garage returns an ETag: {meta:?}");

        // Listing: recursive under a prefix, and one level with common prefixes.
        let mut all: Vec<String> = s
            .list(Some(&OPath::from("probe")))
            .map(|r| r.unwrap().location.to_string())
            .collect::<Vec<_>>()
            .await;
        all.sort();
        assert_eq!(
            all,
            [
                "probe/heads/main",
                "probe/objects/aa/one",
                "probe/objects/bb/two"
            ]
        );
        let lvl = s
            .list_with_delimiter(Some(&OPath::from("probe/objects")))
            .await
            .unwrap();
        let mut pre: Vec<String> = lvl.common_prefixes.iter().map(|p| p.to_string()).collect();
        pre.sort();
        assert_eq!(pre, ["probe/objects/aa", "probe/objects/bb"]);
        assert!(lvl.objects.is_empty());

        // Delete; a missing key is NotFound on get.
        s.delete(&a).await.unwrap();
        match s.get(&a).await {
            Err(object_store::Error::NotFound { .. }) => {}
            other => panic!("get of a deleted key: {:?}", other.map(|_| "an object")),
        }
        let left: Vec<String> = s
            .list(Some(&OPath::from("probe")))
            .map(|r| r.unwrap().location.to_string())
            .collect::<Vec<_>>()
            .await;
        assert_eq!(left.len(), 2, "{left:?}");
    });
}

#[test]
fn garage_multipart_20_mib() {
    let g = Garage::single();
    let s = s3(&g);
    rt().block_on(async {
        let p = OPath::from("probe/packs/big");
        let data = pattern(20 << 20, 42);
        let up = s.put_multipart(&p).await.unwrap();
        // 5 MiB parts (S3's minimum for all but the last), written in odd-sized pieces.
        let mut w = WriteMultipart::new_with_chunk_size(up, 5 << 20);
        for piece in data.chunks(3 << 20 | 12345) {
            w.write(piece);
        }
        w.finish().await.unwrap();
        assert_eq!(s.head(&p).await.unwrap().size, data.len() as u64);
        let back = get_bytes(&s, &p).await;
        assert!(back == data, "20 MiB multipart object read back differs");
        // A ranged read inside the third part.
        let r = s
            .get_range(&p, (11 << 20)..(11 << 20) + 4096)
            .await
            .unwrap();
        assert_eq!(&r[..], &data[11 << 20..(11 << 20) + 4096]);
    });
}

/// What a conditional PUT did.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The server accepted it (for a precondition that should have failed: it
    /// overwrote).
    Written,
    /// object_store's AlreadyExists (create) or Precondition (update).
    Refused,
    Other(String),
}

fn outcome(r: object_store::Result<object_store::PutResult>) -> Outcome {
    match r {
        Ok(_) => Outcome::Written,
        Err(
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. },
        ) => Outcome::Refused,
        Err(e) => Outcome::Other(e.to_string()),
    }
}

/// The fact the remote's head safety rests on: Garage 2.5 ignores If-None-Match and
/// If-Match on PutObject, so "create if absent" and "compare-and-swap" both silently
/// overwrite. GET preconditions, by contrast, are honoured.
#[test]
fn garage_conditional_put_is_not_enforced() {
    let g = Garage::single();
    let s = s3(&g);
    rt().block_on(async {
        let k = OPath::from("probe/heads/create-twice");
        let first = s.put_opts(&k, PutPayload::from_static(b"writer-1"), PutMode::Create.into()).await;
        assert_eq!(outcome(first), Outcome::Written, "the first create of a new key");
        let second = s.put_opts(&k, PutPayload::from_static(b"writer-2"), PutMode::Create.into()).await;
        let second = outcome(second);
        let now = get_bytes(&s, &k).await;
        eprintln!("Garage: PutMode::Create on an existing key -> {second:?}; object now {:?}", String::from_utf8_lossy(&now));
        assert_eq!(
            (second, now.as_slice()),
            (Outcome::Written, &b"writer-2"[..]),
            "Garage's create-if-absent changed behaviour: update docs/SEMANTICS.md (Remotes) and DECISIONS D39"
        );

        // Compare-and-swap with a stale ETag.
        let k = OPath::from("probe/heads/cas");
        let v1 = s.put(&k, PutPayload::from_static(b"v1")).await.unwrap();
        let v2 = s.put(&k, PutPayload::from_static(b"v2")).await.unwrap();
        assert_ne!(v1.e_tag, v2.e_tag, "different bytes, different ETags");
        let stale = UpdateVersion { e_tag: v1.e_tag.clone(), version: None };
        let r = outcome(s.put_opts(&k, PutPayload::from_static(b"v3-from-stale"), PutOptions::from(PutMode::Update(stale))).await);
        let now = get_bytes(&s, &k).await;
        eprintln!("Garage: PutMode::Update with a stale ETag -> {r:?}; object now {:?}", String::from_utf8_lossy(&now));
        assert_eq!(
            (r, now.as_slice()),
            (Outcome::Written, &b"v3-from-stale"[..]),
            "Garage's compare-and-swap changed behaviour: update docs/SEMANTICS.md (Remotes) and DECISIONS D39"
        );
        // With the current ETag it is (trivially) written too.
        let cur = s.head(&k).await.unwrap();
        let upd = UpdateVersion { e_tag: cur.e_tag, version: None };
        assert_eq!(outcome(s.put_opts(&k, PutPayload::from_static(b"v4"), PutMode::Update(upd).into()).await), Outcome::Written);

        // GET preconditions are checked: If-None-Match with the current ETag is
        // NotModified, If-Match with a stale one is Precondition.
        let cur = s.head(&k).await.unwrap();
        let r = s.get_opts(&k, GetOptions { if_none_match: cur.e_tag.clone(), ..Default::default() }).await;
        assert!(matches!(r, Err(object_store::Error::NotModified { .. })), "GET If-None-Match: {:?}", r.map(|_| "an object"));
        let r = s.get_opts(&k, GetOptions { if_match: v1.e_tag.clone(), ..Default::default() }).await;
        assert!(matches!(r, Err(object_store::Error::Precondition { .. })), "GET If-Match stale: {:?}", r.map(|_| "an object"));
    });
}

/// `file://` (object_store's LocalFileSystem): create-if-absent is enforced (a hard
/// link), compare-and-swap is not implemented at all.
#[test]
fn file_conditional_put() {
    let dir = tempfile::tempdir().unwrap();
    let s = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    rt().block_on(async {
        let k = OPath::from("heads/main");
        assert_eq!(
            outcome(
                s.put_opts(
                    &k,
                    PutPayload::from_static(b"writer-1"),
                    PutMode::Create.into()
                )
                .await
            ),
            Outcome::Written
        );
        assert_eq!(
            outcome(
                s.put_opts(
                    &k,
                    PutPayload::from_static(b"writer-2"),
                    PutMode::Create.into()
                )
                .await
            ),
            Outcome::Refused
        );
        assert_eq!(get_bytes(&s, &k).await, b"writer-1");
        let cur = s.head(&k).await.unwrap();
        let upd = UpdateVersion {
            e_tag: cur.e_tag,
            version: None,
        };
        match s
            .put_opts(
                &k,
                PutPayload::from_static(b"v2"),
                PutMode::Update(upd).into(),
            )
            .await
        {
            Err(object_store::Error::NotImplemented { .. }) => {}
            other => panic!(
                "LocalFileSystem PutMode::Update: {:?}",
                other.map(|_| "written")
            ),
        }
        assert_eq!(get_bytes(&s, &k).await, b"writer-1");
    });
}

/// The 3-node cluster of the harness (replication 3): objects written with every node
/// up are read, and new ones written, through another node with one node stopped;
/// the stopped node, restarted, serves them too.
#[test]
fn garage_cluster_of_three_survives_one_node_down() {
    let mut g = Garage::cluster();
    assert_eq!(g.nodes().len(), 3);
    let before = pattern(6 << 20, 3);
    rt().block_on(async {
        let s = s3(&g);
        s.put(&OPath::from("c/before"), PutPayload::from(before.clone())).await.unwrap();
    });
    g.stop_node(0);
    assert!(g.nodes()[0].pid().is_none());
    // `endpoint()` is now node 1's.
    assert_eq!(g.endpoint(), g.nodes()[1].endpoint());
    rt().block_on(async {
        let s = s3(&g);
        assert!(get_bytes(&s, &OPath::from("c/before")).await == before, "read with node 0 down");
        s.put(&OPath::from("c/after"), PutPayload::from_static(b"written with node 0 down")).await.unwrap();
        let mut names: Vec<String> = s.list(Some(&OPath::from("c"))).map(|r| r.unwrap().location.to_string()).collect::<Vec<_>>().await;
        names.sort();
        assert_eq!(names, ["c/after", "c/before"]);
    });
    g.restart_node(0);
    rt().block_on(async {
        let s = s3(&g);
        assert_eq!(g.endpoint(), g.nodes()[0].endpoint());
        assert_eq!(get_bytes(&s, &OPath::from("c/after")).await, b"written with node 0 down");
    });
}
