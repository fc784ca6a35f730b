#!/usr/bin/env bash
# Transport microbenchmark (issue 4, "Measure"): FUSE round trips through /dev/fuse
# vs FUSE-over-io_uring in the same run, on the same in-memory filesystem:
# stat with attribute timeout 0, create+unlink, 4 KiB direct reads (passthrough
# off), with 1 and 2 parallel clients. Prints a markdown table of medians in µs/op.
#
#   scripts/bench-transport.sh [rounds] [ops-per-round]     (default 21 2000)
#
# Needs root (re-runs itself through sudo otherwise) and /dev/fuse; sets /sys/module/fuse/parameters/enable_uring to Y
# (as the project's setup does). Env: CARGO_TARGET_DIR as usual.
# Source: fuse-uring/examples/transport_bench.rs (method described there).
set -euo pipefail
# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
as_root bench-transport "FUSE mounts and enable_uring" "$@"
cd "$(dirname "$0")/.."
param=/sys/module/fuse/parameters/enable_uring
if [ -e "$param" ] && [ "$(cat "$param")" != Y ]; then
    echo Y > "$param" || { echo "cannot enable FUSE-over-io_uring ($param); run as root" >&2; exit 1; }
fi
cargo build --release -q -p fuse-uring --example transport_bench
target=${CARGO_TARGET_DIR:-target}
exec "$target/release/examples/transport_bench" "$@"
