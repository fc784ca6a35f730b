# npm: `npm install express` from a warmed cache, then read every installed file back.
prep() { echo '{"name":"fsbench-express","version":"1.0.0","private":true}' > package.json; }
install() { npm install --prefer-offline --ignore-scripts --no-audit --no-fund express > /dev/null; }
readback() { find node_modules -type f -print0 | xargs -0 cat > /dev/null; }
TIMED="install readback"
verify() {
    [ -f node_modules/express/package.json ] || fail "express not installed"
    node -e 'require("express")' || fail "require(express)"
}
info() { echo "FSBENCH_INFO files=$(find node_modules -type f | wc -l) bytes=$(find node_modules -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')"; }
