"""Every parallel plan of the torch engine, built once for its ranks, its trace and the scripts
alike: a rank joining memscope's torchrun job (gloo or NCCL, DDP's wrap), tensor parallelism from
transformers' plan, the 2-D mesh of it and FSDP2; FSDP2 on the blocks, the fake process group and
DDP's buckets are ``_sharding.py``'s (a user's own module takes them too)."""

import contextlib
import os
import time

from .._sharding import DTYPES, fully_shard_blocks, shard_blocks
from . import protocol
from .pipeline import pipeline_wrap


def join_job(torch, spec):
    """This process as one rank of ``spec``'s data-parallel job, started by torchrun: it dies
    with torchrun (Linux's parent-death signal) and at once on torchrun's SIGTERM (a rank blocked
    in a collective never reaches Python's handlers), joins the process group (gloo on the CPU,
    NCCL on CUDA, one GPU per rank). Returns the function that wraps the model: DDP, FSDP2's
    ``fully_shard`` on every block and the root, tensor parallelism, or both."""
    plan = spec.torch.parallel
    protocol.die_with_torchrun()
    if not protocol.in_job() or "RANK" not in os.environ:
        raise protocol.Refused(f"--parallel {plan.plan}: the engine's ranks run under torchrun, which "
                      "memscope starts (`memscope bench --engine torch --nproc N --parallel …`)")
    rank, world = protocol.rank()
    if world != plan.world:
        raise protocol.Refused(f"--nproc {plan.world}: torchrun started {world} ranks")
    cuda = spec.torch.device.startswith("cuda")
    if cuda:
        have = torch.cuda.device_count()
        here = int(os.environ.get("LOCAL_WORLD_SIZE", plan.world))  # this node's ranks
        if have == 0:
            flag = plan.plan if plan.tp in (None, 1) else f"{plan.plan}:{plan.tp}"
            raise protocol.Refused(f"--device {spec.torch.device}: this PyTorch ({torch.__version__}) sees "
                          "no CUDA GPU here, and each rank of a CUDA job needs one; use --device "
                          "cpu, or predict the job without GPUs: memscope estimate --engine "
                          f"torch --device cuda --nproc {plan.world} --parallel {flag}")
        if here > have:
            raise protocol.Refused(f"--nproc {plan.world}: {here} ranks on this machine, which has {have} "
                          f"CUDA GPU(s), and a rank needs one; use --nproc {have} or fewer a node")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    import torch.distributed as dist
    dist.init_process_group("nccl" if cuda else "gloo")
    hang = os.environ.get("MEMSCOPE_TEST_HANG_RANK")
    if hang is not None and int(hang) == rank:
        # Test-only: this rank never reaches the first collective, as a hung rank does not.
        time.sleep(24 * 3600)
    device_type = "cuda" if cuda else "cpu"
    if plan.plan == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        def ddp(model):
            ids = [torch.cuda.current_device()] if cuda else None
            return DistributedDataParallel(model, device_ids=ids)
        return ddp
    if plan.plan == "pp":
        return stages_wrap(torch, spec, rank, torch.device(device_type, torch.cuda.current_device())
                           if cuda else torch.device("cpu"))
    return sharding_wrap(torch, plan, device_type, spec.torch.fsdp_precision,
                         spec.torch.reshard_after_forward, spec.torch.fsdp_offload)


# transformers' names for its tensor-parallel styles (a config's ``base_model_tp_plan``) that
# PyTorch's parallel styles apply as transformers means them.
TP_STYLES = {"colwise": "ColwiseParallel", "rowwise": "RowwiseParallel"}


def tp_plan(torch, model, flag):
    """transformers' tensor-parallel plan for ``model``'s blocks (its config's
    ``base_model_tp_plan``, keyed under the base model) as PyTorch's parallel styles; a model
    without one, or with a style PyTorch's styles do not apply alike, is refused naming
    ``flag``."""
    import torch.distributed.tensor.parallel as tp
    plan = getattr(model.config, "base_model_tp_plan", None) or {}
    name = type(model).__name__
    if not plan:
        raise protocol.Refused(f"--parallel {flag}: transformers gives {name} no tensor-parallel plan (its "
                      "config's base_model_tp_plan is empty); use --parallel ddp or fsdp")
    odd = sorted({s for s in plan.values() if s not in TP_STYLES})
    if odd:
        raise protocol.Refused(f"--parallel {flag}: {name}'s tensor-parallel plan uses {', '.join(odd)}, "
                      f"which memscope does not apply; it applies {', '.join(TP_STYLES)}")
    prefix = getattr(model, "base_model_prefix", "")
    under = f"{prefix}." if prefix and model is not model.base_model else ""
    return {under + key: getattr(tp, TP_STYLES[style])() for key, style in plan.items()}


def stages_wrap(torch, spec, rank, device):
    """``--parallel pp:P``: the function that turns the built model into rank ``rank``'s stages
    and schedule (``pipeline.py``), in the Spec's compute dtype and precision."""
    dtype = getattr(torch, DTYPES[spec.dtype])
    mixed = spec.variant.precision == "mixed"

    def autocast():
        if mixed:
            return torch.autocast(device.type, dtype=dtype)
        return contextlib.nullcontext()
    return pipeline_wrap(spec, rank, device, dtype, autocast)


def sharding_wrap(torch, parallel, device_type, precision=None, reshard=None, offload=False):
    """The wrap a sharded plan puts on the model (the trace's, and each measured rank's):
    ``fsdp``: ``fully_shard`` on every block, then the root; ``tp``: transformers' plan applied
    by PyTorch's ``parallelize_module`` over the ranks; ``fsdp+tp``: that within each group of
    ``tp`` ranks, then FSDP2 across the groups (a 2-D mesh: ``dp`` × ``tp``). ``precision``:
    ``--fsdp-precision`` (its ``param`` and ``reduce`` dtypes), FSDP2's mixed-precision policy;
    ``reshard``: ``--reshard-after-forward`` (True, False or ranks); ``offload``:
    ``--fsdp-offload``, FSDP2's CPU offload."""
    mp = (precision.param, precision.reduce) if precision is not None else None
    if parallel.plan == "fsdp":
        return fully_shard_blocks(torch, parallel.world, device_type, mp, reshard, offload)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    flag = f"{parallel.plan}:{parallel.tp}"
    # Made before the trace's FakeTensorMode: the mesh's ranks are a real tensor.
    if parallel.plan == "tp":
        mesh = init_device_mesh(device_type, (parallel.world,))
        tp_mesh, fsdp = mesh, None
    else:
        mesh = init_device_mesh(device_type, (parallel.world // parallel.tp, parallel.tp),
                                mesh_dim_names=("dp", "tp"))
        tp_mesh, fsdp = mesh["tp"], shard_blocks(torch, mesh["dp"], flag, mp, reshard,
                                                  offload)

    def wrap(model):
        parallelize_module(model, tp_mesh, tp_plan(torch, model, flag))
        if fsdp is not None:
            with _real_mesh_tensors():
                fsdp(model)
    return wrap


@contextlib.contextmanager
def _real_mesh_tensors():
    """FSDP2 over tensor-parallel parameters makes device meshes and reads their rank tensors
    (a few ints, with ops FakeTensorMode cannot run, such as ``nonzero``): under the trace a
    mesh is made, and its rank tensor read, as the real tensors they are."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh
    init, prop = DeviceMesh.__init__, DeviceMesh.mesh

    def real_init(self, *args, **kwargs):
        with unset_fake_temporarily():
            init(self, *args, **kwargs)

    def real_mesh(self):
        with unset_fake_temporarily():
            return prop.fget(self)
    DeviceMesh.__init__, DeviceMesh.mesh = real_init, property(real_mesh)
    try:
        yield
    finally:
        DeviceMesh.__init__, DeviceMesh.mesh = init, prop


