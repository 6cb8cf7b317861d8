"""Gradients a backward sums for one tensor: counted for real (memscope's preloaded allocator)
and traced under FakeTensorMode by the torch estimator (memscope._workers.trace). Prints one JSON line:
case -> [counted backward peak, traced backward peak], bytes over the live bytes before."""

import json
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from memscope import _native
from memscope._tracer import Tracer, trace_mode

N = 1024  # w: 4 MiB; each of its two gradients as large


def loss_of(case, w, x):
    # Backward runs the later node first: its gradient is the one the other is added to.
    if case == "view first":
        # F.linear's weight gradient is a transposed view of its product: summed out of place.
        return (w * 2).sum() + torch.nn.functional.linear(x, w).sum()
    # A product's gradient, fresh and alone on its storage: the other is added into it.
    return (w * 2).sum() + (x @ w).sum()


def counted(case):
    w = torch.randn(N, N, requires_grad=True)
    loss = loss_of(case, w, torch.randn(64, N))
    base = _native.counter_read()[0]
    _native.counter_reset_peak()
    loss.backward()
    return _native.counter_read()[1] - base


def traced(case):
    with FakeTensorMode():
        w = torch.randn(N, N, requires_grad=True)
        x = torch.randn(64, N)
        tr = Tracer(torch)
        with trace_mode(torch, tr):
            loss = loss_of(case, w, x)
            tr.set_phase("backward")
            start = tr.peak = tr.cur
            loss.backward()
    return tr.peak - start


counted("dense first")  # the first backward of a process sets things up
print(json.dumps({c: [counted(c), traced(c)] for c in ("view first", "dense first")}))
