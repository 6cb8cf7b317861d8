"""A session's profiling window (``Session(..., profile=range(5, 8))``): in those steps every ATen
op PyTorch dispatches is timed and charged to its module (``_optimer.OpTimer``: on the CPU by the
wall clock around the call, on CUDA by its kernels' time on the device; in backward to the
module whose forward made the autograd node), and each module's temporaries are measured: the
most bytes live after any op of its forward beyond what was live at its entry and at its
return, read from the session's own counter (counted malloc or CUDA allocated). Steps outside
the window run without the hook and pay nothing.
The Record's ``profile`` holds the ops per profiled step by signature; memscope costs them
(FLOPs, minimum bytes), sets them against the roofs ``peaks --engine torch`` measured and draws
the op kinds and the module tree (``memscope report``).
"""

from ._optimer import OpTimer, name_dtypes, timing_mode


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def window(profile):
    """The step indices (from 0, warm-up included) a ``profile=`` argument names, or a
    ValueError saying what to give."""
    if profile is None:
        return None
    if isinstance(profile, range):
        # Kept as a range (membership in O(1)): range(2, 10**7) is not made into ten million
        # indices.
        if len(profile) == 0 or profile.start < 0 or profile.step < 0:
            raise ValueError(f"profile={profile!r}: give the steps to profile as indices from 0 "
                             "(warm-up included), e.g. range(5, 8)")
        return profile
    try:
        given = list(profile)
        steps = sorted({int(i) for i in given})
        exact = all(not isinstance(i, bool) and int(i) == i for i in given)
    except (TypeError, ValueError):
        steps, exact = [], False
    if not steps or not exact or steps[0] < 0:
        raise ValueError(f"profile={profile!r}: give the steps to profile as indices from 0 "
                         "(warm-up included), e.g. range(5, 8)")
    return steps


class StepProfiler:
    """Turns the op timer on for the window's steps and off after."""

    def __init__(self, torch, model, device, steps, live=None):
        """``live``: the bytes live now, for each module's temporaries (None: not measured)."""
        self.torch, self.model, self.device = torch, model, device
        self.live = live
        self.window = steps if isinstance(steps, range) else set(steps)
        self.asked = steps
        self.timer = None
        self.mode = None
        self.hooks = []
        self.done = []         # (step index, step ms) of each profiled step

    @property
    def active(self):
        return self.mode is not None

    def begin_step(self, index):
        """Step ``index`` comes next: the hook goes on when it is in the window (before its
        first phase, so the model's own forward is seen whole)."""
        if index not in self.window or self.active:
            return
        name_dtypes(self.torch)
        if self.timer is None:
            self.timer = OpTimer(self.torch, self.device, self.model, self.live)
        self.hooks = self.timer.module_hooks()
        self.mode = timing_mode(self.timer)
        self.mode.__enter__()
        self.timer.on = True

    def phase(self, name):
        """A phase starts (``name``) or ends (None): ops between phases are not the step's."""
        if self.active:
            if name in ("forward", "prefill"):
                self.timer.owner.clear()  # a new graph
            self.timer.phase = name

    def end_step(self, index, step_ms):
        """A step closed: its time kept; the hook goes off unless the next step is profiled."""
        if not self.active:
            return
        self.timer.settle()
        self.done.append((index, step_ms))
        if index + 1 not in self.window:
            self.stop()

    def stop(self):
        if not self.active:
            return
        self.timer.on = False
        self.timer.stack.clear()
        self.timer.frames.clear()
        try:
            self.mode.__exit__(None, None, None)
        finally:
            self.mode = None
            for h in self.hooks:
                h.remove()
            self.hooks = []
        self.timer.settle()

    def described(self):
        """The window as the user gave it, short: its steps when few, else the range."""
        if isinstance(self.asked, range) and len(self.asked) > 20:
            return repr(self.asked)
        return repr(list(self.asked))

    def asked_within(self, steps):
        """The asked steps among the run's ``steps`` (the Record holds those, not a window's
        whole reach past the run's end)."""
        return [i for i in range(steps) if i in self.window]

    def result(self, plain_ms, steps):
        """The Record's ``profile`` (None when no step of the window ran); ``plain_ms``: the
        measured steps' times outside the window, for the cost of profiling; ``steps``: the
        steps the run closed."""
        self.stop()
        if not self.done:
            return None
        n = len(self.done)
        ops = [{"phase": ph, "module": mod, "op": op, "inputs": [list(i) for i in ins],
                "outputs": [list(o) for o in outs], "flags": list(fl), "calls": c / n,
                "seconds": secs / n}
               for (ph, mod, op, ins, outs, fl), (c, secs) in self.timer.ops.items() if ph]
        return {"steps": [i for i, _ in self.done], "asked": self.asked_within(steps),
                "device": str(self.device), "torch": self.torch.__version__,
                "profiled_step_ms": _median(ms for _, ms in self.done),
                "plain_step_ms": _median(plain_ms) if plain_ms else None,
                "ops": ops,
                "temporaries": sorted(({"module": m, "bytes": b}
                                       for m, b in self.timer.temporaries.items() if b > 0),
                                      key=lambda e: -e["bytes"])
                if self.live is not None else None}
