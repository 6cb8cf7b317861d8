"""``python -m memscope run SCRIPT [ARGS…]``: runs a training script with memscope's counting
allocator preloaded (``LD_PRELOAD``), so the recorder's CPU peaks are counted allocations rather
than RSS. The variable is removed again inside the script's process, so the programs it starts
run without it.

``python -m memscope module estimate|bench FILE.py:FUNCTION``: your own workload estimated or
measured (``_module_cli.py``).

Any other command (``python -m memscope report run.json -o run.html``) is the ``memscope``
command-line tool the wheel installed beside this Python (its scripts directory), run as is."""

import importlib.util
import os
import runpy
import shutil
import sys
import sysconfig

from . import _module_cli, _native

USAGE = ("usage: python -m memscope run SCRIPT.py [ARGS...]   (or: run -m MODULE [ARGS...]);\n"
         "       python -m memscope module estimate|bench FILE.py:FUNCTION [--batch B --seq T]\n"
         "       python -m memscope COMMAND ...   (the memscope command: --help lists them)")


def _cli():
    """The ``memscope`` binary this package installed, else the one on PATH, else None."""
    own = os.path.join(sysconfig.get_path("scripts"), "memscope")
    return own if os.access(own, os.X_OK) else shutil.which("memscope")


def _missing(args):
    """Why ``run ARGS`` has nothing to run (a script that is not a file, a module Python cannot
    find), else None: said before the interpreter is started again, not as runpy's traceback."""
    if args[0] == "-m":
        if len(args) < 2:
            return "-m needs a module name"
        try:
            found = importlib.util.find_spec(args[1]) is not None
        except (ImportError, ValueError):
            found = False
        return None if found else (f"no module named {args[1]!r} in this Python "
                                   f"({sys.executable}); install it or check the name")
    if not os.path.isfile(args[0]):
        what = "is a directory" if os.path.isdir(args[0]) else "no such file"
        return f"{args[0]}: {what}; give the training script's path (or -m MODULE)"
    return None


def main(argv):
    if argv and argv[0] == "module":
        return _module_cli.main(argv[1:])
    if argv and argv[0] not in ("run", "_exec"):
        cli = _cli()
        if cli is None:
            print("memscope's command-line tool is not installed beside this Python: "
                  "reinstall the package (pip install ./python) or build it "
                  "(cargo build --release)", file=sys.stderr)
            return 2
        os.execv(cli, [cli] + argv)
    if len(argv) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    if argv[0] == "run" and argv[1] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] == "run":
        missing = _missing(argv[1:])
        if missing:
            print(f"python -m memscope run: {missing}\n{USAGE}", file=sys.stderr)
            return 2
        lib = _native.__file__
        env = dict(os.environ)
        env["LD_PRELOAD"] = lib + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        env["MEMSCOPE_PRELOAD_PREV"] = os.environ.get("LD_PRELOAD", "")
        os.execve(sys.executable, [sys.executable, "-m", "memscope", "_exec"] + argv[1:], env)
    # _exec: inside the re-executed interpreter, with the counting allocator in place.
    prev = os.environ.pop("MEMSCOPE_PRELOAD_PREV", "")
    if prev:
        os.environ["LD_PRELOAD"] = prev
    else:
        os.environ.pop("LD_PRELOAD", None)
    if not _native.counter_active():
        print("memscope: the counting allocator did not load (LD_PRELOAD ignored?); "
              "CPU figures will be RSS", file=sys.stderr)
    args = argv[1:]
    if args[0] == "-m":
        if len(args) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
        runpy.run_path(args[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
