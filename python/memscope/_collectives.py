"""The collectives a rank runs, counted where FSDP2 and the user's code call them: the
``torch.distributed`` functions (``all_gather_single``, ``reduce_scatter_single``,
``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_reduce``, ``broadcast``) wrapped
while a ``Collectives`` is on. Each call's size is the collective's whole tensor: the gathered
output of an all-gather, the unreduced input of a reduce-scatter, the tensor of an all-reduce
or broadcast (what the ring and tree formulas take as B). Under the trace's fake process group
the tensors are fake and the sizes the same. DDP reduces its buckets in C++, out of Python's
sight: ``ddp_buckets`` reads the sizes DDP's reducer used from its own logging data."""

# function name -> (the kind reported, which argument holds the sized tensor: index, keyword)
WATCHED = {
    "all_gather_single": ("all_gather", 0, "output_tensor"),
    "all_gather_into_tensor": ("all_gather", 0, "output_tensor"),
    "reduce_scatter_single": ("reduce_scatter", 1, "input"),
    "reduce_scatter_tensor": ("reduce_scatter", 1, "input"),
    "all_reduce": ("all_reduce", 0, "tensor"),
    "broadcast": ("broadcast", 0, "tensor"),
}


def _nbytes(t):
    t = getattr(t, "_local_tensor", t)
    return t.numel() * t.element_size()


class Collectives:
    """``with Collectives(dist) as c:`` counts calls and bytes by kind; ``c.take()`` gives the
    counts since the last take (``{kind: {"calls": n, "bytes": b}}``). Inside a step a call
    only adds to two running totals per kind (made once); ``take()``, between steps, does the
    rest."""

    def __init__(self, dist):
        self.dist = dist
        self.saved = {}
        # kind -> [calls, bytes] since the counter was made, and at the last take.
        self.totals = {kind: [0, 0] for kind, _, _ in WATCHED.values()}
        self.taken = {kind: (0, 0) for kind in self.totals}

    def _wrap(self, name, fn):
        kind, index, keyword = WATCHED[name]
        total = self.totals[kind]

        def counted(*args, **kwargs):
            t = kwargs.get(keyword, args[index] if len(args) > index else None)
            if t is not None:
                total[0] += 1
                total[1] += _nbytes(t)
            return fn(*args, **kwargs)
        return counted

    def __enter__(self):
        for name in WATCHED:
            fn = getattr(self.dist, name, None)
            if fn is not None:
                self.saved[name] = fn
                setattr(self.dist, name, self._wrap(name, fn))
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(self.dist, name, fn)
        self.saved = {}
        return False

    def take(self):
        out = {}
        for kind, (calls, nbytes) in self.totals.items():
            c0, b0 = self.taken[kind]
            if calls > c0:
                out[kind] = {"calls": calls - c0, "bytes": nbytes - b0}
            self.taken[kind] = (calls, nbytes)
        return out


def ddp_buckets(ddp):
    """The bytes of the buckets DDP's reducer all-reduced in its last iteration: the rebuilt
    buckets once it has rebuilt them (from its second iteration), its first ones before."""
    data = ddp._get_ddp_logging_data()
    for key in ("rebuilt_bucket_sizes", "bucket_sizes"):
        text = data.get(key)
        if text:
            return [int(x) for x in str(text).split(",") if x.strip()]
    return []
