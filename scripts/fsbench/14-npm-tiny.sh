# Row 14: npm init + tiny install (is-number@7.0.0) from a warmed cache.
body() {
    npm init -y > /dev/null
    npm install --no-audit --no-fund --prefer-offline is-number@7.0.0 > /dev/null
}
verify() {
    expect "is-number version" "$(node -p 'require("./node_modules/is-number/package.json").version')" 7.0.0
    expect "isNumber(5)" "$(node -p 'require("is-number")(5)')" true
    expect "dependency" "$(node -p 'require("./package.json").dependencies["is-number"]')" "^7.0.0"
}
