# Row 9: pure read: the dd in prep, `cat big > /dev/null` timed.
prep() { dd64; }
body() { cat big > /dev/null; }
verify() { check_zero big; }
