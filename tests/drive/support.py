"""Helpers of the drive tests: credentials of the fake, the environment for the Google backend, a harness."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from connector_ops.resources.drive.google import GoogleDriveResource
from connector_ops.session import invoke
from tests.servers.fake_drive import FakeDrive

CLIENT_ID = "client-123.apps.googleusercontent.com"
CLIENT_SECRET = "shh-client-secret"
REFRESH_TOKEN = "1//refresh-token-secret"


def google_env(fake: FakeDrive, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "CONNECTOR_OPS_DRIVE_BACKEND": "google",
        "GOOGLE_DRIVE_API_URL": fake.base_url,
        "GOOGLE_OAUTH_TOKEN_URL": fake.base_url + "/token",
        "GOOGLE_CLIENT_ID": CLIENT_ID,
        "GOOGLE_CLIENT_SECRET": CLIENT_SECRET,
        "GOOGLE_REFRESH_TOKEN": REFRESH_TOKEN,
    }.items():
        monkeypatch.setenv(name, value)


#: small sizes so multipart, resumable chunking and retries are exercised quickly
FAST = {"backoff_base_s": 0.01, "backoff_max_s": 0.05, "multipart_max_bytes": 300 * 1024, "chunk_bytes": 256 * 1024}


@dataclass
class Drive:
    """One backend ready to run actions: ``run("drive.list", {...})``."""

    kind: str
    resources: dict[str, Any]
    fake: FakeDrive | None

    def run(self, name: str, payload: dict[str, Any]) -> Any:
        return invoke(name, payload, self.resources)

    @property
    def drive(self) -> Any:
        return self.resources["drive"]


def fast_google(resources: dict[str, Any], **overrides: Any) -> GoogleDriveResource:
    built = resources["drive"]
    assert isinstance(built, GoogleDriveResource)
    fields = {name: getattr(built, name) for name in GoogleDriveResource.model_fields}
    return GoogleDriveResource(**{**fields, **FAST, **overrides})


