"""Interrupting a long action where users do: Ctrl-C at the command line, and Jupyter's Stop in a real
kernel (Dagster's Terminate is the same SIGINT in its run worker), on both databases. The action stops
within seconds instead of running to its end, leaves no file behind, and the session goes on.

The long action is a Join that fans out: every row of both files has the same key, so the output has
``FANOUT²`` rows, minutes of work on either database. The signal is sent once the Join's statement runs:
PostgreSQL lists it as active; SQLite's log grows past what the Pushes wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from connector_ops import invoke
from connector_ops.resources.virtual_files.engines import get_engine

FANOUT = 10_000
#: how long an interrupted action may take to stop; the uninterrupted Join takes far longer
PROMPT = 10.0
SCRIPT = str(Path(sys.executable).parent / "connector-ops")


def fanout_files(files: Any) -> list[str]:
    text = "k,v\n" + "".join(f"k,{i}\n" for i in range(FANOUT))
    return [invoke("etl.push", {"platformFile": files.add_bytes(text.encode(), name).to_json()})["virtualFileId"]
            for name in ("left.csv", "right.csv")]


def join_of(left: str, right: str) -> dict[str, Any]:
    return {"join": {"left": {"virtualFileId": left, "customId": "L", "key": "k"},
                     "right": {"virtualFileId": right, "customId": "R", "key": "k"}}}


def stored(url: str) -> tuple[set[str], set[str]]:
    """The virtual files in the catalog, and the row tables in the database."""
    engine = get_engine(url)
    with engine.connect() as conn:
        ids = set(conn.execute(sa.text("SELECT id FROM cop_virtual_file")).scalars())
    return ids, {name for name in sa.inspect(engine).get_table_names() if name.startswith("vf_")}


def joining(url: str) -> Callable[[], bool]:
    """Whether another process's Join statement is running on the store at ``url``."""
    if url.startswith("sqlite"):
        log = Path(url.removeprefix("sqlite:///") + "-wal")
        return lambda: log.exists() and log.stat().st_size > (32 << 20)
    engine = get_engine(url)

    def active() -> bool:
        with engine.connect() as conn:
            return bool(conn.execute(sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() "
                "AND datname = current_database() AND query LIKE 'CREATE TABLE%'")).scalar_one())
    return active


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {seconds} s"
        time.sleep(0.05)


def assert_nothing_left(url: str, before: tuple[set[str], set[str]]) -> None:
    """The Join's files are gone with its transaction, and its statement with them (PostgreSQL's server
    stops it: psycopg cancels it)."""
    wait_for(lambda: not joining(url)() if url.startswith("postgresql") else True, PROMPT, "the server's stop")
    assert stored(url) == before


def test_ctrl_c_stops_a_long_join_at_the_command_line(env, files, database_url, tmp_path):
    left, right = fanout_files(files)
    before = stored(database_url)
    (tmp_path / "join.json").write_text(json.dumps(join_of(left, right)))
    child = subprocess.Popen([SCRIPT, "invoke", "etl.join", f"@{tmp_path / 'join.json'}"], env={**os.environ, **env},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(joining(database_url), 60, "the Join's statement")
        child.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = child.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        child.kill()
    assert took < PROMPT, f"stopped {took:.1f} s after Ctrl-C"
    assert child.returncode == 1 and "Aborted!" in err and out == "", (child.returncode, out, err)
    assert "Traceback" not in err
    assert_nothing_left(database_url, before)
    assert invoke("etl.query", {"virtualFileId": left, "query": {"v": "7"}})["result"] == [{"k": "k", "v": "7"}]


def test_jupyters_stop_stops_a_long_join_and_the_kernel_goes_on(env, files, database_url):
    from jupyter_client.manager import start_new_kernel

    left, right = fanout_files(files)
    before = stored(database_url)
    manager, client = start_new_kernel(kernel_name="python3", env={**os.environ, **env}, startup_timeout=60)
    try:
        assert client.execute_interactive("%load_ext connector_ops", timeout=60)["content"]["status"] == "ok"
        started = client.execute(f"%etl join {json.dumps(join_of(left, right))}")
        wait_for(joining(database_url), 60, "the Join's statement")
        manager.interrupt_kernel()
        sent = time.monotonic()
        reply = client.get_shell_msg(timeout=60)
        took = time.monotonic() - sent
        assert reply["parent_header"]["msg_id"] == started
        assert took < PROMPT, f"stopped {took:.1f} s after Stop"
        assert (reply["content"]["status"], reply["content"]["ename"]) == ("error", "KeyboardInterrupt")
        assert_nothing_left(database_url, before)
        after = client.execute_interactive(
            f"%etl query -o found {json.dumps({'virtualFileId': left, 'query': {'v': '7'}})}\n"
            "assert found == {'result': [{'k': 'k', 'v': '7'}]}, found", timeout=60)
        assert after["content"]["status"] == "ok", after["content"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
