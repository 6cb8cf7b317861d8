"""The recorder's profiling window (``Session(..., profile=range(5, 8))``): the window's steps
have every ATen op timed and charged to its module; the Record carries them, the timing
statistics are the other steps', and ``memscope report`` draws the op kinds, the module tree
and the hotspots (checked in headless Chromium)."""

import json
import threading

import pytest
import torch

import memscope
from conftest import cli, rendered_dom, run_script


@pytest.mark.parametrize("profile", [[], range(-1, 2), "abc", [1.5], 3])
def test_a_bad_window_is_refused_when_the_session_is_made(profile, tmp_path):
    model = torch.nn.Linear(4, 4)
    with pytest.raises(ValueError, match="profile="):
        memscope.Session(model, record=tmp_path / "r.json", profile=profile)
    assert not (tmp_path / "r.json").exists()


def test_a_window_the_run_never_reaches_is_said(tmp_path):
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with memscope.Session(model, opt, record=tmp_path / "r.json", warmup=0,
                          profile=range(10, 12)) as ms:
        for _ in range(3):
            model(torch.randn(2, 8)).sum().backward()
            opt.step()
            ms.step()
    r = json.loads((tmp_path / "r.json").read_text())
    assert "profile" not in r
    assert any("profile=[10, 11]: no step of the window ran" in w for w in r["warnings"])


def test_a_window_past_the_run_is_not_made_into_its_steps(tmp_path):
    # range(2, 10**7) on a 5-step run: the Record holds the window's steps the run had, and
    # every measured step profiled is said (their times include the op timer's).
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with memscope.Session(model, opt, record=tmp_path / "r.json", warmup=2,
                          profile=range(2, 10**7)) as ms:
        for _ in range(5):
            model(torch.randn(2, 8)).sum().backward()
            opt.step()
            ms.step()
    assert (tmp_path / "r.json").stat().st_size < 2**20
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["profile"]["asked"] == [2, 3, 4] and r["profile"]["steps"] == [2, 3, 4]
    assert any("every measured step was profiled" in w for w in r["warnings"]), r["warnings"]


def test_another_sessions_model_and_another_thread_are_not_charged_to_unknown_modules(tmp_path):
    # Session a profiles its steps 1-2 while Session b's model trains between them and another
    # thread runs a third model: their modules are not a's, and were charged as module "?".
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    b = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    c = torch.nn.Sequential(torch.nn.Linear(8, 8))
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
    x = torch.randn(4, 8)
    done = threading.Event()

    def other():
        while not done.is_set():
            with torch.no_grad():
                c(x)
    t = threading.Thread(target=other)
    t.start()
    try:
        with memscope.Session(a, opt_a, record=tmp_path / "a.json", warmup=1,
                              profile=[1, 2]) as ms_a:
            with memscope.Session(b, opt_b, record=tmp_path / "b.json", warmup=1) as ms_b:
                for _ in range(4):
                    a(x).sum().backward()
                    opt_a.step()
                    opt_a.zero_grad()
                    ms_a.step()
                    b(x).sum().backward()
                    opt_b.step()
                    opt_b.zero_grad()
                    ms_b.step()
    finally:
        done.set()
        t.join()
    r = json.loads((tmp_path / "a.json").read_text())
    modules = {o["module"] for o in r["profile"]["ops"]}
    assert "?" not in modules, modules
    assert {"0", "2"} <= modules, modules


def test_the_window_adds_ops_by_module_and_the_report_draws_them(memscope_bin, tmp_path):
    run_script("profiled.py", tmp_path, tmp_path / "run.json")
    r = json.loads((tmp_path / "run.json").read_text())
    p = r["profile"]
    assert p["steps"] == [3, 4] and p["asked"] == [3, 4] and p["device"] == "cpu"
    assert p["profiled_step_ms"] > 0 and p["plain_step_ms"] > 0
    # The timing statistics are the four measured steps outside the window.
    assert r["timing"]["step"]["n"] == 4
    assert any("steps [3, 4] were profiled" in w for w in r["warnings"])
    by = {(o["phase"], o["module"]) for o in p["ops"]}
    # Forward ops in the blocks' modules; backward ops charged to the module whose forward
    # made them; the optimizer outside every module.
    assert ("forward", "transformer.h.0.attn.c_attn") in by
    assert ("backward", "transformer.h.1.mlp.c_fc") in by
    assert ("optimizer", "") in by
    ops = {o["op"] for o in p["ops"]}
    assert {"aten.addmm.default", "aten._fused_adamw_.default"} <= ops, ops
    assert all(o["seconds"] >= 0 and o["calls"] > 0 for o in p["ops"])
    assert sum(o["seconds"] for o in p["ops"]) * 1e3 < p["profiled_step_ms"]
    # Each module's temporaries, from the counted allocator: attention's intermediates (its
    # split heads, the mask) die inside it; none exceeds the forward's peak.
    temps = {t["module"]: t["bytes"] for t in p["temporaries"]}
    assert temps.get("transformer.h.0.attn", 0) > 0, temps
    assert max(temps.values()) <= r["memory"]["heap_peak_bytes"], temps

    page = tmp_path / "report.html"
    cli(memscope_bin, "report", tmp_path / "run.json", "-o", page)
    dom = rendered_dom(page, tmp_path)
    at = dom.find('id="profile"')
    assert at > 0, "the profiled steps' section is missing from the rendered page"
    section = dom[at:dom.find("</section>", at)]
    for text in ("Profiled steps [3, 4]", "profiling cost", "time by op kind", "matmul",
                 "optimizer update", "Module time tree", "transformer.h.1", "Hotspots by time",
                 "Hotspots by memory (counted malloc)", "saved for backward"):
        assert text in section, text
