"""CUDA check of the PyTorch recorder (python/, docs/pytorch.md): a short training loop on the GPU
under memscope's session, whose every per-phase peak must equal, to the byte,
torch.cuda.max_memory_allocated read by this script itself inside the same phase.

    pip install ./python && python scripts/gpu_check_recorder.py [--steps 6] [--accum 2]

`--device cpu` runs the same check on the CPU under memscope's counting allocator (launch it as
`python -m memscope run scripts/gpu_check_recorder.py --device cpu`): the reference is then the
counter's own peak read by the script (python/tests/test_gpu_check.py runs it so).

Each phase is marked by hand (`with ms.phase(...)`): the session restarts the allocator's peak
window when the phase starts (torch.cuda.reset_peak_memory_stats) and reads it when the phase
ends; the script reads torch.cuda.max_memory_allocated as the last thing inside the phase, after
synchronising, so nothing allocates between the two readings. A second run lets the session find
the phases itself (hooks) and checks that each step has the expected phases and that the
categories are exact (parameters, AdamW state, gradients). Prints PASS/FAIL per phase and exits
1 on any FAIL.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn as nn

import memscope


def model_and_batch(device):
    torch.manual_seed(0)
    d, vocab, t, b = (256, 1024, 128, 8) if device.type == "cuda" else (64, 256, 32, 4)
    model = nn.Sequential(
        nn.Embedding(vocab, d),
        nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True),
        nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True),
        nn.Linear(d, vocab),
    ).to(device)
    ids = torch.randint(0, vocab, (b, t + 1), device=device)
    return model, ids[:, :-1], ids[:, 1:]


def loss_fn(model, x, y):
    logits = model(x)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def explicit_run(device, steps, accum, out):
    ref = ("torch.cuda.max_memory_allocated" if device.type == "cuda"
           else "the counter's peak")
    model, x, y = model_and_batch(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    script = []  # (step, phase, max_memory_allocated read by this script)

    def read(step, phase):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
        else:
            peak = memscope._native.counter_read()[1]
        script.append((step, phase, peak))

    with memscope.Session(model, opt, record=out, warmup=1, auto_phases=False) as ms:
        for step in range(steps):
            for _ in range(accum):
                with ms.phase("forward"):
                    loss = loss_fn(model, x, y) / accum
                    read(step, "forward")
                with ms.phase("backward"):
                    loss.backward()
                    read(step, "backward")
            with ms.phase("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
                read(step, "optimizer")
            ms.step(loss)
    r = json.loads(Path(out).read_text())
    # On the CPU the session leaves what the process held at its start (beyond the model's
    # parameters, gradients and optimizer state) out of its figures: the script's raw counter
    # readings less that baseline (0 on CUDA).
    script = [(st, p, b - ms.baseline) for (st, p, b) in script]
    failures = 0
    for s in r["memory"]["series"]:
        marks = s["phases"]
        mine = [(p, b) for (st, p, b) in script if st == s["step"]]
        if len(marks) != len(mine):
            print(f"FAIL step {s['step']}: {len(marks)} marks, {len(mine)} script readings")
            failures += 1
            continue
        for m, (phase, want) in zip(marks, mine):
            ok = m["phase"] == phase and m["heap_peak_bytes"] == want
            failures += not ok
            print(f"{'PASS' if ok else 'FAIL'} step {s['step']} {phase:9s} recorder "
                  f"{m['heap_peak_bytes']:>12,} B  {ref} read by the script {want:>12,} B")
    return failures


def automatic_run(device, steps, accum, out):
    model, x, y = model_and_batch(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with memscope.Session(model, opt, record=out, warmup=1) as ms:
        for _ in range(steps):
            for _ in range(accum):
                (loss_fn(model, x, y) / accum).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            ms.step()
    r = json.loads(Path(out).read_text())
    params = list(model.parameters())
    pbytes = sum(p.numel() * p.element_size() for p in params)
    failures = 0

    def check(name, ok, detail):
        nonlocal failures
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")

    want = ["forward", "backward"] * accum + ["optimizer"]
    got = [[m["phase"] for m in s["phases"]] for s in r["memory"]["series"]]
    check("phases from hooks", all(g == want for g in got), f"{got[-1]}")
    cuda = device.type == "cuda"
    check("engine.memory", r["spec"]["engine"]["memory"] == ("cuda allocated" if cuda
                                                             else "malloc usable"),
          r["spec"]["engine"]["memory"])
    last = {m["phase"]: m["heap_live_by_category"] for m in r["memory"]["series"][-1]["phases"]}
    check("parameters", r["model"]["param_bytes"] == pbytes, f"{r['model']['param_bytes']:,} B")
    check("gradients after backward", last["backward"].get("gradients") == pbytes,
          f"{last['backward'].get('gradients'):,} B")
    # AdamW keeps its `step` counters (4 bytes each) on the CPU (capturable=False): on CUDA
    # only exp_avg, exp_avg_sq are on the device.
    want_opt = 2 * pbytes + (0 if cuda else 4 * len(params))
    check("AdamW state on the device", last["optimizer"].get("optimizer_state") == want_opt,
          f"{last['optimizer'].get('optimizer_state'):,} B (2 × {pbytes:,}"
          f"{'' if cuda else f' + 4 × {len(params)}'})")
    if cuda:
        check("reserved in the series", all(s.get("reserved_bytes", 0) >= s["heap_live_bytes"]
                                            for s in r["memory"]["series"]),
              "reserved ≥ allocated")
    check("timing" + (" from CUDA events" if cuda else ""), r["timing"]["step"]["n"] == steps - 1,
          f"step median {r['timing']['step']['median_ms']:.3f} ms")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    if a.device == "cuda":
        if not torch.cuda.is_available():
            print("FAIL: no CUDA device (torch.cuda.is_available() is False)")
            return 1
        device = torch.device("cuda", 0)
        print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    else:
        if not memscope.counting_active():
            print("FAIL: --device cpu needs the counting allocator: "
                  "python -m memscope run scripts/gpu_check_recorder.py --device cpu")
            return 1
        device = torch.device("cpu")
        print(f"CPU under the counting allocator, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as d:
        f = explicit_run(device, a.steps, a.accum, str(Path(d) / "explicit.json"))
        f += automatic_run(device, a.steps, a.accum, str(Path(d) / "auto.json"))
    print("ALL PASS" if f == 0 else f"{f} FAIL")
    return 1 if f else 0


if __name__ == "__main__":
    sys.exit(main())
