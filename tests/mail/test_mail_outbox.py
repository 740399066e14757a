"""The outbox backend (the offline default): one JSON file per message, atomically, Mailjet-shaped."""

from __future__ import annotations

import base64
import json
import os
import re
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from connector_ops.environment import resources_for
from connector_ops.kernel.errors import ConnectorError, InvalidInput
from connector_ops.resources.mail.outbox import OutboxMailResource
from tests.mail.conftest import message, send


def outbox(env: dict[str, str]) -> Path:
    return Path(env["CONNECTOR_OPS_HOME"]) / "outbox"


def test_default_backend_writes_one_file_per_message(mail_env: dict[str, str]) -> None:
    assert isinstance(resources_for()["mail"], OutboxMailResource)
    files = resources_for()["platform_files"]
    report = files.add_bytes(b"region,total\nNorth,12\n", "north_sales.csv")
    assert send(message(attachments=[{"platformFile": report.to_json()}])) == {}
    assert send(message(subject="second")) == {}
    names = sorted(p.name for p in outbox(mail_env).iterdir())
    assert len(names) == 2 and all(re.fullmatch(r"\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{12}\.json", n) for n in names)
    first, second = (json.loads((outbox(mail_env) / n).read_text()) for n in names)
    assert second["Messages"][0]["Subject"] == "second"  # the clock steady: names sort in sending order
    assert first["SandboxMode"] is False and first["AdvanceErrorHandling"] is True
    sent = first["Messages"][0]
    assert sent["From"] == {"Email": "noreply@example.com", "Name": "Example Shop"}
    assert sent["To"] == [{"Email": "alice@example.org", "Name": "Alice"}]
    assert sent["Bcc"] == [{"Email": "audit@example.com"}]
    assert sent["TemplateID"] == 4242 and sent["TemplateLanguage"] is True
    assert sent["Variables"]["items"] == [{"name": "Pen", "qty": 2}]
    [attachment] = sent["Attachments"]
    assert attachment["ContentType"] == "text/csv" and attachment["Filename"] == "north_sales.csv"
    assert base64.b64decode(attachment["Base64Content"]) == b"region,total\nNorth,12\n"


def test_outbox_dir_variable_and_no_credentials(mail_env: dict[str, str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECTOR_OPS_OUTBOX_DIR", str(tmp_path / "sent"))
    monkeypatch.setenv("MAILJET_API_KEY", "pk-must-not-appear")
    send(message())
    [written] = (tmp_path / "sent").iterdir()
    assert "pk-must-not-appear" not in written.read_text()


def test_a_failed_message_leaves_nothing_behind(mail_env: dict[str, str]) -> None:
    files = resources_for()["platform_files"]
    ok = files.add_bytes(b"a" * 1000, "ok.txt")
    gone = files.add_bytes(b"b", "gone.txt")
    files.delete(gone.id or "")
    with pytest.raises(ConnectorError) as caught:  # fails while the second attachment is being written
        send(message(attachments=[{"platformFile": ok.to_json()}, {"platformFile": gone.to_json()}]))
    assert caught.value.status == 500 and "attachments[1].platformFile: cannot read 'gone.txt'" in caught.value.message
    assert list(outbox(mail_env).iterdir()) == []  # no message, no temporary file


def test_empty_attachment_is_refused(mail_env: dict[str, str]) -> None:
    empty = resources_for()["platform_files"].add_bytes(b"", "empty.txt")
    with pytest.raises(ConnectorError) as caught:
        send(message(attachments=[{"platformFile": empty.to_json()}]))
    assert caught.value.status == 400
    assert caught.value.message == "attachments[0].platformFile: 'empty.txt' is empty; empty attachments are refused"
    assert list(outbox(mail_env).iterdir()) == []


def test_unknown_backend_is_reported(mail_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECTOR_OPS_MAIL_BACKEND", "sendgrid")
    with pytest.raises(InvalidInput, match="CONNECTOR_OPS_MAIL_BACKEND: must be one of outbox, mailjet, smtp"):
        resources_for()


def test_decimal_and_numpy_variables_are_written_as_json_numbers(mail_env: dict[str, str]) -> None:
    """A Python caller's mapping may hold Decimal or NumPy numbers (the input check admits them as numbers)."""
    variables = {"total": Decimal("12.50"), "big": Decimal("12345678901234567890.01"),
                 "qty": np.int64(3), "rate": np.float64(0.25), "lines": [{"n": np.int32(1)}]}
    assert send(message(templateVariables=variables)) == {}
    [written] = outbox(mail_env).iterdir()
    raw = written.read_text()
    assert '"total":12.50' in raw and '"big":12345678901234567890.01' in raw  # the digits as given
    sent = json.loads(raw, parse_float=Decimal)["Messages"][0]
    assert sent["Variables"] == {"total": Decimal("12.50"), "big": Decimal("12345678901234567890.01"), "qty": 3,
                                 "rate": Decimal("0.25"), "lines": [{"n": 1}]}


def test_a_killed_writers_temporary_file_is_swept_when_the_outbox_starts(mail_env: dict[str, str]) -> None:
    folder = outbox(mail_env)
    folder.mkdir(parents=True)
    dead = folder / ".tmp-999999-abandoned"  # a writer killed mid-write: no lock held, an hour old
    dead.write_bytes(b'{"SandboxMode":false,"Messa')
    os.utime(dead, (time.time() - 3600, time.time() - 3600))
    young = folder / ".tmp-999999-young"  # may belong to a writer that has not locked it yet: left alone
    young.write_bytes(b"")
    assert send(message()) == {}
    names = [p.name for p in folder.iterdir()]
    assert ".tmp-999999-abandoned" not in names and ".tmp-999999-young" in names
    assert len([n for n in names if n.endswith(".json")]) == 1
