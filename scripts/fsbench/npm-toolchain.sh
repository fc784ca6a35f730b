# npm: a front-end toolchain from a warmed cache, then read every installed file back.
PKGS="typescript@5 vite@7 webpack@5 eslint@9 react@19 react-dom@19 @types/node@22"
prep() { echo '{"name":"fsbench-toolchain","version":"1.0.0","private":true}' > package.json; }
install() { npm install --prefer-offline --ignore-scripts --no-audit --no-fund $PKGS > /dev/null; }
readback() { find node_modules -type f -print0 | xargs -0 cat > /dev/null; }
TIMED="install readback"
verify() {
    for p in typescript vite webpack eslint react react-dom @types/node; do
        [ -f "node_modules/$p/package.json" ] || fail "$p not installed"
    done
}
info() { echo "FSBENCH_INFO files=$(find node_modules -type f | wc -l) bytes=$(find node_modules -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')"; }
