"""Ctrl-C held back while work that must not be cut in half runs.

Python removes a module whose import an interrupt cuts short, but keeps what that import had already
registered elsewhere. Imported again, the module registers it twice. Dagster's serialisation registry refuses
that, and every later run in the process then fails: "Multiple deserializers registered for storage name
`ExternalPresetData`". It happened when Jupyter's Stop hit the first ``%pipeline run`` of a kernel, while
Dagster imported the modules a run needs, and the kernel was unusable for pipelines until it was restarted.
A Stop in a kernel's first ``%etl`` cell, while pandas and numpy loaded for its output, did the same to
every later table ("partially initialized module 'pandas'", "module 'numpy' has no attribute
'logical_and'").
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Within the block a SIGINT is noted, not acted on; once the block is done the interrupt is raised
    (``KeyboardInterrupt``). Off the main thread, where no signal handler runs, the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signo, _frame: received.append(signo))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_ignored_once_answered() -> Iterator[Callable[[], None]]:
    """Yields ``answered()``: once it is called, a SIGINT (and a SIGTERM a Python handler takes as one) is
    ignored until the block ends, then the handlers of before are back. For a command whose answer is
    final (the work committed, the output about to be printed) before its process is done: a Ctrl-C while
    it closes its connections and its loader made a Push whose output was printed and whose file was kept
    exit by SIGINT (-2, 130 in a shell), as if it had failed. Off the main thread ``answered()`` does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    previous = {signo: signal.getsignal(signo) for signo in (signal.SIGINT, signal.SIGTERM)}

    def answered() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if callable(signal.getsignal(signal.SIGTERM)):  # SIGTERM taken as an interrupt (the console script;
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # after a Dagster run, Ctrl-C's own handler)

    try:
        yield answered
    finally:
        for signo, handler in previous.items():
            if handler is not None:  # (None: a handler not set from Python, left as it is)
                signal.signal(signo, handler)
