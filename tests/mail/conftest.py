"""Fixtures of the e-mail tests: a clean environment on a temporary home, a served fake Mailjet, inputs.

The mail tests do not touch the virtual-file store, so they use a SQLite file only (the parametrised
``env`` fixture of tests/conftest.py would run each of them on PostgreSQL as well, for nothing).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connector_ops.environment import resources_for
from connector_ops.session import invoke
from tests.servers import serving
from tests.servers.fake_mailjet import FakeMailjet

API_KEY = "pk-5f1d2c3b4a69788796a5b4c3d2e1f0a1"
API_SECRET = "sk-0a1b2c3d4e5f60718293a4b5c6d7e8f9"
ACTION = "mail.send_transactional_message"


@pytest.fixture
def mail_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A clean connector environment (also in os.environ) with the default outbox backend."""
    for name in list(os.environ):
        if name.startswith(("CONNECTOR_OPS_", "GOOGLE_", "MAILJET_", "SMTP_")):
            monkeypatch.delenv(name)
    values = {
        "CONNECTOR_OPS_HOME": str(tmp_path / "home"),
        "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'vf.db'}",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


@pytest.fixture
def fake_mailjet() -> Iterator[tuple[FakeMailjet, str]]:
    fake = FakeMailjet(API_KEY, API_SECRET)
    with serving(fake.app) as url:
        yield fake, url


@pytest.fixture
def mailjet_env(mail_env: dict[str, str], fake_mailjet: tuple[FakeMailjet, str],
                monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {
        "CONNECTOR_OPS_MAIL_BACKEND": "mailjet",
        "MAILJET_API_KEY": API_KEY,
        "MAILJET_API_SECRET": API_SECRET,
        "MAILJET_API_URL": fake_mailjet[1],
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return {**mail_env, **values}


def message(**changes: Any) -> dict[str, Any]:
    """A valid input of Send Transactional Message; keyword arguments replace (None removes) fields."""
    payload: dict[str, Any] = {
        "from": "Example Shop <noreply@example.com>",
        "recipients": [
            {"to": "alice@example.org", "type": "To", "name": "Alice"},
            {"to": "bob@example.org", "type": "Cc"},
            {"to": "audit@example.com", "type": "Bcc"},
        ],
        "subject": "Your order 12345",
        "templateId": 4242,
        "templateVariables": '{"first_name": "Alice", "order_id": "12345", "items": [{"name": "Pen", "qty": 2}]}',
    }
    for key, value in changes.items():
        if value is None:
            payload.pop(key, None)
        else:
            payload[key] = value
    return payload


def send(payload: dict[str, Any], resources: dict[str, Any] | None = None) -> Any:
    return invoke(ACTION, payload, resources if resources is not None else resources_for())
