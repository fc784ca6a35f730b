#!/usr/bin/env bash
# A measurement, not a test (issue 13's "mounting a fork ≤ 15 ms", issue
# 16's "mount time stays ≤ 15 ms"; D48): the wall time of
# `ringfs mount --daemon` of an empty store, of a store of N files (default
# 10000, 100 bytes each in directories of 100) shut down cleanly, and of a
# fork of it (`ringfs fork`), and the time from the mount's start to the
# first `stat` of a file three directories down answering. Each binary given
# is run in turn, round after round (interleaved), on the same stores; the
# daemon's own split (its log's "store ... opened in" and "mount ready in"
# lines) is printed for the last round. Needs root and built binaries.
#   scripts/measure-mount.sh [-n N] [-r ROUNDS] [BIN...]
# (default BIN: target/release/ringfs; RINGFS_TEST_MOUNT_ARGS-like extra
# mount arguments in MOUNT_ARGS).
set -euo pipefail
N=10000
ROUNDS=5
while getopts "n:r:" o; do
  case $o in
    n) N=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- "$(dirname "$0")/../target/release/ringfs"
BIN=$1
uptime
T=$(mktemp -d /tmp/ringfs-mountmeasure-XXXXXX)
cleanup() {
  for m in "$T"/mnt*; do
    mountpoint -q "$m" 2>/dev/null && { "$BIN" umount "$m" >/dev/null 2>&1 || umount -l "$m" || true; }
  done
  rm -rf "$T"
}
trap cleanup EXIT
mkdir "$T/mnt" "$T/mnt-empty" "$T/mnt-fork"
# The tree, a commit, a fork of it; all shut down cleanly.
"$BIN" mount "$T/mnt" --store "$T/store" --daemon --log-file "$T/log-build" >/dev/null
python3 "$(dirname "$0")/make-tree.py" "$T/mnt" "$N"
"$BIN" commit "$T/mnt" -m tree >/dev/null
"$BIN" fork "$T/mnt" --to "$T/mnt-fork" --new-store "$T/store-fork" >/dev/null
"$BIN" umount "$T/mnt-fork" >/dev/null
"$BIN" umount "$T/mnt" >/dev/null
"$BIN" mount "$T/mnt-empty" --store "$T/store-empty" --daemon --log-file "$T/log-build" >/dev/null
"$BIN" umount "$T/mnt-empty" >/dev/null
now() { date +%s%N; }
# mount_once BIN MNT STORE LOG -> "mount_ms first_stat_ms"
mount_once() {
  local b=$1 m=$2 s=$3 log=$4 t0 t1 t2
  t0=$(now)
  # shellcheck disable=SC2086
  "$b" mount "$m" --store "$s" --daemon --log-file "$log" ${MOUNT_ARGS:-} >/dev/null
  t1=$(now)
  stat "$m/d000/e00/f00000" >/dev/null 2>&1 || stat "$m" >/dev/null
  t2=$(now)
  "$b" umount "$m" >/dev/null
  echo "$(( (t1 - t0) / 1000 )) $(( (t2 - t0) / 1000 ))"
}
declare -A RES
for r in $(seq "$ROUNDS"); do
  for b in "$@"; do
    for w in empty tree fork; do
      case $w in
        empty) m=$T/mnt-empty s=$T/store-empty ;;
        tree) m=$T/mnt s=$T/store ;;
        fork) m=$T/mnt-fork s=$T/store-fork ;;
      esac
      RES[$b,$w]+="$(mount_once "$b" "$m" "$s" "$T/log-$w-$(basename "$b")") "
    done
  done
done
median() { python3 -c 'import sys,statistics; v=[float(x)/1000 for x in sys.argv[1:]]; print("%.1f [%.1f–%.1f]" % (statistics.median(v), min(v), max(v)))' "$@"; }
for b in "$@"; do
  for w in empty tree fork; do
    read -ra v <<<"${RES[$b,$w]}"
    mt=() st=()
    for ((i = 0; i < ${#v[@]}; i += 2)); do mt+=("${v[i]}"); st+=("${v[i + 1]}"); done
    echo "$b $w (N=$N, $ROUNDS rounds): mount --daemon $(median "${mt[@]}") ms; to first stat $(median "${st[@]}") ms"
    grep -ho "opened in.*\|mount ready in.*" "$T/log-$w-$(basename "$b")" | tail -2 | sed 's/^/    /' || true
  done
done
uptime
