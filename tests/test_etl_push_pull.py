"""Push and Pull on both databases: CSV conformance (csv-spectrum + edge cases), JSON, round trips, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector_ops import ConnectorError, invoke
from tests.conftest import CSV_SPECTRUM

# location_coordinates: its JSON does not match its CSV (see the corpus README); checked separately below.
SPECTRUM_CASES = sorted(p.stem for p in (CSV_SPECTRUM / "csvs").glob("*.csv") if p.stem != "location_coordinates")


def push(files, data: bytes, name: str = "data.csv", content_type: str = "text/csv", **parameters) -> str:
    pf = files.add_bytes(data, name, content_type).to_json()
    return invoke("etl.push", {"platformFile": pf, "parameters": parameters})["virtualFileId"]


def rows(vf: str) -> list[dict]:
    out, has_next = [], True
    while has_next:
        page = invoke("etl.iterate", {"content": vf, "maxBatchSize": 1000})
        out += page["content"]
        has_next = page["hasNext"]
    return out


def pull_bytes(files, vf: str, export_type: str = "csv", **parameters) -> bytes:
    out = invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": f"out.{export_type}",
                              "parameters": parameters})
    return files.read_bytes(out["platformFile"])


def error(name: str, payload: dict) -> ConnectorError:
    with pytest.raises(ConnectorError) as info:
        invoke(name, payload)
    return info.value


@pytest.mark.parametrize("case", SPECTRUM_CASES)
def test_csv_spectrum_push_matches_expected_rows(files, env, case):
    data = (CSV_SPECTRUM / "csvs" / f"{case}.csv").read_bytes()
    expected = json.loads((CSV_SPECTRUM / "json" / f"{case}.json").read_text(encoding="utf-8"))
    vf = push(files, data)
    assert rows(vf) == expected


@pytest.mark.parametrize("case", SPECTRUM_CASES)
def test_csv_spectrum_round_trip(files, env, case):
    """Push(Pull(Push(x))) has the same rows as Push(x), in order."""
    vf = push(files, (CSV_SPECTRUM / "csvs" / f"{case}.csv").read_bytes())
    again = push(files, pull_bytes(files, vf))
    assert rows(again) == rows(vf)
    as_json = push(files, pull_bytes(files, vf, "json"), "data.json", "application/json")
    assert rows(as_json) == rows(vf)


def test_quotes_inside_unquoted_field_are_data(files, env):
    vf = push(files, (CSV_SPECTRUM / "csvs" / "location_coordinates.csv").read_bytes())
    # the corpus file holds U+FFFD where its author's degree signs were lost; the quotes stay as they are
    assert rows(vf) == [{"Contact Phone Number": "2095257564",
                         "Location Coordinates": "37\ufffd36'37.8\"N 121\ufffd2'17.9\"W",
                         "Cities": "Modesto", "Counties": "Stanislaus"}]


def test_bom_crlf_embedded_newlines_unicode_and_empty_fields(files, env):
    data = '\ufeffid,"name, full",note\r\n1,"Zoë ""Z"" Ünal","line1\r\nline2"\r\n2,,\r\n3,ʤ,"a,b"'.encode()
    vf = push(files, data)
    assert rows(vf) == [
        {"id": "1", "name, full": 'Zoë "Z" Ünal', "note": "line1\r\nline2"},
        {"id": "2", "name, full": "", "note": ""},
        {"id": "3", "name, full": "ʤ", "note": "a,b"},
    ]
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"name, full": "ʤ"}})["result"][0]["id"] == "3"


def test_empty_file_and_header_only(files, env):
    empty = push(files, b"")
    assert rows(empty) == []
    header_only = push(files, b"a,b,c\r\n")
    assert rows(header_only) == []
    assert pull_bytes(files, header_only) == b"a,b,c\r\n"
    assert json.loads(pull_bytes(files, header_only, "json")) == []


def test_blank_lines_are_skipped_and_whitespace_kept(files, env):
    vf = push(files, b"a,b\n\n 1 , 2\n\n")
    assert rows(vf) == [{"a": " 1 ", "b": " 2"}]


@pytest.mark.parametrize("delimiter,sep", [(";", ";"), ("\t", "\t"), ("\\t", "\t"), ("|", "|")])
def test_delimiters(files, env, delimiter, sep):
    vf = push(files, f"a{sep}b\n1{sep}x,y\n".encode(), csvDelimiter=delimiter)
    assert rows(vf) == [{"a": "1", "b": "x,y"}]
    assert pull_bytes(files, vf, csvDelimiter=delimiter) == f"a{sep}b\r\n1{sep}x,y\r\n".encode()


def test_lines_to_ignore_then_header_and_multiline_field(files, env):
    data = b'report generated "today\nby: me\nid,text\n1,"multi\nline"\n'
    vf = push(files, data, linesToIgnore=2)
    assert rows(vf) == [{"id": "1", "text": "multi\nline"}]


def test_schema_without_header_and_schema_with_header(files, env):
    vf = push(files, b"1,2\n3,4\n", useFirstRowAsSchema=False, schema=["x", "y"])
    assert rows(vf) == [{"x": "1", "y": "2"}, {"x": "3", "y": "4"}]
    implicit = push(files, b"1,2\n", schema=["x", "y"])  # schema given: the first row is data
    assert rows(implicit) == [{"x": "1", "y": "2"}]
    renamed = push(files, b"a,b\n1,2\n", useFirstRowAsSchema=False, linesToIgnore=1, schema=["x", "y"])
    assert rows(renamed) == [{"x": "1", "y": "2"}]


@pytest.mark.parametrize("size", [10, 5 << 20], ids=["row_reader", "columnar"])
def test_with_a_header_and_a_schema_the_header_names_the_columns(files, env, size):
    """Spec 4.C rule 2: the first row gives the names; schema lists them (any order) or it is a 400. Schema
    renamed the columns by position, which relabelled ``id`` as ``name`` when its order was not the file's."""
    body = b"".join(b"%d,Ada,%d\n" % (i, i % 7) for i in range(max(1, size // 12)))
    vf = push(files, b"id,name,qty\n" + body, useFirstRowAsSchema=True, schema=["name", "id", "qty"])
    assert rows(vf)[0] == {"id": "0", "name": "Ada", "qty": "0"}
    for schema, words in ((["name", "id"], "not in schema: 'qty'"),
                          (["id", "name", "qty", "x"], "not in the header: 'x'"),
                          (["x", "y", "z"], "not in the header: 'x', 'y', 'z'; not in schema: 'id', 'name', 'qty'")):
        with pytest.raises(ConnectorError) as caught:
            push(files, b"id,name,qty\n" + body, useFirstRowAsSchema=True, schema=schema)
        assert caught.value.status == 400
        message = caught.value.body["message"]
        assert message.startswith("parameters.schema: the header row names the columns") and words in message


@pytest.mark.parametrize(
    "data,line",
    [
        (b"a,b\n1,2,3\n", 2),  # long first data row (pandas silently shifts it)
        (b"a,b\n1,2\n3\n", 3),  # short row
        (b"a,b\n1,2\n3,4\n5,6,7\n", 4),
    ],
)
def test_ragged_rows_are_an_error_naming_the_line_and_leave_nothing(files, env, store, data, line):
    before = _virtual_file_count(store)
    pf = files.add_bytes(data, "bad.csv").to_json()
    exc = error("etl.push", {"platformFile": pf})
    assert exc.status == 400
    assert f"line {line}" in exc.body["message"] and "expected 2 fields" in exc.body["message"]
    assert _virtual_file_count(store) == before


def test_ragged_row_after_many_batches_leaves_nothing(files, env, store):
    data = b"a,b\n" + b"1,2\n" * 25_000 + b"oops\n"
    before = _virtual_file_count(store)
    exc = error("etl.push", {"platformFile": files.add_bytes(data, "big.csv").to_json()})
    assert exc.status == 400 and "line 25002" in exc.body["message"]
    assert _virtual_file_count(store) == before


def test_unterminated_quote_is_malformed(files, env):
    exc = error("etl.push", {"platformFile": files.add_bytes(b'a,b\n1,"open\n2,3\n', "q.csv").to_json()})
    assert exc.status == 400 and "malformed CSV" in exc.body["message"]


def test_duplicate_and_empty_header_names(files, env):
    exc = error("etl.push", {"platformFile": files.add_bytes(b"a,a\n1,2\n", "d.csv").to_json()})
    assert exc.status == 400 and "duplicate column name 'a'" in exc.body["message"]
    exc = error("etl.push", {"platformFile": files.add_bytes(b"a,,c\n1,2,3\n", "e.csv").to_json()})
    assert exc.status == 400 and "column 2's name is empty" in exc.body["message"]


def _parquet_with_an_empty_name() -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table({"a": ["1"], "": ["2"]}), sink)
    return sink.getvalue()


@pytest.mark.parametrize("path, expected", [
    ("ndjson", "platformFile: column name '' is empty"),
    ("parquet", "platformFile: column 2's name is empty"),
    ("frame", "frame.columns: column 2's name is empty"),
    ("append", "rows: column name '' is empty"),
    ("map", "action: column name '' is empty"),
    ("join", "outputSchema: an output column's name is empty"),
])
def test_an_empty_column_name_is_a_400_on_every_path(files, env, store, path, expected):
    """No path makes a column a CSV header cannot carry: its Pull would be a file Push refuses."""
    import pandas as pd

    from connector_ops import push_frame

    vf = push(files, b"a,b\n1,2\n")
    before = _virtual_file_count(store)
    attempts = {
        "ndjson": lambda: push(files, b'{"a": "1", "": "2"}\n', "e.ndjson", "application/x-ndjson"),
        "parquet": lambda: push(files, _parquet_with_an_empty_name(), "e.parquet", "application/vnd.apache.parquet"),
        "frame": lambda: push_frame(pd.DataFrame({"a": ["1"], "": ["2"]})),
        "append": lambda: invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"": "x"}}]}),
        "map": lambda: invoke("etl.map", {"virtualFileId": vf, "action": 'rename(a="")'}),
        "join": lambda: invoke("etl.join", {
            "join": {"left": {"virtualFileId": vf, "customId": "l", "key": "a"},
                     "right": {"virtualFileId": vf, "customId": "r", "key": "a"}, "type": "INNER"},
            "outputSchema": {"": "l.a"}}),
    }
    with pytest.raises(ConnectorError) as info:
        attempts[path]()
    assert (info.value.status, info.value.body["message"]) == (400, expected)
    assert _virtual_file_count(store) == before
    assert rows(vf) == [{"a": "1", "b": "2"}]


def test_wrong_encoding_is_a_clear_error_and_encoding_parameter_fixes_it(files, env):
    latin = "name\nJosé\n".encode("latin-1")
    exc = error("etl.push", {"platformFile": files.add_bytes(latin, "l.csv").to_json()})
    assert exc.status == 400 and "not valid" in exc.body["message"] and "line 2" in exc.body["message"]
    vf = push(files, latin, encoding="latin-1")
    assert rows(vf) == [{"name": "José"}]


def test_json_array_and_ndjson(files, env):
    data = b'[{"a": "x", "n": 1.50, "ok": true, "none": null, "obj": {"k": [1, 2]}}, {"b": "y"}]'
    vf = push(files, data, "d.json", "application/json")
    assert rows(vf) == [{"a": "x", "n": "1.50", "ok": "true", "obj": '{"k":[1,2]}'}, {"b": "y"}]
    nd = push(files, b'{"a": "1"}\n\n{"a": "2", "b": "3"}\n', "d.ndjson", "application/x-ndjson")
    assert rows(nd) == [{"a": "1"}, {"a": "2", "b": "3"}]
    assert json.loads(pull_bytes(files, nd, "json")) == [{"a": "1"}, {"a": "2", "b": "3"}]


@pytest.mark.parametrize("name", ["d.json", "d.ndjson"])
def test_a_json_push_or_pull_refuses_a_delimiter_but_takes_the_default_spelled_out(files, env, store, name):
    """As a Parquet file refuses the CSV parameters; ``csvDelimiter: ","`` (the docs' examples and the
    shipped pipelines spell it out) means nothing and passes."""
    data = b'[{"a": "1;2"}]' if name == "d.json" else b'{"a": "1;2"}\n'
    before = _virtual_file_count(store)
    with pytest.raises(ConnectorError) as info:
        push(files, data, name, "application/json", csvDelimiter=";")
    assert info.value.summary() == ("etl.push failed (400): parameters.csvDelimiter: does not apply to a JSON "
                                    "file (JSON has no field delimiter)")
    assert _virtual_file_count(store) == before
    vf = push(files, data, name, "application/json", csvDelimiter=",")
    assert rows(vf) == [{"a": "1;2"}]
    with pytest.raises(ConnectorError) as info:
        pull_bytes(files, vf, "json", csvDelimiter="\\t")
    assert info.value.summary() == ("etl.pull failed (400): parameters.csvDelimiter: does not apply to a JSON "
                                    "export (only CSV has a delimiter, a header row and a spreadsheet's cells)")
    with pytest.raises(ConnectorError) as info:  # it was ignored: every object still named its columns
        pull_bytes(files, vf, "json", addFirstRowAsSchema=False)
    assert info.value.summary() == ("etl.pull failed (400): parameters.addFirstRowAsSchema: does not apply to a "
                                    "JSON export (only CSV has a delimiter, a header row and a spreadsheet's cells)")
    assert json.loads(pull_bytes(files, vf, "json", csvDelimiter=",", addFirstRowAsSchema=True)) == [{"a": "1;2"}]


@pytest.mark.parametrize(
    "data,fragment",
    [
        (b'[{"a": 1}, 5]', "item 2: expected a JSON object"),
        (b'[{"a": 1}, {"a": ', "malformed JSON"),
        (b'{"a": 1}\n{"a": }\n', "line 2: malformed JSON"),
        (b'{"a": 1}\n[1]\n', "line 2: expected a JSON object"),
    ],
)
def test_malformed_json(files, env, store, data, fragment):
    before = _virtual_file_count(store)
    exc = error("etl.push", {"platformFile": files.add_bytes(data, "bad.json", "application/json").to_json()})
    assert exc.status == 400 and fragment in exc.body["message"]
    assert _virtual_file_count(store) == before


def test_pull_options_header_schema_delimiter_encoding(files, env):
    vf = push(files, "a,b,c\n1,é,3\n".encode())
    assert pull_bytes(files, vf, addFirstRowAsSchema=False) == "1,é,3\r\n".encode()
    assert pull_bytes(files, vf, schema=["c", "a"], csvDelimiter=";") == b"c;a\r\n3;1\r\n"
    assert pull_bytes(files, vf, encoding="latin-1") == "a,b,c\r\n1,é,3\r\n".encode("latin-1")
    assert pull_bytes(files, vf, encoding="utf-8-sig").startswith(b"\xef\xbb\xbfa,b,c")
    assert json.loads(pull_bytes(files, vf, "json", schema=["b"])) == [{"b": "é"}]


def test_pull_descriptor_and_missing_values(files, env):
    vf = push(files, b"a,b\n1,2\n")
    invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"a": "3", "c": "new"}}]})
    out = invoke("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "report.csv"})["platformFile"]
    assert set(out) == {"id", "name", "contentType", "link", "size", "lastModified"}
    assert out["name"] == "report.csv" and out["contentType"] == "text/csv"
    assert out["link"].endswith(f"/files/{out['id']}") and out["lastModified"].endswith("Z")
    content = files.read_bytes(out)
    assert out["size"] == len(content)
    assert content == b"a,b,c\r\n1,2,\r\n3,,new\r\n"


def test_pull_errors(files, env, store):
    vf = push(files, "a\nʤ\n".encode())
    before = sorted(Path(files.files_dir).iterdir())
    exc = error("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "x.csv",
                             "parameters": {"encoding": "latin-1"}})
    assert exc.status == 400 and exc.body["message"].startswith("parameters.encoding:")
    assert sorted(Path(files.files_dir).iterdir()) == before  # nothing half-written
    exc = error("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "x.csv",
                             "parameters": {"schema": ["nope"]}})
    assert exc.status == 400 and "parameters.schema" in exc.body["message"] and "nope" in exc.body["message"]
    exc = error("etl.pull", {"virtualFileId": "missing", "exportType": "csv", "exportName": "x.csv"})
    assert exc.status == 500 and "not found" in exc.body["message"]
    exc = error("etl.pull", {"virtualFileId": vf, "exportType": "xml", "exportName": "x"})
    assert exc.status == 400 and exc.body["message"].startswith("exportType:")
    exc = error("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "x",
                             "parameters": {"encoding": "klingon"}})
    assert exc.status == 400 and "parameters.encoding" in exc.body["message"]


CSV_FILE = {"name": "a.csv", "link": "x", "contentType": "text/csv"}


@pytest.mark.parametrize(
    "payload,field",
    [
        ({}, "platformFile"),
        ({"platformFile": {"name": "a.csv", "contentType": "text/csv"}}, "platformFile.link"),
        ({"platformFile": CSV_FILE, "parameters": {"linesToIgnore": -1}}, "parameters.linesToIgnore"),
        ({"platformFile": CSV_FILE, "parameters": {"csvDelimiter": ";;"}}, "parameters.csvDelimiter"),
        ({"platformFile": {"name": "a.csv", "link": "x", "contentType": "text/csv"}, "parameters": {"schema": "a,b"}},
         "parameters.schema"),
        ({"platformFile": {"name": "a.csv", "link": "x", "contentType": "text/csv"}, "parameters": {"bogus": 1}},
         "parameters.bogus"),
        ({"platformFile": {"name": "a.csv", "link": "ftp://x/y", "contentType": "text/csv"}}, "platformFile.link"),
        ({"platformFile": {"name": "a.csv", "link": "x", "contentType": "text/csv"},
          "parameters": {"useFirstRowAsSchema": False}}, "parameters.schema"),
    ],
)
def test_push_bad_input_names_the_field(env, payload, field):
    exc = error("etl.push", payload)
    assert exc.status == 400
    assert exc.body["message"].startswith(field), exc.body


def test_push_unknown_platform_file_is_404(files, env):
    link = files.link_for("0" * 32)
    exc = error("etl.push", {"platformFile": {"name": "a.csv", "contentType": "text/csv", "link": link}})
    assert (exc.status, exc.body) == (404, {"message": "not found"})


HOSTILE = ['na"me', "a.b", "$where", "select", "drop table x;--", "ünï cödé 🙂", "x" * 100, "'", "c0", "seq", " "]


def test_hostile_column_names_are_data(files, env):
    header = ",".join('"' + n.replace('"', '""') + '"' for n in HOSTILE)
    values = ",".join(str(i) for i in range(len(HOSTILE)))
    vf = push(files, f"{header}\n{values}\n".encode())
    expected = {n: str(i) for i, n in enumerate(HOSTILE)}
    assert rows(vf) == [expected]
    for i, name in enumerate(HOSTILE):
        if name.startswith("$"):  # the filter language reserves top-level `$` keys for operators
            assert error("etl.query", {"virtualFileId": vf, "query": {name: str(i)}}).status == 400
            continue
        assert invoke("etl.query", {"virtualFileId": vf, "query": {name: str(i)}})["result"] == [expected]
    again = push(files, pull_bytes(files, vf))
    assert rows(again) == [expected]


def _virtual_file_count(store) -> int:
    import sqlalchemy as sa

    from connector_ops.resources.virtual_files.catalog import virtual_file

    with store.reading() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(virtual_file)).scalar_one()


def test_nul_character(files, env, database_url):
    pf = files.add_bytes(b"a,b\n1,x\x00y\n", "nul.csv").to_json()
    if database_url.startswith("sqlite"):
        vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
        assert rows(vf) == [{"a": "1", "b": "x\x00y"}]
    else:
        exc = error("etl.push", {"platformFile": pf})
        assert exc.status == 400 and "NUL" in exc.body["message"]


@pytest.mark.parametrize("encoding,bom", [("utf-8-sig", b"\xef\xbb\xbf"), ("utf-16", None)])
def test_pull_writes_a_bom_once_across_chunks(files, env, encoding, bom):
    vf = push(files, b"a\n" + b"x\n" * 25_000)
    data = pull_bytes(files, vf, encoding=encoding)
    text = data.decode(encoding)
    assert "\ufeff" not in text and text.count("\r\n") == 25_001
    if bom:
        assert data.startswith(bom) and data.count(bom) == 1
    as_json = pull_bytes(files, vf, "json", encoding=encoding)
    assert len(json.loads(as_json.decode(encoding))) == 25_000


def test_pull_bad_export_name_is_refused_before_reading(files, env, store):
    vf = push(files, b"a\n1\n")
    exc = error("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "bad\nname"})
    assert exc.status == 400 and exc.body["message"].startswith("exportName:")
    assert store.engine.pool.checkedout() == 0  # no read transaction left open


NAMES = ["id", "a%sb", "x\"y", "é", "%", "line\nbreak"]
VALUE = st.one_of(st.none(), st.text(alphabet=st.sampled_from([*'ab ,;%"\\/\n\r\t\x00\x1fé🙂{}[]:', "\u2028"]),
                                     max_size=6))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(width=st.integers(0, len(NAMES)), data=st.data())
def test_json_export_writes_each_row_as_json_dumps_would(width, data):
    """Pull's JSON writer encodes a page without missing values by one call, and any other page row by row:
    both give, byte for byte, ``json.dumps`` of each row's dict of present values, one object per line."""
    from connector_ops.etl.writers import json_chunks

    names = NAMES[:width]
    pages = data.draw(st.lists(st.lists(st.tuples(*[VALUE] * width), max_size=6), max_size=4))
    written = b"".join(json_chunks(names, pages, encoding="utf-8")).decode()
    objects = [json.dumps({n: v for n, v in zip(names, row, strict=True) if v is not None}, ensure_ascii=False,
                          separators=(",", ":")) for page in pages for row in page]
    assert written == ("[\n" + ",\n".join(objects) + "\n]\n" if objects else "[]\n")


def test_a_row_too_big_for_a_postgresql_page_is_a_400_saying_so(files, env, store):
    """1,400 columns of five characters: within the 1,599 allowed, but on PostgreSQL short values stay in the
    row, which must fit one 8 kB page; that was a 500 "database error: row is too big". SQLite takes it."""
    header = ",".join(f"c{i}" for i in range(1400)).encode()
    line = ",".join(f"v{i:04d}" for i in range(1400)).encode()
    before = _virtual_file_count(store)
    if not env["CONNECTOR_OPS_DATABASE_URL"].startswith("postgresql"):
        assert len(rows(push(files, header + b"\n" + line + b"\n"))) == 1
        return
    exc = error("etl.push", {"platformFile": files.add_bytes(header + b"\n" + line + b"\n", "wide.csv").to_json()})
    assert exc.status == 400 and exc.body["message"].startswith(
        "a row is too big for PostgreSQL (row is too big: size 8432, maximum size 8160)")
    assert _virtual_file_count(store) == before
