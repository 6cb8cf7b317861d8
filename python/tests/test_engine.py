"""`--engine torch`: memscope's commands on transformers' own models, run for real on the CPU
(torch, transformers), with the memscope binary (MEMSCOPE_BIN)."""

import json
import os
import subprocess

import pytest

from conftest import cli


def run(memscope_bin, *args, cwd=None, timeout=600):
    return subprocess.run([memscope_bin] + [str(a) for a in args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


def ok(p):
    assert p.returncode == 0, f"{p.args}:\n{p.stdout}\n{p.stderr}"
    return p


def presets(memscope_bin):
    return {m["name"]: m for m in json.loads(cli(memscope_bin, "models", "--json").stdout)}


# (gpt2-small's and cs336-small's counts are checked with their FLOPs below; tiny-gpt2's and
# tiny-llama's by every run of them, which the engine refuses when the counts differ.)
@pytest.mark.parametrize("model", ["tinyllama-1.1b", "bert-base", "distilbert", "tiny-bert"])
def test_transformers_parameter_counts_equal_memscopes(memscope_bin, tmp_path, model):
    # The estimator builds transformers' model (under FakeTensorMode: no memory) and the engine
    # refuses a count that differs from memscope's; the file says the count it found.
    out = tmp_path / "est.json"
    ok(run(memscope_bin, "estimate", "--engine", "torch", "--model", model, "--batch", "1",
           "--seq", "16", "--json", out))
    est = json.loads(out.read_text())
    assert est["kind"] == "torch-estimate"
    assert est["by_dtype"]["f32"]["params"] == presets(memscope_bin)[model]["params"]


@pytest.mark.parametrize("model", ["gpt2-small", "cs336-small"])
def test_the_traced_flops_equal_memscopes_analytic_count(memscope_bin, tmp_path, model):
    # The same model: the FLOPs of transformers' dispatched ops (the torch estimate's trace)
    # against memscope's own analytic count (its estimate), forward and backward, within 2%.
    shape = ["--model", model, "--batch", "2", "--seq", "128"]
    ok(run(memscope_bin, "estimate", *shape, "--json", tmp_path / "ours.json"))
    ok(run(memscope_bin, "estimate", "--engine", "torch", *shape, "--json",
           tmp_path / "torch.json"))
    ours = json.loads((tmp_path / "ours.json").read_text())["flops"]
    est = json.loads((tmp_path / "torch.json").read_text())["by_dtype"]["f32"]
    assert est["params"] == presets(memscope_bin)[model]["params"]
    traced = est["flops"]
    for phase in ("forward", "backward"):
        assert abs(traced[phase] - ours[phase]) <= 0.02 * ours[phase], (phase, traced, ours)


@pytest.mark.parametrize("model", ["gpt2-small", "cs336-small"])
def test_roofline_on_torch_times_every_op_kind_and_counts_memscopes_flops(memscope_bin, tmp_path,
                                                                          model):
    # Real steps with every ATen op timed: each op kind has a row, the remainder and the cost
    # of profiling are stated, and the FLOPs of the timed ops (forward and backward) are
    # memscope's analytic count within 2%: the same model.
    shape = ["--model", model, "--batch", "1", "--seq", "64"]
    ok(run(memscope_bin, "estimate", *shape, "--json", tmp_path / "ours.json"))
    p = ok(run(memscope_bin, "roofline", "--engine", "torch", *shape, "--warmup", "0",
               "--steps", "1", "--threads", "2", "--roofs", "100:10", "--json",
               tmp_path / "torch.json", "--csv", tmp_path / "torch.csv"))
    assert "unattributed" in p.stdout and "profiling overhead" in p.stdout
    assert "PyTorch's autograd engine" in p.stdout
    ours = json.loads((tmp_path / "ours.json").read_text())["flops"]
    rl = json.loads((tmp_path / "torch.json").read_text())
    assert rl["run"]["engine"] == "torch" and rl["run"]["isa"].startswith("PyTorch ")
    rows = rl["sections"][0]["ops"]
    kinds = {r["name"] for r in rows}
    assert kinds >= {"attention projections", "MLP projections", "LM head", "attention (SDPA)",
                     "norms", "activation", "embedding", "loss", "optimizer update",
                     "elementwise"}, kinds
    assert all(r["time_ms"] > 0 for r in rows if r["flops"] > 0)
    for pass_ in ("forward", "backward"):
        timed = sum(r["flops"] for r in rows if r["pass"] == pass_
                    and r["name"] != "optimizer update")
        assert abs(timed - ours[pass_]) <= 0.02 * ours[pass_], (pass_, timed, ours)
    step = rl["sections"][0]["step"]
    assert 0 < step["attributed_ms"] < step["time_ms"]


def test_profile_on_torch_draws_the_module_tree_of_prefill_and_decode(memscope_bin, tmp_path):
    p = ok(run(memscope_bin, "profile", "--engine", "torch", "--model", "tiny-llama", "--mode",
               "generate", "--batch", "2", "--prompt-len", "16", "--new-tokens", "3",
               "--warmup", "0", "--steps", "1", "--depth", "4", "--roofs", "100:10",
               "--json", tmp_path / "p.json"))
    trees = json.loads((tmp_path / "p.json").read_text())
    assert [t["name"] for t in trees] == ["prefill", "decode step"]
    for t in trees:
        names = {n["name"] for n in t["nodes"]}
        assert {"model", "embedding", "layer 0", "layer 0 attention", "layer 0 mlp",
                "layer 0 norms", "lm head + loss"} <= names, names
        assert all(n["bwd_ms"] == 0 for n in t["nodes"])
        assert t["nodes"][0]["fwd_ms"] > 0
    assert "unattributed remainder" in p.stdout and "PyTorch" in p.stdout


def test_bench_on_torch_writes_a_record_and_its_estimate_is_within_two_percent(memscope_bin,
                                                                                tmp_path):
    rec = tmp_path / "run.json"
    p = ok(run(memscope_bin, "bench", "--engine", "torch", "--model", "gpt2-small", "--batch",
               "1", "--seq", "64", "--warmup", "1", "--steps", "2", "--threads", "2",
               "--json", rec, cwd=tmp_path))
    assert "Breakdown" in p.stdout
    r = json.loads(rec.read_text())
    assert r["spec"]["torch"] == {"device": "cpu"}
    assert r["spec"]["engine"]["name"] == "pytorch"
    assert r["spec"]["engine"]["memory"] == "malloc usable"
    assert r["model"]["params"] == presets(memscope_bin)["gpt2-small"]["params"]
    assert r["model"]["family"] == "gpt2"
    assert set(r["timing"]) >= {"forward", "backward", "optimizer", "step"}
    assert r["timing"]["step"]["n"] == 2
    est, measured = r["memory"]["estimate"]["peak_bytes"], r["memory"]["heap_peak_bytes"]
    assert abs(est - measured) / measured < 0.02, (est, measured)
    # The same numbers memscope's own tools read.
    ok(run(memscope_bin, "report", rec, "--output", tmp_path / "r.html"))


def test_sweep_on_torch_gives_ok_oom_and_skipped_rows(memscope_bin, tmp_path):
    rows_file = tmp_path / "rows.jsonl"
    p = run(memscope_bin, "sweep", "--engine", "torch", "--model", "tiny-gpt2", "--batch",
            "1,64,128", "--seq", "128", "--steps", "1", "--warmup", "1", "--memory-limit",
            "1GiB", "--jsonl", rows_file, "-q", cwd=tmp_path)
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok", "oom", "skipped"], p.stderr
    oom = rows[1]
    assert oom["torch_oom"]["device"] == "cpu"
    assert oom["torch_oom"]["requested_bytes"] > 0
    assert "PyTorch ran out of memory on cpu" in oom["reason"]
    assert rows[0]["summary"]["heap_peak_bytes"] > 0


def test_optimize_on_torch_measures_every_pytorch_variant(memscope_bin, tmp_path):
    out = tmp_path / "opt.json"
    p = ok(run(memscope_bin, "optimize", "--engine", "torch", "--model", "tiny-llama",
               "--seq", "32", "--long-seq", "0", "--warmup", "1", "--steps", "1", "--json", out,
               "-q", cwd=tmp_path, timeout=900))
    variants = json.loads(out.read_text())["variants"]
    names = {v["name"] for v in variants}
    assert names == {"baseline (eager)", "SDPA attention", "torch.compile", "checkpointing",
                     "autocast bf16", "pure bf16", "all together"}, names
    for v in variants:
        assert v["status"] == "ok", v
        assert v["heap_peak_bytes"] > 0
    assert "Engine: Hugging Face transformers on PyTorch, cpu" in p.stdout


def test_peaks_on_torch_measures_the_roofs_and_the_estimate_predicts_time_from_them(memscope_bin, tmp_path):
    env = dict(os.environ, MEMSCOPE_CACHE_DIR=str(tmp_path / "cache"))
    args = ["peaks", "--engine", "torch", "--model", "tiny-gpt2", "--batch", "1", "--seq",
            "64", "--threads", "2"]
    out = tmp_path / "peaks.json"
    p = subprocess.run([memscope_bin, *args, "--json", str(out)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "measured now, cached in" in p.stdout and "Fixed cost of one small op" in p.stdout
    r = json.loads(out.read_text())
    assert r["device"] == "cpu" and r["threads"] == 2 and r["torch"]
    dtypes = {m["name"] for m in r["matmul"]}
    assert dtypes == {"f32", "bf16"}, dtypes
    for m in r["matmul"] + r["model_shapes"]:
        assert 0 < m["gflops"]["median"] <= m["gflops"]["best"] < 1e5, m
    # Each linear shape forward (64 rows), and the two products of its backward; then each
    # forward at one row a sequence, as a decode step runs it.
    names = [s["name"] for s in r["model_shapes"]]
    at = names.index("lm head")
    assert names[at:at + 4] == ["lm head", "lm head dx", "lm head dW", "lm head dW (Conv1D)"], \
        names
    head = r["model_shapes"][at]
    assert (head["m"], head["k"]) == (64, 128), head
    assert (r["model_shapes"][at + 2]["k"], r["model_shapes"][at + 2]["n"]) == (64, 128)
    one_row = r["model_shapes"][-1]
    assert names[-1] == "lm head, a row a sequence" and one_row["m"] == 1, names
    assert not any(n.startswith("lm head, a row a sequence d") for n in names), names
    assert 0 < r["triad_gbs"]["median"] <= r["triad_gbs"]["best"] < 1e4
    # One small op costs between 50 ns and 1 ms of dispatch.
    assert 1e3 < r["small_ops_per_s"]["best"] < 2e7, r["small_ops_per_s"]
    # The host's cost per op, from the model's own step at the smallest widths: each phase's
    # between a bare op's and 10 ms.
    assert r["host_model"] == "tiny-gpt2"
    assert set(r["host_us_per_op"]) == {"forward", "backward", "optimizer", "forward_no_grad"}
    bare_us = 1e6 / r["small_ops_per_s"]["best"]
    assert all(0.5 * bare_us < us < 1e4 for us in r["host_us_per_op"].values()), r
    # The second call reads the cache: the same figures, no Python started.
    again = subprocess.run([memscope_bin, *args, "--json", str(tmp_path / "again.json")],
                           capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 0, again.stderr
    assert "cached in" in again.stdout and "measured now" not in again.stdout, again.stdout
    assert json.loads((tmp_path / "again.json").read_text()) == r
    # The estimate predicts the step's time from its traced ops at these roofs.
    est = tmp_path / "est.json"
    p = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-gpt2",
                        "--batch", "1", "--seq", "64", "--threads", "2", "--json", str(est)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "Predicted step time, f32" in p.stdout and "matmul" in p.stdout, p.stdout
    assert "the host's µs per op of tiny-gpt2's own step" in p.stdout, p.stdout
    predicted = json.loads(est.read_text())["by_dtype"]["f32"]["predicted_ms"]
    assert set(predicted) == {"forward", "backward", "optimizer", "step"}, predicted
    assert 0 < predicted["forward"] < predicted["step"] < 60_000, predicted
    assert abs(sum(v for k, v in predicted.items() if k != "step") - predicted["step"]) < 1e-6
    # A run writes the prediction beside its measured times, and says both.
    rec = tmp_path / "run.json"
    p = subprocess.run([memscope_bin, "bench", "--engine", "torch", "--model", "tiny-gpt2",
                        "--batch", "1", "--seq", "64", "--threads", "2", "--warmup", "0",
                        "--steps", "2", "--json", str(rec)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "Predicted before the run" in p.stdout and "ms measured" in p.stdout, p.stdout
    r = json.loads(rec.read_text())
    assert set(r["memory"]["estimate"]["predicted_ms"]) == set(predicted)
    assert r["timing"]["step"]["median_ms"] > 0
    # Without roofs for that thread count it says how to measure them.
    p = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-gpt2",
                        "--batch", "1", "--seq", "64", "--threads", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert "memscope peaks --engine torch --device cpu --threads 1" in p.stdout, p.stdout
    # The peaks file is a profile: the same prediction from it, at any thread count (said so),
    # with tokens a second, MFU and a run's hours from the predicted step.
    est1 = tmp_path / "est1.json"
    p = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-gpt2",
                        "--batch", "1", "--seq", "64", "--threads", "1", "--profile", str(out),
                        "--run-tokens", "64K", "--json", str(est1)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "measured at 2 threads, this estimate is for --threads 1" in p.stdout, p.stdout
    e1 = json.loads(est1.read_text())["by_dtype"]["f32"]
    assert e1["predicted_ms"] == predicted
    t = e1["throughput"]
    assert t["tokens_per_step"] == 64
    assert abs(t["tokens_per_s"] - 64 / (predicted["step"] / 1e3)) < 1e-6 * t["tokens_per_s"]
    assert t["job_tokens_per_s"] == t["tokens_per_s"]
    assert t["job_tokens_per_s_bounds"] == [t["tokens_per_s"]] * 2
    roofs = json.loads(out.read_text())
    best = max(m["gflops"]["best"] for m in roofs["matmul"] if m["name"] == "f32")
    flops = json.loads(est1.read_text())["by_dtype"]["f32"]["flops"]["total"]
    assert abs(t["mfu"] - flops / (predicted["step"] / 1e3) / (best * 1e9)) < 1e-9
    # 64,000 tokens are 1,000 steps.
    assert abs(t["run_hours"] - 1000 * predicted["step"] / 3.6e6) < 1e-9
    assert "--run-tokens 64,000:" in p.stdout and "MFU" in p.stdout, p.stdout
    # A profile of another device kind is refused, naming both.
    p = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-gpt2",
                        "--device", "cuda", "--profile", str(out)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 2 and "was measured on cpu" in p.stderr, p.stderr
    p = subprocess.run([memscope_bin, "peaks", "--engine", "torch", "--device", "cuda"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and "--device cuda" in p.stderr and "no CUDA GPU" in p.stderr


def test_device_flags_are_checked(memscope_bin, tmp_path):
    p = run(memscope_bin, "bench", "--device", "cuda")
    assert p.returncode == 2
    assert "--device cuda needs --engine torch" in p.stderr
    p = run(memscope_bin, "bench", "--engine", "torch", "--device", "gpu0")
    assert p.returncode == 2
    assert "--device gpu0: use cpu, cuda or cuda:N" in p.stderr
    p = run(memscope_bin, "roofline", "--engine", "torch", "--model", "tiny-gpt2", "--fusion",
            "compile")
    assert p.returncode == 2
    assert "--fusion compile: roofline and profile time every ATen op" in p.stderr
    p = run(memscope_bin, "bench", "--fusion", "compile")
    assert p.returncode == 2
    assert "--fusion compile is torch.compile: it needs --engine torch" in p.stderr


def test_counting_switched_off_is_honoured_by_the_torch_engine(memscope_bin, tmp_path):
    # MEMSCOPE_NO_COUNT=1: the engine runs without the counting allocator and its Record says
    # its figures are RSS, as memscope's own engine's says it counted nothing.
    env = {**os.environ, "MEMSCOPE_NO_COUNT": "1"}
    p = subprocess.run([memscope_bin, "bench", "--engine", "torch", "--model", "tiny-gpt2",
                        "--seq", "32", "--warmup", "1", "--steps", "2", "--json",
                        str(tmp_path / "r.json")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["spec"]["engine"]["memory"], r["memory"]["counting"]) == ("rss", False)


def test_a_cuda_job_without_a_gpu_says_so(memscope_bin, tmp_path):
    # Not "use --nproc 0 or fewer", which is itself refused: the device, and what to run instead.
    p = subprocess.run([memscope_bin, "bench", "--engine", "torch", "--device", "cuda",
                        "--nproc", "2", "--parallel", "ddp", "--model", "tiny-gpt2", "--seq",
                        "32", "--steps", "1"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "--device cuda: this PyTorch" in p.stderr and "sees no CUDA GPU here" in p.stderr, \
        p.stderr
    assert "--nproc 0" not in p.stderr, p.stderr


def test_a_missing_interpreter_is_named(memscope_bin, tmp_path):
    p = subprocess.run([memscope_bin, "bench", "--engine", "torch", "--model", "tiny-gpt2"],
                       capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "MEMSCOPE_PYTHON": "/nonexistent/python3"})
    assert p.returncode == 2
    assert "/nonexistent/python3" in p.stderr and "MEMSCOPE_PYTHON" in p.stderr


def test_a_token_file_feeds_the_torch_engine_and_a_bad_id_is_named(memscope_bin, tmp_path):
    import numpy as np
    good, bad = tmp_path / "tok.bin", tmp_path / "bad.bin"
    np.random.default_rng(1).integers(0, 1000, size=5000).astype(np.uint16).tofile(good)
    np.array([5, 2000, 7] * 100, dtype=np.uint16).tofile(bad)
    rec = tmp_path / "run.json"
    ok(run(memscope_bin, "bench", "--engine", "torch", "--model", "tiny-gpt2", "--data", good,
           "--seq", "32", "--warmup", "0", "--steps", "2", "--json", rec, "-q", cwd=tmp_path))
    r = json.loads(rec.read_text())
    assert r["data"] == {"path": str(good), "dtype": "u16", "tokens": 5000}
    p = run(memscope_bin, "bench", "--engine", "torch", "--model", "tiny-gpt2", "--data", bad,
            "--seq", "32", "--warmup", "0", "--steps", "2", "-q", cwd=tmp_path)
    assert p.returncode == 2
    # memscope's own reader's message, the same on both engines: the id, where, the fix.
    assert p.stderr.count("token id 2000 at position") == 1, p.stderr
    assert "is outside the model's vocabulary of 1000 ids (vocab_size)" in p.stderr, p.stderr


def test_the_torch_engine_reads_memscope_s_own_windows(tmp_path):
    # Batch k, row r: the window of seq + 1 tokens at splitmix64(seed, k·B + r) mod (N − seq)
    # (docs/data.md), read by src/input/tokens.rs for both engines; inputs are its first seq.
    import numpy as np
    from memscope._workers.inputs import tokens as _tokens
    mask = (1 << 64) - 1

    def splitmix64(seed, j):
        z = (seed + (j + 1) * 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    ids = np.arange(3000, dtype=np.uint32)  # each id is its position
    path = tmp_path / "tok.bin"
    ids.tofile(path)
    fields = {"batch": 3, "seq": 16, "seed": 7, "mode": "train", "prompt_len": 8,
              "data": {"path": str(path), "bin_dtype": "u32"}}

    def spec(**changed):
        # The engine reads its Spec through the contract (the request's, by field name).
        from memscope._contract import View, schema
        return View(dict(fields, **changed), schema()["$defs"]["Spec"], "spec")
    draw = _tokens(np, spec(), 4000)
    for k in range(4):
        got = draw()
        starts = [splitmix64(7, k * 3 + r) % (3000 - 16) for r in range(3)]
        assert got.dtype == np.int64 and got.shape == (3, 16)
        assert got.tolist() == [list(range(s, s + 16)) for s in starts], k
    # Generation reads windows of the prompt's length.
    gen = _tokens(np, spec(mode="generate"), 4000)()
    assert gen.shape == (3, 8)
    assert gen[:, 0].tolist() == [splitmix64(7, r) % (3000 - 8) for r in range(3)]
