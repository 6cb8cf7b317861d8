"""The per-step series: leak and plateau verdicts (memscope analyze on the JSONL, and the same
Rust verdict from Python), and a SIGKILLed run's JSONL prefix."""

import json
import os
import signal
import subprocess
import sys
import time

from conftest import SCRIPTS, cli, load, run_script


def analyze(memscope_bin, path):
    p = cli(memscope_bin, "analyze", path, "--json", path.with_suffix(".verdict.json"))
    return load(path.with_suffix(".verdict.json")), p.stdout


def test_a_metric_kept_with_its_graph_every_step_is_a_leak(tmp_path, memscope_bin):
    p = run_script("series.py", tmp_path, "leak", 120)
    assert p.stdout.split()[0] == "leak", p.stdout
    v, text = analyze(memscope_bin, tmp_path / "series.steps.jsonl")
    assert v["verdict"] == "leak", text
    assert v["label"] == "heap live"
    # About 1 MiB a step: the 256 × 1024 f32 ReLU output the kept graph saves.
    assert 0.9 * 2**20 < v["slope_bytes_per_step"] < 1.3 * 2**20, v["slope_bytes_per_step"]


def test_a_buffer_filling_for_40_steps_is_a_plateau_after_warm_up(tmp_path, memscope_bin):
    p = run_script("series.py", tmp_path, "plateau", 120)
    assert p.stdout.split()[0] == "plateau", p.stdout
    v, text = analyze(memscope_bin, tmp_path / "series.steps.jsonl")
    assert v["verdict"] == "plateau", text
    assert abs(v["warmup_end_step"] - 40) <= 5, v["warmup_end_step"]
    assert int(p.stdout.split()[1]) == v["warmup_end_step"]


def test_sigkill_leaves_a_series_analyze_reads(tmp_path, memscope_bin):
    proc = subprocess.Popen(
        [sys.executable, "-m", "memscope", "run", str(SCRIPTS / "series.py"), "endless"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if int(line) >= 30:
                break
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "series.json").exists()
    lines = (tmp_path / "series.steps.jsonl").read_text().splitlines()
    assert len(lines) >= 31
    first = json.loads(lines[0])
    assert first["step"] == 0 and first["heap_live_bytes"] > 0
    v, text = analyze(memscope_bin, tmp_path / "series.steps.jsonl")
    assert v["n_samples"] >= 31, text
    assert v["verdict"] in ("plateau", "inconclusive"), text
