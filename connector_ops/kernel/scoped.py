"""Small tools every floor uses: a context variable set for the length of a block, and batching."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def scoped(var: contextvars.ContextVar[T], value: T) -> Iterator[None]:
    """``var`` holds ``value`` inside the block and its previous value after it (threads and tasks apart)."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in lists of at most ``size`` (``itertools.batched`` arrives with Python 3.12)."""
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
