"""The same action through its other entry points: the generated op (with a wired attachment) and the CLI."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import dagster as dg
import pytest

from connector_ops.cli import main
from connector_ops.ops import mail_send_transactional_message
from connector_ops.ops.resources import dagster_resources
from connector_ops.pipelines.samples import sample_file, sample_path
from tests.mail.conftest import message


def outbox_messages(env: dict[str, str]) -> list[dict]:
    folder = Path(env["CONNECTOR_OPS_HOME"]) / "outbox"
    return [json.loads(p.read_text())["Messages"][0] for p in sorted(folder.iterdir())]


def test_op_with_an_upstream_platform_file_wired_as_attachment(mail_env: dict[str, str]) -> None:
    @dg.job(resource_defs=dagster_resources())
    def report_by_mail() -> None:
        mail_send_transactional_message(attachments=sample_file())

    result = report_by_mail.execute_in_process(
        run_config={"ops": {"mail_send_transactional_message": {"config": message()}}})
    assert result.success
    assert result.output_for_node("mail_send_transactional_message", "result") == {}
    [sent] = outbox_messages(mail_env)
    [attachment] = sent["Attachments"]
    assert attachment["Filename"] == "sales.csv" and attachment["ContentType"] == "text/csv"
    assert base64.b64decode(attachment["Base64Content"]) == Path(sample_path("sales.csv")).read_bytes()


def test_op_failure_carries_status_and_body(mail_env: dict[str, str]) -> None:
    @dg.job(resource_defs=dagster_resources())
    def bad_mail() -> None:
        mail_send_transactional_message()

    result = bad_mail.execute_in_process(
        run_config={"ops": {"mail_send_transactional_message": {"config": message(templateVariables="[1]")}}},
        raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    metadata = failure.step_failure_data.user_failure_data.metadata
    assert metadata["status"].value == 400
    assert metadata["body"].value == {
        "message": "templateVariables: must be a JSON object (key-value), got list"}


def test_cli(mail_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["invoke", "mail.send_transactional_message", json.dumps(message())]) == 0
    assert json.loads(capsys.readouterr().out) == {}
    assert len(outbox_messages(mail_env)) == 1
    assert main(["invoke", "mail.send_transactional_message", json.dumps(message(recipients=[]))]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"message": "recipients: List should have at least 1 item after validation, "
                                                   "not 0"}
    assert captured.err.startswith("connector-ops: mail.send_transactional_message failed (400)")
