"""``memscope peaks --engine torch``: the device's roofs as PyTorch reaches them — matmul per dtype
over a range of square sizes and on the model's own linear shapes (``F.linear``, as transformers
runs them, and the two products of its backward; the forward again at one row a sequence, as
decode runs it; on the CPU over operands rotating through four times the memory the last-level
cache holds, as a step meets them), memory bandwidth (copy and triad over arrays as large, bytes
read plus written; a matrix-vector product's, reading 64 MiB weights rotating through as much;
writing an array already in memory and one just allocated, whose pages fault in on the CPU),
and the fixed cost of one small op (dispatch on the CPU; launch and dispatch on CUDA)
and of one view (dispatch only); with a model, the host's cost per op of that model's own step
at the smallest widths (``host.py``). Only seconds are measured here: memscope turns them into rates
(``src/torch/peaks.rs``).

Protocol: the request ``{"device": d, "threads": n, "shapes": [[name, m, k, n], …], "model":
ModelConfig or null}`` on stdin;
a ``started`` line, then one JSON object: ``{"device", "device_name", "torch", "threads",
"matmul": [{"dtype", "m", "k", "n", "secs": […]}], "shapes": [{"name", "m", "k", "n", "secs"}],
"array_bytes", "copy_secs", "triad_secs", "fill_secs", "fresh_fill_secs", "small_op_calls", "small_op_secs", "view_op_secs",
"gemv_bytes", "gemv_secs", "host": {"model", "phases": {phase: {"ops", "secs"}}} or null}``.
"""

import sys
import time

from .host import host_costs
from .protocol import Refused, answer_once

# Sizes double; the next is left out when its run would take longer than this (8× the last).
SLOW_RUN_S = 1.0
# Repetitions: as many as fit in this much time, at least MIN_REPS.
BUDGET_S = 0.4
MIN_REPS, MAX_REPS = 3, 50
SMALL_OP_CALLS = 2000
# On the CPU, what a step meets out of cache is timed out of cache: the model's products over
# operands rotating through at least this much memory, the matrix-vector product over as many
# 64 MiB weights, and the bandwidth over arrays of at least ARRAY_BYTES each — or, where the
# last-level cache is larger (260 MiB on some Xeons), CACHE_MULTIPLE times that cache.
ROTATE_BYTES, ARRAY_BYTES, CACHE_MULTIPLE = 256 << 20, 128 << 20, 4
MAX_COPIES = 1024
GEMV_N = 4096
FEW_ROWS = 16  # a product of at most this many rows is a decode step's (src/analysis/torch_time.rs)
CACHES = "/sys/devices/system/cpu/cpu0/cache"


def last_level_cache_bytes():
    """The largest data or unified cache cpu0 sees (sysfs), in bytes; 0 where sysfs says none."""
    import os
    sizes = [0]
    for index in os.listdir(CACHES) if os.path.isdir(CACHES) else []:
        try:
            with open(f"{CACHES}/{index}/type") as f:
                kind = f.read().strip()
            with open(f"{CACHES}/{index}/size") as f:
                size = f.read().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        if kind != "Instruction" and size:
            sizes.append(int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size))
    return max(sizes)


def _timer(torch, device):
    cuda = device.type == "cuda"

    def timed(fn):
        """Seconds of each repetition of fn() after one warm-up call (synchronised on CUDA)."""
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        first = time.perf_counter() - t
        reps = max(MIN_REPS, min(MAX_REPS, int(BUDGET_S / max(first, 1e-9))))
        out = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize(device)
            out.append(time.perf_counter() - t)
        return out
    return timed


def measure(request):
    import torch
    device = torch.device(request.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise Refused(f"--device {request.device}: this PyTorch ({torch.__version__}) sees "
                          "no CUDA GPU; use --device cpu")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        name = torch.cuda.get_device_name(device)
        sizes = [1024, 2048, 4096, 8192]
        dtypes = [("f32", torch.float32, False), ("tf32", torch.float32, True),
                  ("bf16", torch.bfloat16, False), ("f16", torch.float16, False)]
        array_bytes = 1 << 30
    elif device.type == "cpu":
        torch.set_num_threads(request.threads)
        name = ""  # memscope names the CPU (src/environment.rs)
        sizes = [256, 512, 1024, 2048]
        dtypes = [("f32", torch.float32, False), ("bf16", torch.bfloat16, False)]
        array_bytes = max(ARRAY_BYTES, CACHE_MULTIPLE * last_level_cache_bytes())
        rotate_bytes = max(ROTATE_BYTES, array_bytes)
    else:
        raise Refused(f"--device {request.device}: use cpu, cuda or cuda:N")
    timed = _timer(torch, device)
    matmul = []
    for label, dt, tf32 in dtypes:
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            for n in sizes:
                a = torch.randn(n, n, device=device).to(dt)  # (n, n)
                b = torch.randn(n, n, device=device).to(dt)  # (n, n)
                secs = timed(lambda: torch.mm(a, b))
                matmul.append({"dtype": label, "m": n, "k": n, "n": n, "secs": secs})
                del a, b
                if 8 * min(secs) > SLOW_RUN_S:
                    break
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
    shapes = []
    for name_, m, k, n in request.shapes or []:
        # A step meets each product's operands out of cache (the model's other layers ran in
        # between): on the CPU the calls rotate through copies filling rotate_bytes.
        copies = 1 if device.type == "cuda" else max(1, min(
            MAX_COPIES, -(-rotate_bytes // (4 * (m * k + n * k + m * n)))))
        x0, w0 = torch.randn(m, k, device=device), torch.randn(n, k, device=device)
        dy0 = torch.randn(m, n, device=device)
        xs = [x0.clone() for _ in range(copies)]    # (m, k): rows
        ws = [w0.clone() for _ in range(copies)]    # (n, k): the weight
        dys = [dy0.clone() for _ in range(copies)]  # (m, n): its gradient
        turn = [0]

        def operands():
            turn[0] = (turn[0] + 1) % copies
            return xs[turn[0]], ws[turn[0]], dys[turn[0]]

        def linear():
            x, w, _ = operands()
            return torch.nn.functional.linear(x, w)

        def dx():
            _, w, dy = operands()
            return torch.mm(dy, w)

        def dw():
            x, _, dy = operands()
            return torch.mm(dy.t(), x)

        def dw_conv1d():
            x, _, dy = operands()
            return torch.mm(x.t(), dy)
        # The forward, and the two products its backward runs as autograd lays them out:
        # dx = dy · W (m, n)·(n, k); dW = dyᵀ · x (n, m)·(m, k), or xᵀ · dy (k, m)·(m, n) for
        # GPT-2's Conv1D, whose weight is stored (k, n).
        # A product of a few rows is a decode step's (no backward follows it): its forward only.
        products = (
            (name_, (m, k, n), linear),
            (f"{name_} dx", (m, n, k), dx),
            (f"{name_} dW", (n, m, k), dw),
            (f"{name_} dW (Conv1D)", (k, m, n), dw_conv1d))
        for label, (mm, kk, nn), fn in products[:1] if m <= FEW_ROWS else products:
            shapes.append({"name": label, "m": mm, "k": kk, "n": nn, "secs": timed(fn)})
        del xs, ws, dys, x0, w0, dy0
    # A matrix-vector product over weights far larger than the caches (a decode step's
    # products): the bandwidth a product with one row reaches, reading its weight once, each
    # call another of the weights filling rotate_bytes.
    w0 = torch.randn(GEMV_N, GEMV_N, device=device)  # (n, k): 64 MiB of f32
    wvs = [w0.clone() for _ in range(max(1, rotate_bytes // (GEMV_N * GEMV_N * 4)))]
    xv = torch.randn(1, GEMV_N, device=device)       # (1, k)
    turn = [0]

    def gemv():
        turn[0] = (turn[0] + 1) % len(wvs)
        return torch.nn.functional.linear(xv, wvs[turn[0]])
    gemv_secs = timed(gemv)
    del w0, wvs, xv
    elems = array_bytes // 4
    # The values do not matter to a stream's speed: filled, not drawn (a GiB of random numbers
    # takes seconds on the CPU).
    a = torch.empty(elems, device=device)
    b = torch.full((elems,), 0.5, device=device)
    c = torch.full((elems,), 0.25, device=device)
    copy_secs = timed(lambda: a.copy_(b))                                 # a = b
    triad_secs = timed(lambda: torch.add(b, c, alpha=3.0, out=a))        # a = b + s·c
    # Writing an array already in memory, and one just allocated: on the CPU an array this
    # large is fresh pages from the kernel each time (glibc maps it, and unmaps it when freed),
    # and the first write to each page faults it in.
    fill_secs = timed(lambda: a.fill_(1.0))
    fresh_secs = timed(lambda: torch.empty(elems, device=device).fill_(1.0))
    del a, b, c
    x = torch.zeros(1, device=device)

    def small_ops():
        for _ in range(SMALL_OP_CALLS):
            x.add_(1.0)
    small_secs = timed(small_ops)
    y = torch.zeros(4, 4, device=device)

    def view_ops():
        for _ in range(SMALL_OP_CALLS):
            y.view(-1)
    view_secs = timed(view_ops)
    host = None
    if request.model is not None:
        import transformers
        try:
            host = host_costs(torch, transformers, device, request.model)
        except Exception as e:  # a config transformers cannot build this small: said, not fatal
            print(f"memscope peaks: the host's cost per op was not measured on "
                  f"{request.model.name} at its smallest widths ({type(e).__name__}: {e}); "
                  "the predicted step charges each op one bare op's cost", file=sys.stderr)
    return {"device": str(device), "device_name": name, "torch": torch.__version__, "host": host,
            "threads": torch.get_num_threads(), "matmul": matmul, "shapes": shapes,
            "array_bytes": elems * 4, "copy_secs": copy_secs, "triad_secs": triad_secs,
            "fill_secs": fill_secs, "fresh_fill_secs": fresh_secs,
            "small_op_calls": SMALL_OP_CALLS, "small_op_secs": small_secs,
            "view_op_secs": view_secs, "gemv_bytes": GEMV_N * GEMV_N * 4,
            "gemv_secs": gemv_secs}


def main():
    return answer_once("the torch engine's peaks", measure, "peaks_request", "peaks_answer")


if __name__ == "__main__":
    sys.exit(main())
