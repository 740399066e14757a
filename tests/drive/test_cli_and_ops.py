"""The drive connector's other entry points: the discovery oracle itself, `connector-ops drive …`
(check-token, login), the generated Dagster ops, and the resource builder."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import dagster as dg
import httpx
import pytest

from connector_ops.cli import main
from connector_ops.environment import resources_for
from connector_ops.kernel.errors import InvalidInput
from connector_ops.ops import drive_create_folder, drive_list, drive_upload_file
from connector_ops.ops.resources import GoogleDriveResourceAdapter, dagster_resources
from connector_ops.resources.drive.google import GoogleDriveResource
from connector_ops.resources.drive.local import LocalDriveResource
from tests.drive.support import CLIENT_SECRET, REFRESH_TOKEN, google_env
from tests.servers import drive_discovery, free_port
from tests.servers.fake_drive import FakeDrive


@pytest.mark.parametrize("method,path,query,body,problem", [
    ("GET", "/drive/v3/files/abc", [("supportsTeamDrives", "true")], None, "deprecated"),
    ("GET", "/drive/v3/files/abc", [("bogus", "1")], None, "unknown parameter bogus"),
    ("GET", "/drive/v3/files", [("pageSize", "5000")], None, "above 1000"),
    ("GET", "/drive/v3/files/abc/export", [], None, "required parameter mimeType"),
    ("POST", "/drive/v3/files", [], {"name": "x", "webViewLink": "y"}, "output only"),
    ("POST", "/drive/v3/files/abc/permissions", [], {"type": "user"}, "role is required"),
    ("GET", "/drive/v3/files/abc/permissions", [("alt", "media")], None, "alt=media"),
    ("POST", "/drive/v3/files", [("uploadType", "multipart")], {"name": "x"}, "uploadType on a metadata path"),
    ("PUT", "/drive/v3/files/abc", [], None, "unknown endpoint"),
])
def test_the_oracle_rejects_what_the_discovery_document_does_not_allow(method: str, path: str, query: list,
                                                                      body: dict | None, problem: str) -> None:
    _, problems = drive_discovery.check(method, path, query, body)
    assert any(problem in p for p in problems), problems


def test_the_oracle_accepts_documented_requests() -> None:
    assert drive_discovery.check("GET", "/drive/v3/files/generateIds", [("count", "10")]) == \
        ("drive.files.generateIds", [])
    assert drive_discovery.check("POST", "/upload/drive/v3/files", [("uploadType", "resumable")], {"name": "a"}) == \
        ("drive.files.create", [])
    assert drive_discovery.check("POST", "/drive/v3/files/a/permissions", [("sendNotificationEmail", "false")],
                                 {"type": "user", "role": "reader", "emailAddress": "a@b.co"}) == \
        ("drive.permissions.create", [])


def test_check_token_cli(clean_env: dict, fake: FakeDrive, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    google_env(fake, monkeypatch)
    assert main(["drive", "check-token"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True
    fake.revoke_refresh_tokens()
    assert main(["drive", "check-token"]) == 1
    out, err = capsys.readouterr()
    assert "invalid_grant" in json.loads(out)["message"] and "401" in err
    assert REFRESH_TOKEN not in out + err and CLIENT_SECRET not in out + err


def test_check_token_on_the_local_drive_answers_as_docs_drive_md_says(
        clean_env: dict, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drive", "check-token"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer == {"valid": True, "credentials": "none (local drive)", "expiresInSeconds": None}
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "drive.md").read_text().split())
    assert json.dumps(answer) in doc  # the docs list every answer the command gives


def consenting_user(fake: FakeDrive, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Google sign-in set up for ``drive login`` on the fake, and the user's browser, which opens the consent
    page and follows Google's redirect to the command's loopback; the statuses its visits ended with."""
    google_env(fake, monkeypatch)
    monkeypatch.delenv("GOOGLE_REFRESH_TOKEN")
    monkeypatch.setenv("GOOGLE_OAUTH_AUTH_URL", fake.base_url + "/auth")
    visited: list[int] = []

    def browser(url: str) -> None:
        def visit() -> None:
            visited.append(httpx.get(url, follow_redirects=True, timeout=10).status_code)
        threading.Thread(target=visit).start()

    monkeypatch.setattr("webbrowser.open", browser)
    return visited


def test_login_runs_the_loopback_flow_and_saves_the_refresh_token(clean_env: dict, fake: FakeDrive,
                                                                  monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    visited = consenting_user(fake, monkeypatch)
    env_file = tmp_path / ".env"
    env_file.write_text("OTHER=1\nGOOGLE_REFRESH_TOKEN=old\n")
    assert main(["drive", "login", "--save", str(env_file), "--timeout", "20"]) == 0
    lines = env_file.read_text().splitlines()
    assert lines[0] == "OTHER=1" and len(lines) == 2
    token = lines[1].split("=", 1)[1]
    assert token in fake.refresh_tokens and token.startswith("1//new-refresh-")
    assert env_file.stat().st_mode & 0o777 == 0o600
    out, err = capsys.readouterr()
    assert token not in out + err and visited == [200]
    monkeypatch.setenv("GOOGLE_REFRESH_TOKEN", token)
    assert main(["drive", "check-token"]) == 0


def test_login_whose_token_endpoint_cannot_be_reached_says_so(clean_env: dict, fake: FakeDrive,
                                                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The code's exchange went through a bare ``httpx.post``, past the client every Drive call uses: a token
    endpoint that could not be reached was an error nobody anticipated (a 500, "ConnectError talking to …"),
    and a proxy's refusal was not named as one. It is the token endpoint's 503 now, as a refresh's is, and
    nothing is saved."""
    consenting_user(fake, monkeypatch)
    monkeypatch.setenv("GOOGLE_OAUTH_TOKEN_URL", f"http://127.0.0.1:{free_port()}/token")  # nothing listens
    env_file = tmp_path / ".env"
    assert main(["drive", "login", "--save", str(env_file), "--timeout", "20"]) != 0
    out, err = capsys.readouterr()
    assert "connector-ops: failed (503): could not reach the Google token endpoint at 127.0.0.1:" in err
    assert "(ConnectError: [Errno 111] Connection refused)" in err
    assert "Traceback" not in out + err and CLIENT_SECRET not in out + err
    assert not env_file.exists()


def test_drive_ops_in_a_job_on_the_local_drive(clean_env: dict) -> None:
    resources = resources_for()
    pf = resources["platform_files"].add_bytes(b"x,y\n1,2\n", "points.csv")

    @dg.job(resource_defs=resources)
    def backup() -> None:
        folder = drive_create_folder()
        uploaded = drive_upload_file(folder_id=folder)
        drive_list(folder_id=folder, after=[uploaded])

    result = backup.execute_in_process(run_config={"ops": {
        "drive_create_folder": {"config": {"name": "Backups"}},
        "drive_upload_file": {"config": {"platformFile": pf.to_json()}},
    }})
    assert result.success
    content = result.output_for_node("drive_list", "content")
    assert [(c["name"], c["type"]) for c in content] == [("points.csv", "file")]


def test_builder_picks_the_backend_and_defers_secrets(clean_env: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(resources_for()["drive"], LocalDriveResource)
    monkeypatch.setenv("CONNECTOR_OPS_DRIVE_BACKEND", "google")
    monkeypatch.setenv("GOOGLE_CLIENT_ID", "client-id.apps.example")
    monkeypatch.setenv("GOOGLE_CLIENT_SECRET", "top-secret-value")
    monkeypatch.setenv("GOOGLE_REFRESH_TOKEN", "1//top-secret-refresh")
    assert isinstance(resources_for()["drive"], GoogleDriveResource)
    deferred = dagster_resources()["drive"]
    assert isinstance(deferred, GoogleDriveResourceAdapter)
    # the Dagster adapter holds each secret as an EnvVar naming its variable, read only inside a run
    # (an EnvVar equals its name as a string: the type check is what tells it from a plain value)
    secrets = {"client_id": "GOOGLE_CLIENT_ID", "client_secret": "GOOGLE_CLIENT_SECRET",
               "refresh_token": "GOOGLE_REFRESH_TOKEN"}
    for field, variable in secrets.items():
        value = getattr(deferred, field)
        assert isinstance(value, dg.EnvVar) and value.env_var_name == variable, field
    dg.Definitions(resources={"drive": deferred})
    assert "top-secret" not in repr(deferred)
    with dg.build_resources({"drive": deferred}) as built:  # a run reads the variables they name
        drive = built.drive
        assert isinstance(drive, GoogleDriveResource)
        assert (drive.client_id, drive.client_secret, drive.refresh_token) == (
            "client-id.apps.example", "top-secret-value", "1//top-secret-refresh")
    monkeypatch.setenv("CONNECTOR_OPS_DRIVE_BACKEND", "dropbox")
    with pytest.raises(InvalidInput) as bad:
        resources_for()
    assert (bad.value.status, str(bad.value)) == (
        400, "CONNECTOR_OPS_DRIVE_BACKEND: must be one of local, google, got 'dropbox'")


def test_save_env_line_replaces_export_lines_and_keeps_a_symlink(tmp_path: Path) -> None:
    from connector_ops.drive.cli import save_env_line

    real = tmp_path / "secrets" / "drive.env"
    real.parent.mkdir()
    real.write_text("OTHER=1\nexport GOOGLE_REFRESH_TOKEN=old\n"
                    "  GOOGLE_REFRESH_TOKEN = older\nGOOGLE_REFRESH_TOKEN_X=k\n")
    link = tmp_path / ".env"
    link.symlink_to(real)
    save_env_line(link, "GOOGLE_REFRESH_TOKEN", "new")
    assert link.is_symlink() and link.resolve() == real
    assert real.read_text().splitlines() == ["OTHER=1", "GOOGLE_REFRESH_TOKEN_X=k", "GOOGLE_REFRESH_TOKEN=new"]
    assert real.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("option,value", [("--port", "70000"), ("--port", "-1"), ("--timeout", "-1"),
                                          ("--timeout", "0")])
def test_login_refuses_a_port_or_timeout_out_of_range_as_a_usage_error(option: str, value: str) -> None:
    """``--port 70000`` was a 500 with Python's OverflowError (exit 1) and ``--timeout -1`` waited no time
    at all; ``files serve --port`` already refused such a port as a usage error (exit 2)."""
    import os
    import subprocess
    import sys

    script = str(Path(sys.executable).parent / "connector-ops")
    env = {**os.environ, "GOOGLE_CLIENT_ID": "x", "GOOGLE_CLIENT_SECRET": "y",
           "GOOGLE_OAUTH_AUTH_URL": "http://127.0.0.1:9/auth", "GOOGLE_OAUTH_TOKEN_URL": "http://127.0.0.1:9/token"}
    run = subprocess.run([script, "drive", "login", "--no-browser", option, value], capture_output=True, text=True,
                         timeout=60, env=env)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"Invalid value for '{option}'" in run.stderr and run.stdout == ""
