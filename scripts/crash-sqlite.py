#!/usr/bin/env python3
"""kill -9 rounds of SQLite in rollback-journal mode on a ringfs mount (a long
run, not part of CI; needs root).

Each round a child process commits transactions to a new database in
journal_mode=DELETE with synchronous=EXTRA (the journal is unlinked and its
directory fsynced before COMMIT returns) and records each committed
transaction number on the host disk after COMMIT returned; the daemon is
killed with SIGKILL at a random moment, the store mounted again, and the
database must hold at least the last recorded transaction. About one round
in 40-70 "loses" its last transaction: the kill lands between the journal's
unlink and SQLite's open of the directory to fsync it, the open fails
(ECONNABORTED) and SQLite skips that fsync yet reports COMMIT done
(docs/DECISIONS.md, D78) - not a ringfs loss; a loss with a directory fsync
after the unlink in the request trace (--trace) would be one.

usage: scripts/crash-sqlite.py [--ringfs target/release/ringfs]
                               [--transport auto|uring|dev] [--passthrough on|off]
                               [--rounds 60] [--trace]
Exit status 1 at the first lost transaction (the store, the daemon logs and
copies of the database and journal are kept and named); 0 after all rounds.
"""
import argparse, os, random, re, shutil, signal, sqlite3, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--ringfs", default="target/release/ringfs")
ap.add_argument("--transport", default="auto")
ap.add_argument("--passthrough", default="on")
ap.add_argument("--rounds", type=int, default=60)
ap.add_argument("--trace", action="store_true", help="log every FUSE request (RINGFS_LOG; makes the loss rarer)")
a = ap.parse_args()
R = os.path.abspath(a.ringfs)
base = tempfile.mkdtemp(prefix="ringfs-crash-sqlite-")
mnt, store = base + "/mnt", base + "/store"
os.mkdir(mnt)
env = dict(os.environ)
if a.trace:
    env["RINGFS_LOG"] = "info,fuse_uring::dispatch=trace"


def mount():
    o = subprocess.run([R, "mount", mnt, "--store", store, "--daemon", "--transport", a.transport,
                        "--passthrough", a.passthrough, "--log-file", f"{base}/log.{time.time():.3f}"],
                       capture_output=True, text=True, env=env)
    if o.returncode != 0:
        sys.exit(f"mount failed: {o.stderr}")
    return int(re.search(r"daemon pid (\d+)", o.stdout + o.stderr).group(1))


def writer(d, recf):
    try:
        os.mkdir(d)
        con = sqlite3.connect(d + "/db", isolation_level=None)
        con.execute("PRAGMA journal_mode=DELETE")
        con.execute("PRAGMA synchronous=EXTRA")
        con.execute("CREATE TABLE c(k INTEGER PRIMARY KEY, n INTEGER)")
        con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
        con.execute("INSERT INTO c VALUES(1,0)")
        rf = os.open(recf, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        txn = 0
        while True:
            txn += 1
            con.execute("BEGIN")
            for _ in range(random.randrange(1, 30)):
                con.execute("INSERT INTO t(v) VALUES(?)", (os.urandom(200 + random.randrange(3000)),))
            con.execute("UPDATE c SET n=? WHERE k=1", (txn,))
            con.execute("COMMIT")
            os.write(rf, f"{txn}\n".encode())
            os.fsync(rf)
    except BaseException:
        pass
    os._exit(0)


pid = mount()
for rnd in range(1, a.rounds + 1):
    d, recf = f"{mnt}/r{rnd}", f"{base}/r{rnd}.rec"
    child = os.fork()
    if child == 0:
        writer(d, recf)
    time.sleep(random.uniform(0.05, 3))
    os.kill(pid, signal.SIGKILL)  # the daemon this script started
    os.waitpid(child, 0)
    while os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)
    subprocess.run(["umount", "-l", mnt])
    pid = mount()
    rec = open(recf).read().split() if os.path.exists(recf) else []
    durable = int(rec[-1]) if rec else 0
    if not durable:
        continue
    hot = os.path.exists(d + "/db-journal")
    if hot:
        shutil.copy(d + "/db-journal", f"{base}/journal-r{rnd}")
        shutil.copy(d + "/db", f"{base}/db-r{rnd}")
    c = sqlite3.connect(d + "/db")
    n = c.execute("SELECT n FROM c").fetchone()[0]
    c.close()
    if n < durable:
        subprocess.run([R, "umount", mnt])
        print(f"round {rnd}: transaction {durable} committed, the database holds {n} after kill -9 "
              f"(hot journal after the remount: {hot}); kept: {base}", flush=True)
        sys.exit(1)
    print(f"round {rnd}: {durable} transactions, all there", flush=True)
subprocess.run([R, "umount", mnt])
fsck = subprocess.run([R, "fsck", "--store", store], capture_output=True, text=True)
print(f"{a.rounds} rounds, nothing lost; fsck exit {fsck.returncode}")
if fsck.returncode == 0:
    shutil.rmtree(base)
sys.exit(0 if fsck.returncode == 0 else 1)
