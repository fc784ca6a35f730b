#!/usr/bin/env bash
# Untimed, idempotent setup the fs-bench rows need, in a persistent cache directory:
#   CACHE/git/bench.git         a ~1 MB bare repository (row 13), with bench.git.sha256
#   CACHE/npm                   an npm cache warmed for row 14 and, with --npm LIST,
#                               for the named npm workloads (express, toolchain)
# Usage: setup.sh CACHE [--npm express,toolchain]
set -eo pipefail
export LC_ALL=C
cache=${1:?usage: setup.sh CACHE [--npm express,toolchain]}
npm_sets=${3:-}
[ "${2:-}" = "--npm" ] || npm_sets=""
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=fsbench GIT_AUTHOR_EMAIL=fsbench@example.invalid
export GIT_COMMITTER_NAME=fsbench GIT_COMMITTER_EMAIL=fsbench@example.invalid
export npm_config_cache="$cache/npm" npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false npm_config_loglevel=error

repo="$cache/git/bench.git"
if [ ! -f "$repo.sha256" ]; then
    rm -rf "$cache/git"; mkdir -p "$cache/git"
    w=$(mktemp -d "$cache/git/work.XXXXXX")
    trap 'rm -rf "$w"' EXIT
    # 240 files of 4 KiB of incompressible bytes in 12 directories: about 1 MB packed.
    for d in $(seq 12); do
        mkdir -p "$w/src/d$d"
        for f in $(seq 20); do head -c 4096 /dev/urandom > "$w/src/d$d/file$f.bin"; done
    done
    printf 'fs-bench clone fixture\n' > "$w/README"
    git -C "$w" init -q
    git -C "$w" add -A
    git -C "$w" commit -qm fixture
    git clone -q --bare --no-local "$w" "$repo"
    git -C "$repo" gc -q
    rm -rf "$repo/hooks"
    (cd "$w" && git ls-files -z | sort -z | xargs -0 cat | sha256sum) > "$repo.sha256.tmp"
    mv "$repo.sha256.tmp" "$repo.sha256"
    rm -rf "$w"; trap - EXIT
    echo "fsbench setup: made $repo ($(du -sh "$repo" | cut -f1))"
fi

# warm NAME PACKAGES...: install once into a throw-away directory (network allowed),
# so later --prefer-offline installs are served from the cache.
warm() {
    local name=$1; shift
    local stamp="$cache/npm-warm-$name"
    [ -f "$stamp" ] && return 0
    local w; w=$(mktemp -d "$cache/npm-warm.XXXXXX")
    echo '{"name":"fsbench-warm","version":"1.0.0","private":true}' > "$w/package.json"
    if (cd "$w" && npm install --ignore-scripts --no-audit --no-fund "$@" > /dev/null); then
        touch "$stamp"; rm -rf "$w"; echo "fsbench setup: npm cache warm for $name"
    else
        rm -rf "$w"; echo "fsbench setup: could not warm the npm cache for $name" >&2; return 1
    fi
}
if command -v npm > /dev/null; then
    warm tiny is-number@7.0.0
    IFS=, read -ra sets <<< "$npm_sets"
    for s in "${sets[@]}"; do
        case $s in
            express) warm express express ;;
            toolchain) warm toolchain typescript@5 vite@7 webpack@5 eslint@9 react@19 react-dom@19 @types/node@22 ;;
            "") ;;
            *) echo "fsbench setup: unknown npm set $s" >&2; exit 2 ;;
        esac
    done
else
    echo "fsbench setup: npm not installed; npm rows will FAIL" >&2
fi
