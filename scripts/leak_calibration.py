#!/usr/bin/env python3
"""Runs `memscope analyze` (any build) over the leak calibration set and prints the verdicts per
family and the false-leak and missed-leak rates (docs/reliability.md, "Leak verdicts").

    CALIBRATION_DIR=/tmp/calib cargo test --release --lib write_calibration_set -- --ignored
    python3 scripts/leak_calibration.py target/release/memscope /tmp/calib

File names are `NNNN-family-rate.csv` (rate: the leak built in, bytes/step; 0 for none).
"""
import collections, json, os, subprocess, sys, tempfile

binary, folder = sys.argv[1], sys.argv[2]
MATTERS = 2 * 1073741824 * 0.005 / 1000  # the rate that matters at 2 GiB, bytes/step
table = collections.defaultdict(collections.Counter)
verdicts = []
out = os.path.join(tempfile.mkdtemp(), "v.json")
for name in sorted(os.listdir(folder)):
    if not name.endswith(".csv"):
        continue
    family, rate = name[5:-4].rsplit("-", 1)
    subprocess.run([binary, "analyze", os.path.join(folder, name), "--json", out],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    v = json.load(open(out))["verdict"]
    table[family][v] += 1
    verdicts.append((float(rate), v))
for family, counts in table.items():
    print(f"{family:50s} {dict(counts)}")
none = [v for r, v in verdicts if r == 0]
leaks = [(r, v) for r, v in verdicts if r > 0]
big = [v for r, v in leaks if r >= MATTERS]
frac = lambda k, n: f"{k}/{n} = {100 * k / max(n, 1):.1f}%"
print("false leak (leak on a no-leak series):", frac(none.count("leak"), len(none)))
print("no leak recognised (plateau on a no-leak series):", frac(none.count("plateau"), len(none)))
print("missed leaks that matter (plateau on a leak >= %.0f B/step):" % MATTERS, frac(big.count("plateau"), len(big)))
print("missed leaks, all rates (plateau on a leak):", frac(sum(v == "plateau" for _, v in leaks), len(leaks)))
