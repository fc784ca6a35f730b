# Row 11: overwrite: the dd in prep, the same dd with conv=notrunc timed.
prep() { dd64; }
body() { dd64 conv=notrunc; }
verify() { check_zero big; }
