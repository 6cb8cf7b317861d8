"""A stop asked of the engine while it runs: memscope's (``leak``'s signals, ``bench
--timeout``) passed on as SIGINT, or a terminal's Ctrl-C."""


class Stop:
    """SIGINT and SIGTERM while the engine runs (memscope passes `leak`'s stop on as SIGINT; a
    terminal's Ctrl-C reaches both): the first one ends the step under way at once
    (KeyboardInterrupt) or, between steps, the loop after the step; later ones are ignored, so
    the Record is always written."""

    def __init__(self, job=False):
        self.asked = None
        self.in_step = False
        self.previous = {}
        # A rank of a job: a signal never ends a step (its peers would wait in the step's
        # collectives); the ranks agree between steps to stop after the same one.
        self.job = job

    def __enter__(self):
        import signal
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc):
        import signal
        for sig, h in self.previous.items():
            signal.signal(sig, h)
        return False

    def _on_signal(self, signum, frame):
        import signal
        if self.asked is not None:
            return
        self.asked = signal.Signals(signum).name
        if self.in_step and not self.job:
            raise KeyboardInterrupt

    def agree(self, torch, device):
        """A rank of a job, between steps: stop when any rank was asked to (one all-reduce of
        a flag), so that every rank stops after the same step and sends its Record."""
        import torch.distributed as dist
        flag = torch.tensor([int(self.asked is not None)], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if int(flag.item()) and self.asked is None:
            self.asked = "a stop asked of another rank"

    def step(self):
        import contextlib

        @contextlib.contextmanager
        def inside():
            self.in_step = True
            try:
                yield
            finally:
                self.in_step = False
        return inside()
