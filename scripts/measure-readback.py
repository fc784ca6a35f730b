#!/usr/bin/env python3
"""A measurement, not a test (issue 14, D63): the benchmark's clone step
alone, repeated. A workspace of 3 000 files of 34 952 random bytes (100 per
directory, the sync section's shape) is pushed once to a remote (one Garage
node on loopback when `garage` is on PATH, else file://); then, N times:
`ringfs clone` into a fresh store, `mount`, `ls -R`, every file read back in
sorted order (as the benchmark), then the daemon's `lazy_fetch` counters,
its CPU time, and how long until nothing was remote-only. Needs root (FUSE)
and a built binary.

    scripts/measure-readback.py [--bin target/release/ringfs] [--runs 3]
                                [--remote garage|file] [--files 3000]
                                [--mib 100] [--env K=V ...]
"""
import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--bin", action="append", help="ringfs binary; given more than once, the runs alternate between them (default: target/release/ringfs)")
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--remote", default="garage" if shutil.which("garage") else "file")
ap.add_argument("--files", type=int, default=3000)
ap.add_argument("--mib", type=int, default=100)
ap.add_argument("--env", action="append", default=[], help="K=V for the daemon (e.g. RINGFS_TEST_NO_PREFETCH=1)")
ap.add_argument("--wait-prefetch", action="store_true", help="read only after nothing is remote-only")
ap.add_argument("--perf", help="perf record the daemon during the read-back into PERF.RUN")
ap.add_argument("--perf-prefetch", help="with --wait-prefetch: perf record the daemon from its mount until nothing is remote-only into PERF.RUN")
ap.add_argument("--keep", action="store_true")
a = ap.parse_args()
BINS = [os.path.abspath(b) for b in (a.bin or [os.path.join(os.path.dirname(__file__), "..", "target", "release", "ringfs")])]
BIN = BINS[0]
T = tempfile.mkdtemp(prefix="ringfs-readback-", dir="/var/tmp")
env = dict(os.environ)
for kv in a.env:
    k, v = kv.split("=", 1)
    env[k] = v
garage = None
mounted = []


def run(*args, check=True):
    r = subprocess.run(args, env=env, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: {r.stderr.strip()}")
    return r


def rf(*args):
    return json.loads(run(BINS[0], *args, "--json").stdout)


def cleanup():
    for m in mounted:
        subprocess.run([BINS[0], "umount", m], env=env, capture_output=True)
    if garage is not None:
        garage.send_signal(signal.SIGKILL)
        garage.wait()
    if not a.keep:
        shutil.rmtree(T, ignore_errors=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_garage():
    global garage
    g = os.path.join(T, "garage")
    os.makedirs(g + "/meta")
    os.makedirs(g + "/data")
    rpc, s3, adm = free_port(), free_port(), free_port()
    cfg = os.path.join(g, "garage.toml")
    with open(cfg, "w") as f:
        f.write(f'metadata_dir = "{g}/meta"\ndata_dir = "{g}/data"\ndb_engine = "sqlite"\nreplication_factor = 1\n'
                f'rpc_bind_addr = "127.0.0.1:{rpc}"\nrpc_public_addr = "127.0.0.1:{rpc}"\nrpc_secret = "{secrets.token_hex(32)}"\n\n'
                f'[s3_api]\ns3_region = "garage"\napi_bind_addr = "127.0.0.1:{s3}"\n\n[admin]\napi_bind_addr = "127.0.0.1:{adm}"\n')
    log = open(os.path.join(g, "garage.log"), "w")
    garage = subprocess.Popen(["garage", "-c", cfg, "server"], stdout=log, stderr=log,
                              env=dict(os.environ, RUST_LOG="garage=warn"))
    cli = lambda *x: subprocess.run(["garage", "-c", cfg, *x], capture_output=True, text=True,
                                    env=dict(os.environ, RUST_LOG="warn"))
    t0 = time.time()
    while cli("status").returncode != 0:
        if time.time() - t0 > 30:
            raise SystemExit("garage did not start")
        time.sleep(0.05)
    nid = cli("node", "id", "-q").stdout.strip().split("@")[0]
    cli("layout", "assign", "-z", "dc1", "-c", "10G", nid)
    cli("layout", "apply", "--version", "1")
    kid, sec = "GK" + secrets.token_hex(12), secrets.token_hex(32)
    for cmd in (["key", "import", "--yes", "-n", "rb", kid, sec], ["bucket", "create", "rbench"],
                ["bucket", "allow", "--read", "--write", "--owner", "rbench", "--key", kid]):
        t0 = time.time()
        while cli(*cmd).returncode != 0:
            if time.time() - t0 > 30:
                raise SystemExit(f"garage {cmd}")
            time.sleep(0.05)
    env.update(AWS_ACCESS_KEY_ID=kid, AWS_SECRET_ACCESS_KEY=sec, AWS_ENDPOINT_URL=f"http://127.0.0.1:{s3}",
               AWS_REGION="garage", AWS_ALLOW_HTTP="true")
    return "s3://rbench/clone"


def cpu(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return float("nan")


try:
    print(open("/proc/loadavg").read().strip(), "| remote:", a.remote, "| bin:", BIN, "| env:", a.env)
    url = start_garage() if a.remote == "garage" else f"file://{T}/remote"
    src, mp = os.path.join(T, "src"), os.path.join(T, "mnt-src")
    os.makedirs(mp)
    run(BIN, "mount", mp, "--store", src, "--daemon", "--log-file", os.path.join(T, "log-src"))
    mounted.append(mp)
    each = (a.mib << 20) // a.files
    for i in range(a.files):
        d = os.path.join(mp, "tree", f"d{i // 100}")
        if i % 100 == 0:
            os.makedirs(d)
        with open(os.path.join(d, f"f{i}"), "wb") as f:
            f.write(os.urandom(each))
    rf("remote", "add", mp, "origin", url)
    rf("commit", mp, "-m", "tree")
    rf("push", mp)
    run(BIN, "umount", mp)
    mounted.remove(mp)
    for r in range(a.runs * len(BINS)):
        BIN = BINS[r % len(BINS)]
        store, m = os.path.join(T, f"c{r}"), os.path.join(T, f"m{r}")
        os.makedirs(m)
        load = open("/proc/loadavg").read().split()[0]
        t0 = time.time()
        json.loads(run(BIN, "clone", url, "--store", store, "--json").stdout)
        t1 = time.time()
        out = run(BIN, "mount", m, "--store", store, "--daemon", "--log-file", os.path.join(T, f"log{r}")).stdout
        mounted.append(m)
        t2 = time.time()
        pid = int(out.split("daemon pid ")[1].split(",")[0])
        c0 = cpu(pid)
        pre = None
        if a.perf_prefetch:
            pre = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-p", str(pid), "-o", f"{a.perf_prefetch}.{r}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run("ls", "-R", m)
        t3 = time.time()
        if a.wait_prefetch:
            while rf("remote", "status", m).get("remote_only_chunks"):
                time.sleep(0.01)
            if pre is not None:
                pre.send_signal(signal.SIGINT)
                pre.wait()
            print(f"  prefetch alone done {(time.time() - t0) * 1e3:.0f} ms after the clone started, daemon cpu {cpu(pid) - c0:.2f} s")
            t3 = time.time()
            c0 = cpu(pid)
        prof = None
        if a.perf:
            prof = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-p", str(pid), "-o", f"{a.perf}.{r}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)
            t3 = time.time()
        files = []
        for root, _, fs in os.walk(os.path.join(m, "tree")):
            files += [os.path.join(root, f) for f in fs]
        files.sort()
        n = 0
        slow = []
        for p in files:
            s = time.time()
            with open(p, "rb") as f:
                n += len(f.read())
            slow.append(time.time() - s)
        t4 = time.time()
        c1 = cpu(pid)
        if prof is not None:
            prof.send_signal(signal.SIGINT)
            prof.wait()
        st = rf("remote", "status", m)
        lf = st.get("lazy_fetch") or st["remotes"][0].get("lazy_fetch")
        left = st.get("remote_only_chunks")
        while left:
            time.sleep(0.02)
            left = rf("remote", "status", m).get("remote_only_chunks")
        t5 = time.time()
        # Working copies made by the read-back (non-empty files named by an
        # inode number in STORE/wc/; the pool's ready files are empty).
        wcd = os.path.join(store, "wc")
        wcs = sum(1 for e in os.scandir(wcd) if e.name.isdigit() and e.stat().st_size > 0) if os.path.isdir(wcd) else 0
        slow.sort()
        ms = lambda x: f"{x * 1e3:7.0f}"
        print(f"run {r} {os.path.basename(BIN)} load {load}: clone {ms(t1 - t0)} mount {ms(t2 - t1)} ls -R {ms(t3 - t2)} read {ms(t4 - t3)}"
              f" | total to ls {ms(t3 - t0)} to read {ms(t4 - t0)} | prefetch done at {ms(t5 - t0)}"
              f" | daemon cpu during read-back {c1 - c0:.2f} s | per file p50 {slow[len(slow) // 2] * 1e6:.0f} us"
              f" p99 {slow[len(slow) * 99 // 100] * 1e6:.0f} us max {slow[-1] * 1e3:.0f} ms sum>5ms {sum(x for x in slow if x > 0.005) * 1e3:.0f} ms"
              f" | bytes {n} | working copies {wcs} | lazy_fetch {json.dumps(lf)}")
        run(BIN, "umount", m)
        mounted.remove(m)
    print(open("/proc/loadavg").read().strip())
finally:
    cleanup()
