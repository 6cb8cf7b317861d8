"""`--parallel pp:P`: a pipeline on PyTorch's `torch.distributed.pipelining`. Each rank is traced
as itself under the fake process group (`estimate`) and measured as a real rank of a torchrun job
(gloo, `bench`), and each rank's measured heap peak stands beside the peak predicted for its own
stages. The schedules' micro-batches in flight, read from PyTorch's own action lists, order the
stages' peaks."""

import csv
import json
import subprocess

import pytest

from test_torchrun import engines_left

PP = ["--engine", "torch", "--model", "tiny-llama", "--mode", "train", "--batch", "16",
      "--seq", "256", "--nproc", "2", "--parallel", "pp:2", "--micro-batches", "4"]


def estimate(memscope_bin, tmp_path, schedule, *extra):
    out = tmp_path / f"{schedule}.json"
    p = subprocess.run([memscope_bin, "estimate", *PP, "--pp-schedule", schedule, *extra,
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())["by_dtype"]["f32"], p.stdout


@pytest.fixture(scope="module")
def one_process_losses(memscope_bin, tmp_path_factory):
    """The losses of the same model, batch and steps in one process, unsplit."""
    out = tmp_path_factory.mktemp("one") / "run.json"
    p = subprocess.run([memscope_bin, "bench", *PP[:-6], "--warmup", "1", "--steps", "2",
                        "--threads", "1", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())["loss"]


@pytest.mark.parametrize("schedule,split", [("gpipe", None), ("1f1b", None), ("1f1b", "3,1"),
                                            ("zbv-zero-bubble", None)])
def test_each_rank_s_measured_peak_is_within_2_percent_of_its_own_stages_prediction(
        memscope_bin, tmp_path, schedule, split, one_process_losses):
    out = tmp_path / "run.json"
    uneven = ["--pp-split", split] if split else []
    p = subprocess.run([memscope_bin, "bench", *PP, "--pp-schedule", schedule, *uneven,
                        "--warmup", "1", "--steps", "2", "--threads", "1", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    record = json.loads(out.read_text())
    ranks = record["ranks"]
    if split:
        # Three blocks on the first stage, one on the last: the first stage's rank the fuller.
        assert record["spec"]["torch"]["pipeline"]["split"] == [3, 1], record["spec"]["torch"]
        assert ranks[0]["peak_bytes"] > ranks[1]["peak_bytes"], ranks
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        err = (r["predicted_peak_bytes"] - r["peak_bytes"]) / r["peak_bytes"]
        assert abs(err) < 0.02, (schedule, r)
    # The stages differ: the last holds the head, the loss and the logits.
    assert ranks[0]["peak_bytes"] != ranks[1]["peak_bytes"]
    assert "predicted heap peak (vs measured)" in p.stdout
    assert "this rank's stages of" in p.stdout
    # Each stage runs its part of the batch's products: a rank's share against a rank's peak.
    assert "matmul FLOPs per step a rank" in p.stdout, p.stdout
    # Every stage's gradients are the whole model's: the losses step for step are one
    # process's (the last stage's labels are the first stage's ids; each earlier stage gets
    # its gradient back from the next; a zero-bubble weight half runs). Micro-batches sum in
    # another order: equal to float rounding.
    assert len(record["loss"]) == len(one_process_losses) == 3, record["loss"]
    assert record["loss"] == pytest.approx(one_process_losses, rel=1e-5), \
        (record["loss"], one_process_losses)
    assert not engines_left()


def test_the_schedule_s_action_list_orders_the_stages_peaks_and_plays_out_the_step(memscope_bin,
                                                                                   tmp_path):
    # The roofs of the profile shipped for a 2-core EPYC (no measurement on this machine) and a
    # given link: the step is played out along each rank's schedule too.
    prof = ["--profile", "epyc-zen5-2t", "--link", "1,100"]
    gpipe, _ = estimate(memscope_bin, tmp_path, "gpipe", *prof)
    one, text = estimate(memscope_bin, tmp_path, "1f1b", *prof)
    inter, _ = estimate(memscope_bin, tmp_path, "interleaved-1f1b", *prof)
    flight = {name: [r["in_flight"] for r in e["pipeline_ranks"]]
              for name, e in [("gpipe", gpipe), ("1f1b", one), ("interleaved", inter)]}
    # GPipe holds every micro-batch; 1F1B P - r of them; interleaved 1F1B more, of stages half
    # as deep (PyTorch's action lists for 2 ranks and 4 micro-batches).
    assert flight == {"gpipe": [4, 4], "1f1b": [2, 1], "interleaved": [5, 3]}, flight
    assert [r["stages"] for r in one["pipeline_ranks"]] == [[[0, 0, 2]], [[1, 2, 4]]]
    assert [r["stages"] for r in inter["pipeline_ranks"]] == [[[0, 0, 1], [2, 2, 3]],
                                                              [[1, 1, 2], [3, 3, 4]]]
    for rank in (0, 1):
        acts = [e["pipeline_ranks"][rank]["categories"]["activations"]
                for e in (one, inter, gpipe)]
        peaks = [e["pipeline_ranks"][rank]["peak_bytes"] for e in (one, inter, gpipe)]
        assert acts == sorted(acts) and peaks == sorted(peaks), (rank, acts, peaks)
    # The top-level figures are the fullest rank's, which the table names.
    fullest = max(one["pipeline_ranks"], key=lambda r: r["peak_bytes"])
    assert one["peak_bytes"] == fullest["peak_bytes"]
    assert f"{fullest['rank']} (fullest)" in text
    assert "PyTorch's 1f1b schedule over 4 micro-batches of 4" in text
    played_out(gpipe, one, inter, text)
    # Zero-bubble schedules fill the bubble with weight backwards.
    zero_bubble(memscope_bin, tmp_path, inter)


def played_out(gpipe, one, inter, text):
    """Each schedule's step played out along its ranks' action lists."""
    plays = {"gpipe": gpipe["pipeline_play"], "1f1b": one["pipeline_play"],
             "interleaved-1f1b": inter["pipeline_play"]}
    for schedule, e in [("gpipe", gpipe), ("1f1b", one), ("interleaved-1f1b", inter)]:
        play = plays[schedule]
        assert e["predicted_ms"]["step"] == play["step_ms"], e["predicted_ms"]
        assert [r["rank"] for r in play["ranks"]] == [0, 1]
        for r in play["ranks"]:
            assert r["busy_ms"] > 0 and r["idle_ms"] > 0, r
            assert abs(r["end_ms"] - r["busy_ms"] - r["idle_ms"]) < 1e-6 * r["end_ms"], r
            assert play["step_ms"] >= r["step_ms"] >= r["end_ms"], r
        # 4 micro-batches cross between the ranks forward and back (an interleaved schedule's
        # 4 stages cross at each of their 3 boundaries), each 0.5 MiB of f32 hidden states
        # (4 × 256 × 128) at 1 GB/s and 100 µs.
        crossings = 3 if schedule == "interleaved-1f1b" else 1
        assert play["transfers"] == 2 * 4 * crossings, play
        assert abs(play["transfer_ms"] - (0.1 + 4 * 256 * 128 * 4 / 1e6)) < 1e-9, play
    assert "The step played out along every rank's schedule" in text, text
    # With equal work, GPipe and 1F1B take the same step; the interleaved schedule's stages are
    # half as deep, so its ranks wait less.
    idle = {k: sum(r["idle_ms"] for r in v["ranks"]) / sum(r["end_ms"] for r in v["ranks"])
            for k, v in plays.items()}
    assert abs(plays["gpipe"]["step_ms"] - plays["1f1b"]["step_ms"]) \
        < 0.05 * plays["1f1b"]["step_ms"], plays
    assert idle["interleaved-1f1b"] < idle["1f1b"], idle


def zero_bubble(memscope_bin, tmp_path, inter):
    """The zero-bubble schedules beside interleaved 1F1B (``inter``, its estimate)."""
    prof = ["--profile", "epyc-zen5-2t"]
    zb, _ = estimate(memscope_bin, tmp_path, "interleaved-zero-bubble", *prof)
    zbv, text = estimate(memscope_bin, tmp_path, "zbv-zero-bubble", *prof)
    # ZBV's V: rank 0 holds the first and the last stage, rank 1 the two middle ones.
    assert [[s[0] for s in r["stages"]] for r in zbv["pipeline_ranks"]] == [[0, 3], [1, 2]]
    assert [[s[0] for s in r["stages"]] for r in zb["pipeline_ranks"]] == [[0, 2], [1, 3]]
    # The schedules' own bubbles, from their action lists with equal stages: interleaved 1F1B's
    # (P − 1) / (V × M) = 1 / 8; the weight halves fill part of it.
    assert inter["pipeline_bubble"] == 0.125, inter["pipeline_bubble"]
    assert zb["pipeline_bubble"] < inter["pipeline_bubble"], zb["pipeline_bubble"]
    assert zbv["pipeline_bubble"] < inter["pipeline_bubble"], zbv["pipeline_bubble"]
    # A micro-batch's activations stay until its weight half has run (PyTorch's action lists
    # for 2 ranks and 4 micro-batches).
    assert [r["in_flight"] for r in zbv["pipeline_ranks"]] == [4, 4], zbv["pipeline_ranks"]
    for e in (zb, zbv):
        play = e["pipeline_play"]
        assert e["predicted_ms"]["step"] == play["step_ms"]
        assert all(r["busy_ms"] > 0 for r in play["ranks"]), play
    assert "PyTorch's zbv-zero-bubble schedule over 4 micro-batches" in text, text
    assert "its weight backwards fill waits" in text, text


def test_a_model_that_is_not_a_causal_lm_is_refused_naming_the_plan(memscope_bin):
    p = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-bert",
                        "--batch", "4", "--seq", "32", "--nproc", "2", "--parallel", "pp:2"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "--parallel pp: BertForMaskedLM is not a causal language model" in p.stderr


def test_plans_side_by_side_name_the_one_with_the_most_head_room(memscope_bin, tmp_path):
    out = tmp_path / "plans.json"
    p = subprocess.run([memscope_bin, "estimate", *PP[:-6], "--nproc", "2",
                        "--parallel", "ddp,pp:2,fsdp+tp:3", "--micro-batches", "4,16",
                        "--fits", "100MiB", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    f = json.loads(out.read_text())
    assert f["kind"] == "torch-plans" and f["world"] == 2
    rows = {r["plan"]: r for r in f["rows"]}
    four, sixteen = "pp:2 × 4 micro-batches", "pp:2 × 16 micro-batches"
    # The pipeline at each count of the list; the other plans once.
    assert list(rows) == ["ddp", four, sixteen, "fsdp+tp:3"], list(rows)
    assert "--nproc 2 ranks do not split into groups of 3" in rows["fsdp+tp:3"]["refused"]
    # Each rank of DDP holds the whole model and its batch; a pipeline's rank half the blocks.
    assert rows["ddp"]["fits"] is False and rows[four]["fits"] is True, rows
    # A data-parallel job runs each rank's batch, a pipeline the one batch.
    assert [rows[k]["sequences_per_step"] for k in ("ddp", four)] == [32, 16]
    assert rows["ddp"]["dropped"] == "--micro-batches"
    # Smaller micro-batches: 1F1B holds as many in flight, each smaller; the bubble shrinks.
    assert rows[sixteen]["peak_bytes"] < rows[four]["peak_bytes"], rows
    assert (rows[four]["bubble"], rows[sixteen]["bubble"]) == (0.25, 0.0625), rows
    assert "bubble" not in rows["ddp"]
    # Each row is the figure the plan's own estimate gives (1F1B over 4 micro-batches).
    one, _ = estimate(memscope_bin, tmp_path, "1f1b")
    assert one["peak_bytes"] == rows[four]["peak_bytes"]
    assert f"Most head-room under --fits 100.0 MiB: {sixteen}" in p.stdout, p.stdout
    # The file is a comparison, which report refuses by name rather than misreading.
    r = subprocess.run([memscope_bin, "report", str(out), "-o", str(tmp_path / "p.html")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "a comparison of plans" in r.stderr


def test_a_sweep_over_plans_runs_each_under_torchrun_and_an_oom_names_the_stage(memscope_bin,
                                                                             tmp_path):
    rows_path = tmp_path / "rows.jsonl"
    p = subprocess.run([memscope_bin, "sweep", "--engine", "torch", "--model", "tiny-gpt2",
                        "--seq", "128", "--warmup", "0", "--steps", "1", "--threads", "1",
                        "--batch", "2,1024", "--nproc", "2", "--parallel", "ddp,pp:2",
                        "--micro-batches", "2", "--memory-limit", "400MiB",
                        "--jsonl", str(rows_path)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    got = [(r["spec"]["torch"]["parallel"]["plan"], r["spec"]["batch"], r["status"])
           for r in rows]
    assert got == [("ddp", 2, "ok"), ("ddp", 1024, "oom"), ("pp", 2, "ok"), ("pp", 1024, "oom")], \
        [(r["status"], r["reason"], r["last_stderr"][-3:]) for r in rows]
    # --micro-batches is the pipeline's alone: DDP's points run without it.
    assert "pipeline" not in rows[0]["spec"]["torch"]
    assert rows[2]["spec"]["torch"]["pipeline"] == {"schedule": "1f1b", "micro_batches": 2,
                                                    "stages_per_rank": 1}
    assert all(len(rows[i]["summary"]["ranks"]) == 2 for i in (0, 2))
    # The pipeline's rank out of memory mid-schedule is named with its stage.
    oom = rows[3]
    rank = oom["torch_oom"]["rank"]
    assert oom["torch_oom"]["stages"] == [[rank, 2 * rank, 2 * rank + 2]], oom
    assert f"on rank {rank} (cpu; stage {rank}: blocks {2 * rank}–{2 * rank + 1})" \
        in oom["reason"], oom
    assert "## tiny-gpt2 · train · f32 · ddp" in p.stdout
    assert "## tiny-gpt2 · train · f32 · pp:2" in p.stdout
    assert not engines_left()


def test_a_sweep_over_micro_batch_counts_runs_each_count_and_one_that_does_not_divide_is_a_row(
        memscope_bin, tmp_path):
    rows_path, csv_path = tmp_path / "rows.jsonl", tmp_path / "rows.csv"
    p = subprocess.run([memscope_bin, "sweep", "--engine", "torch", "--model", "tiny-gpt2",
                        "--seq", "32", "--warmup", "0", "--steps", "1", "--threads", "1",
                        "--batch", "4", "--nproc", "2", "--parallel", "pp:2",
                        "--micro-batches", "4,3,2", "--jsonl", str(rows_path),
                        "--csv", str(csv_path)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    got = [(r["spec"]["torch"].get("pipeline", {}).get("micro_batches"), r["status"])
           for r in rows]
    # Each count its own point, smallest first; 3 does not divide batch 4: an error row.
    assert got == [(2, "ok"), (3, "error"), (4, "ok")], [(r["status"], r["reason"]) for r in rows]
    assert "--micro-batches" in rows[1]["reason"], rows[1]["reason"]
    assert all(len(rows[i]["summary"]["ranks"]) == 2 for i in (0, 2))
    assert rows[0]["spec"]["torch"]["pipeline"]["schedule"] == "1f1b"
    # The label, the report's curves and the CSV tell the counts apart.
    assert "tiny-gpt2 train f32 b4 s32 w0 pp:2×2 1f1b mb2" in p.stdout, p.stdout
    assert "## tiny-gpt2 · train · f32 · pp:2 1f1b mb2" in p.stdout
    assert "## tiny-gpt2 · train · f32 · pp:2 1f1b mb4" in p.stdout
    table = list(csv.DictReader(csv_path.read_text().splitlines()))
    assert [(r["pp_schedule"], r["micro_batches"], r["status"]) for r in table] == \
        [("1f1b", "2", "ok"), ("1f1b", "3", "error"), ("1f1b", "4", "ok")]
    assert not engines_left()


def test_fit_predict_finds_each_plan_s_largest_batch_and_the_next_one_is_over(memscope_bin,
                                                                            tmp_path):
    out = tmp_path / "fit.json"
    budget = 45 * 2**20
    p = subprocess.run([memscope_bin, "fit", "--predict", "--engine", "torch", "--model",
                        "tiny-gpt2", "--seq", "64", "--nproc", "2", "--parallel", "ddp,pp:2",
                        "--memory-limit", "45MiB", "--max", "8", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    f = json.loads(out.read_text())
    assert f["kind"] == "torch-plans" and f["vary"] == "batch", f
    ddp, pp = f["rows"]
    assert (ddp["plan"], pp["plan"]) == ("ddp", "pp:2")
    # DDP: the largest batch fits, the next one is over; a few traces, not one a size.
    size, over = ddp["largest"]["size"], ddp["largest"]["first_over"]
    assert 0 < size < 8 and over == size + 1, ddp
    assert ddp["largest"]["tries"] <= 5, ddp
    assert ddp["device_total_bytes"] <= budget and ddp["sequences_per_step"] == 2 * size
    # The pipeline (2 micro-batches, one a stage) grows in whole micro-batches, to --max.
    assert pp["largest"] == {"size": 8, "tries": 3}, pp
    assert pp["bubble"] == 0.5 and pp["device_total_bytes"] <= budget, pp
    # The size after the largest, estimated on its own, is over the budget.
    e = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-gpt2",
                        "--seq", "64", "--batch", str(over), "--nproc", "2", "--parallel",
                        "ddp", "--json", str(tmp_path / "over.json")],
                       capture_output=True, text=True, timeout=300)
    assert e.returncode == 0, e.stderr
    assert json.loads((tmp_path / "over.json").read_text())["by_dtype"]["f32"]["peak_bytes"] \
        > budget
    # The plan named runs the most sequences (of one length) a step within the budget.
    best = max(f["rows"], key=lambda r: r["sequences_per_step"])
    assert (f"Most tokens a step within 45.0 MiB: {best['plan']} (batch "
            f"{best['largest']['size']}, {best['sequences_per_step']} sequences a step)") \
        in p.stdout, p.stdout


def test_fit_over_plans_runs_each_plan_s_search_and_a_plan_the_job_cannot_take_is_a_row(
        memscope_bin, tmp_path):
    # Each plan's sizes run as `fit` runs one plan's (every trial a torchrun job, each rank held
    # to the limit); GPT-2 has no tensor-parallel plan in transformers: a row saying so.
    out = tmp_path / "fit.json"
    p = subprocess.run([memscope_bin, "fit", "--engine", "torch", "--model", "tiny-gpt2",
                        "--seq", "32", "--nproc", "2", "--parallel", "ddp,fsdp,tp:2",
                        "--memory-limit", "2GiB", "--max", "1", "--json", str(out), "-q"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    plans = {x["plan"]: x for x in json.loads(out.read_text())["plans"]}
    assert list(plans) == ["ddp", "fsdp", "tp:2"], plans
    for name in ("ddp", "fsdp"):
        f = plans[name]["fit"]
        assert f["max_batch"] == 1 and f["first_oom"] is None, f
        (trial,) = f["trials"]
        assert trial["status"] == "ok" and len(trial["summary"]["ranks"]) == 2, trial
    # FSDP2 holds a shard of the parameters, gradients and state on each rank: a lower peak at
    # the same batch, so it is the plan named.
    assert plans["fsdp"]["fit"]["heap_peak_bytes"] < plans["ddp"]["fit"]["heap_peak_bytes"]
    assert "no tensor-parallel plan" in plans["tp:2"]["refused"], plans["tp:2"]
    assert plans["ddp"]["sequences_per_step"] == plans["fsdp"]["sequences_per_step"] == 2
    assert "Most tokens a step within 2.00 GiB: fsdp (batch 1, 2 sequences a step; of the plans " \
        "that run as many, the lowest heap peak)" in p.stdout, p.stdout
    assert not engines_left()
