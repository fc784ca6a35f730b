# Row 12: git init -q, 100 files, git add -A, git commit -qm init (fixed identity and dates).
body() {
    git init -q
    for i in $(seq 100); do echo $i > f$i; done
    git add -A
    git commit -qm init
}
verify() {
    expect "tracked files" "$(git ls-files | wc -l)" 100
    expect "status" "$(git status --porcelain | wc -l)" 0
    expect "f57 in HEAD" "$(git cat-file -p HEAD:f57)" 57
    expect "commits" "$(git rev-list --count HEAD)" 1
    git fsck --no-progress >/dev/null 2>&1 || fail "git fsck: $(git fsck --no-progress 2>&1 | head -3)"
}
