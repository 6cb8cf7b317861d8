"""The recorder's own footprint: the same loop with and without a Session, under `python -m
memscope run`. Prints one JSON object: the counted heap's and RSS's growth over the measured
steps (after warm-up steps that let the allocator and PyTorch settle).

argv: KIND (`grad-forward`: a validation-style forward with autograd on and no backward;
`no-grad`: the same under torch.no_grad; `train`: forward, backward, optimizer), SESSION (0 or 1),
STEPS."""

import json
import sys

import torch
import torch.nn as nn

import memscope
from memscope import _native
from memscope._memory import rss_bytes

kind, with_session, steps = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256), nn.Tanh())
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(32, 256)


def one(ms):
    if kind == "no-grad":
        with torch.no_grad():
            model(x).sum()
    elif kind == "grad-forward":
        model(x).sum()  # autograd on, no backward: its graph is dropped with the output
    else:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ms is not None:
            ms.step(loss)


def measure(ms):
    for _ in range(20):
        one(ms)
    heap0, rss0 = _native.counter_read()[0], rss_bytes()
    for _ in range(steps):
        one(ms)
    return _native.counter_read()[0] - heap0, rss_bytes() - rss0


if with_session:
    with memscope.Session(model, opt, record="footprint.json", warmup=0) as ms:
        heap, rss = measure(ms)
else:
    heap, rss = measure(None)
print(json.dumps({"counted": _native.counter_active(), "heap_growth": heap, "rss_growth": rss}))
