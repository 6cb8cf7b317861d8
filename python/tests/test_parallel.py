"""`estimate --engine torch --nproc N --parallel PLAN`: one rank of a data-parallel job traced in
one process under PyTorch's fake process group, with real `fully_shard` and DDP's own bucket
assignment. What these check is exact (bytes); the prediction against torchrun's measured ranks
is scripts/check_parallel.py's table (docs/parallel.md)."""

import json
import math
import subprocess

import pytest

from memscope import _contract, _native
from memscope._workers import models as _hf


def estimate(memscope_bin, tmp_path, *extra):
    out = tmp_path / "est.json"
    p = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-gpt2",
                        "--batch", "2", "--seq", "32", "--json", str(out), *extra],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())["by_dtype"]["f32"], p.stdout


def parameters_on_meta():
    import torch
    import transformers
    text, _ = _native.model_config("tiny-gpt2", None)
    cfg = _contract.read_type("ModelConfig", json.loads(text))
    with torch.device("meta"):
        return list(_hf.build(torch, transformers, cfg, "sdpa").parameters())


def test_fsdp_gives_rank_0_its_padded_row_shards_to_the_byte(memscope_bin, tmp_path):
    # Three ranks: 1,000 vocabulary rows and 256 positions do not split evenly, so rank 0's
    # shards are the padded ceil(rows / 3) rows FSDP2 allocates.
    e, text = estimate(memscope_bin, tmp_path, "--nproc", "3", "--parallel", "fsdp")
    params = parameters_on_meta()
    shard = sum(math.ceil(p.shape[0] / 3) * (p.numel() // p.shape[0]) * 4 for p in params)
    assert shard < sum(p.numel() * 4 for p in params) / 3 + 4 * 1000 * 128
    c = e["categories"]
    assert c["parameters"] == shard, (c, shard)
    assert c["gradients"] == shard, c
    # AdamW's two moments per shard, and one 4-byte step counter per parameter.
    assert c["optimizer_state"] == 2 * shard + 4 * len(params), c
    assert "One rank of 3 (FSDP2" in text, text


def test_ddp_adds_its_gradient_buckets_to_one_process_s_peak_to_the_byte(memscope_bin,
                                                                         tmp_path):
    alone, _ = estimate(memscope_bin, tmp_path)
    ddp, text = estimate(memscope_bin, tmp_path, "--nproc", "2", "--parallel", "ddp")
    param_bytes = sum(p.numel() * 4 for p in parameters_on_meta())
    assert ddp["categories"]["gradient_buckets"] == param_bytes
    assert ddp["categories"]["parameters"] == alone["categories"]["parameters"] == param_bytes
    assert ddp["peak_bytes"] == alone["peak_bytes"] + param_bytes
    assert "gradient buckets" in text, text


def test_fsdp_over_tensor_parallel_groups_shards_each_projection_twice_to_the_byte(
        memscope_bin, tmp_path):
    # tiny-llama over 4 ranks, groups of 2: a projection split by tensor parallelism (transformers'
    # plan: q, k, v, gate, up by columns; o, down by rows), then by rows across the 2 groups, is a
    # quarter on each rank; the embeddings, norms and LM head are halved by rows.
    import torch
    import transformers
    out = tmp_path / "est.json"
    p = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-llama",
                        "--batch", "2", "--seq", "32", "--nproc", "4", "--parallel", "fsdp+tp:2",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    e = json.loads(out.read_text())["by_dtype"]["f32"]
    text, _ = _native.model_config("tiny-llama", None)
    cfg = _contract.read_type("ModelConfig", json.loads(text))
    with torch.device("meta"):
        model = _hf.build(torch, transformers, cfg, "sdpa")
    split = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    local = sum(p.numel() // 4 if name.split(".")[-2] in split
                else math.ceil(p.shape[0] / 2) * (p.numel() // p.shape[0])
                for name, p in model.named_parameters()) * 4
    assert e["categories"]["parameters"] == local, (e["categories"], local)
    assert e["categories"]["gradients"] == local
    # The all-reduces run within a group of 2, FSDP2's collectives across the 2 groups.
    c = e["collectives"]
    assert sorted(c) == ["all_gather", "all_reduce", "reduce_scatter"], c
    assert all(k["group"] == 2 for k in c.values()), c
    assert "over 2 ranks" in p.stdout


@pytest.mark.parametrize("extra,needle", [
    (["--nproc", "2"], "--nproc 2: say how the ranks share the model"),
    (["--nproc", "2", "--parallel", "tp:2"],
     "--parallel tp:2: transformers gives GPT2LMHeadModel no tensor-parallel plan"),
])
def test_a_job_the_trace_cannot_honour_is_refused_by_flag(memscope_bin, extra, needle):
    p = subprocess.run([memscope_bin, "estimate", "--engine", "torch", "--model", "tiny-gpt2",
                        *extra], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and needle in p.stderr, p.stderr


def test_a_cuda_rank_s_memory_outside_the_allocator_is_its_own_lines_and_fits_judges_the_sum(
        memscope_bin, tmp_path):
    e, text = estimate(memscope_bin, tmp_path, "--device", "cuda", "--nproc", "2",
                       "--parallel", "ddp", "--fits", "2GiB")
    outside = e["outside_allocator"]
    assert [line["what"] for line in outside] == ["CUDA context", "NCCL buffers",
                                                   "kernels loaded on first use"]
    assert all("measured on one NVIDIA H200" in line["source"] for line in outside)
    total = e["reserved_peak_bytes"] + sum(line["bytes"] for line in outside)
    assert total > e["reserved_peak_bytes"] > e["peak_bytes"]
    assert "Outside PyTorch's allocator" in text and "Device total (f32)" in text, text
    assert "--fits 2.00 GiB (f32): fits:" in text, text
    # The single process's estimate has no such lines (--fits caps the allocator, as a sweep's
    # --memory-limit does).
    alone, text = estimate(memscope_bin, tmp_path, "--device", "cuda")
    assert "outside_allocator" not in alone
    # Without a GPU's roofs, the way to a predicted step is a card's profile; no thread count.
    assert "No predicted step time: no roofs measured for cuda on this machine; give a card's " \
        "profile with --profile FILE" in text, text
    assert "--threads" not in text.split("No predicted step time")[1].split("\n")[0], text
