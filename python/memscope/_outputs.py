"""The recorder's output files, checked when the Session starts (not at close(), after the loop
ran): memscope's own rules for every output (``_native.check_outputs``: not a directory, a
directory that exists and takes a new file, the Record and the series two different files, and
never the running script), and never a file memscope did not write: an existing file at either
path must be a memscope Record or series. A previous run's Record and series are moved aside
(``run.previous.json``) before the new series starts, so nothing on disk is lost and no old
Record sits beside a new series as if it were its Record."""

import os
import sys

from . import _native


def _inputs():
    """The files this process runs from: the script (``sys.argv[0]``) and ``__main__``'s file."""
    out = []
    main = sys.modules.get("__main__")
    for what, path in (("the running script", sys.argv[0] if sys.argv else None),
                       ("the __main__ module", getattr(main, "__file__", None))):
        if path and os.path.isfile(path):
            out.append((what, os.path.abspath(path)))
    return out


def _head(path, n=4096):
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def is_record(path):
    """A memscope Record (JSON whose first key is ``schema_version``, as memscope writes it)."""
    return b'"schema_version"' in _head(path, 256)


def is_series(path):
    """A memscope per-step series (JSON lines, each with ``step`` and ``heap_live_bytes``)."""
    first = _head(path).split(b"\n", 1)[0]
    return first.startswith(b'{"step"') and b'"heap_live_bytes"' in first


def _not_ours(path, kind, check):
    if path is None or not os.path.lexists(path) or not os.path.isfile(path):
        return
    if os.path.getsize(path) == 0:
        return
    if not check(path):
        name = "record" if kind == "Record" else "jsonl"
        raise ValueError(
            f"{name}={path!r}: the file exists and is not a memscope {kind}; writing it would "
            f"destroy it. Give {name}= another path")


def check_paths(record, jsonl):
    """Raises ValueError naming the argument when an output path cannot be written or would
    replace an input or a file memscope did not write."""
    outputs = [(name, path) for name, path in (("record=", record), ("jsonl=", jsonl))
               if path is not None]
    if not outputs:
        return
    _native.check_outputs(outputs, _inputs())
    _not_ours(record, "Record", is_record)
    _not_ours(jsonl, "series (.steps.jsonl)", is_series)


def _previous(path):
    stem, dot, ext = path.rpartition(".")
    if path.endswith(".steps.jsonl"):
        return path[:-len(".steps.jsonl")] + ".previous.steps.jsonl"
    if not dot or "/" in ext:
        return path + ".previous"
    return f"{stem}.previous.{ext}"


def move_previous(record, jsonl):
    """Moves a previous run's Record and series aside (replacing an older `.previous` pair);
    returns [(old path, new path)] for the Record's warnings."""
    moved = []
    for path, check in ((record, is_record), (jsonl, is_series)):
        if path is None or not os.path.isfile(path) or os.path.getsize(path) == 0:
            continue
        target = _previous(path)
        if os.path.exists(target) and not check(target):
            raise ValueError(
                f"{target!r} exists and is not a memscope file: the previous run's {path!r} "
                "would be moved over it; move one of them away")
        os.replace(path, target)
        moved.append((path, target))
    return moved


def say_nothing_recorded(record_path, ending):
    """No step closed: no Record, and one line on stderr saying why, never silence."""
    if record_path is None:
        return
    why = ending or ("no training step was seen: a step's phases start at a forward in train "
                     "mode with autograd on, a backward or an optimizer step; for an inference "
                     "loop mark them with `with ms.phase(\"forward\"):` and call ms.step() after "
                     "each")
    print(f"memscope: no step recorded, so no Record written to {record_path} ({why})",
          file=sys.stderr)


def say_recorded(record_path, steps):
    """One line on stderr: where the Record went and what to run next."""
    if record_path is None or os.environ.get("MEMSCOPE_QUIET"):
        return
    print(f"memscope: {steps} steps recorded → {record_path}; next: "
          f"memscope report {record_path} -o report.html", file=sys.stderr)
