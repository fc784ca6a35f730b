#!/usr/bin/env bash
# A measurement, not a test (issue 14, D51): a workspace of N files
# (default 3000) totalling ~100 MiB (N-8 files of 4 KiB and 8 of ~12 MiB,
# random bytes) pushed to a file:// remote, then cloned lazily and eagerly
# into fresh stores: for each, the time until `ls -R` of the mounted clone
# answers (clone + mount + ls -R) and until every file has been read back
# (cat of every file). Also the raw copy of the remote's bundles (cp -r,
# the limit). Needs root and a built binary (target/release/ringfs).
#   scripts/measure-lazy-clone.sh [N]
set -euo pipefail
BIN=${RINGFS:-$(dirname "$0")/../target/release/ringfs}
N=${1:-3000}
uptime
T=$(mktemp -d /tmp/ringfs-lazymeasure-XXXXXX)
cleanup() {
  for m in "$T"/mnt*; do "$BIN" umount "$m" >/dev/null 2>&1 || true; done
  rm -rf "$T"
}
trap cleanup EXIT
mkdir "$T/mnt"
"$BIN" mount "$T/mnt" --store "$T/store" --daemon --log-file "$T/log" >/dev/null
python3 - "$T/mnt" "$N" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n - 8):
    d = os.path.join(root, "d%02d" % (i // 100))
    if i % 100 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%05d" % i), "wb") as f:
        f.write(os.urandom(4096))
os.makedirs(os.path.join(root, "big"), exist_ok=True)
for i in range(8):
    with open(os.path.join(root, "big", "b%d" % i), "wb") as f:
        f.write(os.urandom(12 * 1024 * 1024))
PY
"$BIN" commit "$T/mnt" -m all --json >/dev/null
"$BIN" remote add "$T/mnt" origin "file://$T/remote" --json >/dev/null
"$BIN" push "$T/mnt" --json >/dev/null
"$BIN" umount "$T/mnt" >/dev/null
echo "remote: $(du -sh "$T/remote" | cut -f1), $N files in the origin"
now() { date +%s.%N; }
for mode in lazy eager; do
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  flag=""; [ $mode = eager ] && flag="--eager"
  t0=$(now)
  "$BIN" clone "file://$T/remote" --store "$T/c-$mode" $flag --json >/dev/null
  t1=$(now)
  mkdir "$T/mnt-$mode"
  "$BIN" mount "$T/mnt-$mode" --store "$T/c-$mode" --daemon --log-file "$T/log-$mode" >/dev/null
  ls -R "$T/mnt-$mode" >/dev/null
  t2=$(now)
  find "$T/mnt-$mode" -type f -exec cat {} + >/dev/null
  t3=$(now)
  ro=$("$BIN" remote status "$T/mnt-$mode" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["remote_only_chunks"])')
  "$BIN" umount "$T/mnt-$mode" >/dev/null
  python3 - "$mode" "$t0" "$t1" "$t2" "$t3" "$ro" <<'PY'
import sys
m, t0, t1, t2, t3, ro = sys.argv[1], *map(float, sys.argv[2:6]), sys.argv[6]
print(f"{m:5}: clone {t1-t0:6.2f} s, ls -R answered at {t2-t0:6.2f} s, every file read at {t3-t0:6.2f} s (remote-only chunks left: {ro})")
PY
done
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
t0=$(now); cp -r "$T/remote" "$T/rawcopy"; sync -f "$T/rawcopy"; t1=$(now)
python3 -c "print(f'raw  : cp -r of the remote {float(\"$t1\")-float(\"$t0\"):6.2f} s')"
uptime
