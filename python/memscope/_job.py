"""This process's place in a job (rank, world size), from torch.distributed or the launcher's
environment, and the file each rank writes."""

import os


def rank_of(torch):
    """(rank, world size) under torch.distributed with more than one process, else from the
    launcher's environment (torchrun sets RANK and WORLD_SIZE before the script has called
    init_process_group, or where it never does), else None."""
    d = torch.distributed
    if d.is_available() and d.is_initialized() and d.get_world_size() > 1:
        return d.get_rank(), d.get_world_size()
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    return (rank, world) if world > 1 and 0 <= rank < world else None


def per_rank(path, rank):
    """One file per rank: `{rank}` in the path is replaced, else `.rankN` goes before the
    extension (run.json → run.rank1.json), so ranks never write one file."""
    if rank is None:
        return path
    if "{rank}" in path:
        return path.replace("{rank}", str(rank[0]))
    stem, dot, ext = path.rpartition(".")
    if not dot or "/" in ext:
        return f"{path}.rank{rank[0]}"
    return f"{stem}.rank{rank[0]}.{ext}"
