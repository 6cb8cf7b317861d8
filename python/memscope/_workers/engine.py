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
each rank recorded by its own ``Session``. Rank 0 alone speaks the protocol: its step lines, then
``{"ranks": [Record of rank 0, rank 1, …]}`` gathered over the process group. A rank's
out-of-memory line names the rank.
"""

import itertools
import json
import os
import sys

from . import _contract

OOM_PREFIX = "memscope-oom "
EXIT_OOM = 3
DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


class Refused(Exception):
    """A request the engine cannot run as asked (said on stderr, exit code 2)."""


def _tokens(np, spec, vocab):
    """A function giving each call's (batch, T) int64 array of token ids: seeded random ids, or
    the --data file's batch k at the k-th call, read by memscope's own reader (``_native``:
    ``src/input/tokens.rs``), so both engines train on the same windows."""
    b, t = spec.batch, spec.seq
    rank, world = _rank()
    plan = spec.torch.parallel if spec.torch else None
    if plan is not None and plan.tp > 1:
        # A tensor-parallel group's ranks work on one batch: the group is the data rank.
        rank, world = rank // plan.tp, world // plan.tp
    # Every data rank its own batches, as a DistributedSampler gives them.
    rng = np.random.default_rng(spec.seed + rank)
    data = spec.data
    if not data:
        return lambda: rng.integers(0, vocab, size=(b, t), dtype=np.int64)
    from . import _native
    # Generation reads prompts: windows of the prompt's length, as memscope's engine does.
    if spec.mode == "generate":
        t = spec.prompt_len
    try:
        tokens = _native.TokenFile(str(data.path), data.bin_dtype)
    except ValueError as e:
        raise Refused(str(e)) from None
    calls = itertools.count()

    def windows():
        try:
            flat = tokens.batch(next(calls) * world + rank, b, t, spec.seed, vocab)
        except ValueError as e:
            raise Refused(str(e)) from None
        return np.asarray(flat, dtype=np.int64).reshape(b, t + 1)[:, :t]
    return windows


class Engine:
    """One request's model, optimizer and step functions; ``request``: the request read through
    the contract (``_contract.read``). ``trace=True``: for the estimator's trace under
    FakeTensorMode (``trace.py``): nothing is set on the device."""

    def __init__(self, request, out, trace=False):
        import numpy as np
        import torch
        import transformers

        from . import _hf
        self.np, self.torch, self.transformers, self.hf = np, torch, transformers, _hf
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
        self.stop = _Stop()  # main() installs its handlers for the whole run
        self._past = None  # the KV cache while a generation runs
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
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        wrapped = self.wrap(model) if self.wrap is not None else None
        self.model = model
        self.optimizer = None
        if train:
            self.optimizer, self.optimizer_impl = self.hf.make_adamw(
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
        import contextlib

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
        run's baseline is read, so it is not counted as the run's."""
        cfg = self.cfg.replace(n_layers=1, name="prime")
        full = (self.cfg, self.expected, self.spec, self.variant, self.wrap)
        self.wrap = None  # one process's step: no collective in the warm-up
        spec = self.spec.replace(grad_accum=1, new_tokens=min(2, self.spec.new_tokens or 0),
                                 variant=self.spec.variant.replace(fusion="full"))
        self.cfg, self.spec, self.variant = cfg, spec, spec.variant
        try:
            torch = self.torch
            torch.manual_seed(0)
            attention = "eager" if self.variant.attention == "naive" else "sdpa"
            with torch.device("meta"):
                model = self.hf.build(torch, self.transformers, cfg, attention)
            self.expected = sum(p.numel() for p in model.parameters())
            del model
            self.build()
            self.phase = _no_phase
            ids = torch.randint(0, cfg.vocab_size, (spec.batch, spec.seq),
                                device=self.device)
            {"train": self.train_step, "infer": self.infer_step,
             "generate": self.generate_step}[self.mode](lambda: ids)
        finally:
            self.cfg, self.expected, self.spec, self.variant, self.wrap = full
            self.model = self.optimizer = self.forward = None

    def autocast(self):
        import contextlib
        if self.mixed:
            return self.torch.autocast(self.device.type, dtype=self.dtype)
        return contextlib.nullcontext()

    def run(self):
        from .session import Session
        from ._record import series_entry
        torch, spec = self.torch, self.spec
        from . import _native
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
        import gc
        gc.collect()
        base = _native.counter_read()[0] if counting else 0
        self.build()
        cfg = self.cfg
        vocab = cfg.vocab_size
        batches = _tokens(self.np, spec, vocab)
        warmup, steps = spec.warmup, spec.steps
        fields = {"spec": {k: v for k, v in spec.raw.items() if k != "engine"},
                  "model": {"name": spec.model, "family": cfg.family, "n_layers": cfg.n_layers,
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
            from ._categories import unique_bytes
            s.extra_categories = lambda: {
                "kv_cache": unique_bytes(_cache_tensors(self._past, torch), self.device)[0]}
        if counting:
            s.reader = _Since(s.reader, base)
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

            from ._collectives import Collectives
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
                f"{(base - before) / 2**20:.1f} MiB stayed after a one-layer warm-up step of "
                "this model's widths and shapes (libraries' first-use set-up, such as the "
                "workspace BLAS keeps for its products)")
        if self.optimizer is not None:
            record["warnings"].append(f"torch engine: AdamW {self.optimizer_impl}")
        line = {"record": record}
        if spec.torch.parallel:
            # Every rank's Record to rank 0, which alone writes the protocol.
            import torch.distributed as dist
            rank, world = _rank()
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
            from ._collectives import ddp_buckets
            sizes = ddp_buckets(self.forward)
            c = counted.setdefault("all_reduce", {"calls": 0, "bytes": 0, "group": 0})
            c["calls"] += len(sizes)
            c["bytes"] += sum(sizes)
            c["group"] = max(c["group"], _rank()[1])
        return counted

    def ids(self, batches):
        return self.torch.from_numpy(batches()).to(self.device)

    def train_step(self, draw):
        """One optimizer step over --grad-accum micro-batches; ``draw()`` gives each one's ids.
        Random ids: one batch drawn once, as memscope's engine does; --data: a window each."""
        phase = self.phase
        losses = []
        accum = self.spec.grad_accum
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
                past = self._past = _cache_of(out)
                nxt = out.logits[:, -1:].argmax(-1)
            del out
            for _ in range(self.spec.new_tokens):
                with s.phase("decode"):
                    out = self.forward(input_ids=nxt, use_cache=True,
                                       **{self.cache_kw: past})
                    past = self._past = _cache_of(out)
                    nxt = out.logits[:, -1:].argmax(-1)
                del out
        del past
        self._past = None
        return []

    def oom_facts(self, e):
        torch = self.torch
        facts = {"device": str(self.device)}
        if self.spec.torch.parallel:
            facts["rank"] = _rank()[0]
        req = self.hf.size_from_message(str(e))
        if req is not None:
            facts["requested_bytes"] = req
        if self.device.type == "cuda":
            st = torch.cuda.memory_stats(self.device)
            facts["allocated_bytes"] = st.get("allocated_bytes.all.current", 0)
            facts["reserved_bytes"] = st.get("reserved_bytes.all.current", 0)
            if self.limit:
                facts["limit_bytes"] = self.limit
        else:
            from . import _native
            if _native.counter_active():
                facts["allocated_bytes"] = _native.counter_read()[0]
        s = self.session
        if s is not None and s._phase is not None:
            facts["phase"] = s._phase["name"]
        elif s is None:
            facts["phase"] = "load"
        return facts


class _Stop:
    """SIGINT and SIGTERM while the engine runs (memscope passes `leak`'s stop on as SIGINT; a
    terminal's Ctrl-C reaches both): the first one ends the step under way at once
    (KeyboardInterrupt) or, between steps, the loop after the step; later ones are ignored, so
    the Record is always written."""

    def __init__(self):
        self.asked = None
        self.in_step = False
        self.previous = {}

    def __enter__(self):
        import signal
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc):
        import signal
        for sig, h in self.previous.items():
            signal.signal(sig, h)
        return False

    def _on_signal(self, signum, frame):
        import signal
        if self.asked is not None:
            return
        self.asked = signal.Signals(signum).name
        if self.in_step:
            raise KeyboardInterrupt

    def step(self):
        import contextlib

        @contextlib.contextmanager
        def inside():
            self.in_step = True
            try:
                yield
            finally:
                self.in_step = False
        return inside()


def _cache_tensors(cache, torch):
    """The key and value tensors a transformers cache holds: its layers' ``keys``/``values``
    (a DynamicCache), the older ``key_cache``/``value_cache`` lists, or legacy tuples."""
    if cache is None:
        return
    if isinstance(cache, torch.Tensor):
        yield cache
        return
    if isinstance(cache, (list, tuple)):
        for x in cache:
            yield from _cache_tensors(x, torch)
        return
    for layer in getattr(cache, "layers", None) or ():
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                yield t
    for name in ("key_cache", "value_cache"):
        yield from _cache_tensors(getattr(cache, name, None), torch)


def _cache_of(out):
    """A model output's KV cache (`cache`, or `past_key_values` in older transformers)."""
    c = getattr(out, "cache", None)
    return c if c is not None else out.past_key_values


def _no_phase(name):
    import contextlib
    return contextlib.nullcontext()


class _Since:
    """A CPU reader whose live and peak bytes count from ``base`` (the libraries' bytes before
    the model was built)."""

    def __init__(self, reader, base):
        self.inner, self.base = reader, base
        self.memory, self.allocator = reader.memory, reader.allocator

    def reset_peak(self):
        self.inner.reset_peak()

    def read(self):
        r = dict(self.inner.read())
        r["live"] = max(r["live"] - self.base, 0)
        r["peak"] = max(r["peak"] - self.base, 0)
        return r


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


def _is_oom(torch, e):
    if isinstance(e, getattr(torch, "OutOfMemoryError", ())) or \
            isinstance(e, torch.cuda.OutOfMemoryError):
        return True
    text = str(e)
    return isinstance(e, (RuntimeError, MemoryError)) and (
        "DefaultCPUAllocator" in text or "can't allocate memory" in text
        or "not enough memory" in text or isinstance(e, MemoryError))


def open_protocol(what):
    """The start of a process memscope drives (the engine, the trace): stdout kept for the
    protocol, anything a library prints sent to stderr, the request read from stdin, PyTorch and
    transformers present. Returns (protocol stream, request), or None after saying what is wrong
    on stderr (exit code 2)."""
    import warnings
    warnings.filterwarnings("ignore", module="transformers")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # torchrun's ranks share no stdin: memscope gives them the request in the environment,
    # and only then is this process a rank of a job (RANK set by anything else is not ours).
    global _IN_JOB
    given = os.environ.pop("MEMSCOPE_REQUEST", None)
    _IN_JOB = given is not None
    # A job's ranks: rank 0 speaks the protocol, the others say nothing on it.
    out = os.fdopen(os.dup(1), "w") if _rank()[0] == 0 else open(os.devnull, "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        request = json.loads(given) if given is not None else json.load(sys.stdin)
    except ValueError as e:
        where = "in MEMSCOPE_REQUEST" if given is not None else "on stdin"
        print(f"error: {what} reads a request (JSON) {where}: {e}", file=sys.stderr)
        return None
    try:
        import torch
        import transformers
    except ImportError as e:
        if any(m in str(e) for m in ("failed to map segment", "cannot allocate memory")):
            # Installed, but not loadable in the memory this process may use.
            print(f"error: {what} could not load PyTorch's libraries: out of memory ({e})",
                  file=sys.stderr)
        else:
            print(f"error: {what} needs PyTorch and transformers ({e}): "
                  f"{sys.executable} -m pip install torch transformers", file=sys.stderr)
        return None
    # The first protocol line: memscope's bound on the start ends here.
    out.write(json.dumps({"started": {"python": sys.version.split()[0],
                                      "torch": torch.__version__,
                                      "transformers": transformers.__version__}}) + "\n")
    out.flush()
    return out, request


def answer_once(what, fn, request=None, answer=None):
    """The main of a module run once (the trace, the peaks): the request in, ``fn(request)``'s
    answer out as one JSON line; a refusal said on stderr (exit code 2). ``request`` and
    ``answer`` name their messages in the contract (``_contract``) where they have one: the
    request is then given to ``fn`` read through it (``_contract.read``)."""
    opened = open_protocol(what)
    if opened is None:
        return 2
    out, received = opened
    try:
        result = fn(_contract.read(request, received) if request else received)
        if answer:
            _contract.check(answer, result)
    except (Refused, _contract.ContractError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out.write(json.dumps(result, separators=(",", ":")) + "\n")
    out.flush()
    return 0


def main():
    opened = open_protocol("the torch engine")
    if opened is None:
        return 2
    out, request = opened
    import torch
    engine = None
    try:
        request = _contract.read("request", request)
        _hold_heap(request.spec.torch.heap_limit_bytes)
        with _Stop() as stop:
            wrap = _join_job(torch, request.spec) if request.spec.torch.parallel else None
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
    except (Refused, _contract.ContractError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BaseException as e:  # noqa: BLE001 - out of memory is an outcome, the rest re-raised
        failed = _compile_failure(e)
        if failed is not None:
            print(f"error: {failed}", file=sys.stderr)
            return 2
        if not _is_oom(torch, e):
            raise
        facts = engine.oom_facts(e) if engine is not None else {"device": "unknown"}
        print(OOM_PREFIX + json.dumps(_contract.check("oom_facts", facts)), file=sys.stderr)
        print(f"out of memory: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
              file=sys.stderr)
        return EXIT_OOM
    finally:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return 0


# This process is a rank of a job memscope launched under torchrun (`open_protocol`).
_IN_JOB = False


def _rank():
    """(rank, world size) of this process in a torchrun job memscope launched; (0, 1)
    otherwise."""
    if not _IN_JOB:
        return 0, 1
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _hold_heap(limit):
    """A CPU rank under ``--memory-limit``: its heap held to it by the counting malloc."""
    if not limit:
        return
    from . import _native
    try:
        _native.counter_limit(limit)
    except ValueError as e:
        raise Refused(f"--memory-limit: {e}") from None


def die_with_torchrun():
    """A rank of a job memscope launched dies with torchrun (Linux's parent-death signal) and at
    once on torchrun's SIGTERM (a rank blocked in a collective never reaches Python's
    handlers)."""
    import ctypes
    import signal
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:
        os._exit(1)  # torchrun died before the signal was armed
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _join_job(torch, spec):
    """This process as one rank of ``spec``'s data-parallel job, started by torchrun: it dies
    with torchrun (Linux's parent-death signal) and at once on torchrun's SIGTERM (a rank blocked
    in a collective never reaches Python's handlers), joins the process group (gloo on the CPU,
    NCCL on CUDA, one GPU per rank). Returns the function that wraps the model: DDP, FSDP2's
    ``fully_shard`` on every block and the root, tensor parallelism, or both."""
    plan = spec.torch.parallel
    die_with_torchrun()
    if not _IN_JOB or "RANK" not in os.environ:
        raise Refused(f"--parallel {plan.plan}: the engine's ranks run under torchrun, which "
                      "memscope starts (`memscope bench --engine torch --nproc N --parallel …`)")
    rank, world = _rank()
    if world != plan.world:
        raise Refused(f"--nproc {plan.world}: torchrun started {world} ranks")
    cuda = spec.torch.device.startswith("cuda")
    if cuda:
        have = torch.cuda.device_count()
        here = int(os.environ.get("LOCAL_WORLD_SIZE", plan.world))  # this node's ranks
        if have == 0:
            flag = plan.plan if plan.tp in (None, 1) else f"{plan.plan}:{plan.tp}"
            raise Refused(f"--device {spec.torch.device}: this PyTorch ({torch.__version__}) sees "
                          "no CUDA GPU here, and each rank of a CUDA job needs one; use --device "
                          "cpu, or predict the job without GPUs: memscope estimate --engine "
                          f"torch --device cuda --nproc {plan.world} --parallel {flag}")
        if here > have:
            raise Refused(f"--nproc {plan.world}: {here} ranks on this machine, which has {have} "
                          f"CUDA GPU(s), and a rank needs one; use --nproc {have} or fewer a node")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    import torch.distributed as dist
    dist.init_process_group("nccl" if cuda else "gloo")
    hang = os.environ.get("MEMSCOPE_TEST_HANG_RANK")
    if hang is not None and int(hang) == rank:
        # Test-only: this rank never reaches the first collective, as a hung rank does not.
        import time
        time.sleep(24 * 3600)
    device_type = "cuda" if cuda else "cpu"
    if plan.plan == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        def ddp(model):
            ids = [torch.cuda.current_device()] if cuda else None
            return DistributedDataParallel(model, device_ids=ids)
        return ddp
    from .trace import sharding_wrap
    return sharding_wrap(torch, plan, device_type)


if __name__ == "__main__":
    sys.exit(main())
