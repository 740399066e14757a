"""Work run in a multiprocessing pool of forked workers (the start method whose children inherit the parent's
objects): what the fork tests of the session, the drive and the store share."""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def _plain_signals() -> None:
    # a test before may have left the CLI's SIGTERM handler installed in this process: a worker that inherited
    # it would not end when the pool is terminated
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def in_forked_workers(work: Callable[[Any], T], items: Iterable[Any], processes: int = 2) -> list[T]:
    """``work`` of each item in a pool of ``processes`` forked workers, in order; the workers end on their own."""
    pool = multiprocessing.get_context("fork").Pool(processes, initializer=_plain_signals)
    try:
        results = pool.map(work, list(items))
        pool.close()
        pool.join()
        return results
    finally:
        pool.terminate()
