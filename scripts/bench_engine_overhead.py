#!/usr/bin/env python3
"""What `--engine torch`'s measurement adds to a training step: `memscope bench --engine torch`
(the engine's loop under the recorder and, on the CPU, the counting allocator) against the same
loop without memscope (`scripts/torch_reference.py --impl transformers`: transformers' class,
SDPA, fused AdamW, the same model, shapes, seed, threads, warm-up and steps), each a fresh
process, interleaved round by round so the machine's drift hits both alike. A round's ratio is
the engine's median step over the plain loop's; prints each round, then the median ratio with
its min–max, and the CPU it ran on. See docs/torch-engine.md.

    python3 scripts/bench_engine_overhead.py [--model gpt2-small] [--rounds 5] [--steps 10]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2-small")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--memscope", default=os.environ.get(
        "MEMSCOPE_BIN", str(ROOT / "target" / "release" / "memscope")))
    a = ap.parse_args()
    shape = ["--model", a.model, "--batch", str(a.batch), "--seq", str(a.seq), "--warmup",
             str(a.warmup), "--steps", str(a.steps), "--threads", str(a.threads)]
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    print(f"# engine measurement overhead: {a.model} train {a.batch}×{a.seq}, {a.threads} "
          f"thread(s), {cpu}")
    ratios = []
    with tempfile.TemporaryDirectory() as d:
        eng, ref = Path(d) / "engine.json", Path(d) / "plain.json"
        for i in range(a.rounds):
            subprocess.run([a.memscope, "bench", "--engine", "torch", *shape, "--json", str(eng),
                            "-q"], check=True, capture_output=True)
            subprocess.run([sys.executable, str(ROOT / "scripts" / "torch_reference.py"),
                            "--impl", "transformers", "--optimizer", "fused", *shape, "--json",
                            str(ref), "-q"], check=True, capture_output=True)
            e = json.loads(eng.read_text())["timing"]["step"]["median_ms"]
            p = json.loads(ref.read_text())["timing"]["step"]["median_ms"]
            ratios.append(e / p)
            print(f"round {i + 1}: engine {e:.1f} ms, plain {p:.1f} ms, ×{e / p:.3f}")
    print(f"engine / plain: ×{statistics.median(ratios):.3f} "
          f"(rounds {min(ratios):.3f}–{max(ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
