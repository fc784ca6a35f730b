# Row 3: the same 1000 creates, then one `rm f*`.
body() {
    for i in $(seq 1000); do echo $i > f$i; done
    rm f*
}
verify() { expect "entries left" "$(find . -mindepth 1 | wc -l)" 0; }
