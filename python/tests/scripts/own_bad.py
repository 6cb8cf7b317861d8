"""Workloads that cannot be run, each for one reason memscope must name (test_own_model.py)."""

import torch

import memscope

def raises(batch=2):
    raise RuntimeError("no data here")
def nothing(batch=2):
    return None
def module_only(batch=2):
    return torch.nn.Linear(4, 4)
def two_devices(batch=2):
    m = torch.nn.Linear(4, 4)
    return memscope.Workload(model=m, inputs=lambda: torch.randn(batch, 4),
                             loss=lambda m, x: m(x.to("meta")).sum())
class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.a(x) if x.sum() > 0 else self.b(x)
def data_dependent(batch=2):
    return memscope.Workload(model=Branchy(), inputs=lambda: torch.randn(batch, 4),
                             loss=lambda m, x: m(x).sum())
def nonzero(batch=2):
    return memscope.Workload(model=torch.nn.Linear(4, 4), inputs=lambda: torch.randn(batch, 4),
                             loss=lambda m, x: m(x[x > 0].view(-1, 4)).sum())
def not_scalar(batch=2):
    return memscope.Workload(model=torch.nn.Linear(4, 4), inputs=lambda: torch.randn(batch, 4))
