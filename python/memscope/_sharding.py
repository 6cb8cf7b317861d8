"""The data-parallel plans that need nothing of transformers, for the torch engine's ranks, its
trace and a user's own module alike: the fake process group one process traces a rank under,
FSDP2's ``fully_shard`` on a model's repeated blocks and its root, and DDP's gradient buckets as
its reducer plans them. (Joining a torchrun job and transformers' tensor-parallel plans are the
engine's: ``_workers/parallel.py``.)"""

import sys


class PlanError(ValueError):
    """A plan this model cannot take; says which flag and why."""


def fake_process_group(torch, world, rank=0):
    """Rank ``rank`` (0 unless asked) of ``world`` ranks under PyTorch's fake process group (its
    own tests' backend): collectives return at once and move nothing, so one process traces one
    rank's steps. A fake group of another size or rank is replaced; a real one (this process is
    a rank of a job) is refused: the trace would run its collectives for real."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        if dist.get_backend() != "fake":
            raise PlanError(f"this process is already a rank of a {dist.get_backend()} job: "
                            "an estimate of a plan traces rank 0 under PyTorch's fake process "
                            "group, so make it before init_process_group (or in a process of "
                            "its own)")
        if dist.get_world_size() == world and dist.get_rank() == rank:
            return
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)


def leave_fake_process_group(torch):
    """The fake process group torn down, so that the process can join a real job."""
    import torch.distributed as dist
    if dist.is_initialized() and dist.get_backend() == "fake":
        dist.destroy_process_group()


def transformer_blocks(model):
    """The model's transformer blocks: the modules whose class transformers names as never
    split across devices (``_no_split_modules``: ``GPT2Block``, ``LlamaDecoderLayer``, …); where
    it names none (DistilBERT, a user's own module), the children of its longest ``ModuleList``
    (the repeated layers)."""
    import torch
    names = set(getattr(model, "_no_split_modules", None) or [])
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if blocks:
        return blocks
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def shardable_blocks(model):
    """The blocks FSDP2 can shard on their own: a block holding a parameter tied to one outside
    it (BERT's word embeddings, which its masked-LM head shares) is left to the root's group, as
    FSDP2 asks of tied parameters (one group holds both)."""
    owners = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        owners.setdefault(id(p), set()).add(name)
    blocks = []
    for b in transformer_blocks(model):
        inside = {}
        for name, p in b.named_parameters(remove_duplicate=False):
            inside[id(p)] = inside.get(id(p), 0) + 1
        if all(len(owners[i]) == n for i, n in inside.items()):
            blocks.append(b)
    return blocks


def fully_shard_blocks(torch, world, device_type, precision=None, reshard=None, offload=False):
    """FSDP2 as its users apply it: a function that puts ``fully_shard`` on every block of a
    model, then on the root, over ``world`` ranks of ``device_type`` (the trace's wrap; the
    measuring scripts apply the same); ``precision``: ``(param_dtype, reduce_dtype)`` names
    (``bf16``, ``f32``) for FSDP2's ``MixedPrecisionPolicy``, or None; ``reshard``: FSDP2's
    ``reshard_after_forward`` (True, False or a number of ranks), None for its default;
    ``offload``: FSDP2's CPU offload (``shard_blocks``)."""
    from torch.distributed.device_mesh import init_device_mesh

    # Made before the trace's FakeTensorMode: the mesh's ranks are a real tensor.
    return shard_blocks(torch, init_device_mesh(device_type, (world,)), "fsdp", precision,
                        reshard, offload)


# The Spec's dtype names (`--dtype`, `--fsdp-precision`) as torch's attribute names.
DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


def shard_blocks(torch, mesh, flag, precision=None, reshard=None, offload=False):
    """``fully_shard`` on every block of a model, then on the root, over ``mesh``, with FSDP2's
    ``MixedPrecisionPolicy`` of ``precision`` (``(param, reduce)`` dtype names) and its
    ``reshard_after_forward`` of ``reshard`` when given (FSDP2 keeps the root's gathered after
    forward whatever it is told: backward needs them first); ``offload``: its
    ``CPUOffloadPolicy``, the shards in host memory, pinned when the mesh is CUDA's (pinning needs
    a GPU)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kw = {}
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=mesh.device_type == "cuda")
    if precision is not None:
        param, reduce = (getattr(torch, DTYPES[d]) for d in precision)
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=param, reduce_dtype=reduce)
    if reshard is not None:
        kw["reshard_after_forward"] = reshard

    def wrap(model):
        blocks = shardable_blocks(model)
        if not blocks:
            raise PlanError(
                f"--parallel {flag}: {type(model).__name__} has no repeated blocks to shard (its "
                "_no_split_modules is empty and it holds no ModuleList of layers)")
        for b in blocks:
            fully_shard(b, mesh=mesh, **kw)
        fully_shard(model, mesh=mesh, **kw)
    return wrap


def planned_ddp_buckets(torch, model):
    """The bytes of each of DDP's gradient buckets for ``model`` as its reducer allocates them
    when the model is wrapped: its parameters that take gradients (shared ones once) assigned by
    DDP's own function (``dist._compute_bucket_assignment_by_size``) under the limits DDP uses
    for its first iteration with its defaults (every parameter of a dtype in one bucket, as
    ``_BucketCapacityConfig`` sets when unused parameters are not searched for). From its second
    iteration the reducer rebuilds its buckets in the order gradients arrived, 25 MiB each: the
    same bytes in more pieces."""
    import torch.distributed as dist
    params = grad_params(model)
    buckets, _ = dist._compute_bucket_assignment_by_size(params, [sys.maxsize],
                                                         [False] * len(params))
    return [sum(params[i].numel() * params[i].element_size() for i in b) for b in buckets]


def grad_params(model):
    """The parameters DDP reduces: those that take gradients, a shared one once."""
    seen, params = set(), []
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            params.append(p)
    return params


def steady_ddp_buckets(torch, model):
    """How many buckets DDP all-reduces a step once it has rebuilt them (its second iteration
    on): its parameters that take gradients assigned by its own function under its default
    limits (1 MiB for the first bucket, 25 MiB for the rest), in reverse order as gradients
    arrive."""
    import torch.distributed as dist
    params = grad_params(model)[::-1]
    limits = [dist._DEFAULT_FIRST_BUCKET_BYTES, 25 * 1024 * 1024]
    buckets, _ = dist._compute_bucket_assignment_by_size(params, limits,
                                                         [False] * len(params))
    return len(buckets)
