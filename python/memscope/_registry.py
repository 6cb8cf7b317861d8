"""Every Session of this process: those open (each closed at the interpreter's exit, so its
Record is written, and abandoned in a forked child), and those whose model runs, to which the
innermost Session's hook hands each saved tensor."""

import atexit
import os
import sys
import weakref

from ._loop_values import ending_of


# Sessions started and not yet closed: closed at the interpreter's exit (an exception nobody
# caught, a KeyboardInterrupt, sys.exit inside a trainer), so their Record is written.
OPEN = weakref.WeakSet()
# Autograd calls only the innermost saved_tensors_hooks: with two Sessions open, the innermost
# one's pack hook hands each saved tensor to the session whose model is running its forward
# (innermost last), else to the one whose model ran last, so neither records the other's model.
RUNNING = []
LAST = []


def _forget_in_child():
    """A process forked inside a Session is not the one it records: its copies of the open
    sessions stop (hooks removed, nothing written), so the two processes' steps never mix."""
    RUNNING.clear()
    LAST.clear()
    for s in list(OPEN):
        s.abandon()


os.register_at_fork(after_in_child=_forget_in_child)


@atexit.register
def _close_open_sessions():
    kind = getattr(sys, "last_type", None)
    for s in list(OPEN):
        try:
            s.close(ending=ending_of(kind) if kind is not None else
                    "the process exited while the session was open")
        except Exception as e:  # noqa: BLE001 - one session's failure must not cost the others'
            print(f"memscope: could not write the Record of a session left open: {e}",
                  file=sys.stderr)
