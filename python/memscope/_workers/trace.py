"""The torch estimator's trace: a Spec's workload run through transformers under PyTorch's
``FakeTensorMode`` — every op dispatched as on the real device (the same SDPA kernel, the same
saved tensors, the logits' upcast), no memory allocated and nothing computed — with every
storage's allocation and free recorded in order. ``memscope estimate --engine torch`` reads the
sequence (``src/torch/estimate.rs``): live bytes by category at the peak, and on CUDA the
reserved bytes replayed through the caching allocator's rules. With ``spec.torch.parallel``
(``estimate --nproc N --parallel ddp|fsdp``) it runs as rank 0 of N under PyTorch's fake
process group: FSDP2's ``fully_shard`` on every block and the root, or DDP's gradient buckets
(``bucket_sizes``, held from the wrap).

Protocol: the request ``{"spec": …, "expected_params": N}`` on stdin; one JSON object on stdout:
``{"traced_on": d, "cuda_capability": [major, minor] or null, "params": n, "param_sizes": […], "buffer_sizes": […], "bucket_sizes": […], "collectives": {kind: {"calls", "bytes"}}, "events": […],
"peak": {…}, "ends": […], "steps": s, "ops": […]}`` (storages' bytes: parameters and buffers as
built, then the steps) where an event ``n ≥ 0`` allocates n bytes as the next block id and
``-(id+1)`` frees block ``id``; ``ops`` the dispatched ops of the last ``s`` steps (the one with
the optimizer's state, not the first that makes it) by signature:
``[phase, op, [[shape, dtype] read…], [[shape, dtype] written…], [bool args…], calls]``.
"""

import contextlib
import sys
import weakref

from .._categories import fsdp_params, gathered_tensors
from .._optimer import name_dtypes, signature
from . import parallel as plans
from .collectives import Collectives
from .engine import Engine
from .inputs import cache_tensors
from .protocol import answer_once

REPLAYED_MICRO_BATCHES = 3


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
        self.held = set()     # storages allocated before the trace (parameters, buffers)
        self.ends = []        # each phase run's end: its live bytes, by phase, gradients
        self.ended = True     # the open phase's end is noted (none is open before the first)
        self.ops = {}         # (phase, op, inputs, outputs, flags) -> calls: the last step's
        self.micro_ops = {}   # the same, of the last micro-batch's forward and backward
        self.stream = 0       # the stream allocations are made on: 0 the compute stream
        self.side = []        # [block id, stream] of each block made on another stream

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
        self.ends.append({"phase": self.phases[self.phase], "live": self.cur,
                          "by_phase": {self.phases[k]: v for k, v in self.by_phase.items()
                                       if v > 0},
                          **(self.on_peak() if self.on_peak else {})})

    def note(self, t, block=None):
        """A tensor an op returned: its storage's block is allocated when first seen (or is
        ``block``), and freed once no tensor on any of the block's storages is left. A DTensor
        (FSDP2's sharded parameters, gradients and optimizer state) is its rank's local tensor."""
        t = _local(t)
        st = t.untyped_storage()
        key = st._cdata
        if key in self.held:
            return  # a view of a parameter or buffer: no new bytes
        e = self.live.get(key)
        if e is None:
            if block is None:
                block = self._allocate(st.nbytes())
            block[3] += 1
            e = self.live[key] = [block, 0]
        e[1] += 1
        weakref.finalize(t, self._release, key)

    def _allocate(self, n):
        """n bytes allocated as the next block."""
        b = [self.next_id, n, self.phase, 0]
        if self.stream:
            self.side.append([self.next_id, self.stream])
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


def _local(t):
    """A DTensor's local tensor (this rank's shard); any other tensor as it is."""
    inner = getattr(t, "_local_tensor", None)
    return inner if inner is not None else t


@contextlib.contextmanager
def _side_streams(torch, device, tr):
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


def trace(request):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    spec = request.spec
    micro_batches = spec.grad_accum
    # Micro-batches after the second leave the trace exactly as they found it (gradients
    # accumulate in place), so at most three are traced, as memscope's own estimate replays
    # them: an estimate's cost does not grow with --grad-accum (its ops are scaled up to it).
    if spec.grad_accum > REPLAYED_MICRO_BATCHES:
        spec = spec.replace(grad_accum=REPLAYED_MICRO_BATCHES)
        request = request.replace(spec=spec)
    device = spec.torch.device
    traced_on = device
    if device.startswith("cuda") and not torch.cuda.is_available():
        # No GPU to dispatch as: trace with the CPU's kernels (the same modules, saved tensors
        # and SDPA log-sum-exp); memscope replays the sequence under CUDA's allocator rules.
        traced_on = "cpu"
        request = request.replace(spec=spec.replace(torch=spec.torch.replace(device="cpu")))
    parallel = spec.torch.parallel
    if parallel is not None:
        plans.fake_process_group(torch, parallel.world)
    # FSDP2 over tensor-parallel parameters reads its meshes' rank tensors (real tensors of a
    # few ints, parallel.py's `_real_mesh_tensors`) while it shards: the one real input the trace lets in.
    two_d = parallel is not None and parallel.plan == "fsdp+tp"
    fake = FakeTensorMode(allow_non_fake_inputs=two_d)
    # Fake parameters cannot be swapped in place by Module.to(): assign the converted ones.
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    eng = Engine(request, out=None, trace=True)
    if parallel is not None and parallel.plan != "ddp":
        eng.wrap = plans.sharding_wrap(torch, parallel, eng.device.type)
    with fake:
        eng.build()
    buckets = plans.planned_ddp_buckets(torch, eng.model) if parallel is not None and \
        parallel.plan == "ddp" else []
    tr = Tracer(torch)
    name_dtypes(torch)
    params = list(eng.model.parameters())
    tr.held = {_local(t).untyped_storage()._cdata for t in params + list(eng.model.buffers())}

    def sizes(tensors):
        """Bytes of each unique storage (by its C handle: fake storages have no address)."""
        seen, out = set(), []
        for t in tensors:
            st = _local(t).untyped_storage()
            if st._cdata not in seen:
                seen.add(st._cdata)
                out.append(st.nbytes())
        return out

    sharded = fsdp_params(eng.model)
    # The collectives of the last step (the one with the optimizer's state), by kind, and the
    # buffers they were given.
    import torch.distributed as dist

    counter = Collectives(dist, keep_buffers=True)

    def figures():
        # Gradients, the KV cache's keys and values, and FSDP2's gathered parameters: the
        # storages the recorder counts in a run (inputs.py's cache_tensors, session.py's
        # categories), so the two are counted alike. Then the collectives' buffers still alive
        # (FSDP2's flat all-gather buffers until their copy-out, a reduce-scatter's unreduced
        # input until the next one), storages of the other categories left out (a
        # reduce-scatter's output becomes the sharded gradients).
        grads = [p.grad for p in params if p.grad is not None]
        gathered = list(gathered_tensors(sharded))
        other = tr.held | {_local(t).untyped_storage()._cdata for t in grads + gathered}
        buffers = (t for t in counter.live_buffers()
                   if _local(t).untyped_storage()._cdata not in other)
        return {"gradients": sum(sizes(grads)),
                "kv_cache": sum(sizes(cache_tensors(eng.past, torch))),
                "gathered_parameters": sum(sizes(gathered)),
                "collective_buffers": sum(sizes(buffers))}
    tr.on_peak = figures
    # Made under the fake mode, as the model's tensors are: nothing of the token batch is
    # allocated, whatever --batch × --seq (a real one of 2^40 ids would not fit).
    with fake:
        ids = torch.randint(0, spec.config.vocab_size, (spec.batch, spec.seq),
                            device=eng.device)
    # FSDP2 frees a gathered parameter by resizing its storage to nothing, and gathers it again
    # into the same storage: each resize is an allocation or a free.
    resize = torch.UntypedStorage.resize_

    def resized(st, n):
        out = resize(st, n)
        tr.resized(st, n)
        return out
    torch.UntypedStorage.resize_ = resized
    try:
        with fake, trace_mode(torch, tr), counter, _side_streams(torch, traced_on, tr):
            eng.traced_steps(ids, tr.set_phase, tr.end_phase, on_step=counter.take)
            tr.end_phase()
    finally:
        torch.UntypedStorage.resize_ = resize
    collectives = counter.take() if parallel is not None else {}
    if buckets:
        # DDP all-reduces every bucket once a step (its reducer runs them in C++); from its
        # second iteration in the buckets it rebuilt, the same bytes.
        collectives["all_reduce"] = {"calls": plans.steady_ddp_buckets(torch, eng.model),
                                     "bytes": sum(buckets), "group": parallel.world}
    # What the model held before the first step, in the order it was built.
    cap = None
    if device.startswith("cuda") and torch.cuda.is_available():
        cap = list(torch.cuda.get_device_capability(torch.device(device)))
    return {"traced_on": traced_on, "cuda_capability": cap,
            "params": sum(p.numel() for p in params), "param_sizes": sizes(params),
            "buffer_sizes": sizes(eng.model.buffers()), "bucket_sizes": buckets,
            "collectives": collectives, "side_streams": tr.side,
            "events": tr.events, "peak": tr.at_peak or {}, "ends": tr.ends,
            "steps": 1,
            "ops": [[ph, op, [list(i) for i in ins], [list(o) for o in outs], list(fl), n]
                    for (ph, op, ins, outs, fl), n in
                    tr.step_ops(micro_batches, spec.grad_accum).items()]}


def main():
    return answer_once("the torch estimator's trace", trace, "request", "trace_answer")


if __name__ == "__main__":
    sys.exit(main())
