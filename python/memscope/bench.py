"""``memscope.measure``: your own workload (``workload.py``) run for real under memscope's recorder
(``Session``), with memscope's estimate of the same step (``predict.py``) beside the measured
figures in one Record: ``memscope report run.json -o run.html`` then shows each category
measured against predicted. On the CPU the heap is counted by memscope's allocator when the
process runs under ``python -m memscope run`` (``python -m memscope module bench`` starts itself
that way), else it is RSS, and the Record says which; on CUDA it is the caching allocator's.

    record = memscope.measure(workload, batch=8, seq=512, steps=5, record="run.json")
"""

import gc

from . import _native
from ._adamw import make_adamw
from ._memory import Since
from .predict import estimate
from .session import Session
from .workload import Step, WorkloadError, load, make


def measure(workload, *, batch=None, seq=None, mode="train", device="cpu", steps=5, warmup=2,
            record="memscope-record.json", predict=True, prime=True, seed=0, **values):
    """Runs ``workload`` (a function returning a ``memscope.Workload``, or
    ``"FILE.py:FUNCTION"``) for ``warmup`` + ``steps`` steps of ``mode`` (``train`` or
    ``infer``) on ``device`` and returns its Record (a dict; written to ``record`` unless None).
    ``predict``: trace the same step first and put the estimate beside the measured figures.
    ``prime`` (the CPU, counted): one step of a throwaway copy first, so what PyTorch sets up
    on first use (lazily loaded kernels, BLAS's workspace) is not counted as the model's, as
    the torch engine primes its own. ``seed``: ``torch.manual_seed`` before each build."""
    import torch

    if mode not in ("train", "infer"):
        raise WorkloadError(f"mode={mode!r}: a workload of yours runs `train` or `infer`")
    if steps < 1 or warmup < 0:
        raise WorkloadError(f"steps={steps}, warmup={warmup}: give steps ≥ 1 and warmup ≥ 0")
    fn, name = load(workload) if isinstance(workload, str) else (
        workload, getattr(workload, "__qualname__", repr(workload)))
    given = {k: v for k, v in (("batch", batch), ("seq", seq)) if v is not None}
    given.update(values)
    est = estimate(fn, mode=mode, device=device, **given).to_dict() if predict else None
    dev = torch.device(device)
    counting = dev.type == "cpu" and _native.counter_active()
    if counting and prime:
        _one_step(torch, fn, name, given, device, mode, seed)
    gc.collect()
    base = _native.counter_read()[0] if counting else 0
    w, optimizer = _built(torch, fn, name, given, device, mode, seed)
    batch_made = _made_inputs(w, name, dev)
    step = Step(torch, w, name, optimizer)
    tokens = w.tokens or (batch * seq if batch and seq else None)
    fields = {"spec": {"mode": mode}}
    s = Session(w.model, optimizer, record=record, warmup=warmup, device=dev, batch=batch,
                seq=seq if seq else (tokens // batch if tokens and batch else None),
                auto_phases=False, name=name, record_fields=fields, exclude_baseline=False,
                estimate=est)
    if counting:
        s.reader = Since(s.reader, base)
    with s:
        for _ in range(warmup + steps):
            loss = getattr(step, mode)(batch_made, s.phase)
            s.step(loss)
    return s.record


def _built(torch, fn, name, given, device, mode, seed):
    """The workload made on ``device`` (its model in train or eval mode) and its optimizer."""
    torch.manual_seed(seed)
    with torch.device(device):
        w = make(torch, fn, name, {**given, "device": device})
    w.model.train(mode == "train")
    optimizer = None
    if mode == "train":
        params = list(w.model.parameters())
        optimizer = w.optimizer(params) if w.optimizer is not None else \
            make_adamw(torch, params, 1e-4, params[0].dtype if params else torch.float32)[0]
    return w, optimizer


def _made_inputs(w, name, dev):
    import torch
    try:
        with torch.device(dev):
            return w.inputs()
    except Exception as e:  # noqa: BLE001 - the user's function failed: said with its name
        raise WorkloadError(f"{name}: Workload.inputs() raised {type(e).__name__}: {e}") from e


def _one_step(torch, fn, name, given, device, mode, seed):
    """One step of a throwaway copy of the workload, everything it made then dropped."""
    import contextlib
    w, optimizer = _built(torch, fn, name, given, device, mode, seed)
    getattr(Step(torch, w, name, optimizer), mode)(
        _made_inputs(w, name, torch.device(device)), lambda p: contextlib.nullcontext())
    del w, optimizer
