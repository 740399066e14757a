"""Two steps of a stream on two cores: each item is made in the caller's thread while a worker thread does
the work of the one before (a compressor). Python's zlib, bz2 and lzma and Arrow's C++ let go of the GIL
while they work, so making the next item (reading rows, writing CSV text) overlaps them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Done = TypeVar("Done")


def overlapped(items: Iterable[Item], work: Callable[[Item], Done], name: str) -> Iterator[Done]:
    """``work(item)`` of each of ``items``, in order, each done in a worker thread while the next item is made
    here. One item is in the worker at a time, so ``work`` needs no lock and memory holds two items. A
    failure on either side ends both: the worker's is raised here, and the worker finishes its item before
    this one goes on (a stop waits for at most one item's work)."""
    with ThreadPoolExecutor(1, thread_name_prefix=name) as worker:
        pending: Future[Done] | None = None
        for item in items:  # made here while the worker works on the item before
            if pending is None:
                pending = worker.submit(work, item)
                continue
            done = pending.result()
            pending = worker.submit(work, item)
            yield done
        if pending is not None:
            yield pending.result()
