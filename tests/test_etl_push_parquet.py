"""Push of a Parquet file: the rows ``push_frame`` gives the same table as a stream, in row groups and
batches, from a file stored here or fetched from another server over HTTP; ``schema`` as for JSON; the
CSV parameters refused; a damaged file or one named as text a 400 saying so, leaving nothing."""

from __future__ import annotations

import datetime as dt
import decimal
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector_ops import ConnectorError, invoke, pull_frame, push_frame
from connector_ops.environment import resources_for
from connector_ops.kernel.notices import warnings_to
from tests.servers import another_file_server
from tests.test_etl_push_pull import rows
from tests.test_frames import load_path  # noqa: F401 (a fixture: both SQLite load paths)

TYPED = pa.table({
    "n": pa.array([1, None, -3], pa.int64()),
    "x": [0.5, 1.0, None],
    "t": pa.array([dt.datetime(2024, 1, 1), dt.datetime(2024, 7, 1, 3, 4, 5, 500_000), None], pa.timestamp("us")),
    "d": [dt.date(2024, 1, 2), None, dt.date(1969, 12, 31)],
    "s": ["a,b", None, "line\nbreak é"],
    "ok": [True, False, None],
    "price": pa.array([decimal.Decimal("1.10"), decimal.Decimal("2.00"), None], pa.decimal128(5, 2)),
    "tags": [["x", "y"], [], None],
})


def parquet(table: pa.Table, **options) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return sink.getvalue()


def push(files, data: bytes, name: str = "data.parquet", content_type: str = "application/octet-stream",
         **parameters) -> str:
    pf = files.add_bytes(data, name, content_type).to_json()
    return invoke("etl.push", {"platformFile": pf, "parameters": parameters})["virtualFileId"]


@pytest.mark.parametrize(("name", "content_type"), [("data.parquet", "application/octet-stream"),
                                                    ("export", "application/vnd.apache.parquet")])
def test_a_parquet_file_pushes_as_its_table(files, env, name, content_type):
    """Its float and timestamp columns take one form over the whole file, as a table's (or a frame's) do."""
    assert rows(push(files, parquet(TYPED), name, content_type)) == rows(push_frame(TYPED)) == [
        {"n": "1", "x": "0.5", "t": "2024-01-01 00:00:00.000", "d": "2024-01-02", "s": "a,b", "ok": "true",
         "price": "1.10", "tags": '["x","y"]'},
        {"x": "1.0", "t": "2024-07-01 03:04:05.500", "ok": "false", "price": "2.00", "tags": "[]"},
        {"n": "-3", "d": "1969-12-31", "s": "line\nbreak é"}]


def test_a_column_has_one_form_whichever_batch_a_value_is_in(files, env):
    """Whole floats were written as integers batch by batch: 262,144 values "1", then "1.0" after the first
    2.5, in one column (Query ``{"x": "1"}`` found some of them). Over a whole file, frame or table: one form;
    in a stream, whose later batches are unseen, each float as Python prints it."""
    late = pa.table({"x": [float(i % 5) for i in range(150_000)] + [2.5], "t": [0] * 150_001})
    late = late.set_column(1, "t", pa.array([i * 86_400_000_000 for i in range(150_000)] + [1], pa.timestamp("us")))
    gaps = pa.table({"n": [None if i % 7 == 0 else float(i) for i in range(150_000)]})
    for vf in (push(files, parquet(late, row_group_size=40_000)), push_frame(late), push_frame(late.to_pandas())):
        back = pull_frame(vf, kind="pyarrow")
        assert back["x"][1].as_py() == "1.0" and back["x"][150_000].as_py() == "2.5"
        assert back["t"][1].as_py() == "1970-01-02 00:00:00.000000" and back["t"][150_000].as_py().endswith(".000001")
    for vf in (push(files, parquet(gaps, row_group_size=40_000)), push_frame(gaps), push_frame(gaps.to_pandas())):
        back = pull_frame(vf, kind="pyarrow")["n"].to_pylist()
        assert back[:3] == [None, "1", "2"] and back[149_999] == "149999"
    stream = pa.RecordBatchReader.from_batches(late.schema, late.to_batches(max_chunksize=100_000))
    texts = pull_frame(push_frame(stream), kind="pyarrow")["x"].to_pylist()
    assert texts[:2] == ["0.0", "1.0"] and texts[-1] == "2.5" and "1" not in texts


def test_row_groups_and_batches_keep_every_row_in_order(files, env, load_path):  # noqa: F811
    table = pa.table({"i": pa.array(range(150_000)), "s": [f"r{i}" for i in range(150_000)]})
    vf = push(files, parquet(table, row_group_size=40_000))
    back = pull_frame(vf, kind="pyarrow")
    assert back["i"].to_pylist() == [str(i) for i in range(150_000)] and back["s"][149_999].as_py() == "r149999"


def test_a_parquet_file_from_another_server_is_spooled_and_pushed(files, env, tmp_path, monkeypatch):
    """Its index is at its end: a stream over HTTP is copied to a temporary file first."""
    with another_file_server(tmp_path / "remote", monkeypatch) as remote:
        pf = remote.add_bytes(parquet(TYPED), "remote.parquet", "application/vnd.apache.parquet").to_json()
        vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
    assert rows(vf) == rows(push(files, parquet(TYPED)))


def test_schema_puts_its_columns_first_as_for_json(files, env):
    vf = push(files, parquet(TYPED.select(["n", "s"])), schema=["s", "missing"])
    assert pull_frame(vf, kind="pyarrow").column_names == ["s", "missing", "n"]
    assert rows(vf)[0] == {"s": "a,b", "n": "1"}


def test_an_empty_file_pushes_its_columns_without_a_warning(files, env):
    """A Parquet Pull of a file without rows pushes back as its columns. It was stored so, but with the
    warning meant for a stream read twice ("was it read before?"), which a file read once cannot be."""
    vf = push(files, b"b,a\r\n", "header.csv", "text/csv")
    pulled = invoke("etl.pull", {"virtualFileId": vf, "exportType": "parquet", "exportName": "empty.parquet"})
    told: list[str] = []
    with warnings_to(told.append):
        again = invoke("etl.push", {"platformFile": pulled["platformFile"]})["virtualFileId"]
    assert pull_frame(again, kind="pyarrow").column_names == ["b", "a"] and rows(again) == []
    assert told == []


@pytest.mark.parametrize(("parameters", "field"), [({"csvDelimiter": ";"}, "csvDelimiter"),
                                                   ({"linesToIgnore": 1}, "linesToIgnore"),
                                                   ({"encoding": "latin-1"}, "encoding")])
def test_the_csv_parameters_are_refused(files, env, parameters, field):
    with pytest.raises(ConnectorError) as info:
        push(files, parquet(TYPED), **parameters)
    assert info.value.summary() == (f"etl.push failed (400): parameters.{field}: does not apply to a Parquet "
                                    "file (it has no lines or text)")


@pytest.mark.parametrize(("data", "name", "says"), [
    (b"a,b\n1,2\n", "data.parquet", "platformFile: data.parquet is not a Parquet file that can be read: "),
    (parquet(TYPED)[:-20], "data.parquet", "platformFile: data.parquet is not a Parquet file that can be read: "),
    (parquet(TYPED), "data.csv", "platformFile: the file is Parquet (it starts with PAR1), not text: name it "
                                 ".parquet or give contentType application/vnd.apache.parquet"),
], ids=["text", "truncated", "named-as-csv"])
def test_a_file_that_cannot_be_read_as_parquet_is_a_400_saying_why(files, env, data, name, says):
    store = resources_for(environ=env)["virtual_files"]
    before = store.inventory()
    with pytest.raises(ConnectorError) as info:
        push(files, data, name, "text/csv" if name.endswith(".csv") else "application/octet-stream")
    assert info.value.status == 400 and info.value.summary().startswith(f"etl.push failed (400): {says}")
    assert store.inventory() == before


def test_a_local_parquet_file_added_is_typed_as_parquet(files, env, tmp_path):
    """``connector-ops files add`` / ``${file:…}``: the type the file server then sends, and Push reads."""
    path = tmp_path / "typed.parquet"
    path.write_bytes(parquet(TYPED))
    pf = files.add_file(path).to_json()
    assert pf["contentType"] == "application/vnd.apache.parquet"
    assert rows(invoke("etl.push", {"platformFile": pf})["virtualFileId"]) == rows(push(files, parquet(TYPED)))


#: one Parquet Push in a process of its own, which prints the peak of Arrow's memory pool (MiB) through it
PEAK_OF_ONE_PUSH = """
import sys
import pyarrow as pa
from connector_ops import invoke
from connector_ops.environment import resources_for
resources = resources_for()
pf = resources["platform_files"].add_file(sys.argv[1]).to_json()
invoke("etl.push", {"platformFile": pf}, resources)
print(pa.default_memory_pool().max_memory() / 2**20)
"""


def test_a_file_of_one_large_row_group_is_read_in_small_batches(env, tmp_path):
    """Arrow's pool peaked at 30 MiB pushing these 300k rows: 65,536-row batches, whose size pyarrow's column
    readers hold several times over, and the first 16 MiB of them kept to measure a size the file's footer
    gives. Now 17.5 MiB (16,384-row batches, the footer's size)."""
    import os
    import subprocess
    import sys

    n = 300_000
    path = tmp_path / "one-group.parquet"
    pq.write_table(pa.table({"i": pa.array(range(n)), "a": [f"row-{i:08d}-left" for i in range(n)],
                             "b": [f"{i * 7919 % 1000003:012d}" for i in range(n)], "x": [i / 7 for i in range(n)]}),
                   path, row_group_size=n)
    done = subprocess.run([sys.executable, "-c", PEAK_OF_ONE_PUSH, str(path)], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120, check=True)
    assert float(done.stdout.split()[-1]) < 24
