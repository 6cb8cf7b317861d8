"""Your own model as memscope runs it: a ``Workload`` (the model, one batch, the loss, the
optimizer), the function of yours that makes one (``"train.py:workload"`` on the command line),
and its step phase by phase, as the torch engine steps transformers' models. ``memscope.estimate``
traces that step without running it (``predict.py``); ``memscope.measure`` runs it under the
recorder with the estimate beside it (``bench.py``).

    import torch, memscope

    def workload(batch, seq):
        model = MyGPT(vocab=50304, width=768, layers=12)
        return memscope.Workload(
            model=model,
            inputs=lambda: torch.randint(0, 50304, (batch, seq)),
            loss=lambda m, x: torch.nn.functional.cross_entropy(
                m(x).flatten(0, 1), x.flatten()))

The function is called with the values it names among memscope's (``batch``, ``seq``, ``device``),
inside ``torch.device(device)`` — so what it builds lands there — and, for an estimate, under
fake tensors (nothing allocated, nothing computed: a 70B model is made in seconds).
"""

import contextlib
import dataclasses
import importlib.util
import inspect
import os
import re
import sys

from ._adamw import make_adamw


class WorkloadError(ValueError):
    """A workload that cannot be run: says which function, field or op is at fault."""


@dataclasses.dataclass
class Workload:
    """``model``: the ``torch.nn.Module`` to train or run. ``inputs()``: one batch (a tensor, a
    tuple of them, or a dict of keyword arguments), made on the current device. ``loss(model,
    batch)``: the scalar a training step differentiates; without it the model's own output is
    the loss (a scalar, or an output with ``.loss``, as transformers' models give with labels).
    ``optimizer(params)``: the optimizer to train with; without it memscope's AdamW (lr 1e-4,
    fused where PyTorch has it). ``tokens``: tokens per batch, for tokens/s (else batch × seq
    when both are given)."""

    model: object
    inputs: object
    loss: object = None
    optimizer: object = None
    tokens: int | None = None


def load(target):
    """``FILE.py:FUNCTION`` (or ``package.module:FUNCTION``) → (the function, its name)."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise WorkloadError(f"{target!r}: give FILE.py:FUNCTION (the file that defines your "
                            "workload and the function that returns a memscope.Workload)")
    if path.endswith(".py"):
        if not os.path.isfile(path):
            what = "is a directory" if os.path.isdir(path) else "no such file"
            raise WorkloadError(f"{path}: {what}; give the file that defines {name}")
        spec = importlib.util.spec_from_file_location(
            f"memscope_workload_{abs(hash(os.path.abspath(path)))}", path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001 - the user's file failed: said with its name
            raise WorkloadError(f"{path}: importing it raised {type(e).__name__}: {e}") from e
        finally:
            sys.path.pop(0)
    else:
        try:
            module = importlib.import_module(path)
        except ImportError as e:
            raise WorkloadError(f"{path}: no such module in this Python ({e}); give "
                                "FILE.py:FUNCTION or an importable module") from None
    fn = getattr(module, name, None)
    if fn is None:
        found = sorted(k for k, v in vars(module).items()
                       if callable(v) and not k.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        raise WorkloadError(f"{path}: defines no {name!r}"
                            + (f" (its functions: {', '.join(found)})" if found else ""))
    if not callable(fn):
        raise WorkloadError(f"{target}: {name} is a {type(fn).__name__}, not a function")
    return fn, f"{os.path.basename(path)}:{name}"


def make(torch, fn, name, values):
    """``fn`` called with the ``values`` it names (``batch``, ``seq``, ``device``, or all of them
    when it takes ``**kwargs``), checked: a Workload whose ``model`` is a module and whose
    ``inputs`` is callable."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    args = {k: v for k, v in values.items() if takes_all or k in params}
    missing = [p.name for p in params.values() if p.default is p.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in args]
    if missing:
        raise WorkloadError(f"{name} takes {', '.join(missing)}, which memscope does not give "
                            f"(it gives {', '.join(sorted(values))}); give {missing[0]} a "
                            "default")
    try:
        w = fn(**args)
    except WorkloadError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's function failed: said with its name
        raise WorkloadError(f"{name} raised {type(e).__name__}: {e}") from e
    if isinstance(w, torch.nn.Module):
        raise WorkloadError(f"{name} returned the model alone; return memscope.Workload(model="
                            "…, inputs=lambda: batch) so memscope knows what to feed it")
    if not isinstance(w, Workload):
        raise WorkloadError(f"{name} returned {type(w).__name__}, not a memscope.Workload; "
                            "return memscope.Workload(model=…, inputs=…)")
    if not isinstance(w.model, torch.nn.Module):
        raise WorkloadError(f"{name}: Workload.model is {type(w.model).__name__}, not a "
                            "torch.nn.Module")
    for field in ("inputs", "loss", "optimizer"):
        v = getattr(w, field)
        if (v is not None or field == "inputs") and not callable(v):
            raise WorkloadError(f"{name}: Workload.{field} is {type(v).__name__}; give a "
                                "function (a lambda will do)")
    return w


def optimizer_of(torch, w):
    """The workload's optimizer over its model's parameters: its own, else memscope's AdamW."""
    params = list(w.model.parameters())
    if w.optimizer is not None:
        return w.optimizer(params)
    return make_adamw(torch, params, 1e-4, params[0].dtype if params else torch.float32)[0]


def check_device(device):
    """``device`` as memscope runs a workload on it (``cpu``, ``cuda``, ``cuda:N``), else
    WorkloadError naming it."""
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise WorkloadError(f"device={device!r}: give cpu, cuda or cuda:N")
    return device


class Step:
    """A workload's step: ``train`` (forward with its loss, backward, the optimizer's step) or
    ``infer`` (forward without gradients, with the loss when there is one), each phase inside ``phase(name)`` as the torch
    engine marks its own. ``name``: the workload function's, for messages."""

    def __init__(self, torch, w, name, optimizer, autocast=None):
        self.torch, self.w, self.name, self.optimizer = torch, w, name, optimizer
        self.autocast = autocast

    def _context(self):
        return self.autocast() if self.autocast is not None else contextlib.nullcontext()

    def output(self, batch):
        m = self.w.model
        if isinstance(batch, dict):
            return m(**batch)
        if isinstance(batch, (tuple, list)):
            return m(*batch)
        return m(batch)

    def loss(self, batch):
        if self.w.loss is not None:
            out = self.w.loss(self.w.model, batch)
        else:
            out = self.output(batch)
            out = getattr(out, "loss", out)
            if isinstance(out, dict):
                out = out.get("loss")
        t = self.torch
        if not isinstance(out, t.Tensor) or out.numel() != 1:
            shape = tuple(out.shape) if isinstance(out, t.Tensor) else type(out).__name__
            raise WorkloadError(f"{self.name}: the training step's loss is {shape}, not a "
                                "scalar; give Workload(loss=lambda model, batch: …) returning "
                                "one")
        return out

    def train(self, batch, phase):
        with phase("forward"), self._context():
            loss = self.loss(batch)
        with phase("backward"):
            loss.backward()
        with phase("optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def infer(self, batch, phase):
        """The forward without gradients: the loss's when the workload gives one (it knows how
        the batch feeds the model), else the model's output."""
        with self.torch.no_grad(), phase("forward"), self._context():
            if self.w.loss is not None:
                return self.w.loss(self.w.model, batch).detach()
            self.output(batch)
        return None
