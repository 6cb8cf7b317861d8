"""`bench` and `sweep --engine torch --nproc N --parallel PLAN` measured: every rank a real
process of a torchrun job (gloo on the CPU), recorded by its own recorder; the Record is the worst
rank's and holds every rank's figures. A rank out of memory is an `oom` row naming it, a hung rank
a `timeout` row, and no process of the job outlives the sweep."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import load, own_processes

TINY = ["--engine", "torch", "--model", "tiny-gpt2", "--seq", "32", "--warmup", "1",
        "--steps", "2"]


def engines_left():
    """This test run's engine processes still running (every rank runs
    `memscope._workers.engine`)."""
    return own_processes(b"memscope._workers.engine")


# Tensor parallelism on tiny-llama: transformers plans no tensor parallelism for GPT-2.
@pytest.mark.parametrize("plan,model", [("ddp", "tiny-gpt2"), ("fsdp", "tiny-gpt2"),
                                        ("tp:2", "tiny-llama")])
def test_bench_records_every_rank_and_keeps_the_worst(memscope_bin, tmp_path, plan, model):
    out = tmp_path / "run.json"
    flags = [model if a == "tiny-gpt2" else a for a in TINY]
    flags += ["--batch", "2", "--nproc", "2", "--parallel", plan]
    p = subprocess.run([memscope_bin, "bench", *flags, "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    r = load(out)
    ranks = r["ranks"]
    assert [f["rank"] for f in ranks] == [0, 1]
    worst = [f for f in ranks if f["worst"]]
    assert len(worst) == 1
    assert worst[0]["peak_bytes"] == max(f["peak_bytes"] for f in ranks) \
        == r["memory"]["heap_peak_bytes"]
    name, _, tp = plan.partition(":")
    assert r["spec"]["torch"]["parallel"] == {"plan": name, "world": 2, "tp": int(tp or 1),
                                              "nodes": 1}
    # Each rank's parameters, gradients and AdamW state are its own (a shard under FSDP2, the
    # whole model under DDP), measured from the tensors, and the trace of one rank under the
    # fake process group predicted them to the byte.
    b = r["memory"]["breakdown"]
    for cat in ("parameters", "gradients", "optimizer_state"):
        assert b[cat]["measured_bytes"] == b[cat]["estimated_bytes"], (cat, b[cat])
    whole = r["model"]["param_bytes"]
    local = whole if plan == "ddp" else b["parameters"]["estimated_bytes"]
    if plan == "ddp":
        # DDP's reducer's flat buckets, made as the model was wrapped: a category measured as
        # predicted, not "unattributed" bytes.
        assert b["gradient_buckets"]["measured_bytes"] == whole \
            == b["gradient_buckets"]["estimated_bytes"], b
        assert "gradient buckets (DDP)" in p.stdout, p.stdout
    if plan in ("ddp", "fsdp"):
        # The saved activations as the trace predicts them, to a few bytes: under FSDP2 an
        # activation saved at the address of a gathered parameter it had freed was lost.
        a = b["activations"]
        assert abs(a["measured_bytes"] - a["estimated_bytes"]) <= 64, a
    if plan == "fsdp":
        assert b["gathered_parameters"]["measured_bytes"] > 0, b
        assert "collective buffers (FSDP2)" in p.stdout and "— (within temporaries)" in p.stdout
    assert all(f["parameter_bytes"] == local for f in ranks), ranks
    if plan == "fsdp":
        assert whole / 2 <= local < whole / 2 + 4 * 1000 * 128  # padded row shards
    if plan == "tp:2":
        # The projections split in two; embeddings, norms and the LM head whole on each rank.
        # 4 blocks: q and o 128×128, k and v 128×64 (2 key/value heads of 32), gate, up and
        # down 128×352, in f32.
        blocks = 4 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 352) * 4
        assert local == whole - blocks // 2, (local, whole)
    # The collectives each rank ran in its last step are the ones the trace predicted: bytes
    # to the byte, and the calls (FSDP2's all-gathers and reduce-scatters counted where it
    # calls them; DDP's bucket all-reduces read from its reducer).
    est = tmp_path / "est.json"
    e = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", model,
                        "--batch", "2", "--seq", "32", "--nproc", "2", "--parallel", plan,
                        "--link", "25,10", "--json", str(est)],
                       capture_output=True, text=True, timeout=300)
    assert e.returncode == 0, e.stderr
    predicted = load(est)["by_dtype"]["f32"]
    assert all(f["collectives"] == predicted["collectives"] for f in ranks), \
        ([f["collectives"] for f in ranks], predicted["collectives"])
    kinds = {"ddp": ["all_reduce"], "fsdp": ["all_gather", "reduce_scatter"],
             "tp:2": ["all_reduce"]}[plan]
    assert all(c["group"] == 2 for c in predicted["collectives"].values())
    assert sorted(predicted["collectives"]) == kinds
    assert predicted["communication_ms"]["total"] > 0 and "over --link 25,10" in e.stdout
    assert f"{plan} over 2 ranks: rank {worst[0]['rank']}" in p.stdout, p.stdout
    if plan == "tp:2":
        assert "this rank's shards of 994,432 params" in p.stdout, p.stdout
    if plan == "fsdp":
        # FSDP2's gathered parameters are a category of their own, read from FSDP2's own
        # parameters: as the forward ends only the root's are gathered (kept to its backward):
        # wte 1000×128, wpe 256×128 and ln_f, whole, f32 (autograd saved them too: not counted
        # again as activations). The trace's peak, in the last block's backward, holds the root's
        # and that block's: 12·128² + 13·128 parameters.
        root = (1000 * 128 + 256 * 128 + 2 * 128) * 4
        block = (12 * 128 * 128 + 13 * 128) * 4
        forward = [m for m in r["memory"]["series"][-1]["phases"] if m["phase"] == "forward"]
        assert forward[-1]["heap_live_by_category"]["gathered_parameters"] == root, forward
        assert predicted["categories"]["gathered_parameters"] == root + block, predicted
        # Beside them at that peak, the collectives' buffers (a rank's f32, flat, padded to
        # 2 × 99,136): the reduce-scatter input of the block just reduced, which FSDP2 holds
        # until the next reduce-scatter, and the prefetched block's all-gather output before its
        # copy-out.
        assert predicted["categories"]["collective_buffers"] == 2 * 2 * 99136 * 4 == 2 * block
        assert "gathered parameters (FSDP2's root)" in p.stdout, p.stdout
    assert "Ranks (heap;" in p.stdout and "(worst)" in p.stdout, p.stdout
    assert not engines_left()


def test_fsdp_shards_a_model_whose_parameters_are_tied_across_blocks(memscope_bin, tmp_path):
    # BERT's masked-LM head shares the word embeddings of its embeddings block: FSDP2 refuses
    # the two in different groups, so that block is left to the root's group (run and trace).
    out = tmp_path / "run.json"
    flags = [("tiny-bert" if a == "tiny-gpt2" else a) for a in TINY]
    p = subprocess.run([memscope_bin, "bench", *flags, "--batch", "2", "--nproc", "2",
                        "--parallel", "fsdp", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    r = load(out)
    b = r["memory"]["breakdown"]
    for cat in ("parameters", "gradients", "optimizer_state"):
        assert b[cat]["measured_bytes"] == b[cat]["estimated_bytes"], (cat, b[cat])
    assert b["parameters"]["measured_bytes"] < r["model"]["param_bytes"] * 0.6, b
    assert not engines_left()


# A run long enough to be stopped or killed in.
LONG = TINY[:-2] + ["--batch", "1", "--steps", "100000", "--nproc", "2", "--parallel", "ddp"]


def rank_pid(rank, deadline_s=120):
    """The pid of the engine process that is rank ``rank`` of a running job (from /proc)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        for pid in own_processes(b"memscope._workers.engine"):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in env:
                return pid
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} started within {deadline_s} s")


def test_a_killed_rank_is_named_with_its_signal(memscope_bin):
    p = subprocess.Popen([memscope_bin, "bench", *LONG, "--quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = rank_pid(1)
    time.sleep(5)  # into its steps
    os.kill(pid, signal.SIGKILL)
    _, err = p.communicate(timeout=300)
    assert p.returncode != 0
    last = err.strip().splitlines()[-1]
    # Not torchrun's closing separator: the rank and its signal.
    assert last.startswith("error: ") and "rank 1 was killed by SIGKILL (signal 9)" in last, last
    assert not engines_left()


def test_a_stopped_rank_ends_at_bench_s_timeout(memscope_bin):
    # Rank 1 stopped (SIGSTOP) mid-run holds rank 0 in its next all-reduce: --timeout asks the
    # job to stop, and a job that cannot is killed after the grace, saying why.
    p = subprocess.Popen([memscope_bin, "bench", *LONG, "--timeout", "10s",
                          "--quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    pid = rank_pid(1)
    time.sleep(3)
    os.kill(pid, signal.SIGSTOP)
    _, err = p.communicate(timeout=300)
    assert p.returncode != 0
    assert "asked to stop (--timeout 10s)" in err and "SIGSTOP" in err, err[-2000:]
    assert time.monotonic() - t0 < 10 + 20 + 60  # the timeout, the grace, the start
    assert not engines_left()


def test_a_job_stopped_by_bench_s_timeout_keeps_its_steps(memscope_bin, tmp_path):
    out = tmp_path / "run.json"
    # Long enough for two ranks to import torch and take steps on a busy 2-core machine (the
    # timeout counts from the start: a job stopped before its first step has nothing to keep).
    p = subprocess.run([memscope_bin, "bench", *LONG, "--timeout", "30s", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    r = load(out)
    assert 0 < r["spec"]["steps"] < 100000
    assert any(w.startswith("stopped by --timeout 30s after ") for w in r["warnings"]), \
        r["warnings"]
    assert [f["rank"] for f in r["ranks"]] == [0, 1]
    assert not engines_left()


def test_a_rank_out_of_memory_is_an_oom_row_naming_it_and_no_rank_outlives_it(memscope_bin,
                                                                              tmp_path):
    rows_path = tmp_path / "rows.jsonl"
    p = subprocess.run([memscope_bin, "sweep", *TINY, "--batch", "1,512,1024", "--nproc", "2",
                        "--parallel", "ddp", "--memory-limit", "400MiB", "--jsonl",
                        str(rows_path)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok", "oom", "skipped"], \
        [(r["status"], r["reason"], r["last_stderr"]) for r in rows]
    ok, oom = rows[0], rows[1]
    ranks = ok["summary"]["ranks"]
    assert len(ranks) == 2 and sum(f["worst"] for f in ranks) == 1
    assert ok["summary"]["heap_peak_bytes"] == max(f["peak_bytes"] for f in ranks)
    assert oom["torch_oom"]["rank"] in (0, 1), oom
    assert f"out of memory on rank {oom['torch_oom']['rank']} (cpu)" in oom["reason"], oom
    assert "per rank" in ok["enforcement"] and "per rank" in p.stderr + p.stdout
    assert "ddp×2" in p.stdout, p.stdout
    assert not engines_left()


def slurm_conf():
    """SLURM_CONF of the repository's test Slurm (tests/slurm/start.sh: nodes of 2 CPUs on this
    machine, the host in partition `debug`, the host and a second slurmd's node in `two`;
    started, or reused when tests/slurm.rs left it up)."""
    start = Path(__file__).resolve().parents[2] / "tests" / "slurm" / "start.sh"
    up = subprocess.run([str(start)], capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, (
        "the test Slurm did not start (install it with `apt-get install -y slurm-wlm munge`):\n"
        + up.stdout + up.stderr)
    return next(line.split("=", 1)[1] for line in up.stdout.splitlines()
                if line.startswith("SLURM_CONF="))


def slurm_ddp_sweep(memscope_bin, tmp_path, batches, *flags):
    """A DDP sweep of tiny-gpt2 over 2 ranks on the test Slurm, each rank's heap held to 400 MiB:
    its rows in index order and memscope's output."""
    rows_path = tmp_path / "rows.jsonl"
    p = subprocess.run([memscope_bin, "sweep", *TINY, "--batch", batches, "--nproc", "2",
                        "--parallel", "ddp", "--memory-limit", "400MiB", "--slurm", *flags,
                        "--work-dir", str(tmp_path / "work"), "--jsonl", str(rows_path)],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, SLURM_CONF=slurm_conf()))
    assert p.returncode == 0, p.stderr
    rows = sorted((json.loads(line) for line in rows_path.read_text().splitlines()),
                  key=lambda r: r["index"])
    return rows, p.stdout + p.stderr


def oom_names_its_rank(row):
    """An oom row of a job says which rank ran out: PyTorch's error (the engine's line), or a
    rank that died where the engine could not say it (C++'s bad_alloc in a gloo thread, refused
    by the heap limit), as torchrun names it."""
    if row["torch_oom"] is not None:
        return f"out of memory on rank {row['torch_oom']['rank']} (cpu)" in row["reason"]
    return re.search(r"out of memory under --memory-limit .*: the torch engine's job failed: "
                     r"rank \d .*bad_alloc", row["reason"]) is not None


def test_on_slurm_each_task_runs_its_job_s_ranks_and_an_oom_row_names_the_rank(memscope_bin,
                                                                               tmp_path):
    # Each array task runs torchrun on its node with both ranks (--cpus-per-task 2).
    rows, out = slurm_ddp_sweep(memscope_bin, tmp_path, "1,512,1024")
    said = [(r["status"], r["reason"], r["last_stderr"][-3:]) for r in rows]
    # The largest is cancelled when the follower sees the oom before Slurm starts it, else it
    # runs out of memory too.
    assert [r["status"] for r in rows][:2] == ["ok", "oom"], said
    assert rows[2]["status"] in ("skipped", "oom"), said
    ok, oom = rows[:2]
    assert ok["slurm"]["state"] == "COMPLETED" and len(ok["summary"]["ranks"]) == 2, ok
    assert oom["slurm"]["state"] == "FAILED", said
    assert oom_names_its_rank(oom), said
    assert "each rank's heap held to --memory-limit 400" in out
    assert not engines_left()


def test_on_slurm_a_job_across_two_nodes_runs_a_rank_on_each(memscope_bin, tmp_path):
    # --nodes 2: sbatch --nodes 2, srun starts torchrun on each node (one rank a node), the
    # nodes meet at the first; rank 1 lives on the second node, and its Record reaches rank 0.
    rows, out = slurm_ddp_sweep(memscope_bin, tmp_path, "1,512", "--nodes", "2",
                                "--partition", "two")
    assert [r["status"] for r in rows] == ["ok", "oom"], rows
    ok, oom = rows
    nodes = ok["slurm"]["node"].split(",")
    assert len(nodes) == 2 and "memscope-n2" in nodes, ok["slurm"]
    assert ok["spec"]["torch"]["parallel"]["nodes"] == 2, ok["spec"]
    ranks = ok["summary"]["ranks"]
    assert [f["rank"] for f in ranks] == [0, 1] and all(f["peak_bytes"] > 0 for f in ranks), ranks
    # Either node's rank may be the one that runs out first; the row names it, and srun stops
    # the other node's.
    assert oom_names_its_rank(oom), (oom["reason"], oom["last_stderr"])
    assert "ddp×2 on 2 nodes" in out and "across 2 nodes" in out, out
    assert not engines_left()


def test_a_rank_hung_in_a_collective_is_a_timeout_row(memscope_bin, tmp_path):
    # Rank 1 never reaches DDP's first broadcast; rank 0 waits in it until --timeout.
    rows_path = tmp_path / "rows.jsonl"
    env = dict(os.environ, MEMSCOPE_TEST_HANG_RANK="1")
    p = subprocess.run([memscope_bin, "sweep", *TINY, "--batch", "1", "--nproc", "2",
                        "--parallel", "ddp", "--timeout", "15s", "--jsonl", str(rows_path)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["timeout"], rows
    assert not engines_left()


def test_the_link_measured_by_peaks_collectives_times_the_estimate_s_collectives(memscope_bin,
                                                                                  tmp_path):
    # Two gloo ranks under torchrun all-reduce 8 B to 64 MiB; the fitted link is cached and an
    # estimate of a job without --link takes it.
    env = {**os.environ, "MEMSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "link.json"
    p = subprocess.run([memscope_bin, "peaks", "--engine", "torch", "--collectives", "--json",
                        str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    link = load(out)
    assert (link["backend"], link["world"]) == ("gloo", 2)
    assert [s["bytes"] for s in link["sizes"]] == [8, 1024, 64 << 10, 1 << 20, 4 << 20,
                                                   16 << 20, 64 << 20]
    assert all(s["calls"] >= 5 and 0 < s["min_s"] <= s["median_s"] <= s["max_s"]
               for s in link["sizes"])
    assert link["gb_per_s"] > 0 and link["latency_us"] >= 0
    assert "ring formula" in p.stdout and not engines_left()
    est = tmp_path / "est.json"
    e = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-gpt2",
                        "--batch", "2", "--seq", "32", "--nproc", "2", "--parallel", "ddp",
                        "--json", str(est)], capture_output=True, text=True, timeout=300, env=env)
    assert e.returncode == 0, e.stderr
    predicted = load(est)["by_dtype"]["f32"]
    assert "measured by `peaks --collectives` (gloo, 2 ranks" in e.stdout, e.stdout
    # One all-reduce of the buckets' bytes per bucket, by the ring formula on the fitted link.
    c = predicted["collectives"]["all_reduce"]
    ms = (c["bytes"] / (link["gb_per_s"] * 1e9) + 2 * c["calls"] * link["latency_us"] * 1e-6) \
        * 1e3
    assert abs(predicted["communication_ms"]["all_reduce"] - ms) < 1e-6 * max(ms, 1), \
        (predicted["communication_ms"], ms)
    # FSDP2's all-gather and reduce-scatter are timed on their own (gloo runs them at other
    # speeds than its all-reduce), and an FSDP2 estimate times them on their own fits.
    for kind in ("all_gather", "reduce_scatter"):
        assert [s["bytes"] for s in link[kind]] == [8, 64 << 20], link[kind]
        assert all(s["calls"] >= 5 and s["median_s"] > 0 for s in link[kind])
    assert "All-gather" in p.stdout and "Reduce-scatter" in p.stdout, p.stdout
    est = tmp_path / "fsdp.json"
    e = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-gpt2",
                        "--batch", "2", "--seq", "32", "--nproc", "2", "--parallel", "fsdp",
                        "--json", str(est)], capture_output=True, text=True, timeout=300, env=env)
    assert e.returncode == 0, e.stderr
    predicted = load(est)["by_dtype"]["f32"]
    small, large = link["all_gather"]
    # (N−1)/N · B/β + (N−1) · α per call, β and α through the smallest and largest medians.
    per_byte = (large["median_s"] - small["median_s"]) / (0.5 * (large["bytes"] - small["bytes"]))
    latency = max(0.0, small["median_s"] - 0.5 * small["bytes"] * per_byte)
    c = predicted["collectives"]["all_gather"]
    ms = (0.5 * c["bytes"] * per_byte + c["calls"] * latency) * 1e3
    assert abs(predicted["communication_ms"]["all_gather"] - ms) < 1e-6 * max(ms, 1), \
        (predicted["communication_ms"], ms)
