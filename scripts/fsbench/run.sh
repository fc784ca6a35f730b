#!/usr/bin/env bash
# fs-bench row runner: identical for every target.
#
#   run.sh ROW PHASE DIR
#
# ROW   a row script in this directory (e.g. 01-create.sh) or a path to one.
# PHASE prep | body | verify
# DIR   the sample's fresh directory (the runner cd's into it).
#
# A row script defines body() and verify(), optionally prep() (untimed), TIMED
# (names of functions timed one after another, default "body") and info()
# (extra facts printed after verify, e.g. "files=N bytes=M").
# The body's own stdout is discarded. The body phase prints one line "FSBENCH_US <function> <microseconds>" per timed
# function; the clock covers only the function (bash's $EPOCHREALTIME), not bash
# start-up. With FSBENCH_STATS set (a command printing the daemon's counters as
# JSON, `ringfs stats MNT --json`) and more than one timed function, it also
# prints "FSBENCH_STATS - <json>" before the first and "FSBENCH_STATS <function>
# <json>" after each, outside the clock: requests per timed function. Everything runs under `set -eo pipefail`: a failing command fails the
# sample, and a failed verify prints "FSBENCH_FAIL <reason>" and exits 1.
set -eo pipefail
export LC_ALL=C
# Keep git and npm independent of the caller's configuration.
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=fsbench GIT_AUTHOR_EMAIL=fsbench@example.invalid
export GIT_COMMITTER_NAME=fsbench GIT_COMMITTER_EMAIL=fsbench@example.invalid
export GIT_AUTHOR_DATE='2026-01-01T00:00:00Z' GIT_COMMITTER_DATE='2026-01-01T00:00:00Z'
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false npm_config_loglevel=error
[ -n "${FSBENCH_NPM_CACHE:-}" ] && export npm_config_cache="$FSBENCH_NPM_CACHE"

row=$1 phase=$2 dir=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case $row in */*) ;; *) row="$here/$row" ;; esac

fail() { echo "FSBENCH_FAIL $*"; exit 1; }
# expect NAME ACTUAL WANTED
expect() { [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"; }
# The 1000 files f1..f1000 with contents 1..1000, in order.
check_1000() {
    expect "file count" "$(find . -maxdepth 1 -type f -name 'f*' | wc -l)" 1000
    expect "content hash" "$(seq -f 'f%g' 1000 | xargs cat | sha256sum)" "$(seq 1000 | sha256sum)"
}
# The tree a/b/c for a, b, c in 1..10.
check_tree() {
    expect "files in tree" "$(find . -mindepth 3 -type f | wc -l)" 1000
    expect "dirs in tree" "$(find . -mindepth 1 -type d | wc -l)" 110
    expect "file sizes" "$(find . -mindepth 3 -type f -size +0 | wc -l)" 0
}
# check_zero FILE: 64 MiB of zeros.
check_zero() {
    expect "size of $1" "$(stat -c %s "$1")" 67108864
    cmp -s -n 67108864 "$1" /dev/zero || fail "$1 is not 64 MiB of zeros"
}
dd64() { dd if=/dev/zero of=big bs=1M count=64 status=none "$@"; }

prep() { :; }
info() { :; }
TIMED=body
# shellcheck disable=SC1090
source "$row"
cd "$dir"
case $phase in
    prep) prep ;;
    body)
        stats=
        set -- $TIMED
        if [ -n "${FSBENCH_STATS:-}" ] && [ $# -gt 1 ]; then
            stats=$FSBENCH_STATS
            echo "FSBENCH_STATS - $(eval "$stats" | tr -d '\n')"
        fi
        for fn in $TIMED; do
            t0=$EPOCHREALTIME
            "$fn" >/dev/null
            t1=$EPOCHREALTIME
            echo "FSBENCH_US $fn $(( 10#${t1/./} - 10#${t0/./} ))"
            if [ -n "$stats" ]; then
                echo "FSBENCH_STATS $fn $(eval "$stats" | tr -d '\n')"
            fi
        done
        ;;
    verify) verify; info ;;
    *) echo "run.sh: unknown phase '$phase' (prep|body|verify)" >&2; exit 2 ;;
esac
