"""Secrets never appear in logs, errors, or what a Dagster run stores.

The op runs in a job on a persistent test instance (SQLite storage files in a temporary folder), with
resources bound by ``dagster_resources()`` exactly as ``pipelines/definitions.py`` does, so
the keys are ``EnvVar``s read inside the run. Afterwards every stored file and every log record is
searched for the secrets (raw, and as the basic-auth header value).
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops.ops import mail_send_transactional_message
from connector_ops.ops.resources import dagster_resources
from tests.mail.conftest import API_KEY, API_SECRET, message
from tests.servers.fake_mailjet import FakeMailjet
from tests.servers.smtp_server import password_authenticator, smtp_server

SMTP_PASSWORD = "smtp-secret-5d2b8e61f0a94c37"
WRONG_SECRET = "sk-wrong-9e8d7c6b5a4f3e2d1c0b"


def forms(secret: str) -> list[bytes]:
    """How a secret could leak: as is, and inside a basic-auth header with either key."""
    return [secret.encode(), base64.b64encode(f"{API_KEY}:{secret}".encode()),
            base64.b64encode(f"{secret}:".encode())[:-4]]


def stored_bytes(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in root.rglob("*") if p.is_file()]


def run_send_job(tmp_path: Path, config: dict[str, Any]) -> tuple[dg.ExecuteInProcessResult, Path, str]:
    resources = dagster_resources()

    @dg.job(resource_defs=resources)
    def send_mail() -> None:
        mail_send_transactional_message()

    storage = tmp_path / "dagster"
    storage.mkdir(parents=True)
    with dg.instance_for_test(temp_dir=str(storage)) as instance:
        result = send_mail.execute_in_process(
            run_config={"ops": {"mail_send_transactional_message": {"config": config}}},
            instance=instance, raise_on_error=False,
        )
        events = "\n".join(str(e) for e in instance.all_logs(result.run_id))
        assert instance.get_run_by_id(result.run_id) is not None  # the run really is in the storage
    return result, storage, events


def assert_nowhere(secrets: list[str], storage: Path, events: str, caplog: pytest.LogCaptureFixture) -> None:
    files = stored_bytes(storage)
    assert any(p.suffix == ".db" for p, _ in files)  # the instance persisted its storage here
    # the search sees what the run stored: its config (a recipient) and its events (the op's name)
    assert any(b"alice@example.org" in data for _, data in files)
    assert any(b"STEP_START" in data for _, data in files)
    # every log record of the process except the test SMTP server's own ("mail.log", aiosmtpd)
    logs = "\n".join(r.getMessage() + repr(r.args) + str(r.exc_info) for r in caplog.records
                     if not r.name.startswith("mail.log"))
    for secret in secrets:
        for form in forms(secret):
            leaks = [str(p) for p, data in files if form in data]
            assert not leaks, f"a secret is stored in {leaks}"
            assert form.decode() not in events and form.decode() not in logs


def test_mailjet_keys_stay_out_of_a_dagster_run(mailjet_env: dict[str, str], fake_mailjet: tuple[FakeMailjet, str],
                                                tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = fake_mailjet
    caplog.set_level(logging.DEBUG)
    resources = dagster_resources()
    assert resources["mail"].api_key == dg.EnvVar("MAILJET_API_KEY")

    ok, storage, events = run_send_job(tmp_path / "ok", message())
    assert ok.success and len(fake.accepted) == 1
    assert fake.requests[0]["headers"]["authorization"].endswith(forms(API_SECRET)[1].decode())  # keys were used
    assert_nowhere([API_KEY, API_SECRET], storage, events, caplog)

    monkeypatch.setenv("MAILJET_API_SECRET", WRONG_SECRET)
    failed, storage, events = run_send_job(tmp_path / "failed", message())
    assert not failed.success
    [failure] = [e for e in failed.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "Mailjet authentication failed (HTTP 401)" in str(failure.event_specific_data)
    assert_nowhere([API_KEY, WRONG_SECRET], storage, events, caplog)


def test_smtp_password_stays_out_of_a_dagster_run(mail_env: dict[str, str], tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.DEBUG)
    templates = tmp_path / "templates" / "4242"
    templates.mkdir(parents=True)
    (templates / "body.txt.j2").write_text("Hello {{ first_name }}")
    with smtp_server(authenticator=password_authenticator("relay", SMTP_PASSWORD),
                     auth_require_tls=False) as (recorder, port):
        for name, value in {"CONNECTOR_OPS_MAIL_BACKEND": "smtp", "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port),
                            "SMTP_SECURITY": "none", "SMTP_USERNAME": "relay", "SMTP_PASSWORD": SMTP_PASSWORD,
                            "CONNECTOR_OPS_TEMPLATES_DIR": str(tmp_path / "templates")}.items():
            monkeypatch.setenv(name, value)
        ok, storage, events = run_send_job(tmp_path / "ok", message())
        assert ok.success and len(recorder.envelopes) == 1
        assert_nowhere([SMTP_PASSWORD], storage, events, caplog)

        monkeypatch.setenv("SMTP_PASSWORD", WRONG_SECRET)
        failed, storage, events = run_send_job(tmp_path / "failed", message())
        assert not failed.success and "SMTP authentication failed" in events
        assert_nowhere([SMTP_PASSWORD, WRONG_SECRET], storage, events, caplog)
