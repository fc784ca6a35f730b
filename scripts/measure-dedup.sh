#!/usr/bin/env bash
# A measurement, not a test (issue 13, LayerFS's dedup cases; DECISIONS D37):
# how much a store grows for small edits of a big file, step by step, on a
# real mount (`ringfs mount --store`, `ringfs commit` after each step).
#
#   overwrites: a 32 MiB file of random bytes, committed; then sixteen
#               10-byte overwrites spread over it, a commit after each;
#   prepend:    then 10 bytes written to a temporary file, the 32 MiB
#               appended, the temporary renamed over the file; a commit.
#
# "Store growth" is what the store directory holds beyond its working
# copies: the pack files (STORE/packs/*.pack, their sizes) plus the
# database (STORE/store.redb). For the database two figures are printed:
# its file size, and the bytes its blocks take on disk (du; redb extends the
# file with set_len, so a fresh region is sparse until pages are written).
# redb writes pages copy-on-write and frees the old ones; freed pages are
# reused by later transactions, so its size moves in steps. The total is
# what the change wrote: the packs' sizes plus store.redb's allocated bytes
# (as the benchmark's store growth, bench/src/snapshots/work.rs
# store_bytes): a step of the file's size is not growth (issue 41).
#
# Needs root and a built binary (target/release/ringfs, or $RINGFS).
#   scripts/measure-dedup.sh [MIB [N]]   (default 32 MiB, N = 16 overwrites)
set -euo pipefail
BIN=${RINGFS:-$(dirname "$0")/../target/release/ringfs}
MIB=${1:-32}
N=${2:-16}
uptime
T=$(mktemp -d /tmp/ringfs-dedupmeasure-XXXXXX)
mkdir "$T/mnt"
"$BIN" mount "$T/mnt" --store "$T/store" --daemon --log-file "$T/log" >/dev/null
trap '"$BIN" umount "$T/mnt" >/dev/null 2>&1 || true; rm -rf "$T"' EXIT
S=$T/store
head -c $((MIB << 20)) /dev/urandom > "$T/orig"

# packs (file sizes), store.redb (file size), store.redb (allocated), total (packs + allocated)
sizes() {
  local p r a
  p=$(find "$S/packs" -name '*.pack' -printf '%s\n' 2>/dev/null | awk '{s+=$1} END {print s+0}')
  r=$(stat -c %s "$S/store.redb")
  a=$(( $(stat -c %b "$S/store.redb") * $(stat -c %B "$S/store.redb") ))
  echo "$p $r $a $((p + a))"
}
commit() {
  "$BIN" commit "$T/mnt" -m "$1" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print("objects new %d (%d B), reused %d" % (d["objects"]["new"], d["bytes"]["new"], d["objects"]["reused"]))'
}
read -r P0 R0 A0 TOT0 < <(sizes)
row() { # label, commit report, previous sizes -> one line of growth
  read -r p r a tot < <(sizes)
  printf '%-14s packs %+9d  redb %+9d (alloc %+9d)  total %+9d  | cum total %+10d  | %s\n' \
    "$1" $((p - PP)) $((r - PR)) $((a - PA)) $((tot - PT)) $((tot - BT)) "$2"
  PP=$p PR=$r PA=$a PT=$tot
}
PP=$P0 PR=$R0 PA=$A0 PT=$TOT0 BT=$TOT0
cp "$T/orig" "$T/mnt/big"
row "write ${MIB}MiB" "$(commit base)"
read -r _ _ _ BT < <(sizes)
for i in $(seq 0 $((N - 1))); do
  off=$(( (i * (MIB << 20) / N) + 12345 ))
  printf 'ovw%07d' "$i" | dd of="$T/mnt/big" bs=1 seek=$off conv=notrunc status=none
  row "overwrite $i" "$(commit "overwrite $i")"
done
read -r _ _ _ T16 < <(sizes)
echo "$N overwrites: store grew $((T16 - BT)) bytes ($(python3 -c "print('%.3f' % (($T16 - $BT) / 1048576))") MiB)"
BT=$T16
printf '0123456789' > "$T/mnt/big.tmp"
cat "$T/mnt/big" >> "$T/mnt/big.tmp"
mv "$T/mnt/big.tmp" "$T/mnt/big"
row "prepend" "$(commit prepend)"
read -r _ _ _ TP < <(sizes)
echo "prepend: store grew $((TP - BT)) bytes ($(python3 -c "print('%.3f' % (($TP - $BT) / 1048576))") MiB)"
"$BIN" umount "$T/mnt" >/dev/null
read -r _ _ _ TU < <(sizes)
echo "after unmount: store (packs + store.redb allocated) $TU bytes"
rm -rf "$T"
trap - EXIT
uptime
