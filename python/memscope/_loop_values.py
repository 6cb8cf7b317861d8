"""The values a training loop hands the recorder, as every memscope file writes them: the step's
loss (a number; NaN and the infinities as JSON has none), and how a ``with`` block ended."""

import math


def loss_number(loss):
    """The loss as a float; a ValueError naming what was given when it is not one number."""
    if loss is None:
        return None
    if hasattr(loss, "detach"):
        loss = loss.detach()
        if loss.numel() != 1:
            raise ValueError(f"ms.step(loss): give the step's loss as a number or a one-element "
                             f"tensor (got a tensor of shape {tuple(loss.shape)}: reduce it, "
                             "e.g. loss.mean())")
    try:
        return float(loss)
    except (TypeError, ValueError):
        raise ValueError(f"ms.step(loss): give the step's loss as a number or a one-element "
                         f"tensor (got {type(loss).__name__})") from None


def json_loss(x):
    """A loss as every memscope file writes it: a number, or "NaN" / "Infinity" / "-Infinity"
    (JSON has no such numbers; ``src/record/nonfinite.rs`` reads them back)."""
    if x is None or math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def ending_of(exc_type, exc=None):
    """How a ``with`` block ended, for the Record: None for a clean end (no exception,
    ``sys.exit(0)``, a generator closed early), else a sentence."""
    if exc_type is None or issubclass(exc_type, GeneratorExit):
        return None
    if issubclass(exc_type, SystemExit):
        code = getattr(exc, "code", None) if exc is not None else None
        return None if code in (None, 0) else f"the script exited with sys.exit({code!r})"
    if issubclass(exc_type, KeyboardInterrupt):
        return "stopped by KeyboardInterrupt (Ctrl-C or SIGINT)"
    return f"the training loop raised {exc_type.__name__}"


def input_shape(torch, args, kwargs, batch, seq):
    """(batch, seq) from a model call's first tensor input, else the given ones: a sequence
    length only where the input is token ids ((batch, seq) integers): a (64, 512) float input
    is 64 samples, not 512 tokens."""
    for t in list(args) + list(kwargs.values()):
        if isinstance(t, torch.Tensor) and t.dim() >= 1:
            ids = t.dim() == 2 and not t.dtype.is_floating_point and not t.dtype.is_complex
            return int(t.shape[0]), (int(t.shape[1]) if ids else 0)
    return batch, seq
