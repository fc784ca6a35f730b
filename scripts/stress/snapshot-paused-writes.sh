#!/usr/bin/env bash
# A reproduction, not a test (D41): does a snapshot commit miss files
# written with pauses longer than the group-commit interval between them?
# Per round: a directory and a file, commit, commit --allow-empty, four
# files written 3-9 ms apart, commit; the last commit must report 4 paths
# added. Before D41's fix (journal positions taken inside the writer) about
# 1 round in 70 recorded none of the 4 on a loaded 2-core machine. Needs
# root and a built binary.
#   scripts/stress/snapshot-paused-writes.sh [RINGFS_BINARY [ROUNDS]]
set -uo pipefail
BIN=${1:-$(dirname "$0")/../../target/release/ringfs}; ROUNDS=${2:-150}
T=$(mktemp -d /tmp/ringfs-snaprace-XXXXXX)
mkdir "$T/mnt"
"$BIN" mount "$T/mnt" --store "$T/store" --daemon --log-file "$T/log" --commit-interval-ms 2 >/dev/null
trap '"$BIN" umount "$T/mnt" >/dev/null 2>&1 || true; rm -rf "$T"' EXIT
bad=0
for r in $(seq 1 "$ROUNDS"); do
  mkdir "$T/mnt/r$r"; echo one > "$T/mnt/r$r/first"
  "$BIN" commit "$T/mnt" -m a >/dev/null
  "$BIN" commit "$T/mnt" -m b --allow-empty >/dev/null
  for i in 0 1 2 3; do echo "round $r file $i" > "$T/mnt/r$r/f$i"; sleep 0.0$((3 + 2*i)); done
  a=$("$BIN" commit "$T/mnt" -m c --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["paths"]["added"])')
  if [ "$a" != 4 ]; then echo "round $r: commit added $a paths, not 4"; bad=$((bad+1)); fi
done
echo "rounds $ROUNDS, bad $bad"
[ "$bad" -eq 0 ]
