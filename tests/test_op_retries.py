"""Retries that mean something: a Dagster RetryPolicy re-runs an op only when its failure is transient.

Counted on the loopback fakes of Google Drive and Mailjet (each client's own retries turned off, so
one Dagster attempt is one request): a 503 is attempted 1 + max_retries times, a 404 (Drive) or a
refused message (Mailjet 400) once, whatever the policy says.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops.environment import resources_for
from connector_ops.kernel.errors import InvalidInput, NotFound, UpstreamError
from connector_ops.ops import drive_list, drive_rename, mail_send_transactional_message
from connector_ops.ops.factory import POOLS
from connector_ops.registry import error_for, get_action
from connector_ops.resources.mail.mailjet import MailjetResource
from tests.drive.support import fast_google, google_env
from tests.mail.conftest import API_KEY, API_SECRET, message
from tests.servers import serving
from tests.servers.fake_drive import FakeDrive
from tests.servers.fake_mailjet import Canned, FakeMailjet

POLICY = dg.RetryPolicy(max_retries=2)


@pytest.fixture
def clean_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("CONNECTOR_OPS_", "GOOGLE_", "MAILJET_", "SMTP_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_URL", f"sqlite:///{tmp_path / 'vf.db'}")


@pytest.fixture
def drive(tmp_path: Path, clean_home: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeDrive, dict]]:
    fake = FakeDrive(storage=tmp_path / "fake-drive")
    with serving(fake.app) as url:
        fake.base_url = url
        google_env(fake, monkeypatch)
        resources = resources_for(["drive"])
        resources["drive"] = fast_google(resources, max_attempts=1)
        yield fake, resources


@pytest.fixture
def mailjet(clean_home: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeMailjet, dict]]:
    fake = FakeMailjet(API_KEY, API_SECRET)
    with serving(fake.app) as url:
        resources = resources_for(["platform_files"])
        resources["mail"] = MailjetResource(api_key=API_KEY, api_secret=API_SECRET, api_url=url, max_attempts=1)
        yield fake, resources


def attempts(result: dg.ExecuteInProcessResult, node: str) -> int:
    """How many times the step ran: one start, plus one per restart."""
    return 1 + sum(e.event_type_value == "STEP_RESTARTED" for e in result.events_for_node(node))


def run_one(op: dg.OpDefinition, config: dict[str, Any], resources: dict[str, Any]) -> dg.ExecuteInProcessResult:
    @dg.job(op_retry_policy=POLICY)
    def one() -> None:
        op()

    return one.execute_in_process(resources=resources, raise_on_error=False,
                                  run_config={"ops": {op.name: {"config": config}}})


def drive_calls(fake: FakeDrive, path: str) -> int:
    return sum(1 for method, p, _ in fake.requests if p.endswith(path) and method in ("GET", "PATCH"))


def test_a_drive_503_is_retried_by_the_policy(drive: tuple[FakeDrive, dict]) -> None:
    fake, resources = drive
    fake.fail("GET", "/drive/v3/files", status=503, times=10)
    result = run_one(drive_list, {"folderId": "root"}, resources)
    assert not result.success
    assert attempts(result, "drive_list") == 3
    assert drive_calls(fake, "/drive/v3/files") == 3
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][-1]
    assert failure.step_failure_data.user_failure_data.metadata["retryable"].value is True


def test_a_drive_503_that_clears_succeeds_on_a_retry(drive: tuple[FakeDrive, dict]) -> None:
    fake, resources = drive
    fake.fail("GET", "/drive/v3/files", status=503, times=1)
    result = run_one(drive_list, {"folderId": "root"}, resources)
    assert result.success and attempts(result, "drive_list") == 2


def test_a_drive_404_is_never_retried(drive: tuple[FakeDrive, dict]) -> None:
    fake, resources = drive
    result = run_one(drive_rename, {"id": "no-such-file", "name": "x"}, resources)
    assert not result.success
    assert attempts(result, "drive_rename") == 1
    assert drive_calls(fake, "/drive/v3/files/no-such-file") == 1
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    data = failure.step_failure_data.user_failure_data
    assert data.metadata["status"].value == 404 and data.metadata["retryable"].value is False


def test_mailjet_503_is_retried_and_a_refusal_is_not(mailjet: tuple[FakeMailjet, dict]) -> None:
    fake, resources = mailjet
    fake.queue(*[Canned(503, text="<html>down</html>")] * 5)
    result = run_one(mail_send_transactional_message, message(), resources)
    assert not result.success and attempts(result, "mail_send_transactional_message") == 3
    assert len(fake.requests) == 3

    fake.canned.clear()
    fake.requests.clear()
    result = run_one(mail_send_transactional_message, message(templateId=1), resources)  # unknown template: 400
    assert not result.success and attempts(result, "mail_send_transactional_message") == 1
    assert len(fake.requests) == 1


def test_invalid_input_fails_once_before_any_request(drive: tuple[FakeDrive, dict]) -> None:
    fake, resources = drive
    result = run_one(drive_rename, {"id": "x", "name": ""}, resources)
    assert attempts(result, "drive_rename") == 1 and drive_calls(fake, "/drive/v3/files/x") == 0


@pytest.mark.parametrize("exc,status,retryable", [
    (InvalidInput("name", "is required"), 400, False),
    (NotFound("attachment x"), 500, False),  # the spec answers not-found with 500 here: still never retried
    (UpstreamError("Mailjet refused the message (HTTP 400)"), 500, False),
    (UpstreamError("Google Drive could not be reached", status=503, retryable=True), 503, True),
    (UpstreamError("Mailjet rate limit (HTTP 429)", retryable=True), 500, True),
    (ValueError("a bug"), 500, False),
])
def test_retryable_follows_what_failed_not_the_status(exc: Exception, status: int, retryable: bool) -> None:
    error = error_for(get_action("mail.send_transactional_message"), exc)
    assert (error.status, error.retryable) == (status, retryable)


def test_drive_and_mail_ops_run_in_provider_pools() -> None:
    assert drive_list.pool == POOLS["drive"] == "google_drive"
    assert mail_send_transactional_message.pool == POOLS["mail"] == "mailjet"
    from connector_ops.ops import etl_push

    assert etl_push.pool is None
