"""JSON files from and to other tools (the interop audit): a BOM before an array, Pull's NDJSON names, Pull's
charset read back by Push, binary formats Push does not read. Both databases, real files."""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from typing import Any

import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.etl import ndjson_fast
from connector_ops.etl.compressed import zstd
from connector_ops.etl.json_readers import read_json

BOM = b"\xef\xbb\xbf"
ROWS = [{"name": "René", "city": "Zürich"}, {"name": "Åsa", "city": "Malmö"}]


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


# -- the encoding: Pull's charset read back, and a JSON array in another encoding -----------------------
@pytest.mark.parametrize("export_type", ["csv", "json"])
@pytest.mark.parametrize("encoding", ["latin-1", "utf-16", "cp1252", "utf-8-sig"])
@pytest.mark.parametrize("fast", [True, False], ids=["columnar", "row reader"])
def test_pulls_export_in_another_encoding_pushes_back_from_its_descriptor(resources, monkeypatch, paths,
                                                                           export_type, encoding, fast):
    """Pull names the encoding in contentType (``text/csv; charset=ISO-8859-1``); Push ignored it and refused
    its own export without parameters (a JSON array even with them)."""
    monkeypatch.setattr(ndjson_fast, "FAST", fast)
    source = resources["virtual_files"].create_from_dicts([ROWS])
    pf = invoke("etl.pull", {"virtualFileId": source, "exportType": export_type, "exportName": f"o.{export_type}",
                             "parameters": {"encoding": encoding}}, resources)["platformFile"]
    assert ("charset=" in pf["contentType"]) == (encoding != "utf-8-sig")
    assert push_descriptor(resources, pf) == ROWS
    assert push_descriptor(resources, pf, encoding=encoding) == ROWS


def test_an_explicit_encoding_wins_over_the_charset(resources):
    data = '{"name": "René"}\n'.encode("latin-1")
    assert pushed(resources, data, "r.ndjson", "application/x-ndjson; charset=utf-16", encoding="latin-1") == [
        {"name": "René"}]
    assert pushed(resources, data, "r.ndjson", 'application/x-ndjson; charset="ISO-8859-1"') == [{"name": "René"}]
    utf8 = '{"name": "René"}\n'.encode()
    assert pushed(resources, BOM + utf8, "r.ndjson", "application/x-ndjson; charset=UTF-8") == [{"name": "René"}]


@pytest.mark.parametrize("charset", ["x-unknown-42", "base64"])
def test_a_charset_python_cannot_read_is_a_400_naming_it(resources, charset):
    before = resources["virtual_files"].inventory()
    result = pushed(resources, b"a\n1\n", "r.csv", f"text/csv; charset={charset}")
    assert result[:2] == ("error", 400), result
    assert result[2].startswith(f"platformFile.contentType: names charset '{charset}'"), result
    assert "parameters.encoding" in result[2]
    assert resources["virtual_files"].inventory() == before
    assert pushed(resources, b"a\n1\n", "r.csv", f"text/csv; charset={charset}", encoding="utf-8") == [{"a": "1"}]


@pytest.mark.parametrize("layout", list(ARRAY_LAYOUTS))
@pytest.mark.parametrize("fast", [True, False], ids=["columnar", "row reader"])
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "latin-1", "shift_jis"])
def test_a_json_array_is_read_in_parameters_encoding(resources, monkeypatch, paths, layout, fast, encoding):
    """``parameters.encoding`` was ignored for a JSON array ("malformed JSON" for UTF-16, mojibake or a bytes
    repr for Latin-1); the array is now converted to UTF-8 as it is read, as NDJSON is."""
    monkeypatch.setattr(ndjson_fast, "FAST", fast)
    rows = ROWS if encoding != "shift_jis" else [{"name": "日本", "city": "ｶﾅ"}]
    text = ARRAY_LAYOUTS[layout] if encoding != "shift_jis" else json.dumps(rows, ensure_ascii=False)
    assert pushed(resources, text.encode(encoding), encoding=encoding) == rows
    if fast and "event" not in layout and encoding != "shift_jis":
        assert paths == []


@pytest.mark.parametrize("fast", [True, False], ids=["columnar", "row reader"])
def test_a_json_array_not_in_its_encoding_is_a_400_naming_the_line_without_a_bytes_repr(resources, monkeypatch,
                                                                                       paths, fast):
    monkeypatch.setattr(ndjson_fast, "FAST", fast)
    before = resources["virtual_files"].inventory()
    good = "[\n" + ",\n".join(json.dumps({"n": str(i), "v": "é"}, ensure_ascii=False) for i in range(50))
    bad = good.encode("cp1252") + b',\n{"n": "x", "v": "\x81"}\n]\n'  # 0x81: no character in cp1252
    result = pushed(resources, bad, encoding="cp1252")
    assert result[:2] == ("error", 400), result
    assert result[2].startswith("platformFile: line 52: the file is not valid cp1252"), result
    # a Latin-1 array read as UTF-8 (the default): yajl's words as text, and what to set
    result = pushed(resources, good.encode("latin-1") + b"\n]\n")
    assert result[:2] == ("error", 400) and "b'" not in result[2], result
    assert "invalid bytes in UTF8 string" in result[2] and "set parameters.encoding" in result[2], result
    assert resources["virtual_files"].inventory() == before


# -- Pull under an NDJSON name --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["events.ndjson", "events.jsonl", "EVENTS.JSONL ", "events.ndjson.gz",
                                  "events.jsonl.zst", "events.ndjson.zip"])
def test_a_json_pull_named_ndjson_writes_ndjson_that_pushes_back(resources, paths, name):
    """A JSON Pull named ``events.ndjson`` wrote a JSON array, which no NDJSON reader opens; now one compact
    object per line, ``application/x-ndjson``, and Push reads it back to the same rows."""
    rows = [{"id": str(i), "name": f"n{i}\n\"q\"", **({"note": "é"} if i % 3 else {})} for i in range(50)]
    source = resources["virtual_files"].create_from_dicts([rows])
    data, pf = pulled(resources, source, name)
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    elif name.endswith(".zst"):
        data = zstd.decompress(data)
    elif name.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            assert archive.namelist() == ["events.ndjson"]
            data = archive.read("events.ndjson")
    else:
        assert pf["contentType"] == "application/x-ndjson"
    assert data.endswith(b"\n") and [json.loads(line) for line in data.split(b"\n")[:-1]] == rows
    assert not data.startswith(b"[")
    assert push_descriptor(resources, pf) == rows


def test_an_ndjson_pull_of_no_rows_and_in_another_encoding(resources):
    empty = resources["virtual_files"].create_from_dicts([])
    data, pf = pulled(resources, empty, "none.ndjson")
    assert data == b"" and push_descriptor(resources, pf) == []
    source = resources["virtual_files"].create_from_dicts([ROWS])
    data, pf = pulled(resources, source, "r.ndjson", encoding="utf-16")
    assert pf["contentType"].lower() == "application/x-ndjson; charset=utf-16"  # its label, in any case
    assert [json.loads(line) for line in data.decode("utf-16").splitlines()] == ROWS
    assert push_descriptor(resources, pf) == ROWS
    data, _ = pulled(resources, source, "r.json")  # any other name: the array, as before
    assert data.startswith(b"[\n") and json.loads(data) == ROWS


# -- binary formats Push does not read --------------------------------------------------------------------
OLE2 = (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 16 + b"\x3e\x00\x03\x00\xfe\xff\x09\x00" + b"\x00" * 480
        + b"Workbook\x00\x00Sheet1\x00\xff\xfe")


def _feather() -> bytes:
    import pyarrow as pa
    import pyarrow.feather as feather

    sink = io.BytesIO()
    feather.write_feather(pa.table({"a": ["1", "2"]}), sink, compression="uncompressed")
    return sink.getvalue()


def _zipped(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize(("name", "params"), [("Book1.xls", {}), ("Book1.xls", {"encoding": "latin-1"}),
                                              ("export.csv", {}), ("rows.json", {"encoding": "cp1252"}),
                                              ("Book1.zip", {})])
@pytest.mark.parametrize("kind", ["xls", "feather"])
def test_a_legacy_workbook_or_an_arrow_file_is_a_400_saying_what_it_is(resources, kind, name, params):
    """An ``.xls`` or a Feather file got "set parameters.encoding", then a NUL error or garbage rows."""
    data = OLE2 if kind == "xls" else _feather()
    if name.endswith(".zip"):
        data = _zipped("Book1.xls" if kind == "xls" else "t.feather", data)
    before = resources["virtual_files"].inventory()
    result = pushed(resources, data, name, **params)
    assert result[:2] == ("error", 400), result
    if kind == "xls":
        assert result[2].startswith("platformFile: the file is a legacy Excel workbook (.xls)"), result
        assert "save the sheet as CSV" in result[2]
    else:
        assert result[2].startswith("platformFile: the file is an Arrow IPC file (Feather"), result
        assert "Parquet" in result[2]
    assert "parameters.encoding" not in result[2] and "NUL" not in result[2]
    assert resources["virtual_files"].inventory() == before
