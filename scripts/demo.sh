#!/usr/bin/env bash
# README's main command (until the benchmark lands): build ringfs, mount a
# workspace on a durable store (the embedded redb store), run a short real
# workload in it (git init + commit, a tiny npm install), print what it did
# and the daemon's status, unmount, and verify the store with fsck.
#
# Usage: scripts/demo.sh            (as root or through sudo; needs /dev/fuse)
# Env:   RINGFS_DEMO_DIR  where the store and mountpoint go (default: a temp dir)
set -euo pipefail
# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
as_root demo "it mounts a FUSE filesystem" "$@"
cd "$(dirname "$0")/.."

if [ -w /sys/module/fuse/parameters/enable_uring ]; then
  echo Y > /sys/module/fuse/parameters/enable_uring || true
fi
for tool in git npm; do
  command -v "$tool" >/dev/null || { echo "demo: $tool is not installed (run scripts/setup.sh)" >&2; exit 1; }
done

echo "== building ringfs (release)"
cargo build --release -q -p ringfs
RINGFS="$PWD/target/release/ringfs"

base="${RINGFS_DEMO_DIR:-$(mktemp -d /tmp/ringfs-demo.XXXXXX)}"
mkdir -p "$base/mnt" "$base/store"
mnt="$base/mnt"; store="$base/store"
mounted=0
cleanup() {
  if [ "$mounted" = 1 ]; then "$RINGFS" umount "$mnt" || true; fi
  if [ -z "${RINGFS_DEMO_DIR:-}" ]; then rm -rf "$base"; fi
}
trap cleanup EXIT

echo "== mounting $mnt on store $store"
"$RINGFS" mount "$mnt" --store "$store" --daemon --log-file "$base/ringfs.log"
mounted=1

t0=$(date +%s%N)
(
  cd "$mnt"
  mkdir -p repo && cd repo
  git init -q
  for i in $(seq 100); do echo "$i" > "f$i"; done
  git add -A
  git -c user.name=ringfs -c user.email=ringfs@example.invalid commit -qm "100 files"
  echo "git: $(git log --oneline | wc -l) commit, $(git ls-files | wc -l) files tracked, status: $(git status --porcelain | wc -l) changes"
)
t1=$(date +%s%N)
(
  cd "$mnt" && mkdir -p app && cd app
  echo '{"name":"demo","version":"1.0.0","private":true}' > package.json
  npm install --no-audit --no-fund --loglevel=error is-number@7.0.0 >/dev/null
  node -e 'const n=require("is-number"); console.log("npm: is-number installed, isNumber(5) =", n(5))'
)
t2=$(date +%s%N)
echo "timings: git workload $(( (t1-t0)/1000000 )) ms, npm install $(( (t2-t1)/1000000 )) ms"
echo "== ringfs status"
"$RINGFS" status "$mnt"
echo "== unmounting"
"$RINGFS" umount "$mnt"
mounted=0
echo "== fsck"
"$RINGFS" fsck --store "$store"
echo "demo: done"
