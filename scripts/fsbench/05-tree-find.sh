# Row 5: the row-4 tree, then `find . -type f | wc -l`.
body() {
    for a in $(seq 10); do for b in $(seq 10); do
        mkdir -p $a/$b
        for c in $(seq 10); do touch $a/$b/$c; done
    done; done
    find . -type f | wc -l > ../.fsbench-find-count
}
verify() {
    expect "find count" "$(cat ../.fsbench-find-count)" 1000
    rm -f ../.fsbench-find-count
    check_tree
}
