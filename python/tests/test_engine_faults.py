"""`--engine torch` under faults, through the memscope binary: a diverging run keeps its Record,
an interpreter that never answers is bounded, `leak` stops on SIGTERM within seconds keeping
what it measured, the engine dies with memscope (SIGKILL included), the estimate's cost does not
grow with --grad-accum, and flags the engine cannot honour are refused by name."""

import json
import os
import signal
import subprocess
import time

from conftest import load


def run(memscope_bin, *args, env=None, timeout=600, cwd=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([memscope_bin] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=timeout, env=e, cwd=cwd)


def children(pid):
    """Live processes whose parent is ``pid``."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(d))
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_diverging_run_keeps_its_record(memscope_bin, tmp_path):
    rec = tmp_path / "r.json"
    p = run(memscope_bin, "bench", "--engine", "torch", "--model", "tiny-gpt2", "--batch", "2",
            "--seq", "16", "--lr", "1e30", "--warmup", "1", "--steps", "3", "--json", rec, "-q")
    assert p.returncode == 0, p.stderr
    r = load(rec)
    assert any(x in ("NaN", "Infinity", "-Infinity") for x in r["loss"]), r["loss"]
    assert any("not finite numbers" in w for w in r["warnings"])


def test_an_interpreter_that_never_answers_is_bounded(memscope_bin, tmp_path):
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nexec sleep 600\n")
    fake.chmod(0o755)
    env = {"MEMSCOPE_PYTHON": str(fake), "MEMSCOPE_ENGINE_START_TIMEOUT": "2"}
    for args in (["bench", "--steps", "1", "--warmup", "0"], ["estimate"]):
        t0 = time.monotonic()
        p = run(memscope_bin, *args, "--engine", "torch", "--model", "tiny-gpt2", env=env,
                timeout=60)
        assert p.returncode != 0
        assert "did not start within 2 s" in p.stderr, p.stderr
        assert "MEMSCOPE_ENGINE_START_TIMEOUT" in p.stderr
        assert time.monotonic() - t0 < 30
    bad = run(memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-gpt2",
              env={"MEMSCOPE_ENGINE_START_TIMEOUT": "soon"})
    assert "MEMSCOPE_ENGINE_START_TIMEOUT=soon" in bad.stderr, bad.stderr


def start_leak(memscope_bin, tmp_path, settle=25):
    """`leak --engine torch` on gpt2-small (a step takes a fraction of a second on 2 cores, so
    400 steps take minutes), ``settle`` seconds after its engine started: by default once it has
    finished a few steps."""
    rec = tmp_path / "leak.json"
    proc = subprocess.Popen(
        [memscope_bin, "leak", "--engine", "torch", "--model", "gpt2-small", "--batch", "1",
         "--seq", "32", "--steps", "400", "--threads", "2", "--record", str(rec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not children(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    engine = children(proc.pid)
    assert engine, "the torch engine did not start"
    # By default: model built, primed and a few steps measured.
    time.sleep(settle)
    assert proc.poll() is None, proc.communicate()
    return proc, rec, engine[0]


def test_leak_stops_on_sigterm_within_seconds_and_keeps_what_it_measured(memscope_bin,
                                                                          tmp_path):
    proc, rec, _ = start_leak(memscope_bin, tmp_path)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    # A step (a second or two here) and the Record; the estimate's trace is not started.
    assert took < 10, f"took {took:.1f} s to stop"
    assert "stopped by a signal" in err, err
    r = load(rec)
    assert 1 <= r["spec"]["steps"] < 400
    assert any(w.startswith("stopped by SIGINT after") for w in r["warnings"]), r["warnings"]


def test_the_engine_dies_with_memscope_even_by_sigkill(memscope_bin, tmp_path):
    # Its death signal is set before the engine's Python starts: any moment after will do.
    proc, _, engine = start_leak(memscope_bin, tmp_path, settle=3)
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 5
    while alive(engine) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(engine), "the torch engine outlived memscope"


def test_the_estimate_does_not_grow_with_grad_accum(memscope_bin, tmp_path):
    peaks = {}
    for n in (3, 2000):
        out = tmp_path / f"e{n}.json"
        p = run(memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-gpt2",
                "--batch", "2", "--seq", "16", "--grad-accum", n, "--json", out, timeout=300)
        assert p.returncode == 0, p.stderr
        peaks[n] = json.loads(out.read_text())["by_dtype"]["f32"]["peak_bytes"]
    assert peaks[3] == peaks[2000]


def test_flags_the_torch_engine_cannot_honour_are_refused_by_name(memscope_bin, tmp_path):
    w = tmp_path / "w.safetensors"
    w.write_bytes(b"")
    cases = [
        (["bench", "--weights", w], "--weights"),
        (["bench", "--fusion", "none"], "--fusion none"),
        (["estimate", "--optimizer", "sgd"], "--optimizer sgd"),
    ]
    for args, flag in cases:
        p = run(memscope_bin, *args, "--engine", "torch", "--model", "tiny-gpt2", timeout=120)
        assert p.returncode == 2, (args, p.stderr)
        assert flag in p.stderr, (args, p.stderr)


def test_a_memory_limit_below_the_interpreters_needs_is_an_oom_row(memscope_bin, tmp_path):
    rows_file = tmp_path / "rows.jsonl"
    run(memscope_bin, "sweep", "--engine", "torch", "--model", "tiny-gpt2", "--batch", "1,2",
        "--seq", "16", "--steps", "1", "--warmup", "0", "--memory-limit", "64MiB", "--jsonl",
        rows_file, "-q", timeout=300)
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["oom", "skipped"], rows
    assert rows[0]["reason"].startswith("out of memory under --memory-limit 64"), rows[0]
    assert "pip install" not in rows[0]["reason"]


def test_torch_compile_without_a_compiler_says_why_in_one_line(memscope_bin, tmp_path):
    p = run(memscope_bin, "bench", "--engine", "torch", "--model", "tiny-gpt2", "--fusion",
            "compile", "--batch", "1", "--seq", "8", "--warmup", "0", "--steps", "1",
            env={"CXX": str(tmp_path / "no-such-g++"), "TORCHINDUCTOR_CACHE_DIR":
                 str(tmp_path / "cache")}, timeout=600)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "--fusion compile: torch.compile failed" in p.stderr, p.stderr[-3000:]
    assert "Traceback" not in p.stderr, p.stderr[-3000:]


def test_compare_and_diff_notice_unlike_records_before_any_verdict(memscope_bin, tmp_path):
    recs = {}
    for engine in ("candle", "torch"):
        recs[engine] = tmp_path / f"{engine}.json"
        p = run(memscope_bin, "bench", "--engine", engine, "--model", "tiny-gpt2", "--batch", "1",
                "--seq", "16", "--warmup", "1", "--steps", "2", "--json", recs[engine], "-q")
        assert p.returncode == 0, p.stderr
    c = run(memscope_bin, "compare", recs["candle"], recs["torch"])
    assert c.returncode == 2, c.stdout
    assert "engine: base memscope's own (candle) on cpu, new pytorch on cpu" in c.stderr, c.stderr
    assert "memory figures" in c.stderr and "regressed" not in c.stdout
    d = run(memscope_bin, "diff", recs["candle"], recs["torch"])
    assert d.returncode == 0, d.stderr
    assert d.stdout.startswith("**Unlike runs** (engine: base memscope's own"), d.stdout[:300]
