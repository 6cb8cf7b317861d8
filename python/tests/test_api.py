"""The session's API in this process (no preload: CPU figures are RSS, categories still exact):
hand-marked phases, no file, fields set by a caller, errors that name what to fix."""

import pytest
import torch
import torch.nn as nn

import memscope


def tiny():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return m, torch.optim.SGD(m.parameters(), lr=0.1), torch.randn(8, 16)


def test_hand_marked_phases_no_file_and_caller_fields(tmp_path):
    m, opt, x = tiny()
    ms = memscope.Session(m, opt, record=None, warmup=1, auto_phases=False,
                          record_fields={"spec": {"model": "tiny-mlp", "seed": 7}})
    with ms:
        for _ in range(3):
            with ms.phase("forward"):
                loss = m(x).sum()
            with ms.phase("backward"):
                loss.backward()
            with ms.phase("optimizer"):
                opt.step()
                opt.zero_grad()
            ms.step(loss)
    r = ms.record
    assert (r["spec"]["model"], r["spec"]["seed"]) == ("tiny-mlp", 7)
    assert r["spec"]["engine"]["memory"] == "rss"
    assert r["environment"]["isa"].endswith("(PyTorch's CPU kernels)"), r["environment"]
    assert any("RSS" in w for w in r["warnings"])
    assert [p["phase"] for p in r["memory"]["series"][0]["phases"]] == \
        ["forward", "backward", "optimizer"]
    pb = sum(p.numel() * 4 for p in m.parameters())
    assert r["memory"]["series"][-1]["phases"][1]["heap_live_by_category"]["gradients"] == pb
    assert list(tmp_path.iterdir()) == []
    v = ms.leak_verdict()
    assert v["verdict"] == "inconclusive" and v["n_samples"] == 3


@pytest.mark.parametrize("warmup", [1, 2])
def test_the_peak_moments_are_a_steady_step_s_with_the_optimizer_state(warmup):
    # With one warm-up step, that step is the first: no optimizer state yet while its forward
    # and backward ran. The moments are then the latest step's, as with the candle engine.
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.AdamW(m.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    with memscope.Session(m, opt, record=None, warmup=warmup) as ms:
        for _ in range(warmup + 2):
            loss = m(x).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            ms.step(loss)
    r = ms.record
    state = r["memory"]["breakdown"]["optimizer_state"]["measured_bytes"]
    assert state > 0
    for moment in r["memory"]["peak_moments"]:
        assert moment["by_phase"].get("optimizer_state") == state, moment


def test_errors_name_what_to_fix():
    m, opt, _ = tiny()
    with pytest.raises(ValueError, match="record_fields"):
        memscope.Session(m, opt, record_fields={"memory": {}})
    with pytest.raises(ValueError, match="warmup"):
        memscope.Session(m, opt, warmup=-1)
    # A caller's field of the wrong type, or one the Record does not have, is refused when the
    # session is made, naming it, not when the Record is written after the loop.
    with pytest.raises(ValueError, match=r"record_fields\['spec'\]\['batch'\]: expected integer"):
        memscope.Session(m, opt, record=None, record_fields={"spec": {"batch": "eight"}})
    with pytest.raises(ValueError, match=r"the Record's model has no field 'nmae'"):
        memscope.Session(m, opt, record=None, record_fields={"model": {"nmae": "x"}})
    # A function where the model goes, a loss that is not one number: said by the API's names.
    with pytest.raises(TypeError, match=r"Session\(model=…\): give the torch.nn.Module"):
        memscope.Session(tiny, opt, record=None)
    with memscope.Session(m, opt, record=None, warmup=0) as ms:
        loss = m(torch.randn(2, 16))
        loss.sum().backward()
        with pytest.raises(ValueError, match=r"got a tensor of shape \(2, 4\): reduce it"):
            ms.step(loss)
        ms.step(loss.sum())
    assert len(ms.record["memory"]["series"]) == 1
    # Refused when the session is made, before the loop runs.
    with pytest.raises(ValueError, match="float64"):
        memscope.Session(m.double(), opt, record=None)


def test_no_step_recorded_is_said_not_silent(tmp_path):
    script = tmp_path / "eval_only.py"
    script.write_text("""
import torch, torch.nn as nn, memscope
m = nn.Linear(4, 4)
with memscope.Session(m, None, record="run.json"):
    with torch.no_grad():
        m(torch.randn(2, 4))
""")
    import subprocess
    import sys
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "no step recorded, so no Record written to" in p.stderr, p.stderr
    assert "ms.phase(" in p.stderr, p.stderr
    assert not (tmp_path / "run.json").exists()


@pytest.mark.parametrize("advice, knob", [("python", "raise Session(warmup=…)"),
                                          ("cli", "add --warmup")])
def test_the_records_advice_names_the_knobs_of_who_ran_it(advice, knob):
    # A slow first measured step: a user's loop is told Session(warmup=…), memscope's command
    # line (the torch engine sets advice="cli") its --warmup flag.
    import time
    m, opt, x = tiny()
    ms = memscope.Session(m, opt, record=None, warmup=0, auto_phases=False)
    ms.advice = advice
    with ms:
        for i in range(6):
            with ms.phase("forward"):
                time.sleep(0.05 if i == 0 else 0.005)
            ms.step()
    assert any(knob in w for w in ms.record["warnings"]), ms.record["warnings"]
