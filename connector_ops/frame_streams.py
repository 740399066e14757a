"""Frames that arrive in batches: what they are, and how a stream is read once without being held.

A stream cannot be read twice and is not given a size. :func:`peeked` reads only as far as the load needs
to choose its path (16 MiB), and :func:`positioned` numbers the rows so that an error can name one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from connector_ops.frame_polars import polars_table


def arrow_stream(frame: Any) -> tuple[list[str], Iterator[Any]] | None:
    """The column names and record batches of a frame that arrives in batches: a ``pyarrow.RecordBatchReader``,
    a ``pyarrow.dataset.Dataset`` or its ``Scanner`` (anything with ``to_reader()``: read through it), a
    polars ``LazyFrame`` (:func:`_lazy_batches`), or anything else that gives an Arrow stream
    (``__arrow_c_stream__``: a DuckDB relation, …); ``None`` for the rest."""
    import pyarrow as pa

    library = type(frame).__module__.split(".")[0]
    if library == "pandas" or isinstance(frame, pa.Table | pa.RecordBatch) or \
            (library == "polars" and hasattr(frame, "to_arrow")):  # whole tables: see frames.frame_into
        return None
    if isinstance(frame, pa.ChunkedArray):  # a stream of one column's values, not of rows: refused by to_arrow
        return None
    if library == "polars" and hasattr(frame, "collect_schema"):  # a LazyFrame
        return frame.collect_schema().names(), _lazy_batches(frame)
    if hasattr(frame, "scanner"):
        import pyarrow.dataset as ds

        frame = frame.scanner() if isinstance(frame, ds.Dataset) else frame
    if hasattr(frame, "to_reader") and not hasattr(frame, "__arrow_c_stream__"):  # a dataset's Scanner
        frame = frame.to_reader()
    if isinstance(frame, pa.RecordBatchReader) or hasattr(frame, "__arrow_c_stream__"):
        reader = frame if isinstance(frame, pa.RecordBatchReader) else pa.RecordBatchReader.from_stream(frame)
        return reader.schema.names, iter(reader)
    return None


def _lazy_batches(frame: Any) -> Iterator[Any]:
    """A polars LazyFrame's record batches, collected a batch at a time (``collect_batches``, polars ≥ 1.34);
    older polars has no such thing, and collects the whole frame first (its memory)."""
    parts = frame.collect_batches() if hasattr(frame, "collect_batches") else [frame.collect()]
    for part in parts:
        yield from polars_table(part).to_batches()


def peeked(batches: Iterator[Any], enough: int = 16 << 20) -> tuple[int, Iterator[Any]]:
    """The size of a stream's first ``enough`` bytes (all of it, if it is smaller: what decides how it is
    loaded) and the whole stream again."""
    first, size = [], 0
    for batch in batches:
        first.append(batch)
        size += batch.nbytes
        if size >= enough:
            break
    return size, itertools.chain(first, batches)


def positioned(batches: Iterable[Any]) -> Iterator[tuple[Any, range]]:
    """Each batch with the row positions it holds (what an error names where a frame has no index)."""
    start = 0
    for batch in batches:
        yield batch, range(start, start + batch.num_rows)
        start += batch.num_rows
