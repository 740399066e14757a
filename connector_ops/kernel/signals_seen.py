"""Which signals reached this process, whichever Python handler took them.

The console script takes SIGTERM as a Ctrl-C (stop the work cleanly, then exit), but its exit status must
still tell the two apart: 130 (128 + SIGINT) for an interrupt, 143 (128 + SIGTERM) for a stop, as a shell
reports them, so that a supervisor (systemd, a cron wrapper, Kubernetes) sees which it was. The handler that
takes a SIGTERM is not always the command line's own: while a Dagster run executes, Dagster points SIGTERM at
its SIGINT handler, which notes an interrupt and not which signal it was. So the signals are noted below every
handler, through Python's wakeup descriptor (:func:`signal.set_wakeup_fd`): each signal that reaches a Python
handler is written there as one byte, its number, before any handler runs.
"""

from __future__ import annotations

import contextlib
import os
import signal

from connector_ops.kernel.forks import in_child

#: the pipe the signals' numbers are written to (read end, write end), once :func:`watch_signals` ran
_pipe: tuple[int, int] | None = None
#: the signals read from it so far
_seen: set[int] = set()


def watch_signals() -> None:
    """From now on, note every signal that reaches a Python handler of this process (main thread only: the
    command line's entry point). Nothing else of the command line sets a wakeup descriptor."""
    global _pipe
    if _pipe is not None:
        return
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)  # the signal machinery never waits for the pipe
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    _pipe = (read_end, write_end)


def signals_seen() -> frozenset[int]:
    """The numbers of the signals noted since :func:`watch_signals` (none before it)."""
    if _pipe is not None:
        with contextlib.suppress(BlockingIOError):
            while data := os.read(_pipe[0], 4096):
                _seen.update(data)
    return frozenset(_seen)


@in_child
def _not_in_a_child() -> None:
    """A forked child (a loader process) has its own signals: written to the parent's pipe, the SIGTERM its
    parent ends it with would be taken for one the parent received."""
    global _pipe
    if _pipe is None:
        return
    with contextlib.suppress(ValueError):  # (a fork from a thread that is not the main one: no wakeup fd to undo)
        signal.set_wakeup_fd(-1)
    for fd in _pipe:
        os.close(fd)
    _pipe = None
    _seen.clear()
