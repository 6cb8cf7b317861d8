"""What transformers builds from a config.json of a ``model_type`` memscope's engine has no family
for (``src/torch/describe.rs``): the class, its widths and its exact parameter count, built on
PyTorch's meta device (no memory, no weights). Refused by name: a ``model_type`` this transformers
does not know, a model that is not a language model over token ids (encoder-decoder, vision,
speech)."""

import sys

from . import models, protocol


def describe(request):
    import torch
    import transformers
    t = transformers
    raw = dict(request.config)
    hf = models.transformers_config(t, request.model_type, raw, request.origin)
    cls, objective = models.model_class(t, hf, request.origin)
    with torch.device("meta"):
        try:
            model = cls(hf)
        except Exception as e:  # noqa: BLE001 - any failure is the config's, said with its file
            raise protocol.Refused(f"{request.origin}: transformers {t.__version__} could not "
                                   f"build {cls.__name__} from it: {e}") from None
    heads = hf.num_attention_heads
    width = hf.hidden_size
    out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
    tied = out_emb is not None and out_emb.weight is in_emb.weight
    experts = models.experts_of(hf)
    how = getattr(model.config, "_experts_implementation", None) or "eager"
    if experts and how not in ("grouped_mm", "batched_mm"):
        raise protocol.Refused(
            f"{request.origin}: field `experts_implementation`: {how!r} routes each expert's "
            "tokens by data-dependent indexing, which memscope's trace (fake tensors, no data) "
            "cannot follow; drop the field (transformers' default, grouped_mm, gives every "
            "routing the same buffers)")
    return {
        "class": cls.__name__,
        "objective": objective,
        "parameters": sum(p.numel() for p in model.parameters()),
        "n_layers": hf.num_hidden_layers,
        "d_model": width,
        "n_heads": heads,
        "n_kv_heads": getattr(hf, "num_key_value_heads", None) or heads,
        "head_dim": getattr(hf, "head_dim", None) or width // heads,
        "d_ff": getattr(hf, "moe_intermediate_size", None)
        or getattr(hf, "intermediate_size", None) or 4 * width,
        "vocab_size": hf.vocab_size,
        "max_seq_len": models.max_positions(hf),
        "tie_embeddings": tied,
        **({"experts": {"per_layer": experts[0], "per_token": experts[1],
                        "implementation": how}} if experts else {}),
    }


def main():
    return protocol.answer_once("transformers' build of the config", describe,
                                "describe_request", "describe_answer")


if __name__ == "__main__":
    sys.exit(main())
