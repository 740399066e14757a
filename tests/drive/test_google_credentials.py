"""Credentials the way deployed workers have them, against the loopback OAuth server of the fake Drive:
``authorized_user`` files in GOOGLE_APPLICATION_CREDENTIALS, Application Default Credentials
(``google.auth.default`` reading the gcloud ADC file) and the Drive scope (GOOGLE_DRIVE_SCOPE)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from connector_ops.environment import resources_for
from connector_ops.kernel.errors import ConnectorError
from connector_ops.session import invoke
from tests.drive.support import CLIENT_ID, CLIENT_SECRET, REFRESH_TOKEN, Drive, fast_google

SCOPE_URL = "https://www.googleapis.com/auth/"


def authorized_user_file(path: Path) -> Path:
    """What `gcloud auth application-default login` writes."""
    info = {"type": "authorized_user", "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
            "refresh_token": REFRESH_TOKEN}
    path.write_text(json.dumps(info))
    return path


def drive_from_env(google: Drive, monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    """Resources built from the environment as a worker builds them, with only the given Google settings."""
    fake = google.fake
    assert fake is not None
    for name in ("GOOGLE_CLIENT_ID", "GOOGLE_CLIENT_SECRET", "GOOGLE_REFRESH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_DRIVE_API_URL", fake.base_url)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    resources = resources_for()
    resources["drive"] = fast_google(resources)
    return resources


@pytest.mark.parametrize("scope", ["drive", "drive.file", "drive.readonly"])
def test_authorized_user_file_in_google_application_credentials(google: Drive, tmp_path: Path, scope: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fake = google.fake
    assert fake is not None
    key = authorized_user_file(tmp_path / "adc.json")
    resources = drive_from_env(google, monkeypatch, GOOGLE_APPLICATION_CREDENTIALS=str(key),
                               GOOGLE_OAUTH_TOKEN_URL=fake.base_url + "/token", GOOGLE_DRIVE_SCOPE=scope)
    assert invoke("drive.list", {}, resources) is not None
    grant = fake.token_requests[-1]
    assert grant["grant_type"] == "refresh_token" and grant["refresh_token"] == REFRESH_TOKEN
    assert grant["scope"] == SCOPE_URL + scope
    assert resources["drive"].check_token()["credentials"] == "authorized_user"


def test_application_default_credentials_from_the_gcloud_file(google: Drive, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake = google.fake
    assert fake is not None
    gcloud = tmp_path / "gcloud"
    gcloud.mkdir()
    authorized_user_file(gcloud / "application_default_credentials.json")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(gcloud))  # where google.auth.default looks for gcloud's file
    resources = drive_from_env(google, monkeypatch, GOOGLE_USE_ADC="true", GOOGLE_DRIVE_SCOPE="drive.readonly",
                               GOOGLE_OAUTH_TOKEN_URL=fake.base_url + "/token")
    assert invoke("drive.list", {}, resources) is not None
    grant = fake.token_requests[-1]
    assert grant["grant_type"] == "refresh_token" and grant["refresh_token"] == REFRESH_TOKEN
    # gcloud's user credentials keep the scopes chosen at `gcloud auth application-default login --scopes …`
    # (google.auth.default applies scopes only to credentials that require them, e.g. service accounts)
    assert resources["drive"].check_token()["credentials"] == "application_default"


def test_adc_without_credentials_and_bad_settings_are_400s_naming_the_variable(
        google: Drive, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = google.fake
    assert fake is not None
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    # google.auth.default would ask the metadata server next: point it at a closed loopback port
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    resources = drive_from_env(google, monkeypatch, GOOGLE_USE_ADC="true")
    with pytest.raises(ConnectorError) as err:
        invoke("drive.list", {}, resources)
    assert err.value.status == 400 and "GOOGLE_USE_ADC" in err.value.message

    resources = drive_from_env(google, monkeypatch, GOOGLE_USE_ADC="false", GOOGLE_DRIVE_SCOPE="drive.everything",
                               GOOGLE_APPLICATION_CREDENTIALS=str(authorized_user_file(tmp_path / "u.json")))
    with pytest.raises(ConnectorError) as err:
        invoke("drive.list", {}, resources)
    assert err.value.status == 400 and "GOOGLE_DRIVE_SCOPE" in err.value.message

    other = tmp_path / "other.json"
    other.write_text(json.dumps({"type": "something_else"}))
    resources = drive_from_env(google, monkeypatch, GOOGLE_DRIVE_SCOPE="drive",
                               GOOGLE_APPLICATION_CREDENTIALS=str(other))
    with pytest.raises(ConnectorError) as err:
        invoke("drive.list", {}, resources)
    assert err.value.status == 400 and "GOOGLE_APPLICATION_CREDENTIALS" in err.value.message
    assert "authorized_user" in err.value.message
