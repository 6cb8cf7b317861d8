"""A small MLP for STEPS steps in one of three shapes (argv[1]):
- leak: a list keeps a metric of every step with its graph, never backpropagated (a forward in
  an `eval` phase marked by hand, whose 1 MiB of saved activations stay alive);
- plateau: a buffer grows by 1 MiB a step for the first 40 steps, then holds;
- endless: runs until killed (the SIGKILL test), printing each step number.
Writes series.json and series.steps.jsonl."""

import sys

import torch
import torch.nn as nn

import memscope

kind = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 120
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(256, 256)
kept, buffer = [], []
with memscope.Session(model, opt, record="series.json", warmup=2) as ms:
    step = 0
    while kind == "endless" or step < steps:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        if kind == "leak":
            with ms.phase("eval"):
                kept.append(model(x).sum())
        if kind == "plateau" and step < 40:
            buffer.append(torch.ones(2**18))
        ms.step()
        if kind == "endless":
            print(step, flush=True)
        step += 1
    verdict = ms.leak_verdict()
print(verdict["verdict"], verdict["warmup_end_step"])
