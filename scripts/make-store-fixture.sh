#!/usr/bin/env bash
# Makes ringfs/tests/fixtures/store-schemaN: a small store written by a ringfs
# release of schema N, for ringfs/tests/migration.rs.
#   scripts/make-store-fixture.sh N OLD_RINGFS_BINARY
# Build OLD_RINGFS_BINARY from the last commit of schema N, e.g. 322d4de
# (schema 1), 0b4381d (schema 2), d08f47e (schema 4 with snapshot objects
# version 1 and 512 KiB chunks; its store also gets one commit, "fixture")
# or 0d67997 (schema 5: whole live manifest rows, also one commit):
#   git worktree add /tmp/old 0b4381d && cargo build --release -p ringfs --manifest-path /tmp/old/Cargo.toml
# Needs root (FUSE). The fixture's contents are listed in migration.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
schema=${1:?usage: $0 SCHEMA OLD_RINGFS_BINARY}
old=${2:?usage: $0 SCHEMA OLD_RINGFS_BINARY}
[ "$(id -u)" -eq 0 ] || { echo "make-store-fixture: needs root (FUSE mount)" >&2; exit 1; }
out=ringfs/tests/fixtures/store-schema$schema
tmp=$(mktemp -d)
trap 'mountpoint -q "$tmp/mnt" && "$old" umount "$tmp/mnt"; rm -rf "$tmp"' EXIT
mkdir "$tmp/mnt"
"$old" mount "$tmp/mnt" --store "$tmp/store" --daemon --native-roots off
(
    cd "$tmp/mnt"
    printf 'hello\n' > a.txt
    setfattr -n user.k -v v a.txt
    mkdir dir && chmod 750 dir
    python3 -c 'import sys; sys.stdout.buffer.write(bytes(((i * 2654435761) % 2**32 >> 13) & 255 for i in range(1 << 20)))' > dir/b
    chmod 640 dir/b
    ln -s a.txt link
    ln dir/b hard
    : > empty
)
if [ "$schema" -ge 4 ]; then "$old" commit "$tmp/mnt" -m fixture; fi
"$old" umount "$tmp/mnt"
rm -rf "$out"
mkdir -p "$out"
cp -a "$tmp/store/store.redb" "$tmp/store/wc" "$out/"
if [ -d "$tmp/store/packs" ]; then cp -a "$tmp/store/packs" "$out/"; fi
rm -f "$out/ringfs.lock"
du -sh "$out"
