"""``memscope.estimate``: your own workload (``workload.py``) traced under PyTorch's
``FakeTensorMode`` — every op dispatched as on the device, nothing allocated or computed — and its
allocations replayed by memscope's torch estimator (the same replay as ``memscope estimate
--engine torch``: live bytes by category at the peak, on CUDA the caching allocator's reserved
bytes), with its FLOPs and, where ``memscope peaks --engine torch`` measured the device's roofs,
its predicted step time.

    est = memscope.estimate(workload, batch=8, seq=512)          # or "train.py:workload"
    print(est)                        # categories, peak, FLOPs, time
    est.fits("24GiB")                 # the device's figure against a budget
"""

import contextlib
import json
import os

from . import _contract, _native
from ._collectives import Collectives
from ._sharding import (PlanError, fake_process_group, fully_shard_blocks,
                        leave_fake_process_group, planned_ddp_buckets, steady_ddp_buckets)
from ._tracer import traced
from .workload import Step, WorkloadError, check_device, load, make, optimizer_of

# What each figure measures, as every memscope report labels it.
MEASURES = {"cpu": "allocated (heap bytes of tensor storages)",
            "cuda": "allocated (the caching allocator's, 512 B rounding)"}


class Estimate:
    """A workload's predicted memory and time. ``peak_bytes``: the allocated peak (storages'
    bytes); ``reserved_peak_bytes``: CUDA's reserved peak (what the device must hold), None on
    the CPU; ``categories``: bytes by category at the peak (parameters, gradients,
    optimizer_state, activations, runtime_buffers, inputs: the batch, temporaries); ``flops``:
    FLOPs of one step by phase and ``total``; ``predicted_ms``: ms by phase and ``step`` (empty
    without measured
    roofs, ``no_time`` says why); ``by_kind``: the predicted time by op kind (``kind``, ``ms``,
    ``bound``, ``flops``), an op memscope has no formula for under ``uncosted (no formula)``;
    ``params``: exact parameter count."""

    def __init__(self, name, mode, device, values, answer, products, no_time, kinds):
        self.name, self.mode, self.device, self.values = name, mode, device, values
        e = json.loads(answer)
        self.raw = e
        self.params = e["params"]
        self.categories = e["categories"]
        self.peak_bytes = e["peak_bytes"]
        self.peak_phase = e["peak_phase"]
        self.reserved_peak_bytes = e.get("reserved_peak_bytes")
        self.flops = e.get("flops", {})
        self.product_flops = products
        self.predicted_ms = e.get("predicted_ms", {})
        self.no_time = no_time
        self.by_kind = [{"kind": k, "ms": ms, "bound": b, "flops": f} for k, ms, b, f in kinds]

    @property
    def device_bytes(self):
        """The figure a budget is judged against: the reserved peak on CUDA, else the peak."""
        return self.reserved_peak_bytes if self.reserved_peak_bytes is not None \
            else self.peak_bytes

    def fits(self, budget):
        """Whether the device figure fits ``budget`` (bytes, or a size such as ``"24GiB"``)."""
        if isinstance(budget, str):
            budget = _native.parse_bytes("fits", budget)
        return self.device_bytes <= budget

    def to_dict(self):
        """The estimate as memscope's Record holds one beside measured figures."""
        return {"categories": self.categories, "peak_bytes": self.peak_bytes,
                "peak_phase": self.peak_phase,
                **({"reserved_peak_bytes": self.reserved_peak_bytes}
                   if self.reserved_peak_bytes is not None else {}),
                **({"predicted_ms": self.predicted_ms} if self.predicted_ms else {})}

    def __str__(self):
        kind = "cuda" if self.device.startswith("cuda") else "cpu"
        given = "".join(f"{k} {v}, " for k, v in self.values.items() if k != "device")
        lines = [f"{self.name} ({given}{self.mode}, {self.device}): {self.params:,} "
                 "parameters, traced under fake tensors",
                 f"  bytes by category at the peak ({MEASURES[kind]}):"]
        for k, v in sorted(self.categories.items(), key=lambda kv: -kv[1]):
            if v:
                lines.append(f"    {k:<20} {_size(v):>16}")
        lines.append(f"  allocated peak       {_size(self.peak_bytes):>16} ({self.peak_phase})")
        if self.reserved_peak_bytes is not None:
            lines.append(f"  reserved peak        {_size(self.reserved_peak_bytes):>16} (the "
                         "caching allocator's segments; the CUDA context is beside it)")
        for kind, c in sorted(self.raw.get("collectives", {}).items()):
            lines.append(f"  {kind:<20} {_size(c['bytes']):>16} a step in {c['calls']} calls "
                         f"(rank 0 of {c.get('group') or self.values.get('nproc')})")
        flops = self.flops.get("total")
        if flops:
            lines.append(f"  FLOPs per step       {_flops(flops):>16} "
                         f"({_flops(self.product_flops)} in matmuls and attention)")
        if self.predicted_ms:
            parts = ", ".join(f"{k} {v:,.2f} ms" for k, v in self.predicted_ms.items()
                              if k != "step")
            lines.append(f"  predicted step       {self.predicted_ms.get('step', 0):>13,.2f} ms"
                         f" ({parts}; from the roofs `memscope peaks --engine torch` measured)")
            for k in sorted(self.by_kind, key=lambda k: -k["ms"]):
                lines.append(f"    {k['kind']:<22} {k['ms']:>11,.2f} ms  {k['bound']}-bound")
        elif self.no_time:
            lines.append(f"  no predicted step time: {self.no_time}")
        return "\n".join(lines)


PLANS = ("ddp", "fsdp")


def estimate(workload, *, batch=None, seq=None, mode="train", device="cpu", threads=None,
             memory_limit=None, nproc=None, parallel=None, **values):
    """``workload``: a function returning a ``memscope.Workload``, or ``"FILE.py:FUNCTION"``;
    ``batch``, ``seq`` and any other keyword ``values`` are passed to it where it names them.
    ``mode``: ``train`` (two optimizer steps: the second has the optimizer's state) or
    ``infer`` (one forward without gradients). ``device``: ``cpu`` or ``cuda``; a CUDA estimate
    is traced on the CPU's kernels when this machine has no GPU. ``threads``: whose roofs the
    predicted time reads (default: all cores). ``memory_limit``: CUDA's cap for the replay
    (bytes or ``"80GiB"``). ``nproc`` with ``parallel`` (``ddp`` or ``fsdp``): rank 0 of a
    data-parallel job of ``nproc`` ranks, each with its own batch, traced under PyTorch's fake
    process group — DDP's gradient buckets, or FSDP2's ``fully_shard`` on the model's repeated
    blocks (the children of its longest ``ModuleList``) and its root — with the collectives one
    step runs. Returns an ``Estimate``."""
    import torch

    if mode not in ("train", "infer"):
        raise WorkloadError(f"mode={mode!r}: a workload of yours runs `train` or `infer`")
    check_device(device)
    check_plan(nproc, parallel, mode)
    fn, name = load(workload) if isinstance(workload, str) else (
        workload, getattr(workload, "__qualname__", repr(workload)))
    given = {k: v for k, v in (("batch", batch), ("seq", seq)) if v is not None}
    given.update(values)
    traced_on = device
    if device.startswith("cuda") and not torch.cuda.is_available():
        traced_on = "cpu"  # the same modules and saved tensors, on the CPU's kernels
    try:
        answer = _trace(torch, fn, name, {**given, "device": device}, mode, traced_on, nproc,
                        parallel)
    finally:
        # The fake process group goes with the trace: the caller's process (a notebook, a
        # test, a rank about to join its job) is not left looking like a rank of N.
        leave_fake_process_group(torch)
    threads = threads or len(os.sched_getaffinity(0))
    limit = _native.parse_bytes("memory_limit", memory_limit) if isinstance(memory_limit, str) \
        else memory_limit
    text, products, no_time, kinds = _native.torch_estimate(json.dumps(answer), device,
                                                            mode == "train", threads, limit)
    plan = {"nproc": nproc, "parallel": parallel} if parallel is not None else {}
    return Estimate(name, mode, device, {**given, "device": device, **plan}, text, products,
                    no_time, kinds)


def _trace(torch, fn, name, values, mode, traced_on, nproc, parallel):
    """The trace's answer (``trace_answer`` of the contract) for the workload ``fn`` makes from
    ``values``: built under fake tensors on ``traced_on``, wrapped by ``parallel``'s plan as
    rank 0 of ``nproc``, its steps run through the tracer."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode

    wrap = None
    if parallel is not None:
        fake_process_group(torch, nproc)
        if parallel == "fsdp":
            # Made before the fake mode: the mesh's ranks are a real tensor.
            wrap = fully_shard_blocks(torch, nproc, torch.device(traced_on).type)
    counter = Collectives(dist, keep_buffers=True) if parallel is not None else None
    fake = FakeTensorMode()
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    with fake, torch.device(traced_on), _values_free_init(torch):
        w = make(torch, fn, name, values)
        if wrap is not None:
            try:
                wrap(w.model)
            except PlanError as e:
                raise WorkloadError(f"{name}: {e}") from None
        optimizer = optimizer_of(torch, w) if mode == "train" else None
        w.model.train(mode == "train")
    step = Step(torch, w, name, optimizer)

    def run(tr):
        @contextlib.contextmanager
        def phase(p):
            tr.set_phase(p)
            yield
            tr.end_phase()
        # The batch is made inside the trace, before the first phase: the run holds it from
        # before its first step to its end (the estimate's `inputs`).
        with torch.device(traced_on):
            batch_made = _inputs(w, name)
        for _ in range(2 if mode == "train" else 1):
            if counter is not None:
                counter.take()  # the collectives counted are the last step's
            getattr(step, mode)(batch_made, phase)
    buckets = planned_ddp_buckets(torch, w.model) if parallel == "ddp" else []
    try:
        answer = traced(torch, fake, w.model, run, traced_on, counter=counter)
    except WorkloadError:
        raise
    except Exception as e:  # noqa: BLE001 - named: the op fake tensors could not follow
        raise WorkloadError(_traced_failure(name, e)) from e
    collectives = counter.take() if counter is not None else {}
    if buckets:
        # DDP all-reduces every bucket once a step (its reducer runs them in C++).
        collectives["all_reduce"] = {"calls": steady_ddp_buckets(torch, w.model),
                                     "bytes": sum(buckets), "group": nproc}
    return _contract.check("trace_answer", {"traced_on": traced_on, "cuda_capability": None,
                                            "bucket_sizes": buckets,
                                            "collectives": collectives, **answer})


def check_plan(nproc, parallel, mode):
    """``nproc`` and ``parallel`` as a workload of yours takes them, or WorkloadError naming
    the one at fault."""
    if parallel is None and nproc in (None, 1):
        return
    if parallel not in PLANS:
        raise WorkloadError(f"parallel={parallel!r}: a workload of yours runs under "
                            f"{' or '.join(PLANS)} (tensor parallelism needs the model's own "
                            "plan: transformers' models take it on `--engine torch`)")
    if nproc is None or nproc < 2:
        raise WorkloadError(f"nproc={nproc!r}: parallel={parallel!r} needs 2 or more ranks")
    if mode != "train":
        raise WorkloadError(f"parallel={parallel!r} with mode={mode!r}: data-parallel plans "
                            "shard or reduce what training makes; estimate inference without one")


def _size(b):
    """Bytes in memscope's binary units, the unit chosen by the size (12.3 MiB, 8.0 KiB)."""
    for unit, n in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if b >= n:
            return f"{b / n:,.1f} {unit}"
    return f"{b} B"


def _flops(n):
    for unit, f in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if n >= f:
            return f"{n / f:,.3f} {unit}"
    return f"{n / 1e6:,.3f} MFLOP"


@contextlib.contextmanager
def _values_free_init(torch):
    """Initialisers that read the values they draw (``trunc_normal_`` redraws until every value
    lies within its bounds: ViT's, timm's) cannot run on fake tensors, which have none. While the
    workload is built for the trace, a truncated normal is drawn once and clamped: the same
    tensors, shapes and dtypes, values the trace never reads."""
    init = torch.nn.init
    draw = getattr(init, "_no_grad_trunc_normal_", None)
    if draw is None:
        yield
        return

    def once(tensor, mean, std, a, b, generator=None):
        with torch.no_grad():
            return tensor.normal_(mean, std, generator=generator).clamp_(a, b)
    init._no_grad_trunc_normal_ = once
    try:
        yield
    finally:
        init._no_grad_trunc_normal_ = draw


def _inputs(w, name):
    try:
        return w.inputs()
    except Exception as e:  # noqa: BLE001 - the user's function failed: said with its name
        raise WorkloadError(f"{name}: Workload.inputs() raised {type(e).__name__}: {e}") from e


def _traced_failure(name, e):
    """Why the trace of ``name``'s step failed, naming the op: data-dependent shapes or control
    flow fake tensors cannot follow, tensors on two devices, or the step's own error."""
    op = getattr(e, "func", None)
    kind = type(e).__name__
    if kind in ("DataDependentOutputException", "DynamicOutputShapeException",
                "GuardOnDataDependentSymNode"):
        return (f"{name}: the step reads a value from its data ({op or 'an op'}: {kind}) — "
                "control flow or a shape that depends on tensor values, which fake tensors "
                "(no data) cannot follow; make that branch or shape depend on the batch's "
                "sizes, not its values")
    text = str(e).splitlines()[0] if str(e) else kind
    if "device" in text.lower() and ("two" in text.lower() or "different" in text.lower()
                                      or "same device" in text.lower()):
        return (f"{name}: the step mixes tensors on two devices ({text}); build the model and "
                "make the batch on the device memscope gives the function (it is called inside "
                "torch.device(device))")
    return f"{name}: the step raised {kind} under the trace: {text}"
