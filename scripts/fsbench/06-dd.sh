# Row 6: dd if=/dev/zero of=big bs=1M count=64
body() { dd64; }
verify() { check_zero big; }
