"""Any architecture transformers builds, from its config.json, on ``--engine torch``: the estimate
traced and the run measured on the same model transformers builds, parameter counts exact to the
parameter, the predicted peak within 2% of the counted heap's; what transformers cannot build as a
language model over token ids, or only with the model's own code, refused by name."""

import json

import pytest

from conftest import cli, load

# Small widths, the architectures' own features: tied embeddings and q/k/v biases (Qwen2),
# sliding-window attention (Mistral), soft-capped logits, a large vocabulary and a head_dim of
# its own (Gemma 2), Phi-3's fused projections, a mixture of experts (Mixtral: 4 experts, top 2).
CONFIGS = {
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 256,
              "intermediate_size": 704, "num_hidden_layers": 4, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 4096, "max_position_embeddings": 1024,
              "tie_word_embeddings": True, "rope_theta": 1000000.0},
    "mistral": {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                "hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 4,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096,
                "max_position_embeddings": 1024, "sliding_window": 64,
                "tie_word_embeddings": False},
    "gemma2": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 256,
               "intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 16384,
               "max_position_embeddings": 1024, "sliding_window": 64,
               "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0,
               "query_pre_attn_scalar": 128},
    "phi3": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 256,
             "intermediate_size": 704, "num_hidden_layers": 4, "num_attention_heads": 4,
             "num_key_value_heads": 4, "vocab_size": 4096, "max_position_embeddings": 1024,
             "original_max_position_embeddings": 1024, "pad_token_id": 0},
    "mixtral": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                "hidden_size": 256, "intermediate_size": 448, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096,
                "max_position_embeddings": 1024, "num_local_experts": 4,
                "num_experts_per_tok": 2},
}
# transformers ships no SDPA attention for Gemma 2: it runs its eager attention.
ATTENTION = {"gemma2": ["--attention", "naive"]}


def config_file(tmp_path, name, cfg):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return path


def transformers_count(cfg):
    """Parameters of the model transformers builds from ``cfg``, counted here on the meta device."""
    import torch
    import transformers
    hf = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = getattr(transformers, cfg["architectures"][0])(hf)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_config_transformers_builds_is_estimated_and_measured_within_2_percent(
        memscope_bin, tmp_path, name):
    path = config_file(tmp_path, name, CONFIGS[name])
    flags = ["--engine", "torch", "--config", path, "--batch", "2", "--seq", "128",
             *ATTENTION.get(name, [])]
    cli(memscope_bin, "bench", *flags, "--warmup", "2", "--steps", "2", "--json",
        tmp_path / "run.json", "-q")
    r = load(tmp_path / "run.json")
    assert r["model"]["family"] == name
    assert r["model"]["params"] == transformers_count(CONFIGS[name])
    measured = r["memory"]["heap_peak_bytes"]
    predicted = r["memory"]["estimate"]["peak_bytes"]
    assert abs(predicted - measured) / measured < 0.02, (name, predicted, measured)


def test_infer_of_a_mixture_of_experts_is_within_2_percent(memscope_bin, tmp_path):
    path = config_file(tmp_path, "mixtral", CONFIGS["mixtral"])
    cli(memscope_bin, "bench", "--engine", "torch", "--config", path, "--mode", "infer",
        "--batch", "4", "--seq", "128", "--warmup", "2", "--steps", "2", "--json",
        tmp_path / "run.json", "-q")
    m = load(tmp_path / "run.json")["memory"]
    assert abs(m["estimate"]["peak_bytes"] - m["heap_peak_bytes"]) / m["heap_peak_bytes"] < 0.02


def test_generation_keeps_the_kv_cache_the_model_s_own_cache_makes(memscope_bin, tmp_path):
    # Mistral's sliding window (64): its cache is transformers' own for the model, capped at the
    # window's 64 positions though the prompt and the new tokens reach 72.
    path = config_file(tmp_path, "mistral", CONFIGS["mistral"])
    cli(memscope_bin, "bench", "--engine", "torch", "--config", path, "--mode", "generate",
        "--batch", "2", "--prompt-len", "64", "--new-tokens", "8", "--warmup", "1", "--steps",
        "2", "--json", tmp_path / "run.json", "-q")
    m = load(tmp_path / "run.json")["memory"]
    # Keys and values: 4 layers × 2 × batch 2 × 2 kv heads × 64 positions × 64 wide, f32.
    assert m["estimate"]["categories"]["kv_cache"] == 4 * 2 * 2 * 2 * 64 * 64 * 4
    assert abs(m["estimate"]["peak_bytes"] - m["heap_peak_bytes"]) / m["heap_peak_bytes"] < 0.02


# FSDP2 over two ranks under torchrun (gloo): DistilBERT names no blocks (its _no_split_modules
# is empty: its blocks are its transformer's ModuleList); a Qwen2 of 28M parameters, tied, built
# by transformers from its config. Sizes where the few MiB of Python objects and gloo's own
# buffers a rank adds (which the estimate leaves out) are under 1% of the peak.
QWEN2_FSDP = dict(CONFIGS["qwen2"], hidden_size=512, intermediate_size=1408,
                  num_attention_heads=8, vocab_size=32000)


@pytest.mark.parametrize("model", ["distilbert", "qwen2"])
def test_fsdp_over_two_ranks_is_within_2_percent_on_every_rank(memscope_bin, tmp_path, model):
    which = (["--model", "distilbert"] if model == "distilbert"
             else ["--config", config_file(tmp_path, "qwen2", QWEN2_FSDP)])
    cli(memscope_bin, "bench", "--engine", "torch", *which, "--batch", "2", "--seq", "64",
        "--nproc", "2", "--parallel", "fsdp", "--warmup", "2", "--steps", "2", "--json",
        tmp_path / "run.json", "-q")
    r = load(tmp_path / "run.json")
    predicted = r["memory"]["estimate"]["peak_bytes"]
    # Some runs hold a second copy of one block's gathered parameters at a rank's peak (seen
    # once in two full test runs: qwen2's rank 0 about 11.28 MB over its usual peak, one
    # block's 2,819,840 f32 parameters, 11,279,360 B, to within 0.1%), as the collectives'
    # timing on gloo's threads falls; the trace, whose collectives finish as they start,
    # holds one. Either is within 2%.
    m = r["model"]
    block = (m["param_bytes"] - m["vocab_size"] * m["d_model"] * 4) / m["n_layers"]
    for rank in r["ranks"]:
        misses = [abs(predicted + extra - rank["peak_bytes"]) / rank["peak_bytes"]
                  for extra in (0, block)]
        assert min(misses) < 0.02, (rank, predicted, block)
        # Each rank holds about half of every parameter's rows.
        assert rank["parameter_bytes"] < 0.55 * r["model"]["param_bytes"], rank


@pytest.mark.parametrize("cfg,says", [
    ({"model_type": "t5", "d_model": 64, "num_layers": 2, "num_heads": 4},
     "model_type 't5' is an encoder-decoder"),
    ({"model_type": "vit", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
     "model_type 'vit' is a vision model (it takes images, `pixel_values`)"),
    ({"model_type": "no-such-model", "hidden_size": 64},
     "field `model_type`: 'no-such-model' is not an architecture transformers"),
    ({"model_type": "my_llama", "auto_map": {"AutoModelForCausalLM": "modeling.MyLlama"}},
     "field `auto_map`: model_type `my_llama` is built by the model's own code"),
    (dict(CONFIGS["mixtral"], experts_implementation="eager"),
     "field `experts_implementation`: 'eager' routes each expert's tokens by data-dependent"),
])
def test_what_transformers_cannot_build_as_a_language_model_is_refused_by_name(
        memscope_bin, tmp_path, cfg, says):
    path = config_file(tmp_path, "refused", cfg)
    out = tmp_path / "est.json"
    p = cli(memscope_bin, "estimate", "--engine", "torch", "--config", path, "--json", out,
            ok=False)
    assert p.returncode != 0 and says in p.stderr, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    assert not out.exists()


def test_memscope_s_own_engine_says_to_add_the_torch_engine(memscope_bin, tmp_path):
    path = config_file(tmp_path, "qwen2", CONFIGS["qwen2"])
    p = cli(memscope_bin, "bench", "--config", path, ok=False)
    assert p.returncode == 2
    assert "model_type `qwen2` is built by Hugging Face transformers" in p.stderr
    assert "add --engine torch" in p.stderr


def test_a_model_without_sdpa_attention_is_refused_naming_the_flag(memscope_bin, tmp_path):
    path = config_file(tmp_path, "gemma2", CONFIGS["gemma2"])
    p = cli(memscope_bin, "estimate", "--engine", "torch", "--config", path, ok=False)
    assert "has no SDPA attention for Gemma2ForCausalLM: add --attention naive" in p.stderr
