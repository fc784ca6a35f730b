#!/usr/bin/env bash
# A measurement, not a test (issue 13, D62): the benchmark snapshots
# section's history on a 10 000-file tree (the bench's tree layout and
# contents; 7 commits after changing each of 1/10/100/500 files spread over
# the tree, ten 1-file commits, a restore 10 files back, a 100-file commit),
# then `ringfs fork --no-mount` of the head into a new store that is KEPT
# (printed at the end) for inspection, with its fork_ms and the new disk
# (du -sk and du -sb of the new store; its packs are links, counted by
# du only once per run, so the packs directory is left out).
#   scripts/measure-fork-history.sh [OUTDIR]   (needs root, a built binary)
set -euo pipefail
BIN=${RINGFS:-$(dirname "$0")/../target/release/ringfs}
OUT=${1:-$(mktemp -d /tmp/ringfs-forkhist-XXXXXX)}
mkdir -p "$OUT/mnt"
uptime
"$BIN" mount "$OUT/mnt" --store "$OUT/store" --daemon --log-file "$OUT/log" >/dev/null
trap '"$BIN" umount "$OUT/mnt" >/dev/null 2>&1 || true' EXIT
edit() { # edit ROUND K: the bench's edit_spread
python3 - "$OUT/mnt/tree" 10000 "$2" "$1" <<'PY'
import os, sys
root, n, k, rnd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def path(i): return os.path.join(root, "d%d" % (i // 1000), "s%d" % (i // 100 % 10), "f%d" % i)
def content(i):
    s = ("%08d:" % i).encode(); m = i % 185
    return (s * (m // len(s) + 1))[:m]
if k == 0:
    for i in range(n):
        if i % 100 == 0: os.makedirs(os.path.dirname(path(i)), exist_ok=True)
        open(path(i), "wb").write(content(i))
else:
    step = max(n // k, 1)
    for j in range(k):
        i = (j * step + rnd * 7) % n
        open(path(i), "wb").write(content(i) + ("\nround %d\n" % rnd).encode())
PY
}
edit 0 0
"$BIN" commit "$OUT/mnt" -m first >/dev/null
round=0
for k in 1 10 100 500; do
  for r in 1 2 3 4 5 6 7; do
    round=$((round + 1)); edit $round $k
    "$BIN" commit "$OUT/mnt" -m "r$round" >/dev/null
  done
done
base=$("$BIN" log "$OUT/mnt" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print((d["commits"] if isinstance(d,dict) else d)[0]["id"])')
for i in 0 1 2 3 4 5 6 7 8 9; do
  round=$((round + 1)); edit $round 1
  "$BIN" commit "$OUT/mnt" -m "one $i" >/dev/null
done
"$BIN" restore "$OUT/mnt" "$base" >/dev/null
round=$((round + 1)); edit $round 100
"$BIN" commit "$OUT/mnt" -m hundred >/dev/null
"$BIN" fork "$OUT/mnt" --new-store "$OUT/fork-store" --no-mount --json > "$OUT/fork.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("fork_ms %.1f phases %s objects %d chunks %d packs %d new_bytes %d" % (d["fork_ms"], d["phases_ms"], d["objects"], d["chunks"], d["packs_linked"], d["new_bytes"]))' "$OUT/fork.json"
echo "fork store without packs: du -sk $(du -sk --exclude=packs "$OUT/fork-store" | cut -f1) KiB, du -sb $(du -sb --exclude=packs "$OUT/fork-store" | cut -f1) bytes"
ls -ls "$OUT/fork-store"
"$BIN" umount "$OUT/mnt" >/dev/null
trap - EXIT
uptime
echo "kept: $OUT (origin store $OUT/store, fork $OUT/fork-store)"
