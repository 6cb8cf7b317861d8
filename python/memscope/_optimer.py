"""The op timer: every dispatched ATen op timed while on (on the CPU by the wall clock, on CUDA
by a pair of events behind a spin kernel), keyed by phase, module and signature, and each
module's temporaries. The recorder's profile window (``Session(profile=…)``) and the op timer
worker (``_workers/optime.py``) both run it; the trace keys its ops by the same signature."""

import threading
import time


_DT = {}


def signature(func, args, out):
    """An op call's signature: ATen's name with its overload, the (shape, dtype) of each tensor
    it read and wrote (tensor lists flattened) and its bool arguments (SDPA's is_causal) — what
    ``src/analysis/aten_cost.rs`` costs."""
    import torch
    ins, flags = [], []
    for a in args:
        if isinstance(a, torch.Tensor):
            ins.append((tuple(a.shape), _DT.get(a.dtype, str(a.dtype))))
        elif isinstance(a, (list, tuple)):
            ins.extend((tuple(t.shape), _DT.get(t.dtype, str(t.dtype))) for t in a
                       if isinstance(t, torch.Tensor))
        elif isinstance(a, bool):
            flags.append(a)
    outs = [(tuple(t.shape), _DT.get(t.dtype, str(t.dtype)))
            for t in (out if isinstance(out, (list, tuple)) else [out])
            if isinstance(t, torch.Tensor)]
    return (str(func), tuple(ins), tuple(outs), tuple(flags))


def name_dtypes(torch):
    _DT.update({torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
                torch.int64: "i64", torch.int32: "i32", torch.bool: "bool",
                torch.float64: "f64", torch.uint8: "u8"})


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

        # The hooks are every module's in every thread: only this model's modules, on the
        # thread that profiles it, are kept (another Session's model, or another thread's,
        # leaves its ops to the module of this model that ran them, else outside every one).
        thread = threading.get_ident()

        def ours(m):
            return id(m) in self.names and threading.get_ident() == thread

        def pre(m, args):
            if not ours(m):
                return
            self.stack.append(self.names[id(m)])
            if self.live is not None and self.on:
                v = self.live()
                self.frames.append([v, v])

        def post(m, args, out):
            if ours(m) and self.stack:
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


def timing_mode(timer):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Timed(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not timer.on or func.namespace != "aten":
                return func(*args, **(kwargs or {}))
            return timer.time(func, args, kwargs or {})
    return Timed()
