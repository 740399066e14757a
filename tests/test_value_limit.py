"""One value (and one line of CSV or NDJSON) holds at most ``limits.MAX_VALUE`` characters: beyond it a Push is
a 400 naming the line and the limit, raised while the line is read, and leaves nothing — on both databases,
whichever path (columnar or row reader) met the value first, compressed or not. The real limit is used: the
files are a little over 16 MiB, so no test allocates more than a few hundred MiB."""

from __future__ import annotations

import gzip
from typing import Any

import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.etl import json_array_lines
from connector_ops.kernel import limits
from connector_ops.resources.virtual_files import csv_columns, csv_copy, ndjson_columns

OVER = limits.MAX_VALUE + (1 << 20)
WORDS = f"longer than {limits.MAX_VALUE:,} characters (16 MiB), the most one may hold"


def test_the_limit_is_16_mib_and_above_where_every_columnar_path_hands_over() -> None:
    """The columnar paths give a long line to the row reader before the limit (a line is bounded by what they
    hold, plus a read), so every value over it meets the row reader's 400 whatever path saw it first."""
    assert limits.MAX_VALUE == 16 << 20
    assert limits.MAX_VALUE > csv_copy.LONGEST_LINE + csv_columns.BLOCK
    assert limits.MAX_VALUE > csv_columns.LONGEST_QUOTED + csv_columns.BLOCK
    assert limits.MAX_VALUE > json_array_lines.LONGEST_LINE + ndjson_columns.BLOCK


FILES = {
    "csv": ("big.csv", b"id,big\n1,small\n2," + b"y" * OVER + b"\n3,end\n", "line 3: a line"),
    "csv quoted over lines": ("big.csv", b'id,big\n1,small\n2,"' + b"y" * 99 + b"\n" + (b"y" * 1023 + b"\n") * (
        OVER >> 10) + b'"\n3,end\n', "a value"),
    "ndjson": ("big.ndjson", b'{"id":"1"}\n{"id":"2","big":"' + b"y" * OVER + b'"}\n', "line 2: a line"),
    "json array": ("big.json", b'[{"id":"1"},\n{"id":"2","big":"' + b"y" * OVER + b'"}\n]\n', "item 2: a value"),
}


@pytest.mark.parametrize("packing", ["", ".gz"])
@pytest.mark.parametrize("kind", FILES)
def test_a_value_over_the_limit_is_a_400_naming_the_line_and_leaves_nothing(files: Any, store: Any, kind: str,
                                                                             packing: str) -> None:
    name, data, where = FILES[kind]
    if packing:
        name, data = name + packing, gzip.compress(data, compresslevel=1)
    before = store.inventory()
    pf = files.add_bytes(data, name, "").to_json()
    del data
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf, "parameters": {}})
    message = info.value.body["message"]
    assert info.value.status == 400, message
    assert message.startswith("platformFile: ") and f"{where} {WORDS}" in message, message
    if kind == "csv quoted over lines":
        assert message.startswith("platformFile: line ")
    assert store.inventory() == before


def test_a_value_at_the_limit_is_kept_whole(files: Any, store: Any) -> None:
    value = "y" * (limits.MAX_VALUE - len("2,"))  # the line holds exactly the limit, its line break aside
    pf = files.add_bytes(f"id,big\n1,small\n{'2,' + value}\n".encode(), "big.csv", "text/csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf, "parameters": {}})["virtualFileId"]
    rows = store.rows(vf)
    assert [r["id"] for r in rows] == ["1", "2"] and rows[1]["big"] == value
