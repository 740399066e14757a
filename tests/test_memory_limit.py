"""A container's memory limit, made by the kernel (a v1 or v2 memory cgroup, :mod:`tests.cgroups`): the actions
that read a whole SQLite file run through the CLI in 96 MiB, where the kernel's OOM killer ended them when each
connection kept 64 MiB of pages; the page cache follows the limit; a Pull to Parquet cuts its row groups by
size as well as by rows.

The file is pushed outside the cgroup, once per module; each action then runs as its own process inside one,
as a step of a pod does. A process the OOM killer ends exits by ``SIGKILL``, and the cgroup counts it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from connector_ops.environment import resources_for
from tests.cgroups import run_limited
from tests.sample_rows import write_sample_csv, write_wide_csv

BIN = Path(sys.executable).parent
#: the container: below the 64 MiB of pages one connection cached before, plus the CLI's own ≈ 60 MiB
LIMIT = 96 << 20
#: the file: more table pages than the 64 MiB a connection cached (70,000 rows of ≈ 1 KiB)
ROWS, WIDTH = 70_000, 1024


def _cli(environ: dict[str, str], *argv: str, limit: int | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """``connector-ops argv`` (inside a fresh memory cgroup of ``limit`` bytes) and the OOM kills counted there."""
    command = [str(BIN / "connector-ops"), *argv]
    if limit is None:
        return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=300), 0
    return run_limited(command, limit, env=environ, capture_output=True, text=True, timeout=300)


def _invoke(environ: dict[str, str], action: str, payload: dict[str, Any], limit: int | None = None) -> Any:
    result, kills = _cli(environ, "invoke", "--no-progress", action, json.dumps(payload), limit=limit)
    assert (result.returncode, kills) == (0, 0), f"{action}: exit {result.returncode}, {kills} OOM kill(s) " \
                                                 f"in {limit} bytes: {result.stderr[-2000:]}"
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def wide_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str]:
    """``(environment, virtual file id)``: ``ROWS`` rows of 8 columns pushed into a SQLite store."""
    folder = tmp_path_factory.mktemp("memory")
    data = write_wide_csv(folder / "wide.csv", ROWS, WIDTH)
    environ = {**os.environ, "CONNECTOR_OPS_HOME": str(folder / "home"),
               "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{folder / 'store.db'}"}
    added, _ = _cli(environ, "files", "add", str(data))
    pushed = _invoke(environ, "etl.push", {"platformFile": json.loads(added.stdout)})
    return environ, pushed["virtualFileId"]


@pytest.mark.parametrize("action", ["validate", "join", "pull"])
def test_a_whole_file_is_read_within_a_small_containers_memory(wide_file, action):
    """Validate, a Join of the file with itself and a Pull to CSV each read every page of a 75 MiB table:
    in 96 MiB each was OOM-killed while a connection cached 64 MiB of it; each completes now."""
    environ, vf = wide_file
    payload = {
        "validate": ("etl.validate", {"content": vf, "schema": {"id": {"type": "integer"},
                                                                  "a": {"type": "string", "minLength": 100}}}),
        "join": ("etl.join", {"join": {"left": {"virtualFileId": vf, "customId": "l", "key": "id"},
                                       "right": {"virtualFileId": vf, "customId": "r", "key": "id"}}}),
        "pull": ("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "wide.csv"}),
    }[action]
    output = _invoke(environ, *payload, limit=LIMIT)
    if action == "pull":
        assert output["platformFile"]["size"] > ROWS * WIDTH
    else:
        kept = output["validated"] if action == "validate" else output["virtualFileId"]
        key = "id" if action == "validate" else "id_l"
        found = _invoke(environ, "etl.query", {"virtualFileId": kept, "query": {key: str(ROWS - 1)}})
        assert len(found["result"]) == 1


@pytest.mark.parametrize(("limit", "cached"), [(192 << 20, 12 << 10), (2 << 30, 64 << 10)])
def test_a_connections_page_cache_is_a_sixteenth_of_the_limit_at_most(tmp_path, limit, cached):
    """A connection of the store, opened in a container: 1/16 of its limit, at most the 64 MiB it takes
    without a limit."""
    probe = ("import sys; from connector_ops.resources.virtual_files.store import VirtualFileStore; "
             "store = VirtualFileStore(database_url=sys.argv[1]); "
             "conn = store.sql.engine.connect(); "
             "print(conn.exec_driver_sql('PRAGMA cache_size').scalar())")
    result, _ = run_limited([sys.executable, "-c", probe, f"sqlite:///{tmp_path / 'c.db'}"], limit,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout) == -cached


def test_a_parquet_pull_cuts_row_groups_of_wide_rows_by_size(wide_file):
    """70,000 rows of 1 KiB are fewer than a row group's 131,072 rows, and were one group of 70 MiB of strings
    (held whole, with the writer's encoded pages beside it); a group ends at 16 MiB of Arrow data now. Every
    row comes back, in order."""
    from connector_ops.etl.pull_parquet import GROUP_BYTES

    environ, vf = wide_file
    pulled = _invoke(environ, "etl.pull", {"virtualFileId": vf, "exportType": "parquet",
                                           "exportName": "wide.parquet"})
    path = resources_for(environ=environ)["platform_files"].data_path(pulled["platformFile"]["id"])
    metadata = pq.ParquetFile(path).metadata
    sizes = [metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)]
    assert metadata.num_rows == ROWS
    assert len(sizes) >= 4
    assert max(sizes) <= GROUP_BYTES * 1.5  # a page of rows over at most
    ids = pq.read_table(path, columns=["id"]).column("id").to_pylist()
    assert ids == [str(i) for i in range(ROWS)]


#: the benchmarks' sample file (8 short columns, 86 MB), in rows
SAMPLE_ROWS = 1_000_000


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict[str, Any]]:
    """``(environment, platform file)``: the sample file stored (not pushed) in an empty SQLite store; the
    processes started choose Arrow's pool themselves (``ARROW_DEFAULT_MEMORY_POOL`` unset)."""
    folder = tmp_path_factory.mktemp("sample")
    data = write_sample_csv(folder / "sample.csv", SAMPLE_ROWS)
    environ = {**os.environ, "CONNECTOR_OPS_HOME": str(folder / "home"),
               "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{folder / 'store.db'}"}
    environ.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    added, _ = _cli(environ, "files", "add", str(data))
    return environ, json.loads(added.stdout)


def test_a_push_runs_within_a_small_containers_memory(sample_store):
    """The SQLite loader process of a Push (Arrow's CSV parser, ADBC's ingest) kept much of what mimalloc,
    Arrow's default pool, had freed: a Push of 1M rows was OOM-killed in 128 MiB, and in 136 MiB in some runs.
    In a container Arrow's pool is jemalloc (``arrow_pool_for_limit``): it completes in 120 MiB."""
    environ, platform_file = sample_store
    pushed = _invoke(environ, "etl.push", {"platformFile": platform_file}, limit=128 << 20)
    found = _invoke(environ, "etl.query", {"virtualFileId": pushed["virtualFileId"],
                                           "query": {"id": str(SAMPLE_ROWS - 1)}})
    assert len(found["result"]) == 1


def test_a_parquet_pull_runs_within_a_small_containers_memory(sample_store):
    """Arrow's Parquet writer allocates from the pool Arrow chose as pyarrow was imported: with mimalloc a Pull
    to Parquet of 1M rows was OOM-killed in 112 MiB and needed 128 MiB; with jemalloc it completes in 96 MiB."""
    environ, platform_file = sample_store
    pushed = _invoke(environ, "etl.push", {"platformFile": platform_file})
    pulled = _invoke(environ, "etl.pull", {"virtualFileId": pushed["virtualFileId"], "exportType": "parquet",
                                           "exportName": "sample.parquet"}, limit=112 << 20)
    path = resources_for(environ=environ)["platform_files"].data_path(pulled["platformFile"]["id"])
    assert pq.ParquetFile(path).metadata.num_rows == SAMPLE_ROWS


@pytest.mark.parametrize(("limit", "chosen", "pool"), [(256 << 20, None, "jemalloc"), (None, None, "mimalloc"),
                                                       (256 << 20, "system", "system")])
def test_arrows_pool_in_a_container_is_jemalloc_unless_one_was_chosen(tmp_path, limit, chosen, pool):
    """A store made in a container chooses Arrow's pool before pyarrow is imported (``arrow_pool_for_limit``),
    for the process and the SQLite loader it starts: jemalloc under a memory limit, Arrow's default without
    one, and always the pool ``ARROW_DEFAULT_MEMORY_POOL`` names."""
    probe = ("import os, sys; from connector_ops.resources.virtual_files.store import VirtualFileStore; "
             "VirtualFileStore(database_url=sys.argv[1]); assert 'pyarrow' not in sys.modules; "
             "import pyarrow as pa; print(pa.default_memory_pool().backend_name, "
             "os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))")
    environ = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if chosen:
        environ["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    argv = [sys.executable, "-c", probe, f"sqlite:///{tmp_path / 'p.db'}"]
    options: dict[str, Any] = {"env": environ, "capture_output": True, "text": True, "timeout": 120}
    result = subprocess.run(argv, **options) if limit is None else run_limited(argv, limit, **options)[0]
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [pool, "None" if limit is None else pool]
