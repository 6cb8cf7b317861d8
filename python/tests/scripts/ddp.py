"""DDP on CPU (gloo) under torchrun: each rank trains the same MLP on its own batch, recorded by
memscope; one Record per rank (ddp.rank0.json, ddp.rank1.json)."""

import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import memscope

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 128)))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(rank)
x = torch.randn(32, 128, generator=g)
backward_ms = []  # loss.backward() as the loop itself times it, to set beside the Record's
with memscope.Session(model, opt, record="ddp.json", warmup=1) as ms:
    for _ in range(6):
        loss = model(x).square().mean()
        t0 = time.perf_counter()
        loss.backward()
        backward_ms.append((time.perf_counter() - t0) * 1e3)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ms.step(loss)
# Tear down in order: every rank done, DDP's reducer (and its gloo work) gone, then the group
# (gloo threads still holding work at interpreter exit abort the process: torch issue 190489).
dist.barrier()
del model, opt
dist.destroy_process_group()
with open(f"backward{rank}.json", "w") as f:
    json.dump(backward_ms, f)
with open(f"worker{rank}.txt", "w") as f:
    f.write(f"{memscope.counting_active()} {os.environ.get('LD_PRELOAD', '')!r}")
