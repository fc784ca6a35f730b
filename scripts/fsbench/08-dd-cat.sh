# Row 8: the dd, then `cat big > /dev/null`.
body() { dd64; cat big > /dev/null; }
verify() { check_zero big; }
