#!/usr/bin/env python3
"""What fits on N × 80 GiB with FSDP2: memscope's traced estimate beside the formulas users
reach for, side by side, one process, no GPU.

For each model, with and without activation checkpointing, it runs

    memscope estimate --engine torch --model M --nproc N --parallel fsdp --device cuda
        --dtype bf16 --batch B --seq S [--checkpoint] --fits 80GiB --json …

(bf16 training is mixed precision by default: f32 master weights, gradients and AdamW state,
16 bytes a parameter, sharded over the N ranks) and prints, per rank:

- model states: memscope's parameters + gradients + optimizer state, against DeepSpeed's ZeRO-3
  formula without offload (`estimate_zero3_model_states_mem_needs`: 18 bytes a parameter over
  the GPUs, plus 4 bytes a parameter of the largest layer), which stops at model states;
- activations: memscope's (saved for backward, as the last forward ends) against Korthikanti et
  al.'s per-layer formula for 16-bit activations, s·b·h·(34 + 5·a·s/h) bytes a layer (the
  attention scores stored, as without a fused attention kernel), s·b·h·34 (the scores not stored:
  what SDPA's fused kernels and the paper's selective recomputation keep), and 2·s·b·h a layer
  under full recomputation (each layer's input); the formula leaves out the embeddings' and
  the logits' activations, and GPT-style layers are what it counts (a SwiGLU MLP saves more);
- memscope's allocated and reserved peaks and the device total (the reserved peak plus the CUDA
  context, NCCL's buffers and the kernels, outside the allocator), and the --fits verdict.

    python3 scripts/compare_formulas.py [--models cs336-2.7b,tinyllama-1.1b] [--nproc 8]
        [--batch 4] [--seq 0 (the model's context)] [--budget 80GiB]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

GIB = 2**30


def models(binary):
    out = subprocess.run([binary, "models", "--json"], capture_output=True, text=True,
                         check=True).stdout
    m = json.loads(out)
    return {x["name"]: x for x in (m if isinstance(m, list) else m["models"])}


def estimate(binary, model, nproc, batch, seq, budget, checkpoint):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "est.json")
        cmd = [binary, "estimate", "--engine", "torch", "--model", model, "--nproc", str(nproc),
               "--parallel", "fsdp", "--device", "cuda", "--dtype", "bf16", "--batch",
               str(batch), "--seq", str(seq), "--fits", budget, "--json", path]
        if checkpoint:
            cmd.append("--checkpoint")
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
        with open(path) as f:
            return json.load(f)["by_dtype"]["bf16"]


def zero3_model_states(params, largest_layer, gpus):
    """DeepSpeed's ZeRO-3 per-GPU bytes without offload (stage3.py)."""
    return 4 * largest_layer + int(18 * params / gpus)


def korthikanti(s, b, h, a, layers):
    """Bytes of activations a rank keeps: (scores stored, scores not stored, full recompute)."""
    return (layers * s * b * h * (34 + 5 * a * s / h), layers * s * b * h * 34,
            layers * 2 * s * b * h)


def gib(n):
    return f"{n / GIB:,.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="cs336-2.7b,tinyllama-1.1b")
    ap.add_argument("--nproc", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=0, help="0: each model's context length")
    ap.add_argument("--budget", default="80GiB")
    a = ap.parse_args()
    binary = os.environ.get("MEMSCOPE_BIN", "target/release/memscope")
    known = models(binary)
    print(f"Per rank of {a.nproc}, FSDP2 on every block and the root, bf16 mixed precision, "
          f"batch {a.batch} a rank, GiB; the budget {a.budget}.\n")
    print("| model | seq | checkpoint | memscope model states | ZeRO-3 formula | "
          "memscope activations | Korthikanti: scores stored / not / full recompute | "
          "memscope allocated peak | reserved peak | device total | fits |")
    print("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|---|")
    for name in a.models.split(","):
        m = known.get(name)
        if m is None:
            sys.exit(f"--models {name}: not a preset (`memscope models` lists them)")
        seq = a.seq or m["max_seq_len"]
        h, heads, layers = m["d_model"], m["n_heads"], m["n_layers"]
        # The largest module's own parameters: the embedding (or an untied LM head).
        largest = m["vocab_size"] * h
        zero3 = zero3_model_states(m["params"], largest, a.nproc)
        stored, selective, full = korthikanti(seq, a.batch, h, heads, layers)
        for checkpoint in (False, True):
            e = estimate(binary, name, a.nproc, a.batch, seq, a.budget, checkpoint)
            c = e["categories"]
            states = c["parameters"] + c["gradients"] + c["optimizer_state"]
            outside = sum(x["bytes"] for x in e.get("outside_allocator") or [])
            total = e["reserved_peak_bytes"] + outside
            budget_ok = "fits" if total <= parse_bytes(a.budget) else "does NOT fit"
            formula = gib(full) if checkpoint else f"{gib(stored)} / {gib(selective)}"
            print(f"| {name} | {seq} | {'yes' if checkpoint else 'no'} | {gib(states)} | "
                  f"{gib(zero3)} | {gib(c['activations'])} | {formula} | "
                  f"{gib(e['peak_bytes'])} ({e['peak_phase']}) | "
                  f"{gib(e['reserved_peak_bytes'])} | {gib(total)} | {budget_ok} |")


def parse_bytes(text):
    units = {"GiB": GIB, "MiB": 2**20, "TiB": 2**40}
    for u, f in units.items():
        if text.endswith(u):
            return float(text[:-len(u)]) * f
    sys.exit(f"--budget {text}: give it in MiB, GiB or TiB (80GiB)")


if __name__ == "__main__":
    main()
