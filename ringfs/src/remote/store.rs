//! The transport of a remote: parsing its URL, building the `object_store`
//! backend (`LocalFileSystem` for `file:///DIR`, `AmazonS3` for
//! `s3://BUCKET/PREFIX` from the AWS_* environment), the small tokio
//! runtime that drives it, and fetches verified against their BLAKE3 key.
//!
//! Secrets: credentials are read from the environment at each use and
//! never stored, printed or put in an error (errors name the URL and key).

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};

/// Objects of at least this many bytes go up as multipart uploads
/// ([`Remote::put`]); tests set a smaller one with RINGFS_TEST_MULTIPART_MIN.
pub const MULTIPART_MIN: usize = 64 << 20;
/// The part size of a multipart upload (S3 wants ≥ 5 MiB but the last).
pub const PART_SIZE: usize = 16 << 20;
/// GETs in flight at once when a clone fetches its metadata (bundle
/// indexes, object bundles).
pub const GETS_IN_FLIGHT: usize = 8;
/// Parts of one upload in flight at once.
const PARTS_IN_FLIGHT: usize = 2;

/// (threshold, part size): [`MULTIPART_MIN`] and [`PART_SIZE`], or with
/// RINGFS_TEST_MULTIPART_MIN=N the threshold N and parts of N / 2.
fn multipart_sizes() -> (usize, usize) {
    match std::env::var("RINGFS_TEST_MULTIPART_MIN")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(n) if n >= 2 => (n, n / 2),
        _ => (MULTIPART_MIN, PART_SIZE),
    }
}

/// A parsed remote URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Url {
    /// `file:///DIR` (an absolute directory).
    File(std::path::PathBuf),
    /// `s3://BUCKET[/PREFIX]`.
    S3 { bucket: String, prefix: String },
}

/// Parses and checks `url` (nothing is contacted). Errors: one line naming
/// the accepted forms.
pub fn parse_url(url: &str) -> Result<Url> {
    let forms = "a remote URL is file:///ABSOLUTE/DIR or s3://BUCKET[/PREFIX]";
    if let Some(rest) = url.strip_prefix("file://") {
        if !rest.starts_with('/') {
            bail!("{url:?}: {forms} (file:// takes an absolute path, three slashes in all)");
        }
        let p = std::path::PathBuf::from(rest.trim_end_matches('/'));
        if p.as_os_str().is_empty() {
            bail!("{url:?}: the root directory cannot be a remote; {forms}");
        }
        return Ok(Url::File(p));
    }
    if let Some(rest) = url.strip_prefix("s3://") {
        // Not echoed: it may hold a secret.
        if rest.contains('@') || rest.contains('?') || rest.contains('#') {
            bail!("an s3:// URL takes no credentials, query or fragment (credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY); {forms}");
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
        if bucket.len() < 3 || bucket.len() > 63 || !bucket.chars().all(ok) {
            bail!("{url:?}: {bucket:?} is not an S3 bucket name (3 to 63 of a-z 0-9 . -); {forms}");
        }
        let prefix = prefix.trim_matches('/').to_string();
        if prefix.split('/').any(|s| s == "." || s == "..") || prefix.contains("//") {
            bail!("{url:?}: the prefix may not hold empty, . or .. parts; {forms}");
        }
        return Ok(Url::S3 {
            bucket: bucket.to_string(),
            prefix,
        });
    }
    bail!("{url:?}: {forms}")
}

/// An open remote: its backend, key prefix and runtime.
pub struct Remote {
    pub url: String,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    rt: tokio::runtime::Runtime,
    /// A `file://` remote's directory: what a write makes under it is
    /// made private to its owner (D87).
    file_root: Option<std::path::PathBuf>,
}

/// Why a get failed: absent, or anything else (with its text).
pub enum Miss {
    NotFound,
    Other(anyhow::Error),
}

impl Remote {
    /// Opens `url` (checked by [`parse_url`]). `file://`: the directory must
    /// exist (`create` makes it). `s3://`: endpoint, region and credentials
    /// from the environment, plain http allowed, path-style requests.
    /// Tests: RINGFS_TEST_NO_CAS=1 wraps the backend in one that ignores
    /// create-if-absent (as Garage 2.5 does).
    pub fn open(url: &str, create: bool) -> Result<Remote> {
        let parsed = parse_url(url)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the remote runtime")?;
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match &parsed {
            Url::File(dir) => {
                if create {
                    // 0700 (D87): only its owner reads what is pushed.
                    fs_core::private::create_dir_all(dir).with_context(|| {
                        format!("creating the remote directory {}", dir.display())
                    })?;
                }
                if !dir.is_dir() {
                    bail!(
                        "remote {url}: {} is not a directory (moved, removed or unmounted?)",
                        dir.display()
                    );
                }
                // A PUT returns once the file and its directory entry are on
                // disk (an object server's PUT is durable too: a head must
                // never name objects a crash can take back), and a delete
                // takes the directories it empties with it.
                let fs = object_store::local::LocalFileSystem::new_with_prefix(dir)
                    .map_err(|e| anyhow!("remote {url}: {e}"))?
                    .with_fsync(true)
                    .with_automatic_cleanup(true);
                (Arc::new(fs), String::new())
            }
            Url::S3 { bucket, prefix } => {
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_allow_http(true)
                    .with_virtual_hosted_style_request(false);
                if std::env::var_os("AWS_REGION").is_none()
                    && std::env::var_os("AWS_DEFAULT_REGION").is_none()
                {
                    b = b.with_region("us-east-1");
                }
                b = b.with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch);
                // An unreachable endpoint is reported in seconds, not after
                // object_store's default 3 minutes of retries.
                let retry = object_store::RetryConfig { max_retries: 4, retry_timeout: std::time::Duration::from_secs(30), ..Default::default() };
                // with_client_options replaces every client option set so far:
                // allow plain http again (Garage and other local endpoints).
                let client = object_store::ClientOptions::new().with_allow_http(true).with_connect_timeout(std::time::Duration::from_secs(5));
                b = b.with_retry(retry).with_client_options(client);
                let s = b
                    .build()
                    .map_err(|e| anyhow!("remote {url}: {}", scrub(&e.to_string())))?;
                (Arc::new(s), prefix.clone())
            }
        };
        let store: Arc<dyn ObjectStore> = if std::env::var_os("RINGFS_TEST_NO_CAS").is_some() {
            Arc::new(super::nocas::NoCas(store))
        } else {
            store
        };
        let file_root = match parsed {
            Url::File(d) => Some(d),
            Url::S3 { .. } => None,
        };
        Ok(Remote {
            url: url.to_string(),
            store,
            prefix,
            rt,
            file_root,
        })
    }

    /// After a write of `k` on a `file://` remote: the file made 0600 and
    /// the directories between the remote's and it 0700 (object_store
    /// creates them 0644 and 0755 less the umask; D87). The remote's own
    /// directory is left as it is (0700 when `remote add` made it). A
    /// directory another user owns (a shared remote) is left as it is.
    /// Errors: the file cannot be made private.
    fn seal(&self, k: &str) -> Result<()> {
        let Some(root) = &self.file_root else { return Ok(()) };
        let file = root.join(self.key(k).as_ref());
        let mut dir = root.clone();
        if let Some(parent) = std::path::Path::new(k).parent() {
            for c in parent.components() {
                dir.push(c);
                let _ = fs_core::private::restrict(&dir);
            }
        }
        fs_core::private::restrict(&file).with_context(|| format!("remote {}: making {k} private (mode 0600)", self.url))
    }

    /// The full key of `k` (under the URL's prefix).
    pub fn key(&self, k: &str) -> Key {
        if self.prefix.is_empty() {
            Key::from(k)
        } else {
            Key::from(format!("{}/{k}", self.prefix))
        }
    }

    fn err(&self, what: &str, k: &str, e: object_store::Error) -> anyhow::Error {
        let text = scrub(&e.to_string());
        // A full disk under a file:// remote: name it and what to do.
        if let (true, Ok(Url::File(d))) = (fs_core::says_full(&text), parse_url(&self.url)) {
            return anyhow!(
                "remote {}: {} (what was sent stays: a push sends only the rest)",
                self.url,
                fs_core::full_disk(&d, &format!("{what} {k}: {text}"))
            );
        }
        anyhow!("remote {}: {what} {k}: {text}", self.url)
    }

    /// Writes `bytes` at `k` (overwriting): one PUT, or a multipart
    /// upload for [`MULTIPART_MIN`] bytes and more (parts of
    /// [`PART_SIZE`], two in flight; the object appears only when the
    /// upload completes, and a failed upload is aborted — one cut short by
    /// a kill is left to the server: see docs/FORMATS.md "Remote layout").
    /// On a `file://` remote the file is made 0600 (D87). Errors name the
    /// URL and key.
    pub fn put(&self, k: &str, bytes: Vec<u8>) -> Result<()> {
        let key = self.key(k);
        let (min, part) = multipart_sizes();
        if bytes.len() >= min {
            self.rt
                .block_on(self.put_multipart(&key, &bytes, part))
                .map_err(|e| self.err("writing (multipart)", k, e))?;
        } else {
            self.rt
                .block_on(self.store.put(&key, PutPayload::from(bytes)))
                .map_err(|e| self.err("writing", k, e))?;
        }
        self.seal(k)
    }

    async fn put_multipart(
        &self,
        key: &Key,
        bytes: &[u8],
        part: usize,
    ) -> object_store::Result<()> {
        let up = self.store.put_multipart(key).await?;
        let mut w = WriteMultipart::new_with_chunk_size(up, part);
        let mut first = true;
        for p in bytes.chunks(part) {
            if let Err(e) = w.wait_for_capacity(PARTS_IN_FLIGHT).await {
                let _ = w.abort().await;
                return Err(e);
            }
            w.write(p);
            if first && super::failpoint("part-sent") {
                // Tests: killed once the first part is on the server.
                let _ = w.wait_for_capacity(0).await;
                std::process::abort();
            }
            first = false;
        }
        w.finish().await.map(|_| ())
    }

    /// After a failed write under `dir/`: on a `file://` remote, removes
    /// `dir` if it is empty (the write made it for its staging file; an
    /// object server has no directories). Errors are ignored.
    pub fn tidy(&self, dir: &str) {
        if let Ok(Url::File(d)) = parse_url(&self.url) {
            let _ = std::fs::remove_dir(d.join(dir));
        }
    }

    /// The size in bytes of the object at `k` (one HEAD), None when there
    /// is none. Errors name the URL and key.
    pub fn size(&self, k: &str) -> Result<Option<u64>> {
        let key = self.key(k);
        match self.rt.block_on(self.store.head(&key)) {
            Ok(m) => Ok(Some(m.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err("asking for", k, e)),
        }
    }

    /// Creates `k` only if absent: Ok(true) created, Ok(false) it existed.
    /// (Where the server ignores the condition, Ok(true) either way.)
    pub fn create(&self, k: &str, bytes: Vec<u8>) -> Result<bool> {
        let key = self.key(k);
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .rt
            .block_on(self.store.put_opts(&key, PutPayload::from(bytes), opts))
        {
            Ok(_) => self.seal(k).map(|()| true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(self.err("creating", k, e)),
        }
    }

    /// The bytes at `k`.
    pub fn get(&self, k: &str) -> std::result::Result<Vec<u8>, Miss> {
        let key = self.key(k);
        let r = self.rt.block_on(async {
            let g = self.store.get(&key).await?;
            g.bytes().await
        });
        match r {
            Ok(b) => Ok(b.to_vec()),
            Err(object_store::Error::NotFound { .. }) => Err(Miss::NotFound),
            Err(e) => Err(Miss::Other(self.err("reading", k, e))),
        }
    }

    /// The bytes at `k`, which must exist and hash (BLAKE3) to `hex`.
    /// Errors: missing, or a mismatch, each naming the key.
    pub fn get_verified(&self, k: &str, hex: &str) -> Result<Vec<u8>> {
        let b = match self.get(k) {
            Ok(b) => b,
            Err(Miss::NotFound) => bail!(
                "remote {}: {k} is missing (the remote lost an object a head needs)",
                self.url
            ),
            Err(Miss::Other(e)) => return Err(e),
        };
        let got = blake3::hash(&b).to_hex();
        if got.as_str() != hex {
            bail!("remote {}: {k} is corrupt: its bytes hash to {got}, not the {hex} its name says (nothing from it was used)", self.url);
        }
        Ok(b)
    }

    /// The bytes of each key of `keys` (key, the hex BLAKE3 hash its bytes
    /// must have), in the same order, fetched [`GETS_IN_FLIGHT`] at a time.
    /// Errors: as [`Remote::get_verified`], for the first key that failed.
    pub fn get_many_verified(&self, keys: &[(String, String)]) -> Result<Vec<Vec<u8>>> {
        use futures_util::stream::{self, StreamExt, TryStreamExt};
        let got: Vec<std::result::Result<Vec<u8>, (usize, object_store::Error)>> = self.rt.block_on(
            stream::iter(keys.iter().enumerate().map(|(i, (k, _))| {
                let key = self.key(k);
                async move {
                    let g = self.store.get(&key).await.map_err(|e| (i, e))?;
                    g.bytes().await.map(|b| b.to_vec()).map_err(|e| (i, e))
                }
            }))
            .buffered(GETS_IN_FLIGHT)
            .map(Ok::<_, std::convert::Infallible>)
            .try_collect(),
        ).unwrap_or_else(|e| match e {});
        let mut out = Vec::with_capacity(keys.len());
        for (r, (k, hex)) in got.into_iter().zip(keys) {
            let b = match r {
                Ok(b) => b,
                Err((_, object_store::Error::NotFound { .. })) => bail!(
                    "remote {}: {k} is missing (the remote lost an object a head needs)",
                    self.url
                ),
                Err((_, e)) => return Err(self.err("reading", k, e)),
            };
            let h = blake3::hash(&b).to_hex();
            if h.as_str() != hex {
                bail!("remote {}: {k} is corrupt: its bytes hash to {h}, not the {hex} its name says (nothing from it was used)", self.url);
            }
            out.push(b);
        }
        Ok(out)
    }

    /// The bytes of `ranges` (byte offsets, end exclusive) of `k`, one
    /// slice per range (lazy clones fetch chunks so; object_store coalesces
    /// near ranges into one GET, and the slices share its body, uncopied).
    /// Errors name the URL and key (a missing key as missing).
    pub fn get_ranges(&self, k: &str, ranges: &[std::ops::Range<u64>]) -> Result<Vec<bytes::Bytes>> {
        let key = self.key(k);
        match self.rt.block_on(self.store.get_ranges(&key, ranges)) {
            Ok(v) => Ok(v),
            Err(object_store::Error::NotFound { .. }) => bail!("remote {}: {k} is missing", self.url),
            Err(e) => Err(self.err("reading", k, e)),
        }
    }

    /// Removes `k` (absent is fine).
    pub fn delete(&self, k: &str) -> Result<()> {
        let key = self.key(k);
        match self.rt.block_on(self.store.delete(&key)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("deleting", k, e)),
        }
    }

    /// The keys directly under `dir` (names relative to `dir`).
    pub fn list(&self, dir: &str) -> Result<Vec<String>> {
        let key = self.key(dir);
        let r = self.rt.block_on(self.store.list_with_delimiter(Some(&key)));
        let r = match r {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(self.err("listing", dir, e)),
        };
        Ok(r.objects
            .into_iter()
            .filter_map(|m| m.location.filename().map(|s| s.to_string()))
            .collect())
    }

    /// The "directories" directly under `dir` (common prefixes).
    pub fn list_dirs(&self, dir: &str) -> Result<Vec<String>> {
        let key = self.key(dir);
        let r = match self.rt.block_on(self.store.list_with_delimiter(Some(&key))) {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(self.err("listing", dir, e)),
        };
        Ok(r.common_prefixes
            .into_iter()
            .filter_map(|p| p.filename().map(|s| s.to_string()))
            .collect())
    }

    /// Checks the remote answers (a listing of its root).
    pub fn ping(&self) -> Result<()> {
        if let Ok(Url::File(d)) = parse_url(&self.url) {
            if !d.is_dir() {
                bail!(
                    "remote {}: {} is not a directory any more (moved, removed or unmounted?)",
                    self.url,
                    d.display()
                );
            }
        }
        self.list("heads").map(|_| ())
    }
}

/// An error's text with anything that looks like a secret removed (the
/// secret key's value if it appears, and signature fields).
pub fn scrub(s: &str) -> String {
    let mut out = s.to_string();
    for v in [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ACCESS_KEY_ID",
    ] {
        if let Ok(x) = std::env::var(v) {
            if x.len() >= 4 {
                out = out.replace(&x, "[redacted]");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("file:///tmp/x/").unwrap(),
            Url::File("/tmp/x".into())
        );
        assert_eq!(
            parse_url("s3://bucket-1/a/b/").unwrap(),
            Url::S3 {
                bucket: "bucket-1".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(
            parse_url("s3://bucket").unwrap(),
            Url::S3 {
                bucket: "bucket".into(),
                prefix: "".into()
            }
        );
        for bad in [
            "file://rel",
            "file:///",
            "http://x",
            "s3://B",
            "s3://ab",
            "s3://user:pw@bucket/x",
            "s3://bucket/a/../b",
            "/tmp/x",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }
}
