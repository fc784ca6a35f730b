# Row 2: the same 1000 creates, then `stat f$i` for each (1000 stat processes).
body() {
    for i in $(seq 1000); do echo $i > f$i; done
    for i in $(seq 1000); do stat f$i > /dev/null; done
}
verify() { check_1000; }
