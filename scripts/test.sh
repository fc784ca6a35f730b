#!/usr/bin/env bash
# The README test command: build the workspace and run every test (unit, property and
# real-mount integration tests) in release mode. Needs root: re-runs itself through
# sudo when started as another user.
#
# Environment:
#   RINGFS_TEST_THREADS     test threads per test binary (default 3: two shared cores,
#                           most mount tests wait on I/O; fsx/pjdfstest are the heavy ones)
#   RINGFS_TEST_MOUNT_ARGS  extra `ringfs mount` args for every integration test
#   RINGFS_TEST_MODES       ';'-separated mount-arg sets for the mode subset (default
#                           "--passthrough off;--ignore /* --native-roots off;--transport dev"; empty skips it)
#   RINGFS_TEST_MATRIX      optional ';'-separated list of extra mount-arg sets; the
#                           ringfs integration tests run once more per entry, e.g.
#                           "--passthrough off;--transport dev"
#   CARGO_TEST_ARGS         extra args before `--` (e.g. "--test cases")
set -euo pipefail
# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
as_root test.sh "the mount tests need FUSE mounts, setpriv and unshare" "$@"
cd "$(dirname "$0")/.."
# The layout rules of docs/ARCHITECTURE.md (file sizes, import cycles, layers), first.
python3 scripts/check-layout.py
export PATH="$HOME/.cargo/bin:$PATH"
threads=${RINGFS_TEST_THREADS:-3}

start=$(date +%s)
# shellcheck disable=SC2086
cargo build --workspace --release --all-targets
# shellcheck disable=SC2086
cargo test --workspace --release --no-fail-fast ${CARGO_TEST_ARGS:-} -- --test-threads="$threads"

# Mode matrix: the suites above ran with the defaults (io_uring transport and
# passthrough on, where the kernel allows them); the POSIX, field-case, O_TMPFILE/ACL
# and workload suites run once more with passthrough off, with everything local-only,
# and on the /dev/fuse transport (~3 min each on 2 cores).
# RINGFS_TEST_MODES overrides the ';'-separated list ("" skips it).
IFS=';' read -r -a pmodes <<<"${RINGFS_TEST_MODES-"--passthrough off;--ignore /* --native-roots off;--transport dev"}"
for mode in "${pmodes[@]}"; do
    [ -n "$mode" ] || continue
    echo "=== cases, posix, pjdfstest, fsx, tmpfile_acl, workloads with mount args: $mode ${RINGFS_TEST_MOUNT_ARGS:-}"
    RINGFS_TEST_MOUNT_ARGS="$mode ${RINGFS_TEST_MOUNT_ARGS:-}" \
        cargo test -p ringfs --release --no-fail-fast --test cases --test posix --test pjdfstest --test fsx --test tmpfile_acl --test workloads \
        -- --test-threads="$threads"
done

if [ -n "${RINGFS_TEST_MATRIX:-}" ]; then
    IFS=';' read -r -a modes <<<"$RINGFS_TEST_MATRIX"
    for mode in "${modes[@]}"; do
        echo "=== ringfs integration tests with mount args: $mode ${RINGFS_TEST_MOUNT_ARGS:-}"
        RINGFS_TEST_MOUNT_ARGS="$mode ${RINGFS_TEST_MOUNT_ARGS:-}" \
            cargo test -p ringfs --release --no-fail-fast -- --test-threads="$threads"
    done
fi
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s"
