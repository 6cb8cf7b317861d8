"""What the PyTorch recorder (python/, docs/pytorch.md) adds to a training step on CPU: a
10M-parameter transformer (3 encoder layers, d 512, vocabulary 1024; batch 8 × 128), AdamW.

    pip install ./python && python scripts/bench_recorder_overhead.py [--rounds 5] [--steps 10]

Three ways, each in its own process, interleaved round by round (the machine's drift hits all
three alike): `plain` (no memscope), `session` (the recorder in the loop; CPU figures are RSS)
and `counted` (the recorder under `python -m memscope run`: the counting allocator preloaded, as
recommended). Each process times `--steps` steps after 3 warm-up steps (wall clock around the
whole step, `ms.step()` included) and reports the median; a round's ratio is a way's median over
plain's. Prints the median ratio over rounds with its min–max. PyTorch runs on one thread
(`--threads`): on a shared 2-core machine OpenMP's spin-waiting makes multi-threaded step times
erratic whatever runs (docs/pytorch.md, Notes).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def worker(mode, steps, threads):
    import torch
    import torch.nn as nn

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    d, vocab, b, t = 512, 1024, 8, 128
    model = nn.Sequential(
        nn.Embedding(vocab, d),
        *[nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.0, batch_first=True) for _ in range(3)],
        nn.Linear(d, vocab))
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, vocab, (b, t + 1))
    x, y = ids[:, :-1], ids[:, 1:]
    ms = None
    if mode != "plain":
        import memscope

        d = tempfile.mkdtemp()
        ms = memscope.Session(model, opt, record=os.path.join(d, "r.json"), warmup=3).start()
    times = []
    for i in range(3 + steps):
        t0 = time.perf_counter()
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ms is not None:
            ms.step()
        if i >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    counted = False
    if ms is not None:
        import memscope

        counted = memscope.counting_active()
        ms.close()
    print(json.dumps({"mode": mode, "params": params, "median_ms": statistics.median(times),
                      "counted": counted}))


def run(mode, steps, threads):
    pre = ["-m", "memscope", "run"] if mode == "counted" else []
    p = subprocess.run([sys.executable] + pre + [os.path.abspath(__file__), "--worker", mode,
                        "--steps", str(steps), "--threads", str(threads)],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--worker")
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.steps, a.threads)
    modes = ["plain", "session", "counted"]
    medians = {m: [] for m in modes}
    for r in range(a.rounds):
        order = modes if r % 2 == 0 else modes[::-1]
        res = {m: run(m, a.steps, a.threads) for m in order}
        assert res["counted"]["counted"], "the counting allocator was not preloaded"
        for m in modes:
            medians[m].append(res[m]["median_ms"])
        print(f"round {r}: " + ", ".join(f"{m} {res[m]['median_ms']:.1f} ms" for m in modes),
              flush=True)
    print(f"model: {res['plain']['params']:,} parameters, {a.threads} thread(s), "
          f"{a.rounds} rounds × {a.steps} steps")
    for m in modes[1:]:
        ratios = [x / p for x, p in zip(medians[m], medians["plain"])]
        print(f"{m} / plain: median {statistics.median(ratios):.4f} "
              f"(min {min(ratios):.4f}, max {max(ratios):.4f}; "
              f"{100 * (statistics.median(ratios) - 1):+.2f}%)")


if __name__ == "__main__":
    main()
