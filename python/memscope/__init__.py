"""memscope for PyTorch: record your own training loop into a memscope Record.

    import memscope
    with memscope.Session(model, optimizer, record="run.json") as ms:
        for x, y in batches:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            ms.step(loss)

Then ``memscope report run.json``, ``memscope analyze run.steps.jsonl``. Your own model before (or
beside) a run: ``memscope.estimate(workload, batch=8, seq=512)`` traces its step without
running it, ``memscope.measure(...)`` runs it with the estimate beside the measured figures;
``workload`` returns a ``memscope.Workload`` (docs/own-model.md). CPU peaks are counted
allocations when the script runs under ``python -m memscope run script.py`` (RSS otherwise).
See docs/pytorch.md.
"""

from . import _native
from .bench import measure
from .predict import Estimate, estimate
from .session import Session
from .workload import Workload, WorkloadError

__version__ = _native.MEMSCOPE_VERSION
__all__ = ["Session", "session", "counting_active", "Workload", "WorkloadError", "estimate",
           "measure", "Estimate"]


def session(model, optimizer=None, **kwargs):
    """``Session(model, optimizer, **kwargs)``: the recorder as a context manager."""
    return Session(model, optimizer, **kwargs)


def counting_active():
    """True when memscope's counting allocator is this process's malloc (``python -m memscope run``)."""
    return _native.counter_active()
