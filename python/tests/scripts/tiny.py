"""A tiny transformer whose truth is known, shared by the test scripts: token embedding, two
encoder layers, a head; `Probe` saves a tensor of a known size through a custom autograd
Function; `BackwardTemp` allocates a 64 MiB temporary inside its backward and frees it there."""

import torch
import torch.nn as nn

PROBE_ELEMS = 3 * 2**20 + 12        # 12,582,960 bytes in f32
TEMP_ELEMS = 16 * 2**20             # 64 MiB in f32


class _Save(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        ctx.save_for_backward(torch.ones(PROBE_ELEMS))
        return h.clone()

    @staticmethod
    def backward(ctx, g):
        (k,) = ctx.saved_tensors
        return g * k[0]


class _Temp(torch.autograd.Function):
    enabled = False
    # With the counting allocator: bytes live just before and just after the temporary exists.
    seen = []

    @staticmethod
    def forward(ctx, h):
        return h.clone()

    @staticmethod
    def backward(ctx, g):
        if _Temp.enabled:
            from memscope import _native
            before = _native.counter_read()[0]
            tmp = torch.ones(TEMP_ELEMS)
            _Temp.seen.append((before, _native.counter_read()[0]))
            s = tmp[0].item()
            del tmp
            return g * s
        return g.clone()


class Probe(nn.Module):
    def forward(self, h):
        return _Save.apply(h)


class BackwardTemp(nn.Module):
    def forward(self, h):
        return _Temp.apply(h)


class Tiny(nn.Module):
    def __init__(self, vocab=512, d=64, layers=2, heads=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
            for _ in range(layers))
        self.probe = Probe()
        self.temp = BackwardTemp()
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        h = self.emb(ids)
        for layer in self.layers:
            h = layer(h)
        h = self.temp(self.probe(h))
        return self.head(h)


def batch(vocab=512, b=4, t=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (b, t + 1), generator=g)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def loss_of(model, x, y):
    logits = model(x)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
