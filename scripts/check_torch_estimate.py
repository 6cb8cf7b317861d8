#!/usr/bin/env python3
"""The torch estimator against the torch engine's measurement, per model, mode and dtype:
`memscope bench --engine torch` (which runs the workload and prints `estimate --engine torch`'s
prediction beside it) for each, then one line each: measured allocated peak, estimated, the
error; on CUDA also the reserved peak measured (the largest reserved bytes after a step) against
the caching-allocator replay's. See docs/torch-engine.md.

    python3 scripts/check_torch_estimate.py [--device cpu|cuda] [--models a,b]
        [--modes train,infer,generate] [--dtypes f32,bf16] [--batch B --seq T]
        [--prompt-len P --new-tokens N]

Generation runs the batch with a prompt of P tokens and N new ones; encoders (bert) skip it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", default="gpt2-small,cs336-small,tiny-llama")
    ap.add_argument("--modes", default="train")
    ap.add_argument("--dtypes", default="f32")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--memscope", default=os.environ.get(
        "MEMSCOPE_BIN", str(ROOT / "target" / "release" / "memscope")))
    a = ap.parse_args()
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    print(f"# torch estimator vs measured, {a.device}, {cpu}")
    print("| workload | measured heap peak (CPU: counted malloc; CUDA: allocated) | estimated | "
          "error | measured reserved | estimated reserved | error |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    worst = 0.0
    runs = [(m, mode, dt) for m in a.models.split(",") for mode in a.modes.split(",")
            for dt in a.dtypes.split(",") if not (mode == "generate" and "bert" in m)]
    for model, mode, dtype in runs:
        shape = ["--batch", str(a.batch)] + (
            ["--prompt-len", str(a.prompt_len), "--new-tokens", str(a.new_tokens)]
            if mode == "generate" else ["--seq", str(a.seq)])
        name = (f"{model} {mode} {a.batch}, {a.prompt_len} + {a.new_tokens} {dtype}"
                if mode == "generate" else f"{model} {mode} {a.batch} × {a.seq} {dtype}")
        with tempfile.TemporaryDirectory() as d:
            rec = Path(d) / "run.json"
            cmd = [a.memscope, "bench", "--engine", "torch", "--device", a.device, "--model",
                   model, "--mode", mode, "--dtype", dtype, *shape, "--warmup", "1",
                   "--steps", str(a.steps), "--json", str(rec), "-q"]
            if a.threads:
                cmd += ["--threads", str(a.threads)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"| {name} | failed: {p.stderr.strip().splitlines()[-1:]} |||||")
                continue
            r = json.loads(rec.read_text())
        m = r["memory"]
        est = m.get("estimate") or {}
        measured, predicted = m["heap_peak_bytes"], est.get("peak_bytes")
        err = (predicted - measured) / measured * 100 if predicted else float("nan")
        worst = max(worst, abs(err))
        res = [s.get("reserved_bytes") for s in m["series"] if s.get("reserved_bytes")]
        rm, rp = (max(res) if res else None), est.get("reserved_peak_bytes")
        rerr = f"{(rp - rm) / rm * 100:+.2f}%" if rm and rp else "—"
        fmt = lambda b: f"{b / MIB:,.1f} MiB" if b else "—"
        print(f"| {name} | {fmt(measured)} | {fmt(predicted)} | {err:+.2f}% | {fmt(rm)} | "
              f"{fmt(rp)} | {rerr} |")
    print(f"\nlargest allocated-peak error: {worst:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
