"""The optimizer memscope trains with on PyTorch: AdamW with memscope's settings, fused where this
PyTorch runs it (the torch engine's, and a user's own workload's unless it brings its own)."""


def make_adamw(torch, params, lr, dtype):
    """AdamW with memscope's settings (betas 0.9/0.999, eps 1e-8, weight decay 0.01), fused where
    this torch runs it for ``dtype`` on the parameters' device, else foreach; the parameters of
    each device mesh in a group of their own. Returns (optimizer, implementation name)."""
    params = list(params)
    kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    device = params[0].device if params else torch.device("cpu")
    # A fused or foreach step takes one kind of tensor: tensor parallelism leaves the embeddings
    # and norms plain tensors beside its DTensors, and FSDP2 over it puts them on another mesh.
    # Each mesh's parameters (and the plain ones) are a group of their own.
    groups = {}
    for p in params:
        groups.setdefault(id(getattr(p, "device_mesh", None)), []).append(p)
    if len(groups) > 1:
        params = [{"params": g} for g in groups.values()]
    try:
        # Probe on a throwaway parameter: some versions accept fused=True and fail at step().
        p = torch.nn.Parameter(torch.ones(4, dtype=dtype, device=device))
        p.grad = torch.ones(4, dtype=dtype, device=device)
        torch.optim.AdamW([p], fused=True, **kw).step()
        del p
        return torch.optim.AdamW(params, fused=True, **kw), "fused"
    except Exception:  # noqa: BLE001 - any failure means "not available here"
        return torch.optim.AdamW(params, foreach=True, **kw), "foreach"
