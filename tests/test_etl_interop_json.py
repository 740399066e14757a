"""JSON files from and to other tools (the interop audit): a BOM before an array, Pull's NDJSON names, Pull's
charset read back by Push, binary formats Push does not read. Both databases, real files."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.etl import actions, ndjson_fast
from connector_ops.etl.json_readers import read_json
from connector_ops.resources.virtual_files import sqlite_loader

BOM = b"\xef\xbb\xbf"
ROWS = [{"name": "René", "city": "Zürich"}, {"name": "Åsa", "city": "Malmö"}]


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Columnar for every size (as for a file over 4 MiB on SQLite); records whether the row reader ran."""
    monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)
    ran: list[str] = []
    real = actions.read_json

    def row_reader(*args: Any, **kwargs: Any) -> Any:
        ran.append("rows")
        return real(*args, **kwargs)

    monkeypatch.setattr(actions, "read_json", row_reader)
    return ran


def pushed(resources: dict[str, Any], data: bytes, name: str = "rows.json", content_type: str = "",
           **params: Any) -> Any:
    pf = resources["platform_files"].add_bytes(data, name, content_type or None).to_json()
    return push_descriptor(resources, pf, **params)


def push_descriptor(resources: dict[str, Any], pf: dict[str, Any], **params: Any) -> Any:
    payload: dict[str, Any] = {"platformFile": pf, **({"parameters": params} if params else {})}
    try:
        vf = invoke("etl.push", payload, resources)["virtualFileId"]
    except ConnectorError as exc:
        return ("error", exc.status, exc.message)
    return rows_of(resources, vf)


def rows_of(resources: dict[str, Any], vf: str) -> list[dict[str, Any]]:
    return invoke("etl.iterate", {"content": vf, "maxBatchSize": 10_000}, resources)["content"]


def pulled(resources: dict[str, Any], vf: str, name: str, **params: Any) -> tuple[bytes, dict[str, Any]]:
    pf = invoke("etl.pull", {"virtualFileId": vf, "exportType": "json", "exportName": name,
                             **({"parameters": params} if params else {})}, resources)["platformFile"]
    return resources["platform_files"].read_bytes(pf), pf


# -- a UTF-8 BOM before a JSON array ------------------------------------------------------------------
ARRAY_LAYOUTS = {
    "one per line (Pull's)": "[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in ROWS) + "\n]\n",
    "side by side (json.dump)": json.dumps(ROWS, ensure_ascii=False),
    "pretty-printed (indent=2)": json.dumps(ROWS, ensure_ascii=False, indent=2),
    "the event parser's (an item over two lines)": '[{"name": "René",\n"city": "Zürich"}, '
                                                   '{"name": "Åsa", "city": "Malmö"}]',
}


@pytest.mark.parametrize("layout", list(ARRAY_LAYOUTS))
@pytest.mark.parametrize("fast", [True, False], ids=["columnar", "row reader"])
@pytest.mark.parametrize("encoding", [None, "utf-8-sig", "utf-8"])
def test_a_json_array_after_a_utf8_bom_loads(resources, monkeypatch, paths, layout, fast, encoding):
    """A BOM before ``[`` (PowerShell 5, Notepad, Pull's own ``utf-8-sig`` export) was "lexical error: invalid
    char in json text" on every path; one is dropped, as NDJSON and CSV drop it."""
    monkeypatch.setattr(ndjson_fast, "FAST", fast)
    params = {"encoding": encoding} if encoding else {}
    assert pushed(resources, BOM + ARRAY_LAYOUTS[layout].encode(), **params) == ROWS
    if fast and "event" not in layout:  # Arrow read it: the row reader never ran
        assert paths == []


def test_the_event_parser_drops_the_bom_whatever_its_reads(resources):
    """Without a way to read the file again, the row reader's event parser reads the array itself."""
    data = BOM + ARRAY_LAYOUTS["the event parser's (an item over two lines)"].encode()
    assert [row for batch in read_json(io.BytesIO(data), lines_to_ignore=0, encoding="utf-8-sig")
            for row in batch] == ROWS
    one_byte = io.BufferedReader(_Trickle(data), 1)  # reads of one byte: the BOM comes in three pieces
    assert [row for batch in read_json(one_byte, lines_to_ignore=0, encoding="utf-8-sig") for row in batch] == ROWS


class _Trickle(io.RawIOBase):
    """``data`` one byte a read."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._data:
            return 0
        buffer[0] = self._data[0]
        self._data = self._data[1:]
        return 1


def test_only_one_leading_bom_is_dropped(resources):
    """A second BOM, or one after blanks, is no part of JSON: still a 400, and nothing is left."""
    before = resources["virtual_files"].inventory()
    for data in (BOM + BOM + b'[{"a": "1"}]', b' ' + BOM + b'[{"a": "1"}]'):
        result = pushed(resources, data)
        assert result[:2] == ("error", 400) and "malformed JSON" in result[2], result
    assert resources["virtual_files"].inventory() == before


def test_pulls_utf8_sig_json_export_pushes_back(resources, paths):
    """The README suggests ``encoding: utf-8-sig`` for Excel; Pull's JSON export so written came back a 400."""
    source = resources["virtual_files"].create_from_dicts([ROWS])
    data, pf = pulled(resources, source, "export.json", encoding="utf-8-sig")
    assert data.startswith(BOM + b"[")
    paths.clear()
    assert push_descriptor(resources, pf) == ROWS
    assert paths == []  # on the columnar path
