"""Small tools every floor uses: a context variable set for the length of a block, and batching."""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Iterable, Iterator, Sized
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R", bound=Sized)

#: the most cells (rows × columns) one page of rows holds: 10,000 rows of up to 20 columns, fewer of wider
#: ones. Pages counted in rows alone held 10,000 rows whatever their width: at 1,599 columns a Push's row
#: reader grew by 0.6–1.4 GiB and a Map by 1.4 GiB, where 8 columns take a few MiB.
PAGE_CELLS = 200_000


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
    items = iter(items)
    while batch := list(itertools.islice(items, size)):
        yield batch


def rows_per_page(width: int, rows: int) -> int:
    """How many rows of ``width`` columns make a page: ``rows``, but no more than :data:`PAGE_CELLS` cells, and
    never fewer than one row, so a page's memory follows its cells whatever the file's width."""
    return max(1, min(rows, PAGE_CELLS // max(width, 1)))


def pages(rows: Iterable[R], most: int) -> Iterator[list[R]]:
    """``rows`` in pages of at most ``most`` rows and :data:`PAGE_CELLS` cells (:func:`rows_per_page`), each
    page sized by the width of its first row (rows of one file have one width, or nearly); the rest of a
    page is taken in C (``islice``), with no step per row in Python."""
    rows = iter(rows)
    for first in rows:
        yield [first, *itertools.islice(rows, rows_per_page(len(first), most) - 1)]
