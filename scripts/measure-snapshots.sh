#!/usr/bin/env bash
# A measurement, not a test (issue 13): commit time of a 1-file edit in a
# tree of N files (default 10000 and 100000) against the first commit,
# which builds every object (a full walk of the tree), and of 10-, 100-
# and 500-file edits spread over the tree; then restore to a
# commit 10 files back (10 commits of one edit each) and forward again,
# with `ringfs restore --json`'s phases. Needs root and a
# built binary (target/release/ringfs). Prints one line per run with the
# commit's phases (ms) as `ringfs commit --json` reports them, then three
# forks of the head (`ringfs fork --json`: fork and mount time, new disk),
# and uptime.
#   scripts/measure-snapshots.sh [N...]
set -euo pipefail
BIN=${RINGFS:-$(dirname "$0")/../target/release/ringfs}
[ $# -gt 0 ] || set -- 10000 100000
uptime
for N in "$@"; do
  T=$(mktemp -d /tmp/ringfs-snapmeasure-XXXXXX)
  mkdir "$T/mnt"
  "$BIN" mount "$T/mnt" --store "$T/store" --daemon --log-file "$T/log" >/dev/null
  trap '"$BIN" umount "$T/mnt" >/dev/null 2>&1 || true; rm -rf "$T"' EXIT
  # N files of 100 bytes in directories of 100 files, 10 directories deep at most.
  python3 "$(dirname "$0")/make-tree.py" "$T/mnt" "$N"
  sync -f "$T/mnt"
  phases() { python3 -c 'import json,sys; d=json.load(sys.stdin); print("total %.2f ms  %s  objects new %d  paths +%d ~%d -%d" % (d["total_ms"], " ".join("%s %.2f" % kv for kv in d["phases_ms"].items()), d["objects"]["new"], d["paths"]["added"], d["paths"]["modified"], d["paths"]["removed"]))'; }
  echo "N=$N first commit (full build): $("$BIN" commit "$T/mnt" -m full --json | phases)"
  for k in 1 2 3; do
    echo "edit $k" >> "$T/mnt/d000/e00/f00000"
    echo "N=$N 1-file edit, commit $k:      $("$BIN" commit "$T/mnt" -m edit --json | phases)"
  done
  # Commits after changing K files spread over the tree (every N/K-th),
  # three times each (the bench's snapshots section's k-file commits).
  for K in 10 100 500; do
    [ "$K" -le "$N" ] || continue
    for k in 1 2 3; do
      python3 - "$T/mnt" "$N" "$K" "$k" <<'PY'
import os, sys
root, n, kk, r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
for j in range(kk):
    i = j * (n // kk)
    p = os.path.join(root, "d%03d" % (i // 1000), "e%02d" % (i // 100 % 10), "f%05d" % i)
    with open(p, "a") as f:
        f.write("k%s\n" % r)
PY
      echo "N=$N $K-file edit, commit $k:    $("$BIN" commit "$T/mnt" -m edit --json | phases)"
    done
  done
  # Forks of the head through the daemon (D35): the fork's own time, the
  # `ringfs mount --daemon` of it, and its new disk (packs are hard links).
  forkline() { python3 -c 'import json,sys; d=json.load(sys.stdin); print("fork %.1f ms (%s; %d files, %d objects copied, %d packs linked, %d KiB written)  mount %.1f ms" % (d["fork_ms"], " ".join("%s %.1f" % kv for kv in d["phases_ms"].items()), d["files"], d["objects"], d["packs_linked"], d["new_bytes"] // 1024, d["mount_ms"]))'; }
  for k in 1 2 3; do
    mkdir "$T/fork$k"
    echo "N=$N fork $k: $("$BIN" fork "$T/mnt" --to "$T/fork$k" --new-store "$T/fstore$k" --json | forkline), du without packs $(du -sk --exclude=packs "$T/fstore$k" | cut -f1) KiB"
    "$BIN" umount "$T/fork$k" >/dev/null
  done
  s=$(date +%s%N); "$BIN" mount "$T/fork1" --store "$T/fstore1" --daemon --log-file "$T/log1" >/dev/null; e=$(date +%s%N)
  echo "N=$N mount --daemon of a fork again: $(( (e - s) / 1000000 )) ms"
  "$BIN" umount "$T/fork1" >/dev/null
  rphases() { python3 -c 'import json,sys; d=json.load(sys.stdin); print("total %.2f ms  %s  paths +%d -%d rewritten %d changed %d" % (d["total_ms"], " ".join("%s %.2f" % kv for kv in d["phases_ms"].items()), d["paths"]["added"], d["paths"]["removed"], d["paths"]["rewritten"], d["paths"]["changed"]))'; }
  base=$("$BIN" commit "$T/mnt" -m base --allow-empty --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  for k in 0 1 2 3 4 5 6 7 8 9; do
    echo "edit" >> "$T/mnt/d00$((k % 10 < N / 1000 ? k % 10 : 0))/e0$k/f0$((k % 10 < N / 1000 ? k % 10 : 0))${k}00"
    "$BIN" commit "$T/mnt" -m "edit $k" >/dev/null
  done
  for k in 1 2 3; do
    echo "N=$N restore 10 files back, $k:   $("$BIN" restore "$T/mnt" "${base:0:16}" --json | rphases)"
    echo "N=$N restore 10 files forward, $k: $("$BIN" restore "$T/mnt" main --json | rphases)"
  done
  "$BIN" umount "$T/mnt" >/dev/null
  rm -rf "$T"
  trap - EXIT
done
uptime
