#!/usr/bin/env python3
"""memscope (candle) against Hugging Face transformers on PyTorch (what users run: SDPA
attention, fused AdamW where torch supports it on CPU) on the same workloads, interleaved A B A B.

For each case and each of --rounds rounds, runs `memscope bench` (A) and then
`scripts/torch_reference.py --impl transformers` (B; `--impl eager` for memscope's models
re-written in PyTorch eager), each as a fresh process with the same model config, batch, sequence,
dtype, threads, seed, warm-up and measured steps. The header names the CPU and its vector ISA
(avx512 / avx2, from /proc/cpuinfo). `--isa avx2` measures what an AVX2-only CPU runs, on an
AVX-512 one: torch with ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=AVX2 and
ONEDNN_MAX_CPU_ISA=AVX2, against a memscope built with `cargo build --release
--no-default-features --features engine` (checked from its Record). Prints per case:
- the median step time (ms) of both per round and the ratio memscope/torch per round, then the
  median of the ratios and their min–max (spread);
- the best step: the fastest single step of all of memscope's runs against the fastest of all of
  torch's, and their ratio. On a machine whose speed drifts (a shared VM), the per-round ratios
  spread wide and their median can flatter either side; the best steps are what each engine
  costs when nothing else slows it, so a goal is met only where both ratios meet it;
- the per-phase medians (forward, backward, optimizer for train);
- peak RSS (VmHWM) of both, torch's library baseline (VmRSS right after `import torch`) and
  torch's peak minus that baseline;
- both parameter counts, with a loud flag when they differ (they must match exactly).

See docs/compare-torch.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH_REFERENCE = ROOT / "scripts" / "torch_reference.py"
MIB = 1024 * 1024

# The cases docs/performance.md measures the engine on: five in --dtype (f32 by default), and f,
# always in bf16.
CASES = {
    "a": {
        "title": "gpt2-small train, batch 2 × seq 128",
        "args": ["--model", "gpt2-small", "--mode", "train", "--batch", "2", "--seq", "128"],
    },
    "b": {
        "title": "cs336-small (llama family) train, batch 2 × seq 128",
        "args": ["--model", "cs336-small", "--mode", "train", "--batch", "2", "--seq", "128"],
    },
    "c": {
        "title": "gpt2-small infer (forward), batch 4 × seq 256",
        "args": ["--model", "gpt2-small", "--mode", "infer", "--batch", "4", "--seq", "256"],
    },
    "d": {
        "title": "gpt2-tiny-8k (4 layers, d_model 256, vocab 8192, 4 heads, d_ff 1024) train, "
                 "batch 8 × seq 128",
        "args": ["--config", str(ROOT / "scripts" / "configs" / "gpt2-tiny-8k.json"),
                 "--mode", "train", "--batch", "8", "--seq", "128"],
    },
    "e": {
        "title": "tinyllama-1.1b infer (forward), batch 1 × seq 256",
        "args": ["--model", "tinyllama-1.1b", "--mode", "infer", "--batch", "1", "--seq", "256"],
    },
    # Always bf16, whatever --dtype says: the case where bf16 products (AMX tiles, AVX-512 BF16) run.
    "f": {
        "title": "gpt2-small train, batch 2 × seq 128, everything in bf16",
        "args": ["--model", "gpt2-small", "--mode", "train", "--batch", "2", "--seq", "128"],
        "dtype": "bf16",
    },
}


def isa() -> str:
    """The widest x86 vector ISA /proc/cpuinfo reports: avx512 (avx512f, with avx512_bf16 and
    AMX's amx_bf16 where listed), avx2, or what it is."""
    try:
        flags = next((ln.split(":", 1)[1].split() for ln in open("/proc/cpuinfo")
                      if ln.startswith("flags")), [])
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    if "avx512f" in flags:
        extra = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
        return "avx512" + "".join(f" (+{f})" for f in extra)
    return "avx2" if "avx2" in flags else "no avx2"


# What caps torch's kernels at AVX2: ATen's dispatch, MKL (BLAS) and oneDNN.
TORCH_AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                  "ONEDNN_MAX_CPU_ISA": "AVX2"}


def isa_label(a) -> str:
    """The ISA both sides run: the CPU's, or AVX2 capped on it (`--isa avx2`)."""
    return isa() if a.isa == "native" else f"avx2 (capped; the CPU has {isa()})"


def cpu_model() -> str:
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Compare memscope (candle) with PyTorch eager, interleaved A B A B, one "
                    "process per run.")
    ap.add_argument("--memscope", default=str(ROOT / "target" / "release" / "memscope"),
                    help="memscope binary (default: target/release/memscope)")
    ap.add_argument("--python", default=sys.executable,
                    help="Python interpreter with torch installed (default: this one)")
    ap.add_argument("--threads", default="2",
                    help="CPU threads for both (default 2); a list such as 2,16 runs every case at "
                         "each and adds a thread-scaling table")
    ap.add_argument("--rounds", type=int, default=3, help="A B rounds per case (default 3)")
    ap.add_argument("--steps", type=int, default=10, help="measured steps per run (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up steps per run (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--impl", choices=["transformers", "eager"], default="transformers",
                    help="torch side: transformers' model classes (default) or memscope's models "
                         "re-written in PyTorch eager")
    ap.add_argument("--cases", default="a,b,c,d,e,f",
                    help="comma list of cases: " + "; ".join(f"{k} = {v['title']}"
                                                               for k, v in CASES.items()))
    ap.add_argument("--isa", choices=["native", "avx2"], default="native",
                    help="native: both sides use what the CPU has (default); avx2: both capped at "
                         "AVX2 on an AVX-512 CPU (memscope must be built with "
                         "--no-default-features --features engine)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds before one run is killed (default: none)")
    ap.add_argument("--json", metavar="FILE", help="write all raw Records and ratios here")
    a = ap.parse_args(argv)
    a.case_list = [c.strip() for c in a.cases.split(",") if c.strip()]
    bad = [c for c in a.case_list if c not in CASES]
    if bad or not a.case_list:
        ap.error(f"--cases: unknown case(s) {', '.join(bad) or '(none given)'}; choose from "
                 + ", ".join(CASES))
    try:
        a.thread_list = [int(t) for t in a.threads.split(",") if t.strip()]
    except ValueError:
        ap.error(f"--threads: {a.threads!r} is not a number or a comma-separated list of numbers")
    if not a.thread_list or min(a.thread_list) < 1:
        ap.error("--threads: every thread count must be at least 1")
    for k in ("rounds", "steps"):
        if getattr(a, k) < 1:
            ap.error(f"--{k} must be at least 1")
    if a.warmup < 0:
        ap.error("--warmup must be >= 0")
    return a


def preflight(a) -> list[str]:
    """Problems that stop the comparison before anything runs, each with the command that fixes it."""
    errors = []
    exe = Path(a.memscope)
    if not exe.is_file():
        errors.append(f"memscope binary not found at {exe}: build it with `cargo build --release` "
                      "(or pass --memscope PATH)")
    elif not os.access(exe, os.X_OK):
        errors.append(f"memscope binary {exe} is not executable: `chmod +x {exe}` or rebuild with "
                      "`cargo build --release`")
    need = "torch" if a.impl == "eager" else "torch') and importlib.util.find_spec('transformers"
    probe = ("import importlib.util, sys; "
             f"sys.exit(0 if importlib.util.find_spec('{need}') else 1)")
    try:
        ok = subprocess.run([a.python, "-c", probe], capture_output=True).returncode == 0
    except OSError as e:
        errors.append(f"--python {a.python}: cannot run it ({e})")
    else:
        if not ok:
            errors.append(f"PyTorch / transformers are not installed for {a.python}: install "
                          f"them with `{a.python} -m pip install torch transformers` (CPU wheels "
                          "are fine)")
    if not TORCH_REFERENCE.is_file():
        errors.append(f"{TORCH_REFERENCE} is missing")
    return errors


def busy_cpu_seconds() -> float | None:
    """CPU seconds all processes have spent busy since boot (/proc/stat), None without /proc."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
    busy = v[0] + v[1] + v[2] + sum(v[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_one(kind: str, cmd: list[str], out: Path, env: dict, timeout) -> tuple[dict | None, str]:
    """Runs one benchmark process; returns (its JSON Record, error text). The Record gets
    `_other_cpu_pct`: the share of the machine's CPUs that other processes kept busy meanwhile."""
    t0 = time.perf_counter()
    busy0, child0 = busy_cpu_seconds(), children_cpu_seconds()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"{kind}: killed after {timeout} s: {' '.join(cmd)}"
    wall = time.perf_counter() - t0
    busy1, child1 = busy_cpu_seconds(), children_cpu_seconds()
    other_pct = None
    if busy0 is not None and busy1 is not None and wall > 0:
        other = (busy1 - busy0) - (child1 - child0)
        other_pct = max(0.0, 100.0 * other / (wall * (os.cpu_count() or 1)))
    if p.returncode != 0:
        tail = (p.stderr or p.stdout or "").strip().splitlines()[-15:]
        return None, (f"{kind} exited with status {p.returncode}: {' '.join(cmd)}\n    "
                      + "\n    ".join(tail))
    try:
        rec = json.loads(out.read_text())
    except (OSError, json.JSONDecodeError) as e:
        return None, f"{kind}: no readable JSON at {out} ({e})"
    rec["_process_wall_seconds"] = wall
    rec["_other_cpu_pct"] = other_pct
    return rec, ""


def isa_mismatch(kind: str, rec: dict, a) -> str:
    """Error text when a run's Record shows it did not run the ISA asked for ('' when it did)."""
    got = rec.get("environment", {}).get("isa") or "?"
    if a.isa != "avx2":
        return ""
    if kind == "memscope" and not got.startswith("avx2"):
        return (f"--isa avx2: {a.memscope} runs {got} kernels; build an AVX2 engine with "
                "`cargo build --release --no-default-features --features engine --target-dir target/avx2` and pass "
                "--memscope target/avx2/release/memscope")
    if kind == "torch" and got not in ("avx2", "?"):
        return f"--isa avx2: torch ran its {got} kernels despite ATEN_CPU_CAPABILITY=avx2"
    return ""


def step_ms(rec: dict) -> float:
    """The median step the Record's throughput is computed over: `step` (train), `forward`
    (infer), prefill + decode × new tokens (generate)."""
    t = rec["timing"]
    if "step" in t:
        return t["step"]["median_ms"]
    if "forward" in t:
        return t["forward"]["median_ms"]
    return t["prefill"]["median_ms"] + t["decode"]["median_ms"] * rec["spec"]["new_tokens"]


def best_step_ms(recs: list[dict]) -> float | None:
    """The fastest single measured step over all runs: the step's samples (train), the
    forward's (infer); None for generate, whose step is a sum of phases."""
    t = [r["timing"] for r in recs]
    key = "step" if "step" in t[0] else "forward" if "forward" in t[0] else None
    if key is None:
        return None
    return min(min(x[key].get("samples_ms") or [x[key]["min_ms"]]) for x in t)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt_ms(x):
    return "—" if x is None else (f"{x:.1f}" if x >= 10 else f"{x:.2f}")


def fmt_mib(b):
    return "—" if b is None else f"{b / MIB:.1f} MiB"


NOISY_PCT = 10.0


def fmt_pct(x):
    return "—" if x is None else f"{x:.0f}%"


def fmt_ratio(x):
    return "—" if x is None else f"{x:.2f}×"


def spread(xs, f):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    return f(min(xs)) if len(xs) == 1 else f"{f(min(xs))} – {f(max(xs))}"


def render_case(key: str, case: dict, a) -> str:
    rounds = case["rounds"]
    ok = [r for r in rounds if r["memscope"] and r["torch"]]
    lines = [f"## ({key}) {CASES[key]['title']}",
             f"{case_dtype(key, a)} · {a.threads_now} threads · {a.warmup} warm-up + {a.steps} measured steps "
             f"per run · {len(rounds)} round(s), A = memscope, B = torch, run A B A B", ""]
    for r in rounds:
        for e in r["errors"]:
            lines.append(f"ERROR round {r['round']}: {e}")
    if not ok:
        lines.append("no round completed: nothing to compare")
        return "\n".join(lines)
    m0, t0 = ok[0]["memscope"], ok[0]["torch"]
    mp, tp = m0["model"]["params"], t0["model"]["params"]
    flag = "match" if mp == tp else f"MISMATCH (difference {tp - mp:+,}): the models differ!"
    lines.append(f"params: memscope {mp:,} · torch {tp:,} · {flag}")
    lines.append(f"engines: memscope {m0['environment'].get('memscope_version', '?')} (candle "
                 f"{m0['environment'].get('candle_version', '?')}) · {t0.get('engine', '?')}, "
                 f"AdamW {t0.get('optimizer_impl') or 'n/a (no optimizer)'}")
    lines.append("")
    lines.append("| round | memscope step ms (median) | torch step ms (median) | memscope/torch "
                 "| other load (memscope / torch run) |")
    lines.append("|---|---:|---:|---:|---:|")
    noisy = False
    for r in ok:
        loads = [r[k].get("_other_cpu_pct") for k in ("memscope", "torch")]
        noisy |= any(x is not None and x > NOISY_PCT for x in loads)
        lines.append(f"| {r['round']} | {fmt_ms(r['memscope_step_ms'])} | {fmt_ms(r['torch_step_ms'])} "
                     f"| {fmt_ratio(r['ratio'])} | {' / '.join(fmt_pct(x) for x in loads)} |")
    s = case["summary"]
    lines.append(f"| **median** | {fmt_ms(s['memscope_step_ms'])} | {fmt_ms(s['torch_step_ms'])} | "
                 f"**{fmt_ratio(s['ratio_median'])}** | |")
    lines.append(f"| spread (min – max) | {spread([r['memscope_step_ms'] for r in ok], fmt_ms)} | "
                 f"{spread([r['torch_step_ms'] for r in ok], fmt_ms)} | "
                 f"{spread([r['ratio'] for r in ok], fmt_ratio)} | |")
    lines.append(f"| best step (fastest of all runs) | {fmt_ms(s['memscope_best_ms'])} | "
                 f"{fmt_ms(s['torch_best_ms'])} | {fmt_ratio(s['ratio_best'])} | |")
    if noisy:
        lines.append("")
        lines.append(f"WARNING: other processes kept more than {NOISY_PCT:.0f}% of the CPUs busy "
                     "during some runs (`other load`): those timings are not trustworthy; rerun "
                     "on an idle machine.")
    lines.append("")
    phases = [p for p in m0["timing"] if p in t0["timing"]]
    order = ["forward", "backward", "optimizer", "step", "prefill", "decode"]
    phases.sort(key=lambda p: order.index(p) if p in order else 99)
    if len(phases) > 1:
        lines.append("| phase (median over rounds of each run's median) | memscope ms | torch ms | "
                     "memscope/torch |")
        lines.append("|---|---:|---:|---:|")
        for p in phases:
            mm, tm = s["phases"][p]["memscope_ms"], s["phases"][p]["torch_ms"]
            lines.append(f"| {p} | {fmt_ms(mm)} | {fmt_ms(tm)} | {fmt_ratio(s['phases'][p]['ratio'])} |")
        lines.append("")
    lines.append("| memory (median over rounds) | memscope | torch |")
    lines.append("|---|---:|---:|")
    lines.append(f"| RSS peak (VmHWM, `memory.rss_peak_bytes`) | {fmt_mib(s['memscope_rss_peak'])} | "
                 f"{fmt_mib(s['torch_rss_peak'])} |")
    lines.append(f"| library baseline (VmRSS after `import torch`) | — | {fmt_mib(s['torch_baseline'])} |")
    lines.append(f"| RSS peak − baseline | — | {fmt_mib(s['torch_peak_minus_baseline'])} |")
    if s["torch_optimizer_import"] is not None:
        lines.append(f"| of which: imports pulled in by constructing `torch.optim.AdamW` | — | "
                     f"{fmt_mib(s['torch_optimizer_import'])} |")
    lines.append(f"| RSS at end (`memory.rss_end_bytes`) | {fmt_mib(s['memscope_rss_end'])} | "
                 f"{fmt_mib(s['torch_rss_end'])} |")
    lines.append(f"| heap peak (counting allocator) | {fmt_mib(s['memscope_heap_peak'])} | "
                 "not measured |")
    lines.append(f"| parameters (`memory.param_bytes`) | {fmt_mib(m0['memory']['param_bytes'])} | "
                 f"{fmt_mib(t0['memory']['param_bytes'])} |")
    if m0.get("loss") and t0.get("loss"):
        lines.append("")
        lines.append(f"loss (sanity, different random init and batch): memscope {m0['loss'][0]:.3f} → "
                     f"{m0['loss'][-1]:.3f}; torch {t0['loss'][0]:.3f} → {t0['loss'][-1]:.3f} "
                     f"over {len(m0['loss'])} steps")
    return "\n".join(lines)


def summarize_case(rounds: list[dict]) -> dict:
    ok = [r for r in rounds if r["memscope"] and r["torch"]]
    if not ok:
        return {}
    m_ = [r["memscope"] for r in ok]
    t_ = [r["torch"] for r in ok]
    phases = {}
    for p in m_[0]["timing"]:
        if p in t_[0]["timing"]:
            mm = med([m["timing"][p]["median_ms"] for m in m_])
            tm = med([t["timing"][p]["median_ms"] for t in t_])
            phases[p] = {"memscope_ms": mm, "torch_ms": tm,
                         "ratio": med([m["timing"][p]["median_ms"] / t["timing"][p]["median_ms"]
                                       for m, t in zip(m_, t_) if t["timing"][p]["median_ms"] > 0])}
    ratios = [r["ratio"] for r in ok if r["ratio"] is not None]
    m_best, t_best = best_step_ms(m_), best_step_ms(t_)
    return {
        "memscope_best_ms": m_best,
        "torch_best_ms": t_best,
        "ratio_best": m_best / t_best if m_best and t_best else None,
        "memscope_step_ms": med([r["memscope_step_ms"] for r in ok]),
        "torch_step_ms": med([r["torch_step_ms"] for r in ok]),
        "ratio_median": med(ratios),
        "ratio_min": min(ratios) if ratios else None,
        "ratio_max": max(ratios) if ratios else None,
        "ratios": ratios,
        "phases": phases,
        "memscope_rss_peak": med([m["memory"]["rss_peak_bytes"] for m in m_]),
        "memscope_rss_end": med([m["memory"]["rss_end_bytes"] for m in m_]),
        "memscope_heap_peak": med([m["memory"]["heap_peak_bytes"] for m in m_]),
        "torch_rss_peak": med([t["memory"]["rss_peak_bytes"] for t in t_]),
        "torch_rss_end": med([t["memory"]["rss_end_bytes"] for t in t_]),
        "torch_baseline": med([t["memory"]["library_baseline_rss_bytes"] for t in t_]),
        "torch_peak_minus_baseline": med([t["memory"]["rss_peak_minus_baseline_bytes"] for t in t_]),
        "torch_optimizer_import": med([t["memory"].get("optimizer_import_rss_bytes") for t in t_]),
        "memscope_params": m_[0]["model"]["params"],
        "torch_params": t_[0]["model"]["params"],
        "params_match": m_[0]["model"]["params"] == t_[0]["model"]["params"],
    }


def overview(results: dict, a) -> str:
    """All cases in one table: step ratio median and spread, RSS peaks, the torch side's AdamW."""
    lines = [f"## all cases · ISA {isa_label(a)} · {a.threads_now} threads · {a.dtype} (case f: bf16) "
             f"· torch side: {a.impl}",
             "",
             "| case | memscope ms | torch ms | memscope/torch (median, min – max) | "
             "best step ms memscope / torch (ratio) | RSS peak memscope | RSS peak torch | "
             "AdamW (torch) |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for key, c in results["cases"].items():
        s = c["summary"]
        if not s:
            lines.append(f"| ({key}) {c['title']} | — | — | no round completed | — | — | — | — |")
            continue
        t0 = next(r["torch"] for r in c["rounds"] if r["torch"])
        lines.append(
            f"| ({key}) {c['title']} | {fmt_ms(s['memscope_step_ms'])} | "
            f"{fmt_ms(s['torch_step_ms'])} | **{fmt_ratio(s['ratio_median'])}** "
            f"({spread(s['ratios'], fmt_ratio)}) | {fmt_ms(s['memscope_best_ms'])} / "
            f"{fmt_ms(s['torch_best_ms'])} ({fmt_ratio(s['ratio_best'])}) | "
            f"{fmt_mib(s['memscope_rss_peak'])} | "
            f"{fmt_mib(s['torch_rss_peak'])} | {t0.get('optimizer_impl') or '—'} |")
    return "\n".join(lines)


def case_dtype(key: str, a) -> str:
    """The dtype a case runs in: --dtype, except case f (always bf16)."""
    return CASES[key].get("dtype", a.dtype)


def run_cases(a, threads: int) -> tuple[dict, bool]:
    """Every case of --cases at `threads` threads, interleaved rounds → (results, whether a run
    failed or the parameter counts differed)."""
    common = ["--threads", str(threads), "--warmup", str(a.warmup), "--steps", str(a.steps),
              "--seed", str(a.seed)]
    env_m = dict(os.environ)
    env_t = dict(os.environ)
    # torch.set_num_threads(--threads) governs the intra-op pool; the env vars keep MKL/OpenMP
    # from starting more threads than that before it runs.
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env_t[k] = str(threads)
    if a.isa == "avx2":
        env_t.update(TORCH_AVX2_ENV)
    results = {"threads": threads, "cases": {}}
    failed = False
    with tempfile.TemporaryDirectory(prefix="compare-torch-") as tmp:
        tmp = Path(tmp)
        for key in a.case_list:
            case = CASES[key]
            dtype = ["--dtype", case_dtype(key, a)]
            if dtype[1] == "bf16" and "train" in case["args"]:
                # torch's reference trains everything in bf16 (weights, gradients, AdamW state):
                # memscope's pure precision (bf16 weights and gradients; its AdamW moments stay
                # f32), not its default mixed one (f32 master weights).
                dtype += ["--precision", "pure"]
            rounds = []
            for i in range(1, a.rounds + 1):
                r = {"round": i, "memscope": None, "torch": None, "errors": []}
                for kind in ("memscope", "torch"):
                    out = tmp / f"{key}-{i}-{kind}.json"
                    if kind == "memscope":
                        cmd = [a.memscope, "bench", *case["args"], *common, *dtype, "--json",
                               str(out), "-q"]
                        env = env_m
                    else:
                        cmd = [a.python, str(TORCH_REFERENCE), *case["args"], *common,
                               "--dtype", case_dtype(key, a), "--impl", a.impl, "--json", str(out),
                               "-q"]
                        env = env_t
                    print(f"[{key} round {i}/{a.rounds}, {threads} threads] {kind}: {' '.join(cmd)}",
                          file=sys.stderr,
                          flush=True)
                    rec, err = run_one(kind, cmd, out, env, a.timeout)
                    if rec and not err:
                        err = isa_mismatch(kind, rec, a)
                        rec = None if err else rec
                    r[kind] = rec
                    if err:
                        r["errors"].append(err)
                        failed = True
                        print(f"  {err}", file=sys.stderr)
                    else:
                        print(f"  done in {rec['_process_wall_seconds']:.1f} s, median step "
                              f"{fmt_ms(step_ms(rec))} ms, other processes used "
                              f"{fmt_pct(rec['_other_cpu_pct'])} of the CPUs meanwhile",
                              file=sys.stderr, flush=True)
                if r["memscope"] and r["torch"]:
                    r["memscope_step_ms"] = step_ms(r["memscope"])
                    r["torch_step_ms"] = step_ms(r["torch"])
                    r["ratio"] = (r["memscope_step_ms"] / r["torch_step_ms"]
                                  if r["torch_step_ms"] > 0 else None)
                rounds.append(r)
            summary = summarize_case(rounds)
            results["cases"][key] = {"title": case["title"], "args": case["args"] + common + dtype,
                                     "rounds": rounds, "summary": summary}
            if summary and not summary["params_match"]:
                failed = True
            print(render_case(key, results["cases"][key], a) if summary else
                  render_case(key, {"rounds": rounds, "summary": {}}, a))
            print(flush=True)
    return results, failed


def scaling(results: dict, a) -> str:
    """Each engine's speed-up from the first thread count to each other one (median step of the
    first over the median step at that count), side by side."""
    ts = a.thread_list
    lines = [f"## thread scaling · ISA {isa_label(a)} · speed-up over {ts[0]} threads (median steps; "
             "their spread over rounds is in each count's tables above)",
             "",
             "| case | " + " | ".join(f"{t} threads: memscope / torch ms (memscope ×, torch ×)"
                                     for t in ts[1:]) + " |",
             "|---|" + "---:|" * (len(ts) - 1)]
    base = results["by_threads"][str(ts[0])]["cases"]
    for key in a.case_list:
        b = base[key]["summary"]
        cells = []
        for t in ts[1:]:
            s = results["by_threads"][str(t)]["cases"][key]["summary"]
            if not b or not s:
                cells.append("—")
                continue
            mx = b["memscope_step_ms"] / s["memscope_step_ms"]
            tx = b["torch_step_ms"] / s["torch_step_ms"]
            cells.append(f"{fmt_ms(s['memscope_step_ms'])} / {fmt_ms(s['torch_step_ms'])} "
                         f"({mx:.2f}×, {tx:.2f}×)")
        lines.append(f"| ({key}) {CASES[key]['title']} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("The goal: memscope's speed-up at least torch's at every count.")
    return "\n".join(lines)


def main(argv=None) -> int:
    a = parse_args(argv)
    errors = preflight(a)
    if errors:
        for e in errors:
            print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"# memscope vs {a.impl} · CPU {cpu_model()} · ISA {isa_label(a)} · {os.cpu_count()} cores · "
          f"{a.threads} threads · {a.dtype} · {a.rounds} interleaved rounds\n", flush=True)
    results = {"settings": {k: v for k, v in vars(a).items() if k not in ("case_list", "thread_list")},
               "by_threads": {}}
    failed = False
    for threads in a.thread_list:
        a.threads_now = threads
        run, bad = run_cases(a, threads)
        failed |= bad
        results["by_threads"][str(threads)] = run
        print(overview(run, a))
        print(flush=True)
    # The first thread count's cases also where earlier versions of this script wrote them.
    results["cases"] = results["by_threads"][str(a.thread_list[0])]["cases"]
    if len(a.thread_list) > 1:
        print(scaling(results, a))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"raw results: {a.json}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
