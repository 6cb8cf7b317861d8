"""PyTorch Lightning: ``Trainer(callbacks=[memscope.lightning.MemscopeCallback("run.json")])``.

Lightning runs forward and backward inside ``optimizer.step(closure)``, so the optimizer's own
step hooks would bracket all three; this callback drives the phases from Lightning's hooks
instead: ``on_train_batch_start`` → forward, ``on_before_backward`` → backward,
``on_after_backward`` ends it, ``on_before_optimizer_step`` → optimizer, and the batch whose
optimizer stepped closes the step at ``on_train_batch_end`` (with ``accumulate_grad_batches``
the micro-batches before it are its forward/backward pairs). An exception or Ctrl-C in ``fit``
(``on_exception``) closes the session: its Record says what ended the run."""

import lightning.pytorch as pl

from ._loop_values import ending_of
from .session import Session


def _loss(outputs):
    if isinstance(outputs, dict):
        outputs = outputs.get("loss")
    return outputs


class MemscopeCallback(pl.Callback):
    def __init__(self, record="memscope-record.json", **session_kwargs):
        self.record = record
        self.kwargs = session_kwargs
        self.session = None
        self._stepped = False

    def on_train_start(self, trainer, pl_module):
        opt = trainer.optimizers[0] if trainer.optimizers else None
        self.session = Session(pl_module, opt, record=self.record, auto_phases=False,
                               **self.kwargs)
        self.session.start()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        s = self.session
        if s.batch is None:
            first = batch
            while isinstance(first, (list, tuple, dict)) and first:
                first = next(iter(first.values())) if isinstance(first, dict) else first[0]
            if hasattr(first, "shape") and len(first.shape) >= 1:
                s.batch = int(first.shape[0])
                # A sequence length only for token ids ((batch, seq) integers).
                floating = getattr(getattr(first, "dtype", None), "is_floating_point", True)
                ids = len(first.shape) == 2 and floating is False
                s.seq = int(first.shape[1]) if ids else 0
        s.begin_phase("forward")

    def on_before_backward(self, trainer, pl_module, loss):
        self.session.begin_phase("backward")

    def on_after_backward(self, trainer, pl_module):
        self.session.end_phase()

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.session.begin_phase("optimizer")
        self._stepped = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.session.end_phase()
        if self._stepped:
            self._stepped = False
            self.session.step(_loss(outputs))

    def on_train_end(self, trainer, pl_module):
        if self.session is not None:
            self.session.close()

    def on_exception(self, trainer, pl_module, exception):
        """An exception or KeyboardInterrupt in fit: the Record of the steps that finished is
        written, marked with what ended the run, and every hook is removed."""
        if self.session is not None:
            self.session.close(ending=ending_of(type(exception), exception))
