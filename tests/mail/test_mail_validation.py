"""Input checks of Send Transactional Message: 400 naming the field, and nothing is sent.

Runs on the outbox backend: a refused input must leave the outbox folder empty.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from connector_ops.kernel.errors import ConnectorError
from connector_ops.mail.actions import to_message
from connector_ops.mail.models import SendTransactionalMessageInput
from tests.mail.conftest import message, send

ATTACHMENT = {"platformFile": {"name": "a.pdf", "link": "http://127.0.0.1:9/files/x", "size": 3}}
RECIPIENT = {"to": "alice@example.org"}

BAD_INPUTS: list[tuple[str, dict[str, Any], str]] = [
    ("from missing", message(**{"from": None}), "from: is required"),
    ("from invalid", message(**{"from": "not-an-address"}), "from: 'not-an-address' is not a valid"),
    ("from header injection", message(**{"from": "a@example.com\r\nBcc: x@evil.com"}), "from: the address must not"),
    ("recipients missing", message(recipients=None), "recipients: is required"),
    ("recipients empty", message(recipients=[]), "recipients: List should have at least 1 item"),
    ("recipients over 50", message(recipients=[{"to": f"r{i}@example.org"} for i in range(51)]),
     "recipients: List should have at most 50 items"),
    ("no To recipient", message(recipients=[{"to": "a@example.org", "type": "Cc"}]),
     "recipients: at least one recipient must be of type To"),
    ("recipient address invalid", message(recipients=[{"to": "alice@"}]), "recipients[0].to: 'alice@' is not a valid"),
    ("recipient with a non-ASCII local part", message(recipients=[{"to": "josé@example.org"}]),
     "recipients[0].to: 'josé@example.org' has non-ASCII characters before the @ ('josé'): sending it needs "
     "the SMTPUTF8 extension"),
    ("sender with a non-ASCII local part", message(**{"from": "Shop <josé@example.com>"}),
     "from: 'josé@example.com' has non-ASCII characters before the @"),
    ("recipient address missing", message(recipients=[{"name": "Alice"}]), "recipients[0].to: is required"),
    ("recipient type unknown", message(recipients=[{"to": "a@example.org", "type": "Reply-To"}]),
     "recipients[0].type: Input should be 'To', 'Cc' or 'Bcc'"),
    ("recipient name with CRLF", message(recipients=[{"to": "a@example.org", "name": "A\r\nBcc: x@evil.com"}]),
     "recipients[0].name: the name must not contain line breaks"),
    ("recipient name with NUL", message(recipients=[{"to": "a@example.org", "name": "A\x00"}]),
     "recipients[0].name: holds a NUL character"),
    ("recipient unknown field", message(recipients=[{"to": "a@example.org", "email": "x"}]),
     "recipients[0].email: is not a known field"),
    ("subject with LF", message(subject="Hello\nBcc: x@evil.com"), "subject: the subject must not contain line"),
    ("subject with U+2028", message(subject="Hello\u2028there"), "subject: the subject must not contain"),
    ("subject too long", message(subject="x" * 256), "subject: String should have at most 255 characters"),
    ("templateId missing", message(templateId=None), "templateId: is required"),
    ("templateId text", message(templateId="abc"), "templateId: must be an integer, got 'abc'"),
    ("templateId fraction", message(templateId=42.5), "templateId: must be an integer, got 42.5"),
    ("templateId boolean", message(templateId=True), "templateId: must be an integer, got True"),
    ("templateId zero", message(templateId=0), "templateId: Input should be greater than 0"),
    ("templateVariables missing", message(templateVariables=None), "templateVariables: is required"),
    ("templateVariables not JSON", message(templateVariables="{name: 1}"), "templateVariables: is not valid JSON"),
    ("templateVariables array", message(templateVariables="[1, 2]"),
     "templateVariables: must be a JSON object (key-value), got list"),
    ("templateVariables null", message(templateVariables='{"a": {"b": [1, null]}}'),
     "templateVariables: null is not allowed (Mailjet refuses null values), found at 'a.b[1]'"),
    ("templateVariables NaN", message(templateVariables='{"total": NaN}'),
     "templateVariables: total: NaN is not a JSON number"),
    ("templateVariables 1e999", message(templateVariables='{"a": {"b": [-1e999]}}'),
     "templateVariables: a.b[0]: -Infinity is not a JSON number"),
    ("templateVariables float nan from Python", message(templateVariables={"x": float("nan")}),
     "templateVariables.x: NaN is not a JSON number"),
    ("templateVariables Decimal infinity from Python", message(templateVariables={"x": [Decimal("Infinity")]}),
     "templateVariables.x[0]: Infinity is not a JSON number"),
    ("attachment without platformFile", message(attachments=[{"file": {}}]),
     "attachments[0].platformFile: is required"),
    ("attachment name missing", message(attachments=[{"platformFile": {"link": "http://h/x", "size": 1}}]),
     "attachments[0].platformFile.name: is required"),
    ("attachment link missing", message(attachments=[{"platformFile": {"name": "a.pdf", "size": 1}}]),
     "attachments[0].platformFile.link: is required"),
    ("attachment size missing", message(attachments=[{"platformFile": {"name": "a.pdf", "link": "http://h/x"}}]),
     "attachments[0].platformFile.size: is required"),
    ("attachment size negative",
     message(attachments=[{"platformFile": {"name": "a.pdf", "link": "http://h/x", "size": -1}}]),
     "attachments[0].platformFile.size: Input should be greater than or equal to 0"),
    ("attachment name with CR",
     message(attachments=[{"platformFile": {"name": "a\r.pdf", "link": "http://h/x", "size": 1}}]),
     "attachments[0].platformFile.name: the file name must not contain"),
    ("attachment name a folder",
     message(attachments=[{"platformFile": {"name": "reports/", "link": "http://h/x", "size": 1}}]),
     "attachments[0].platformFile.name: must be a file name"),
    ("attachment name a parent folder",
     message(attachments=[{"platformFile": {"name": "reports\\..", "link": "http://h/x", "size": 1}}]),
     "attachments[0].platformFile.name: must be a file name"),
    ("attachment content type invalid",
     message(attachments=[{"platformFile": {"name": "a.pdf", "link": "http://h/x", "size": 1, "contentType": "pdf"}}]),
     "attachments[0].platformFile.contentType: 'pdf' is not a media type"),
    ("attachments over 15 MB (declared)",
     message(attachments=[{"platformFile": {"name": "a.bin", "link": "http://127.0.0.1:9/a", "size": 15_000_001}}]),
     "attachments: total size 15,000,001 bytes is over the limit"),
    ("attachment link not http",
     message(attachments=[{"platformFile": {"name": "a.pdf", "link": "file:///etc/passwd", "size": 1}}]),
     "attachments[0].platformFile.link: must be an http(s) URL"),
    ("unknown field", message(cc="x@example.org"), "cc: is not a known field"),
]


@pytest.mark.parametrize(("payload", "expected"), [(p, e) for _, p, e in BAD_INPUTS],
                         ids=[name for name, _, _ in BAD_INPUTS])
def test_bad_input_is_400_naming_the_field(mail_env: dict[str, str], payload: dict[str, Any],
                                          expected: str) -> None:
    with pytest.raises(ConnectorError) as caught:
        send(payload)
    assert caught.value.status == 400
    assert expected in caught.value.body["message"]
    outbox = Path(mail_env["CONNECTOR_OPS_HOME"]) / "outbox"
    assert not outbox.exists() or not list(outbox.iterdir())  # nothing sent, nothing half-written


def test_every_problem_is_reported_at_once(mail_env: dict[str, str]) -> None:
    with pytest.raises(ConnectorError) as caught:
        send({"from": "x", "recipients": [], "templateId": "a", "templateVariables": "[]"})
    text = caught.value.body["message"]
    for field in ("from:", "recipients:", "templateId:", "templateVariables:"):
        assert field in text


def test_mapping_to_the_message() -> None:
    inp = SendTransactionalMessageInput.model_validate(message(
        recipients=[
            {"to": "Alice@Example.org", "type": "to", "name": "  Alice  "},
            {"to": "bob@example.org", "type": "CC", "name": ""},
            {"to": "alice@example.org", "type": "Bcc"},  # already a To: kept once, visibly
            {"to": "carol@example.org", "type": None},
            {"to": "dave@example.org", "type": "bcc"},
        ],
        templateId="4242",
        templateVariables="  ",
        subject="",
        attachments={"name": "dir\\report.csv", "link": "http://h/files/1", "size": 4, "contentType":
                     "Text/CSV; charset=utf-8"},
    ))
    msg = to_message(inp)
    assert msg.sender.email == "noreply@example.com" and msg.sender.name == "Example Shop"
    assert [(a.email, a.name) for a in msg.to] == [("Alice@example.org", "Alice"), ("carol@example.org", None)]
    assert [(a.email, a.name) for a in msg.cc] == [("bob@example.org", None)]
    assert [a.email for a in msg.bcc] == ["dave@example.org"]
    assert msg.template_id == 4242 and msg.variables == {} and msg.subject is None
    [attachment] = msg.attachments
    assert (attachment.filename, attachment.content_type) == ("report.csv", "text/csv")
    assert attachment.field == "attachments[0].platformFile"


@pytest.mark.parametrize("name", ["..\\..\\Startup\\report.csv", "C:\\Users\\Public\\report.csv", "C:report.csv",
                                  "../../report.csv"])
def test_an_attachment_is_named_by_its_file_name_only(name: str) -> None:
    """A mail client saves an attachment under its name: no folder (``/`` or ``\\``) or drive letter goes in."""
    inp = SendTransactionalMessageInput.model_validate(message(
        attachments=[{"name": name, "link": "http://h/files/1", "size": 4}]))
    assert [a.filename for a in to_message(inp).attachments] == ["report.csv"]


def test_variables_may_be_given_as_a_mapping_and_content_type_is_guessed() -> None:
    inp = SendTransactionalMessageInput.model_validate(message(
        templateVariables={"n": 1, "nested": {"ok": [1, "", False]}},
        attachments=[{"name": "invoice.pdf", "link": "http://h/files/1", "size": 4}],
    ))
    msg = to_message(inp)
    assert msg.variables == {"n": 1, "nested": {"ok": [1, "", False]}}
    assert msg.attachments[0].content_type == "application/pdf"
    assert json.loads(json.dumps(inp.model_dump(by_alias=True)))["from"] == "Example Shop <noreply@example.com>"
