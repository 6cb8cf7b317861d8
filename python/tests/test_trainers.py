"""The Hugging Face Trainer and Lightning callbacks measure the same category bytes as the plain
loop for the same model, batch and optimizer."""

import pytest

from conftest import load, run_script

CATS = {"forward": "activations", "backward": "gradients", "optimizer": "optimizer_state"}


def categories(r):
    last = r["memory"]["series"][-1]
    out = {"parameters": r["model"]["param_bytes"]}
    for m in last["phases"]:
        if m["phase"] in CATS:
            out[CATS[m["phase"]]] = m["heap_live_by_category"].get(CATS[m["phase"]], 0)
    return out


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    d = tmp_path_factory.mktemp("plain")
    run_script("trainers.py", d, "plain")
    return load(d / "plain.json")


@pytest.mark.parametrize("kind", ["hf", "lightning"])
def test_callbacks_measure_what_the_plain_loop_measures(kind, plain, tmp_path):
    run_script("trainers.py", tmp_path, kind)
    r = load(tmp_path / f"{kind}.json")
    assert r["spec"]["steps"] == 4 and r["spec"]["warmup"] == 1
    assert [m["phase"] for m in r["memory"]["series"][-1]["phases"]] == \
        ["forward", "backward", "optimizer"]
    assert (r["spec"]["batch"], r["spec"]["seq"]) == (4, 32)
    want, got = categories(plain), categories(r)
    assert set(want) == set(got) == {"parameters", "activations", "gradients", "optimizer_state"}
    assert got["parameters"] == want["parameters"]
    assert got["gradients"] == want["gradients"]
    assert got["optimizer_state"] == want["optimizer_state"]
    # Saved activations: the same forward; within 1% (the Trainer passes num_items_in_batch to
    # the loss, which may save a different scalar).
    assert abs(got["activations"] - want["activations"]) <= 0.01 * want["activations"], (got, want)
    for phase in ("forward", "backward", "optimizer", "step"):
        assert r["timing"][phase]["n"] == 4


@pytest.mark.parametrize("kind", ["plain", "hf", "lightning"])
def test_gradient_accumulation_gives_pairs_per_optimizer_step(kind, tmp_path):
    run_script("trainers.py", tmp_path, kind, 2)
    r = load(tmp_path / f"{kind}.json")
    for s in r["memory"]["series"]:
        assert [m["phase"] for m in s["phases"]] == ["forward", "backward"] * 2 + ["optimizer"]
    assert r["spec"]["grad_accum"] == 2 and r["spec"]["batch"] == 2
    assert len(r["memory"]["micro_steps"]) == 2 * len(r["memory"]["series"])
