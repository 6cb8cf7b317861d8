"""The trace under PyTorch's ``FakeTensorMode``: every op dispatched as on the real device (the
same kernels' shapes, the same saved tensors), no memory allocated and nothing computed, with every
storage's allocation and free recorded in order, by the phase that made it. What the torch engine's
estimator (``_workers/trace.py``) and a user's own workload (``predict.py``) trace through;
``src/torch/estimate.rs`` replays the sequence (live bytes by category at the peak; on CUDA the
reserved bytes through the caching allocator's rules).

``traced(...)`` runs a workload's steps under the trace and returns the answer's common fields:
``torch`` (PyTorch's version), ``params``, ``param_sizes``, ``buffer_sizes``, ``side_streams``, ``events``, ``peak``, ``ends``,
``steps`` and ``ops`` (the last step's dispatched ops by signature:
``[phase, op, [[shape, dtype] read…], [[shape, dtype] written…], [bool args…], calls]``), where an
event ``n ≥ 0`` allocates n bytes as the next block id and ``-(id+1)`` frees block ``id``.
"""

import contextlib
import weakref

from ._categories import fsdp_params, gathered_tensors
from ._optimer import name_dtypes, signature


class Tracer:
    """Allocations and frees of storages, by the phase that allocated them."""

    def __init__(self, torch):
        self.torch = torch
        # storage key -> [its block, live tensors on it]; a block is [id, bytes, phase, storages
        # on it]: one storage's, or, after a gradient sum made in place, two storages'.
        self.live = {}
        self.events = []      # bytes: an allocation (the next block id); -(id+1): a free
        # Phase names in order of first use; what runs before the first phase (a prompt cut
        # from the batch) is `setup`'s.
        self.phases = ["setup"]
        self.phase = 0
        self.cur = 0
        self.by_phase = {}    # phase index -> live bytes it allocated
        self.peak = 0
        self.at_peak = None   # snapshot at the peak
        self.next_id = 0
        self.on_peak = None   # callable -> dict of extra figures at a new peak
        self.on_backward_end = None  # callable, as a backward phase ends
        self.held = set()     # storages allocated before the trace (parameters, buffers)
        self.ends = []        # each phase run's end: its live bytes, by phase, gradients
        self.ended = True     # the open phase's end is noted (none is open before the first)
        self.ops = {}         # (phase, op, inputs, outputs, flags) -> calls: the last step's
        self.micro_ops = {}   # the same, of the last micro-batch's forward and backward
        self.stream = 0       # the stream allocations are made on: 0 the compute stream
        self.side = []        # [block id, stream] of each block made on another stream
        # FSDP2's CPU offload of a CUDA job (``offload``: None, "device" or "emulated", as
        # trace.py's ``_offload`` says): [block id, pinned] of each block in host memory, and
        # [block id, [bytes of each host copy]] of each device block copied to the host at once.
        self.offload = None
        self.host = []
        self.copied = []

    def set_phase(self, name):
        if not self.ended:
            self.end_phase()
        if name == "forward" and self.phases[self.phase] == "optimizer":
            self.ops.clear()  # a new step: the ops counted are the last step's
        if name == "forward":
            self.micro_ops = {}  # a new micro-batch
        self.ended = False
        if name not in self.phases:
            self.phases.append(name)
        self.phase = self.phases.index(name)

    def end_phase(self):
        """Notes the live bytes as the open phase ends (the Record's retained figures): when its
        block exits, as the recorder marks a phase's end, before what runs after it (a
        generation's last `del` of its cache) frees anything."""
        if self.ended:
            return
        self.ended = True
        if self.phases[self.phase] == "backward" and self.on_backward_end is not None:
            self.on_backward_end()
        self.ends.append({"phase": self.phases[self.phase], "live": self.cur,
                          "by_phase": {self.phases[k]: v for k, v in self.by_phase.items()
                                       if v > 0},
                          **(self.on_peak() if self.on_peak else {})})

    def note(self, t, block=None):
        """A tensor an op returned: its storage's block is allocated when first seen (or is
        ``block``), and freed once no tensor on any of the block's storages is left. A DTensor
        (FSDP2's sharded parameters, gradients and optimizer state) is its rank's local tensor."""
        t = local(t)
        st = t.untyped_storage()
        key = st._cdata
        if key in self.held:
            return  # a view of a parameter or buffer: no new bytes
        e = self.live.get(key)
        if e is None:
            if block is None:
                block = self._allocate(st.nbytes(), on_host=self._on_host(t))
            block[3] += 1
            e = self.live[key] = [block, 0]
        e[1] += 1
        weakref.finalize(t, self._release, key)

    def _on_host(self, t):
        """Whether ``t``'s new storage is in host memory under FSDP2's CPU offload: on a GPU, a
        CPU tensor; traced on the CPU, what the optimizer makes (it steps the host's shards)."""
        if self.offload == "device":
            return t.device.type == "cpu"
        return self.offload == "emulated" and self.phases[self.phase] == "optimizer"

    def copied_to_host(self, tensors):
        """Under an emulated offload (a CUDA job traced on the CPU), ``tensors`` (FSDP2's sharded
        gradients, views of its reduce-scatter's output) are what the device copies to the host
        as it makes them, each to its own host tensor: their blocks noted once, with each copy's
        bytes."""
        if self.offload != "emulated":
            return
        marked = {b for b, _ in self.copied}
        by_block = {}
        for t in tensors:
            e = self.live.get(t.untyped_storage()._cdata)
            if e is not None and e[0][0] not in marked:
                by_block.setdefault(e[0][0], []).append(t.numel() * t.element_size())
        self.copied.extend([b, sizes] for b, sizes in by_block.items())

    def _allocate(self, n, on_host=False):
        """n bytes allocated as the next block (``on_host``: in host memory, under offload)."""
        b = [self.next_id, n, self.phase, 0]
        if self.stream:
            self.side.append([self.next_id, self.stream])
        if on_host:
            # A gradient's copy (made in backward) is pinned; the optimizer's state is not.
            self.host.append([self.next_id, self.phases[self.phase] == "backward"])
        self.next_id += 1
        self.events.append(n)
        self.cur += n
        self.by_phase[self.phase] = self.by_phase.get(self.phase, 0) + n
        if self.cur > self.peak:
            self.peak = self.cur
            self.at_peak = {"phase": self.phases[self.phase], "live": self.cur,
                            "by_phase": {self.phases[k]: v for k, v in self.by_phase.items()
                                         if v > 0},
                            **(self.on_peak() if self.on_peak else {})}
        return b

    def sum_in_place(self, out, old):
        """``old + var`` in backward, as autograd's engine sums two gradients meant for one
        input (``InputBuffer::accumulate``): on the device it adds ``var`` into ``old`` in
        place when ``old`` is dense and alone on its storage, but never into a fake tensor (a
        tensor subclass), so the trace sees a new storage. Here that storage shares ``old``'s
        block: no third buffer, as on the device. True when the sum was in place."""
        e = self.live.get(old.untyped_storage()._cdata)
        if e is None or e[1] != 1 or e[0][3] != 1 or not _dense(old):
            return False
        self.note(out, block=e[0])
        return True

    def count_op(self, func, args, out):
        """One dispatched op by its signature, for the step time memscope predicts."""
        phase = self.phases[self.phase]
        key = (phase,) + signature(func, args, out)
        self.ops[key] = self.ops.get(key, 0) + 1
        if phase in ("forward", "backward"):
            self.micro_ops[key] = self.micro_ops.get(key, 0) + 1

    def step_ops(self, micro_batches, traced):
        """The last step's ops for ``micro_batches`` micro-batches when ``traced`` of them ran:
        each one past the traced ones dispatches what the last traced one did (its gradients
        summed into those already there), so the FLOPs and the predicted time scale with
        --grad-accum while the trace does not."""
        ops = dict(self.ops)
        for key, n in self.micro_ops.items():
            ops[key] = ops.get(key, 0) + (micro_batches - traced) * n
        return ops

    def in_backward(self):
        return self.phases[self.phase] == "backward"

    def _release(self, key):
        e = self.live.get(key)
        if e is None:
            return
        e[1] -= 1
        if e[1] > 0:
            return
        del self.live[key]
        b = e[0]
        b[3] -= 1
        if b[3] == 0:
            self._free(b)

    def _free(self, b):
        if b[1] is None:
            return  # resized to nothing already (``resized``)
        self.cur -= b[1]
        self.by_phase[b[2]] -= b[1]
        self.events.append(-(b[0] + 1))
        b[1] = None

    def resized(self, storage, n):
        """``storage.resize_(n)`` on a storage the steps made (FSDP2 frees a gathered
        parameter's bytes by resizing its storage to 0 and gathers it again into the same
        storage): to 0 frees its block; from 0 allocates a new one in the running phase."""
        e = self.live.get(storage._cdata)
        if e is None or e[0][3] != 1:
            return
        b = e[0]
        if n == 0:
            self._free(b)
        elif b[1] is None:
            nb = self._allocate(n)
            nb[3] = 1
            e[0] = nb


def local(t):
    """A DTensor's local tensor (this rank's shard); any other tensor as it is."""
    inner = getattr(t, "_local_tensor", None)
    return inner if inner is not None else t


@contextlib.contextmanager
def side_streams(torch, device, tr):
    """Notes the stream each allocation is made on, as CUDA's caching allocator keeps each
    stream's freed blocks for that stream alone: FSDP2 makes its gradient shards on its
    reduce-scatter stream, its all-gather buffers on its copy-in stream (``with
    device_handle.stream(s)``; on the CPU the same calls with streams that do nothing)."""
    mod = getattr(torch, torch.device(device).type)
    base, enter, ids = mod.current_stream(), mod.stream, {}

    @contextlib.contextmanager
    def on(s):
        prev = tr.stream
        tr.stream = 0 if s is None or s == base else ids.setdefault(id(s), len(ids) + 1)
        try:
            with enter(s):
                yield
        finally:
            tr.stream = prev
    mod.stream = on
    try:
        yield
    finally:
        mod.stream = enter


def sizes(tensors):
    """Bytes of each unique storage (by its C handle: fake storages have no address)."""
    seen, out = set(), []
    for t in tensors:
        st = local(t).untyped_storage()
        if st._cdata not in seen:
            seen.add(st._cdata)
            out.append(st.nbytes())
    return out


def traced(torch, fake, model, run, traced_on, *, counter=None, cache=None, micro_batches=1,
           traced_micro=1, offload=None):
    """Runs ``run(tracer)`` — a workload's steps on ``model`` (built under ``fake``), each phase
    opened with ``tracer.set_phase(name)`` and closed with ``tracer.end_phase()`` — under the
    trace, on ``traced_on``'s kernels. ``counter``: the collectives' counter (a data-parallel
    job's), entered for the run; ``cache()``: the KV cache's tensors while a generation runs.
    The ops are scaled from ``traced_micro`` traced micro-batches to ``micro_batches``;
    ``offload``: FSDP2's CPU offload of a CUDA job (``Tracer.offload``). Returns the answer's
    common fields (the module's docstring), and under offload ``params_on_host``,
    ``host_blocks`` and ``copied_to_host``."""
    tr = Tracer(torch)
    tr.offload = offload
    name_dtypes(torch)
    params = list(model.parameters())
    tr.held = {local(t).untyped_storage()._cdata for t in params + list(model.buffers())}
    sharded = fsdp_params(model)

    def figures():
        # Gradients, the KV cache's keys and values, and FSDP2's gathered parameters: the
        # storages the recorder counts in a run (inputs.py's cache_tensors, session.py's
        # categories), so the two are counted alike. Then the collectives' buffers still alive
        # (FSDP2's flat all-gather buffers until their copy-out, a reduce-scatter's unreduced
        # input until the next one), storages of the other categories left out (a
        # reduce-scatter's output becomes the sharded gradients).
        grads = [p.grad for p in params if p.grad is not None]
        gathered = list(gathered_tensors(sharded))
        other = tr.held | {local(t).untyped_storage()._cdata for t in grads + gathered}
        buffers = (t for t in (counter.live_buffers() if counter is not None else ())
                   if local(t).untyped_storage()._cdata not in other)
        return {"gradients": sum(sizes(grads)),
                "kv_cache": sum(sizes(cache())) if cache is not None else 0,
                "gathered_parameters": sum(sizes(gathered)),
                "collective_buffers": sum(sizes(buffers))}
    tr.on_peak = figures
    tr.on_backward_end = lambda: tr.copied_to_host(
        [local(p.grad) for p in params if p.grad is not None])
    # FSDP2 frees a gathered parameter by resizing its storage to nothing, and gathers it again
    # into the same storage: each resize is an allocation or a free.
    resize = torch.UntypedStorage.resize_

    def resized(st, n):
        out = resize(st, n)
        tr.resized(st, n)
        return out
    torch.UntypedStorage.resize_ = resized
    try:
        with fake, trace_mode(torch, tr), counter or contextlib.nullcontext(), \
                side_streams(torch, traced_on, tr):
            run(tr)
            tr.end_phase()
    finally:
        torch.UntypedStorage.resize_ = resize
    return {"torch": torch.__version__,
            "params": sum(p.numel() for p in params), "param_sizes": sizes(params),
            "buffer_sizes": sizes(model.buffers()), "side_streams": tr.side,
            **({"params_on_host": True, "host_blocks": tr.host, "copied_to_host": tr.copied}
               if offload else {}),
            "events": tr.events, "peak": tr.at_peak or {}, "ends": tr.ends, "steps": 1,
            "ops": [[ph, op, [list(i) for i in ins], [list(o) for o in outs], list(fl), n]
                    for (ph, op, ins, outs, fl), n in
                    tr.step_ops(micro_batches, traced_micro).items()]}


def trace_mode(torch, tracer):
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map_only

    add = torch.ops.aten.add.Tensor

    class Trace(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.namespace == "aten":  # not prim's metadata queries, not the profiler's
                tracer.count_op(func, args, out)
            # Under grad mode (a checkpointed block's recomputation) the engine sums out of
            # place, and a model's own adds are never in place.
            if not (func is add and tracer.in_backward() and not torch.is_grad_enabled()
                    and _like(out, args)
                    and tracer.sum_in_place(out, args[0])):
                tree_map_only(torch.Tensor, tracer.note, out)
            return out
    return Trace()


def _like(out, args):
    """``a + b`` of two tensors of the sum's shape and dtype (a gradient sum)."""
    import torch
    return (len(args) == 2 and all(isinstance(a, torch.Tensor) and a.shape == out.shape
                                   and a.dtype == out.dtype for a in args))


def _dense(t):
    """Its elements fill its storage without overlap, in some order of dimensions."""
    from torch._prims_common import is_non_overlapping_and_dense_or_false
    return is_non_overlapping_and_dense_or_false(t)


