"""The drive-folder sensor on both backends: a run per new file, and per modified file (issue 12, item 8).

The sensor is evaluated as the daemon would (``evaluate_tick`` with the cursor of the previous tick) against
the local drive and the loopback fake Google Drive. A modification on Google is what an edit in the
Drive UI leaves behind: a new MD5 and modifiedTime on the file; on the local drive, which has no content
edits of its own, a rename or move is its modification.
"""

from __future__ import annotations

import json

import dagster as dg

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


def _modify(drive: Drive, file_id: str) -> None:
    if drive.fake is not None:  # an edit in the Drive UI: new content, new checksum and time
        drive.fake.files[file_id].update(md5Checksum="0" * 32, modifiedTime="2031-01-01T00:00:00.000Z")
    else:
        drive.run("drive.rename", {"id": file_id, "name": "renamed.csv"})


def test_new_then_modified_files_each_start_one_run(drive: Drive) -> None:
    empty = _tick(drive, None)
    assert not empty.run_requests and empty.skip_message == "no new or modified file in drive folder root"

    first = _upload(drive, "a.csv", "x\n1\n")
    new = _tick(drive, None)
    (request,) = new.run_requests
    assert request.run_key == f"root/{first}" and request.tags["drive/change"] == "new"
    assert not _tick(drive, new.cursor).run_requests  # seen, unchanged: no second run

    _modify(drive, first)
    changed = _tick(drive, new.cursor)
    (request,) = changed.run_requests
    version = json.loads(changed.cursor)[first]
    assert version != json.loads(new.cursor)[first]
    assert request.run_key == f"root/{first}@{version}" and request.tags["drive/change"] == "modified"
    assert request.run_config["ops"]["trigger"]["config"]["fileId"] == first
    assert not _tick(drive, changed.cursor).run_requests

    second = _upload(drive, "b.csv", "x\n2\n")
    both = _tick(drive, changed.cursor)
    assert [r.run_key for r in both.run_requests] == [f"root/{second}"]
    assert set(json.loads(both.cursor)) == {first, second}  # pruned to the folder's files, folders excluded


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
