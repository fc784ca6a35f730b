# Row 13: git clone --depth 1 of a local bare repository of about 1 MB over file://
# (made by setup.sh: $FSBENCH_GIT_REPO, with $FSBENCH_GIT_REPO.sha256 the content hash).
body() { git clone -q --depth 1 "file://$FSBENCH_GIT_REPO" repo; }
verify() {
    [ -n "$FSBENCH_GIT_REPO" ] || fail "FSBENCH_GIT_REPO is not set"
    expect "content hash" "$(cd repo && git ls-files -z | sort -z | xargs -0 cat | sha256sum)" "$(cat "$FSBENCH_GIT_REPO.sha256")"
    expect "status" "$(cd repo && git status --porcelain | wc -l)" 0
}
