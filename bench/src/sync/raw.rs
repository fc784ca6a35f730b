//! The sync section's limits: the same bytes moved by `object_store`
//! directly, with the backend ringfs uses (DECISIONS D38: `AmazonS3` with
//! path-style requests and plain http, or `LocalFileSystem`; one PUT per
//! object, no multipart, default retries), with
//! nothing of ringfs in between — what `aws s3 cp` / `aws s3 sync` would
//! cost on this server.
//!
//! - [`Raw::put_all`]: PUT objects one after another (one per file, as an
//!   upload tool sends a tree), the time of the PUTs only;
//! - [`Raw::get_all`]: list every key under the prefix, GET each (8 at a
//!   time, as `aws s3 sync` does 10) and write it to a local directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

/// Where a remote lives, for ringfs (its URL and environment) and for
/// object_store directly.
#[derive(Clone, Debug)]
pub enum Where {
    /// `file:///DIR`.
    File(PathBuf),
    /// A bucket of an S3 endpoint (Garage on loopback), with its key.
    S3 {
        endpoint: String,
        key_id: String,
        secret: String,
        region: String,
        bucket: String,
    },
}

/// GETs in flight in [`Raw::get_all`].
pub const GET_CONCURRENCY: usize = 8;

/// An object_store backend at one prefix of a [`Where`].
pub struct Raw {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    rt: tokio::runtime::Runtime,
}

impl Raw {
    /// The backend for `prefix` of `w` (a `file://` directory is created).
    pub fn open(w: &Where, prefix: &str) -> Result<Raw> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match w {
            Where::File(d) => {
                let d = d.join(prefix);
                std::fs::create_dir_all(&d)?;
                (
                    Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&d)?),
                    String::new(),
                )
            }
            Where::S3 {
                endpoint,
                key_id,
                secret,
                region,
                bucket,
            } => {
                let s = object_store::aws::AmazonS3Builder::new()
                    .with_endpoint(endpoint)
                    .with_access_key_id(key_id)
                    .with_secret_access_key(secret)
                    .with_region(region)
                    .with_bucket_name(bucket)
                    .with_allow_http(true)
                    .with_virtual_hosted_style_request(false)
                    .build()
                    .map_err(|e| anyhow!("object_store for {endpoint}: {e}"))?;
                (Arc::new(s), prefix.trim_matches('/').to_string())
            }
        };
        Ok(Raw { store, prefix, rt })
    }

    fn key(&self, k: &str) -> Key {
        if self.prefix.is_empty() {
            Key::from(k)
        } else {
            Key::from(format!("{}/{k}", self.prefix))
        }
    }

    /// PUTs `objs` (name, bytes) one after another; the wall time in ms.
    pub fn put_all(&self, objs: Vec<(String, Vec<u8>)>) -> Result<f64> {
        let t = Instant::now();
        self.rt.block_on(async {
            for (k, b) in objs {
                self.store
                    .put(&self.key(&k), PutPayload::from(b))
                    .await
                    .with_context(|| format!("raw PUT {k}"))?;
            }
            anyhow::Ok(())
        })?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }

    /// Lists every key under the prefix and GETs each ([`GET_CONCURRENCY`]
    /// at a time) into a file under `out`: (wall ms, objects, bytes).
    pub fn get_all(&self, out: &Path) -> Result<(f64, u64, u64)> {
        std::fs::create_dir_all(out)?;
        let t = Instant::now();
        let r = self.rt.block_on(async {
            let base = if self.prefix.is_empty() {
                None
            } else {
                Some(Key::from(self.prefix.as_str()))
            };
            let metas: Vec<_> = self.store.list(base.as_ref()).try_collect().await?;
            let n = metas.len() as u64;
            let sizes: Vec<u64> = futures_util::stream::iter(metas.into_iter().enumerate())
                .map(|(i, m)| {
                    let store = self.store.clone();
                    let path = out.join(format!("{i}"));
                    async move {
                        let b = store.get(&m.location).await?.bytes().await?;
                        tokio::fs::write(&path, &b).await.map_err(|e| {
                            object_store::Error::Generic {
                                store: "local",
                                source: Box::new(e),
                            }
                        })?;
                        Ok::<u64, object_store::Error>(b.len() as u64)
                    }
                })
                .buffer_unordered(GET_CONCURRENCY)
                .try_collect()
                .await?;
            Ok::<(u64, u64), object_store::Error>((n, sizes.iter().sum()))
        });
        let (n, bytes) = r.map_err(|e| anyhow!("raw download: {e}"))?;
        Ok((t.elapsed().as_secs_f64() * 1e3, n, bytes))
    }
}
