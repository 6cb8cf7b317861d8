"""The prediction-error table of `estimate --engine torch --nproc N --parallel PLAN`: each
workload predicted on one CPU process (under PyTorch's fake process group), then measured under
torchrun (`memscope bench --engine torch` with the same flags: gloo, every rank under memscope's
counting allocator),
the predicted per-rank peak set against the worst rank's measured one. docs/parallel.md holds a
run's table and how to reproduce it.

    MEMSCOPE_BIN=target/release/memscope python3 scripts/check_parallel.py \
        --models gpt2-small,cs336-small --worlds 2 --plans none,ddp,fsdp --batch 2 --seq 64
    MEMSCOPE_BIN=target/release/memscope python3 scripts/check_parallel.py \
        --models cs336-small --worlds 2,4 --plans tp,fsdp+tp:2 --batch 2 --seq 64

`none` is each rank training its own copy (the single-process estimate); `tp` is tensor
parallelism over every rank (`tp:N`), `fsdp+tp:T` FSDP2 over groups of T tensor-parallel ranks
(run where T divides the world size and is less than it). The measured peak is
the largest of the steps' phase peaks after two warm-up steps, counted heap bytes from just
before the model was built (bench's Record, each rank's); the predicted one the estimate's
allocated peak (tensor bytes). For FSDP2 rows (`fsdp`, and `fsdp+tp:T`: FSDP2 over the tensor-parallel parameters,
sharded the same way) PyTorch's own `FSDPMemTracker` (torch.distributed._tools, driven as
torchtitan's memory estimation drives it: FakeTensorMode, the fake process group, two steps, its
statistics reset after the first) is run on the same workload and its peak's error printed beside
memscope's. Exits 1 when a row of memscope's is off by more than --tolerance percent.
"""

import argparse
import json
import os
import subprocess
import types
import sys
import tempfile
from pathlib import Path



def predicted(binary, model, world, plan, batch, seq, out):
    cmd = [binary, "estimate", "--engine", "torch", "--model", model, "--batch", str(batch),
           "--seq", str(seq), "--json", str(out), "-q"]
    if plan != "none":
        cmd += ["--nproc", str(world), "--parallel", plan]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    e = json.loads(out.read_text())["by_dtype"]["f32"]
    return e["peak_bytes"], e["categories"]


def tracker(model, world, plan, batch, seq):
    """FSDPMemTracker's peak (its `Total`) for rank 0 of `world` FSDP2 ranks (`fsdp`, or FSDP2
    over tensor-parallel groups: `fsdp+tp:T`), in a subprocess."""
    out = subprocess.run([sys.executable, __file__, "--tracker", model, "--worlds", str(world),
                          "--plans", plan, "--batch", str(batch), "--seq", str(seq)],
                         check=True, capture_output=True, text=True)
    return int(out.stdout.split()[-1])


def tracker_worker(model, world, plan, batch, seq):
    import torch
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    from memscope import _contract, _native
    from memscope._adamw import make_adamw
    from memscope._workers import models as _hf
    from memscope._sharding import fake_process_group
    from memscope._workers.parallel import sharding_wrap
    text, _ = _native.model_config(model, None)
    cfg = _contract.read_type("ModelConfig", json.loads(text))
    fake_process_group(torch, world)
    name, _, tp = plan.partition(":")
    job = types.SimpleNamespace(plan=name, world=world, tp=int(tp or 1))
    shard = sharding_wrap(torch, job, "cpu")
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    # FSDP2 over DTensor parameters reads its meshes' rank tensors, real ints (as the trace).
    with FakeTensorMode(allow_non_fake_inputs=name == "fsdp+tp"):
        m = _hf.build(torch, transformers, cfg, "sdpa")
        shard(m)
        opt, _ = make_adamw(torch, m.parameters(), 1e-4, torch.float32)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq))
        fmt = FSDPMemTracker(m, opt)
        fmt.track_inputs((ids,))
        with fmt:
            for i in range(2):
                m(input_ids=ids, labels=ids).loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if i == 0:
                    fmt.reset_mod_stats()
        peak = fmt.get_tracker_snapshot("peak")
    print(sum(v.get("Total", 0) for v in peak.values()))


def measured(binary, model, world, plan, batch, seq, steps, out):
    """Every rank's peak (counted heap bytes over the measured steps): {rank: bytes}, from
    `memscope bench --engine torch` with the same flags (every rank under torchrun, gloo, each
    under the counting allocator; the warm-up's two steps left out). `none` is one process: the
    ranks train their own copies, each the same."""
    cmd = [binary, "bench", "--engine", "torch", "--model", model, "--batch", str(batch),
           "--seq", str(seq), "--warmup", "2", "--steps", str(max(steps - 2, 1)),
           "--json", str(out), "-q"]
    if plan != "none":
        cmd += ["--nproc", str(world), "--parallel", plan]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    rec = json.loads(out.read_text())
    if plan == "none":
        return {r: rec["memory"]["heap_peak_bytes"] for r in range(world)}
    return {r["rank"]: r["peak_bytes"] for r in rec["ranks"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2-small,cs336-small")
    ap.add_argument("--worlds", default="2")
    ap.add_argument("--plans", default="none,ddp,fsdp")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--tolerance", type=float, default=2.0)
    ap.add_argument("--tracker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tracker:
        return tracker_worker(args.tracker, int(args.worlds), args.plans, args.batch, args.seq)
    binary = os.environ.get("MEMSCOPE_BIN", "target/release/memscope")
    mib = 2.0 ** 20
    print("| model | ranks | plan | predicted peak | measured peak (worst rank) | error | "
          "FSDPMemTracker's peak (error) | ranks' measured peaks |")
    print("|---|--:|---|--:|--:|--:|--:|---|")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for model in args.models.split(","):
            for world in map(int, args.worlds.split(",")):
                for plan in args.plans.split(","):
                    plan = f"tp:{world}" if plan == "tp" else plan
                    tp = int(plan.partition(":")[2] or 1)
                    if world % tp or (plan.startswith("fsdp+tp") and tp == world):
                        continue  # a plan this world size does not take
                    p, _ = predicted(binary, model, world, plan, args.batch, args.seq,
                                     tmp / "est.json")
                    m = measured(binary, model, world, plan, args.batch, args.seq, args.steps,
                                 tmp / "run.json")
                    worst = max(m.values())
                    err = (p - worst) / worst * 100
                    bad += abs(err) > args.tolerance
                    ranks = " / ".join(f"{m[r] / mib:,.1f}" for r in sorted(m))
                    anchor = "—"
                    if plan.startswith("fsdp"):
                        t = tracker(model, world, plan, args.batch, args.seq)
                        anchor = f"{t / mib:,.1f} MiB ({(t - worst) / worst * 100:+.2f}%)"
                    print(f"| {model} | {world} | {plan} | {p / mib:,.1f} MiB | "
                          f"{worst / mib:,.1f} MiB | {err:+.2f}% | {anchor} | {ranks} MiB |",
                          flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
