"""The instance of DAGSTER_HOME as the command line opens it (:mod:`connector_ops.pipelines.instance`).

Two cron jobs starting together on a new home both created its SQLite storage: one failed with ``Version table
'alembic_version' has more than one head present``, and every later command on that home failed the same way
(upstream dagster-io/dagster#27390). A relative or missing home exited 1 with Dagster's invariant error."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector_ops.kernel.errors import ConfigurationError
from connector_ops.pipelines.instance import SQLITE_STORAGE, home_instance, storage_unreachable

ROOT = Path(__file__).resolve().parents[1]

#: each process says when it has imported (its slow part), then opens the instance and lists runs when told to
OPEN_AT = """
import sys
from connector_ops.pipelines.instance import home_instance
print("ready", flush=True)
sys.stdin.readline()
home_instance().get_runs(limit=1)
"""


def open_together(home: Path, processes: int) -> list[subprocess.CompletedProcess[str]]:
    """``processes`` first opens of ``home`` released at the same moment, once every process has imported
    Dagster (a barrier: a fixed 8 s start time waited 24 s a test on an idle machine, and on a loaded one
    let the processes that were still importing open the home one after another)."""
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    running = [subprocess.Popen([sys.executable, "-c", OPEN_AT], env=env, text=True, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(processes)]
    for process in running:  # each one's first line, or its end (a failed import) with nothing read
        process.stdout.readline()
    for process in running:
        with contextlib.suppress(BrokenPipeError):
            process.stdin.write("go\n")
            process.stdin.flush()
    done = []
    for process in running:
        out, err = process.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return done


def test_six_first_opens_of_a_new_home_at_once_all_succeed_and_leave_it_whole(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for attempt in range(3):  # the race without the lock: about one new home in two
        home = tmp_path / f"home{attempt}"
        home.mkdir()
        (home / "dagster.yaml").touch()
        results = open_together(home, 6)
        assert [r.returncode for r in results] == [0] * 6, [r.stderr[-600:] for r in results if r.returncode]
        for name in SQLITE_STORAGE:  # one Alembic revision each: "more than one head" otherwise, for ever
            with sqlite3.connect(home / name) as db:
                assert db.execute("SELECT count(*) FROM alembic_version").fetchone()[0] == 1, name
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        assert home_instance().get_runs(limit=1) == []  # and the home serves the next command


@pytest.mark.parametrize("home, problem", [
    ("relative/home", "must be an absolute path, got 'relative/home'"),
    ("/no/such/dagster-home", "/no/such/dagster-home is not a folder"),
])
def test_a_home_that_is_no_folder_is_a_configuration_error_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch, home: str, problem: str) -> None:
    monkeypatch.setenv("DAGSTER_HOME", home)
    with pytest.raises(ConfigurationError, match=r"^DAGSTER_HOME: ") as caught:
        home_instance()
    assert problem in str(caught.value)


def test_gc_on_a_relative_home_exits_2(env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture) -> None:
    from connector_ops.cli import main

    monkeypatch.setenv("DAGSTER_HOME", "relative/home")
    assert main(["gc", "--dry-run"]) == 2
    assert "configuration error: DAGSTER_HOME: must be an absolute path" in capsys.readouterr().err


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound, never listening (no other process can take it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_a_postgresql_storage_that_cannot_be_reached_is_one_line_naming_dagster_yaml(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, refusing_port: int) -> None:
    """deploy/dagster.yaml's storage on a server that refuses: ``gc`` said only ``failed (500):
    DagsterPostgresException: too many retries for DB connection``, naming neither what failed nor where."""
    from connector_ops.cli import main

    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("DAGSTER_PG_URL", f"postgresql+psycopg2://dagster:Pw0rd-9x@127.0.0.1:{refusing_port}/dagster")
    monkeypatch.setenv("DAGSTER_MAX_CONCURRENT_RUNS", "1")
    assert main(["gc", "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert f"cannot open Dagster's instance storage, which {home / 'dagster.yaml'} configures: connection to " \
           f"server at \"127.0.0.1\", port {refusing_port} failed: Connection refused" in err, err
    assert "DAGSTER_PG_URL" in err and "Pw0rd-9x" not in err


def test_the_drivers_words_keep_no_password_of_a_url_dagster_yaml_reads(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A password with an unencoded ``@``: the driver tried its rest as the host, and said so. (Tried for real,
    the name would go to a DNS resolver: the suite sends nothing past 127.0.0.0/8, so the driver's words are
    made here as libpq writes them.)"""
    import sqlalchemy as sa

    (tmp_path / "dagster.yaml").write_text("storage:\n  postgres:\n    postgres_url:\n      env: MY_PG\n")
    monkeypatch.setenv("MY_PG", "postgresql+psycopg2://dagster:S3cr3t@HALF-two@db.internal:5432/dagster")
    refused = sa.exc.OperationalError(None, None, Exception(
        'could not translate host name "HALF-two@db.internal" to address: Name or service not known'))
    try:
        raise RuntimeError("too many retries for DB connection") from refused
    except RuntimeError as exc:
        failed = storage_unreachable(exc, tmp_path)
    assert failed is not None
    assert 'could not translate host name "***@db.internal" to address' in str(failed), str(failed)
    assert storage_unreachable(RuntimeError("not a database's"), tmp_path) is None
