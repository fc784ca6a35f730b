# The store section's SQLite workloads (python3's sqlite3 module), run by
# ringfs-bench (bench/src/store/work.rs). WAL journal, busy_timeout 60 s,
# synchronous at SQLite's default (FULL: every commit fsyncs the WAL).
#
#   create DB MB          a table t(id, k, v) filled with 1 000-byte rows until the
#                         database file is at least MB megabytes (10^6 bytes)
#   write DB N SEED       N transactions (BEGIN IMMEDIATE; insert or update one row; COMMIT)
#   loop DB SECONDS SEED  small transactions until SECONDS have passed (the mixed load's writer)
#   check DB              PRAGMA integrity_check; prints FSBENCH_INFO integrity=ok|bad rows=N
# A failure prints "FSBENCH_FAIL <what>" and exits 1.
import os
import random
import sqlite3
import sys
import time


def connect(path):
    c = sqlite3.connect(path, timeout=60, isolation_level=None)
    c.execute("PRAGMA busy_timeout=60000")
    return c


def create(path, mb):
    c = connect(path)
    mode = c.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode.lower() != "wal":
        raise RuntimeError(f"journal_mode is {mode}, not wal")
    c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v BLOB)")
    c.execute("CREATE INDEX t_k ON t(k)")
    rng = random.Random(1)
    want = int(mb * 1e6)
    batch = max(100, min(5000, want // 1100 + 1))
    while True:
        c.execute("BEGIN")
        c.executemany("INSERT INTO t(k, v) VALUES (?, ?)", ((rng.getrandbits(30), rng.randbytes(1000)) for _ in range(batch)))
        c.execute("COMMIT")
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        if os.path.getsize(path) >= want:
            break
    rows = c.execute("SELECT count(*) FROM t").fetchone()[0]
    c.close()
    print(f"FSBENCH_INFO bytes={os.path.getsize(path)} rows={rows}")


def one_txn(c, rng, i, maxid):
    c.execute("BEGIN IMMEDIATE")
    if i % 2 == 0:
        c.execute("INSERT INTO t(k, v) VALUES (?, ?)", (rng.getrandbits(30), rng.randbytes(100)))
    else:
        c.execute("UPDATE t SET k = ?, v = ? WHERE id = ?", (rng.getrandbits(30), rng.randbytes(100), rng.randrange(1, maxid + 1)))
    c.execute("COMMIT")


def write(path, n, seed):
    rng = random.Random(seed)
    c = connect(path)
    maxid = c.execute("SELECT max(id) FROM t").fetchone()[0] or 1
    for i in range(n):
        one_txn(c, rng, i, maxid)
    c.close()
    print(f"FSBENCH_INFO txns={n}")


def loop(path, seconds, seed):
    rng = random.Random(seed)
    c = connect(path)
    if c.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
        raise RuntimeError("journal_mode is not wal")
    c.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, k INTEGER, v BLOB)")
    c.execute("INSERT INTO t(k, v) VALUES (0, x'00')")
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        maxid = c.execute("SELECT max(id) FROM t").fetchone()[0] or 1
        one_txn(c, rng, n, maxid)
        n += 1
        if n % 500 == 0:
            # Keep the database small: the load is about churn, not size.
            c.execute("DELETE FROM t WHERE id < ?", (maxid - 1000,))
    c.close()
    print(f"FSBENCH_INFO txns={n}")


def check(path):
    c = connect(path)
    res = [r[0] for r in c.execute("PRAGMA integrity_check")]
    rows = c.execute("SELECT count(*) FROM t").fetchone()[0]
    c.close()
    ok = res == ["ok"]
    print(f"FSBENCH_INFO integrity={'ok' if ok else 'bad'} rows={rows}")
    if not ok:
        print("FSBENCH_FAIL integrity_check: " + "; ".join(res[:5]))
        sys.exit(1)


def main():
    cmd = sys.argv[1]
    try:
        if cmd == "create":
            create(sys.argv[2], float(sys.argv[3]))
        elif cmd == "write":
            write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        elif cmd == "loop":
            loop(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
        elif cmd == "check":
            check(sys.argv[2])
        else:
            raise RuntimeError(f"unknown command {cmd}")
    except (sqlite3.Error, OSError, RuntimeError) as e:
        print(f"FSBENCH_FAIL {cmd}: {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
