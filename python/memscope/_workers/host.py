"""The host's cost of a model's step, per op, as ``peaks --engine torch --model M`` measures it:
transformers' own model for ``M`` with its layers, heads, modules and ops kept and every width cut
to a few elements, trained for a few steps on the device at batch 1 × 8 tokens. What such a step
takes is the host's work — the model's Python between the ops, module calls, PyTorch's dispatch,
autograd's nodes and, on CUDA, the kernel launches — with almost nothing for the kernels
themselves; divided by the ops each phase dispatched (a dispatch mode counts them on one step),
it is the fixed cost the predicted step charges each op of that phase (``src/analysis/torch_time.rs``)
in place of the bare op's.
"""

import time

from .._adamw import make_adamw
from . import models

BATCH, SEQ, WARMUP, STEPS = 1, 8, 3, 20
VOCAB, HEAD_DIM, FF = 128, 8, 16

# Width fields of transformers' configs, set to the smallest that keeps the structure.
WIDTHS = ("hidden_size", "n_embd", "dim", "d_model")
FFS = ("intermediate_size", "n_inner", "hidden_dim", "ffn_dim", "moe_intermediate_size",
       "shared_expert_intermediate_size")


def smallest(hf):
    """``hf`` (a transformers config) with every width cut to a few elements: its layer count,
    heads, key-value heads and experts kept."""
    heads = next((getattr(hf, n) for n in ("num_attention_heads", "n_head", "n_heads")
                  if isinstance(getattr(hf, n, None), int)), 1)
    for name in WIDTHS:
        if isinstance(getattr(hf, name, None), int):
            setattr(hf, name, HEAD_DIM * heads)
    for name in FFS:
        if isinstance(getattr(hf, name, None), int):
            setattr(hf, name, FF)
    if isinstance(getattr(hf, "head_dim", None), int):
        hf.head_dim = HEAD_DIM
    hf.vocab_size = VOCAB
    return hf


def _counter(torch):
    """A dispatch mode counting the ops dispatched by the phase running (its ``phase``)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.phase = None
            self.ops = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[self.phase] = self.ops.get(self.phase, 0) + 1
            return func(*args, **(kwargs or {}))
    return Count()


def host_costs(torch, transformers, device, cfg):
    """``{"model", "phases": {phase: {"ops", "secs": […]}}}`` for memscope's ``cfg``: a
    training step's forward, backward and optimizer, and a forward under ``no_grad``."""
    hf, cls = models.hf_config(transformers, cfg, "sdpa")
    torch.manual_seed(0)
    model = cls(smallest(hf)).to(device)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), device=device)  # (B, T) token ids
    opt, _ = make_adamw(torch, model.parameters(), 1e-4, torch.float32)
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def step(mark):
        mark("forward")
        loss = model(input_ids=ids, labels=ids).loss
        mark("backward")
        loss.backward()
        mark("optimizer")
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark("forward_no_grad")
        with torch.no_grad():
            model(input_ids=ids)
        mark(None)

    count = _counter(torch)
    for _ in range(WARMUP):
        step(lambda p: None)
    with count:
        step(lambda p: setattr(count, "phase", p))
    secs = {p: [] for p in count.ops if p}
    for _ in range(STEPS):
        last = [None, 0.0]

        def mark(phase):
            sync()
            now = time.perf_counter()
            if last[0]:
                secs[last[0]].append(now - last[1])
            last[:] = [phase, now]
        step(mark)
    return {"model": cfg.name, "phases": {p: {"ops": count.ops[p], "secs": secs[p]}
                                          for p in secs}}
