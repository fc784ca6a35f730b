#!/usr/bin/env bash
# A measurement, not a test (issue 13's "mounting a fork ≤ 15 ms", issue
# 16's "mount time stays ≤ 15 ms"; D48, D61): the wall time of
# `ringfs mount --daemon` of an empty store, of a store of N files (default
# 10000, 100 bytes each in directories of 100) shut down cleanly, of a fork
# of it (`ringfs fork`), and of the N-file store after an unclean shutdown
# (its daemon killed with SIGKILL right before each timed mount); the time
# from the mount's start to the first `stat` of a file three directories
# down answering; and the CPU time the daemon used until the mount returned
# (all its threads, from /proc/PID/task/*/schedstat: what a busy machine
# does not inflate as much as wall time), beside the time its threads
# waited for a CPU, and the CPU time of the whole daemon process at
# "ready" as it logs it (threads that ended, such as the table reader,
# included: D68). Each binary given is run in turn, round after round
# (interleaved), on its own copy of the stores; the daemon's own split (its
# log's "store ... opened in" and "mount ready in" lines) is printed for
# the last round, and `uptime` before and after. Needs root and built
# binaries.
#   scripts/measure-mount.sh [-n N] [-r ROUNDS] [-w WORKLOADS] [BIN...]
# WORKLOADS: comma-separated, of empty,tree,fork,unclean (default all).
# Default BIN: target/release/ringfs; extra mount arguments in MOUNT_ARGS.
set -euo pipefail
N=10000
ROUNDS=5
WORK=empty,tree,fork,unclean
while getopts "n:r:w:" o; do
  case $o in
    n) N=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    w) WORK=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- "$(dirname "$0")/../target/release/ringfs"
IFS=, read -ra WORKLOADS <<<"$WORK"
uptime
T=$(mktemp -d /tmp/ringfs-mountmeasure-XXXXXX)
cleanup() {
  for m in "$T"/*/mnt*; do
    mountpoint -q "$m" 2>/dev/null && { umount "$m" 2>/dev/null || umount -l "$m" || true; }
  done
  rm -rf "$T"
}
trap cleanup EXIT
# Stores made with the first binary, copied for each (same bytes for all).
B0=$1
S=$T/seed
mkdir -p "$S/mnt" "$S/mnt-empty" "$S/mnt-fork"
"$B0" mount "$S/mnt" --store "$S/store" --daemon --log-file "$S/log-build" >/dev/null
python3 "$(dirname "$0")/make-tree.py" "$S/mnt" "$N"
"$B0" commit "$S/mnt" -m tree >/dev/null
"$B0" fork "$S/mnt" --to "$S/mnt-fork" --new-store "$S/store-fork" >/dev/null
"$B0" umount "$S/mnt-fork" >/dev/null
"$B0" umount "$S/mnt" >/dev/null
"$B0" mount "$S/mnt-empty" --store "$S/store-empty" --daemon --log-file "$S/log-build" >/dev/null
"$B0" umount "$S/mnt-empty" >/dev/null
i=0
declare -A DIR
for b in "$@"; do
  i=$((i + 1))
  d=$T/b$i
  DIR[$b]=$d
  mkdir -p "$d/mnt" "$d/mnt-empty" "$d/mnt-fork"
  for s in store store-empty store-fork; do cp -a "$S/$s" "$d/$s"; done
  cp -a "$S/store" "$d/store-unclean"
  mkdir -p "$d/mnt-unclean"
done
now() { date +%s%N; }
# CPU and run-queue wait of all threads of PID so far, in µs: "cpu wait".
cpu_of() {
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{c += $1; w += $2} END {printf "%d %d", c / 1000, w / 1000}'
}
# mount_once BIN MNT STORE LOG -> "mount_us first_stat_us cpu_us wait_us pcpu_us"
# (pcpu: the daemon's own "process CPU" at ready, its ended threads
# included, from its log; 0 for a build that does not log it)
mount_once() {
  local b=$1 m=$2 s=$3 log=$4 t0 t1 t2 out pid cw pc
  t0=$(now)
  # shellcheck disable=SC2086
  out=$("$b" mount "$m" --store "$s" --daemon --log-file "$log" ${MOUNT_ARGS:-})
  t1=$(now)
  pid=$(sed -n 's/.*daemon pid \([0-9]*\).*/\1/p' <<<"$out")
  cw=$(cpu_of "$pid")
  stat "$m/d000/e00/f00000" >/dev/null 2>&1 || stat "$m" >/dev/null
  t2=$(now)
  pc=$(grep -o "process CPU [0-9.]*" "$log" | tail -1 | awk '{printf "%d", $3 * 1000}')
  echo "$(( (t1 - t0) / 1000 )) $(( (t2 - t0) / 1000 )) $cw ${pc:-0}"
}
# unclean BIN MNT STORE: mount, write, kill -9 the daemon, unmount the dead mount.
unclean() {
  local b=$1 m=$2 s=$3 out pid
  out=$("$b" mount "$m" --store "$s" --daemon --log-file "$s.log-kill")
  pid=$(sed -n 's/.*daemon pid \([0-9]*\).*/\1/p' <<<"$out")
  echo x >"$m/d000/e00/f00001"
  kill -9 "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
  umount "$m" 2>/dev/null || umount -l "$m"
}
declare -A RES
for r in $(seq "$ROUNDS"); do
  for b in "$@"; do
    d=${DIR[$b]}
    for w in "${WORKLOADS[@]}"; do
      case $w in
        empty) m=$d/mnt-empty s=$d/store-empty ;;
        tree) m=$d/mnt s=$d/store ;;
        fork) m=$d/mnt-fork s=$d/store-fork ;;
        unclean) m=$d/mnt-unclean s=$d/store-unclean; unclean "$b" "$m" "$s" ;;
        *) echo "unknown workload $w" >&2; exit 2 ;;
      esac
      RES[$b,$w]+="$(mount_once "$b" "$m" "$s" "$d/log-$w") "
      "$b" umount "$m" >/dev/null
    done
  done
done
median() { python3 -c 'import sys,statistics; v=[float(x)/1000 for x in sys.argv[1:]]; print("%.1f [%.1f–%.1f]" % (statistics.median(v), min(v), max(v)))' "$@"; }
for b in "$@"; do
  for w in "${WORKLOADS[@]}"; do
    read -ra v <<<"${RES[$b,$w]}"
    mt=() st=() cpu=() wt=() pc=()
    for ((i = 0; i < ${#v[@]}; i += 5)); do mt+=("${v[i]}"); st+=("${v[i + 1]}"); cpu+=("${v[i + 2]}"); wt+=("${v[i + 3]}"); pc+=("${v[i + 4]}"); done
    echo "$b $w (N=$N, $ROUNDS rounds): mount --daemon $(median "${mt[@]}") ms; to first stat $(median "${st[@]}") ms; daemon CPU $(median "${cpu[@]}") ms (live threads), waiting for a CPU $(median "${wt[@]}") ms; process CPU at ready (all threads) $(median "${pc[@]}") ms"
    grep -ho "opened in.*\|mount ready in.*" "${DIR[$b]}/log-$w" | tail -2 | sed 's/^/    /' || true
  done
done
uptime
