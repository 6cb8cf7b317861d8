"""The recorder: a session bound to a model and its optimizer.

Phases are found from hooks — the model's forward pre-hook starts ``forward``; the first saved
tensor autograd unpacks starts ``backward``, which ends when autograd's engine finishes (a
callback queued on it); the optimizer's step pre/post hooks bracket ``optimizer`` — or marked by
hand with ``with session.phase("name")``. ``session.step()`` closes a training step: one JSONL line
(flushed at once, so a killed job leaves its series), and at the end a memscope Record.

At each phase's end the session reads the allocator (peak since the phase started, bytes live)
and the categories from the tensors themselves (``_categories.py``). It never changes a tensor,
never keeps one alive (weak references only) and never allocates on the device.
"""

import json
import os
import time
import weakref
from contextlib import contextmanager

from . import _native
from ._categories import (SavedTensors, fsdp_params, gathered_tensors, hook_over_ours,
                          optimizer_tensors, unique_bytes)
from ._contract import check_record_field
from ._job import per_rank, rank_of
from ._loop_values import ending_of, input_shape, loss_number
from ._memory import reader_for, rss_bytes
from ._outputs import check_paths, move_previous, say_nothing_recorded, say_recorded
from ._profile import StepProfiler, window
from ._record import build_record, dtype_name, step_from_line
from ._registry import LAST, OPEN, RUNNING
from ._series import add_to_phase_memory, jsonl_line

class Session:
    """Records a training loop of ``model`` (and ``optimizer``) into a memscope Record.

    ``record``: the Record's path (JSON); ``jsonl``: the per-step series (default: the Record's
    path with ``.steps.jsonl``). ``warmup``: steps left out of the timing statistics (still in
    the series, flagged). ``batch``/``seq``: sequences and positions per micro-batch for the
    Record (read from the first 2-D input when not given). ``auto_phases=False`` leaves every
    phase to ``phase()`` / ``begin_phase()`` (what the Lightning callback does).
    ``record_fields``: ``{"spec": {...}, "model": {...}, "environment": {...}}``, fields set in
    those sections of the Record over what the session found (a caller that knows more — a
    preset's ``config``, the seed, the data — says so; the schema is checked after).
    ``record=None`` writes no file: ``close()`` returns the Record as a dict.
    ``exclude_baseline`` (CPU): leave what the process held at the start, beyond the model's
    parameters, gradients and optimizer state, out of the heap figures (the Record says how much).
    ``profile``: steps (indices from 0, warm-up included, e.g. ``range(5, 8)``) in which every
    ATen op is timed and charged to its module, for the Record's ``profile`` (op kinds, module
    tree, bound against the roofs); the other steps run without the hook.
    ``estimate``: memscope's prediction for this loop (``memscope.estimate(…).to_dict()``), put
    beside the measured figures: the Record's breakdown then sets each category's measured bytes
    against the predicted.
    """

    def __init__(self, model, optimizer=None, *, record="memscope-record.json", jsonl=None,
                 warmup=2, device=None, batch=None, seq=None, auto_phases=True, by_module=True,
                 name=None, record_fields=None, exclude_baseline=True, profile=None,
                 estimate=None):
        import torch

        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"Session(model=…): give the torch.nn.Module the loop trains (got "
                            f"{type(model).__name__} {getattr(model, '__name__', '')!s}".rstrip()
                            + "); a function that builds it must be called first")
        self.torch = torch
        self.model = model
        self.optimizer = optimizer
        if warmup < 0:
            raise ValueError(f"warmup={warmup}: give 0 or more steps")
        self.warmup = warmup
        params = list(model.parameters())
        if device is None:
            device = params[0].device if params else torch.device("cpu")
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.reader = reader_for(torch, device)
        self.rank = rank_of(torch)
        # Absolute now: an os.chdir in the loop changes nothing.
        self.record_path = os.path.abspath(per_rank(os.fspath(record), self.rank)) \
            if record is not None else None
        if jsonl is not None:
            self.jsonl_path = os.path.abspath(per_rank(os.fspath(jsonl), self.rank))
        elif self.record_path is not None:
            stem = self.record_path[:-5] if self.record_path.endswith(".json") else self.record_path
            self.jsonl_path = stem + ".steps.jsonl"
        else:
            self.jsonl_path = None
        # Refused here, before the loop runs, rather than at close() after it ran.
        check_paths(self.record_path, self.jsonl_path)
        self.batch, self.seq = batch, seq
        self.auto = auto_phases
        self.by_module = by_module
        self.name = name or type(model).__name__
        self.record_fields = dict(record_fields or {})
        self.estimate = estimate
        unknown = set(self.record_fields) - {"spec", "model", "environment"}
        if unknown:
            raise ValueError(f"record_fields: {sorted(unknown)} cannot be set; give fields of "
                             "'spec', 'model' or 'environment'")
        for section, fields in self.record_fields.items():
            if not isinstance(fields, dict):
                raise ValueError(f"record_fields[{section!r}]: give a dict of the Record's "
                                 f"{section} fields, not {type(fields).__name__}")
            for name, value in fields.items():
                # Checked now, naming the field, rather than failing the Record at close.
                check_record_field(section, name, value)
        self.profiler = None
        if profile is not None:
            # Each module's temporaries from the session's own counter; RSS does not fall when
            # memory is freed, so under it they are not measured.
            live = (None if self.reader.memory == "rss"
                    else (lambda: self.reader.read()["live"]))
            self.profiler = StepProfiler(torch, model, device, window(profile), live)
        self._params = params
        self.param_bytes, self._param_ptrs = unique_bytes(params, device)
        self.n_params = sum(p.numel() for p in params)
        # The model's bytes (params × their size); a sharded model's (DTensor: the global
        # numel) are more than this rank's own, `param_bytes`.
        sharded = any(hasattr(p, "_local_tensor") for p in params)
        self.model_param_bytes = (sum(p.numel() * p.element_size() for p in params) if sharded
                                  else self.param_bytes)
        self.param_dtype = params[0].dtype if params else torch.float32
        dtype_name(self.param_dtype)
        self.saved = SavedTensors(device)
        self.saved.exclude = self._param_ptrs
        # FSDP2's own record of each sharded parameter: its gathered copy is a category.
        self._fsdp = fsdp_params(model)
        self._cuda = device.type == "cuda"
        self._handles = []
        self._sth = None
        self._jsonl = None
        self._started = False
        self.closed = False
        # Per run.
        # The recorder's own retained bytes (counted heap only; see step()).
        self._own = 0
        # On the CPU, what the process held when the session started beyond the model's
        # parameters, gradients and optimizer state (the interpreter, PyTorch's libraries, the
        # script's data) is left out of every heap figure, as the torch engine leaves out what
        # was live before its model was built; the Record says how much.
        self._exclude_baseline = exclude_baseline and device.type == "cpu"
        self.baseline = 0
        # What of that the process freed later (the script's data dropped in the loop): the
        # baseline is lowered by it, so no heap figure reads less than the parameters.
        self.baseline_freed = 0
        self._counts_own = self.reader.memory == "malloc usable"
        # Phases timed per call (the mean of a step's calls), not summed: generate's decode.
        self.mean_phases = set()
        # Closed steps live in the JSONL file (read back at close), so the process holds O(1)
        # per step; in memory only when there is no file (record=None).
        self._steps_mem = [] if self.jsonl_path is None else None
        self.steps_closed = 0
        self.last_step = None
        self.phase_memory = {}   # phase -> first/last retained, peak, allocations
        self.peak_moments = {}   # phase -> moment (the last warm-up step, else the latest)
        self.record = None       # the Record (dict) once closed
        self.notes = []          # what the Record's warnings add (steps left out, hooks hidden)
        self._user_steps = 0     # step() calls by the user
        self.shadowed = None    # another saved_tensors_hooks over the recorder's, if seen
        self.moved = []          # a previous run's files moved aside at start
        # A callable -> {category: bytes} read at every phase end beside the session's own.
        self.extra_categories = None
        # Whose knobs the Record's advice names: "python" (Session(warmup=…)) for a user's
        # loop, "cli" (--warmup, --steps) when memscope's command line drives the session.
        self.advice = "python"
        # Per step.
        self._phase = None
        self._explicit = 0
        self._marks = []
        self._module_stack = []
        self._step_t0 = None

    # -- life cycle -------------------------------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(ending=ending_of(exc_type, exc))
        return False

    def start(self):
        if self.closed:
            raise RuntimeError(
                "this Session was closed and its Record written: a second `with` on it would "
                "record nothing; make a new memscope.Session for another run")
        if self._started:
            return self
        self._started = True
        torch = self.torch
        # A previous run's Record and series are moved aside, never replaced by this run's nor
        # left beside its series as if they were this run's.
        self.moved = move_previous(self.record_path, self.jsonl_path)
        if self.jsonl_path is not None:
            self._jsonl = open(self.jsonl_path, "w", buffering=1)
        self.started_at = int(time.time())
        self.wall0 = time.perf_counter()
        if self._exclude_baseline:
            cats, _ = self._categories(0)
            held = cats["parameters"] + cats["gradients"] + cats["optimizer_state"]
            self.baseline = max(self.reader.read()["live"] - held, 0)
        self.start_reading = self._read()
        m = self.model
        self._handles.append(m.register_forward_pre_hook(self._on_root_forward, with_kwargs=True))
        self._handles.append(m.register_forward_hook(self._on_root_forward_end, always_call=True))
        if self.by_module:
            for name, sub in m.named_modules():
                if sub is m:
                    continue
                if name.rpartition(".")[2].isdigit():
                    # An index (a Sequential's `0`) says little alone: its class beside it.
                    name = f"{name} ({type(sub).__name__})"
                self._handles.append(sub.register_forward_pre_hook(self._module_enter(name)))
                self._handles.append(sub.register_forward_hook(self._module_exit))
        if self.optimizer is not None and hasattr(self.optimizer, "register_step_pre_hook"):
            self._handles.append(self.optimizer.register_step_pre_hook(self._on_opt_pre))
            self._handles.append(self.optimizer.register_step_post_hook(self._on_opt_post))
        self._sth = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._sth.__enter__()
        if self.profiler is not None:
            self.profiler.begin_step(0)
        OPEN.add(self)
        return self

    def close(self, failed=False, ending=None):
        """Ends the session: removes every hook and writes the Record. ``ending``: how the loop
        ended when it did not end cleanly (``failed=True``: an exception); the Record says so.
        Phases after the last ``step()`` form a step only when the loop ended cleanly and they
        hold every phase a step had (a validation forward after the last step is not one);
        without any ``step()`` call, a step ends at each optimizer step."""
        if self.closed or not self._started:
            return self.record
        self.closed = True
        OPEN.discard(self)
        if failed and ending is None:
            ending = "the training loop raised an exception"
        try:
            self.end_phase()
            if ending is not None:
                self.discard_step(f"the step under way was left out ({ending})")
            elif self._user_steps == 0 and self._marks:
                self._close_unmarked_steps()
            elif self._marks:
                self._close_trailing_phases()
        finally:
            if self.profiler is not None:
                self.profiler.stop()
            if self._sth is not None:
                self._sth.__exit__(None, None, None)
            for h in self._handles:
                h.remove()
            self._handles.clear()
            if self._jsonl is not None:
                self._jsonl.close()
        if not self.steps_closed:
            say_nothing_recorded(self.record_path, ending)
            return None
        self.record = build_record(self, ending)
        say_recorded(self.record_path, self.steps_closed)
        return self.record

    def abandon(self):
        """Stops this session without a Record (a forked child's copy of it): its hooks are
        removed and nothing is written; the parent's session goes on."""
        self.closed = True
        OPEN.discard(self)
        if self._sth is not None:
            self._sth.__exit__(None, None, None)
            self._sth = None
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._jsonl = None  # the parent's file: never written or closed from here
        self.record_path = None

    def discard_step(self, why="the step under way was left out"):
        """Drops the phases since the last ``step()``: a step interrupted by an exception or a
        signal is not a measured step."""
        self._phase = None
        self._explicit = 0
        self._module_stack.clear()
        self._step_t0 = None
        if self._marks:
            phases = ", ".join(m["phase"] for m in self._marks)
            self.notes.append(f"{why} ({phases})")
            self._marks = []

    def _close_trailing_phases(self):
        last = self.last_step
        need = {m["phase"] for m in last["marks"]} if last else set()
        have = {m["phase"] for m in self._marks}
        if need <= have:
            self._close_step(None)
        else:
            self.discard_step(
                "phases after the last ms.step() were left out, as they lack "
                + ", ".join(sorted(need - have)) + " a step had (a validation or evaluation "
                "pass, not a training step)")

    def _close_unmarked_steps(self):
        """No ``step()`` was called: a step ends after each optimizer phase (else each backward,
        else each forward)."""
        marks, self._marks = self._marks, []
        names = [m["phase"] for m in marks]
        end = next((n for n in ("optimizer", "backward", "forward") if n in names), None)
        chunk = []
        for m in marks:
            chunk.append(m)
            if m["phase"] == end:
                self._marks = chunk
                self._close_step(None)
                chunk = []
        if chunk:
            self._marks = chunk
            self.discard_step("phases after the last optimizer step were left out")
        self.notes.append(
            f"ms.step() was never called: the session ended a step at each {end} phase "
            f"({self.steps_closed} steps); call ms.step(loss) after each optimizer step to "
            "record the loss and the series as the loop runs")

    @property
    def current_phase(self):
        """The name of the phase under way, else None."""
        return self._phase["name"] if self._phase is not None else None

    # -- phases ---------------------------------------------------------------------------

    @contextmanager
    def phase(self, name):
        """Marks a phase by hand; automatic transitions wait until it ends."""
        self.begin_phase(name)
        self._explicit += 1
        try:
            yield self
        finally:
            self._explicit -= 1
            self.end_phase()

    def begin_phase(self, name):
        """Ends the open phase and starts ``name`` (nothing when ``name`` is already open)."""
        if self._phase is not None:
            if self._phase["name"] == name:
                return
            self.end_phase()
        if self._step_t0 is None:
            self._step_t0 = self._now()
        self.reader.reset_peak()
        r0 = self._read()
        self._phase = {"name": name, "t0": self._now(), "r0": r0}
        if self.profiler is not None:
            self.profiler.phase(name)

    def end_phase(self):
        p = self._phase
        if p is None:
            return
        self._phase = None
        t1 = self._now()
        if self.profiler is not None:
            self.profiler.phase(None)
        r = self._read()
        cats, by_module = self._categories(r["live"])
        self._marks.append({
            "phase": p["name"],
            "t": (p["t0"], t1),
            "peak": max(r["peak"], r["live"]),
            "live": r["live"],
            "categories": cats,
            "by_module": by_module,
            "allocations": r["allocations"] - p["r0"]["allocations"],
            "allocated_bytes": r["allocated_bytes"] - p["r0"]["allocated_bytes"],
        })
        self._keep_own(r["live"])

    def _now(self):
        if self._cuda:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter_ns()

    def _ms(self, t0, t1):
        if self._cuda:
            return t0.elapsed_time(t1)
        return (t1 - t0) / 1e6

    # -- hooks ----------------------------------------------------------------------------

    def _auto(self):
        return self.auto and self._explicit == 0

    def _on_root_forward(self, module, args, kwargs):
        RUNNING.append(self)
        LAST[:] = [weakref.ref(self)]
        if self.shadowed is None and self.torch.is_grad_enabled():
            self.shadowed = hook_over_ours(self.torch, self._pack,
                                           lambda s: isinstance(s, Session))
        if self.batch is None:
            self.batch, self.seq = input_shape(self.torch, args, kwargs, self.batch, self.seq)
        if self._auto() and module.training and self.torch.is_grad_enabled():
            self.begin_phase("forward")

    def _on_root_forward_end(self, module, args, output):
        if self in RUNNING:
            del RUNNING[len(RUNNING) - 1 - RUNNING[::-1].index(self)]

    def _module_enter(self, name):
        def enter(module, args):
            self._module_stack.append(name)
        return enter

    def _module_exit(self, module, args, output):
        if self._module_stack:
            self._module_stack.pop()

    def _pack(self, t):
        owner = RUNNING[-1] if RUNNING else (LAST[0]() if LAST else None)
        if owner is None or owner.closed:
            owner = self
        # Detached (the same storage, no grad_fn): autograd passes an op's own output to the
        # hook as it is, and what the hook returns the op's node holds — the output itself
        # would hold the node back (output → grad_fn → node → output), a cycle through C++
        # that Python's collector cannot see, so a forward never followed by a backward (a
        # validation pass without no_grad) would keep its whole graph. The detached tensor is
        # the one noted: it lives exactly as long as the graph keeps it.
        saved = t.detach()
        owner.saved_by_autograd(saved)
        return owner, saved

    @staticmethod
    def _unpack(packed):
        owner, t = packed
        if not owner.closed:
            owner.unpacked_by_autograd()
        return t

    def saved_by_autograd(self, t):
        """A tensor autograd saved while this session's model (or the code after it) ran."""
        if self._auto() and self._phase is None:
            self.begin_phase("forward")
        module = self._module_stack[-1] if self._module_stack else "(outside the model's modules)"
        self.saved.note(t, module)

    def unpacked_by_autograd(self):
        """Backward read one of them: the backward phase starts at the first."""
        if self._auto() and (self._phase is None or self._phase["name"] == "forward"):
            self.begin_phase("backward")
            self.torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

    def _backward_done(self, again=True):
        """Autograd's engine runs its final callbacks in the order queued, and runs those that
        callbacks queue too: queued once more, backward ends after the callbacks queued after
        its start (DDP's reducer waits there for its last all-reduce), not before them."""
        if again:
            self.torch.autograd.Variable._execution_engine.queue_callback(
                lambda: self._backward_done(again=False))
            return
        if self._auto() and self._phase is not None and self._phase["name"] == "backward":
            self.end_phase()

    def _on_opt_pre(self, optimizer, args, kwargs):
        if self._auto():
            self.begin_phase("optimizer")

    def _on_opt_post(self, optimizer, args, kwargs):
        if self._auto() and self._phase is not None and self._phase["name"] == "optimizer":
            self.end_phase()

    # -- categories -----------------------------------------------------------------------

    def _categories(self, live):
        dev = self.device
        grads, _ = unique_bytes((p.grad for p in self._params), dev)
        opt, _ = unique_bytes(optimizer_tensors(self.optimizer, self.torch), dev,
                              exclude=self._param_ptrs)
        gathered, gathered_ptrs = unique_bytes(gathered_tensors(self._fsdp), dev)
        act, by_module = self.saved.alive(exclude=gathered_ptrs)
        c = {"parameters": self.param_bytes, "gradients": grads, "optimizer_state": opt,
             "activations": act}
        if self._fsdp:
            # FSDP2's gathered (unsharded) parameters while their block runs (the root's from
            # its forward to its backward); autograd saves them too, counted once, here.
            c["gathered_parameters"] = gathered
        if self.extra_categories is not None:
            # A caller's own categories (the torch engine's KV cache), exact bytes too.
            c.update(self.extra_categories())
        c["unattributed"] = max(live - sum(c.values()), 0)
        return c, by_module

    # -- steps ----------------------------------------------------------------------------

    def step(self, loss=None):
        """Closes a training step (after the optimizer's step): one line in the JSONL series.
        ``loss`` (a number or a scalar tensor) goes into the Record's loss list; a NaN or an
        infinity is kept (as "NaN" / "Infinity") and counted in the Record's warnings."""
        loss = loss_number(loss)  # checked before the step is closed: a bad loss loses nothing
        self._user_steps += 1
        self._close_step(loss)

    def _close_step(self, loss):
        self.end_phase()
        if not self._marks:
            return
        marks, self._marks = self._marks, []
        if self._cuda:
            marks[-1]["t"][1].synchronize()
        r = self._read()
        own_before = r["live"]
        index = self.steps_closed
        warm = index < self.warmup
        times = {}
        calls = {}
        for m in marks:
            m["ms"] = self._ms(*m["t"])
            times[m["phase"]] = times.get(m["phase"], 0.0) + m["ms"]
            calls[m["phase"]] = calls.get(m["phase"], 0) + 1
        for name in self.mean_phases.intersection(times):
            times[name] /= calls[name]
        times["step"] = self._ms(marks[0]["t"][0], marks[-1]["t"][1])
        self._step_t0 = None
        step = {
            "step": index,
            "warmup": warm,
            "live": r["live"],
            "peak": max(m["peak"] for m in marks),
            "reserved": r["reserved"],
            "rss": rss_bytes(),
            "blocks": r["blocks"],
            "alloc_retries": r["alloc_retries"],
            "ooms": r["ooms"],
            "times_ms": times,
            "marks": marks,
            "loss": loss_number(loss),
            "elapsed_s": time.perf_counter() - self.wall0,
        }
        self.steps_closed += 1
        add_to_phase_memory(self.phase_memory, self.peak_moments, step, self.warmup,
                            self.optimizer is None)
        for m in marks:
            # What the Record's peak moments keep of a mark; the rest goes with the line.
            m.pop("t", None)
            if self.peak_moments.get(m["phase"], {}).get("mark") is not m:
                m.pop("by_module", None)
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(jsonl_line(step, self.reader.memory)) + "\n")
        else:
            self._steps_mem.append(step)
        self.last_step = step
        if self.profiler is not None:
            self.profiler.end_step(index, times["step"])
            self.profiler.begin_step(self.steps_closed)
        self._keep_own(own_before)

    def steps(self):
        """The closed steps, as dicts: read back from the JSONL series (or kept in memory when
        the session writes no file)."""
        if self._steps_mem is not None:
            return list(self._steps_mem)
        if self._jsonl is not None and not self._jsonl.closed:
            self._jsonl.flush()
        with open(self.jsonl_path) as f:
            return [step_from_line(json.loads(line)) for line in f if line.strip()]

    def _keep_own(self, before):
        """What the bookkeeping since ``before`` (a live reading) kept — a phase's mark, a step's
        entry — is the recorder's, not the loop's: left out of every later reading (counted
        heap), so a long run does not grow by the recorder's own records."""
        if self._counts_own:
            self._own += max(self._read()["live"] - before, 0)

    def _read(self):
        """The reader's figures less the recorder's own retained bookkeeping (counted heap)."""
        r = self.reader.read()
        if self.baseline:
            # Below the parameters once the baseline is left out: the process freed memory it
            # held before the session started; that much was never the loop's to leave out.
            over = self.baseline - max(r["live"] - self._own - self.param_bytes, 0)
            if over > 0:
                self.baseline -= over
                self.baseline_freed += over
        less = self._own + self.baseline
        if less:
            r = dict(r)
            r["live"] = max(r["live"] - less, 0)
            r["peak"] = max(r["peak"] - less, 0)
        return r

    # -- reading the results --------------------------------------------------------------

    def leak_verdict(self, what="heap"):
        """memscope's leak verdict (Rust's) on this run's per-step series, as a dict."""
        key = {"heap": "live", "rss": "rss", "reserved": "reserved"}[what]
        pts = [(s["step"], s[key]) for s in self.steps() if s[key] is not None]
        label = {"heap": self.reader.memory, "rss": "RSS", "reserved": "reserved"}[what]
        return json.loads(_native.leak_verdict([p[0] for p in pts], [float(p[1]) for p in pts],
                                               label))
