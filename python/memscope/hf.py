"""Hugging Face Trainer: ``Trainer(..., callbacks=[memscope.hf.MemscopeCallback("run.json")])``.

The Trainer's own hooks cannot split forward from backward: the session's forward pre-hook on the
model starts ``forward`` and the first saved tensor autograd unpacks starts ``backward``;
``on_pre_optimizer_step`` / ``on_optimizer_step`` bracket ``optimizer`` (gradient clipping
included) and ``on_step_end`` closes the step. Gradient accumulation's micro-steps
(``on_substep_end``) are the forward/backward pairs the hooks see.

The Trainer calls no callback when ``train()`` raises: a session left open is closed when
``train()`` is called again on this callback, by ``close()``, or at the interpreter's exit (an
exception nobody caught, Ctrl-C), with the Record saying what ended the run."""

from transformers import TrainerCallback

from .session import Session


def _innermost(optimizer):
    # accelerate's AcceleratedOptimizer (and similar wrappers) hold the torch optimizer.
    while hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


class MemscopeCallback(TrainerCallback):
    def __init__(self, record="memscope-record.json", **session_kwargs):
        self.record = record
        self.kwargs = session_kwargs
        self.session = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.close("train() was called again while the previous run's session was open")
        self.session = Session(model, _innermost(optimizer), record=self.record, **self.kwargs)
        self.session.start()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.session is not None:
            self.session.begin_phase("optimizer")

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.session is not None:
            self.session.end_phase()

    def on_step_end(self, args, state, control, **kwargs):
        if self.session is not None:
            self.session.step()

    def on_train_end(self, args, state, control, **kwargs):
        if self.session is not None:
            self.session.close()

    def close(self, ending="the run was stopped before the Trainer's on_train_end"):
        """Closes a session the Trainer left open (``train()`` raised and the process goes on:
        a notebook): writes its Record, marked with ``ending``, and removes every hook."""
        if self.session is not None and not self.session.closed:
            self.session.close(ending=ending)
        return self.session.record if self.session is not None else None
