"""The torch estimator's trace (memscope._workers.trace) against the same ops run for real and counted
by memscope's preloaded allocator."""

import json
import subprocess

from conftest import run_script

GRADIENT = 1024 * 1024 * 4  # bytes of one gradient of the script's weight


def test_a_gradient_sum_is_in_place_where_autograd_makes_it_in_place(tmp_path):
    # Two gradients for one weight: autograd adds the second into the first in place when the
    # first is dense and alone on its storage, and makes a third buffer when it is a view. The
    # trace sees fake tensors (always summed out of place) and must count as the device does.
    out = json.loads(run_script("sums.py", tmp_path).stdout.strip().splitlines()[-1])
    (view_counted, view_traced), (dense_counted, dense_traced) = \
        out["view first"], out["dense first"]
    for counted, traced in out.values():
        assert abs(traced - counted) <= 0.05 * counted, out
    # The cases differ by one gradient's buffer, counted and traced alike.
    assert view_counted - dense_counted > 0.9 * GRADIENT, out
    assert view_traced - dense_traced > 0.9 * GRADIENT, out


def test_flops_of_a_step_scale_with_its_micro_batches(tmp_path, memscope_bin):
    # Three micro-batches are traced whatever --grad-accum; each one past them dispatches what
    # the last traced one did, so the forward's and backward's FLOPs are N times one's.
    def flops(n):
        p = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model",
                            "tiny-gpt2", "--seq", "32", "--batch", "2", "--grad-accum", str(n),
                            "--json", "-"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return next(iter(json.loads(p.stdout)["by_dtype"].values()))["flops"]
    one = flops(1)
    for n in (3, 10, 1000):
        f = flops(n)
        for phase in ("forward", "backward"):
            assert abs(f[phase] / (n * one[phase]) - 1) < 0.01, (n, phase, f, one)
        assert f["optimizer"] == one["optimizer"], (n, f, one)
