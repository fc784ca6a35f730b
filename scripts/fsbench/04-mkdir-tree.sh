# Row 4: mkdir tree: for a and b in 1..10 `mkdir -p a/b`, then `touch a/b/c` for c in 1..10
# (100 mkdir + 1000 touch processes).
body() {
    for a in $(seq 10); do for b in $(seq 10); do
        mkdir -p $a/$b
        for c in $(seq 10); do touch $a/$b/$c; done
    done; done
}
verify() { check_tree; }
