#!/usr/bin/env python3
"""make-tree.py DIR N: N files of 100 bytes under DIR, in directories of 100
files (d000/e00/f00000 …), the tree the snapshot and mount measurements use."""
import os, sys

root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "d%03d" % (i // 1000), "e%02d" % (i // 100 % 10))
    if i % 100 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%05d" % i), "w") as f:
        f.write("x" * 99 + "\n")
