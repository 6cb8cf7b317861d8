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
            # tensor object, so a long run's entry does not grow by one reference a step.
            live = [r for r in e[2] if r() is not None]
            if live:
                if not any(r() is t for r in live):
                    live.append(weakref.ref(t))
                e[2] = live
                return
        self.entries[ptr] = [n, module, [weakref.ref(t)]]

    def alive(self):
        """(bytes of saved storages still alive, bytes by module); forgets the dead ones."""
        total, by_module, dead = 0, {}, []
        for ptr, (n, module, refs) in self.entries.items():
            if any(r() is not None for r in refs):
                total += n
                by_module[module] = by_module.get(module, 0) + n
            else:
                dead.append(ptr)
        for ptr in dead:
            del self.entries[ptr]
        return total, by_module
