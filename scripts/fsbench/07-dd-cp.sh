# Row 7: the dd, then `cp big big2`.
body() { dd64; cp big big2; }
verify() { check_zero big; check_zero big2; }
