"""The collectives a rank runs, counted where FSDP2 and the user's code call them: the
``torch.distributed`` functions (``all_gather_single``, ``reduce_scatter_single``,
``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_reduce``, ``broadcast``) wrapped
while a ``Collectives`` is on. Each call's size is the collective's whole tensor: the gathered
output of an all-gather, the unreduced input of a reduce-scatter, the tensor of an all-reduce
or broadcast (what the ring and tree formulas take as B). Under the trace's fake process group
the tensors are fake and the sizes the same. DDP reduces its buckets in C++, out of Python's
sight: ``ddp_buckets`` reads the sizes DDP's reducer used from its own logging data. DTensor's
redistributions under tensor parallelism call ``torch.distributed._functional_collectives``
(``all_reduce``, ``all_gather_tensor``, ``reduce_scatter_tensor``), wrapped the same way."""

import weakref

# function name -> (the kind reported, which argument holds the sized tensor: index, keyword)
WATCHED = {
    "all_gather_single": ("all_gather", 0, "output_tensor"),
    "all_gather_into_tensor": ("all_gather", 0, "output_tensor"),
    "reduce_scatter_single": ("reduce_scatter", 1, "input"),
    "reduce_scatter_tensor": ("reduce_scatter", 1, "input"),
    "all_reduce": ("all_reduce", 0, "tensor"),
    "broadcast": ("broadcast", 0, "tensor"),
}

# DTensor's redistributions (tensor parallelism) call the functional collectives: name -> (the
# kind, the index of the group argument, whether the whole tensor is the input times the
# group's size: an all-gather's output). The tensor is the first argument of each.
WATCHED_FUNCTIONAL = {
    "all_reduce": ("all_reduce", 2, False),
    "all_gather_tensor": ("all_gather", 2, True),
    "reduce_scatter_tensor": ("reduce_scatter", 3, False),
}


def _nbytes(t):
    t = getattr(t, "_local_tensor", t)
    return t.numel() * t.element_size()


def _group_size(dist, group):
    """Ranks in a collective's group as the callers give it: a process group (or None, the
    default one), a device mesh, or DTensor's (mesh, mesh dimension)."""
    if isinstance(group, tuple) and len(group) == 2:
        mesh, dim = group
        return mesh.size(dim)
    size = getattr(group, "size", None)
    if callable(size):
        return size()
    return dist.get_world_size(group)


class Collectives:
    """``with Collectives(dist) as c:`` counts calls and bytes by kind; ``c.take()`` gives the
    counts since the last take (``{kind: {"calls": n, "bytes": b, "group": ranks}}``, ranks the
    largest group a call of that kind ran over). Inside a step a call only adds to running
    totals per kind (made once); ``take()``, between steps, does the rest."""

    def __init__(self, dist, keep_buffers=False):
        self.dist = dist
        self.saved = []  # (module, name, the function it had)
        # With keep_buffers: weak references to the tensors the watched calls were given (an
        # all-gather's flat input and output, a reduce-scatter's unreduced input and its output),
        # which the trace counts while they live (``live_buffers``).
        self.kept = [] if keep_buffers else None
        # kind -> [calls, bytes, largest group] since the counter was made, and at the last take.
        self.totals = {kind: [0, 0, 0] for kind, _, _ in WATCHED.values()}
        self.taken = {kind: (0, 0) for kind in self.totals}

    def _wrap(self, name, fn):
        kind, index, keyword = WATCHED[name]
        total, dist, kept = self.totals[kind], self.dist, self.kept

        def counted(*args, **kwargs):
            t = kwargs.get(keyword, args[index] if len(args) > index else None)
            if t is not None:
                total[0] += 1
                total[1] += _nbytes(t)
                total[2] = max(total[2], _group_size(dist, kwargs.get("group")))
            if kept is not None:
                kept.extend(weakref.ref(a) for a in (*args, *kwargs.values())
                            if hasattr(a, "untyped_storage"))
            return fn(*args, **kwargs)
        return counted

    def _wrap_functional(self, name, fn):
        kind, at, gathered = WATCHED_FUNCTIONAL[name]
        total, dist = self.totals[kind], self.dist

        def counted(*args, **kwargs):
            group = kwargs.get("group", args[at] if len(args) > at else None)
            n = _group_size(dist, group)
            total[0] += 1
            total[1] += _nbytes(args[0] if args else kwargs["self"]) * (n if gathered else 1)
            total[2] = max(total[2], n)
            return fn(*args, **kwargs)
        return counted

    def __enter__(self):
        for name in WATCHED:
            fn = getattr(self.dist, name, None)
            if fn is not None:
                self.saved.append((self.dist, name, fn))
                setattr(self.dist, name, self._wrap(name, fn))
        import torch.distributed._functional_collectives as functional
        for name in WATCHED_FUNCTIONAL:
            fn = getattr(functional, name, None)
            if fn is not None:
                self.saved.append((functional, name, fn))
                setattr(functional, name, self._wrap_functional(name, fn))
        return self

    def __exit__(self, *exc):
        for module, name, fn in self.saved:
            setattr(module, name, fn)
        self.saved = []
        return False

    def live_buffers(self):
        """The tensors the watched calls were given that are still alive (with keep_buffers)."""
        if self.kept is None:
            return []
        alive = [(r, r()) for r in self.kept]
        self.kept[:] = [r for r, t in alive if t is not None]
        return [t for _, t in alive if t is not None]

    def take(self):
        out = {}
        for kind, (calls, nbytes, group) in self.totals.items():
            c0, b0 = self.taken[kind]
            if calls > c0:
                out[kind] = {"calls": calls - c0, "bytes": nbytes - b0, "group": group}
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
