"""memscope's torch engine: ``memscope bench --engine torch`` (and leak, sweep, fit, optimize)
runs a memscope Spec here, through Hugging Face transformers' own model classes on PyTorch,
measured by the recorder (``Session``), so the Record has the shape of memscope's own.

Protocol (``src/torch/process.rs``): the request ``{"spec": …, "expected_params": N}`` on stdin;
one JSON line per finished step on stdout (its series entry), then ``{"record": …}``; everything
else the process prints goes to stderr. Out of memory: a ``memscope-oom {…}`` line on stderr
(the device, the bytes requested, allocated and reserved, the phase) and exit code 3.

The workload is memscope's: the same seed, batch, sequence, dtype, warm-up and steps, random
token ids (or windows of ``--data``), AdamW with memscope's settings (fused where torch has it).
Variants are PyTorch's own features: attention ``sdpa`` (``--attention fused``) or ``eager``
(``naive``); ``--checkpoint``: ``gradient_checkpointing_enable`` per block; ``--precision
mixed``: autocast to the dtype over f32 weights, ``pure``: the model cast to the dtype;
``--fusion compile``: ``torch.compile``.

A data-parallel run (``spec.torch.parallel``: ``--nproc N --parallel ddp|fsdp``) runs as every
rank of a ``torchrun`` job (``src/torch/process.rs`` launches it; the request in the
``MEMSCOPE_REQUEST`` environment variable): a gloo (CPU) or NCCL (CUDA) process group, the model
wrapped in ``DistributedDataParallel`` or FSDP2's ``fully_shard`` (every block, then the root),
each rank recorded by its own ``Session``; under ``pp:P`` each rank keeps only its stages
(``pipeline.py``) and a step is PyTorch's schedule over the micro-batches, each chunk's forward
and backward marked as those phases. Rank 0 alone speaks the protocol: its step lines, then
``{"ranks": [Record of rank 0, rank 1, …]}`` gathered over the process group. A rank's
out-of-memory line names the rank.
"""

import contextlib
import gc
import json
import os
import sys

from .. import _contract, _native
from .._adamw import make_adamw
from .._categories import unique_bytes
from .._memory import Since
from .._sharding import DTYPES, PlanError
from .._record import series_entry
from ..session import Session
from . import checkpointing, models, protocol
from . import parallel as plans
from .._collectives import Collectives, ddp_buckets
from .inputs import cache_of, cache_tensors, tokens
from .pipeline import Pipeline
from .protocol import Refused
from .stop import Stop

OOM_PREFIX = "memscope-oom "
EXIT_OOM = 3


class Engine:
    """One request's model, optimizer and step functions; ``request``: the request read through
    the contract (``_contract.read``). ``trace=True``: for the estimator's trace under
    FakeTensorMode (``trace.py``): nothing is set on the device."""

    def __init__(self, request, out, trace=False):
        import numpy as np
        import torch
        import transformers

        self.np, self.torch, self.transformers, self.hf = np, torch, transformers, models
        self.out = out
        self.spec = spec = request.spec
        self.cfg = spec.config
        target = spec.torch
        self.device = torch.device(target.device)
        if self.device.type == "cuda" and not trace:
            if not torch.cuda.is_available():
                raise Refused(f"--device {target.device}: this PyTorch ({torch.__version__}) "
                              "sees no CUDA GPU; use --device cpu")
            if self.device.index is None:
                index = int(os.environ.get("LOCAL_RANK", torch.cuda.current_device()))
                self.device = torch.device("cuda", index)
            count = torch.cuda.device_count()
            if self.device.index >= count:
                raise Refused(f"--device {target.device}: this machine has {count} CUDA "
                              f"GPU{'s' if count != 1 else ''} (cuda:0 to cuda:{count - 1}); "
                              "pick one of them, or --device cuda for the first")
            torch.cuda.set_device(self.device)
            limit = target.gpu_memory_limit_bytes
            if limit:
                total = torch.cuda.get_device_properties(self.device).total_memory
                if limit > total:
                    raise Refused(f"--memory-limit {limit} B is more than {self.device}'s "
                                  f"{total} B")
                torch.cuda.set_per_process_memory_fraction(limit / total, self.device)
        elif self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", 0)
        self.limit = target.gpu_memory_limit_bytes
        if not trace:
            torch.set_num_threads(spec.threads)
        self.variant = v = spec.variant
        self.dtype = getattr(torch, DTYPES[spec.dtype])
        self.mixed = v.precision == "mixed"
        self.mode = spec.mode
        self.session = None
        self.stop = Stop()  # main() installs its handlers for the whole run
        self.past = None  # the KV cache while a generation runs
        self.phase = None  # name -> context manager marking that phase
        self.expected = request.expected_params
        # model -> module to call or None (wrapped in place): what wraps the model before its
        # optimizer is made (FSDP2's `fully_shard`, DDP); None: nothing.
        self.wrap = None

    def build(self):
        torch, v = self.torch, self.variant
        torch.manual_seed(self.spec.seed)
        attention = "eager" if v.attention == "naive" else "sdpa"
        # Built in place, in the dtype it runs in (f32 masters under mixed precision), on the
        # device: no copy made by Module.to().
        prev = torch.get_default_dtype()
        torch.set_default_dtype(torch.float32 if self.mixed else self.dtype)
        try:
            with torch.device(self.device):
                model = self.hf.build(torch, self.transformers, self.cfg, attention)
        finally:
            torch.set_default_dtype(prev)
        n = sum(p.numel() for p in model.parameters())
        if n != self.expected:
            raise Refused(f"transformers' {type(model).__name__} has {n} parameters; memscope's "
                          f"{self.spec.model} has {self.expected}: the two models differ, so "
                          "their figures could not be compared")
        train = self.mode == "train"
        model.train(train)
        if v.checkpoint:
            checkpointing.enable(torch, model, self.spec.torch.checkpoint_policy)
        wrapped = self.wrap(model) if self.wrap is not None else None
        if isinstance(wrapped, Pipeline):
            # This rank's stages are its model: the blocks of other stages go with the rest.
            model = wrapped
        self.model = model
        self.optimizer = None
        if train:
            self.optimizer, self.optimizer_impl = make_adamw(
                torch, model.parameters(), self.spec.lr, next(model.parameters()).dtype)
        self.forward = wrapped if wrapped is not None else model
        # The KV cache's keyword: `cache` in newer transformers, `past_key_values` before.
        import inspect
        params = inspect.signature(model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        if v.fusion == "compile":
            self.forward = torch.compile(model)

    def traced_steps(self, ids, set_phase, end_phase, on_step=None):
        """The estimator's workload on fixed ``ids``: two optimizer steps (the second has the
        optimizer's state), one forward, or one prefill and its decodes. Each phase's end is
        noted as its block exits, where the recorder marks it; ``on_step()`` runs before each
        step."""

        @contextlib.contextmanager
        def mark(name):
            set_phase(name)
            yield
            end_phase()
        self.phase = mark
        step_fn = {"train": self.train_step, "infer": self.infer_step,
                   "generate": self.generate_step}[self.mode]
        for _ in range(2 if self.mode == "train" else 1):
            if on_step is not None:
                on_step()
            step_fn(lambda: ids)

    def prime(self):
        """One step of a one-layer copy of the model (the same widths, vocabulary, batch,
        sequence, dtype and variant), then everything it made dropped: what PyTorch and its
        libraries set up on first use (modules loaded lazily, kernels' one-time set-up, the
        workspace BLAS keeps after its first products of these shapes) is in place before the
        run's baseline is read, so it is not counted as the run's. A mixture of experts is
        warmed up whole, on the run's seeded weights and first batch: each expert's products
        take the rows routed to it, so only the run's routing gives the run's shapes (a BLAS
        sets up a buffer for each thread a product of enough rows spreads over)."""
        cfg = self.cfg.replace(n_layers=1, name="prime")
        full = (self.cfg, self.expected, self.spec, self.variant, self.wrap, self.dtype)
        self.wrap = None  # one process's step: no collective in the warm-up
        spec = self.spec.replace(grad_accum=1, new_tokens=min(2, self.spec.new_tokens or 0),
                                 variant=self.spec.variant.replace(fusion="full"))
        pipe = self.spec.torch.pipeline
        if pipe is not None:
            # A pipeline's kernels run on its micro-batches: their shapes are the ones to set
            # up (the CPU's bf16 products keep a set-up per shape).
            spec = spec.replace(batch=spec.batch // pipe.micro_batches)
        fp = self.spec.torch.fsdp_precision
        if fp is not None:
            # FSDP2's policy computes in its parameter dtype: the warm-up step runs its kernels
            # (their one-time set-up is per dtype) in that dtype, as the run will.
            spec = spec.replace(dtype=fp.param, variant=spec.variant.replace(precision="pure"))
            self.dtype = getattr(self.torch, DTYPES[fp.param])
        self.cfg, self.spec, self.variant = cfg, spec, spec.variant
        try:
            torch = self.torch
            torch.manual_seed(0)
            attention = "eager" if self.variant.attention == "naive" else "sdpa"
            with torch.device("meta"):
                model = self.hf.build(torch, self.transformers, cfg, attention)
            moe = models.experts_of(getattr(model, "config", None)) is not None
            self.expected = sum(p.numel() for p in model.parameters())
            del model
            if moe:
                # The whole model: the run's own, whose parameters were counted already.
                cfg = self.cfg = full[0]
                self.expected = full[1]
            self.build()
            self.phase = _no_phase
            if moe:
                ids = torch.from_numpy(tokens(self.np, spec, cfg.vocab_size)()).to(self.device)
            else:
                ids = torch.randint(0, cfg.vocab_size, (spec.batch, spec.seq),
                                    device=self.device)
            {"train": self.train_step, "infer": self.infer_step,
             "generate": self.generate_step}[self.mode](lambda: ids)
        finally:
            self.cfg, self.expected, self.spec, self.variant, self.wrap, self.dtype = full
            self.model = self.optimizer = self.forward = None

    def autocast(self):
        if self.mixed:
            return self.torch.autocast(self.device.type, dtype=self.dtype)
        return contextlib.nullcontext()

    def run(self):
        torch, spec = self.torch, self.spec
        counting = self.device.type == "cpu" and _native.counter_active()
        # What transformers, PyTorch and BLAS set up on a first step (modules, the kernels'
        # one-time set-up, BLAS's workspace) is set up first, by one step of a one-layer copy
        # of the model, so those bytes are not counted as the run's; the Record says how many.
        before = _native.counter_read()[0] if counting else 0
        if counting:
            try:
                self.prime()
            except Exception as e:  # noqa: BLE001 - priming is an optimisation of the figures
                print(f"memscope: the one-layer warm-up step failed ({e}); the first step's lazy "
                      "loading is counted in the run's figures", file=sys.stderr)
        gc.collect()
        base = _native.counter_read()[0] if counting else 0
        self.build()
        cfg = self.cfg
        vocab = cfg.vocab_size
        batches = tokens(self.np, spec, vocab)
        warmup, steps = spec.warmup, spec.steps
        # A model transformers builds from its config.json is named by its model_type.
        family = cfg.transformers.model_type if cfg.transformers else cfg.family
        fields = {"spec": {k: v for k, v in spec.raw.items() if k != "engine"},
                  "model": {"name": spec.model, "family": family, "n_layers": cfg.n_layers,
                            "d_model": cfg.d_model, "n_heads": cfg.n_heads, "vocab_size": vocab}}
        seq = spec.seq
        s = Session(self.model, self.optimizer, record=None, warmup=warmup, device=self.device,
                    batch=spec.batch, seq=seq, auto_phases=False,
                    by_module=spec.variant.fusion != "compile",
                    name=spec.model, record_fields=fields, exclude_baseline=False)
        s.advice = "cli"  # the user ran memscope's command: its warnings name its flags
        if self.mode == "generate":
            s.mean_phases.add("decode")
            # The KV cache is its own category: the unique storages of the cache's keys and
            # values at every phase end.
            s.extra_categories = lambda: {
                "kv_cache": unique_bytes(cache_tensors(self.past, torch), self.device)[0]}
        if isinstance(self.forward, torch.nn.parallel.DistributedDataParallel):
            # DDP's gradient buckets, made when the model was wrapped (and remade after its
            # first step in the order gradients arrived): the sizes its reducer allocated.
            s.extra_categories = lambda: {"gradient_buckets": sum(ddp_buckets(self.forward))}
        if counting:
            s.reader = Since(s.reader, base)
        self.session = s
        self.phase = s.phase
        step_fn = {"train": self.train_step, "infer": self.infer_step,
                   "generate": self.generate_step}[self.mode]
        fixed = self.ids(batches) if not spec.data else None
        draw = (lambda: fixed) if fixed is not None else (lambda: self.ids(batches))
        stop = self.stop
        # The handlers (installed in main(), before the model is built) stay until the Record
        # is out: a second signal never costs it.
        dropped = False
        # A data-parallel run: the collectives each step ran, by kind (the last step's kept).
        counter = None
        if spec.torch.parallel:
            import torch.distributed as dist

            counter = Collectives(dist).__enter__()
        collectives = None
        with s:
            for i in range(warmup + steps):
                try:
                    with stop.step():
                        losses = step_fn(draw)
                except KeyboardInterrupt:
                    # The step under way is not a measured step.
                    s.discard_step()
                    stop.asked = stop.asked or "SIGINT"
                    dropped = True
                    break
                s.step(sum(float(x) for x in losses) if losses else None)
                if counter is not None:
                    collectives = counter.take()  # between steps: this step's
                    stop.agree(torch, self.device)
                    counter.take()  # the agreement's own all-reduce is no step's
                line = _contract.check("engine_line", series_entry(s.last_step))
                self.out.write(json.dumps(line) + "\n")
                self.out.flush()
                if stop.asked:
                    break
        if counter is not None:
            counter.__exit__(None, None, None)
            if collectives is not None:
                collectives = self.step_collectives(collectives)
        record = s.record
        if record is not None and collectives is not None:
            record["collectives"] = collectives
        if record is None:
            raise Refused(f"stopped by {stop.asked} before any step finished" if stop.asked
                          else "no step finished")
        if stop.asked:
            record["warnings"].append(
                f"stopped by {stop.asked} after {s.steps_closed} of {warmup + steps} steps "
                "(warm-up included)" + ("; the step under way was left out" if dropped else ""))
        if counting:
            record["warnings"].append(
                "heap figures count from just before the model was built: the "
                f"{base / 2**20:.1f} MiB ({base} B) the "
                "interpreter and PyTorch's libraries held before are left out, as CUDA's "
                "allocated bytes leave out the CUDA context; of them, "
                f"{(base - before) / 2**20:.1f} MiB stayed after a warm-up step of this "
                "model's widths and shapes (one layer; a mixture of experts whole, on the run's "
                "first batch) (libraries' first-use set-up, such as the workspace BLAS keeps "
                "for its products)")
        if self.optimizer is not None:
            record["warnings"].append(f"torch engine: AdamW {self.optimizer_impl}")
        line = {"record": record}
        if spec.torch.parallel:
            # Every rank's Record to rank 0, which alone writes the protocol.
            import torch.distributed as dist
            rank, world = protocol.rank()
            gathered = [None] * world if rank == 0 else None
            dist.gather_object(record, gathered, dst=0)
            if rank != 0:
                return
            line = {"ranks": gathered}
        self.out.write(json.dumps(_contract.check("engine_line", line)) + "\n")
        self.out.flush()

    def step_collectives(self, counted):
        """The last step's collectives by kind: those counted in Python (FSDP2's), and DDP's
        bucket all-reduces, which its reducer runs in C++ (their sizes from its logging data,
        read once after the loop: its last iteration's buckets)."""
        if isinstance(self.forward, self.torch.nn.parallel.DistributedDataParallel):
            sizes = ddp_buckets(self.forward)
            c = counted.setdefault("all_reduce", {"calls": 0, "bytes": 0, "group": 0})
            c["calls"] += len(sizes)
            c["bytes"] += sum(sizes)
            c["group"] = max(c["group"], protocol.rank()[1])
        return counted

    def ids(self, batches):
        return self.torch.from_numpy(batches()).to(self.device)

    def train_step(self, draw):
        """One optimizer step over --grad-accum micro-batches; ``draw()`` gives each one's ids.
        Random ids: one batch drawn once, as memscope's engine does; --data: a window each."""
        phase = self.phase
        losses = []
        accum = self.spec.grad_accum
        if isinstance(self.forward, Pipeline):
            # PyTorch's schedule runs the micro-batches' forwards and backwards itself.
            losses = self.forward.run(draw(), phase)
        else:
            for _ in range(accum):
                ids = draw()
                with phase("forward"), self.autocast():
                    loss = self.forward(input_ids=ids, labels=ids).loss / accum
                with phase("backward"):
                    loss.backward()
                losses.append(loss.detach())
                del loss
        with phase("optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return losses

    def infer_step(self, draw):
        phase, torch = self.phase, self.torch
        ids = draw()
        with torch.no_grad(), phase("forward"), self.autocast():
            loss = self.forward(input_ids=ids, labels=ids).loss
        return [loss]

    def generate_step(self, draw):
        s, torch = self, self.torch
        ids = draw()[:, :self.spec.prompt_len]
        with torch.no_grad(), self.autocast():
            with s.phase("prefill"):
                out = self.forward(input_ids=ids, use_cache=True)
                past = self.past = cache_of(out)
                nxt = out.logits[:, -1:].argmax(-1)
            del out
            for _ in range(self.spec.new_tokens):
                with s.phase("decode"):
                    out = self.forward(input_ids=nxt, use_cache=True,
                                       **{self.cache_kw: past})
                    past = self.past = cache_of(out)
                    nxt = out.logits[:, -1:].argmax(-1)
                del out
        del past
        self.past = None
        return []

    def oom_facts(self, e):
        torch = self.torch
        facts = {"device": str(self.device)}
        if self.spec.torch.parallel:
            facts["rank"] = protocol.rank()[0]
        if isinstance(getattr(self, "model", None), Pipeline):
            facts["stages"] = [list(b) for b in self.model.bounds]
        req = self.hf.size_from_message(str(e))
        if req is not None:
            facts["requested_bytes"] = req
        if self.device.type == "cuda":
            st = torch.cuda.memory_stats(self.device)
            facts["allocated_bytes"] = st.get("allocated_bytes.all.current", 0)
            facts["reserved_bytes"] = st.get("reserved_bytes.all.current", 0)
            if self.limit:
                facts["limit_bytes"] = self.limit
        elif _native.counter_active():
            facts["allocated_bytes"] = _native.counter_read()[0]
        s = self.session
        if s is not None and s.current_phase is not None:
            facts["phase"] = s.current_phase
        elif s is None:
            facts["phase"] = "load"
        return facts


def _no_phase(name):
    import contextlib
    return contextlib.nullcontext()


COMPILE_FAILURES = ("BackendCompilerFailed", "InductorError", "InvalidCxxCompiler",
                    "CppCompileError", "CalledProcessError")


def _compile_failure(e):
    """torch.compile's failure (``--fusion compile``) in one sentence with its cause, instead of
    Inductor's traceback of a hundred lines; None for any other exception."""
    chain, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    if not any(type(x).__name__ in COMPILE_FAILURES[:4] for x in chain):
        return None
    cause = chain[-1]
    lines = [l.strip() for l in str(cause).splitlines() if l.strip()]
    why = next((l for l in lines if "compiler" in l.lower()), lines[0] if lines else "")
    return (f"--fusion compile: torch.compile failed ({type(cause).__name__}: {why[:300]}); "
            "on the CPU its Inductor backend needs a working C++ compiler (install g++, or point "
            "CXX at one), or run without --fusion compile")


def _oom_cause(torch, e):
    """PyTorch's out-of-memory error: ``e``, or the one it was raised from (a pipeline's
    schedule re-raises what a stage's action raised as a RuntimeError naming the action);
    None for any other error."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, getattr(torch, "OutOfMemoryError", ())) or \
                isinstance(e, torch.cuda.OutOfMemoryError):
            return e
        text = str(e)
        if isinstance(e, (RuntimeError, MemoryError)) and (
                "DefaultCPUAllocator" in text or "can't allocate memory" in text
                or "not enough memory" in text or isinstance(e, MemoryError)):
            return e
        e = e.__cause__ or e.__context__
    return None


def main():
    opened = protocol.open_protocol("the torch engine")
    if opened is None:
        return 2
    out, request = opened
    import torch
    engine = None
    try:
        request = _contract.read("request", request)
        _hold_heap(request.spec.torch.heap_limit_bytes)
        with Stop(job=bool(request.spec.torch.parallel)) as stop:
            wrap = plans.join_job(torch, request.spec) if request.spec.torch.parallel else None
            engine = Engine(request, out)
            engine.stop = stop
            engine.wrap = wrap
            engine.run()
        if wrap is not None:
            # Every rank past its last collective before any tears its process group down: a
            # rank that destroys gloo's pairs while a peer still reads from them (rank 0
            # gathering the Records) aborted now and then in a job across nodes.
            import torch.distributed as dist
            dist.barrier()
    except (Refused, PlanError, _contract.ContractError) as e:
        protocol.say(f"error: {e}")
        return 2
    except BaseException as e:  # noqa: BLE001 - out of memory is an outcome, the rest re-raised
        failed = _compile_failure(e)
        if failed is not None:
            protocol.say(f"error: {failed}")
            return 2
        cause = _oom_cause(torch, e)
        refused = _limit_refused()
        if cause is None and (refused is None or not isinstance(e, Exception)):
            raise
        if cause is not None:
            e = cause
        facts = engine.oom_facts(e) if engine is not None else {"device": "unknown"}
        if cause is None:
            # The limit refused an allocation PyTorch's allocator did not make (gloo's buffers,
            # a C++ library's `new`): out of memory all the same, with the size it asked for.
            facts.setdefault("requested_bytes", refused)
        protocol.say(OOM_PREFIX + json.dumps(_contract.check("oom_facts", facts)))
        protocol.say(f"out of memory: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        return EXIT_OOM
    finally:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return 0


def _limit_refused():
    """The bytes the first allocation refused by ``--memory-limit``'s heap limit asked for, or
    None when the rank ran without one or no allocation met it."""
    if not _native.counter_active():
        return None
    count, first = _native.counter_refusals()
    return first if count else None


def _hold_heap(limit):
    """A CPU rank under ``--memory-limit``: its heap held to it by the counting malloc."""
    if not limit:
        return
    try:
        _native.counter_limit(limit)
    except ValueError as e:
        raise Refused(f"--memory-limit: {e}") from None


if __name__ == "__main__":
    sys.exit(protocol.end_rank(main()))
