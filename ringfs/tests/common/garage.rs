//! Garage (a distributed S3-compatible object store) on loopback, for the remote tests.
//!
//! [`Garage::single`] starts one node, [`Garage::cluster`] three nodes with
//! `replication_factor = 3`; both on 127.0.0.1 with random free ports (RPC, S3 API,
//! admin API) in a private temp dir (per node: `meta/`, `data/`, `garage.toml`,
//! `garage.log`; `db_engine = "sqlite"`, a random `rpc_secret`). Setup goes through the
//! `garage` CLI the way an operator would: wait until the node answers RPC
//! (`garage status`), `node connect` the others (cluster), `layout assign` every node in
//! one layout and `layout apply --version 1`, import a key, create a bucket and allow the
//! key read/write/owner on it. Everything is polled in 50 ms steps; no fixed sleeps.
//!
//! Drop kills every node it started (SIGKILL by PID, then waits for it) and removes the
//! temp dir, on every path including panics (a panicking test also gets the tail of each
//! node's log on stderr).
//!
//! The `garage` binary is taken from `RINGFS_TEST_GARAGE` if set, else from `PATH`; when
//! there is none the test fails (never skips) saying to run `scripts/setup.sh`, which
//! installs the pinned version ([`GARAGE_VERSION`]).
//!
//! Environment handed to `ringfs` (and to object_store's `AmazonS3Builder::from_env`):
//! [`Garage::env`] — `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`,
//! `AWS_REGION` (= [`REGION`]) and `AWS_ALLOW_HTTP=true` (the endpoint is plain http).

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::{out_str, run_timeout};

/// The Garage release `scripts/setup.sh` installs and these tests are written against.
pub const GARAGE_VERSION: &str = "2.5.0";
/// The S3 region every test node announces (`[s3_api] s3_region`).
pub const REGION: &str = "garage";
/// Bucket created on every test cluster.
pub const BUCKET: &str = "ringfs-test";

/// How long a node may take to answer its first RPC, and a cluster to accept the
/// bucket after the layout is applied (a loaded 2-core CI machine).
const BOOT_TIMEOUT: Duration = Duration::from_secs(30);
const STEP: Duration = Duration::from_millis(50);
const CLI_TIMEOUT: Duration = Duration::from_secs(20);

/// The `garage` executable: `RINGFS_TEST_GARAGE`, else `garage` on PATH. Panics with
/// the fix (`scripts/setup.sh`) when it cannot be run.
pub fn garage_bin() -> PathBuf {
    let bin = std::env::var_os("RINGFS_TEST_GARAGE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("garage"));
    match Command::new(&bin).arg("--version").stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => {
            let v = String::from_utf8_lossy(&o.stdout);
            if !v.contains(GARAGE_VERSION) {
                eprintln!("[garage] warning: {} is {}, these tests are written against {GARAGE_VERSION}", bin.display(), v.trim());
            }
            bin
        }
        Ok(o) => panic!("`{} --version` failed ({}): {}; run scripts/setup.sh to install Garage {GARAGE_VERSION}", bin.display(), o.status, out_str(&o).1),
        Err(e) => panic!(
            "cannot run `{}` ({e}): the S3 tests need Garage {GARAGE_VERSION} on PATH; run scripts/setup.sh (or set RINGFS_TEST_GARAGE to a garage binary)",
            bin.display()
        ),
    }
}

/// Random bytes as lowercase hex (`n` bytes → `2n` digits), from /dev/urandom.
pub fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("read /dev/urandom");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `n` distinct free TCP ports on 127.0.0.1 (held open together while chosen, then
/// released; a node that loses the race to another process is restarted with new ones).
fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// One `garage server` process and its files.
pub struct GarageNode {
    dir: PathBuf,
    config: PathBuf,
    log: PathBuf,
    /// Port of the RPC listener (`rpc_bind_addr`).
    pub rpc_port: u16,
    /// Port of the S3 API.
    pub s3_port: u16,
    /// Port of the admin API.
    pub admin_port: u16,
    /// Full node id (hex public key), known once the node answered.
    pub node_id: String,
    child: Option<Child>,
}

impl GarageNode {
    /// `http://127.0.0.1:PORT` of this node's S3 API.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }
    /// PID of the running server, `None` once stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
    /// The node's log (stdout and stderr of `garage server`).
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// `id@127.0.0.1:rpc_port`, what `garage node connect` takes.
    pub fn peer_addr(&self) -> String {
        format!("{}@127.0.0.1:{}", self.node_id, self.rpc_port)
    }

    fn write_config(&self, replication: usize, secret: &str) {
        let cfg = format!(
            r#"metadata_dir = "{dir}/meta"
data_dir = "{dir}/data"
db_engine = "sqlite"
replication_factor = {replication}
rpc_bind_addr = "127.0.0.1:{rpc}"
rpc_public_addr = "127.0.0.1:{rpc}"
rpc_secret = "{secret}"

[s3_api]
s3_region = "{REGION}"
api_bind_addr = "127.0.0.1:{s3}"

[admin]
api_bind_addr = "127.0.0.1:{admin}"
"#,
            dir = self.dir.display(),
            rpc = self.rpc_port,
            s3 = self.s3_port,
            admin = self.admin_port,
        );
        fs::write(&self.config, cfg).expect("write garage.toml");
    }

    fn spawn(&mut self, bin: &Path) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open garage.log");
        let child = Command::new(bin)
            .arg("-c")
            .arg(&self.config)
            .arg("server")
            .env(
                "RUST_LOG",
                std::env::var("RINGFS_TEST_GARAGE_LOG").unwrap_or_else(|_| "garage=info".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} server: {e}", bin.display()));
        self.child = Some(child);
    }

    /// Kill (SIGKILL, by PID) and reap the server; no-op when already stopped.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `garage -c CONFIG ARGS` with a timeout.
    fn cli(&self, bin: &Path, args: &[&str]) -> Output {
        run_timeout(
            Command::new(bin)
                .arg("-c")
                .arg(&self.config)
                .args(args)
                .env("RUST_LOG", "warn"),
            CLI_TIMEOUT,
        )
    }

    /// Polls `garage status` until the server answers RPC, then reads its id. `Err(log)` when the server
    /// exited (e.g. a port was taken meanwhile); panics after [`BOOT_TIMEOUT`].
    fn wait_ready(&mut self, bin: &Path) -> Result<(), String> {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!("garage server exited ({st}):\n{}", self.log()));
            }
            // `node id` only reads the key file; `status` is a real RPC round trip.
            let o = self.cli(bin, &["status"]);
            if o.status.success() {
                let o = self.cli(bin, &["node", "id", "-q"]);
                assert!(o.status.success(), "garage node id: {}", out_str(&o).1);
                let s = String::from_utf8_lossy(&o.stdout);
                let id = s.trim().split('@').next().unwrap_or("").to_string();
                assert!(id.len() == 64, "unexpected `garage node id` output: {s:?}");
                self.node_id = id;
                return Ok(());
            }
            if t0.elapsed() > BOOT_TIMEOUT {
                panic!(
                    "garage node in {} did not answer within {BOOT_TIMEOUT:?}: {}\n--- log ---\n{}",
                    self.dir.display(),
                    out_str(&o).1,
                    self.log()
                );
            }
            thread::sleep(STEP);
        }
    }
}

/// A running Garage cluster (one or three nodes) with a bucket and a key. See the
/// module doc; Drop stops every node and removes the temp dir.
pub struct Garage {
    bin: PathBuf,
    nodes: Vec<GarageNode>,
    root: Option<tempfile::TempDir>,
    /// Access key id (`GK` + 24 hex digits) with read/write/owner on [`BUCKET`].
    pub key_id: String,
    /// Its secret (64 hex digits).
    pub secret: String,
    /// The bucket name ([`BUCKET`]).
    pub bucket: String,
}

impl Garage {
    /// One node, `replication_factor = 1`.
    pub fn single() -> Garage {
        Self::start(1)
    }

    /// Three nodes, `replication_factor = 3`, connected with `garage node connect` and
    /// assigned in one layout; the cluster keeps serving (quorum 2 of 3) with one node
    /// stopped ([`Garage::stop_node`]).
    pub fn cluster() -> Garage {
        Self::start(3)
    }

    fn start(n: usize) -> Garage {
        let bin = garage_bin();
        let t0 = Instant::now();
        let root = tempfile::Builder::new()
            .prefix("ringfs-garage-")
            .tempdir()
            .expect("tempdir");
        let secret = random_hex(32);
        let mut g = Garage {
            bin,
            nodes: Vec::new(),
            root: Some(root),
            key_id: format!("GK{}", random_hex(12)),
            secret: random_hex(32),
            bucket: BUCKET.to_string(),
        };
        for i in 0..n {
            let dir = g.root.as_ref().unwrap().path().join(format!("node{i}"));
            fs::create_dir_all(dir.join("meta")).unwrap();
            fs::create_dir_all(dir.join("data")).unwrap();
            g.nodes.push(GarageNode {
                config: dir.join("garage.toml"),
                log: dir.join("garage.log"),
                dir,
                rpc_port: 0,
                s3_port: 0,
                admin_port: 0,
                node_id: String::new(),
                child: None,
            });
            // A port taken between choosing and binding kills the server: retry.
            let mut attempt = 0;
            loop {
                attempt += 1;
                let p = free_ports(3);
                let node = &mut g.nodes[i];
                (node.rpc_port, node.s3_port, node.admin_port) = (p[0], p[1], p[2]);
                node.write_config(n, &secret);
                node.spawn(&g.bin);
                match node.wait_ready(&g.bin) {
                    Ok(()) => break,
                    Err(log) if attempt < 3 => eprintln!(
                        "[garage] node {i} failed to start, retrying with new ports: {log}"
                    ),
                    Err(log) => panic!("garage node {i} failed to start {attempt} times: {log}"),
                }
            }
        }
        // Cluster: node 0 connects to the others.
        for i in 1..n {
            let peer = g.nodes[i].peer_addr();
            g.cli_ok(&["node", "connect", &peer]);
        }
        let mut assign = vec!["layout", "assign", "-z", "dc1", "-c", "1G"];
        let ids: Vec<String> = g.nodes.iter().map(|n| n.node_id.clone()).collect();
        assign.extend(ids.iter().map(String::as_str));
        g.cli_ok(&assign);
        g.cli_ok(&["layout", "apply", "--version", "1"]);
        let (key_id, key_secret) = (g.key_id.clone(), g.secret.clone());
        // Until every node has the new layout, table writes may not reach quorum: retry.
        g.cli_retry(&[
            "key",
            "import",
            "--yes",
            "-n",
            "ringfs-test",
            &key_id,
            &key_secret,
        ]);
        g.cli_retry(&["bucket", "create", BUCKET]);
        g.cli_retry(&[
            "bucket", "allow", "--read", "--write", "--owner", BUCKET, "--key", &key_id,
        ]);
        // Node 0 connected to the others; they find each other by gossip, a moment
        // later: a node not yet connected to a peer fails quorum reads once another
        // node stops (the cluster test did, twice in CI).
        if n > 1 {
            for i in 0..n {
                g.wait_connected(i);
            }
        }
        if std::env::var_os("RINGFS_TEST_KEEP_LOGS").is_some() {
            eprintln!(
                "[garage] {n} node(s) ready in {:?} at {}",
                t0.elapsed(),
                g.endpoint()
            );
        }
        g
    }

    /// `garage ARGS` against node 0 (or the first running node), which must succeed.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let o = self.cli(args);
        let (out, err) = out_str(&o);
        assert!(
            o.status.success(),
            "garage {args:?} failed ({}): {out}{err}",
            o.status
        );
        out
    }

    /// `garage ARGS` against the first running node; the raw output.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.live_node().cli(&self.bin, args)
    }

    fn cli_retry(&self, args: &[&str]) -> String {
        let t0 = Instant::now();
        loop {
            let o = self.cli(args);
            if o.status.success() {
                return out_str(&o).0;
            }
            if t0.elapsed() > BOOT_TIMEOUT {
                let (out, err) = out_str(&o);
                panic!("garage {args:?} kept failing for {BOOT_TIMEOUT:?}: {out}{err}");
            }
            thread::sleep(STEP);
        }
    }

    fn live_node(&self) -> &GarageNode {
        self.nodes
            .iter()
            .find(|n| n.child.is_some())
            .expect("no garage node is running")
    }

    /// The nodes (index 0 is the one the CLI talks to while it runs).
    pub fn nodes(&self) -> &[GarageNode] {
        &self.nodes
    }

    /// S3 endpoint URL of the first running node.
    pub fn endpoint(&self) -> String {
        self.live_node().endpoint()
    }

    /// `s3://BUCKET/PREFIX` (the ringfs remote URL).
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{}", self.bucket, prefix.trim_start_matches('/'))
    }

    /// The AWS_* variables that point an S3 client at this cluster (through the first
    /// running node).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", self.key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
    }

    /// Adds [`Garage::env`] to a command.
    pub fn apply_env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        cmd
    }

    /// Kill node `i` (SIGKILL; its data stays): the cluster keeps quorum with 2 of 3.
    pub fn stop_node(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Start node `i` again on its ports and data, and wait until it answers and holds
    /// a connection to every other node (`garage health`).
    pub fn restart_node(&mut self, i: usize) {
        let bin = self.bin.clone();
        let node = &mut self.nodes[i];
        node.kill();
        node.spawn(&bin);
        if let Err(log) = node.wait_ready(&bin) {
            panic!("garage node {i} did not restart: {log}");
        }
        self.wait_connected(i);
    }

    /// Wait until node `i` holds a connection to every node. Answering RPC is not
    /// enough: until then its quorum reads fail with "Not connected" (503). `garage
    /// health` counts the peers it holds a connection to ("Connected nodes") and says
    /// HEALTHY once every partition has all its nodes up.
    fn wait_connected(&mut self, i: usize) {
        let bin = self.bin.clone();
        let want = self.nodes.len();
        let node = &mut self.nodes[i];
        let t0 = Instant::now();
        loop {
            let o = node.cli(&bin, &["health"]);
            let (out, err) = out_str(&o);
            let connected = out
                .lines()
                .find(|l| l.starts_with("Connected nodes:"))
                .and_then(|l| l.split_whitespace().last())
                .and_then(|n| n.parse::<usize>().ok());
            if o.status.success() && connected == Some(want) && out.contains("HEALTHY") {
                break;
            }
            if t0.elapsed() > BOOT_TIMEOUT {
                panic!("garage node {i} did not connect to all its peers within {BOOT_TIMEOUT:?}: {out}{err}");
            }
            thread::sleep(STEP);
        }
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        let panicking = thread::panicking();
        for (i, n) in self.nodes.iter_mut().enumerate() {
            n.kill();
            if panicking || std::env::var_os("RINGFS_TEST_KEEP_LOGS").is_some() {
                let log = n.log();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                eprintln!(
                    "[garage node {i}] --- last log lines ---\n{}\n--- end ---",
                    tail.join("\n")
                );
            }
        }
        if let Some(root) = self.root.take() {
            let path = root.path().to_path_buf();
            if let Err(e) = root.close() {
                eprintln!("[garage] could not remove {}: {e}", path.display());
            }
        }
    }
}
