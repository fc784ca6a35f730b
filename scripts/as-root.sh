# Sourced by the scripts that need root (setup, test, bench, demo):
#   . "$(dirname "$0")/as-root.sh"; as_root NAME WHY "$@"
# As root it returns at once. Otherwise it re-executes the calling script
# through sudo, keeping PATH (sudo's secure_path would drop ~/.cargo/bin), the
# caller's rustup toolchains (RUSTUP_HOME, default ~/.rustup, read only) and the
# variables the scripts read (RINGFS, RINGFS_*, CARGO_*, FSBENCH_*, REPS, WARMUP, CI).
# Cargo's own home stays root's (~root/.cargo) unless CARGO_HOME is set, so that
# no root-owned file lands in the caller's ~/.cargo. Without sudo it says how to
# run the script instead and exits 1.
as_root() {
    local name=$1 why=$2
    shift 2
    [ "$(id -u)" -eq 0 ] && return 0
    local self
    self=$(readlink -f "$0")
    if ! command -v sudo >/dev/null 2>&1; then
        echo "$name: needs root ($why) and sudo is not installed: run it as root (su -c '$self')" >&2
        exit 1
    fi
    local keep=("PATH=$PATH")
    [ -n "${RUSTUP_HOME:-}" ] || [ ! -d "$HOME/.rustup" ] || keep+=("RUSTUP_HOME=$HOME/.rustup")
    local var
    while IFS= read -r var; do
        case $var in
            RINGFS | RINGFS_* | CARGO_* | RUSTUP_* | FSBENCH_* | REPS | WARMUP | CI) keep+=("$var=${!var}") ;;
        esac
    done < <(compgen -e)
    echo "$name: not root; re-running through sudo" >&2
    exec sudo -- env "${keep[@]}" bash "$self" "$@"
}
