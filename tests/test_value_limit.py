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


def long_value(row: dict[str, str]) -> dict[str, str]:
    """A Map function that makes one value over the limit, at the second row."""
    return {**row, "big": "y" * OVER} if row["id"] == "2" else row


def _refused(name: str, payload: dict[str, Any]) -> str:
    with pytest.raises(ConnectorError) as info:
        invoke(name, payload)
    message = info.value.body["message"]
    assert info.value.status == 400, message
    return message


def test_every_write_path_refuses_a_value_over_the_limit_that_push_would_refuse(files: Any, store: Any) -> None:
    """Append Rows, Map and push_frame kept what Push refuses: Pull then exported a file that could not be pushed
    back. Each is a 400 naming the value (field, row, column), and nothing is written."""
    import pandas as pd
    import pyarrow as pa

    from connector_ops import push_frame

    pf = files.add_bytes(b"id,big\n1,small\n2,small\n", "small.csv", "text/csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf, "parameters": {}})["virtualFileId"]
    big = "y" * OVER
    before = store.inventory()

    message = _refused("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"id": "3"}},
                                                    {"virtualFileId": vf, "content": {"id": "4", "big": big}}]})
    assert message == f"rows[1].content.big: a value {WORDS}", message
    message = _refused("etl.map", {"virtualFileId": vf, "action": "tests.test_value_limit:long_value"})
    assert message == f"row 2: tests.test_value_limit:long_value returned a value of column 'big' {WORDS}", message
    for frame in (pd.DataFrame({"id": ["1", "2"], "big": ["small", big]}, index=[10, 20]),
                  pa.table({"id": ["1", "2"], "big": ["small", big]})):
        with pytest.raises(ConnectorError) as info:
            push_frame(frame)
        assert info.value.status == 400
        label = 20 if isinstance(frame, pd.DataFrame) else 1
        assert info.value.body["message"] == f"frame.big: the value at index {label} is {WORDS}"
    assert store.inventory() == before
    assert store.rows(vf) == [{"id": "1", "big": "small"}, {"id": "2", "big": "small"}]


def test_a_value_at_the_limit_is_kept_on_every_write_path(files: Any, store: Any) -> None:
    """Characters are counted, not bytes: a value of the limit's characters, two bytes each, is kept."""
    from connector_ops import push_frame

    at = "é" * limits.MAX_VALUE
    pf = files.add_bytes(b"id\n1\n", "small.csv", "text/csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf, "parameters": {}})["virtualFileId"]
    invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"id": "2", "big": at}}]})
    assert store.rows(vf)[1]["big"] == at
    import pyarrow as pa

    framed = push_frame(pa.table({"big": [at]}))
    assert store.rows(framed) == [{"big": at}]
