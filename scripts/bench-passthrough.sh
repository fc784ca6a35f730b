#!/usr/bin/env bash
# Passthrough and local-only measurement (until the benchmark issue's harness
# covers it): 64 MiB write, read (write + cat), pure read, copy and overwrite
# (fs-bench rows 6, 8, 9, 10, 11 from scripts/fsbench/) on
#   raw ext4 (a directory on the same disk),
#   a synced path and a local-only path of a ringfs mount with passthrough on,
#   the same with passthrough off,
# all in one run, each cell the median of N samples (default 5) in a fresh
# directory. Before each sample the mount is settled (nothing left to hash or
# commit), so a sample does not pay for the previous one's hashing.
#
#   scripts/bench-passthrough.sh [--samples N] [--dir BASE]
#
# Environment: RINGFS (binary; default: build target/release/ringfs),
# RINGFS_BENCH_MOUNT_ARGS (extra mount args, e.g. "--transport dev").
# Needs root (FUSE mounts, passthrough; re-runs itself through sudo otherwise). Prints a markdown table.
set -euo pipefail
# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
as_root bench-passthrough "FUSE mounts and passthrough" "$@"
cd "$(dirname "$0")/.."
samples=5
base=/var/tmp/ringfs-bench-pt.$$
while [ $# -gt 0 ]; do
    case $1 in
        --samples) samples=$2; shift 2 ;;
        --dir) base=$2; shift 2 ;;
        *) echo "usage: $0 [--samples N] [--dir BASE]" >&2; exit 2 ;;
    esac
done
if [ -z "${RINGFS:-}" ]; then
    cargo build --release -p ringfs >&2
    RINGFS="${CARGO_TARGET_DIR:-target}/release/ringfs"
fi
runner=$PWD/scripts/fsbench/run.sh
rows=(06-dd.sh 08-dd-cat.sh 09-read.sh 10-copy.sh 11-overwrite.sh)
names=(write read "pure read" copy overwrite)

mkdir -p "$base"
mounts=()
cleanup() {
    for mp in "${mounts[@]}"; do
        "$RINGFS" umount "$mp" >/dev/null 2>&1 || true
    done
    rm -rf "$base"
}
trap cleanup EXIT INT TERM

# mount PT: a store with everything under /local local-only.
mount_pt() {
    local pt=$1 mp=$base/mnt-$1
    mkdir -p "$mp"
    "$RINGFS" mount "$mp" --store "$base/store-$pt" --ignore /local --native-roots off --passthrough "$pt" --daemon ${RINGFS_BENCH_MOUNT_ARGS:-} \
        --log-file "$base/log-$pt" >/dev/null
    mounts+=("$mp")
    mkdir -p "$mp/synced" "$mp/local"
    if [ "$pt" = on ] && ! "$RINGFS" status "$mp" | grep -q '^passthrough: *on'; then
        echo "$0: passthrough did not come on:" >&2
        "$RINGFS" status "$mp" >&2
        exit 1
    fi
}

settle() { # MP: wait until nothing is dirty
    local mp=$1 i
    for i in $(seq 1 400); do
        if "$RINGFS" status --json "$mp" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["store_stats"]["dirty"] == 0 else 1)'; then
            return 0
        fi
        sleep 0.05
    done
}

# sample TARGET_DIR ROW MP: prints the body's microseconds.
sample() {
    local dir=$1/s.$RANDOM.$RANDOM row=$2 mp=$3
    mkdir -p "$dir"
    bash "$runner" "$row" prep "$dir" >/dev/null
    [ -n "$mp" ] && settle "$mp"
    sync
    local us
    us=$(bash "$runner" "$row" body "$dir" | awk '/^FSBENCH_US/ {s += $3} END {print s}')
    bash "$runner" "$row" verify "$dir" >/dev/null
    rm -rf "$dir"
    [ -n "$mp" ] && settle "$mp"
    echo "$us"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

mkdir -p "$base/raw"
mount_pt on
mount_pt off
targets=("$base/raw" "$base/mnt-on/synced" "$base/mnt-on/local" "$base/mnt-off/synced" "$base/mnt-off/local")
tmps=("" "$base/mnt-on" "$base/mnt-on" "$base/mnt-off" "$base/mnt-off")
labels=("raw ext4" "synced, passthrough" "local-only, passthrough" "synced, no passthrough" "local-only, no passthrough")

declare -A med
for r in "${!rows[@]}"; do
    for t in "${!targets[@]}"; do
        vals=()
        for _ in $(seq 1 "$samples"); do
            vals+=("$(sample "${targets[$t]}" "${rows[$r]}" "${tmps[$t]}")")
        done
        med[$r,$t]=$(printf '%s\n' "${vals[@]}" | median)
        echo "  ${names[$r]} on ${labels[$t]}: $(printf '%s ' "${vals[@]}")µs -> median ${med[$r,$t]}" >&2
    done
done

echo
echo "64 MiB, median of $samples, ms (× raw ext4); $(uname -r), $(nproc) CPUs"
echo
printf '| op |'; for l in "${labels[@]}"; do printf ' %s |' "$l"; done; echo
printf '|---|'; for _ in "${labels[@]}"; do printf -- '---:|'; done; echo
for r in "${!rows[@]}"; do
    printf '| %s |' "${names[$r]}"
    raw=${med[$r,0]}
    for t in "${!targets[@]}"; do
        v=${med[$r,$t]}
        if [ "$t" -eq 0 ]; then
            printf ' %.1f |' "$(echo "$v / 1000" | bc -l)"
        else
            printf ' %.1f (%.2f×) |' "$(echo "$v / 1000" | bc -l)" "$(echo "$v / $raw" | bc -l)"
        fi
    done
    echo
done
