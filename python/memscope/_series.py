"""A session's step series as it grows: each phase's figures over its runs (peak, retained at
its first and last run, the allocator's counts) and its peak moment (a steady step's), and each
step as its JSONL line."""

from ._loop_values import json_loss


def retained(m):
    """The category a phase's mark leaves (forward: activations, backward: gradients,
    optimizer: its state)."""
    c = m["categories"]
    return {"forward": c["activations"], "backward": c["gradients"],
            "optimizer": c["optimizer_state"]}.get(m["phase"], 0)


def add_to_phase_memory(phase_memory, peak_moments, step, warmup, no_optimizer):
    """``step``'s marks added to ``phase_memory`` (phase -> its figures) and ``peak_moments``
    (phase -> the moment kept: the last warm-up step's when steady, else the latest)."""
    # The last warm-up step is a steady one once an optimizer step ran before it (its state is
    # then alive in every phase); with one warm-up step it is the first step, and the moments
    # come from the latest step instead.
    steady = no_optimizer or "optimizer" in phase_memory
    last_warm = step["step"] == warmup - 1 and steady
    for m in step["marks"]:
        pm = phase_memory.get(m["phase"])
        kept = retained(m)
        if pm is None:
            pm = phase_memory[m["phase"]] = {"peak": 0, "retained_first": kept}
        pm["peak"] = max(pm["peak"], m["peak"])
        pm["retained_last"] = kept
        pm["allocations_last"] = m["allocations"]
        pm["allocated_bytes_last"] = m["allocated_bytes"]
        if last_warm or m["phase"] not in peak_moments or step["step"] < warmup \
                or not peak_moments[m["phase"]]["from_warmup"]:
            peak_moments[m["phase"]] = {"mark": m, "from_warmup": last_warm}


def jsonl_line(s, measures):
    """Step ``s`` as its line of the JSONL series; ``measures``: what its bytes are (the
    reader's memory)."""
    line = {
        "step": s["step"],
        "warmup": s["warmup"],
        "elapsed_s": round(s["elapsed_s"], 6),
        "heap_live_bytes": s["live"],
        "heap_peak_bytes": s["peak"],
        "measures": measures,
        "blocks": s["blocks"],
        "phases": [{"phase": m["phase"], "ms": round(m["ms"], 6), "peak_bytes": m["peak"],
                    "live_bytes": m["live"], "by_category": m["categories"]}
                   for m in s["marks"]],
        "times_ms": {k: round(v, 6) for k, v in s["times_ms"].items()},
    }
    if s["loss"] is not None:
        line["loss"] = json_loss(s["loss"])
    if s["reserved"] is not None:
        line["reserved"] = {"bytes": s["reserved"], "alloc_retries": s["alloc_retries"],
                            "ooms": s["ooms"]}
    line["process"] = {"resident_bytes": s["rss"]}
    return line
