#!/usr/bin/env bash
# Requests per operation: the daemon's per-opcode request counts (and p50
# daemon time) for one small workload, divided by the number of operations.
# Counts do not depend on load, so two builds can be compared on a busy
# machine; times are only indicative there.
#
#   scripts/count-requests.sh [--bin RINGFS] [--n N] WORKLOAD [mount args...]
#
# WORKLOAD (N defaults to 1000; each runs in a fresh directory of a new store):
#   create         N × `echo $i > f$i` (fs-bench row 1)
#   create-rm      N creates, then one `rm f*` (row 3), per file
#   readback       N files written, then `find -type f -print0 | xargs -0 cat` (the npm readback), per file
#   readback-fresh as readback, but after unmount and mount again (nothing cached by the kernel)
#   stat           N files written, then `stat` of each (one process), per file
#   list-fresh     N files written, unmount, mount, then `find . | wc -l` (a listing, no stat), per file
# Mount args go to `ringfs mount` (e.g. --transport dev, --passthrough off).
# Needs root (mounts). Output: one line per opcode, "OPCODE per-op (p50 µs)",
# then the total per operation and the workload's wall time (load-dependent).
set -euo pipefail
bin=${RINGFS_BIN:-target/release/ringfs}
n=1000
while [ $# -gt 0 ]; do
    case $1 in
        --bin) bin=$2; shift 2 ;;
        --n) n=$2; shift 2 ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || { sed -n 2,18p "$0" >&2; exit 2; }
work=$1; shift
case $work in create | create-rm | readback | readback-fresh | stat | list-fresh) ;; *) echo "count-requests: unknown workload $work (create, create-rm, readback, readback-fresh, stat, list-fresh)" >&2; exit 2 ;; esac
[ -x "$bin" ] || { echo "count-requests: no ringfs binary at $bin (build it, or give --bin / RINGFS_BIN)" >&2; exit 1; }
bin=$(realpath "$bin")
base=$(mktemp -d /tmp/count-requests.XXXXXX)
mnt=$base/mnt
mkdir -p "$mnt"
cleanup() {
    cd /
    if mountpoint -q "$mnt"; then "$bin" umount "$mnt" >/dev/null 2>&1 || { sleep 2; "$bin" umount "$mnt" >/dev/null; }; fi
    rm -rf "$base"
}
trap cleanup EXIT
mnt_up() { "$bin" mount "$mnt" --store "$base/store" --daemon --log-file "$base/log" "$@" >/dev/null; }
stats() { "$bin" stats "$mnt" --json; }
mnt_up "$@"
mkdir "$mnt/w"
cd "$mnt/w"
make_files() { for i in $(seq "$n"); do echo "$i" > "f$i"; done; }
case $work in
    create | create-rm) ;;
    readback | stat) make_files ;;
    readback-fresh | list-fresh)
        make_files
        cd /
        "$bin" umount "$mnt" >/dev/null
        mnt_up "$@"
        cd "$mnt/w"
        ;;
esac
sleep 0.5
s1=$(stats)
t0=$EPOCHREALTIME
case $work in
    create) make_files ;;
    create-rm) make_files; rm f* ;;
    readback | readback-fresh) find . -type f -print0 | xargs -0 cat > /dev/null ;;
    stat) for i in $(seq "$n"); do echo "f$i"; done | xargs stat -c %s > /dev/null ;;
    list-fresh) find . | wc -l > /dev/null ;;
esac
t1=$EPOCHREALTIME
s2=$(stats)
python3 - "$s1" "$s2" "$n" "$work" "$(( (10#${t1/./} - 10#${t0/./}) / 1000 ))" <<'PY'
import json, sys
a, b, n, work, ms = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
ra, rb = a["requests"], b["requests"]
rows = []
for op, v in rb.items():
    d = v["count"] - ra.get(op, {}).get("count", 0)
    if d:
        rows.append((op, d / n, v.get("p50_us")))
rows.sort(key=lambda r: -r[1])
print(f"{work}: requests per operation ({n} operations)")
for op, per, p50 in rows:
    print(f"  {op:<12} {per:6.2f}   (p50 {p50:.1f} µs over the mount)" if p50 is not None else f"  {op:<12} {per:6.2f}")
print(f"  {'total':<12} {sum(r[1] for r in rows):6.2f}")
print(f"  wall time    {ms} ms (load {open('/proc/loadavg').read().split()[0]})")
PY
