"""The drive-folder sensor on both backends: a run per new file, and per modified file (issue 12, item 8).

The sensor is evaluated as the daemon would (``evaluate_tick`` with the cursor of the previous tick) against
the local drive and the loopback fake Google Drive. A modification on Google is what an edit in the
Drive UI leaves behind: a new MD5, modifiedTime and version on the file; on the local drive, which has no
content edits of its own, a rename or move is its modification. The requests go to a Dagster instance the
way the sensor daemon submits them: one whose run key already has a run is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import dagster as dg
import pytest
from dagster._core.utils import make_new_run_id

from connector_ops.pipelines import sensor_state
from connector_ops.pipelines.definitions import build_definitions
from tests.drive.support import Drive

SENSOR = "drive_inbox_on_new_file"
INSTANCE: dg.DagsterInstance


@pytest.fixture(autouse=True)
def instance() -> Iterator[dg.DagsterInstance]:
    """The instance the daemon evaluates the sensor with: the sensor keeps the files it has seen there."""
    global INSTANCE
    with dg.instance_for_test() as INSTANCE:
        yield INSTANCE


def _tick(drive: Drive, cursor: str | None) -> dg.SensorExecutionData:
    sensor = build_definitions().resolve_sensor_def(SENSOR)
    with dg.build_sensor_context(cursor=cursor, resources={"drive": drive.drive}, instance=INSTANCE) as ctx:
        return sensor.evaluate_tick(ctx)


def _seen(cursor: str | None) -> dict[str, str | None]:
    """The files the sensor has seen as of ``cursor`` (ids and versions)."""
    seen, _, whole = sensor_state.load(INSTANCE, SENSOR, cursor)
    assert whole
    return seen


def _upload(drive: Drive, name: str, text: str) -> str:
    pf = drive.resources["platform_files"].add_bytes(text.encode(), name, "text/csv").to_json()
    return drive.run("drive.upload_file", {"platformFile": pf})["fileId"]


def _modify(drive: Drive, file_id: str, text: str = "x\n9\n") -> None:
    if drive.fake is not None:  # an edit in the Drive UI: new content, checksum, time and version
        drive.fake.replace_content(file_id, text.encode())
    else:
        drive.run("drive.rename", {"id": file_id, "name": f"{text.encode().hex()}.csv"})


def _submit(instance: dg.DagsterInstance, requests: list[dg.RunRequest]) -> list[dg.RunRequest]:
    """The requests Dagster's sensor daemon starts runs for, each then recorded as a run: it skips a request
    whose run key already has a run of the sensor (``fetch_existing_runs`` in dagster/_daemon/sensor.py looks
    runs up by their ``dagster/run_key`` tag, as here)."""
    started = []
    for request in requests:
        if instance.get_runs(filters=dg.RunsFilter(tags={"dagster/run_key": request.run_key})):
            continue
        instance.add_run(dg.DagsterRun(job_name="drive_inbox", run_id=make_new_run_id(),
                                       tags={"dagster/run_key": request.run_key, "dagster/sensor_name": SENSOR}))
        started.append(request)
    return started


def test_new_then_modified_files_each_start_one_run(drive: Drive) -> None:
    empty = _tick(drive, None)
    assert not empty.run_requests and empty.skip_message == "no new or modified file in drive folder root"

    first = _upload(drive, "a.csv", "x\n1\n")
    new = _tick(drive, None)
    (request,) = new.run_requests
    assert request.run_key == f"root/{first}@1" and request.tags["drive/change"] == "new"
    assert not _tick(drive, new.cursor).run_requests  # seen, unchanged: no second run

    _modify(drive, first)
    changed = _tick(drive, new.cursor)
    (request,) = changed.run_requests
    assert _seen(changed.cursor)[first] != _seen(new.cursor)[first]
    assert request.run_key == f"root/{first}@2" and request.tags["drive/change"] == "modified"
    assert request.run_config["ops"]["trigger"]["config"]["fileId"] == first
    assert not _tick(drive, changed.cursor).run_requests

    second = _upload(drive, "b.csv", "x\n2\n")
    both = _tick(drive, changed.cursor)
    assert [r.run_key for r in both.run_requests] == [f"root/{second}@1"]
    assert set(_seen(both.cursor)) == {first, second}  # pruned to the folder's files, folders excluded


def test_a_file_that_comes_back_or_changes_back_starts_a_run_each_time(drive: Drive) -> None:
    """A run key names the file's revision, which grows with every change: a file moved out and back
    (forgotten by the cursor meanwhile) or with content going A, B, A, B is not skipped as a repeat."""
    instance = dg.DagsterInstance.ephemeral()
    cursor: str | None = None

    def tick() -> list[str]:
        nonlocal cursor
        result = _tick(drive, cursor)
        cursor = result.cursor
        return [r.tags["drive/change"] for r in _submit(instance, list(result.run_requests or []))]

    file_id = _upload(drive, "a.csv", "x\n1\n")
    elsewhere = drive.run("drive.create_folder", {"name": "elsewhere"})["folderId"]
    assert tick() == ["new"]
    drive.run("drive.move", {"id": file_id, "folderId": elsewhere})
    assert tick() == []
    drive.run("drive.move", {"id": file_id, "folderId": "root"})
    assert tick() == ["new"]  # pruned from the cursor while away
    for text in ["x\n2\n", "x\n1\n", "x\n2\n"]:
        _modify(drive, file_id, text)
        assert tick() == ["modified"]
    assert tick() == []
    assert len(instance.get_runs()) == 5


def test_a_cursor_of_the_earlier_release_counts_its_files_as_seen(drive: Drive) -> None:
    first = _upload(drive, "a.csv", "x\n1\n")
    old_cursor = json.dumps([first])  # ids only, as the sensor stored them before versions
    assert not _tick(drive, old_cursor).run_requests
    upgraded = _tick(drive, old_cursor).cursor
    assert _seen(upgraded)[first] is not None
    _modify(drive, first)
    (request,) = _tick(drive, upgraded).run_requests
    assert request.tags["drive/change"] == "modified"


def test_drive_put_brings_a_local_file_in_and_the_sensor_sees_it(drive: Drive, tmp_path, capsys) -> None:
    """One command instead of `files add` + `invoke drive.upload_file`; the staging copy is not kept."""
    from connector_ops.cli import main

    # the CLI builds its own resources from the environment the fixtures set (GOOGLE_* for the fake)
    folder = drive.run("drive.create_folder", {"name": "inbox"})["folderId"]
    local = tmp_path / "orders.csv"
    local.write_text("order,qty\nA,1\n")
    staged_before = drive.resources["platform_files"].inventory()
    assert main(["drive", "put", str(local), "--folder", folder, "--name", "orders-2026.csv"]) == 0
    file_id = json.loads(capsys.readouterr().out)["fileId"]
    listing = drive.run("drive.list", {"folderId": folder})["content"]
    assert listing == [{"name": "orders-2026.csv", "id": file_id, "type": "file"}]
    downloaded = drive.run("drive.download_file", {"fileId": file_id})["platformFile"]
    assert drive.resources["platform_files"].read_bytes(downloaded) == b"order,qty\nA,1\n"
    staged = {i for i, _ in drive.resources["platform_files"].inventory()} - {i for i, _ in staged_before}
    assert staged == {downloaded["id"]}  # only the download; the put's staging copy is gone

    assert main(["drive", "put", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv is not a readable file" in capsys.readouterr().out


def test_a_local_drive_of_an_earlier_release_gets_revisions(tmp_path) -> None:
    """A drive.db created before items had a ``version`` counter: its rows start at 1 and count on."""
    import sqlite3

    from connector_ops.resources.drive.local import SCHEMA, LocalDriveResource

    (tmp_path / "drive").mkdir()
    old = sqlite3.connect(tmp_path / "drive" / "drive.db")
    old.executescript(SCHEMA.replace(",\n    version INTEGER NOT NULL DEFAULT 1", ""))
    old.execute("INSERT INTO items VALUES ('root', 'my-drive', 1, 'folder', NULL, 0, 't0'),"
                " ('f1', 'a.csv', 0, 'text/csv', 'root', 0, 't0')")
    old.commit()
    old.close()
    local = LocalDriveResource(drive_dir=str(tmp_path / "drive"))
    assert [i.revision for i in local.list_folder("root")] == ["1"]
    local.rename("f1", "b.csv")
    assert [i.revision for i in local.list_folder("root")] == ["2"]


def test_a_folder_of_thousands_of_files_keeps_the_cursor_small(google: Drive) -> None:
    """The cursor held every file of the folder, and Dagster copies it into every tick: drive_inbox never
    removes what it converted, so a year of files made a 2.4 MiB cursor and 7 GiB of ticks a day. The seen
    files live in the instance's key-value store; the cursor stays a token, unchanged by a tick that finds
    nothing, and every new, changed or moved-in file (its modifiedTime older than any seen) starts one run."""
    fake = google.fake
    assert fake is not None
    many = [fake.add_file(f"sales_{n}.csv", b"x\n1\n", "text/csv") for n in range(3000)]
    runs: dict[str, int] = {}

    def tick(cursor: str | None) -> tuple[str, list[dg.RunRequest]]:
        result = _tick(google, cursor)
        assert result.cursor is not None and len(result.cursor) < 200, result.cursor[:200]
        started = list(result.run_requests or [])  # each requested once: not even left to the run keys
        for request in started:
            runs[request.tags["drive/file_id"]] = runs.get(request.tags["drive/file_id"], 0) + 1
        return result.cursor, started

    cursor, started = tick(None)
    assert len(started) == 3000 and runs == dict.fromkeys(many, 1)
    assert tick(cursor) == (cursor, [])  # nothing new: the same cursor, nothing stored

    elsewhere = google.run("drive.create_folder", {"name": "elsewhere"})["folderId"]
    old = fake.add_file("old.csv", b"x\n2\n", "text/csv", parent=elsewhere)
    google.run("drive.move", {"id": old, "folderId": "root"})
    fake.files[old]["modifiedTime"] = "2020-01-01T00:00:00.000Z"  # Drive keeps it on a move: before every file
    fake.replace_content(many[7], b"x\n3\n")
    added = fake.add_file("new.csv", b"x\n4\n", "text/csv")
    cursor, started = tick(cursor)
    assert sorted((r.tags["drive/file_id"], r.tags["drive/change"]) for r in started) == sorted(
        [(old, "new"), (many[7], "modified"), (added, "new")])
    assert tick(cursor) == (cursor, [])
    assert runs == {**dict.fromkeys(many, 1), many[7]: 2, old: 1, added: 1}
    assert len(_seen(cursor)) == 3002


def test_a_cursor_whose_seen_files_are_not_stored_starts_no_second_run(drive: Drive) -> None:
    """A cursor naming seen files the instance does not hold (set by hand, the store wiped) is a first start:
    every file is asked for again, under the run key of its revision, so the daemon starts none twice."""
    instance = dg.DagsterInstance.ephemeral()
    first = _upload(drive, "a.csv", "x\n1\n")
    result = _tick(drive, None)
    assert [r.tags["drive/file_id"] for r in _submit(instance, list(result.run_requests or []))] == [first]
    lost = json.dumps({"generation": 7, "digest": "0" * 32, "files": 1})
    again = _tick(drive, lost)
    assert [r.run_key for r in again.run_requests] == [r.run_key for r in result.run_requests]
    assert _submit(instance, list(again.run_requests)) == [] and _seen(again.cursor) == {first: _seen(
        result.cursor)[first]}
    assert not _tick(drive, again.cursor).run_requests


def test_sensors_of_one_name_in_two_code_locations_keep_their_own_files(drive: Drive) -> None:
    """The seen files were keyed by the sensor's name alone: a staging and a production location of one
    instance with the same pipeline overwrote each other's row, and every tick of each counted every file
    as new (the whole folder's run requests, a warning, the row written whole). Each now has its own."""
    sensor = build_definitions().resolve_sensor_def(SENSOR)
    _upload(drive, "a.csv", "x\n1\n")

    def tick(repository: str, cursor: str | None) -> dg.SensorExecutionData:
        with dg.build_sensor_context(cursor=cursor, resources={"drive": drive.drive}, instance=INSTANCE,
                                     repository_name=repository) as ctx:
            return sensor.evaluate_tick(ctx)

    staging, production = tick("staging", None), tick("production", None)
    assert len(staging.run_requests) == len(production.run_requests) == 1
    for name in ("b.csv", "c.csv"):  # staging ticks on, two generations ahead of production
        _upload(drive, name, "x\n2\n")
        staging = tick("staging", staging.cursor)
        assert len(staging.run_requests) == 1
    production = tick("production", production.cursor)
    assert sorted(r.run_config["ops"]["trigger"]["config"]["name"] for r in production.run_requests) == [
        "b.csv", "c.csv"]  # not a.csv again: its files were its own, whatever staging wrote
    assert not tick("staging", staging.cursor).run_requests


def test_a_sensor_built_without_an_instance_keeps_its_files_in_the_cursor(drive: Drive) -> None:
    """``dg.build_sensor_context()`` without an instance (a user's unit test of the sensor) failed at every
    tick once the seen files moved to the instance; there, they are in the cursor, as before."""
    sensor = build_definitions().resolve_sensor_def(SENSOR)
    first = _upload(drive, "a.csv", "x\n1\n")
    with dg.build_sensor_context(resources={"drive": drive.drive}) as ctx:
        ticked = sensor.evaluate_tick(ctx)
    assert [r.run_key for r in ticked.run_requests] == [f"root/{first}@1"]
    assert set(json.loads(ticked.cursor)) == {first}
    with dg.build_sensor_context(cursor=ticked.cursor, resources={"drive": drive.drive}) as ctx:
        assert not sensor.evaluate_tick(ctx).run_requests
