"""memscope's model configs (a Spec's ``config``) as Hugging Face transformers' own model classes:
GPT-2 → ``GPT2LMHeadModel``, LLaMA (GQA, RoPE scaling) → ``LlamaForCausalLM``, BERT →
``BertForMaskedLM``, DistilBERT (no token types) → ``DistilBertForMaskedLM``. No dropout (memscope
runs none), the activation memscope's family uses, tied heads as the config says; attention
``sdpa`` or ``eager`` as asked. The parameter count must equal memscope's exact one. Any other
``model_type`` is transformers' own: its config.json built as transformers reads it, the class it
maps the config to (``describe``)."""

import contextlib
import math

from . import protocol

# A model whose config names no position limit (RoPE without one): no sequence is refused for it.
NO_POSITION_LIMIT = 2 ** 20


def transformers_config(transformers, model_type, raw, origin):
    """transformers' config object for a config.json (``raw``, a dict) of ``model_type``."""
    T = transformers
    kw = {k: v for k, v in raw.items() if k != "model_type"}
    try:
        return T.AutoConfig.for_model(model_type, **kw)
    except ValueError as e:
        if model_type not in T.CONFIG_MAPPING:
            raise protocol.Refused(
                f"{origin}: field `model_type`: {model_type!r} is not an architecture "
                f"transformers {T.__version__} knows (a newer transformers may: pip install -U "
                "transformers)") from None
        raise protocol.Refused(f"{origin}: transformers could not read it as a {model_type} "
                               f"config: {e}") from None


def model_class(transformers, hf, origin):
    """(the class memscope builds for config ``hf``, ``causal`` or ``masked``): the config's
    ``architectures`` entry that is a language model, else the one transformers maps its
    ``model_type`` to. Refused, naming what the model takes instead, when it is none."""
    from transformers.models.auto import modeling_auto as auto
    T = transformers
    for name in getattr(hf, "architectures", None) or ():
        cls = getattr(T, name, None)
        if cls is None:
            continue
        if name.endswith("ForCausalLM") or name.endswith("LMHeadModel"):
            return cls, "causal"
        if name.endswith("ForMaskedLM"):
            return cls, "masked"
    mt = hf.model_type
    for names, objective in ((auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "causal"),
                             (auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES, "masked")):
        name = names.get(mt)
        if isinstance(name, (list, tuple)):
            name = name[0]
        if name and getattr(T, name, None) is not None:
            return getattr(T, name), objective
    takes = [(auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
              "is a speech model (it takes audio features, `input_features`)"),
             (auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
              "is an encoder-decoder (it takes the encoder's and the decoder's token ids)"),
             (auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES,
              "is a vision model (it takes images, `pixel_values`)")]
    what = next((w for names, w in takes if mt in names),
                "has no causal or masked language-model class in transformers")
    raise protocol.Refused(
        f"{origin}: model_type {mt!r} {what}; memscope's torch engine feeds a language model one "
        "sequence of token ids (a causal LM, as Llama or Qwen, or a masked LM, as BERT); give "
        "it the inputs it takes as your own workload instead: python -m memscope module "
        "estimate FILE.py:FUNCTION (docs/own-model.md)")


def experts_of(hf):
    """(experts per routed layer, experts each token goes to) of a mixture of experts; None."""
    per_layer = next((getattr(hf, k) for k in ("num_local_experts", "num_experts",
                                               "n_routed_experts") if getattr(hf, k, None)), None)
    per_token = getattr(hf, "num_experts_per_tok", None)
    return (per_layer, per_token) if per_layer and per_token else None


def max_positions(hf):
    return (getattr(hf, "max_position_embeddings", None) or getattr(hf, "n_positions", None)
            or NO_POSITION_LIMIT)


def transformers_model(transformers, cfg, attention):
    """(config, class) of a config.json transformers builds (``cfg.transformers``), with
    ``cfg.n_layers`` layers (the engine's one-layer priming copy has one)."""
    tm = cfg.transformers
    hf = transformers_config(transformers, tm.model_type, dict(tm.config), cfg.name)
    if hf.num_hidden_layers != cfg.n_layers:
        hf.num_hidden_layers = cfg.n_layers
        kinds = getattr(hf, "layer_types", None)
        if isinstance(kinds, list):
            hf.layer_types = kinds[:cfg.n_layers]
    cls = getattr(transformers, getattr(tm.built, "class"))
    if attention == "sdpa" and not getattr(cls, "_supports_sdpa", True):
        raise protocol.Refused(
            f"{cfg.name}: transformers {transformers.__version__} has no SDPA attention for "
            f"{cls.__name__}: add --attention naive (its eager attention)")
    hf._attn_implementation = attention
    return hf, cls


def hf_config(transformers, cfg, attention):
    """The transformers config for memscope's ``cfg`` (ModelConfig read through the contract: a ``_contract.View``)."""
    T = transformers
    if cfg.transformers:
        return transformers_model(T, cfg, attention)
    fam = cfg.family
    if fam == "gpt2":
        hf = T.GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.max_seq_len,
                          n_embd=cfg.d_model, n_layer=cfg.n_layers, n_head=cfg.n_heads,
                          n_inner=cfg.d_ff, layer_norm_epsilon=cfg.norm_eps,
                          activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                          attn_pdrop=0.0, tie_word_embeddings=cfg.tie_embeddings,
                          bos_token_id=0, eos_token_id=0)
        cls = T.GPT2LMHeadModel
    elif fam == "llama":
        rope = dict((cfg.rope_scaling.raw if cfg.rope_scaling else None) or {"rope_type": "default"})
        rope["rope_theta"] = cfg.rope_theta
        hf = T.LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model,
                           intermediate_size=cfg.d_ff, num_hidden_layers=cfg.n_layers,
                           num_attention_heads=cfg.n_heads,
                           num_key_value_heads=cfg.n_kv_heads,
                           max_position_embeddings=cfg.max_seq_len,
                           rms_norm_eps=cfg.norm_eps, hidden_act="silu",
                           rope_parameters=rope, rope_theta=cfg.rope_theta,
                           tie_word_embeddings=cfg.tie_embeddings, attention_dropout=0.0,
                           bos_token_id=0, eos_token_id=0)
        cls = T.LlamaForCausalLM
    elif fam == "bert" and cfg.type_vocab_size == 0:
        hf = T.DistilBertConfig(vocab_size=cfg.vocab_size, dim=cfg.d_model,
                                n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                                hidden_dim=cfg.d_ff, max_position_embeddings=cfg.max_seq_len,
                                dropout=0.0, attention_dropout=0.0, activation="gelu",
                                tie_word_embeddings=cfg.tie_embeddings)
        cls = T.DistilBertForMaskedLM
    elif fam == "bert":
        hf = T.BertConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model,
                          num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                          intermediate_size=cfg.d_ff, max_position_embeddings=cfg.max_seq_len,
                          type_vocab_size=cfg.type_vocab_size, layer_norm_eps=cfg.norm_eps,
                          hidden_act="gelu", hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0,
                          tie_word_embeddings=cfg.tie_embeddings)
        cls = T.BertForMaskedLM
    else:
        raise ValueError(f"config family {fam!r}: the torch engine builds gpt2, llama and bert")
    hf._attn_implementation = attention
    return hf, cls


def build(torch, transformers, cfg, attention):
    """transformers' model for ``cfg`` with ``attention`` (``sdpa`` or ``eager``), in f32,
    transformers' own initialisation under the caller's seed."""
    hf, cls = hf_config(transformers, cfg, attention)
    model = cls(hf)
    got = getattr(model.config, "_attn_implementation", None)
    if got != attention:
        raise RuntimeError(f"transformers built {cls.__name__} with attention {got!r}, not "
                           f"{attention!r}")
    return model


@contextlib.contextmanager
def unpacked_sequences(transformers):
    """The engine's batches as transformers sees them in a real run, for the trace. Without a
    KV cache (training under checkpointing, which turns the cache off) transformers reads the
    position ids to find sequences packed into one row, and, where it cannot read them (fake
    tensors have no values), assumes packing: it builds a (B, 1, T, T) mask and gives it to
    SDPA instead of ``is_causal``. memscope's batches are never packed (one sequence a row, its
    positions 0…T−1), which a real run finds: the trace is told so."""
    import importlib
    try:
        masks = importlib.import_module("transformers.masking_utils")
    except ImportError:
        yield
        return
    find = getattr(masks, "find_packed_sequence_indices", None)
    if find is None:
        yield
        return
    masks.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masks.find_packed_sequence_indices = find


def size_from_message(text):
    """The bytes an out-of-memory message says were requested: CPU ``you tried to allocate N
    bytes`` exactly, CUDA ``Tried to allocate 2.00 GiB`` as rounded there; None when it says
    none."""
    import re
    m = re.search(r"tried to allocate (\d+) bytes", text, re.I)
    if m:
        return int(m.group(1))
    m = re.search(r"tried to allocate ([\d.]+) ?(B|KiB|MiB|GiB|TiB)", text, re.I)
    if m:
        unit = {"b": 0, "kib": 1, "mib": 2, "gib": 3, "tib": 4}[m.group(2).lower()]
        return int(math.floor(float(m.group(1)) * 1024 ** unit))
    return None
