"""The store's layout stamp (resources/virtual_files/layout.py): every process opening a database stamps it
if it has no stamp yet, and a process whose code knows only older layouts refuses a store laid out by a
newer connector-ops before reading or writing anything. Each case runs the command line in fresh
processes, as the processes of a deployment open a store, on a database of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from connector_ops.kernel.version import package_version
from connector_ops.resources.virtual_files.layout import LAYOUT_VERSION, RECHECK_SECONDS

SCRIPT = str(Path(sys.executable).parent / "connector-ops")
PASSWORD = "layout-s3cret"


@pytest.fixture
def store_url(own_database_url: str) -> str:
    """A store of the test's own; on PostgreSQL with a password, which the test server (trusting local
    sessions) accepts, and which must never be shown."""
    if own_database_url.startswith("sqlite"):
        return own_database_url
    return make_url(own_database_url).set(password=PASSWORD).render_as_string(hide_password=False)


def cli(url: str, home: Path, *args: str) -> subprocess.Popen[str]:
    environ = {name: value for name, value in os.environ.items() if not name.startswith("CONNECTOR_OPS_")}
    environ.update(CONNECTOR_OPS_HOME=str(home), CONNECTOR_OPS_DATABASE_URL=url)
    return subprocess.Popen([SCRIPT, *args], env=environ, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(child: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = child.communicate(timeout=120)
    return child.returncode, out, err


def push(url: str, home: Path, text: str = "id,name\n1,ada\n2,bob\n") -> tuple[int, str, str]:
    source = home / "in.csv"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(text)
    code, descriptor, err = finished(cli(url, home, "files", "add", str(source)))
    assert code == 0, err
    return finished(cli(url, home, "invoke", "etl.push", json.dumps({"platformFile": json.loads(descriptor)})))


def query(url: str, home: Path, file_id: str) -> tuple[int, str, str]:
    return finished(cli(url, home, "invoke", "etl.query", json.dumps({"virtualFileId": file_id, "query": {}})))


def execute(url: str, sql: str) -> list[tuple]:
    """One statement on its own connection, committed; the rows it returns."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.exec_driver_sql(sql)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def stamps(url: str) -> list[tuple]:
    return execute(url, "SELECT id, version, written_by FROM cop_store_layout")


def test_a_new_store_is_stamped_with_this_layout(store_url: str, tmp_path: Path) -> None:
    code, _, err = push(store_url, tmp_path / "home")
    assert code == 0, err
    assert stamps(store_url) == [(1, LAYOUT_VERSION, package_version())]


def test_a_store_from_before_the_stamp_keeps_its_files_and_is_stamped(store_url: str, tmp_path: Path) -> None:
    """Stores written before the stamp existed have no ``cop_store_layout`` table: that is layout 1."""
    home = tmp_path / "home"
    code, out, err = push(store_url, home)
    assert code == 0, err
    execute(store_url, "DROP TABLE cop_store_layout")
    code, out, err = query(store_url, home, json.loads(out)["virtualFileId"])
    assert code == 0, err
    assert json.loads(out)["result"] == [{"id": "1", "name": "ada"}, {"id": "2", "name": "bob"}]
    assert stamps(store_url) == [(1, LAYOUT_VERSION, package_version())]


def test_a_store_of_a_newer_layout_is_refused_before_anything_is_written(store_url: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    code, out, err = push(store_url, home)
    assert code == 0, err
    file_id = json.loads(out)["virtualFileId"]
    execute(store_url, f"UPDATE cop_store_layout SET version = {LAYOUT_VERSION + 1}, written_by = '99.0.0'")

    code, out, err = push(store_url, home, "id\n3\n")
    assert code == 1, (out, err)
    message = json.loads(out)["message"]
    assert message.startswith("the virtual-file store at ")
    assert (f"has layout {LAYOUT_VERSION + 1}, written by connector-ops 99.0.0; this connector-ops "
            f"({package_version()}) knows layouts up to {LAYOUT_VERSION}. Upgrade connector-ops here") in message
    assert "etl.push failed (500)" in err
    assert PASSWORD not in out + err
    assert execute(store_url, "SELECT id FROM cop_virtual_file") == [(file_id,)]  # nothing of the second Push

    code, out, _ = query(store_url, home, file_id)
    assert code == 1 and "knows layouts up to" in json.loads(out)["message"]
    assert stamps(store_url) == [(1, LAYOUT_VERSION + 1, "99.0.0")]  # the newer code's stamp is left as it was


def test_processes_opening_a_new_store_together_stamp_it_once(store_url: str, tmp_path: Path) -> None:
    """A deployment's processes start together on an empty database: each creates the catalog and stamps
    it; those that lose the race find the winner's stamp and go on. (Pushes: gc opens only a store that
    exists.)"""
    inputs = []
    for n in range(4):
        source = tmp_path / f"home{n}" / "in.csv"
        source.parent.mkdir(parents=True)
        source.write_text("id\n1\n")
        code, descriptor, err = finished(cli(store_url, tmp_path / f"home{n}", "files", "add", str(source)))
        assert code == 0, err
        inputs.append(json.dumps({"platformFile": json.loads(descriptor)}))
    children = [cli(store_url, tmp_path / f"home{n}", "invoke", "etl.push", inputs[n]) for n in range(4)]
    results = [finished(child) for child in children]
    assert [code for code, _, _ in results] == [0] * 4, results
    assert stamps(store_url) == [(1, LAYOUT_VERSION, package_version())]


def test_a_process_that_opened_the_store_before_a_newer_layout_stops_writing(store_url: str, tmp_path: Path) -> None:
    """A long-lived process (a Celery worker, a code server, a notebook) checked the stamp only when it first
    opened the store, and went on writing after a newer release raised the layout; the inline-array Iterate (its
    own driver transaction) never checked it. A write transaction reads the stamp again once a second has
    passed since this process last did, the inline-array Iterate at every call."""
    from connector_ops import invoke
    from connector_ops.kernel.errors import ConnectorError
    from tests.conftest import resources_on

    resources = resources_on(store_url, tmp_path / "home")
    descriptor = resources["platform_files"].add_bytes(b"id,name\n1,ada\n", "in.csv").to_json()
    file_id = invoke("etl.push", {"platformFile": descriptor}, resources)["virtualFileId"]
    assert invoke("etl.iterate", {"content": [1, 2, 3], "maxBatchSize": 1}, resources)["hasNext"]
    execute(store_url, f"UPDATE cop_store_layout SET version = {LAYOUT_VERSION + 1}, written_by = '99.0.0'")
    time.sleep(RECHECK_SECONDS)  # what a release raising the layout waits after stamping it

    for action, payload in (("etl.push", {"platformFile": descriptor}),
                            ("etl.append_rows", {"rows": [{"virtualFileId": file_id, "content": {"id": "2"}}]}),
                            ("etl.iterate", {"content": [1, 2, 3], "maxBatchSize": 1})):
        with pytest.raises(ConnectorError) as refused:
            invoke(action, payload, resources)
        assert refused.value.status == 500, action
        assert f"has layout {LAYOUT_VERSION + 1}, written by connector-ops 99.0.0" in str(refused.value), action
        assert PASSWORD not in str(refused.value)
    assert execute(store_url, "SELECT id FROM cop_virtual_file") == [(file_id,)]
    [(table,)] = execute(store_url, "SELECT table_name FROM cop_virtual_file")
    assert execute(store_url, f"SELECT count(*) FROM {table}") == [(1,)]  # no row appended
    assert execute(store_url, "SELECT position FROM cop_array_cursor") == [(1,)]  # the cursor did not move


def iterate(url: str, home: Path, items: list) -> tuple[int, str, str]:
    return finished(cli(url, home, "invoke", "etl.iterate", json.dumps({"content": items, "maxBatchSize": 1})))


def test_a_store_of_layout_1_is_upgraded_and_its_iterations_go_on(store_url: str, tmp_path: Path) -> None:
    """Layout 2 dates each inline array's Iterate position (``cop_array_cursor.moved_at``, for gc). A store of
    layout 1 — stamped 1, or not stamped at all — gets the column when a process of this code first opens it,
    its positions dated at the upgrade, and the stamp 2; its files and positions are as they were, and the
    inline-array Iterate (whose driver path leaves an older layout to the SQLAlchemy path) goes on."""
    home = tmp_path / "home"
    code, out, err = push(store_url, home)
    assert code == 0, err
    for unstamped in (False, True):
        items = [unstamped, 2, 3]
        code, out, err = iterate(store_url, home, items)
        assert code == 0 and json.loads(out)["content"] == [unstamped], err
        execute(store_url, "ALTER TABLE cop_array_cursor DROP COLUMN moved_at")  # as layout 1 had it
        execute(store_url, "ALTER TABLE cop_virtual_file DROP COLUMN seq_floor")
        execute(store_url, "DROP TABLE cop_store_layout" if unstamped else "UPDATE cop_store_layout SET version = 1")
        code, out, err = iterate(store_url, home, items)
        assert code == 0, err
        assert json.loads(out) == {"content": [2], "hasNext": True}
        assert stamps(store_url) == [(1, LAYOUT_VERSION, package_version())]
        [(position, moved)] = execute(store_url, "SELECT position, moved_at FROM cop_array_cursor")
        assert position == 2 and moved is not None
        code, out, err = iterate(store_url, home, items)  # the last batch: the position goes
        assert code == 0 and json.loads(out) == {"content": [3], "hasNext": False}, err


def test_a_store_of_layout_2_is_upgraded_and_a_running_iteration_sees_rows_appended_after_its_last_rows_went(
        store_url: str, tmp_path: Path) -> None:
    """Layout 3 adds ``cop_virtual_file.seq_floor``, past which SQLite numbers rows appended after a Delete Rows
    took a file's last rows (:mod:`.seq_floors`). In a store of layout 2 an older process may have taken them
    already: the upgrade starts each file's floor at the furthest position an Iterate of it holds, so the
    rows appended next are still seen by that Iterate (they reused its numbers before)."""
    home = tmp_path / "home"
    code, out, err = push(store_url, home, "n\n" + "".join(f"{i}\n" for i in range(5)))
    assert code == 0, err
    file_id = json.loads(out)["virtualFileId"]

    def invoked(action: str, payload: dict) -> dict:
        code, out, err = finished(cli(store_url, home, "invoke", action, json.dumps(payload)))
        assert code == 0, err
        return json.loads(out)

    first = invoked("etl.iterate", {"content": file_id, "maxBatchSize": 3})
    assert [r["n"] for r in first["content"]] == ["0", "1", "2"] and first["hasNext"]
    execute(store_url, "ALTER TABLE cop_virtual_file DROP COLUMN seq_floor")  # as layout 2 had it
    execute(store_url, "UPDATE cop_store_layout SET version = 2")
    [(table,)] = execute(store_url, "SELECT table_name FROM cop_virtual_file")
    execute(store_url, f"DELETE FROM {table} WHERE seq > 1")  # an older process's Delete Rows of the last rows
    invoked("etl.append_rows", {"rows": [{"virtualFileId": file_id, "content": {"n": v}} for v in ("new-A", "new-B")]})
    assert stamps(store_url) == [(1, LAYOUT_VERSION, package_version())]
    second = invoked("etl.iterate", {"content": file_id, "maxBatchSize": 3})
    assert second == {"content": [{"n": "new-A"}, {"n": "new-B"}], "hasNext": False}


def test_a_fan_out_planned_before_the_layout_3_upgrade_loses_no_row(store_url: str, tmp_path: Path) -> None:
    """The upgrade to layout 3 starts each file's floor at its Iterates' furthest position; a fan-out
    (``etl_iterate_batches``) keeps no position in the store — its batches go out as step outputs, the IO
    manager's pickles, or in memory — so the upgrade cannot see them. No row is lost for it: each batch is a
    range of numbers the planned rows had, and SQLite never renumbers a row, so every planned row still in the
    file is read by its batch; rows appended after the plan were never part of it (on PostgreSQL, or with a
    floor, they are numbered past the last batch). What the floor would have spared: on SQLite, when an older
    process took the file's last rows before the upgrade, rows appended after it take their numbers, and a batch
    not yet read returns them in place of the rows taken."""
    from connector_ops.ops.fanout import plan_batches, read_batch
    from connector_ops.resources.virtual_files import engines
    from connector_ops.resources.virtual_files.store import VirtualFileStore

    home = tmp_path / "home"
    code, out, err = push(store_url, home, "n\n" + "".join(f"{i}\n" for i in range(5)))
    assert code == 0, err
    file_id = json.loads(out)["virtualFileId"]
    store = VirtualFileStore(database_url=store_url)
    batches = plan_batches(store, file_id, 2)  # as the op plans them, before the upgrade
    assert [(b["afterSeq"], b["uptoSeq"]) for b in batches] == [(0, 2), (2, 4), (4, 5)]
    assert [r["n"] for r in read_batch(store, batches[0])] == ["0", "1"]  # the first mapped step has run
    engines.dispose(store_url)
    execute(store_url, "ALTER TABLE cop_virtual_file DROP COLUMN seq_floor")  # as layout 2 had it
    execute(store_url, "UPDATE cop_store_layout SET version = 2")
    [(table,)] = execute(store_url, "SELECT table_name FROM cop_virtual_file")
    execute(store_url, f"DELETE FROM {table} WHERE seq > 3")  # an older process's Delete Rows of the last rows
    code, _, err = finished(cli(store_url, home, "invoke", "etl.append_rows", json.dumps(
        {"rows": [{"virtualFileId": file_id, "content": {"n": v}} for v in ("new-A", "new-B", "new-C")]})))
    assert code == 0, err
    assert stamps(store_url) == [(1, LAYOUT_VERSION, package_version())]

    read = [[r["n"] for r in read_batch(store, batch)] for batch in batches]  # every batch, the first again
    assert read[0] == ["0", "1"] and read[1][0] == "2"  # every planned row still in the file
    if store_url.startswith("sqlite"):  # the numbers taken (4, 5) given again: the plan's last ranges hold them
        assert read[1:] == [["2", "new-A"], ["new-B"]]
    else:  # a sequence never gives a number twice
        assert read[1:] == [["2"], []]
