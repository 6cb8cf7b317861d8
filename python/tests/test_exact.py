"""Exact bytes on a tiny transformer whose truth is known (tests/scripts/tiny.py), recorded under
the counting allocator."""

from conftest import load, run_script

from pathlib import Path
import sys

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from tiny import PROBE_ELEMS, TEMP_ELEMS  # noqa: E402

MiB = 2**20


def marks(r, step, phase):
    return [m for m in r["memory"]["series"][step]["phases"] if m["phase"] == phase]


def test_parameters_optimizer_state_saved_tensor_and_backward_temporary(tmp_path):
    run_script("exact.py", tmp_path)
    r, truth = load(tmp_path / "exact.json"), load(tmp_path / "truth.json")
    assert truth["counting"], "the counting allocator was not preloaded"
    assert r["spec"]["engine"]["memory"] == "malloc usable"
    assert "config" not in r["spec"]

    # Parameters: Σ numel × element size.
    pb = truth["param_bytes"]
    assert r["model"]["param_bytes"] == pb == r["memory"]["param_bytes"]
    assert r["memory"]["breakdown"]["parameters"]["measured_bytes"] == pb
    for s in r["memory"]["series"]:
        for m in s["phases"]:
            assert m["heap_live_by_category"]["parameters"] == pb

    # AdamW after its first step: exp_avg + exp_avg_sq = 2 × parameters, plus one 4-byte f32
    # `step` counter per parameter tensor.
    opt = marks(r, 0, "optimizer")[0]["heap_live_by_category"]["optimizer_state"]
    assert opt == 2 * pb + 4 * truth["n_param_tensors"]
    assert r["memory"]["phases"]["optimizer"]["retained_bytes"] == opt

    # Gradients after backward: one per parameter, same bytes.
    assert marks(r, 3, "backward")[0]["heap_live_by_category"]["gradients"] == pb

    # The probe's saved tensor, to the byte, under its module.
    fwd = next(p for p in r["memory"]["peak_moments"] if p["phase"] == "forward")
    probe = [m["bytes"] for m in fwd["by_module"] if m["module"] == "probe"]
    assert probe == [PROBE_ELEMS * 4], fwd["by_module"]
    assert fwd["by_phase"]["activations"] >= PROBE_ELEMS * 4

    # The 64 MiB temporary freed inside backward (steps 4+): in backward's peak, not retained.
    # The script read the counter just before and after allocating it in step 7's backward.
    before, after = marks(r, 3, "backward")[0], marks(r, 7, "backward")[0]
    # The counter's raw reads, less what the session left out (the process before it started).
    live_without, live_with = (v - truth["baseline"] for v in truth["temp_live"][-1])
    assert truth["baseline"] > 0
    assert TEMP_ELEMS * 4 <= live_with - live_without <= TEMP_ELEMS * 4 + 8192
    assert after["heap_peak_bytes"] >= live_with
    assert before["heap_peak_bytes"] < live_without + TEMP_ELEMS * 4
    assert after["heap_live_by_category"]["gradients"] == before["heap_live_by_category"]["gradients"]
    live_change = abs(r["memory"]["series"][7]["heap_live_bytes"] - r["memory"]["series"][3]["heap_live_bytes"])
    assert live_change < MiB, live_change
    assert r["memory"]["phases"]["backward"]["peak_bytes"] >= after["heap_peak_bytes"]

    # Timing: the measured steps only, with memscope's statistics.
    for phase in ("forward", "backward", "optimizer", "step"):
        assert r["timing"][phase]["n"] == 6
    assert r["spec"]["warmup"] == 2 and r["spec"]["steps"] == 6
    assert len(r["loss"]) == 8


def test_gradient_accumulation_four_pairs_per_optimizer_step(tmp_path):
    run_script("exact.py", tmp_path, 4)
    r = load(tmp_path / "exact.json")
    assert r["spec"]["grad_accum"] == 4
    for s in r["memory"]["series"]:
        names = [m["phase"] for m in s["phases"]]
        assert names == ["forward", "backward"] * 4 + ["optimizer"], names
    assert len(r["memory"]["micro_steps"]) == 8 * 4
    assert [m["micro_step"] for m in r["memory"]["micro_steps"][:4]] == [0, 1, 2, 3]
