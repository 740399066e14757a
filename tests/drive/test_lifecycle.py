"""Resource lifecycles: one HTTP client and one OAuth token per session, closed at its end; adapters that
build and close the plain resources per Dagster run; descriptions the Dagster UI shows."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest

from connector_ops.environment import RESOURCE_KEYS, recipes_for
from connector_ops.ops import drive_list
from connector_ops.ops.resources import adapter_for, dagster_resources
from connector_ops.session import Session, default_session, invoke
from tests.drive.support import google_env
from tests.servers.fake_drive import FakeDrive


def test_a_session_signs_in_once_and_closes_its_client(clean_env: dict, fake: FakeDrive,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    google_env(fake, monkeypatch)
    with Session() as session:
        for _ in range(3):
            assert session.invoke("drive.list", {})["content"] == []
        drive = session.resources_for(["drive"])["drive"]
        client = drive.http.client
    assert len(fake.token_requests) == 1  # one refresh for three calls
    assert client.is_closed


def test_invoke_reuses_the_process_session_until_the_environment_changes(clean_env: dict, fake: FakeDrive,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    google_env(fake, monkeypatch)
    invoke("drive.list", {})
    first = default_session().resources_for(["drive"])["drive"]
    invoke("drive.list", {})
    assert default_session().resources_for(["drive"])["drive"] is first
    assert len(fake.token_requests) == 1
    client = first.http.client
    monkeypatch.setenv("GOOGLE_DRIVE_API_URL", fake.base_url + "/")  # another setting: a new resource
    invoke("drive.list", {})
    assert default_session().resources_for(["drive"])["drive"] is not first
    assert client.is_closed  # the replaced one was closed


def test_a_dagster_run_builds_and_closes_the_drive(clean_env: dict, fake: FakeDrive,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    google_env(fake, monkeypatch)
    built: list[Any] = []

    @dg.op(required_resource_keys={"drive"})
    def remember(context) -> None:  # unannotated: with postponed annotations dagster would see a string
        built.append(context.resources.drive)

    @dg.job
    def listing() -> None:
        drive_list()
        remember()

    result = listing.execute_in_process(resources=dagster_resources(keys=["drive", "platform_files"]))
    assert result.success
    assert type(built[0]).__name__ == "GoogleDriveResource"  # ops get the plain resource
    assert built[0]._http is None  # closed when the run ended
    assert len(fake.token_requests) == 1


def test_every_adapter_field_has_a_description(clean_env: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECTOR_OPS_DRIVE_BACKEND", "google")
    classes = {recipe.cls for recipe in recipes_for(RESOURCE_KEYS).values()}
    for backend in ("mailjet", "smtp"):
        monkeypatch.setenv("CONNECTOR_OPS_MAIL_BACKEND", backend)
        classes.add(recipes_for(["mail"])["mail"].cls)
    monkeypatch.setenv("CONNECTOR_OPS_DRIVE_BACKEND", "local")
    monkeypatch.setenv("CONNECTOR_OPS_MAIL_BACKEND", "outbox")
    classes |= {recipe.cls for recipe in recipes_for(RESOURCE_KEYS).values()}
    assert len(classes) == 7
    missing = [f"{cls.__name__}.{name}" for cls in classes
               for name, info in adapter_for(cls).model_fields.items() if not info.description]
    assert missing == []


def test_the_local_drive_sweeps_what_killed_writers_left_when_it_starts(tmp_path) -> None:
    """An upload killed mid-write left ``items/.tmp-<pid>-…`` (17–31 MB in the audit), and one killed between
    renaming its bytes into place and committing its row left bytes no listing shows; nothing removed
    either. A drive starting removes both once older than a minute, and nothing of a listed item. It looks
    once an hour (the drive folder's ``.swept``): the look reads every item, and every process paid it."""
    import io
    import os
    import time

    from connector_ops.kernel.atomic import SWEPT_STAMP, TEMP_PREFIX
    from connector_ops.resources.drive.local import LocalDriveResource

    uploaded = LocalDriveResource(drive_dir=str(tmp_path / "drive")).upload(
        io.BytesIO(b"a\n1\n"), "up.csv", "text/csv", 4, None)
    items = tmp_path / "drive" / "items"
    listed = sorted(p.name for p in items.iterdir())
    assert listed == [uploaded]
    dead = [items / f"{TEMP_PREFIX}999999-x", items / "NoRowForTheseBytes123456"]
    young = items / "WrittenJustNowNoRowYet12"
    for path in (*dead, young):
        path.write_bytes(b"left behind")
    hour_ago = time.time() - 3600
    for path in (*dead, *(items / name for name in listed)):
        os.utime(path, (hour_ago, hour_ago))
    LocalDriveResource(drive_dir=str(tmp_path / "drive")).root  # noqa: B018 - a start within the hour
    assert sorted(p.name for p in items.iterdir()) == sorted([*listed, young.name, *(p.name for p in dead)])
    os.utime(tmp_path / "drive" / SWEPT_STAMP, (hour_ago - 1, hour_ago - 1))  # the last sweep, an hour ago
    LocalDriveResource(drive_dir=str(tmp_path / "drive")).root  # noqa: B018 - the first start after the hour
    assert sorted(p.name for p in items.iterdir()) == sorted([*listed, young.name])


def test_the_local_drive_sweeps_despite_a_stamp_and_leftovers_dated_in_the_future(tmp_path) -> None:
    """The clock stepped back after a sweep (or the folder came from a host ahead): a ``.swept`` dated 30
    days ahead is stale, not "swept a moment ago" for 30 days, and leftovers dated as far ahead are old."""
    import io
    import os
    import time

    from connector_ops.kernel.atomic import SWEPT_STAMP, TEMP_PREFIX
    from connector_ops.resources.drive.local import LocalDriveResource

    uploaded = LocalDriveResource(drive_dir=str(tmp_path / "drive")).upload(
        io.BytesIO(b"a\n1\n"), "up.csv", "text/csv", 4, None)
    items = tmp_path / "drive" / "items"
    dead = [items / f"{TEMP_PREFIX}999999-x", items / "NoRowForTheseBytes123456"]
    for path in dead:
        path.write_bytes(b"left behind")
    ahead = time.time() + 30 * 86400
    for path in (*dead, items / uploaded, tmp_path / "drive" / SWEPT_STAMP):
        os.utime(path, (ahead, ahead))
    LocalDriveResource(drive_dir=str(tmp_path / "drive")).root  # noqa: B018 - a start
    assert sorted(p.name for p in items.iterdir()) == [uploaded]
    assert abs(time.time() - (tmp_path / "drive" / SWEPT_STAMP).stat().st_mtime) < 60  # dated again, now
