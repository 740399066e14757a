"""Fixtures of the drive tests: the loopback fake Google Drive and a drive harness for either backend."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector_ops.environment import resources_for
from tests.drive.support import CLIENT_ID, CLIENT_SECRET, REFRESH_TOKEN, Drive, fast_google, google_env
from tests.servers import serving
from tests.servers.fake_drive import FakeDrive


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeDrive]:
    drive = FakeDrive(storage=tmp_path / "fake-drive", client_id=CLIENT_ID, client_secret=CLIENT_SECRET,
                      refresh_tokens={REFRESH_TOKEN})
    with serving(drive.app) as url:
        drive.base_url = url
        yield drive
    assert drive.violations == [], "requests the Drive v3 discovery document does not allow"


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name in list(os.environ):
        if name.startswith(("CONNECTOR_OPS_", "GOOGLE_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path / "home"))
    return {"CONNECTOR_OPS_HOME": str(tmp_path / "home")}


@pytest.fixture(params=["local", "google"])
def drive(request: pytest.FixtureRequest, clean_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Drive:
    fake = None
    if request.param == "google":
        fake = request.getfixturevalue("fake")
        google_env(fake, monkeypatch)
    resources = resources_for()
    if fake is not None:
        resources["drive"] = fast_google(resources)
    return Drive(request.param, resources, fake)


@pytest.fixture
def google(clean_env: dict[str, str], fake: FakeDrive, monkeypatch: pytest.MonkeyPatch) -> Drive:
    google_env(fake, monkeypatch)
    resources = resources_for()
    resources["drive"] = fast_google(resources)
    return Drive("google", resources, fake)
