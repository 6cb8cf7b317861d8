"""The torch estimator's trace (memscope.trace) against the same ops run for real and counted
by memscope's preloaded allocator."""

import json

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
