"""``memscope.measure``: your own workload (``workload.py``) run for real under memscope's recorder
(``Session``), with memscope's estimate of the same step (``predict.py``) beside the measured
figures in one Record: ``memscope report run.json -o run.html`` then shows each category
measured against predicted. On the CPU the heap is counted by memscope's allocator when the
process runs under ``python -m memscope run`` (``python -m memscope module bench`` starts itself
that way), else it is RSS, and the Record says which; on CUDA it is the caching allocator's.

    record = memscope.measure(workload, batch=8, seq=512, steps=5, record="run.json")
"""

import contextlib
import dataclasses
import gc
import os

from . import _native
from ._collectives import ddp_buckets
from ._memory import Since
from ._sharding import PlanError, fully_shard_blocks
from .predict import check_plan, estimate
from .session import Session
from .workload import Step, WorkloadError, check_device, load, make, optimizer_of


def measure(workload, *, batch=None, seq=None, mode="train", device="cpu", steps=5, warmup=2,
            record="memscope-record.json", predict=True, prime=True, seed=0, parallel=None,
            **values):
    """Runs ``workload`` (a function returning a ``memscope.Workload``, or
    ``"FILE.py:FUNCTION"``) for ``warmup`` + ``steps`` steps of ``mode`` (``train`` or
    ``infer``) on ``device`` and returns its Record (a dict; written to ``record`` unless None).
    ``predict``: trace the same step first and put the estimate beside the measured figures.
    ``prime`` (the CPU, counted): one step of a throwaway copy first, so what PyTorch sets up
    on first use (lazily loaded kernels, BLAS's workspace) is not counted as the model's, as
    the torch engine primes its own. ``seed``: ``torch.manual_seed`` before each build.
    ``parallel`` (``ddp`` or ``fsdp``): this process is one rank of a torchrun job (``python -m
    memscope module bench … --nproc N --parallel P`` starts it): the estimate traced for rank 0
    of the job first (under a fake process group, gone again before the real one is joined),
    then the process group joined (gloo on the CPU, NCCL on CUDA), the model
    wrapped (DDP, or FSDP2 on its repeated blocks and root) and each rank's Record written
    (``run.rank1.json``)."""
    import torch

    if mode not in ("train", "infer"):
        raise WorkloadError(f"mode={mode!r}: a workload of yours runs `train` or `infer`")
    check_device(device)
    if steps < 1 or warmup < 0:
        raise WorkloadError(f"steps={steps}, warmup={warmup}: give steps ≥ 1 and warmup ≥ 0")
    fn, name = load(workload) if isinstance(workload, str) else (
        workload, getattr(workload, "__qualname__", repr(workload)))
    given = {k: v for k, v in (("batch", batch), ("seq", seq)) if v is not None}
    given.update(values)
    world = _job_world(parallel, mode)
    plan = {"nproc": world, "parallel": parallel} if parallel is not None else {}
    est = estimate(fn, mode=mode, device=device, **plan, **given).to_dict() if predict else None
    dev = torch.device(device)
    wrap = None
    if parallel is not None:
        dev, wrap = _join(torch, dev, parallel, world)
    counting = dev.type == "cpu" and _native.counter_active()
    if counting and prime:
        _one_step(torch, fn, name, given, device, mode, seed)
    gc.collect()
    base = _native.counter_read()[0] if counting else 0
    w, optimizer, wrapped = _built(torch, fn, name, given, dev, mode, seed, wrap)
    batch_made = _made_inputs(w, name, dev)
    # DDP's wrapper runs the steps; the Session watches the model inside it.
    ddp = wrapped is not None
    step = Step(torch, dataclasses.replace(w, model=wrapped) if ddp else w, name, optimizer)
    tokens = w.tokens or (batch * seq if batch and seq else None)
    fields = {"spec": {"mode": mode}}
    s = Session(w.model, optimizer, record=record, warmup=warmup, device=dev, batch=batch,
                seq=seq if seq else (tokens // batch if tokens and batch else None),
                auto_phases=False, name=name, record_fields=fields, exclude_baseline=False,
                estimate=est)
    if counting:
        s.reader = Since(s.reader, base)
    if ddp:
        # DDP's gradient buckets, made when the model was wrapped (and remade after its first
        # step in the order gradients arrived): the sizes its reducer allocated.
        s.extra_categories = lambda: {"gradient_buckets": sum(ddp_buckets(wrapped))}
    with s:
        for _ in range(warmup + steps):
            loss = getattr(step, mode)(batch_made, s.phase)
            s.step(loss)
    if parallel is not None:
        import torch.distributed as dist
        dist.barrier()  # every rank past its last collective before any leaves the group
        dist.destroy_process_group()
    return s.record


def _job_world(parallel, mode):
    """This rank's job's size, under torchrun, for ``parallel``; None without a plan."""
    if parallel is None:
        return None
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise WorkloadError(f"parallel={parallel!r}: each rank runs under torchrun, which "
                            "`python -m memscope module bench FILE.py:FUNCTION --nproc N "
                            f"--parallel {parallel}` starts")
    world = int(os.environ["WORLD_SIZE"])
    check_plan(world, parallel, mode)
    return world


def _join(torch, dev, parallel, world):
    """This rank joins the job's process group: (its device, the wrap for its model)."""
    import torch.distributed as dist
    cuda = dev.type == "cuda"
    if cuda:
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if cuda else "gloo")
    if parallel == "fsdp":
        return dev, fully_shard_blocks(torch, world, dev.type)

    def ddp(model):
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model, device_ids=[dev.index] if cuda else None)
    return dev, ddp


def _built(torch, fn, name, given, device, mode, seed, wrap=None):
    """(the workload made on ``device``, its model in train or eval mode and wrapped by
    ``wrap``; its optimizer; the module ``wrap`` returned, DDP's wrapper, or None)."""
    torch.manual_seed(seed)
    with torch.device(device):
        w = make(torch, fn, name, {**given, "device": str(device)})
    w.model.train(mode == "train")
    wrapped = None
    if wrap is not None:
        try:
            wrapped = wrap(w.model)
        except PlanError as e:
            raise WorkloadError(f"{name}: {e}") from None
    optimizer = optimizer_of(torch, w) if mode == "train" else None
    return w, optimizer, wrapped


def _made_inputs(w, name, dev):
    import torch
    try:
        with torch.device(dev):
            return w.inputs()
    except Exception as e:  # noqa: BLE001 - the user's function failed: said with its name
        raise WorkloadError(f"{name}: Workload.inputs() raised {type(e).__name__}: {e}") from e


def _one_step(torch, fn, name, given, device, mode, seed):
    """One step of a throwaway copy of the workload (unwrapped: no collective), everything it
    made then dropped."""
    w, optimizer, _ = _built(torch, fn, name, given, device, mode, seed)
    getattr(Step(torch, w, name, optimizer), mode)(
        _made_inputs(w, name, torch.device(device)), lambda p: contextlib.nullcontext())
    del w, optimizer
