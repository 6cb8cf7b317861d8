"""What a workload feeds the model and what it keeps: the token batches (seeded random ids or
windows of ``--data``, one data rank's share), and the KV cache's tensors."""

import itertools

from .. import _native
from . import protocol


def tokens(np, spec, vocab):
    """A function giving each call's (batch, T) int64 array of token ids: seeded random ids, or
    the --data file's batch k at the k-th call, read by memscope's own reader (``_native``:
    ``src/input/tokens.rs``), so both engines train on the same windows."""
    b, t = spec.batch, spec.seq
    rank, world = protocol.rank()
    plan = spec.torch.parallel if spec.torch else None
    if plan is not None and plan.tp > 1:
        # A tensor-parallel group's ranks work on one batch: the group is the data rank.
        rank, world = rank // plan.tp, world // plan.tp
    if plan is not None and plan.plan == "pp":
        # A pipeline's ranks work on one batch: the first stage's ids are the last's labels.
        rank, world = 0, 1
    # Every data rank its own batches, as a DistributedSampler gives them.
    rng = np.random.default_rng(spec.seed + rank)
    data = spec.data
    if not data:
        return lambda: rng.integers(0, vocab, size=(b, t), dtype=np.int64)
    # Generation reads prompts: windows of the prompt's length, as memscope's engine does.
    if spec.mode == "generate":
        t = spec.prompt_len
    try:
        file = _native.TokenFile(str(data.path), data.bin_dtype)
    except ValueError as e:
        raise protocol.Refused(str(e)) from None
    calls = itertools.count()

    def windows():
        try:
            flat = file.batch(next(calls) * world + rank, b, t, spec.seed, vocab)
        except ValueError as e:
            raise protocol.Refused(str(e)) from None
        return np.asarray(flat, dtype=np.int64).reshape(b, t + 1)[:, :t]
    return windows


def cache_tensors(cache, torch):
    """The key and value tensors a transformers cache holds: its layers' ``keys``/``values``
    (a DynamicCache), the older ``key_cache``/``value_cache`` lists, or legacy tuples."""
    if cache is None:
        return
    if isinstance(cache, torch.Tensor):
        yield cache
        return
    if isinstance(cache, (list, tuple)):
        for x in cache:
            yield from cache_tensors(x, torch)
        return
    for layer in getattr(cache, "layers", None) or ():
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                yield t
    for name in ("key_cache", "value_cache"):
        yield from cache_tensors(getattr(cache, name, None), torch)


def cache_of(out):
    """A model output's KV cache (`cache`, or `past_key_values` in older transformers)."""
    c = getattr(out, "cache", None)
    return c if c is not None else out.past_key_values
