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

from .._optimer import OpTimer, name_dtypes, timing_mode
from .engine import Engine
from .inputs import tokens
from .protocol import answer_once


def profile(request):
    import torch
    name_dtypes(torch)
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
    batches = tokens(eng.np, spec, eng.cfg.vocab_size)
    fixed = eng.ids(batches) if not spec.data else None
    draw = (lambda: fixed) if fixed is not None else (lambda: eng.ids(batches))

    def run(into, timed):
        """One step, its phases' and its own times added to ``into``."""
        times.clear()
        mode = timing_mode(timer) if timed else contextlib.nullcontext()
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
    return answer_once("the torch engine's op timer", profile, "request", "optime_answer")


if __name__ == "__main__":
    sys.exit(main())
