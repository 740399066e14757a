"""The CSV chunks an Arrow push gives PostgreSQL's ``COPY`` (``arrow_loads.csv_chunks``)."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pyarrow as pa
import pytest

from connector_ops.resources.virtual_files.arrow_loads import csv_chunks

#: psycopg's MAX_BUFFER_SIZE: its COPY writer queues a larger buffer as slices of this size
SLICE = 128 * 1024


def test_chunks_still_queued_when_a_copy_fails_pin_no_bytesio(monkeypatch: pytest.MonkeyPatch) -> None:
    """psycopg queues slices of each chunk for its writer thread; a COPY ending on an error leaves them in
    the writer's reference loop. Views of a ``BytesIO`` there were its exports when the garbage collector
    closed it: on Python 3.13 an ignored ``BufferError: Existing exports of data`` (3.11 does not close it)."""
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    batch = pa.record_batch({"a": [f"value {i}" for i in range(40_000)]})  # ~500 kB of CSV: four slices
    chunks = csv_chunks([batch, batch])
    chunk = next(chunks)
    assert len(chunk) > 2 * SLICE
    queued = [chunk[i:i + SLICE] for i in range(0, len(chunk), SLICE)]
    chunks.close()  # the COPY failed: its source is closed with a chunk still queued
    loop: list[Any] = [queued]
    loop.append(loop)  # the writer and its worker thread refer to each other
    del chunk, queued, loop, chunks
    gc.collect()
    assert [u.exc_value for u in unraisable] == []


def test_chunks_are_the_batches_as_csv_without_header_and_skip_empty_batches() -> None:
    batch = pa.record_batch({"a": ["x", None, 'say "hi"'], "b": ["1", "", "a,b"]})
    chunks = list(csv_chunks([batch.slice(0, 0), batch]))
    assert len(chunks) == 1
    assert bytes(chunks[0]) == b'"x","1"\n,""\n"say ""hi""","a,b"\n'  # a null unquoted: NULL
