"""Exact bytes on the tiny transformer: 8 steps, the 64 MiB backward temporary on from step 4;
gradient accumulation given as argv[1] (default 1). Writes exact.json and truth.json."""

import json
import sys

import torch

import memscope
from tiny import Tiny, _Temp, batch, loss_of

accum = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.manual_seed(0)
model = Tiny()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = batch()
with memscope.Session(model, opt, record="exact.json", warmup=2) as ms:
    for step in range(8):
        _Temp.enabled = step >= 4
        for _ in range(accum):
            loss = loss_of(model, x, y) / accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ms.step(loss)
params = list(model.parameters())
truth = {
    "param_bytes": sum(p.numel() * p.element_size() for p in params),
    "n_param_tensors": len(params),
    "counting": memscope.counting_active(),
    "temp_live": _Temp.seen,
    # What the session left out of its heap figures (the process before it started).
    "baseline": ms.baseline,
}
json.dump(truth, open("truth.json", "w"))
