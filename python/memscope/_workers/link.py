"""``memscope peaks --engine torch --collectives``: the link between this machine's ranks as
PyTorch's collectives reach it: every rank of a torchrun job memscope launched (gloo on the CPU,
NCCL on CUDA, one GPU per rank) all-reduces tensors of sizes from a few bytes to 64 MiB, then
all-gathers and reduce-scatters the smallest and largest (FSDP2's collectives, which a backend may
run at another speed), each call timed on rank 0 between barriers. Only seconds are measured here: memscope fits the
latency and bandwidth of the ring formula to them (``src/torch/link.rs``).

Protocol: the request ``{"device": d, "sizes": [bytes, …]}`` in ``MEMSCOPE_REQUEST`` (torchrun's
ranks share no stdin); rank 0 writes a ``started`` line, then ``{"device", "device_name",
"backend", "world", "torch", "sizes": [{"bytes", "secs": […]}], "all_gather": […],
"reduce_scatter": […]}`` (the same entries, bytes the whole tensor).
"""

import os
import sys
import time

from . import protocol
from .protocol import Refused, answer_once, die_with_torchrun, end_rank

# Repetitions of each size: as many as fit in this much time, between MIN_REPS and MAX_REPS.
BUDGET_S = 0.3
MIN_REPS, MAX_REPS = 5, 100


def measure(request):
    die_with_torchrun()
    import torch
    import torch.distributed as dist
    rank, world = protocol.rank()
    if world < 2:
        raise Refused("--nproc 1: a link needs two ranks at least; use --nproc 2")
    device = request.device
    cuda = device.startswith("cuda")
    if cuda:
        have = torch.cuda.device_count()
        if world > have:
            raise Refused(f"--nproc {world}: this machine has {have} CUDA GPU(s) and a rank "
                          f"needs one; use --nproc {have} or fewer")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dev = torch.device("cpu")
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend)

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def timed(call):
        """Seconds of each timed call(), between barriers, after one warm-up call that sets up
        the size's buffers; as many calls as fit in BUDGET_S, the same on every rank."""
        secs, spent = [], 0.0
        call()
        sync()
        while True:
            dist.barrier()
            sync()
            t = time.perf_counter()
            call()
            sync()
            secs.append(time.perf_counter() - t)
            spent += secs[-1]
            # Every rank runs as many calls as rank 0 times: rank 0 says whether to go on.
            go = torch.tensor([int(len(secs) < MAX_REPS and (len(secs) < MIN_REPS
                                                             or spent < BUDGET_S))], device=dev)
            dist.broadcast(go, 0)
            if not int(go.item()):
                return secs

    sizes = []
    for nbytes in request.sizes:
        x = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=dev)
        sizes.append({"bytes": x.numel() * 4, "secs": timed(lambda: dist.all_reduce(x))})
        del x
    # FSDP2's collectives, at the smallest and largest size (a whole tensor of B bytes: the
    # gathered output, the unreduced input), each rank holding B / world.
    gather, scatter = [], []
    for nbytes in sorted({min(request.sizes), max(request.sizes)}):
        shard = torch.ones(max(1, nbytes // 4 // world), dtype=torch.float32, device=dev)
        whole = torch.empty(shard.numel() * world, dtype=torch.float32, device=dev)
        gather.append({"bytes": whole.numel() * 4, "secs": timed(
            lambda: dist.all_gather_into_tensor(whole, shard))})
        scatter.append({"bytes": whole.numel() * 4, "secs": timed(
            lambda: dist.reduce_scatter_tensor(shard, whole))})
        del shard, whole
    name = torch.cuda.get_device_name(dev) if cuda else ""
    dist.destroy_process_group()
    return {"device": str(dev), "device_name": name, "backend": backend, "world": world,
            "torch": torch.__version__, "sizes": sizes, "all_gather": gather,
            "reduce_scatter": scatter}


def main():
    return answer_once("the torch engine's link measurement", measure, "link_request",
                       "link_answer")


if __name__ == "__main__":
    sys.exit(end_rank(main()))
