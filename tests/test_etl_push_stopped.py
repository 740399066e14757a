"""A Push stopped half way (a Ctrl-C; here the test's own signal, whose exception is neither
``KeyboardInterrupt`` nor an ``Exception``, like Dagster's) of a CSV, NDJSON, Parquet, gzip-compressed or zipped CSV
file of seconds' work, the signal sent as a quarter of the file has been read: the exception goes on as
itself, no virtual file and no row table are left (on SQLite the load runs in the loader process, which
rolls it back), and the store takes the next Push."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from connector_ops import invoke
from connector_ops.environment import resources_for
from connector_ops.kernel.progress import reporting_to
from tests.signals import Stop, signal_at
from tests.store_activity import orphans
from tests.test_etl_push_pull import push, rows

ROWS = 1_500_000  # 2.7-7 s of Push here, whatever the database and format


@pytest.fixture(scope="module")
def large_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("large")
    table = pa.table({"a": pa.array(["x" * 60] * ROWS), "b": pa.array([str(i) for i in range(ROWS)])})
    pacsv.write_csv(table, folder / "large.csv")
    with (folder / "large.ndjson").open("w") as ndjson:
        ndjson.writelines(f'{{"a": "{"x" * 60}", "b": "{i}"}}\n' for i in range(ROWS))
    pq.write_table(table, folder / "large.parquet", row_group_size=65_536)
    (folder / "large.csv.gz").write_bytes(gzip.compress((folder / "large.csv").read_bytes(), compresslevel=1))
    with zipfile.ZipFile(folder / "large.zip", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.write(folder / "large.csv", "large.csv")
    return {p.suffix[1:]: p for p in folder.iterdir()}


@pytest.mark.parametrize("kind", ["csv", "ndjson", "parquet", "gz", "zip"])
def test_a_push_stopped_half_way_leaves_nothing_and_the_next_push_works(env, files, large_files, signalled_after,
                                                                         kind):
    store = resources_for(environ=env)["virtual_files"]
    before = store.inventory()
    pf = files.add_file(large_files[kind]).to_json()
    quarter = (ROWS if kind == "parquet" else pf["size"]) // 4  # Parquet reports rows, text bytes
    with pytest.raises(Stop), reporting_to(signal_at(quarter)):
        invoke("etl.push", {"platformFile": pf})
    assert store.inventory() == before
    assert orphans(env["CONNECTOR_OPS_DATABASE_URL"]) == set()
    assert rows(push(files, b"a,b\n1,2\n")) == [{"a": "1", "b": "2"}]
