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
from collections.abc import Iterator


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
