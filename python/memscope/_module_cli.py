"""``python -m memscope module estimate|bench FILE.py:FUNCTION``: your own workload
(``workload.py``) from the command line. ``estimate`` traces its step without running it (``memscope.estimate``);
``bench`` runs it under the recorder with the estimate beside it (``memscope.measure``; on the
CPU under memscope's counting allocator, so the heap figures are counted allocations) and writes
the Record, which ``memscope report`` opens."""

import argparse
import json
import os
import subprocess
import sys

from . import _native
from ._job import per_rank
from .bench import measure
from .predict import estimate
from .workload import WorkloadError


def _size(text):
    try:
        return _native.parse_bytes("--fits", text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _value(text):
    key, sep, v = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"--set {text}: give NAME=VALUE (NAME a parameter of "
                                         "your function)")
    try:
        return key, json.loads(v)
    except ValueError:
        return key, v


def parser():
    p = argparse.ArgumentParser(prog="python -m memscope module",
                                description="Estimate or measure your own PyTorch workload: "
                                "FILE.py:FUNCTION returns a memscope.Workload.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, what in (("estimate", "trace the step under fake tensors: memory by category, "
                        "peak, FLOPs, predicted time; nothing is allocated"),
                       ("bench", "run the step for real under the recorder, the estimate "
                        "beside the measured figures in one Record")):
        c = sub.add_parser(name, help=what, description=what)
        c.add_argument("target", metavar="FILE.py:FUNCTION")
        c.add_argument("--batch", type=int, help="passed to FUNCTION as `batch`")
        c.add_argument("--seq", type=int, help="passed to FUNCTION as `seq`")
        c.add_argument("--set", type=_value, action="append", default=[],
                       metavar="NAME=VALUE", help="another value FUNCTION takes (JSON or text)")
        c.add_argument("--mode", choices=("train", "infer"), default="train")
        c.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
        c.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
        c.add_argument("--nproc", type=int, help="ranks of a data-parallel job (with --parallel)")
        c.add_argument("--parallel", choices=("ddp", "fsdp"),
                       help="the plan: DDP, or FSDP2 on the model's repeated blocks and root")
        if name == "estimate":
            c.add_argument("--fits", type=_size, metavar="SIZE",
                           help="exit 1 unless the device's figure fits SIZE (e.g. 24GiB)")
            c.add_argument("--json", metavar="FILE", help="write the estimate as JSON")
        else:
            c.add_argument("--steps", type=int, default=5)
            c.add_argument("--warmup", type=int, default=2)
            c.add_argument("--record", default="memscope-record.json", metavar="FILE")
    return p


def main(argv):
    args = parser().parse_args(argv)
    values = dict(args.set)
    if args.command == "bench" and args.parallel and "RANK" not in os.environ:
        return _launch(args, argv)
    if args.command == "bench" and args.device == "cpu" and not _native.counter_active():
        # Counted allocations, not RSS: the same command under the counting allocator.
        os.execv(sys.executable, [sys.executable, "-m", "memscope", "run", "-m", "memscope",
                                  "module", *argv])
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    outputs = [("--json", args.json)] if args.command == "estimate" and args.json else \
        [("--record", args.record)] if args.command == "bench" else []
    try:
        if outputs:
            _native.check_outputs(outputs, _inputs(args.target))
        if args.command == "estimate":
            est = estimate(args.target, batch=args.batch, seq=args.seq, mode=args.mode,
                           device=args.device, threads=args.threads, nproc=args.nproc,
                           parallel=args.parallel, **values)
            print(est)
            if args.json:
                _write(args.json, json.dumps({"kind": "module-estimate", "workload": est.name,
                                              "values": est.values, "mode": est.mode,
                                              "estimate": est.raw}, indent=2) + "\n")
            if args.fits is not None:
                ok = est.fits(args.fits)
                print(f"  {'fits' if ok else 'does not fit'} in {args.fits / 2**30:,.2f} GiB "
                      f"({'reserved' if est.reserved_peak_bytes is not None else 'allocated'} "
                      f"peak {est.device_bytes / 2**30:,.2f} GiB)")
                return 0 if ok else 1
            return 0
        record = measure(args.target, batch=args.batch, seq=args.seq, mode=args.mode,
                         device=args.device, steps=args.steps, warmup=args.warmup,
                         record=args.record, parallel=args.parallel, **values)
    except (WorkloadError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.parallel:
        _say_measured(record)
    return 0


def _inputs(target):
    """The workload's file as an input no output may replace (none for a module's name)."""
    file = target.rpartition(":")[0]
    return [("FILE.py", os.path.abspath(file))] if os.path.isfile(file) else []


def _launch(args, argv):
    """``bench --nproc N --parallel P``: N ranks under torchrun on this machine, each measured
    with the estimate of rank 0 beside it; each rank's Record then summarised."""
    if not args.nproc or args.nproc < 2:
        print(f"error: --parallel {args.parallel} needs --nproc 2 or more", file=sys.stderr)
        return 2
    try:
        _native.check_outputs([("--record", args.record)], _inputs(args.target))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # `--no-python --`: the ranks' own arguments are never read as torchrun's (`--nproc`).
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={args.nproc}", "--no-python", "--", sys.executable, "-m",
           "memscope", "module", *argv]
    done = subprocess.run(cmd)
    if done.returncode != 0:
        print(f"error: the job's ranks failed (torchrun exit {done.returncode}); their "
              "messages are above", file=sys.stderr)
        return 2
    for rank in range(args.nproc):
        path = per_rank(args.record, (rank, args.nproc))
        with open(path) as f:
            _say_measured(json.load(f), f"rank {rank} of {args.nproc} ({args.parallel})")
    return 0


def _say_measured(record, who=None):
    mem = record["memory"]
    e = mem.get("estimate") or {}
    mib = 2 ** 20
    print(f"{record['model']['name']}{', ' + who if who else ''}: "
          f"{record['model']['params']:,} parameters, {record['spec']['steps']} measured steps")
    peak = mem["heap_peak_bytes"]
    line = f"  heap peak {peak / mib:,.1f} MiB ({record['spec']['engine']['memory']})"
    if e.get("peak_bytes"):
        err = (e["peak_bytes"] - peak) / peak * 100 if peak else 0.0
        line += f"; predicted {e['peak_bytes'] / mib:,.1f} MiB ({err:+.2f}%)"
    print(line)
    step = record["timing"].get("step") or record["timing"].get("forward")
    if step:
        print(f"  step {step['median_ms']:,.2f} ms median (MAD {step['mad_ms']:,.2f} ms)")


def _write(path, text):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
