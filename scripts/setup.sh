#!/usr/bin/env bash
# Idempotent machine setup for ringfs tests (needs root: re-runs itself through sudo
# when started as another user).
# Installs the tools the integration tests drive, enables FUSE-over-io_uring when the
# kernel allows it, installs pjdfstest/fsx from crates.io and creates the dummy users
# pjdfstest switches to. Safe to run repeatedly; does nothing that is already done.
set -euo pipefail

log() { printf 'setup: %s\n' "$*"; }

# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
as_root setup "it installs packages and users and sets a kernel parameter" "$@"

# --- Debian packages -------------------------------------------------------------
# command -> package. Only run apt-get when something is actually missing.
declare -A want=(
    [git]=git
    [sqlite3]=sqlite3
    [fio]=fio
    [getfattr]=attr
    [setfattr]=attr
    [getfacl]=acl
    [setfacl]=acl
    [flock]=util-linux
    [setpriv]=util-linux
    [fuser]=psmisc
    [mountpoint]=util-linux
    [python3]=python3
    [npm]=npm
    [node]=nodejs
    [pkg-config]=pkg-config
    [cc]=build-essential
    [timeout]=coreutils
    [chattr]=e2fsprogs
    [lsattr]=e2fsprogs
)
missing=()
for cmd in "${!want[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${want[$cmd]}")
done
# python3 -m venv needs ensurepip (Debian splits it into python3-venv).
if command -v python3 >/dev/null 2>&1; then
    tmpv=$(mktemp -d)
    if ! python3 -m venv "$tmpv/v" >/dev/null 2>&1; then
        missing+=(python3-venv)
    fi
    rm -rf "$tmpv"
fi
# ringfs-bench's store section runs SQLite writers in python3: its sqlite3 module
# lives in libpython3-stdlib (python3-minimal alone lacks it).
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import sqlite3' >/dev/null 2>&1; then
    missing+=(python3 libpython3-stdlib)
fi
# pjdfstest links libacl.
if ! dpkg -s libacl1-dev >/dev/null 2>&1; then
    missing+=(libacl1-dev)
fi
# ringfs-bench renders its figures to PNG with resvg, which needs a font for the text.
if [ ! -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; then
    missing+=(fonts-dejavu-core)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    # de-duplicate
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    log "all Debian packages present"
fi

# --- FUSE ------------------------------------------------------------------------
if [ ! -e /dev/fuse ]; then
    modprobe fuse 2>/dev/null || true
fi
[ -e /dev/fuse ] || { echo "setup: /dev/fuse missing" >&2; exit 1; }
p=/sys/module/fuse/parameters/enable_uring
if [ -e "$p" ]; then
    if [ "$(cat "$p")" != Y ]; then
        if ( echo Y >"$p" ) 2>/dev/null; then
            log "enabled FUSE-over-io_uring ($p=$(cat "$p"))"
        else
            log "could not enable $p (read-only); io_uring transport tests will fall back"
        fi
    else
        log "FUSE-over-io_uring already enabled"
    fi
else
    log "kernel has no $p; io_uring transport unavailable"
fi

# --- crates.io tools (pinned) ----------------------------------------------------
export PATH="$HOME/.cargo/bin:$PATH"
cargo_tool() { # name version
    local name=$1 ver=$2
    if command -v "$name" >/dev/null 2>&1 && \
       cargo install --list 2>/dev/null | grep -q "^$name v$ver:"; then
        log "$name $ver present"
    else
        log "cargo install $name $ver"
        cargo install --locked --version "$ver" "$name"
    fi
}
cargo_tool pjdfstest 0.2.2
cargo_tool fsx 0.3.2

# --- Garage (S3-compatible object store; the real server of the remote tests) -----
# Pinned, built from crates.io into /usr/local/bin (on every PATH, including sudo's
# secure_path), with only what the tests use: SQLite metadata and bundled C libraries
# (no LMDB, K2V or metrics). The build takes minutes on 2 cores: it runs only when
# no `garage` of this version is on PATH, in a throw-away target dir removed after.
garage_ver=2.5.0
if command -v garage >/dev/null 2>&1 && \
   garage --version 2>/dev/null | grep -qE "(^|[^0-9.])${garage_ver//./\\.}([^0-9]|$)"; then
    log "garage $garage_ver present ($(command -v garage))"
else
    gtarget=$(mktemp -d /var/tmp/garage-build.XXXXXX)
    gstart=$(date +%s)
    log "cargo install garage $garage_ver (features bundled-libs,sqlite) into /usr/local"
    if ! cargo install garage --version "$garage_ver" --locked --no-default-features \
            --features bundled-libs,sqlite --root /usr/local --target-dir "$gtarget"; then
        rm -rf "$gtarget"
        echo "setup: building garage $garage_ver failed (see above)" >&2
        exit 1
    fi
    rm -rf "$gtarget"
    log "garage $garage_ver built in $(( $(date +%s) - gstart )) s: $(/usr/local/bin/garage --version)"
    if [ "$(command -v garage)" != /usr/local/bin/garage ]; then
        log "WARNING: $(command -v garage) comes before /usr/local/bin on PATH; the tests take the first garage (or RINGFS_TEST_GARAGE)"
    fi
fi

# --- dummy users for pjdfstest ---------------------------------------------------
# pjdfstest switches to two unprivileged user/group pairs ([dummy_auth] in its TOML).
# ringfs/tests/pjdfstest.rs writes a config naming nobody/<nobody's group> and tests/tests.
getent passwd nobody >/dev/null || useradd -r -u 65534 -g 65534 -d /nonexistent -s /usr/sbin/nologin nobody
getent group tests >/dev/null || groupadd tests
getent passwd tests >/dev/null || useradd -M -g tests -d / -s /usr/sbin/nologin -c "Dummy user for pjdfstest" tests
log "pjdfstest users: nobody($(id -u nobody):$(id -g nobody)) tests($(id -u tests):$(id -g tests))"

# --- npm registry ----------------------------------------------------------------
if timeout 60 npm view is-number@7.0.0 version >/dev/null 2>&1; then
    log "npm registry reachable"
else
    log "WARNING: npm registry not reachable; the npm workload test will fail"
fi

log "done"
