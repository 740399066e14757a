"""Pages of rows are sized by cells, not rows alone: a narrow file keeps pages of 10,000 rows, a wide one gets
fewer rows a page (``kernel.scoped.PAGE_CELLS``), so a page's memory follows its cells. Observed through each
reader's batches and through the rows a Map's function is handed, never through timing."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from connector_ops.etl import json_readers, readers
from connector_ops.kernel.scoped import PAGE_CELLS, rows_per_page
from connector_ops.resources.virtual_files.shapes import SCAN_BATCH
from connector_ops.resources.virtual_files.transforms import MAP_SLICE

WIDE = 1_000  # PostgreSQL holds up to 1,600 columns; 1,000 one-letter values fit its 8 KiB row
WIDE_ROWS = PAGE_CELLS // WIDE  # 200


def test_the_rule_keeps_narrow_pages_and_shrinks_wide_ones() -> None:
    assert [rows_per_page(w, 10_000) for w in (1, 8, 20)] == [10_000] * 3  # the benchmarks' 8 columns unmoved
    assert rows_per_page(1_599, 10_000) == 125
    assert rows_per_page(10**6, 10_000) == 1  # never fewer than one row
    assert rows_per_page(WIDE, 4) == 4  # a smaller page asked for stays as small


def _csv(width: int, rows: int) -> io.BytesIO:
    header = ",".join(f"c{i}" for i in range(width))
    return io.BytesIO((header + "\n" + ("x," * (width - 1) + "x\n") * rows).encode())


@pytest.mark.parametrize(("width", "rows", "sizes"), [(8, 20_001, [10_000, 10_000, 1]),
                                                      (WIDE, 450, [WIDE_ROWS, WIDE_ROWS, 50])])
def test_csv_row_reader_batches_by_cells(width: int, rows: int, sizes: list[int]) -> None:
    _, batches = readers.read_csv(_csv(width, rows), delimiter=",", lines_to_ignore=0, header=True, schema=None,
                                  encoding="utf-8")
    assert [len(b) for b in batches] == sizes


def _objects(width: int, rows: int) -> list[str]:
    return [json.dumps({f"c{i}": "x" for i in range(width)}) for _ in range(rows)]


@pytest.mark.parametrize("layout", ["ndjson", "array by lines", "array by events"])
@pytest.mark.parametrize(("width", "rows", "sizes"), [(8, 10_001, [10_000, 1]),
                                                      (WIDE, 450, [WIDE_ROWS, WIDE_ROWS, 50])])
def test_json_readers_batch_by_cells(layout: str, width: int, rows: int, sizes: list[int]) -> None:
    lines = _objects(width, rows)
    data = ("\n".join(lines) if layout == "ndjson" else "[\n" + ",\n".join(lines) + "\n]").encode()
    reopen = None if layout == "array by events" else (lambda: io.BytesIO(data))
    batches = json_readers.read_json(io.BytesIO(data), lines_to_ignore=0, encoding="utf-8", reopen=reopen)
    assert [len(b) for b in batches] == sizes


@pytest.mark.parametrize(("width", "rows"), [(8, SCAN_BATCH + 1), (WIDE, 450)])
def test_map_pages_by_cells(store: Any, width: int, rows: int) -> None:
    """The store hands a Map's function pages of 10,000 rows (PostgreSQL: slices of ``MAP_SLICE``) of a
    narrow file, and of ``PAGE_CELLS`` cells of a wide one."""
    vf = store.create_from_rows({f"c{i}": "x" for i in range(width)} for _ in range(rows))
    seen: list[int] = []

    def record(page: list[dict[str, str]]) -> list[dict[str, str]]:
        seen.append(len(page))
        return page

    out = store.map_rows(vf, record, batch_size=SCAN_BATCH)
    assert store.count(out) == rows and sum(seen) == rows
    most = SCAN_BATCH if store.database_url.startswith("sqlite") else MAP_SLICE
    assert max(seen) == (most if width == 8 else WIDE_ROWS)
