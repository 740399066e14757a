"""The drive-folder sensor on both backends: a run per new file, and per modified file (issue 12, item 8).

The sensor is evaluated as the daemon would (``evaluate_tick`` with the cursor of the previous tick) against
the local drive and the loopback fake Google Drive. A modification on Google is what an edit in the
Drive UI leaves behind: a new MD5, modifiedTime and version on the file; on the local drive, which has no
content edits of its own, a rename or move is its modification. The requests go to a Dagster instance the
way the sensor daemon submits them: one whose run key already has a run is skipped.
"""

from __future__ import annotations

import json

import dagster as dg
from dagster._core.utils import make_new_run_id

from connector_ops.pipelines.definitions import build_definitions
from tests.drive.support import Drive

SENSOR = "drive_inbox_on_new_file"


def _tick(drive: Drive, cursor: str | None) -> dg.SensorExecutionData:
    sensor = build_definitions().resolve_sensor_def(SENSOR)
    with dg.build_sensor_context(cursor=cursor, resources={"drive": drive.drive}) as ctx:
        return sensor.evaluate_tick(ctx)


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
    assert json.loads(changed.cursor)[first] != json.loads(new.cursor)[first]
    assert request.run_key == f"root/{first}@2" and request.tags["drive/change"] == "modified"
    assert request.run_config["ops"]["trigger"]["config"]["fileId"] == first
    assert not _tick(drive, changed.cursor).run_requests

    second = _upload(drive, "b.csv", "x\n2\n")
    both = _tick(drive, changed.cursor)
    assert [r.run_key for r in both.run_requests] == [f"root/{second}@1"]
    assert set(json.loads(both.cursor)) == {first, second}  # pruned to the folder's files, folders excluded


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
    upgraded = json.loads(_tick(drive, old_cursor).cursor)
    assert upgraded[first] is not None
    _modify(drive, first)
    (request,) = _tick(drive, json.dumps(upgraded)).run_requests
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
