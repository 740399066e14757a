"""Several processes writing one virtual-file database at once: no "database is locked", nothing lost."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa

from connector_ops import invoke
from connector_ops.etl import map_action

WORKER = """
import json, sys
from connector_ops import invoke
vf, worker = sys.argv[1], int(sys.argv[2])
for i in range(25):
    invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"worker": str(worker), "i": str(i)}}]})
    invoke("etl.iterate", {"content": vf, "maxBatchSize": 7})
    invoke("etl.query", {"virtualFileId": vf, "query": {"worker": str(worker)}})
print(json.dumps("done"))
"""


@pytest.mark.parametrize("workers", [3])
def test_parallel_processes_append_iterate_and_query(files, env, workers):
    pf = files.add_bytes(b"worker,i\n", "start.csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, vf, str(w)], env={**os.environ, **env},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(workers)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert json.loads(out) == "done"
    rows = invoke("etl.query", {"virtualFileId": vf, "query": {}})["result"]
    assert len(rows) == workers * 25
    for w in range(workers):
        mine = [int(r["i"]) for r in rows if r["worker"] == str(w)]
        assert mine == list(range(25))  # each worker's rows, in its order


STARTED, RELEASE = threading.Event(), threading.Event()


@map_action("test_rename_c1_when_released")
def _rename_when_released(row):
    STARTED.set()  # the Map's transaction holds the file's catalog row from its start
    RELEASE.wait(60)
    return {("x" if key == "c1" else key): value for key, value in row.items()}


def _lock_waiters(conn: sa.Connection) -> int:
    """Sessions of the test's database waiting for a lock, counted in a transaction of its own at each look:
    within one transaction PostgreSQL shows ``pg_stat_activity`` as it was at the transaction's first look. Polled
    in one transaction, a session that began to wait after that look was never seen: under load the Pull reached
    its lock after the first look, waited there on the Map (``pg_locks`` showed it) and the test failed at 30 s."""
    with conn.begin():
        return conn.exec_driver_sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                    "AND datname = current_database()").scalar_one()


@pytest.mark.parametrize("second", ["pull", "append", "map", "iterate"])
def test_an_action_that_waited_for_a_map_in_place_reads_its_new_columns(postgres_resources, second):
    """On PostgreSQL an action waits for a Map in place that holds the file's catalog row, then must see the
    Map's columns with its table: it read the new table under the old names (a header over renamed columns,
    an appended ``c1`` stored as ``x``, ``column … does not exist`` after a drop)."""
    resources, store = postgres_resources, postgres_resources["virtual_files"]
    data = b"c0,c1\n" + b"".join(b"%d,v%d\n" % (i, i) for i in range(50))
    vf = invoke("etl.push", {"platformFile": resources["platform_files"].add_bytes(data, "f.csv").to_json()},
                resources)["virtualFileId"]
    STARTED.clear()
    RELEASE.clear()
    payload = {"virtualFileId": vf, "action": "test_rename_c1_when_released", "overwriteVirtualFile": True}
    actions = {
        "pull": lambda: resources["platform_files"].read_bytes(invoke("etl.pull", {
            "virtualFileId": vf, "exportType": "csv", "exportName": "p.csv"}, resources)["platformFile"]
        ).split(b"\r\n")[:2],
        "append": lambda: invoke("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {
            "c0": "new", "c1": "n"}}]}, resources),  # c1 is no column after the rename: a new one
        "map": lambda: invoke("etl.map", {"virtualFileId": vf, "action": "upper", "overwriteVirtualFile": True},
                              resources),
        "iterate": lambda: invoke("etl.iterate", {"content": vf, "maxBatchSize": 1}, resources)["content"],
    }
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        mapped = pool.submit(invoke, "etl.map", payload, resources)
        assert STARTED.wait(60)
        waiting = pool.submit(actions[second])
        try:
            with store.sql.engine.connect() as conn:  # the second action waits for the Map's lock, then the Map goes on
                deadline = time.monotonic() + 30
                while not _lock_waiters(conn):
                    assert time.monotonic() < deadline and not waiting.done(), waiting
                    time.sleep(0.05)
        finally:
            RELEASE.set()
        mapped.result(60)
        outcome = waiting.result(60)
    first = invoke("etl.query", {"virtualFileId": vf, "query": {"c0": "0"}}, resources)["result"]
    expected_first = {"c0": "0", "x": "V0"} if second == "map" else {"c0": "0", "x": "v0"}
    assert first == [expected_first]
    if second == "pull":
        assert outcome == [b"c0,x", b"0,v0"]
    elif second == "append":
        assert invoke("etl.query", {"virtualFileId": vf, "query": {"c0": "new"}}, resources)["result"] == [
            {"c0": "new", "c1": "n"}]
    elif second == "iterate":
        assert outcome == [{"c0": "0", "x": "v0"}]


def test_iterate_reads_beside_a_reader_and_its_cursor_gives_each_row_once_on_postgresql(postgres_resources):
    """Iterate locks the file as a reader and its cursor's row as a writer: it no longer waits for a Pull of
    the file (it took the file's writer lock, 1.6 s behind a 500k-row Pull), and two Iterates of one cursor
    still take turns, each row given once."""
    resources, store = postgres_resources, postgres_resources["virtual_files"]
    data = b"n\n" + b"".join(b"%d\n" % i for i in range(40))
    vf = invoke("etl.push", {"platformFile": resources["platform_files"].add_bytes(data, "f.csv").to_json()},
                resources)["virtualFileId"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool, store.sql.engine.connect() as reader:
        reader.exec_driver_sql("SELECT 1 FROM cop_virtual_file WHERE id = %(id)s FOR SHARE", {"id": vf})
        iterating = pool.submit(invoke, "etl.iterate", {"content": vf, "maxBatchSize": 1}, resources)
        try:  # a reader of the file holds its lock, as a Pull does
            done, _ = concurrent.futures.wait([iterating], timeout=10)
        finally:
            reader.rollback()
        assert done, "Iterate waited for a reader of the file"
    assert iterating.result() == {"content": [{"n": "0"}], "hasNext": True}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        pages = list(pool.map(lambda _: invoke("etl.iterate", {"content": vf, "maxBatchSize": 1}, resources),
                              range(39)))
    assert sorted(int(p["content"][0]["n"]) for p in pages) == list(range(1, 40))
    assert [p["hasNext"] for p in pages].count(False) == 1
