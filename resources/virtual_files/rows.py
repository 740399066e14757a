"""Rows as the store reads them: selecting a row table's values, streaming them, and turning them into dicts.

A stored row is a tuple of values aligned with the file's column names; NULL is a missing value, left
out of the dict a reader gets, so "missing" and ``""`` stay different.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence

import sqlalchemy as sa

from connector_ops.resources.virtual_files.catalog import VirtualFileInfo, internal_name
from connector_ops.resources.virtual_files.fetching import fetch_pages, stream
from connector_ops.resources.virtual_files.shapes import SCAN_BATCH, Row


def keyset_pages(conn: sa.Connection, info: VirtualFileInfo, names: Sequence[str],
                 batch_size: int = SCAN_BATCH) -> Generator[list[tuple], None, None]:
    """Batches of value tuples (aligned with ``names``) in row order, streamed in bounded memory (a generator:
    ``close()`` it to end the read early)."""
    if not names:  # a file without columns: SELECT needs one, the rows are empty tuples
        for page in stream(conn, sa.select(info.table.c.seq).order_by(info.table.c.seq), batch_size):
            yield [() for _ in page]
        return
    colmap = info.column_map()
    query = sa.select(*(colmap[n] for n in names)).order_by(info.table.c.seq)
    yield from stream(conn, query, batch_size)


def row_of(names: Sequence[str], values: Sequence[str | None]) -> Row:
    """A stored row as a dict, missing (NULL) values left out; one C call when none is missing (hot loops).
    ``values`` may run one longer than ``names`` (a trailing ``seq``): ``zip`` stops at the names. ``all``
    tests truthiness, far cheaper than ``None in values``' comparisons: an empty string only sends the row
    the slow way, which keeps it."""
    if all(values):
        return dict(zip(names, values))  # type: ignore[arg-type]  # no None: all() said so  # noqa: B905 - see above
    return {n: v for n, v in zip(names, values) if v is not None}  # noqa: B905 - see above


def select_rows(info: VirtualFileInfo) -> sa.Select:
    """The value columns in catalog order, then ``seq`` last (see :func:`as_dicts`)."""
    table = info.table
    return sa.select(*(table.c[internal_name(o)] for o in info.ordinals), table.c.seq)


def fetch_dicts(conn: sa.Connection, names: Sequence[str], query: sa.Select,
                progress: Callable[[int], object] | None = None) -> list[Row]:
    """All rows of a :func:`select_rows` query as dicts, converted a page at a time: a Query keeping 448k
    rows held their tuples and their dicts at once (503 MiB). ``progress`` is told each page's row count
    (a Query of a million rows reads for seconds and holds ≈ 1 KiB per row: its caller shows how far)."""
    rows: list[Row] = []
    for page in fetch_pages(conn, query, SCAN_BATCH):
        rows.extend(as_dicts(names, page))
        if progress is not None:
            progress(len(page))
    return rows


def as_dicts(names: Sequence[str], rows: list[tuple]) -> list[Row]:
    """Rows (value tuples aligned with ``names``, maybe with a trailing ``seq``, as :func:`select_rows` and
    :func:`keyset_pages` give them) -> dicts, as :func:`row_of` makes them. A page without a missing or
    empty value (one test in C for the whole page) builds its dicts without a call per row: 10k rows of
    8 columns 10.9 ms → 7.6 ms, a third of a second on every million rows read (Iterate, Query, Map)."""
    if all(map(all, rows)):
        return [dict(zip(names, r)) for r in rows]  # noqa: B905 - a trailing seq is cut off, see row_of
    return [row_of(names, r) for r in rows]
