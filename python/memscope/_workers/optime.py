"""``memscope roofline --engine torch`` and ``profile --engine torch``: a Spec's workload run for
real through transformers' own classes, its measured steps plain alternating with as many with
every dispatched ATen op timed one by one (on the CPU by the wall clock around the call; on CUDA
by the device's time for the op's kernels: a pair of CUDA events around it on the stream, behind
a spin kernel long enough that the kernels are queued before the first event fires, so no time
the host spends dispatching counts; a view launches nothing and counts 0), each op charged to
the module that ran it. In backward an op is charged to the module whose forward made
the autograd node running it (matched by the node's sequence number), so a layer's backward is
the layer's. memscope costs each op (``src/analysis/aten_cost.rs``: FLOPs and minimum bytes from
its signature) and sets the times against the roofs ``peaks --engine torch`` measured.

Protocol: the request ``{"spec": …, "expected_params": N}`` on stdin; one JSON object on stdout:
``{"device", "device_name", "torch", "param_bytes", "steps", "plain": {phase: [ms of each run…]},
"profiled": {…}, "ops": [[phase, module, op, [[shape, dtype] read…], [[shape, dtype] written…],
[bool args…], calls, seconds]…]}``: ``plain`` and ``profiled`` hold every run of each phase and
of the whole ``step``; ``ops`` sum the profiled steps (module ``"(model)"``: the model's own
forward, such as its loss; ``""``: outside every module, or in backward a node no module's
forward made, such as the gradients' accumulation).
"""

import contextlib
import sys
import time

from .engine import Engine, _tokens, answer_once
from .trace import _dtype_names, signature


# The host's longest dispatch of one op, as far as the timing needs: a fused optimizer's over
# every parameter, or an attention backward choosing its kernel, stays well under it.
HEAD_START_US = 300


# Ops that only allocate: on CUDA they launch no kernel, and timing them would count the host's
# time in the allocator (a cudaMalloc) as the device's.
NO_KERNEL = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


class OpTimer:
    """Every op's time while ``on``, keyed by (phase, module, signature)."""

    def __init__(self, torch, device, model, live=None):
        self.torch = torch
        # Memory: ``live()`` the bytes live now (the recorder's reader); per module running its
        # forward, [live at entry, the most live after any of its ops].
        self.live = live
        self.frames = []
        self.temporaries = {}  # module -> the most bytes its forward freed before returning
        self.names = {id(m): n or "(model)" for n, m in model.named_modules()}
        self.stack = []       # modules whose forward is running, innermost last
        self.owner = {}       # an autograd node's sequence number -> the module that made it
        self.phase = None
        self.on = False
        self.cuda = device.type == "cuda"
        self.ops = {}         # key -> [calls, seconds]
        self.pending = []     # CUDA: (key, start event, end event), read after a sync
        self.head = self._head_start() if self.cuda else 0

    def _head_start(self):
        """CUDA: the spin kernel's cycles that last HEAD_START_US on this device, so that
        every op's kernels are queued (the host has dispatched it) before its start event
        runs."""
        torch = self.torch
        cycles = 1_000_000
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        torch.cuda._sleep(cycles)  # the first launch loads the kernel
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        per_us = cycles / max(start.elapsed_time(end) * 1e3, 1.0)
        return int(per_us * HEAD_START_US)

    def module_hooks(self):
        """Global forward hooks that keep ``stack`` (the modules whose forward is running);
        returns their handles, to remove."""
        from torch.nn.modules.module import (register_module_forward_hook,
                                             register_module_forward_pre_hook)

        def pre(m, args):
            self.stack.append(self.names.get(id(m), "?"))
            if self.live is not None and self.on:
                v = self.live()
                self.frames.append([v, v])

        def post(m, args, out):
            if self.stack:
                name = self.stack.pop()
                if self.live is not None and self.on and self.frames:
                    # Its temporaries: what was live inside beyond what it held at entry and
                    # still holds at its return (its output, what it saved for backward).
                    entry, peak = self.frames.pop()
                    t = max(peak - max(entry, self.live()), 0)
                    if t > self.temporaries.get(name, 0):
                        self.temporaries[name] = t
        return [register_module_forward_pre_hook(pre),
                register_module_forward_hook(post, always_call=True)]

    def module(self):
        if self.phase == "backward":
            node = self.torch._C._current_autograd_node()
            return self.owner.get(node._sequence_nr(), "") if node is not None else ""
        return self.stack[-1] if self.stack else ""

    def time(self, func, args, kwargs):
        torch = self.torch
        module = self.module()
        if self.cuda and (func.is_view or func.__name__.split(".")[0] in NO_KERNEL):
            out, secs = func(*args, **kwargs), 0.0  # launches no kernel
        elif self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            # The device spins while the host dispatches the op, so the events time its
            # kernels back to back, not the host's gap between them.
            torch.cuda._sleep(self.head)
            start.record()
            out = func(*args, **kwargs)
            end.record()
            secs = None
        else:
            t0 = time.perf_counter()
            out = func(*args, **kwargs)
            secs = time.perf_counter() - t0
        if self.phase != "backward" and torch.is_grad_enabled():
            # The node this op made (if any) has the sequence number just taken; an op that made
            # none leaves the module of the op that did.
            self.owner.setdefault(torch._C._autograd._get_sequence_nr() - 1, module)
        if self.frames and self.phase != "backward":
            v = self.live()
            for f in self.frames:
                if v > f[1]:
                    f[1] = v
        key = (self.phase or "", module) + signature(func, args, out)
        e = self.ops.setdefault(key, [0, 0.0])
        e[0] += 1
        if secs is None:
            self.pending.append((e, start, end))
        else:
            e[1] += secs
        return out

    def settle(self):
        """CUDA: the events' times added once the device has run them."""
        if self.pending:
            self.torch.cuda.synchronize()
            for e, start, end in self.pending:
                e[1] += start.elapsed_time(end) / 1e3
            self.pending.clear()


def _mode(timer):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Timed(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not timer.on or func.namespace != "aten":
                return func(*args, **(kwargs or {}))
            return timer.time(func, args, kwargs or {})
    return Timed()


def profile(request):
    import torch
    _dtype_names(torch)
    eng = Engine(request, out=None)
    eng.build()
    spec = eng.spec
    dev = eng.device
    timer = OpTimer(torch, dev, eng.model)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times = {}

    @contextlib.contextmanager
    def mark(name):
        timer.phase = name
        if name == "forward" or name == "prefill":
            timer.owner.clear()  # a new step's graph
        sync()
        t0 = time.perf_counter()
        yield
        sync()
        times.setdefault(name, []).append((time.perf_counter() - t0) * 1e3)
        timer.phase = None

    hooks = timer.module_hooks()
    eng.phase = mark
    step_fn = {"train": eng.train_step, "infer": eng.infer_step,
               "generate": eng.generate_step}[eng.mode]
    # The engine's batches: seeded random ids drawn once, or a window of --data each step.
    batches = _tokens(eng.np, spec, eng.cfg.vocab_size)
    fixed = eng.ids(batches) if not spec.data else None
    draw = (lambda: fixed) if fixed is not None else (lambda: eng.ids(batches))

    def run(into, timed):
        """One step, its phases' and its own times added to ``into``."""
        times.clear()
        mode = _mode(timer) if timed else contextlib.nullcontext()
        with mode:
            timer.on = timed
            sync()
            t0 = time.perf_counter()
            step_fn(draw)
            sync()
            times.setdefault("step", []).append((time.perf_counter() - t0) * 1e3)
            timer.on = False
        timer.settle()
        for k, v in times.items():
            into.setdefault(k, []).extend(v)

    plain, profiled = {}, {}
    try:
        for _ in range(spec.warmup):
            run(plain, False)
        plain.clear()
        # Plain and profiled steps alternate, so a drift of the machine's speed (its allocator
        # and pages still warming, another process) weighs on both alike.
        for _ in range(spec.steps):
            run(plain, False)
            run(profiled, True)
    finally:
        for h in hooks:
            h.remove()
    return {"device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "",
            "torch": torch.__version__,
            "param_bytes": sum(p.numel() * p.element_size() for p in eng.model.parameters()),
            "steps": spec.steps, "plain": plain, "profiled": profiled,
            "ops": [[ph, mod, op, [list(i) for i in ins], [list(o) for o in outs], list(fl), n, s]
                    for (ph, mod, op, ins, outs, fl), (n, s) in timer.ops.items()]}


def main():
    return answer_once("the torch engine's op timer", profile, "request")


if __name__ == "__main__":
    sys.exit(main())
