#!/usr/bin/env bash
# A measurement, not a test (issue 14, DECISIONS D82): the sync bench's clone
# cell (3 000 files / 100 MiB through one Garage node on 127.0.0.1; three turns
# of the raw download and of clone + mount + `ls -R` + every file read back,
# medians) with the loopback interface shaped to each RATE by a token bucket
# (`tc qdisc … tbf`), so that the network, not the two CPUs, bounds the
# download, as it does against a remote object store. The shaping is removed
# after each run and on every way out (exit, Ctrl-C, error). It refuses to
# start when lo already has a root qdisc (someone else's shaping).
# Needs root, tc (iproute2), garage on PATH and built binaries
# (cargo build --release -p ringfs -p bench). Results in OUT/RATE/results.md.
#   scripts/measure-clone-shaped.sh [OUT] [RATE ...]    (default: bench-out/shaped 1gbit 2500mbit 5gbit)
set -euo pipefail
. "$(dirname "$0")/as-root.sh"
as_root measure-clone-shaped "it shapes the loopback interface with tc" "$@"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-bench-out/shaped}
shift || true
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(1gbit 2500mbit 5gbit)
command -v tc >/dev/null || { echo "measure-clone-shaped: no tc: apt-get install iproute2" >&2; exit 1; }
command -v garage >/dev/null || { echo "measure-clone-shaped: no garage on PATH: scripts/setup.sh installs it" >&2; exit 1; }
if tc qdisc show dev lo | grep -qv "noqueue"; then
  echo "measure-clone-shaped: lo already has a qdisc ($(tc qdisc show dev lo | head -1)); not touching it" >&2
  exit 1
fi
shaped=0
unshape() { if [ $shaped = 1 ]; then tc qdisc del dev lo root 2>/dev/null || true; shaped=0; fi; }
trap unshape EXIT
trap 'unshape; exit 130' INT TERM
uptime
for r in "${RATES[@]}"; do
  tc qdisc add dev lo root tbf rate "$r" burst 1mb latency 50ms
  shaped=1
  "$ROOT/target/release/ringfs-bench" --profile full --rows 0 --npm none --store-section none \
    --snap-section none --sync-section full --sync-steps clone --cells false --restore 0 \
    --no-setup --out "$OUT/$r" >"$OUT.$r.log" 2>&1 || { echo "$r: the bench failed (see $OUT.$r.log)" >&2; unshape; exit 1; }
  unshape
  echo "== loopback at $r"
  grep -E "^\| (raw download of|clone \+ mount)" "$OUT/$r/results.md"
done
uptime
