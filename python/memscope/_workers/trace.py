"""The torch estimator's trace: a Spec's workload run through transformers under PyTorch's
``FakeTensorMode`` — every op dispatched as on the real device (the same SDPA kernel, the same
saved tensors, the logits' upcast), no memory allocated and nothing computed — with every
storage's allocation and free recorded in order. ``memscope estimate --engine torch`` reads the
sequence (``src/torch/estimate.rs``): live bytes by category at the peak, and on CUDA the
reserved bytes replayed through the caching allocator's rules. With ``spec.torch.parallel``
(``estimate --nproc N --parallel ddp|fsdp``) it runs as rank 0 of N under PyTorch's fake
process group: FSDP2's ``fully_shard`` on every block and the root, or DDP's gradient buckets
(``bucket_sizes``, held from the wrap). A pipeline (``--parallel pp:P``) differs rank by rank:
every rank is traced in turn as itself (its stages, the schedule's sends, receives and buffers),
and the answer is ``{"ranks": [one rank's answer, …]}``, each with its ``pipeline_stages`` and
``pipeline_in_flight``.

Protocol: the request ``{"spec": …, "expected_params": N}`` on stdin; one JSON object on stdout:
``{"traced_on": d, "cuda_capability": [major, minor] or null, "params": n, "param_sizes": […], "buffer_sizes": […], "bucket_sizes": […], "collectives": {kind: {"calls", "bytes"}}, "events": […],
"peak": {…}, "ends": […], "steps": s, "ops": […]}`` (storages' bytes: parameters and buffers as
built, then the steps) where an event ``n ≥ 0`` allocates n bytes as the next block id and
``-(id+1)`` frees block ``id``; ``ops`` the dispatched ops of the last ``s`` steps (the one with
the optimizer's state, not the first that makes it) by signature:
``[phase, op, [[shape, dtype] read…], [[shape, dtype] written…], [bool args…], calls]``.
"""

import sys

from .._sharding import fake_process_group, planned_ddp_buckets, steady_ddp_buckets
from .._tracer import traced
from . import parallel as plans
from .. import _contract
from .._collectives import Collectives
from .engine import Engine
from .inputs import cache_tensors
from .models import unpacked_sequences
from .pipeline import Pipeline
from .protocol import answer_once

REPLAYED_MICRO_BATCHES = 3


def trace(request):
    import torch

    spec = request.spec
    micro_batches = spec.grad_accum
    # Micro-batches after the second leave the trace exactly as they found it (gradients
    # accumulate in place), so at most three are traced, as memscope's own estimate replays
    # them: an estimate's cost does not grow with --grad-accum (its ops are scaled up to it).
    if spec.grad_accum > REPLAYED_MICRO_BATCHES:
        spec = spec.replace(grad_accum=REPLAYED_MICRO_BATCHES)
        request = request.replace(spec=spec)
    device = spec.torch.device
    traced_on = device
    if device.startswith("cuda") and not torch.cuda.is_available():
        # No GPU to dispatch as: trace with the CPU's kernels (the same modules, saved tensors
        # and SDPA log-sum-exp); memscope replays the sequence under CUDA's allocator rules.
        traced_on = "cpu"
        request = request.replace(spec=spec.replace(torch=spec.torch.replace(device="cpu")))
    offload = _offload(spec, traced_on)
    parallel = spec.torch.parallel
    if parallel is not None and parallel.plan == "pp":
        # Every rank holds other stages: each traced in turn, as that rank of the job.
        ranks = [_one_rank(torch, request, traced_on, rank, micro_batches)
                 for rank in range(parallel.world)]
        return _contract.check("pipeline_trace_answer", {"ranks": ranks})
    return _contract.check("trace_answer",
                           _one_rank(torch, request, traced_on, 0, micro_batches, offload))


def _one_rank(torch, request, traced_on, rank, micro_batches, offload=None):
    """Rank ``rank``'s trace (rank 0 of a job whose ranks are alike); ``offload``: ``_offload``'s
    answer."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    spec = request.spec
    device = spec.torch.device
    parallel = spec.torch.parallel
    if parallel is not None:
        fake_process_group(torch, parallel.world, rank)
    # FSDP2 over tensor-parallel parameters reads its meshes' rank tensors (real tensors of a
    # few ints, parallel.py's `_real_mesh_tensors`) while it shards: the one real input the trace lets in.
    two_d = parallel is not None and parallel.plan == "fsdp+tp"
    fake = FakeTensorMode(allow_non_fake_inputs=two_d)
    # Fake parameters cannot be swapped in place by Module.to(): assign the converted ones.
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    eng = Engine(request, out=None, trace=True)
    if parallel is not None and parallel.plan == "pp":
        eng.wrap = plans.stages_wrap(torch, spec, rank, eng.device)
    elif parallel is not None and parallel.plan != "ddp":
        eng.wrap = plans.sharding_wrap(torch, parallel, eng.device.type,
                                       spec.torch.fsdp_precision,
                                       spec.torch.reshard_after_forward,
                                       spec.torch.fsdp_offload)
    with fake:
        eng.build()
    buckets = planned_ddp_buckets(torch, eng.model) if parallel is not None and \
        parallel.plan == "ddp" else []
    # The collectives of the last step (the one with the optimizer's state), by kind, and the
    # buffers they were given.
    import torch.distributed as dist

    counter = Collectives(dist, keep_buffers=True)
    # Made under the fake mode, as the model's tensors are: nothing of the token batch is
    # allocated, whatever --batch × --seq (a real one of 2^40 ids would not fit).
    with fake:
        ids = torch.randint(0, spec.config.vocab_size, (spec.batch, spec.seq),
                            device=eng.device)
    with unpacked_sequences(eng.transformers):
        answer = traced(torch, fake, eng.model,
                        lambda tr: eng.traced_steps(ids, tr.set_phase, tr.end_phase,
                                                    on_step=counter.take),
                        traced_on, counter=counter,
                        cache=lambda: cache_tensors(eng.past, torch),
                        micro_batches=micro_batches, traced_micro=spec.grad_accum,
                        offload=offload)
    collectives = counter.take() if parallel is not None else {}
    if buckets:
        # DDP all-reduces every bucket once a step (its reducer runs them in C++); from its
        # second iteration in the buckets it rebuilt, the same bytes.
        collectives["all_reduce"] = {"calls": steady_ddp_buckets(torch, eng.model),
                                     "bytes": sum(buckets), "group": parallel.world}
    cap = None
    if device.startswith("cuda") and torch.cuda.is_available():
        cap = list(torch.cuda.get_device_capability(torch.device(device)))
    pipe = {}
    if isinstance(eng.model, Pipeline):
        pipe = {"pipeline_stages": list(eng.model.bounds),
                "pipeline_in_flight": eng.model.most_in_flight,
                "pipeline_actions": eng.model.actions}
    return {"traced_on": traced_on, "cuda_capability": cap, "bucket_sizes": buckets,
            "collectives": collectives, **pipe, **answer}


def _offload(spec, traced_on):
    """How the trace tells FSDP2's offloaded storages from the device's (``_tracer.Tracer``):
    None without ``--fsdp-offload`` or for a CPU job (the host is its device); ``"device"`` on a
    GPU, where they are the CPU's tensors; ``"emulated"`` for a CUDA job traced on the CPU, where
    every tensor is the CPU's. ``spec``: the job's, before a trace without a GPU runs as the
    CPU."""
    if not spec.torch.fsdp_offload or not spec.torch.device.startswith("cuda"):
        return None
    return "device" if traced_on.startswith("cuda") else "emulated"


def main():
    # The answer is checked in trace(): one rank's, or a pipeline's ranks'.
    return answer_once("the torch estimator's trace", trace, "request")


if __name__ == "__main__":
    sys.exit(main())
