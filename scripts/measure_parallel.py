"""Measured per-rank memory of a data-parallel training step (DDP or FSDP2) on CUDA GPUs under
torchrun, with no memscope code in the loop: the independent truth `estimate --engine torch
--device cuda --parallel` is checked against (docs/parallel.md). On the CPU, `memscope bench
--engine torch --nproc N --parallel PLAN` measures every rank under the counting allocator, and
scripts/check_parallel.py sets it against the prediction.

    python3 scripts/measure_parallel.py --plans none,ddp,fsdp \
        --models gpt2-small,cs336-small --batch 4 --seq 256 --steps 4 --out DIR

launches, per model and plan, `torchrun --nproc_per_node NPROC` on this script in its worker role
(one fresh process group per run, so the CUDA context and NCCL's buffers are each run's own) and
writes DIR/MODEL-PLAN.rankR.json: for every step and phase the caching allocator's peaks
(allocated and reserved, reset at the phase's start) and the bytes held between steps, plus the
device memory outside PyTorch's allocator (the device's used bytes from cudaMemGetInfo less
PyTorch's reserved bytes) read after CUDA's set-up, after the process group's first collective,
and at the end. The models are memscope's presets (`memscope models --json`, the binary at
MEMSCOPE_BIN), built as transformers' own classes (memscope._workers.models), fused AdamW where
it runs.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def worker(args):
    import torch
    import torch.distributed as dist
    import transformers

    from memscope._adamw import make_adamw
    from memscope._workers import models as _hf

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = {"rank": rank, "world": world, "plan": args.plan, "model": args.model,
           "device": "cuda", "torch": torch.__version__,
           "transformers": transformers.__version__, "steps": []}

    def outside():
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        return total - free - torch.cuda.memory_reserved()

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.zeros(1, device="cuda")
    out["outside_after_cuda_init"] = outside()
    out["gpu"] = torch.cuda.get_device_name()
    dist.init_process_group("nccl")
    probe = torch.ones(1, device="cuda")
    dist.all_reduce(probe)
    del probe
    out["outside_after_first_collective"] = outside()
    device = torch.device("cuda", torch.cuda.current_device())
    from memscope import _contract
    cfg = json.loads(args.config)
    torch.manual_seed(0)
    with torch.device(device):
        model = _hf.build(torch, transformers, _contract.read_type("ModelConfig", cfg), "sdpa")
    model.train()
    if args.plan == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[device.index])
    elif args.plan != "none":  # fsdp, tp:T, fsdp+tp:T: the wrap memscope's ranks put on
        from types import SimpleNamespace

        from memscope._workers.parallel import sharding_wrap
        name, _, tp = args.plan.partition(":")
        plan = SimpleNamespace(plan=name, world=world, tp=int(tp or 1))
        sharding_wrap(torch, plan, "cuda")(model)
    params = list(model.parameters())
    try:
        opt, impl = make_adamw(torch, params, 1e-4, torch.float32)
    except Exception as e:  # noqa: BLE001 - the implementation is stated in the output
        opt, impl = torch.optim.AdamW(params, lr=1e-4, foreach=True), f"foreach ({e})"
    out["optimizer"] = impl
    out["parameter_bytes_local"] = sum(
        (p.to_local() if hasattr(p, "to_local") else p).numel() * p.element_size() for p in params)
    # Every data rank its own batch; a tensor-parallel group's ranks share one.
    tp = int(args.plan.partition(":")[2] or 1)
    g = torch.Generator().manual_seed(rank // tp)
    ids = torch.randint(0, cfg["vocab_size"], (args.batch, args.seq), generator=g)
    ids = ids.to(device)

    def held():
        return torch.cuda.memory_allocated()

    def peaks():
        torch.cuda.synchronize()
        return {"allocated": torch.cuda.max_memory_allocated(),
                "reserved": torch.cuda.max_memory_reserved()}

    def reset():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    for step in range(args.steps):
        t0 = time.perf_counter()
        row = {"step": step, "allocated_before": held()}
        reset()
        loss = model(input_ids=ids, labels=ids).loss
        row["forward"] = peaks()
        reset()
        loss.backward()
        row["backward"] = peaks()
        reset()
        opt.step()
        opt.zero_grad(set_to_none=True)
        row["optimizer"] = peaks()
        row["allocated_after"] = held()
        row["reserved_after"] = torch.cuda.memory_reserved()
        row["seconds"] = time.perf_counter() - t0
        out["steps"].append(row)
    out["outside_at_end"] = outside()
    Path(args.out, f"{args.model}-{args.plan}.rank{rank}.json").write_text(
        json.dumps(out, indent=1))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans", default="none,ddp,fsdp")
    ap.add_argument("--models", default="gpt2-small,cs336-small")
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--out", default="parallel-measured")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--plan", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    binary = os.environ.get("MEMSCOPE_BIN", "target/release/memscope")
    presets = {r["name"]: r["config"] for r in json.loads(subprocess.run(
        [binary, "models", "--json"], check=True, capture_output=True, text=True).stdout)}
    failed = 0
    for model in args.models.split(","):
        for plan in args.plans.split(","):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={args.nproc}", __file__, "--worker", "--plan", plan,
                   "--model", model, "--config", json.dumps(presets[model]),
                   "--batch", str(args.batch), "--seq", str(args.seq),
                   "--steps", str(args.steps), "--out", args.out]
            t0 = time.perf_counter()
            try:
                rc = subprocess.run(cmd, timeout=args.timeout).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            print(f"{model} {plan}: exit {rc} in {time.perf_counter() - t0:.1f} s", flush=True)
            failed += rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
