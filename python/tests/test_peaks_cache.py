"""`peaks --engine torch`'s cache as the estimate reads it: two measurements at once take turns
(neither caches roofs timed against the other), and a cache file that is cut off, not JSON or
holds rates no machine has is named with what is wrong, not read as "no roofs measured"."""

import json
import os
import subprocess



ESTIMATE = ["estimate", "--engine", "torch", "--model", "tiny-gpt2", "--seq", "32",
            "--threads", "1"]


def test_the_peaks_cache_is_measured_one_at_a_time_and_named_when_bad(tmp_path, memscope_bin):
    env = {**os.environ, "MEMSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    peaks = [memscope_bin, "peaks", "--engine", "torch", "--model", "tiny-gpt2", "--threads",
             "1", "--refresh"]
    both = [subprocess.Popen(peaks, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in both]
    assert all(p.returncode == 0 for p in both), outs
    assert any("another `memscope peaks` is measuring this machine; waiting" in err
               for _, err in outs), outs
    (cache,) = (tmp_path / "cache").glob("peaks-*.json")

    def estimate():
        p = subprocess.run([memscope_bin] + ESTIMATE, env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr
        return p.stdout
    assert "No predicted step time" not in estimate()
    good = json.loads(cache.read_text())
    bad = dict(good, copy_gbs=dict(good["copy_gbs"], best=1e-300, median=1e-300))
    cache.write_text(json.dumps(bad))
    out = estimate()
    assert f"the cache file {cache} gives no roofs: its rates are not plausible" in out, out
    cache.write_text(json.dumps(good)[:100])
    out = estimate()
    assert f"the cache file {cache} gives no roofs: not a peaks file" in out, out
    assert "--refresh` measures them again" in out, out
