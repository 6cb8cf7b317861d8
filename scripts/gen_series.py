#!/usr/bin/env python3
"""A seeded synthetic memory log for `memscope analyze` benchmarks (docs/analyze.md).

One process: RSS rises from 2,000 MB by 1,500 MB with an exponential warm-up (time constant 100
steps; within 1 MB of its level by step ~720, within the 8 MiB plateau margin by step ~500), then
stays level with Gaussian noise (sigma 2 MB). The first N lines are the same for every N, so the
1e3-, 1e5- and 1e6-line files are the same process observed for longer.

    python3 scripts/gen_series.py 1000000 > /tmp/series-1e6.csv
"""
import math
import random
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
rng = random.Random(14)
out = sys.stdout
out.write("step,rss_mb\n")
for s in range(n):
    v = 2000.0 + 1500.0 * (1.0 - math.exp(-s / 100.0)) + rng.gauss(0.0, 2.0)
    out.write(f"{s},{v:.2f}\n")
