"""The Mailjet backend against the loopback fake Mailjet v3.1: payload, auth, errors, retries, attachments."""

from __future__ import annotations

import base64
import io
import logging
import os
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from connector_ops.environment import resources_for
from connector_ops.kernel.errors import ConnectorError, InvalidInput
from connector_ops.ops.resources import refuse_single_host
from connector_ops.resources.mail.attachments import AttachmentReader
from connector_ops.resources.mail.mailjet import MailjetResource
from connector_ops.resources.mail.message import Address, MailMessage
from connector_ops.resources.mail.payload import write_payload
from connector_ops.resources.platform_files import PlatformFileStore
from tests.mail.conftest import API_KEY, API_SECRET, message, send
from tests.servers import free_port, serving
from tests.servers.fake_mailjet import Canned, FakeMailjet

Fake = tuple[FakeMailjet, str]


def fast_resources(**changes: Any) -> dict[str, Any]:
    """Resources from the environment, with a Mailjet backend that waits milliseconds between retries."""
    resources = resources_for()
    mail = resources["mail"]
    assert isinstance(mail, MailjetResource)
    resources["mail"] = mail.model_copy(update={"backoff_s": 0.01, **changes})
    return resources


def failure(payload: dict[str, Any], **changes: Any) -> ConnectorError:
    with pytest.raises(ConnectorError) as caught:
        send(payload, fast_resources(**changes))
    return caught.value


def test_sends_the_documented_v31_payload_with_basic_auth(mailjet_env: dict[str, str], fake_mailjet: Fake) -> None:
    fake, _ = fake_mailjet
    assert send(message()) == {}
    [request] = fake.requests
    expected_auth = "Basic " + base64.b64encode(f"{API_KEY}:{API_SECRET}".encode()).decode()
    assert request["headers"]["authorization"] == expected_auth
    assert request["headers"]["content-type"] == "application/json"
    assert fake.payloads == [{
        "SandboxMode": False,
        "AdvanceErrorHandling": True,
        "Messages": [{
            "From": {"Email": "noreply@example.com", "Name": "Example Shop"},
            "To": [{"Email": "alice@example.org", "Name": "Alice"}],
            "Cc": [{"Email": "bob@example.org"}],
            "Bcc": [{"Email": "audit@example.com"}],
            "Subject": "Your order 12345",
            "TemplateID": 4242,
            "TemplateLanguage": True,
            "Variables": {"first_name": "Alice", "order_id": "12345", "items": [{"name": "Pen", "qty": 2}]},
        }],
    }]
    assert len(fake.accepted) == 1


def test_empty_subject_and_variables_are_left_out(mailjet_env: dict[str, str], fake_mailjet: Fake) -> None:
    fake, _ = fake_mailjet
    send(message(subject="", templateVariables="{}"))
    send(message(subject=" \t ", templateVariables="{}"))  # blank is empty: the template's subject applies
    for sent in (p["Messages"][0] for p in fake.payloads):
        assert "Subject" not in sent and "Variables" not in sent


def test_sandbox_mode(mailjet_env: dict[str, str], fake_mailjet: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = fake_mailjet
    monkeypatch.setenv("MAILJET_SANDBOX", "true")
    assert send(message()) == {}
    assert fake.payloads[0]["SandboxMode"] is True
    assert fake.accepted == []


def test_attachments_are_base64_of_the_platform_files(mailjet_env: dict[str, str], fake_mailjet: Fake) -> None:
    fake, _ = fake_mailjet
    files = resources_for()["platform_files"]
    pdf = files.add_bytes(b"%PDF-1.4\n" + os.urandom(300_001), "invoice-12345.pdf")
    csv = files.add_bytes("région;total\nNord;12\n".encode(), "north.csv", "text/csv; charset=utf-8")
    send(message(attachments=[{"platformFile": pdf.to_json()}, {"platformFile": csv.to_json()}]))
    attachments = fake.payloads[0]["Messages"][0]["Attachments"]
    assert [(a["ContentType"], a["Filename"]) for a in attachments] == [
        ("application/pdf", "invoice-12345.pdf"), ("text/csv", "north.csv")]
    assert base64.b64decode(attachments[0]["Base64Content"]) == files.read_bytes(pdf)
    assert base64.b64decode(attachments[1]["Base64Content"]) == files.read_bytes(csv)


def test_over_15_mb_of_attachments_is_refused_before_anything_is_sent(
        mailjet_env: dict[str, str], fake_mailjet: Fake) -> None:
    fake, _ = fake_mailjet
    files = resources_for()["platform_files"]
    big = files.add_bytes(b"\0" * 8_000_000, "a.bin")
    also_big = files.add_bytes(b"\1" * 7_000_001, "b.bin")
    # the declared sizes are wrong on purpose: the store's real sizes are what counts
    attachments = [{"platformFile": {**f.to_json(), "size": 1}} for f in (big, also_big)]
    error = failure(message(attachments=attachments))
    assert error.status == 400
    assert "attachments: total size 15,000,001 bytes is over the limit" in error.body["message"]
    assert fake.requests == []


def test_a_remote_file_larger_than_declared_is_stopped_while_streaming(
        mailjet_env: dict[str, str], fake_mailjet: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = fake_mailjet

    async def endless(_request: Any) -> StreamingResponse:
        async def chunks() -> Any:
            for _ in range(40):  # 40 MiB offered, 1 byte declared
                yield b"x" * (1 << 20)
        return StreamingResponse(chunks(), media_type="application/octet-stream")

    with serving(Starlette(routes=[Route("/big.bin", endless)])) as url:
        monkeypatch.setenv("CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS", url.removeprefix("http://"))  # loopback as remote
        error = failure(message(attachments=[{"platformFile": {"name": "big.bin", "link": f"{url}/big.bin",
                                                               "size": 1}}]))
    assert error.status == 400 and "over the limit of 15,000,000 bytes" in error.body["message"]
    assert fake.requests == []


def test_unreadable_attachment_is_500_naming_it(mailjet_env: dict[str, str], fake_mailjet: Fake) -> None:
    fake, _ = fake_mailjet
    files = resources_for()["platform_files"]
    gone = {**files.add_bytes(b"x", "gone.txt").to_json()}
    files.delete(gone["id"])
    error = failure(message(attachments=[{"platformFile": gone}]))
    assert error.status == 500
    assert error.body["message"].startswith("attachments[0].platformFile: cannot read 'gone.txt'")
    assert fake.requests == []


# -- every error shape of research §2.1 becomes 500 {"message"} in words ----------------------------------
def test_per_message_error_names_code_message_and_field(mailjet_env: dict[str, str], fake_mailjet: Fake) -> None:
    fake, _ = fake_mailjet
    error = failure(message(templateId=777))
    assert error.status == 500
    text = error.body["message"]
    assert text.startswith("Mailjet refused the message (HTTP 400): error send-0010: "
                           'Template id "777" doesn\'t exist for your account. (field TemplateID; Mailjet error id ')
    assert len(fake.requests) == 1  # a 4xx is never retried


def test_unauthorised_sender_403(mailjet_env: dict[str, str], fake_mailjet: Fake) -> None:
    error = failure(message(**{"from": "someone@example.net"}))
    assert error.status == 500
    assert "(HTTP 403): error send-0008: \"someone@example.net\" is not an authorized sender" in error.body["message"]


def test_wrong_keys_401(mailjet_env: dict[str, str], fake_mailjet: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAILJET_API_SECRET", "sk-wrong-secret-value")
    error = failure(message())
    assert error.status == 500
    text = error.body["message"]
    assert text.startswith("Mailjet authentication failed (HTTP 401): API key authentication/authorization failure")
    assert "MAILJET_API_KEY" in text and "sk-wrong-secret-value" not in text and API_KEY not in text


@pytest.mark.parametrize(("answer", "expected"), [
    (Canned(400, {"ErrorIdentifier": "06df1144", "ErrorCode": "mj-0002", "StatusCode": 400,
                  "ErrorMessage": "Malformed JSON, please review the syntax and properties types."}),
     "Mailjet refused the message (HTTP 400): error mj-0002: Malformed JSON, please review the syntax and "
     "properties types. (Mailjet error id 06df1144)"),
    (Canned(400, {"Errors": [
        {"ErrorIdentifier": "e1", "ErrorCode": "mj-0004", "ErrorRelatedTo": ["Messages"], "StatusCode": 400,
         "ErrorMessage": 'Type mismatch. Expected type "Messages".'},
        {"ErrorIdentifier": "e2", "ErrorCode": "mj-0003", "ErrorRelatedTo": ["Messages"], "StatusCode": 400,
         "ErrorMessage": "Missing mandatory property."}], "Messages": []}),
     "Mailjet refused the message (HTTP 400): error mj-0004: Type mismatch. Expected type \"Messages\". "
     "(field Messages; Mailjet error id e1); error mj-0003: Missing mandatory property. (field Messages; "
     "Mailjet error id e2)"),
    (Canned(400, {"Messages": [{"Status": "error", "Errors": [
        {"ErrorIdentifier": "f98", "ErrorCode": "send-0015", "StatusCode": 400, "ErrorMessage": "Too many recipients.",
         "ErrorRelatedTo": ["To", "Cc", "Bcc"]}]}]}),
     "error send-0015: Too many recipients. (fields To, Cc, Bcc; Mailjet error id f98)"),
    (Canned(401, {"ErrorIdentifier": "ac93", "StatusCode": 401, "ErrorCode": "mj-0001",
                  "ErrorMessage": "Your account has been suspended."}),
     "Mailjet authentication failed (HTTP 401): error mj-0001: Your account has been suspended. "
     "(Mailjet error id ac93). Check MAILJET_API_KEY"),
    (Canned(404, text=""), "Mailjet answered HTTP 404 with an empty body"),
    (Canned(200, {"Messages": []}), "Mailjet answered HTTP 200 without a success status"),
])
def test_error_shapes(mailjet_env: dict[str, str], fake_mailjet: Fake, answer: Canned, expected: str) -> None:
    fake, _ = fake_mailjet
    fake.queue(answer)
    error = failure(message())
    assert error.status == 500 and expected in error.body["message"]
    assert len(fake.requests) == 1  # not retryable


# -- retries (research §2.4) ---------------------------------------------------------------------------------
def test_429_then_success_is_retried(mailjet_env: dict[str, str], fake_mailjet: Fake) -> None:
    fake, _ = fake_mailjet
    fake.queue(Canned(429, {"ErrorMessage": "Too many requests", "StatusCode": 429}, headers={"Retry-After": "0"}))
    assert send(message(), fast_resources()) == {}
    assert len(fake.requests) == 2 and len(fake.accepted) == 1
    assert fake.requests[0]["body"] == fake.requests[1]["body"]  # the same body, rebuilt from the spool


def test_429_with_retry_after_as_an_http_date_waits_for_the_date(mailjet_env: dict[str, str],
                                                                fake_mailjet: Fake) -> None:
    """RFC 9110 §10.2.3: Retry-After may be a date (1-2 s ahead here, HTTP dates have whole seconds)."""
    fake, _ = fake_mailjet
    at = int(time.time()) + 2
    fake.queue(Canned(429, {"ErrorMessage": "Too many requests", "StatusCode": 429},
                      headers={"Retry-After": formatdate(at, usegmt=True)}))
    assert send(message(), fast_resources()) == {}
    assert time.time() >= at - 0.05  # a little tolerance: sleep's and the clock's granularity
    assert len(fake.requests) == 2 and len(fake.accepted) == 1


@pytest.mark.parametrize(("answers", "expected"), [
    ([Canned(503, text="<html><body><h1>503</h1>No server is available to handle this request.</body></html>")] * 3,
     "Mailjet service error (HTTP 503): 503 No server is available to handle this request. (after 3 attempts)"),
    ([Canned(500, {"ErrorIdentifier": "x1", "StatusCode": 500, "ErrorMessage": "Ouch! Something went wrong"})] * 3,
     "Mailjet service error (HTTP 500): Ouch! Something went wrong (Mailjet error id x1) (after 3 attempts)"),
    ([Canned(502, text="")] * 3, "Mailjet service error (HTTP 502), empty answer (after 3 attempts)"),
    ([Canned(429, {"StatusCode": 429, "ErrorMessage": "Too many requests"})] * 3,
     "Mailjet rate limit (HTTP 429): too many requests: Too many requests (after 3 attempts)"),
    ([Canned(400, {"Messages": [{"Status": "error", "Errors": [
        {"ErrorCode": "mj-0000", "StatusCode": 503, "ErrorMessage": "Temporarily unavailable"}]}]})] * 3,
     "Mailjet refused the message (HTTP 400): error mj-0000: Temporarily unavailable (after 3 attempts)"),
])
def test_5xx_and_429_are_retried_at_most_three_times(mailjet_env: dict[str, str], fake_mailjet: Fake,
                                                      answers: list[Canned], expected: str) -> None:
    fake, _ = fake_mailjet
    fake.queue(*answers)
    error = failure(message())
    assert error.status == 500 and error.body["message"] == expected
    assert len(fake.requests) == 3 and fake.accepted == []


def test_503_then_success(mailjet_env: dict[str, str], fake_mailjet: Fake) -> None:
    fake, _ = fake_mailjet
    fake.queue(Canned(503, text="busy"), Canned(502, text=""))
    assert send(message(), fast_resources()) == {}
    assert len(fake.requests) == 3 and len(fake.accepted) == 1


def test_read_timeout_is_not_retried(mailjet_env: dict[str, str], fake_mailjet: Fake) -> None:
    fake, _ = fake_mailjet
    fake.queue(Canned(200, {"Messages": [{"Status": "success"}]}, delay_s=1.0))
    error = failure(message(), timeout_s=0.3)
    assert error.status == 500
    assert "did not answer within 0.3 s; the message may have been sent, so it was not retried" in error.body["message"]
    assert len(fake.requests) == 1


def test_unreachable_mailjet(mailjet_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MAILJET_API_URL", url)
    error = failure(message())
    assert error.status == 500 and error.body["message"].startswith(f"cannot reach Mailjet at {url}: ConnectError")


def test_missing_keys_and_credentials_in_the_url_are_refused(mailjet_env: dict[str, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAILJET_API_SECRET")
    assert failure(message()).body["message"] == (
        "Mailjet is not configured: set MAILJET_API_KEY and MAILJET_API_SECRET")
    monkeypatch.setenv("MAILJET_API_SECRET", API_SECRET)
    monkeypatch.setenv("MAILJET_API_URL", f"http://user:{API_SECRET}@127.0.0.1:9")
    text = failure(message()).body["message"]
    assert text == "MAILJET_API_URL must be an http(s) URL without credentials in it"


def test_repr_hides_the_keys(mailjet_env: dict[str, str]) -> None:
    mail = resources_for()["mail"]
    for text in (repr(mail), str(mail), f"{mail}"):
        assert API_KEY not in text and API_SECRET not in text


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """httpx honours proxy variables; the loopback servers must be reached directly."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    yield


def test_nan_and_infinity_are_refused_before_mailjet(mailjet_env: dict[str, str], fake_mailjet: Fake) -> None:
    fake, _ = fake_mailjet
    for variables in ('{"total": NaN}', '{"limit": 1e999}', {"x": float("-inf")}):
        error = failure(message(templateVariables=variables))
        assert error.status == 400 and "is not a JSON number" in error.body["message"]
    assert fake.requests == []


def test_the_payload_writer_never_writes_nan(tmp_path: Path) -> None:
    """Even a message built past the input check (a caller of the resource) cannot put NaN on the wire."""
    msg = MailMessage(sender=Address("noreply@example.com"), to=[Address("a@example.org")], template_id=4242,
                      variables={"x": float("nan")})
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_payload(io.BytesIO(), msg, AttachmentReader(PlatformFileStore(files_dir=str(tmp_path)), []),
                      sandbox=False)


def test_the_fake_parses_json_strictly_like_mailjet(fake_mailjet: Fake) -> None:
    """Mailjet answers mj-0002 to NaN/Infinity (not RFC 8259 JSON); the fake must not be more lenient."""
    _, url = fake_mailjet
    body = ('{"Messages": [{"From": {"Email": "noreply@example.com"}, "To": [{"Email": "a@example.org"}], '
            '"TemplateID": 4242, "Variables": {"x": NaN}}]}')
    answer = httpx.post(f"{url}/v3.1/send", content=body, auth=(API_KEY, API_SECRET))
    assert answer.status_code == 400 and answer.json()["ErrorCode"] == "mj-0002"


@pytest.mark.parametrize("value", ["ture", "enabled", "y", "2"])
def test_a_misspelt_sandbox_setting_is_refused(mailjet_env: dict[str, str], fake_mailjet: Fake,
                                               monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """A typo must not silently mean "deliver for real"."""
    monkeypatch.setenv("MAILJET_SANDBOX", value)
    with pytest.raises(InvalidInput, match=f"MAILJET_SANDBOX: must be true or false .*got '{value}'"):
        resources_for()
    assert fake_mailjet[0].requests == []


@pytest.mark.parametrize(("value", "sandbox"), [(" TRUE ", True), ("on", True), ("0", False), ("No", False)])
def test_sandbox_spellings(mailjet_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, value: str,
                           sandbox: bool) -> None:
    monkeypatch.setenv("MAILJET_SANDBOX", value)
    assert resources_for(["mail"])["mail"].sandbox is sandbox


def test_every_boolean_setting_is_strict(mail_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The other users of Env.flag: Google's ADC switch and the shared-storage declaration of distributed runs."""
    monkeypatch.setenv("CONNECTOR_OPS_DRIVE_BACKEND", "google")
    monkeypatch.setenv("GOOGLE_USE_ADC", "yes please")
    with pytest.raises(InvalidInput, match="GOOGLE_USE_ADC: must be true or false"):
        resources_for(["drive"])
    outbox = resources_for(["mail"])["mail"]
    environ = {"CONNECTOR_OPS_EXECUTOR": "celery", "CONNECTOR_OPS_SHARED_STORAGE": "shared"}
    with pytest.raises(InvalidInput, match="CONNECTOR_OPS_SHARED_STORAGE: must be true or false"):
        refuse_single_host("mail", outbox, environ)
    refuse_single_host("mail", outbox, {**environ, "CONNECTOR_OPS_SHARED_STORAGE": "true"})


def test_a_boolean_setting_is_checked_only_where_it_is_read(mail_env: dict[str, str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """As README says: a setting for a backend not in use is not looked at (like SMTP_PORT's)."""
    monkeypatch.setenv("MAILJET_SANDBOX", "ture")
    monkeypatch.setenv("GOOGLE_USE_ADC", "yes please")
    built = resources_for(["mail", "drive"])  # the outbox and the local drive
    assert [type(built[key]).__name__ for key in ("mail", "drive")] == ["OutboxMailResource", "LocalDriveResource"]
    refuse_single_host("mail", built["mail"], {"CONNECTOR_OPS_EXECUTOR": "in_process",
                                               "CONNECTOR_OPS_SHARED_STORAGE": "maybe"})
    monkeypatch.setenv("CONNECTOR_OPS_MAIL_BACKEND", "mailjet")
    with pytest.raises(InvalidInput, match="MAILJET_SANDBOX: must be true or false"):
        resources_for(["mail"])


def test_no_cleartext_warning_for_a_loopback_http_url(mailjet_env: dict[str, str], fake_mailjet: Fake,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    assert mailjet_env["MAILJET_API_URL"].startswith("http://127.0.0.1")
    with caplog.at_level(logging.WARNING, logger="connector_ops"):
        assert send(message()) == {}
    assert [r for r in caplog.records if r.name.startswith("connector_ops") and r.levelno >= logging.WARNING] == []


def test_the_payload_spool_keeps_the_temporary_folders_floor(
        mailjet_env: dict[str, str], fake_mailjet: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A payload past 1 MiB spools to TMPDIR, which went unchecked: below CONNECTOR_OPS_MIN_FREE_DISK the
    message is refused before anything is sent, naming the folder, as Push's and Pull's spools are."""
    import tempfile

    fake, _ = fake_mailjet
    files = resources_for()["platform_files"]
    big = files.add_bytes(os.urandom(2_000_000), "big.bin")
    spool = tmp_path / "tmp"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    stats = os.statvfs(spool)
    monkeypatch.setenv("CONNECTOR_OPS_MIN_FREE_DISK", str(stats.f_bavail * stats.f_frsize + (1 << 40)))
    error = failure(message(attachments=[{"platformFile": big.to_json()}]))
    assert error.status == 500
    assert f"not enough free disk space in {spool}: " in error.body["message"]
    assert fake.requests == [] and os.listdir(spool) == []


def test_a_full_temporary_folder_is_named_not_a_bare_errno(tmp_path: Path) -> None:
    """With the floor off, a TMPDIR that filled under the payload's spool was a bare ``OSError: [Errno 28]``
    500: now it names TMPDIR and its free space, and nothing is sent. (A 2 MiB tmpfs as TMPDIR.)"""
    from tests.test_sqlite_faults import run_on_small_disk

    driver = f"""
import json, os, sys, tempfile
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
small, home = sys.argv[1], sys.argv[2]
os.environ.update({{"CONNECTOR_OPS_HOME": home, "CONNECTOR_OPS_MAIL_BACKEND": "mailjet", "MAILJET_API_KEY": {API_KEY!r},
                   "MAILJET_API_SECRET": {API_SECRET!r}, "CONNECTOR_OPS_MIN_FREE_DISK": "0"}})
from connector_ops import ConnectorError, invoke
from connector_ops.environment import resources_for
from tests.servers import serving
from tests.servers.fake_mailjet import FakeMailjet
fake = FakeMailjet({API_KEY!r}, {API_SECRET!r})
with serving(fake.app) as url:
    os.environ["MAILJET_API_URL"] = url
    pf = resources_for()["platform_files"].add_bytes(os.urandom(3_000_000), "big.bin").to_json()
    tempfile.tempdir = small
    payload = {{"from": "noreply@example.com", "recipients": [{{"to": "alice@example.org"}}], "templateId": 1,
               "templateVariables": "{{}}", "attachments": [{{"platformFile": pf}}]}}
    try:
        said = {{"ok": invoke("mail.send_transactional_message", payload)}}
    except ConnectorError as exc:
        said = {{"status": exc.status, "message": exc.message}}
    said["requests"] = len(fake.requests)
    said["left"] = os.listdir(small)
print(json.dumps(said))
"""
    said = run_on_small_disk(tmp_path, driver, size="2m")
    assert said["status"] == 500, said
    assert said["message"].startswith(f"no space left on the disk of {tmp_path / 'small'}: "), said
    assert "nothing was sent" in said["message"] and said["requests"] == 0 and said["left"] == [], said
