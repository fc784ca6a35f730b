#!/usr/bin/env bash
# The fs-bench reproduction: every available ringfs mode next to raw disk, tmpfs and
# the peers (bindfs, fuse-overlayfs), in one run. Shows `[k/N] row · target · ETA` on
# one updating line while it runs (one line per sample group when stderr is not a
# terminal), then prints a summary: one line per row with raw disk's median
# and spread and the main ringfs modes' ratios, the peers below, and what the noise
# says (load average, flagged rows, "rerun on a quiet machine").
#
#   scripts/bench.sh           quick: 14 rows, REPS=3 (+1 warm-up), all available modes,
#                              one `npm install express` per target, the store section
#                              at small sizes (fsync by file size, SQLite, daemon RSS,
#                              disk, final commit; ringfs defaults beside ext4)
#   scripts/bench.sh --full    full: REPS=5 (+1 warm-up), 14 rows, cells C01–C12,
#                              npm express + front-end toolchain installs, restore after
#                              restart (500/3000 files), the store section at issue 12's
#                              sizes (4 GiB file, 200 000 files, 10 min mixed load),
#                              fs-core store benchmark (store.md)
#   scripts/bench.sh --smoke   CI smoke: REPS=1, rows 1 and 6, raw disk + ringfs synced (< 1 min)
#
# Any other argument goes to ringfs-bench (see `ringfs-bench --help`), e.g.
#   scripts/bench.sh --reps 2 --rows 1,6,12 --targets raw,tmpfs,rf-dev-synced-ptoff
#   scripts/bench.sh --list-targets
#   scripts/bench.sh --rows 0 --npm none --store-section quick   (only the store section)
# Results in $FSBENCH_RESULTS (default target/fsbench/<profile>): summary.txt (the summary),
# results.md (the full table), results.json (every sample, load averages, noise judgement),
# ratios.svg/.png (main modes) and ratios-all.svg/.png (every mode). The report of an
# earlier run, without running anything:
#   target/release/ringfs-bench report --from results.json --out DIR
# Needs root (re-runs itself through sudo when started as another user) and /dev/fuse (mounts).
# Env: RINGFS_BIN=path skips building ringfs; REPS, WARMUP override the profile;
#      FSBENCH_CACHE (default /var/tmp/ringfs-bench-cache: clone fixture, npm cache).
set -euo pipefail
# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
as_root bench "it mounts tmpfs and FUSE filesystems" "$@"
cd "$(dirname "$0")/.."

profile=quick
args=()
for a in "$@"; do
    case $a in
        --full) profile=full ;;
        --smoke) profile=smoke ;;
        --quick) profile=quick ;;
        *) args+=("$a") ;;
    esac
done

[ -e /dev/fuse ] || { echo "bench: /dev/fuse is missing (modprobe fuse)" >&2; exit 1; }
if [ -w /sys/module/fuse/parameters/enable_uring ]; then
    echo Y > /sys/module/fuse/parameters/enable_uring 2>/dev/null || true
fi
for tool in git npm node python3 tar du; do
    command -v "$tool" >/dev/null || { echo "bench: $tool is not installed (run scripts/setup.sh)" >&2; exit 1; }
done
# The store section's SQLite writers are python3 processes.
python3 -c 'import sqlite3' 2>/dev/null || { echo "bench: python3 has no sqlite3 module (run scripts/setup.sh)" >&2; exit 1; }
# Peers from Debian when installable; the harness lists them as skipped otherwise.
if [ "$profile" != smoke ] && command -v apt-get >/dev/null; then
    peers=()
    command -v bindfs >/dev/null || peers+=(bindfs)
    command -v fuse-overlayfs >/dev/null || peers+=(fuse-overlayfs)
    if [ "${#peers[@]}" -gt 0 ]; then
        echo "bench: installing peers: ${peers[*]}" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${peers[@]}" >/dev/null 2>&1 \
            || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${peers[@]}" >/dev/null 2>&1; } \
            || echo "bench: could not install ${peers[*]}; they will be reported as skipped" >&2
    fi
fi

tgt=${CARGO_TARGET_DIR:-target}
echo "bench: building ringfs and ringfs-bench (release; ~5 minutes on 2 cores the first time, cargo's progress below)" >&2
if [ -n "${RINGFS_BIN:-}" ]; then
    cargo build --release -p bench --bin ringfs-bench
else
    cargo build --release -p ringfs -p bench --bin ringfs --bin ringfs-bench
    export RINGFS_BIN="$tgt/release/ringfs"
fi
out=${FSBENCH_RESULTS:-$tgt/fsbench/$profile}
"$tgt/release/ringfs-bench" --profile "$profile" --out "$out" ${args[@]+"${args[@]}"}
if [ "$profile" = full ]; then
    # The store half of "Store and restore": fs-core without FUSE, memory vs disk store.
    cargo build --release -q -p bench --bin ringfs-store-bench
    "$tgt/release/ringfs-store-bench" --json "$out/store.json" | tee "$out/store.md"
fi
