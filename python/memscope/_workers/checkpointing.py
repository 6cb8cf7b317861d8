"""``--checkpoint`` on the torch engine: transformers' activation checkpointing (non-reentrant,
PyTorch's ``torch.utils.checkpoint``) on every block, or as ``--checkpoint-policy`` chooses —
``ops``: torchtitan's selective policy inside every block (the outputs of attention and of every
other matrix product kept, the rest recomputed in backward), through PyTorch's own
``create_selective_checkpoint_contexts``; ``every:N``: every N-th block checkpointed whole, the
others' activations kept."""

from .protocol import Refused

# Attention kernels whose outputs the selective policy keeps (the CPU's, CUDA's flash, memory-
# efficient and cuDNN ones), by ATen name; those this PyTorch lacks are skipped.
ATTENTION = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")


def enable(torch, model, policy):
    """Checkpointing on ``model``'s blocks under ``policy`` (the Spec's ``checkpoint_policy``,
    or None for every block, nothing kept)."""
    kwargs = {"use_reentrant": False}
    every = 1
    if policy is not None and policy.policy == "ops":
        kwargs["context_fn"] = ops_policy(torch)
    elif policy is not None:
        every = policy.n
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs,
                                              every_n_layers=every)
        return
    if every > 1:
        import transformers
        raise Refused(f"--checkpoint-policy every:{every}: transformers {transformers.__version__} "
                      "checkpoints every block or none (`every_n_layers` came with transformers "
                      "5); upgrade it, or use --checkpoint-policy ops")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def ops_policy(torch):
    """torchtitan's per-op policy as a ``context_fn`` for ``torch.utils.checkpoint``: each
    checkpointed call counts its matrix products (``aten.mm``) in forward and again in its
    recomputation, keeps attention's outputs and every odd-numbered product's, and lets PyTorch
    recompute everything else."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    aten = torch.ops.aten
    mm = aten.mm.default
    keep = {mm} | {getattr(aten, n).default for n in ATTENTION if hasattr(aten, n)}
    functional = getattr(torch.ops, "_c10d_functional", None)
    if functional is not None and hasattr(functional, "reduce_scatter_tensor"):
        keep.add(functional.reduce_scatter_tensor.default)

    def context():
        products = {"forward": 0, "recompute": 0}

        def policy(ctx, func, *args, **kwargs):
            run = "recompute" if ctx.is_recompute else "forward"
            if func == mm:
                products[run] += 1
            if func in keep and not (func == mm and products[run] % 2 == 0):
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE
        return create_selective_checkpoint_contexts(policy)
    return context
