"""Pull to Parquet: every column a string column, a missing value a null, rows in order over many row groups;
``schema`` selects and orders columns; the text parameters refused; a Parquet file pulled pushes back as the
same rows."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.environment import resources_for
from connector_ops.etl import pull_parquet
from connector_ops.pipelines.dsl import compile_pipeline, load_pipeline
from connector_ops.pipelines.runner import run_compiled
from tests.pipeline_files import write
from tests.test_etl_push_pull import push, rows

CUSTOMERS = Path(__file__).resolve().parents[1] / "pipelines" / "data" / "customers.csv"


def pull(files, vf: str, **parameters) -> pa.Table:
    out = invoke("etl.pull", {"virtualFileId": vf, "exportType": "parquet", "exportName": "out.parquet",
                              "parameters": parameters})
    assert out["platformFile"]["contentType"] == "application/vnd.apache.parquet"
    return pq.read_table(io.BytesIO(files.read_bytes(out["platformFile"])))


def test_strings_and_missing_values_exact_and_pushed_back_the_same(files, env):
    vf = push(files, b'code,name,note\n007,Bond,"a,b\nc"\n,Q,\n')
    invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"extra": "é"}}]})
    table = pull(files, vf)
    assert table.schema == pa.schema([(n, pa.string()) for n in ("code", "name", "note", "extra")])
    assert table.to_pylist() == [{"code": "007", "name": "Bond", "note": "a,b\nc", "extra": None},
                                 {"code": "", "name": "Q", "note": "", "extra": None},
                                 {"code": None, "name": None, "note": None, "extra": "é"}]
    sink = io.BytesIO()
    pq.write_table(table, sink)
    assert rows(push(files, sink.getvalue(), "back.parquet", "application/octet-stream")) == rows(vf)


def test_many_row_groups_keep_every_row_in_order(files, env, monkeypatch):
    monkeypatch.setattr(pull_parquet, "GROUP_ROWS", 1000)
    vf = push(files, b"i\n" + b"".join(b"%d\n" % i for i in range(25_000)))
    out = invoke("etl.pull", {"virtualFileId": vf, "exportType": "parquet", "exportName": "out.parquet"})
    parquet = pq.ParquetFile(io.BytesIO(files.read_bytes(out["platformFile"])))
    assert parquet.metadata.num_row_groups >= 20
    assert parquet.read()["i"].to_pylist() == [str(i) for i in range(25_000)]


def test_schema_selects_and_orders_columns(files, env):
    vf = push(files, b"a,b,c\n1,2,3\n")
    assert pull(files, vf, schema=["c", "a"]).to_pylist() == [{"c": "3", "a": "1"}]
    with pytest.raises(ConnectorError) as info:
        pull(files, vf, schema=["zz"])
    assert info.value.status == 400
    assert "parameters.schema: unknown column 'zz'; the virtual file has" in info.value.summary()


@pytest.mark.parametrize(("parameters", "field"), [({"csvDelimiter": ";"}, "csvDelimiter"),
                                                   ({"addFirstRowAsSchema": False}, "addFirstRowAsSchema"),
                                                   ({"encoding": "latin-1"}, "encoding"),
                                                   ({"escapeFormulas": True}, "escapeFormulas")])
def test_the_text_parameters_are_refused_and_no_file_is_left(files, env, parameters, field):
    vf = push(files, b"a\n1\n")
    before = sorted(p.name for p in Path(files.files_dir).iterdir())
    with pytest.raises(ConnectorError) as info:
        pull(files, vf, **parameters)
    assert info.value.summary() == (f"etl.pull failed (400): parameters.{field}: does not apply to a Parquet "
                                    "export (it has no text lines)")
    assert sorted(p.name for p in Path(files.files_dir).iterdir()) == before


def test_a_pipeline_pulls_parquet_and_pushes_it_back(files, env, tmp_path):
    """The same input model behind the Dagster ops: the YAML DSL takes the extension as the action does."""
    (tmp_path / "customers.csv").write_bytes(CUSTOMERS.read_bytes())
    compiled = compile_pipeline(load_pipeline(write(tmp_path, """
        name: parquet_round_trip
        steps:
          - id: load
            action: etl.push
            input: {platformFile: "${file:customers.csv}"}
          - id: out
            action: etl.pull
            input: {virtualFileId: "${load.virtualFileId}", exportType: parquet, exportName: customers.parquet}
          - id: back
            action: etl.push
            input: {platformFile: "${out.platformFile}"}
    """)))
    outcome = run_compiled(compiled, resources_for(environ=env))
    assert outcome.success, outcome.failure()
    assert outcome.steps["out"]["platformFile"]["name"] == "customers.parquet"
    assert rows(outcome.steps["back"]["virtualFileId"]) == rows(outcome.steps["load"]["virtualFileId"])


@pytest.mark.parametrize("export_type", ["csv", "json", "parquet"])
def test_a_column_named_twice_in_schema_is_a_400_and_writes_nothing(files, env, export_type):
    """Such an export had the column twice (a JSON object with a key twice, a Parquet file pyarrow cannot
    read by name), and Push refused it back."""
    vf = push(files, b"a,b\n1,2\n")
    before = files.inventory()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": f"out.{export_type}",
                            "parameters": {"schema": ["a", "b", "a"]}})
    assert (info.value.status, info.value.message) == (
        400, "parameters.schema: duplicate column name 'a'")
    assert files.inventory() == before


def test_a_pull_to_parquet_does_not_import_pandas(files, env):
    """pyarrow imports pandas on its first ``pyarrow.array`` over Python objects (to ask whether they are a
    pandas array): 400 modules and ≈ 37 MiB of a command-line Parquet Pull's 230 MiB peak on SQLite, when
    its rows were built into Arrow arrays from tuples. They reach Arrow as text now: JSON from SQLite, CSV
    from PostgreSQL's ``COPY`` (arrow_reads)."""
    vf = push(files, b"code,name\n007,Bond\n,Q\n")
    payload = json.dumps({"virtualFileId": vf, "exportType": "parquet", "exportName": "x.parquet"})
    code = ("import sys\nfrom connector_ops.cli import main\n"
            f"assert main(['invoke', 'etl.pull', {payload!r}]) == 0\n"
            "assert 'pyarrow.parquet' in sys.modules\n"
            "assert 'pandas' not in sys.modules, 'pandas imported'\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["platformFile"]["name"] == "x.parquet"
