#!/usr/bin/env python3
"""Memory per small file of a ringfs daemon (issue #12, "bounded memory").

Mounts a fresh store (foreground daemon, so its PID is ours), creates
FILES files of ~100 bytes spread over DIRS directories, and samples the
daemon's /proc/PID/status (VmRSS, RssAnon, VmHWM; kB) every directory.
Then unmounts, mounts the same store again and prints the idle fresh-mount
numbers. Cleans up (unmount, kill the daemon it started, remove the temp
dir) on every path.

Usage: scripts/mem-per-file.py [--bin target/release/ringfs] [--files N] [--dirs N]
Root (or a user allowed to mount FUSE) is needed.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time


def status(pid):
    """VmRSS, RssAnon, VmHWM of pid in kB (a dict)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "VmHWM"):
                out[k] = int(v.split()[0])
    return out


def mounted(mp):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mp for line in f)


def start(binary, mp, store):
    p = subprocess.Popen([binary, "mount", mp, "--store", store], stdout=subprocess.DEVNULL)
    for _ in range(600):
        if mounted(mp):
            return p
        if p.poll() is not None:
            raise SystemExit(f"ringfs mount exited with {p.returncode} before the mount showed")
        time.sleep(0.05)
    p.kill()
    raise SystemExit("the mount did not show within 30 s")


def stop(binary, mp, p):
    if p.poll() is None and mounted(mp):
        subprocess.run([binary, "umount", mp], check=False)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    if mounted(mp):
        subprocess.run(["umount", "-l", mp], check=False)


def fmt(s):
    return f"VmRSS {s['VmRSS'] / 1024:7.1f} MiB  RssAnon {s['RssAnon'] / 1024:7.1f} MiB  VmHWM {s['VmHWM'] / 1024:7.1f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="target/release/ringfs")
    ap.add_argument("--files", type=int, default=200_000)
    ap.add_argument("--dirs", type=int, default=2_000)
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    tmp = tempfile.mkdtemp(prefix="ringfs-mem-")
    mp, store = os.path.join(tmp, "mnt"), os.path.join(tmp, "store")
    os.mkdir(mp)
    p = None
    try:
        p = start(binary, mp, store)
        time.sleep(0.5)
        empty = status(p.pid)
        print(f"idle, empty store:      {fmt(empty)}")
        per = a.files // a.dirs
        body = b"x" * 100
        peak_anon = peak_rss = 0
        t0 = time.time()
        for d in range(a.dirs):
            dp = os.path.join(mp, f"d{d:05}")
            os.mkdir(dp)
            for i in range(per):
                with open(os.path.join(dp, f"f{i:05}"), "wb") as f:
                    f.write(body)
            s = status(p.pid)
            peak_anon, peak_rss = max(peak_anon, s["RssAnon"]), max(peak_rss, s["VmRSS"])
            if (d + 1) % (a.dirs // 10 or 1) == 0:
                print(f"{(d + 1) * per:7} files ({time.time() - t0:5.0f} s): {fmt(s)}", flush=True)
        time.sleep(2)  # a group commit or two
        s = status(p.pid)
        print(f"after creating:         {fmt(s)}")
        print(f"peak while creating:    VmRSS {peak_rss / 1024:.1f} MiB  RssAnon {peak_anon / 1024:.1f} MiB (sampled per directory)")
        n = a.dirs * per
        print(f"per file (RssAnon - empty): {(peak_anon - empty['RssAnon']) * 1024 / n:.0f} B peak, {(s['RssAnon'] - empty['RssAnon']) * 1024 / n:.0f} B after")
        stop(binary, mp, p)
        p = start(binary, mp, store)
        time.sleep(1)
        s = status(p.pid)
        print(f"fresh remount, idle:    {fmt(s)}")
        print(f"per file (RssAnon - empty): {(s['RssAnon'] - empty['RssAnon']) * 1024 / n:.0f} B")
    finally:
        if p is not None:
            stop(binary, mp, p)
        if not mounted(mp):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"{mp} is still mounted; leaving {tmp}", file=sys.stderr)


if __name__ == "__main__":
    main()
