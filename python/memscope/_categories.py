"""Bytes by category, from the tensors themselves: unique storages (deduplicated by
``untyped_storage().data_ptr()``) of the model's parameters, their ``.grad``, the optimizer's
state, and the tensors autograd saves for backward (seen by ``saved_tensors_hooks``). Only
storages on the recorded device count (AdamW's ``step`` counters stay on the CPU for a CUDA
model). Reading them allocates nothing on the device."""

import weakref


def _storage(t):
    # A DTensor (FSDP2's sharded parameters, their gradients and optimizer state): the rank's
    # own shard, its local tensor.
    t = getattr(t, "_local_tensor", t)
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def unique_bytes(tensors, device, exclude=()):
    """Σ nbytes over the unique storages of ``tensors`` on ``device``, and their data pointers."""
    seen = {}
    for t in tensors:
        if t is None or t.device != device:
            continue
        ptr, n = _storage(t)
        if ptr and ptr not in exclude:
            seen[ptr] = n
    return sum(seen.values()), seen


def fsdp_params(model):
    """FSDP2's parameters of ``model`` (its ``FSDPParam`` objects, PyTorch's own bookkeeping of
    each sharded parameter), or [] for a model FSDP2 does not shard."""
    out = []
    for m in model.modules():
        get = getattr(m, "_get_fsdp_state", None)
        if get is None:
            continue
        state = get()
        # PyTorch 2.11 keeps one group a module, later releases a list.
        groups = getattr(state, "_fsdp_param_groups", None)
        if groups is None:
            one = getattr(state, "_fsdp_param_group", None)
            groups = [one] if one is not None else []
        for g in groups:
            out.extend(g.fsdp_params)
    return out


def gathered_tensors(params):
    """The gathered (unsharded) parameters of FSDP2's ``params`` now: each one's all-gather
    output and its unsharded parameter (a view into it). FSDP2 frees them by resizing their
    storages to nothing when it reshards, so only the gathered ones have bytes."""
    for fp in params:
        yield from getattr(fp, "all_gather_outputs", None) or ()
        u = getattr(fp, "_unsharded_param", None)
        if u is not None:
            yield u


def optimizer_tensors(optimizer, torch):
    if optimizer is None:
        return
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                yield v


class SavedTensors:
    """Storages autograd saved for backward: a pack hook notes each (by storage, with the module
    that ran when it was saved) and holds only weak references, so nothing lives longer."""

    def __init__(self, device):
        self.device = device
        self.entries = {}  # data_ptr -> [nbytes, module, [weakref, ...]]
        self.exclude = {}  # parameter storages: counted as parameters

    def note(self, t, module):
        if t.device != self.device:
            return
        ptr, n = _storage(t)
        if not ptr or ptr in self.exclude:
            return
        e = self.entries.get(ptr)
        if e is not None:
            # A storage saved again (a constant input, every step): keep one reference per live
            # tensor object, so a long run's entry does not grow by one reference a step. A
            # tensor whose storage has left this address since (FSDP2 resizes a gathered
            # parameter's storage to nothing, and the allocator hands the address to the next
            # activation) is no longer this storage's: the entry is the new storage's.
            live = [r for r in e[2] if r() is not None and _storage(r())[0] == ptr]
            if live:
                if not any(r() is t for r in live):
                    live.append(weakref.ref(t))
                e[2] = live
                return
        self.entries[ptr] = [n, module, [weakref.ref(t)]]

    def alive(self, exclude=()):
        """(bytes of saved storages still alive, bytes by module), those in ``exclude`` (FSDP2's
        gathered parameters, a category of their own) left out; forgets the dead ones. A
        storage is read as it is now: FSDP2 resizes a gathered parameter's storage to nothing
        when it reshards (the tensor autograd saved lives on, its bytes do not)."""
        total, by_module, dead, seen = 0, {}, [], set()
        for ptr, (n, module, refs) in self.entries.items():
            alive = [x for x in (r() for r in refs) if x is not None]
            if not alive:
                dead.append(ptr)
                continue
            # The first of its tensors whose storage still has bytes.
            now, n = next((st for st in map(_storage, alive) if st[0]), (0, 0))
            if not now or now in exclude or now in seen:
                continue
            seen.add(now)
            total += n
            by_module[module] = by_module.get(module, 0) + n
        for ptr in dead:
            del self.entries[ptr]
        return total, by_module


def hook_over_ours(torch, ours, is_session):
    """PyTorch calls only the innermost saved_tensors_hooks: another one opened over the
    recorder's (``ours``, its pack hook) — torch.autograd.graph.save_on_cpu, say — hides the
    saved tensors and backward's start from it. The sentence the Record says then, else None
    (none open, the recorder's own, or another Session's: ``is_session`` of the hook's owner,
    which hands this model's saved tensors on)."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    if top is None:
        return None
    hooks = top(False)
    if hooks is None or hooks[0] == ours:
        return None
    pack = hooks[0]
    if is_session(getattr(pack, "__self__", None)):
        return None
    name = getattr(pack, "__qualname__", repr(pack)).replace(".<locals>", "")
    return (f"activations and the backward phase could not be seen: another saved_tensors_hooks "
            f"({name}) was open over the recorder's, and PyTorch calls only the innermost; "
            "activations read 0 and backward's time is counted in the phase before it. Open the "
            "Session inside it, or record one Session at a time")
