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
    assert any("RSS" in w for w in r["warnings"])
    assert [p["phase"] for p in r["memory"]["series"][0]["phases"]] == \
        ["forward", "backward", "optimizer"]
    pb = sum(p.numel() * 4 for p in m.parameters())
    assert r["memory"]["series"][-1]["phases"][1]["heap_live_by_category"]["gradients"] == pb
    assert list(tmp_path.iterdir()) == []
    v = ms.leak_verdict()
    assert v["verdict"] == "inconclusive" and v["n_samples"] == 3


def test_errors_name_what_to_fix():
    m, opt, _ = tiny()
    with pytest.raises(ValueError, match="record_fields"):
        memscope.Session(m, opt, record_fields={"memory": {}})
    with pytest.raises(ValueError, match="warmup"):
        memscope.Session(m, opt, warmup=-1)
    ms = memscope.Session(m, opt, record=None, record_fields={"spec": {"batch": "eight"}})
    with pytest.raises(ValueError, match="does not fit its schema"):
        with ms:
            m(torch.randn(2, 16)).sum().backward()
            ms.step()
    # Refused when the session is made, before the loop runs.
    with pytest.raises(ValueError, match="float64"):
        memscope.Session(m.double(), opt, record=None)
