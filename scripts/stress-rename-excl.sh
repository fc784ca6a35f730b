#!/usr/bin/env bash
# Long stress for the git lockfile protocol on a ringfs mount (issue 12's
# mixed-load failure: a `git commit` found `.git/index.lock` existing).
#
#   scripts/stress-rename-excl.sh [SECONDS] [TRANSPORT]   (default 600 auto; TRANSPORT auto|uring|dev|raw)
#
# TRANSPORT raw runs the same clients in a plain directory on the host disk
# (no mount): what ext4 does with the same load.
# Mounts a fresh durable store (`ringfs mount --store S M --daemon`) and runs,
# all at once, for SECONDS:
# - scripts/stress/rename-excl.c: 6 threads in one directory, each looping
#   open(t<k>.lock, O_CREAT|O_EXCL) + write (+ fsync every 16th) + close +
#   rename(t<k>.lock, t<k>) (or unlink, git's rollback); every O_EXCL create
#   must succeed since the thread's own rename returned;
# - a `git add -A` + `git commit` loop with auto gc made frequent
#   (`-c gc.auto=100`: git's detached `maintenance run --auto` then repacks
#   and prunes beside the next commands), and one with `-c gc.auto=0 -c
#   maintenance.auto=0`; each failure is logged with its exit status and
#   stderr, and a lock file left after a successful command is a failure;
# - churn: files created, renamed over each other and unlinked in another
#   directory; an fsync-heavy SQLite WAL writer; find + cat walking the whole
#   mount (the .git directories included, as the benchmark's walkers do).
# Exit 0 when nothing failed, 1 otherwise; the log directory is printed.
# Needs root (re-runs itself through sudo), gcc or cc, git, python3.
set -euo pipefail
# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
as_root stress-rename-excl "FUSE mounts" "$@"
cd "$(dirname "$0")/.."
secs=${1:-600}
transport=${2:-auto}
root=$PWD
if [ -z "${RINGFS:-}" ] && [ "$transport" != raw ]; then
    cargo build --release -q -p ringfs
    RINGFS=${CARGO_TARGET_DIR:-target}/release/ringfs
fi
RINGFS=$(readlink -f "${RINGFS:-ringfs}")
work=$(mktemp -d /var/tmp/ringfs-stress-excl.XXXXXX)
mnt=$work/mnt
logs=$work/logs
mkdir -p "$mnt" "$logs"
pids=()
mounted=0
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    # git's detached auto gc of our repositories (setsid: not our children,
    # but started by our git commands): whatever still works in our private
    # mount point, by pid.
    local d
    for d in /proc/[0-9]*; do
        case $(readlink "$d/cwd" 2>/dev/null) in "$mnt"/*) kill "${d#/proc/}" 2>/dev/null || true ;; esac
    done
    sleep 1
    if [ "$mounted" = 1 ]; then
        "$RINGFS" umount "$mnt" --timeout 60 >/dev/null 2>&1 || "$RINGFS" umount "$mnt" >/dev/null 2>&1 || true
    fi
    if [ "${KEEP:-0}" = 1 ] || [ -s "$logs/failures" ]; then
        rm -rf "$work/store" "$work/bin"
        echo "logs kept in $logs"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
mkdir -p "$work/bin"
"${CC:-cc}" -O2 -pthread -o "$work/bin/rename-excl" scripts/stress/rename-excl.c
if [ "$transport" != raw ]; then
    "$RINGFS" mount --store "$work/store" "$mnt" --daemon --transport "$transport" 2>"$logs/mount.err"
    mounted=1
fi
echo "stress-rename-excl: $secs s on $mnt (transport $transport; $("$RINGFS" --version 2>/dev/null || echo ringfs)); load: $(cut -d' ' -f1-3 /proc/loadavg)"
end=$(( $(date +%s) + secs ))
touch "$logs/failures"

# The git loops: CONFIG is extra `-c` arguments.
git_loop() {
    local name=$1; shift
    local repo=$mnt/$name n=0 out rc
    mkdir -p "$repo"
    git -C "$repo" init -q
    local g=(git -C "$repo" -c user.name=stress -c user.email=stress@localhost -c commit.gpgsign=false "$@")
    while [ "$(date +%s)" -lt "$end" ]; do
        printf 'commit %s\n%.0s' "$n" {1..20} > "$repo/f$((n % 50))"
        for cmd in "add -A" "commit -q -m c$n"; do
            # shellcheck disable=SC2086
            if out=$("${g[@]}" $cmd 2>&1); then rc=0; else rc=$?; fi
            if [ "$rc" != 0 ]; then
                echo "$name: git $cmd (iteration $n) exited $rc: $out" >> "$logs/failures"
                ls -la --time-style=full-iso "$repo/.git" >> "$logs/$name.ls" 2>&1 || true
                return
            fi
            if [ -e "$repo/.git/index.lock" ]; then
                # Another git (the detached gc) may hold it legitimately: look again.
                sleep 1
                [ -e "$repo/.git/index.lock" ] && { echo "$name: .git/index.lock left after git $cmd (iteration $n)" >> "$logs/failures"; return; }
            fi
        done
        n=$((n + 1))
    done
    echo "$name: $n commits" >> "$logs/counts"
}
git_loop git-gc -c gc.auto=100 & pids+=($!)
git_loop git-nogc -c gc.auto=0 -c maintenance.auto=0 & pids+=($!)

mkdir -p "$mnt/excl"
( "$work/bin/rename-excl" "$mnt/excl" 6 "$secs" >> "$logs/counts" 2>> "$logs/failures" ) & pids+=($!)

# Churn: create, rename over, unlink in one directory.
python3 - "$mnt/churn" "$end" >> "$logs/counts" 2>> "$logs/failures" <<'PY' & pids+=($!)
import os, sys, time, random
d, end = sys.argv[1], float(sys.argv[2]); os.makedirs(d, exist_ok=True); n = 0
while time.time() < end:
    for i in range(200):
        p = os.path.join(d, f"c{i}.tmp")
        with open(p, "wb") as f: f.write(os.urandom(random.randrange(1, 4096)))
        os.rename(p, os.path.join(d, f"c{i % 37}"))
    for e in os.listdir(d):
        if random.random() < 0.5:
            try: os.unlink(os.path.join(d, e))
            except FileNotFoundError: pass
    n += 1
print(f"churn: {n} rounds of 200 create+rename")
PY

# An fsync-heavy writer (SQLite WAL, synchronous=FULL).
python3 - "$mnt/wal.db" "$end" >> "$logs/counts" 2>> "$logs/failures" <<'PY' & pids+=($!)
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=60); end = float(sys.argv[2])
db.execute("PRAGMA journal_mode=WAL"); db.execute("PRAGMA synchronous=FULL")
db.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v BLOB)"); n = 0
while time.time() < end:
    with db: db.execute("INSERT INTO t (v) VALUES (randomblob(2000))")
    n += 1
print(f"sqlite: {n} transactions")
PY

# find + cat over everything, the .git directories included.
walker() {
    local n=0
    while [ "$(date +%s)" -lt "$end" ]; do
        if [ "$1" = cat ]; then find "$mnt" -type f -exec cat {} + >/dev/null 2>&1 || true
        else find "$mnt" -type f -printf '%s\n' >/dev/null 2>&1 || true; fi
        n=$((n + 1)); sleep 0.05
    done
    echo "$1: $n walks" >> "$logs/counts"
}
walker find & pids+=($!)
walker cat & pids+=($!)

for p in "${pids[@]}"; do wait "$p" || true; done
pids=()
sort "$logs/counts"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -s "$logs/failures" ]; then
    echo "FAILED:"; cat "$logs/failures"
    exit 1
fi
echo "no failure: every O_EXCL create succeeded, no git command failed"
