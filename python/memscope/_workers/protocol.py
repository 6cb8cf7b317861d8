"""The protocol of every process the binary drives (the engine, the trace, the op timer, the
peaks, the link): the request read from stdin (or, for a torchrun job's ranks, from
``MEMSCOPE_REQUEST``), stdout kept for the answer, a refusal said on stderr with exit code 2, and
a rank's place in the job memscope launched."""

import json
import os
import sys

from .. import _contract
from .._sharding import PlanError


class Refused(Exception):
    """A request the engine cannot run as asked (said on stderr, exit code 2)."""


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
    global _in_job
    given = os.environ.pop("MEMSCOPE_REQUEST", None)
    _in_job = given is not None
    # A job's ranks: rank 0 speaks the protocol, the others say nothing on it.
    out = os.fdopen(os.dup(1), "w") if rank()[0] == 0 else open(os.devnull, "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        request = json.loads(given) if given is not None else json.load(sys.stdin)
    except ValueError as e:
        where = "in MEMSCOPE_REQUEST" if given is not None else "on stdin"
        say(f"error: {what} reads a request (JSON) {where}: {e}")
        return None
    try:
        import torch
        import transformers
    except ImportError as e:
        if any(m in str(e) for m in ("failed to map segment", "cannot allocate memory")):
            # Installed, but not loadable in the memory this process may use.
            say(f"error: {what} could not load PyTorch's libraries: out of memory ({e})")
        else:
            say(f"error: {what} needs PyTorch and transformers ({e}): "
                f"{sys.executable} -m pip install torch transformers")
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
    except (Refused, PlanError, _contract.ContractError) as e:
        say(f"error: {e}")
        return 2
    out.write(json.dumps(result, separators=(",", ":")) + "\n")
    out.flush()
    return 0


# This process is a rank of a job memscope launched under torchrun (`open_protocol`).
_in_job = False


def rank():
    """(rank, world size) of this process in a torchrun job memscope launched; (0, 1)
    otherwise."""
    if not _in_job:
        return 0, 1
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


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


def end_rank(code):
    """Ends a rank of a job memscope launched once its work is done and said (its Record sent,
    its process group destroyed), without C++'s static destructors: a thread of gloo's still
    joinable there aborted a finished rank now and then ("terminate called without an active
    exception", SIGABRT), and torchrun then stopped the job's other ranks mid-work."""
    if _in_job:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def say(line):
    """``line`` on stderr in one write: a job's ranks share torchrun's stderr, and ``print``
    under ``PYTHONUNBUFFERED`` writes a line's text and its newline apart, so another rank's
    line could land between them and cut the one memscope reads (its out-of-memory facts, its
    refusal). One write of a line under the pipe's atomic size (4 KiB) is never split."""
    sys.stderr.flush()
    os.write(sys.stderr.fileno(), (line + "\n").encode())


def in_job():
    """Whether this process is a rank of a torchrun job memscope launched."""
    return _in_job
