"""A virtual file read as Arrow batches (pull_frame's path) holds exactly the rows a row scan reads: every
string as stored, a missing value null and an empty one "", in row order — on PostgreSQL through the
server's CSV ``COPY`` and Arrow's parser, elsewhere a page at a time. Both databases."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from connector_ops.kernel.errors import InvalidInput
from connector_ops.resources.virtual_files import arrow_reads

HOSTILE = ["", " ", '"', '""', ",", "\n", "\r\n", "\r", "a,b", 'say "hi"', "\\", "\\N", "NULL", "null", "é",
           "🙂", "\t", "x" * 300, "\u2028", "0", "007", '"\n"', "\\.", ";"]


def scanned(store: Any, vf_id: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    names, batches = store.scan_arrow(vf_id, columns)
    table = pa.Table.from_batches(list(batches), pa.schema([(n, pa.string()) for n in names]))
    assert table.column_names == names
    return [dict(zip(names, row, strict=True)) for row in zip(*(c.to_pylist() for c in table.columns), strict=True)]


def expected(store: Any, vf_id: str, columns: list[str]) -> list[dict[str, Any]]:
    return [{n: row.get(n) for n in columns} for row in store.rows(vf_id)]


def test_random_hostile_values_read_back_exactly(store: Any, monkeypatch) -> None:
    rnd = random.Random(7)
    names = ["a", "b c", 'd "q"']
    rows: list[dict[str, str]] = [dict.fromkeys(names, "first")]  # the columns, in this order
    for _ in range(2000):
        row = {n: "".join(rnd.choices(HOSTILE, k=rnd.randint(0, 3))) for n in names if rnd.random() > 0.2}
        rows.append(row)
    vf = store.create_from_rows(rows)
    want = expected(store, vf, names)
    # PostgreSQL: many blocks (each longer than a row), cut at every kind of byte; SQLite reads pages, not blocks
    for block in range(4096, 4096 + 48) if store.database_url.startswith("postgresql") else [arrow_reads.BLOCK]:
        monkeypatch.setattr(arrow_reads, "BLOCK", block)
        assert scanned(store, vf) == want, block
    assert scanned(store, vf, ["b c", "a"]) == [{"b c": r.get("b c"), "a": r.get("a")} for r in store.rows(vf)]
    with pytest.raises(InvalidInput, match="duplicate column name 'b c'"):
        scanned(store, vf, ["b c", "a", "b c"])  # a repeated name: an export no Push reads back (850de60)


def test_one_column_with_missing_and_empty_values(store: Any) -> None:
    """On PostgreSQL a row whose only value is missing is an empty line in the CSV: it is a row, null."""
    vf = store.create_from_rows([{"a": "x"}, {}, {"a": ""}, {}])
    assert scanned(store, vf) == [{"a": "x"}, {"a": None}, {"a": ""}, {"a": None}]


def test_no_rows_and_no_columns(store: Any) -> None:
    empty = store.create_from_batches(["a", "b"], [])
    assert scanned(store, empty) == []
    assert store.scan_arrow(empty)[0] == ["a", "b"]
    none = store.create_from_rows([{}, {}])
    assert store.scan_arrow(none)[0] == [] and scanned(store, none) == []


def test_rows_longer_than_a_block_are_read_again_with_a_larger_one(store: Any, monkeypatch) -> None:
    """Arrow's reader wants each row in one block: on PostgreSQL a value of a few MiB failed pull_frame and a
    Parquet Pull ("straddling object straddles two block boundaries"). The rows not yet given are read again
    with a block four times larger, as often as it takes, and every row comes once, in order."""
    rows = [{"a": str(i), "b": "x"} for i in range(300)] + [{"a": "long", "b": "y" * 5_000}]
    rows += [{"a": str(i)} for i in range(300, 600)] + [{"a": "longer", "b": "z" * 70_000}, {"a": "last", "b": ""}]
    vf = store.create_from_rows(rows)
    monkeypatch.setattr(arrow_reads, "BLOCK", 4096)
    assert scanned(store, vf) == expected(store, vf, ["a", "b"])
    monkeypatch.undo()
    big = store.create_from_rows([{"a": "1"}, {"a": "y" * (3 << 20)}, {"a": "2"}])  # past the default block
    assert scanned(store, big) == [{"a": "1"}, {"a": "y" * (3 << 20)}, {"a": "2"}]


def test_wide_rows_over_many_pages_read_back_exactly(store: Any, monkeypatch) -> None:
    """SQLite builds each row's JSON object, and a function there takes at most 127 arguments: 130 columns
    are three objects, each group's page parsed apart and the columns put back in order. Control characters
    and names that look like the reader's own keys (``f1``) or like SQL come back as they went in, page by
    page."""
    rnd = random.Random(11)
    names = [f"c{i}" for i in range(125)] + ["f1", "f0", "a'b", '"', "é x"]
    values = [*HOSTILE, "\x01", "\x1f", "\x7f", "\u0085", "{}", "[1]", 'null', '{"f0": 1}']
    rows: list[dict[str, str]] = [dict.fromkeys(names, "first")]
    for _ in range(60):
        rows.append({n: rnd.choice(values) for n in names if rnd.random() > 0.3})
    rows.append({names[-1]: "only the last"})
    rows.append({})
    vf = store.create_from_rows(rows)
    monkeypatch.setattr(arrow_reads, "SCAN_BATCH", 7)  # SQLite's pages; PostgreSQL reads blocks
    assert scanned(store, vf) == expected(store, vf, names)
    picked = ["f0", "c64", "c3", "é x", "c124"]
    assert scanned(store, vf, picked) == expected(store, vf, picked)
