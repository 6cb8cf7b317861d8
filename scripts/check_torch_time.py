#!/usr/bin/env python3
"""The torch estimate's predicted step time against the torch engine's measured one, per
workload and phase, on this machine: `memscope peaks --engine torch` (the roofs, cached), then
for each workload `memscope estimate --engine torch` (the prediction: traced ops at the roofs)
and `memscope bench --engine torch` (the measurement: medians), one after the other, nothing
else running. Prints one Markdown table. See docs/torch-engine.md.

    python3 scripts/check_torch_time.py [--device cpu|cuda] [--threads N] [--steps S]
        [--workloads gpt2-train,cs336-train,bert-train,gpt2-infer,tinyllama-generate]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = {
    "gpt2-train": ["--model", "gpt2-small", "--batch", "2", "--seq", "128"],
    "cs336-train": ["--model", "cs336-small", "--batch", "2", "--seq", "128"],
    "bert-train": ["--model", "bert-base", "--batch", "2", "--seq", "128"],
    "gpt2-infer": ["--model", "gpt2-small", "--mode", "infer", "--batch", "4", "--seq", "256"],
    "tinyllama-generate": ["--model", "tinyllama-1.1b", "--mode", "generate", "--batch", "1",
                           "--prompt-len", "32", "--new-tokens", "16"],
    # A step of seconds' work in all: the smoke run of this script (python/tests/test_scripts.py).
    "tiny-train": ["--model", "tiny-gpt2", "--batch", "2", "--seq", "64"],
    # A step large enough that a GPU's kernels, not the host's dispatch, set its time.
    "gpt2-train-large": ["--model", "gpt2-small", "--batch", "8", "--seq", "512"],
}
CPU_WORKLOADS = "gpt2-train,cs336-train,bert-train,gpt2-infer,tinyllama-generate"


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--workloads", default=CPU_WORKLOADS, help=f"of {', '.join(WORKLOADS)}")
    ap.add_argument("--memscope", default=os.environ.get(
        "MEMSCOPE_BIN", str(ROOT / "target" / "release" / "memscope")))
    a = ap.parse_args()
    ms = a.memscope
    common = ["--engine", "torch", "--device", a.device, "--threads", str(a.threads)]
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    print(f"# predicted vs measured step time, {a.device}, {a.threads} threads, {cpu}")
    print("| workload | phase | measured median ms | predicted ms | error |")
    print("|---|---|--:|--:|--:|")
    worst = 0.0
    for name in a.workloads.split(","):
        w = WORKLOADS[name]
        with tempfile.TemporaryDirectory() as d:
            est, rec = Path(d) / "est.json", Path(d) / "run.json"
            # The roofs measured afresh beside the run, with this workload's own product shapes
            # (rows = batch × sequence).
            shape = [x for i, x in enumerate(w) if w[i - 1] in ("--model", "--batch")
                     or x in ("--model", "--batch")]
            rows = w[w.index("--seq") + 1] if "--seq" in w else w[w.index("--prompt-len") + 1]
            run([ms, "peaks", *common, *shape, "--seq", rows, "--refresh", "-q"])
            run([ms, "estimate", *common, *w, "--json", str(est)])
            run([ms, "bench", *common, *w, "--warmup", "1", "--steps", str(a.steps),
                 "--json", str(rec), "-q"])
            e = next(iter(json.loads(est.read_text())["by_dtype"].values()))
            r = json.loads(rec.read_text())
        predicted = e.get("predicted_ms") or {}
        if not predicted:
            print(f"| {name} | no prediction (no roofs cached) | | | |")
            continue
        new_tokens = r["spec"].get("new_tokens") or 1
        for phase, t in r["timing"].items():
            if not isinstance(t, dict) or phase not in predicted:
                continue
            p = predicted[phase]
            if phase == "decode":  # measured per token, predicted for all new tokens
                p /= new_tokens
            m = t["median_ms"]
            err = (p - m) / m * 100
            if phase == "step":
                worst = max(worst, abs(err))
            print(f"| {name} | {phase}{' (per token)' if phase == 'decode' else ''} | "
                  f"{m:,.1f} | {p:,.1f} | {err:+.1f}% |")
    print(f"\nlargest whole-step error: {worst:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
