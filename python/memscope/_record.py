"""A closed session → the memscope Record (docs/record.md). Python assembles the measured fields;
Rust (``_native.finish_record``) adds the timing statistics, throughput and breakdown, checks the
whole against the Record's schema and writes it."""

import json
import time

from . import _contract, _native
from ._loop_values import json_loss
from ._memory import rss_bytes, vm_hwm

DTYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}

# The Record's `model` fields, read from a Hugging Face config when the model has one.
HF_FIELDS = {
    "n_layers": ("num_hidden_layers", "n_layer", "n_layers"),
    "d_model": ("hidden_size", "n_embd", "dim", "d_model"),
    "n_heads": ("num_attention_heads", "n_head", "n_heads"),
    "vocab_size": ("vocab_size",),
}


def dtype_name(torch_dtype):
    name = str(torch_dtype).replace("torch.", "")
    if name not in DTYPES:
        raise ValueError(
            f"parameters in {name}: a memscope Record holds f32, bf16 or f16 models; "
            "cast the model (model.float()) to record it")
    return DTYPES[name]


def _model_fields(model):
    cfg = getattr(model, "config", None)
    out = {}
    for field, names in HF_FIELDS.items():
        v = 0
        for n in names:
            x = getattr(cfg, n, None) if cfg is not None else None
            if isinstance(x, int):
                v = x
                break
        out[field] = v
    return out


def _mark(m):
    return {"phase": m["phase"], "heap_peak_bytes": m["peak"],
            "heap_live_by_category": {k: v for k, v in m["categories"].items() if v > 0}}


def _moment(phase, m):
    by_phase = {k: v for k, v in m["categories"].items() if v > 0}
    # Freed before the phase ended: what the peak held beyond the bytes live at the end.
    by_phase["temporaries"] = max(m["peak"] - m["live"], 0)
    by_module = sorted(({"module": k, "bytes": v} for k, v in m["by_module"].items() if v > 0),
                       key=lambda e: -e["bytes"])
    return {"phase": phase, "heap_peak_bytes": m["peak"], "by_phase": by_phase,
            "by_module": by_module}


def series_entry(x):
    """One closed step as the Record's series entry (``StepMemory``)."""
    e = {"step": x["step"], "warmup": x["warmup"], "heap_live_bytes": x["live"],
         "live_allocations": max(x["blocks"], 0), "heap_peak_bytes": x["peak"],
         "rss_bytes": x["rss"], "pss_bytes": None, "phases": [_mark(m) for m in x["marks"]]}
    if x["reserved"] is not None:
        e["reserved_bytes"] = x["reserved"]
    return e


def step_from_line(line):
    """A JSONL series line (``_series.jsonl_line``) back as the session's step dict."""
    reserved = line.get("reserved")
    loss = line.get("loss")
    return {
        "step": line["step"], "warmup": line["warmup"], "live": line["heap_live_bytes"],
        "peak": line["heap_peak_bytes"],
        "reserved": reserved["bytes"] if reserved else None,
        "rss": (line.get("process") or {}).get("resident_bytes"),
        "blocks": line.get("blocks", 0),
        "alloc_retries": reserved["alloc_retries"] if reserved else 0,
        "ooms": reserved["ooms"] if reserved else 0,
        "times_ms": line["times_ms"],
        "marks": [{"phase": p["phase"], "ms": p["ms"], "peak": p["peak_bytes"],
                   "live": p["live_bytes"], "categories": p["by_category"]}
                  for p in line["phases"]],
        "loss": float(loss) if loss is not None else None,
    }


def _kv_cache(steps):
    """The most a KV cache held at a phase's end, when a caller measured one (the engine's
    generate), else None."""
    seen = [m["categories"]["kv_cache"] for x in steps for m in x["marks"]
            if "kv_cache" in m["categories"]]
    return max(seen) if seen else None


def micro_steps(steps):
    """Each micro-batch's figures in steps with gradient accumulation (two or more backward
    phases): the heap live as its backward ended, and the peak since the previous one."""
    out = []
    for step in steps:
        if sum(1 for m in step["marks"] if m["phase"] == "backward") < 2:
            continue
        k, peak = 0, 0
        for m in step["marks"]:
            peak = max(peak, m["peak"])
            if m["phase"] == "backward":
                out.append({"step": step["step"], "micro_step": k,
                            "heap_live_bytes": m["live"], "heap_peak_bytes": peak})
                k, peak = k + 1, 0
    return out


def build_record(s, ending):
    """The Record of a closed session; ``ending``: why the loop ended early, or None."""
    torch = s.torch
    steps = s.steps()
    measured = [x for x in steps if not x["warmup"]]
    last = steps[-1]
    micro = sum(1 for m in last["marks"] if m["phase"] == "forward") or 1
    lr = 0.0
    if s.optimizer is not None and s.optimizer.param_groups:
        lr = float(s.optimizer.param_groups[0].get("lr", 0.0))
    # The rank the session's files are named by (torch.distributed's, else torchrun's
    # environment), else the process group's as it is now.
    dist = s.rank
    if dist is None and torch.distributed.is_available() and torch.distributed.is_initialized():
        dist = (torch.distributed.get_rank(), torch.distributed.get_world_size())
    engine = {"name": "pytorch", "version": torch.__version__, "device": str(s.device),
              "model_class": type(s.model).__name__, "memory": s.reader.memory}
    if dist is not None:
        engine["rank"], engine["world_size"] = dist
    batch = s.batch or 0
    seq = s.seq or 0
    threads = torch.get_num_threads()
    spec = {
        "model": s.name, "config_path": None, "weights": None, "mode": "train",
        "batch": batch, "seq": seq, "dtype": dtype_name(s.param_dtype), "threads": threads,
        "seed": torch.initial_seed() % (1 << 64), "warmup": min(s.warmup, len(steps)),
        "steps": len(measured), "grad_accum": micro, "prompt_len": 0, "new_tokens": 0,
        "lr": lr, "engine": engine,
    }
    model = {"name": s.name, "family": "pytorch", "params": s.n_params,
             "param_bytes": s.model_param_bytes, **_model_fields(s.model)}
    start = s.start_reading["live"]
    series = [series_entry(x) for x in steps]
    phases = {
        name: {"peak_bytes": pm["peak"], "retained_bytes": pm["retained_first"],
               "retained_bytes_last": pm["retained_last"],
               "allocations_last": max(pm["allocations_last"], 0),
               "allocated_bytes_last": max(pm["allocated_bytes_last"], 0)}
        for name, pm in s.phase_memory.items()
    }
    memory = {
        "counting": s.reader.memory != "rss",
        # Everything live when the session started beyond the parameters (the interpreter,
        # libraries, the data) — the Record's `unattributed`.
        "start_bytes": max(start - s.param_bytes, 0),
        "load_bytes": s.param_bytes, "load_seconds": 0.0, "load_peak_bytes": s.param_bytes,
        "param_bytes": s.param_bytes,
        "heap_peak_bytes": max(x["peak"] for x in steps),
        "heap_live_end_bytes": last["live"],
        "rss_peak_bytes": vm_hwm() if s.reader.memory != "rss" else max(
            (x["rss"] or 0) for x in steps),
        "rss_end_bytes": rss_bytes(), "kv_cache_bytes": _kv_cache(steps),
        "phases": phases, "series": series, "micro_steps": micro_steps(steps),
        "peak_moments": [_moment(p, v["mark"]) for p, v in sorted(s.peak_moments.items())],
    }
    if s.estimate is not None:
        memory["estimate"] = s.estimate
    warnings = [f"memory figures (heap_*) are {_meaning(s.reader.memory)}, recorded by memscope's "
                f"Python recorder from PyTorch {torch.__version__} on {s.device}"]
    if s.reader.memory == "rss":
        warnings.append("the counting allocator was not preloaded: peaks are RSS (VmHWM), not "
                        "allocations; run the script under `python -m memscope run` to count them")
    if last["alloc_retries"] or last["ooms"]:
        warnings.append(f"the CUDA caching allocator retried {last['alloc_retries']} allocations "
                        f"after freeing its cache and ran out of memory {last['ooms']} times")
    if not measured:
        warnings.append(f"all {len(steps)} steps were warm-up (warmup={s.warmup}): no timing "
                        "statistics; record more steps")
    if ending is not None:
        warnings.append(f"{ending}: the Record holds the {len(steps)} steps that finished "
                        "before it")
    warnings.extend(s.notes)
    for old, new in s.moved:
        warnings.append(f"the previous run's {old} was moved to {new} before this run wrote "
                        "its own")
    if s.baseline:
        warnings.append(
            f"heap figures count from when the session started: the "
            f"{s.baseline / 2**20:.1f} MiB ({s.baseline} B) the interpreter, PyTorch's libraries "
            "and the script's data held then (beyond the model's parameters, gradients and "
            "optimizer state) are left out, as memscope's torch engine leaves out what was live "
            "before its model was built")
    if s.baseline_freed:
        warnings.append(
            f"the process freed {s.baseline_freed / 2**20:.1f} MiB ({s.baseline_freed} B) of "
            "what it held before the session started while the loop ran: the left-out baseline "
            "was lowered by that much when it was freed, so heap figures before and after that "
            "moment count from different baselines")
    if s.shadowed:
        warnings.append(s.shadowed)
    losses = [json_loss(x["loss"]) for x in steps if x.get("loss") is not None]
    env = json.loads(_native.environment(threads))
    env["allocator"] = s.reader.allocator
    # The kernels that ran are PyTorch's, chosen by its own CPU dispatch (memscope's native
    # module, built without its engine, would name its own build's).
    cap = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else None
    env["isa"] = f"{cap.lower()} (PyTorch's CPU kernels)" if cap else "PyTorch's CPU kernels"
    env["candle_version"] = "not used (PyTorch run)"
    record = {
        "schema_version": _native.SCHEMA_VERSION, "spec": spec, "model": model, "timing": {},
        "throughput": {"tokens_per_s": None, "samples_per_s": None, "decode_tokens_per_s": None},
        "memory": memory, "loss": losses, "warnings": warnings, "environment": env,
        "started_at": s.started_at, "wall_seconds": time.perf_counter() - s.wall0,
    }
    if s.profiler is not None:
        profiled = {i for i, _ in s.profiler.done}
        plain = [x["times_ms"]["step"] for x in measured
                 if x["step"] not in profiled and "step" in x["times_ms"]]
        p = s.profiler.result(plain, len(steps))
        if p is not None:
            record["profile"] = p
            timed = [x for x in measured if x["step"] not in profiled]
            if timed:
                # The hook slows the steps it times: the timing statistics are the others'.
                warnings.append(f"steps {sorted(profiled)} were profiled (every op timed): "
                                f"the timing statistics are the other {len(timed)} measured "
                                "steps'")
                measured = timed
            else:
                warnings.append(f"every measured step was profiled (steps {sorted(profiled)}): "
                                "the timing statistics include the op timer's own cost; "
                                "profile fewer steps than the run measures for plain timings")
        else:
            warnings.append(f"profile={s.profiler.described()}: no step of the window ran (the run "
                            f"closed {len(steps)} steps)")
    for section, fields in s.record_fields.items():
        record[section].update(fields)
    names = []
    for x in measured:
        for k in x["times_ms"]:
            if k not in names:
                names.append(k)
    samples = [(k, [x["times_ms"][k] for x in measured if k in x["times_ms"]]) for k in names]
    if _contract.STRICT:
        unknown = _contract.unknown_fields("record", record)
        if unknown:
            raise _contract.ContractError(f"the Record names fields the contract does not: "
                                          f"{', '.join(unknown)}")
    text = _native.finish_record(json.dumps(record), samples, s.record_path,
                                 cli_advice=s.advice == "cli")
    return json.loads(text)


def _meaning(memory):
    return {
        "cuda allocated": "PyTorch's CUDA caching allocator's allocated bytes (reserved bytes "
                          "beside them in the series)",
        "malloc usable": "every malloc of the process in usable bytes (memscope's preloaded "
                         "counting allocator; PyTorch's CPU tensors are malloc blocks)",
        "rss": "the process's resident set size",
    }[memory]
