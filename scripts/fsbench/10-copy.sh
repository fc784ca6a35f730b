# Row 10: pure copy: the dd in prep, `cp big big2` timed.
prep() { dd64; }
body() { cp big big2; }
verify() { check_zero big; check_zero big2; }
