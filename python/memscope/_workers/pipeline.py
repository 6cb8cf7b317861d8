"""A pipeline-parallel job (``--parallel pp:P``) on PyTorch's ``torch.distributed.pipelining``:
a transformers causal LM's blocks split in order into the job's stages (as many blocks each as
they divide into, the earlier stages one more where they do not), the token embedding on the
first stage, the final norm and the LM head on the last; rank r holds stage r (and r + P, … under
an interleaved schedule, as PyTorch places them; stages r and 2P − 1 − r under ZBV's V). Each stage is a ``PipelineStage`` given its
micro-batch's shapes up front (no shape exchange before the first step, so the trace runs it
under the fake process group as the ranks run it), and the batch runs through the named
schedule class: ``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``, or the
zero-bubble ``ScheduleInterleavedZeroBubble`` and ``ScheduleZBVZeroBubble``, which run each
backward as two halves (the input's gradient, then the weights').

A stage runs transformers' own base model over its blocks: the first from the token ids, the
others from the hidden states they receive (``inputs_embeds``), so each stage computes its own
rotary tables and causal mask as a real split does. The last stage returns the logits; the loss
is the model's own ``loss_function`` over them, which the schedule calls per micro-batch and
scales the gradients by their number."""

import contextlib
import copy

import torch
from torch.distributed import pipelining

from .protocol import Refused

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
             "interleaved-1f1b": "ScheduleInterleaved1F1B",
             "interleaved-zero-bubble": "ScheduleInterleavedZeroBubble",
             "zbv-zero-bubble": "ScheduleZBVZeroBubble"}


def rank_stages(schedule, rank, world, n_stages):
    """The stages rank ``rank`` holds, as PyTorch's schedule places them: a loop (r, r + P, …)
    or, under ZBV, a V (r and 2P − 1 − r)."""
    if schedule == "zbv-zero-bubble":
        return [rank, n_stages - 1 - rank]
    return list(range(rank, n_stages, world))


def stage_blocks(n_layers, stages, split=None):
    """``[first, end)`` of each stage's blocks: ``split``'s numbers in order where given (the
    Spec's check makes them one a stage, summing to ``n_layers``), else ``n_layers // stages``
    each, the first ``n_layers % stages`` stages one more."""
    if split is None:
        each, extra = divmod(n_layers, stages)
        split = [each + (1 if s < extra else 0) for s in range(stages)]
    bounds, lo = [], 0
    for n in split:
        bounds.append((lo, lo + n))
        lo += n
    return bounds


def _child_name(parent, module):
    return next(n for n, m in parent.named_children() if m is module)


def _blocks_list(base):
    """The base model's ``ModuleList`` of blocks (``layers``, GPT-2's ``h``): its longest."""
    lists = [(n, m) for n, m in base.named_children() if isinstance(m, torch.nn.ModuleList)]
    if not lists:
        raise Refused(f"--parallel pp: {type(base).__name__} keeps no list of blocks to split "
                      "into stages; use --parallel ddp or fsdp")
    return max(lists, key=lambda nm: len(nm[1]))[0]


class _NoPositions(torch.nn.Module):
    """A later stage's stand-in for absolute position embeddings (GPT-2's ``wpe``): its input
    already holds them, so they add zero."""

    def forward(self, positions):
        return torch.zeros((), dtype=torch.get_default_dtype(), device=positions.device)


class Stage(torch.nn.Module):
    """One stage: blocks ``[lo, hi)`` of ``model`` (shared, not copied: the rest is dropped
    with the full model), the embedding when ``first``, the final norm and head when ``last``.
    ``autocast``: the context its forward runs in (``--precision mixed``)."""

    def __init__(self, model, lo, hi, first, last, autocast):
        super().__init__()
        name = model.config.model_type
        if name.startswith("gemma"):
            raise Refused(f"--parallel pp: {type(model).__name__} scales its embeddings inside "
                          "its base model's forward, so a later stage's input would be scaled "
                          "again; memscope's pipeline split does not apply to it (use --parallel "
                          "fsdp)")
        head = model.get_output_embeddings()
        if head is None or not type(model).__name__.endswith(("ForCausalLM", "LMHeadModel")):
            raise Refused(f"--parallel pp: {type(model).__name__} is not a causal language "
                          "model; memscope's pipeline splits a causal LM's blocks (use --parallel "
                          "ddp or fsdp)")
        # Shallow copies: this stage's own list of children, the parameters shared.
        whole = copy.copy(model)
        whole._modules = dict(model._modules)
        prefix = _child_name(model, model.base_model)
        base = copy.copy(model.base_model)
        base._modules = dict(model.base_model._modules)
        whole._modules[prefix] = base
        blocks = _blocks_list(base)
        base._modules[blocks] = torch.nn.ModuleList(list(base._modules[blocks])[lo:hi])
        if not first:
            tokens = model.get_input_embeddings()
            for n, m in list(base.named_children()):
                if m is tokens:
                    base._modules[n] = None
                elif isinstance(m, torch.nn.Embedding):
                    base._modules[n] = _NoPositions()
        if not last:
            for n, m in list(base.named_children()):
                if "norm" in type(m).__name__.lower():
                    base._modules[n] = torch.nn.Identity()
            whole._modules[_child_name(model, head)] = None
            head = None
        self.whole, self.base, self.head = whole, base, head
        self.first, self.last, self.autocast = first, last, autocast

    def forward(self, x):
        # x: (b, T) token ids on the first stage, else (b, T, D) hidden states
        kw = {"input_ids": x} if self.first else {"inputs_embeds": x}
        with self.autocast():
            h = self.base(**kw, use_cache=False).last_hidden_state  # (b, T, D)
            return self.head(h) if self.last else h  # (b, T, V) logits on the last


class Pipeline(torch.nn.Module):
    """This rank's stages and the schedule that runs them; ``run(ids, phase)`` one optimizer
    step's forwards and backwards over the micro-batches (each chunk's forward and backward
    marked as those phases), returning the last stage's losses, each over the micro-batches'
    number (none on other ranks)."""

    def __init__(self, stages, schedule, has_first, has_last, bounds, order):
        super().__init__()
        # The most micro-batches whose forward has run and backward not yet, over this rank's
        # stages, by the schedule's own action list (``order``: its ``pipeline_order[rank]``).
        self.most_in_flight = in_flight(order)
        # The same list as [kind, stage, micro-batch]: what the step's time plays out.
        self.actions = action_list(order)
        self.stages = torch.nn.ModuleList([s.submod for s in stages])
        self.pipe_stages, self.schedule = stages, schedule
        self.has_first, self.has_last = has_first, has_last
        self.bounds = bounds  # (stage index, first block, end block) of each of this rank's
        self._phase = None
        for s in stages:
            s.forward_one_chunk = self._marked("forward", s.forward_one_chunk)
            s.backward_one_chunk = self._marked("backward", s.backward_one_chunk)
            # A zero-bubble schedule's weight half of a backward.
            s.backward_weight_one_chunk = self._marked("backward", s.backward_weight_one_chunk)

    def _marked(self, name, fn):
        def marked(*args, **kwargs):
            ctx = self._phase(name) if self._phase is not None else contextlib.nullcontext()
            with ctx:
                return fn(*args, **kwargs)
        return marked

    def run(self, ids, phase):
        losses = []
        self._phase = phase
        try:
            args = (ids,) if self.has_first else ()
            extra = {"target": ids, "losses": losses} if self.has_last else {}
            # A training step needs the losses, not the outputs: PyTorch's default keeps every
            # micro-batch's logits on the last stage to merge them (the whole batch's logits).
            self.schedule.step(*args, return_outputs=False, **extra)
        finally:
            self._phase = None
        # Each micro-batch's mean loss; the step's is their mean, as one batch's would be.
        return [x.detach() / len(losses) for x in losses]


def in_flight(actions):
    """The most micro-batches a rank holds activations for at once, by its schedule's action
    list (``pipeline_order[rank]``: a forward holds one until its backward lets it go, a whole
    backward or a zero-bubble schedule's weight half, which needs the inputs its input half
    kept), summed over the rank's stages."""
    held = most = 0
    for a in actions:
        kind = getattr(getattr(a, "computation_type", None), "value", None)
        if kind == "F":
            held += 1
        elif kind in ("B", "W"):
            held -= 1
        most = max(most, held)
    return most


def action_list(actions):
    """A rank's schedule (``pipeline_order[rank]``) as ``[kind, stage, micro-batch]`` rows:
    ``F`` forward, ``B`` whole backward, ``I``/``W`` a backward's input and weight halves; the
    schedule's idle slots (``None``) left out. Every schedule runs a stage's forwards, and its
    backwards, in micro-batch order, so each is numbered by its place among its stage's actions
    of its kind: PyTorch 2.15's list for ``Schedule1F1B`` numbers the last rank's forwards from 1
    (its steps run them from 0; only the list is off)."""
    rows, seen = [], {}
    for a in actions:
        kind = getattr(getattr(a, "computation_type", None), "value", None)
        if kind in ("F", "B", "I", "W"):
            key = (kind, int(a.stage_index))
            rows.append([kind, key[1], seen.get(key, 0)])
            seen[key] = seen.get(key, 0) + 1
    return rows


def pipeline_wrap(spec, rank, device, dtype, autocast):
    """The function that turns a built model into rank ``rank``'s ``Pipeline`` of
    ``spec``'s job: its stages' blocks, PyTorch's stages with the micro-batch's shapes, the
    schedule. ``dtype``: the model's compute dtype (hidden states between stages are f32
    under autocast, whose residual stream stays in the master weights' dtype)."""
    pipe, world = spec.torch.pipeline, spec.torch.parallel.world
    n_stages = world * pipe.stages_per_rank
    cfg = spec.config
    bounds = stage_blocks(cfg.n_layers, n_stages,
                          list(pipe.split) if pipe.split is not None else None)
    mine = rank_stages(pipe.schedule, rank, world, n_stages)
    micro = spec.batch // pipe.micro_batches
    seq = spec.seq
    mixed = spec.variant.precision == "mixed"
    hidden_dtype = torch.float32 if mixed else dtype

    def wrap(model):
        vocab = model.get_output_embeddings().weight.shape[0] \
            if model.get_output_embeddings() is not None else cfg.vocab_size
        stages = []
        for s in mine:
            first, last = s == 0, s == n_stages - 1
            lo, hi = bounds[s]
            module = Stage(model, lo, hi, first, last, autocast)
            # Shapes only: on the meta device, nothing allocated (a logits example alone
            # can be a large share of a rank's memory).
            with torch.device("meta"):
                # (b, T) ids in, or (b, T, D) hidden states; (b, T, D) out, or (b, T, V) logits
                x = torch.zeros(micro, seq, dtype=torch.long) if first else \
                    torch.empty(micro, seq, cfg.d_model, dtype=hidden_dtype)
                y = torch.empty(micro, seq, vocab, dtype=dtype) if last else \
                    torch.empty(micro, seq, cfg.d_model, dtype=hidden_dtype)
                # Hidden states between stages carry gradients: PyTorch takes a given shape's
                # requires_grad as the activation's, and a received input that does not
                # require one gives no gradient to send back (the earlier stages' weights then
                # get zeros, and a zero-bubble schedule's weight halves nothing).
                if not first:
                    x.requires_grad_(True)
                if not last:
                    y.requires_grad_(True)
                dy = None if last else torch.empty_like(y)
                dx = None if first else torch.empty_like(x)
            stages.append(pipelining.PipelineStage(
                module, s, n_stages, device, input_args=(x,), output_args=(y,),
                output_grads=(dy,), input_grads=(dx,)))
            del x, y, dy, dx

        # The model's own loss, read from a stage's copy: the full model, whose other blocks
        # this rank drops, is not kept alive by it.
        own = stages[-1].submod.whole

        def loss(logits, target):
            return own.loss_function(logits=logits, labels=target, vocab_size=vocab)
        cls = getattr(pipelining, SCHEDULES[pipe.schedule])
        one = pipe.stages_per_rank == 1
        schedule = cls(stages[0] if one else stages, n_microbatches=pipe.micro_batches,
                       loss_fn=loss)
        return Pipeline(stages, schedule, 0 in mine, n_stages - 1 in mine,
                        [(s, *bounds[s]) for s in mine],
                        schedule.pipeline_order.get(rank, []))
    return wrap
