"""Secrets never show in reprs of resources or in masked settings."""

from __future__ import annotations

import pytest

from connector_ops.kernel.secrets import mask_url, masked
from connector_ops.resources.drive.google import GoogleDriveResource
from connector_ops.resources.virtual_files.store import VirtualFileStore


@pytest.mark.parametrize(
    "url,shown",
    [
        ("postgresql+psycopg://bob:pw@db/x", "postgresql+psycopg://bob:****@db/x"),
        ("postgresql+psycopg://bob@db/x?password=pw&sslmode=require",
         "postgresql+psycopg://bob@db/x?password=****&sslmode=require"),
        ("sqlite:////abs/path/vf.db", "sqlite:////abs/path/vf.db"),
        ("https://api.mailjet.com", "https://api.mailjet.com"),
    ],
)
def test_mask_url(url, shown):
    assert mask_url(url) == shown


def test_masked_settings():
    assert masked("refresh_token", "1//abc") == "****"
    assert masked("client_secret", "s3cr3t") == "****"
    assert masked("database_url", "postgresql://u:pw@h/d") == "postgresql://u:****@h/d"
    assert masked("files_dir", "/tmp/files") == "/tmp/files"


def test_resource_reprs_hide_secrets():
    drive = GoogleDriveResource(client_id="cid", client_secret="CLIENTSECRET", refresh_token="REFRESHTOK")
    store = VirtualFileStore(database_url="postgresql+psycopg://u:DBPASS@h/d?password=DBPASS2")
    for text in (repr(drive), str(drive), repr(store), str(store), f"{store!r} {drive}"):
        for secret in ("CLIENTSECRET", "REFRESHTOK", "DBPASS"):
            assert secret not in text
    assert "client_id='cid'" in repr(drive) and "u:****@h/d" in repr(store)


def test_an_unreachable_database_is_one_clear_line_without_the_password(tmp_path, monkeypatch):
    from connector_ops import ConnectorError, invoke

    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path))
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_URL", "postgresql+psycopg://bob:S3CRETPW@127.0.0.1:1/db")
    with pytest.raises(ConnectorError) as info:
        invoke("etl.query", {"virtualFileId": "x", "query": {}})
    message = info.value.body["message"]
    assert info.value.status == 500 and message.startswith("database error:") and "\n" not in message
    assert "S3CRETPW" not in message and "S3CRETPW" not in str(info.value)


def test_masked_environment_keeps_urls_readable_without_their_passwords():
    from connector_ops.environment import masked_environment

    shown = masked_environment({
        "CONNECTOR_OPS_DATABASE_URL": "postgresql+psycopg://bob:pw@db/x",
        "MAILJET_API_SECRET": "shh",
        "GOOGLE_REFRESH_TOKEN": "1//tok",
        "CONNECTOR_OPS_HOME": "/srv/co",
        "PATH": "/bin",
    })
    assert shown == {
        "CONNECTOR_OPS_DATABASE_URL": "postgresql+psycopg://bob:****@db/x",
        "CONNECTOR_OPS_HOME": "/srv/co",
        "GOOGLE_REFRESH_TOKEN": "****",
        "MAILJET_API_SECRET": "****",
    }


@pytest.mark.parametrize(("data", "name"), [
    (b"a,b\n1,2\nsecret-1,4,5\n", "rows.csv"), (b"a,b\n1,2\r\nsecret-2\n", "rows.csv"),
    (b"a,b\n1,\xffsecret-3\n", "rows.csv"), (b'{"a": "1"}\n' * 200_000 + b'{"a": "secret-4"} x\n', "rows.ndjson")])
def test_a_fast_path_that_gives_up_logs_no_row(resources, caplog, monkeypatch, data, name):
    """What a column-wise load refused is not logged with its content: the server's error quotes the row
    (``CONTEXT: COPY vf_…, line 2: "…"``), and psycopg logs it as a warning when the ``COPY`` ends on an
    error of ours; Arrow's parse errors quote the line. The Push's 400 words the problem itself."""
    from connector_ops import ConnectorError, invoke
    from connector_ops.resources.virtual_files import sqlite_loader

    monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)  # SQLite's column-wise path too
    caplog.set_level("DEBUG")
    pf = resources["platform_files"].add_bytes(data, name).to_json()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf}, resources)
    assert info.value.status == 400 and "gave up" in caplog.text
    assert "secret" not in caplog.text and "CONTEXT" not in caplog.text
