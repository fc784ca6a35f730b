# Row 1: create 1000 files (builtin echo, no process per file).
body() { for i in $(seq 1000); do echo $i > f$i; done; }
verify() { check_1000; }
