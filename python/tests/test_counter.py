"""memscope's counting malloc (python/src/counter.rs): exact up to glibc's rounding when
preloaded, inactive when not."""

import json

from conftest import run_script

from memscope import _native


def test_counts_tensor_storages_peaks_and_reallocs(tmp_path):
    out = json.loads(run_script("counter.py", tmp_path).stdout.strip().splitlines()[-1])
    assert out["active"]
    # The storage beyond an empty tensor's objects: posix_memalign(64)'s chunk slack at most.
    assert 1000 <= out["small"] - out["empty"] <= 1000 + 128, out
    n = 3 * 2**20 + 5
    assert n <= out["large"] - out["empty"] <= n + 4096 + 64, out  # mmapped: to the page
    # Everything the process mallocs counts: torch.ones' first call also builds small caches.
    assert 10 * 2**20 <= out["peak_over_base"] <= 10 * 2**20 + 65536, out
    assert abs(out["after_free"]) < 65536, out
    assert 200000 <= out["realloc"] <= 200000 + 4096, out
    assert abs(out["freed"]) < 64, out


def test_without_the_preload_nothing_is_counted():
    assert not _native.counter_active()
    assert _native.counter_read()[0] == 0


def test_a_heap_limit_refuses_past_it_and_counts_what_it_refused(tmp_path):
    # The torch engine reads the count when a rank fails: an allocation PyTorch did not make
    # (gloo's buffers) refused under --memory-limit is out of memory all the same.
    out = json.loads(run_script("refusal.py", tmp_path).stdout.strip().splitlines()[-1])
    assert out["before"] == [0, 0], out
    assert out["refused"], out
    count, first = out["after"]
    assert count >= 1 and 256 * 2**20 <= first <= 256 * 2**20 + 4096, out
