//! One Garage node on loopback for the sync section: the single-node path
//! of the test harness (`ringfs/tests/common/garage.rs`, DECISIONS D39),
//! kept minimal and returning errors instead of panicking. Random free
//! ports on 127.0.0.1, SQLite metadata, a random `rpc_secret`, everything
//! under a directory the caller owns; setup through the `garage` CLI
//! (`status` until it answers, `layout assign` + `apply`, `key import`,
//! `bucket create`, `bucket allow`). Drop SIGKILLs the node by PID.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The bucket the section's remotes live in.
pub const BUCKET: &str = "ringfs-bench";
/// The region the node announces.
pub const REGION: &str = "garage";
const BOOT: Duration = Duration::from_secs(30);

/// A running single Garage node with a bucket and a key.
pub struct Garage {
    bin: PathBuf,
    config: PathBuf,
    child: Option<Child>,
    /// `http://127.0.0.1:PORT` of its S3 API.
    pub endpoint: String,
    pub key_id: String,
    pub secret: String,
}

fn hex(n: usize) -> String {
    (0..n)
        .map(|_| format!("{:02x}", fastrand::u8(..)))
        .collect()
}

impl Garage {
    /// Starts a node under `dir` (created) with `bin` (`garage` on PATH).
    pub fn start(bin: &Path, dir: &Path) -> Result<Garage> {
        for sub in ["meta", "data"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let ls: Vec<TcpListener> = (0..3)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<_>>()?;
        let p: Vec<u16> = ls
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<std::io::Result<_>>()?;
        drop(ls);
        let config = dir.join("garage.toml");
        std::fs::write(
            &config,
            format!(
                "metadata_dir = \"{d}/meta\"\ndata_dir = \"{d}/data\"\ndb_engine = \"sqlite\"\nreplication_factor = 1\n\
                 rpc_bind_addr = \"127.0.0.1:{}\"\nrpc_public_addr = \"127.0.0.1:{}\"\nrpc_secret = \"{}\"\n\n\
                 [s3_api]\ns3_region = \"{REGION}\"\napi_bind_addr = \"127.0.0.1:{}\"\n\n[admin]\napi_bind_addr = \"127.0.0.1:{}\"\n",
                p[0],
                p[0],
                hex(32),
                p[1],
                p[2],
                d = dir.display()
            ),
        )?;
        let log = std::fs::File::create(dir.join("garage.log"))?;
        let child = Command::new(bin)
            .arg("-c")
            .arg(&config)
            .arg("server")
            .env("RUST_LOG", "garage=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} server", bin.display()))?;
        let mut g = Garage {
            bin: bin.into(),
            config,
            child: Some(child),
            endpoint: format!("http://127.0.0.1:{}", p[1]),
            key_id: format!("GK{}", hex(12)),
            secret: hex(32),
        };
        let t0 = Instant::now();
        while !g.cli(&["status"]).is_ok() {
            if let Some(st) = g.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                g.child = None;
                bail!(
                    "garage server exited ({st}); see {}",
                    dir.join("garage.log").display()
                );
            }
            if t0.elapsed() > BOOT {
                bail!(
                    "garage did not answer within {BOOT:?}; see {}",
                    dir.join("garage.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let id = g.cli(&["node", "id", "-q"])?;
        let id = id.trim().split('@').next().unwrap_or("").to_string();
        g.cli(&["layout", "assign", "-z", "dc1", "-c", "10G", &id])?;
        g.cli(&["layout", "apply", "--version", "1"])?;
        let (k, s) = (g.key_id.clone(), g.secret.clone());
        g.retry(&["key", "import", "--yes", "-n", "ringfs-bench", &k, &s])?;
        g.retry(&["bucket", "create", BUCKET])?;
        g.retry(&[
            "bucket", "allow", "--read", "--write", "--owner", BUCKET, "--key", &k,
        ])?;
        Ok(g)
    }

    fn cli(&self, args: &[&str]) -> Result<String> {
        let o = Command::new(&self.bin)
            .arg("-c")
            .arg(&self.config)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .output()?;
        if !o.status.success() {
            bail!(
                "garage {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    fn retry(&self, args: &[&str]) -> Result<String> {
        let t0 = Instant::now();
        loop {
            match self.cli(args) {
                Ok(s) => return Ok(s),
                Err(e) if t0.elapsed() > BOOT => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The AWS_* variables that point ringfs (and object_store) at the node.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", self.key_id.as_str()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.as_str()),
            ("AWS_ENDPOINT_URL", self.endpoint.as_str()),
            ("AWS_REGION", REGION),
            ("AWS_ALLOW_HTTP", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
