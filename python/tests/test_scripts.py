"""Every script in scripts/ that makes a table in docs/ runs here once, at its smallest size: the
table it prints has its header and a row of figures, so a documented reproduction command cannot
rot unnoticed. The figures themselves are benchmarks (docs/), not asserted here. Not here: the
device checks (scripts/gpu_check.sh: tests/pytorch_record.rs and test_gpu_check.py check what runs
without a GPU; scripts/cpu_host_check.sh, which chains the engine's peaks, bench and
compare_torch.py, the last one smoke-run below)."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPTS = ROOT / "scripts"


def run(memscope_bin, tmp_path, *cmd, timeout=300):
    env = dict(os.environ, MEMSCOPE_BIN=memscope_bin)
    p = subprocess.run([str(c) for c in cmd], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def table_rows(text, first_cell):
    """The Markdown rows of ``text`` whose first cell starts with ``first_cell``."""
    return [line for line in text.splitlines()
            if line.startswith("|") and line.strip("| ").startswith(first_cell)]


def python(script, *args):
    return (sys.executable, SCRIPTS / script, *args)


def test_check_torch_estimate_prints_a_row_per_workload(memscope_bin, tmp_path):
    out = run(memscope_bin, tmp_path, *python(
        "check_torch_estimate.py", "--models", "tiny-gpt2", "--batch", "1", "--seq", "32",
        "--steps", "2", "--memscope", memscope_bin))
    rows = table_rows(out, "tiny-gpt2 train 1 × 32 f32")
    assert len(rows) == 1 and "MiB" in rows[0] and "%" in rows[0], out


def test_check_torch_time_prints_each_phase_measured_and_predicted(memscope_bin, tmp_path):
    out = run(memscope_bin, tmp_path, *python(
        "check_torch_time.py", "--workloads", "tiny-train", "--steps", "2", "--threads", "1",
        "--memscope", memscope_bin))
    phases = {r.split("|")[2].strip() for r in table_rows(out, "tiny-train")}
    assert {"forward", "backward", "optimizer", "step"} <= phases, out


def test_check_parallel_sets_the_prediction_against_each_rank(memscope_bin, tmp_path):
    out = run(memscope_bin, tmp_path, *python(
        "check_parallel.py", "--models", "tiny-gpt2", "--worlds", "2", "--plans", "ddp,fsdp",
        "--batch", "2", "--seq", "32", "--steps", "3", "--tolerance", "100"))
    rows = table_rows(out, "tiny-gpt2 | 2 |")
    assert [r.split("|")[3].strip() for r in rows] == ["ddp", "fsdp"], out
    # FSDP2's row has PyTorch's own tracker beside it; each row both ranks' peaks.
    assert "MiB (+" in rows[1] or "MiB (-" in rows[1], out
    assert all(r.rstrip(" |").endswith("MiB") and r.count(" / ") >= 1 for r in rows), out


def test_check_collectives_finds_the_predicted_calls_exact(memscope_bin, tmp_path):
    env = dict(MODELS="tiny-gpt2", PLANS="ddp", NPROC="2", BATCH="1", SEQ="32",
               OUT=str(tmp_path))
    out = run(memscope_bin, tmp_path, "env", *[f"{k}={v}" for k, v in env.items()], "bash",
              SCRIPTS / "check_collectives.sh")
    rows = table_rows(out, "tiny-gpt2 | ddp | all_reduce")
    assert len(rows) == 1 and rows[0].rstrip(" |").endswith("yes"), out


def test_compare_formulas_prints_checkpointing_off_and_on(memscope_bin, tmp_path):
    out = run(memscope_bin, tmp_path, *python(
        "compare_formulas.py", "--models", "tiny-llama", "--nproc", "2", "--batch", "1",
        "--seq", "32"))
    rows = table_rows(out, "tiny-llama | 32 |")
    assert [r.split("|")[3].strip() for r in rows] == ["no", "yes"], out
    assert all(r.rstrip(" |").endswith("fits") for r in rows), out


def test_compare_torch_times_both_engines_on_one_case(memscope_bin, tmp_path):
    out = run(memscope_bin, tmp_path, *python(
        "compare_torch.py", "--cases", "d", "--rounds", "1", "--steps", "1", "--warmup", "1",
        "--threads", "1", "--memscope", memscope_bin, "--json", tmp_path / "raw.json"))
    rows = table_rows(out, "(d) gpt2-tiny-8k")
    assert len(rows) == 1 and "×" in rows[0], out
    assert (tmp_path / "raw.json").stat().st_size > 0


def test_check_transformers_finds_the_losses_equal(memscope_bin, tmp_path):
    out = run(memscope_bin, tmp_path, *python(
        "check_transformers.py", "--batches", "1", "--batch", "1", "--seq", "16",
        "--memscope", memscope_bin))
    assert "all within tolerance" in out, out
    assert sum(line.rstrip().endswith("ok") for line in out.splitlines()) >= 4, out


def test_bench_engine_overhead_gives_the_ratio_with_its_range(memscope_bin, tmp_path):
    out = run(memscope_bin, tmp_path, *python(
        "bench_engine_overhead.py", "--model", "tiny-gpt2", "--batch", "1", "--seq", "32",
        "--rounds", "1", "--warmup", "1", "--steps", "2", "--memscope", memscope_bin))
    assert "engine / plain: ×" in out and "(rounds " in out, out


def test_bench_recorder_overhead_gives_both_ratios(memscope_bin, tmp_path):
    out = run(memscope_bin, tmp_path, *python("bench_recorder_overhead.py", "--rounds", "1",
                                              "--steps", "2"))
    assert "session / plain: median" in out and "counted / plain: median" in out, out


@pytest.mark.parametrize("rate", [0, 4096])
def test_leak_calibration_counts_each_verdict(memscope_bin, tmp_path, rate):
    # One series of the calibration set's shape: 400 steps, level or growing by `rate` B/step.
    folder = tmp_path / "set"
    folder.mkdir()
    lines = ["step,bytes"] + [f"{s},{2 ** 30 + rate * s + (s * 7919) % 13 * 1000}"
                              for s in range(400)]
    (folder / f"0000-smoke-{rate}.csv").write_text("\n".join(lines) + "\n")
    out = run(memscope_bin, tmp_path, *python("leak_calibration.py", memscope_bin, folder))
    verdict = "plateau" if rate == 0 else "leak"
    assert f"{{'{verdict}': 1}}" in out, out
    assert "false leak (leak on a no-leak series): 0/" in out, out
