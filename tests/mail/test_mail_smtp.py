"""The SMTP backend against a real SMTP server on loopback (aiosmtpd), plain, STARTTLS and TLS.

Asserts the received MIME message: headers, Bcc absent (but in the envelope), the rendered template
parts, and attachments byte-identical to the platform files.
"""

from __future__ import annotations

import asyncio
import base64
import email
import email.policy
import logging
import os
import ssl
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import trustme

from connector_ops.environment import resources_for
from connector_ops.kernel.errors import ConnectorError, InvalidInput
from connector_ops.resources.mail.base import cleartext_warning
from connector_ops.resources.mail.headers import WrittenHeader, put
from connector_ops.resources.mail.smtp import SmtpMailResource
from tests.mail.conftest import message, send
from tests.servers import free_port
from tests.servers.smtp_server import Recorder, password_authenticator, smtp_server

USER, PASSWORD = "relay-user", "smtp-pw-7c1e9a52d4b3f608"
VARIABLES = '{"first_name": "Alice <b>", "order_id": "12345", "items": [{"name": "Pen", "qty": 2}]}'


_authenticator = password_authenticator(USER, PASSWORD)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def server_tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


@pytest.fixture
def smtp_env(mail_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    templates = tmp_path / "templates"
    (templates / "4242").mkdir(parents=True)
    (templates / "4242" / "subject.j2").write_text("Order {{ order_id }} confirmed\n")
    (templates / "4242" / "body.txt.j2").write_text(
        "Hello {{ first_name }},\n{% for i in items %}- {{ i.qty }} x {{ i.name }}\n{% endfor %}")
    (templates / "4242" / "body.html.j2").write_text("<p>Hello {{ first_name }}</p>")
    (templates / "8").mkdir()
    (templates / "8" / "body.txt.j2").write_text("Total: {{ qty * price }}")
    (templates / "7").mkdir()
    (templates / "7" / "body.html.j2").write_text("<p>Only HTML for {{ first_name }}</p>")
    values = {
        "CONNECTOR_OPS_MAIL_BACKEND": "smtp",
        "SMTP_HOST": "127.0.0.1",
        "SMTP_SECURITY": "none",
        "CONNECTOR_OPS_TEMPLATES_DIR": str(templates),
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return {**mail_env, **values}


def use(monkeypatch: pytest.MonkeyPatch, port: int, **variables: str) -> None:
    monkeypatch.setenv("SMTP_PORT", str(port))
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def received(recorder: Recorder) -> tuple[Any, EmailMessage]:
    [envelope] = recorder.envelopes
    parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    return envelope, parsed


def test_message_headers_parts_bcc_and_attachments(smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    files = resources_for()["platform_files"]
    pdf_bytes = b"%PDF-1.4\n" + os.urandom(200_000)
    pdf = files.add_bytes(pdf_bytes, "invoice-12345.pdf")
    csv = files.add_bytes("région;total\r\nNord;12\r\n".encode("latin-1"), "north.csv")
    with smtp_server(authenticator=_authenticator, auth_require_tls=False) as (recorder, port):
        use(monkeypatch, port, SMTP_USERNAME=USER, SMTP_PASSWORD=PASSWORD)
        assert send(message(templateVariables=VARIABLES, attachments=[
            {"platformFile": pdf.to_json()}, {"platformFile": csv.to_json()}])) == {}
    envelope, mime = received(recorder)
    assert envelope.mail_from == "noreply@example.com"
    assert sorted(envelope.rcpt_tos) == ["alice@example.org", "audit@example.com", "bob@example.org"]
    assert mime["From"] == "Example Shop <noreply@example.com>"
    assert mime["To"] == "Alice <alice@example.org>"
    assert mime["Cc"] == "bob@example.org"
    assert mime["Bcc"] is None and b"audit@example.com" not in envelope.content
    assert mime["Subject"] == "Your order 12345"  # the input's subject wins over the template's
    assert mime["Message-ID"].endswith("@example.com>") and mime["Date"]
    text = mime.get_body(("plain",)).get_content().replace("\r\n", "\n")
    assert text == "Hello Alice <b>,\n- 2 x Pen\n"
    assert mime.get_body(("html",)).get_content().strip() == "<p>Hello Alice &lt;b&gt;</p>"  # autoescaped
    parts = {part.get_filename(): part for part in mime.iter_attachments()}
    assert set(parts) == {"invoice-12345.pdf", "north.csv"}
    assert parts["invoice-12345.pdf"].get_content_type() == "application/pdf"
    assert parts["invoice-12345.pdf"].get_payload(decode=True) == pdf_bytes
    assert parts["north.csv"].get_content_type() == "text/csv"
    assert parts["north.csv"].get_payload(decode=True) == files.read_bytes(csv)


def test_template_subject_and_html_only_template(smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    with smtp_server() as (recorder, port):
        use(monkeypatch, port)
        send(message(subject=None, templateVariables=VARIABLES))
        send(message(subject=None, templateId=7, templateVariables='{"first_name": "Bo"}'))
        send(message(subject="   ", templateVariables=VARIABLES))  # blank means "the template's subject"
    first, second, third = (email.message_from_bytes(e.content, policy=email.policy.default)
                            for e in recorder.envelopes)
    assert first["Subject"] == third["Subject"] == "Order 12345 confirmed"
    assert second["Subject"] is None and second.get_content_type() == "text/html"
    assert second.get_content().strip() == "<p>Only HTML for Bo</p>"


def test_starttls_with_authentication(smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                      ca: trustme.CA, server_tls: ssl.SSLContext, tmp_path: Path) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with smtp_server(tls_context=server_tls, require_starttls=True, authenticator=_authenticator) as (recorder, port):
        use(monkeypatch, port, SMTP_SECURITY="starttls", SMTP_CA_FILE=str(ca_file),
            SMTP_USERNAME=USER, SMTP_PASSWORD=PASSWORD)
        assert send(message(templateVariables=VARIABLES)) == {}
    assert len(recorder.envelopes) == 1


def test_starttls_refuses_an_untrusted_certificate(smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                                    server_tls: ssl.SSLContext) -> None:
    with smtp_server(tls_context=server_tls, require_starttls=True) as (recorder, port):
        use(monkeypatch, port, SMTP_SECURITY="starttls")
        with pytest.raises(ConnectorError) as caught:
            send(message(templateVariables=VARIABLES))
    assert caught.value.status == 500 and "CERTIFICATE_VERIFY_FAILED" in caught.value.body["message"]
    assert recorder.envelopes == []


def test_implicit_tls(smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, ca: trustme.CA,
                      server_tls: ssl.SSLContext, tmp_path: Path) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with smtp_server(ssl_context=server_tls) as (recorder, port):
        use(monkeypatch, port, SMTP_SECURITY="tls", SMTP_CA_FILE=str(ca_file))
        assert send(message(templateVariables=VARIABLES)) == {}
    assert len(recorder.envelopes) == 1


def failure(payload: dict[str, Any]) -> str:
    with pytest.raises(ConnectorError) as caught:
        send(payload)
    assert caught.value.status == 500
    return caught.value.body["message"]


def test_wrong_password(smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    with smtp_server(authenticator=_authenticator, auth_require_tls=False) as (recorder, port):
        use(monkeypatch, port, SMTP_USERNAME=USER, SMTP_PASSWORD="smtp-wrong-pw-93b1")
        text = failure(message(templateVariables=VARIABLES))
    assert text.startswith("SMTP authentication failed at 127.0.0.1:")
    assert text.endswith("check SMTP_USERNAME and SMTP_PASSWORD")
    assert "smtp-wrong-pw-93b1" not in text and recorder.envelopes == []


def test_a_non_ascii_user_name_and_password_log_in_as_utf8(smtp_env: dict[str, str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """smtplib encodes a login as ASCII: a password "hunter2é!" was a 500 "UnicodeEncodeError: 'ascii' codec
    can't encode character '\\xe9' in position 12", a character of the password and where it is. AUTH PLAIN
    carries UTF-8 (RFC 4616)."""
    with smtp_server(authenticator=password_authenticator("rélais", "hunter2é!"),
                     auth_require_tls=False) as (recorder, port):
        use(monkeypatch, port, SMTP_USERNAME="rélais", SMTP_PASSWORD="hunter2é!")
        assert send(message(templateVariables=VARIABLES)) == {}
        use(monkeypatch, port, SMTP_PASSWORD="wrongé-93b1")
        text = failure(message(templateVariables=VARIABLES))
    assert len(recorder.envelopes) == 1
    assert text.startswith("SMTP authentication failed at 127.0.0.1:") and "93b1" not in text


def test_a_non_ascii_password_without_auth_plain_is_named_not_quoted(smtp_env: dict[str, str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with smtp_server(authenticator=password_authenticator(USER, "hunter2é!"), auth_require_tls=False,
                     auth_exclude_mechanism=["PLAIN"]) as (recorder, port):
        use(monkeypatch, port, SMTP_USERNAME=USER, SMTP_PASSWORD="hunter2é!")
        text = failure(message(templateVariables=VARIABLES))
    assert text == ("SMTP_USERNAME or SMTP_PASSWORD holds a non-ASCII character, which only AUTH PLAIN carries "
                    "(as UTF-8, RFC 4616); the SMTP server does not offer it")
    assert recorder.envelopes == []


def test_template_problems_are_500_before_connecting(smtp_env: dict[str, str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with smtp_server() as (recorder, port):
        use(monkeypatch, port)
        assert failure(message(templateId=99, templateVariables="{}")).startswith(
            "templateId: no template 99 in ")
        assert failure(message(templateVariables='{"order_id": 1}')) == (
            "template 4242, body.txt.j2: UndefinedError: 'first_name' is undefined")
        assert failure(message(templateId=8, templateVariables='{"qty": "2", "price": "3"}')) == (
            "template 8, body.txt.j2: TypeError: can't multiply sequence by non-int of type 'str'")
    assert recorder.envelopes == []


def test_a_variable_breaking_the_rendered_subject_is_a_400_naming_it(smtp_env: dict[str, str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A template variable holding CR/LF rendered into subject.j2 (a header) was refused as the template's
    500; the value is the caller's, so it is a 400 naming the variable. A line break the template itself
    writes stays the template's 500."""
    templates = Path(smtp_env["CONNECTOR_OPS_TEMPLATES_DIR"])
    (templates / "9").mkdir()
    (templates / "9" / "body.txt.j2").write_text("hi")
    (templates / "9" / "subject.j2").write_text("Order\n{{ order_id }}")
    with smtp_server() as (recorder, port):
        use(monkeypatch, port)
        with pytest.raises(ConnectorError) as caught:
            send(message(subject=None, templateVariables=VARIABLES.replace('"12345"', '"1\\r\\nBcc: x@evil.org"')))
        assert caught.value.status == 400 and caught.value.body["message"] == (
            "templateVariables.order_id: is rendered into the subject (template 4242, subject.j2), which is one "
            "header line: the rendered subject must not contain line breaks or control characters (found '\\r')")
        assert failure(message(subject=None, templateId=9, templateVariables='{"order_id": "1"}')) == (
            "template 9, subject.j2: the rendered subject must not contain line breaks or control characters "
            "(found '\\n')")
    assert recorder.envelopes == []


def test_refused_recipients(smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    with smtp_server(Recorder(refuse=frozenset({"bob@example.org"}))) as (recorder, port):
        use(monkeypatch, port)
        assert failure(message(templateVariables=VARIABLES)) == (
            "the message was sent, but the SMTP server refused some recipients: bob@example.org (550)")
    assert len(recorder.envelopes) == 1
    with smtp_server(Recorder(refuse=frozenset({"alice@example.org"}))) as (recorder, port):
        use(monkeypatch, port)
        assert failure(message(recipients=[{"to": "alice@example.org"}], templateVariables=VARIABLES)) == (
            "the SMTP server refused every recipient: alice@example.org (550)")
    assert recorder.envelopes == []


def test_unreachable_server_and_missing_host(smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    use(monkeypatch, port)
    assert failure(message(templateVariables=VARIABLES)).startswith(
        f"sending through the SMTP server at 127.0.0.1:{port} failed: ConnectionRefusedError")
    monkeypatch.delenv("SMTP_HOST")
    assert failure(message(templateVariables=VARIABLES)) == "SMTP is not configured: set SMTP_HOST"


def test_bad_smtp_settings_are_reported(smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMTP_SECURITY", "ssl3")
    with pytest.raises(InvalidInput, match="SMTP_SECURITY: must be one of starttls, tls, none, got 'ssl3'"):
        resources_for()
    monkeypatch.setenv("SMTP_SECURITY", "tls")
    monkeypatch.setenv("SMTP_PORT", "smtp")
    with pytest.raises(InvalidInput, match="SMTP_PORT: must be a port number"):
        resources_for()


def test_eml_and_multipart_attachments_arrive_byte_exact(smtp_env: dict[str, str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """message/* and multipart/* may not be base64 (RFC 2046): they go as application/octet-stream."""
    files = resources_for()["platform_files"]
    eml = b"From: a@example.org\r\nSubject: forwarded\r\n\r\nbody line\r\n\xff\xfe binary tail"
    mixed = b"--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--\r\n"
    sent = [files.add_bytes(eml, "old.eml"), files.add_bytes(mixed, "parts.bin")]
    wired = [{"platformFile": sent[0].to_json()},
             {"platformFile": {**sent[1].to_json(), "contentType": "multipart/mixed; boundary=b"}}]
    with smtp_server() as (recorder, port):
        use(monkeypatch, port)
        assert send(message(templateVariables=VARIABLES, attachments=wired)) == {}
    _, mime = received(recorder)
    parts = {part.get_filename(): part for part in mime.iter_attachments()}
    assert parts["old.eml"].get_content_type() == "application/octet-stream"
    assert parts["old.eml"].get_payload(decode=True) == eml
    assert parts["parts.bin"].get_content_type() == "application/octet-stream"
    assert parts["parts.bin"].get_payload(decode=True) == mixed


def test_idn_domains_go_in_ascii_form_to_a_server_without_smtputf8(smtp_env: dict[str, str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with smtp_server(enable_SMTPUTF8=False) as (recorder, port):
        use(monkeypatch, port)
        assert send(message(**{"from": "Shop <noreply@bücher.de>"}, recipients=[{"to": "user@bücher.de"}],
                            templateVariables=VARIABLES)) == {}
    envelope, mime = received(recorder)
    assert envelope.mail_from == "noreply@xn--bcher-kva.de"
    assert envelope.rcpt_tos == ["user@xn--bcher-kva.de"]
    assert mime["From"] == "Shop <noreply@xn--bcher-kva.de>" and mime["To"] == "user@xn--bcher-kva.de"
    assert mime["Message-ID"].endswith("@xn--bcher-kva.de>")


def test_empty_attachment_is_refused_as_on_the_other_backends(smtp_env: dict[str, str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    empty = resources_for()["platform_files"].add_bytes(b"", "empty.txt")
    with smtp_server() as (recorder, port):
        use(monkeypatch, port)
        with pytest.raises(ConnectorError) as caught:
            send(message(templateVariables=VARIABLES, attachments=[{"platformFile": empty.to_json()}]))
    assert caught.value.status == 400
    assert caught.value.body["message"] == (
        "attachments[0].platformFile: 'empty.txt' is empty; empty attachments are refused")
    assert recorder.envelopes == []


def test_smtp_port_and_ca_file_are_checked_when_resources_are_built(smtp_env: dict[str, str],
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    for port in ("0", "65536"):
        monkeypatch.setenv("SMTP_PORT", port)
        with pytest.raises(InvalidInput, match=r"SMTP_PORT: must be a port number \(1 to 65535\)$"):
            resources_for()
    monkeypatch.setenv("SMTP_PORT", "2525")
    missing = tmp_path / "no-such-ca.pem"
    monkeypatch.setenv("SMTP_CA_FILE", str(missing))
    with pytest.raises(InvalidInput, match=f"SMTP_CA_FILE: no such file: {missing}"):
        resources_for()


def test_an_unusable_ca_file_is_named_and_plain_smtp_needs_none(smtp_env: dict[str, str],
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    with smtp_server() as (recorder, port):
        use(monkeypatch, port, SMTP_CA_FILE=str(not_pem))
        assert send(message(templateVariables=VARIABLES)) == {}  # SMTP_SECURITY=none: no TLS context at all
        monkeypatch.setenv("SMTP_SECURITY", "tls")
        text = failure(message(templateVariables=VARIABLES))
    assert text.startswith(f"SMTP_CA_FILE: cannot use {not_pem}: ")
    assert len(recorder.envelopes) == 1


class SilentAfterData(Recorder):
    """Takes the whole message, then never answers the end of DATA."""

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        await asyncio.sleep(5)
        return "250 late"


def test_a_timeout_after_the_whole_message_says_it_may_have_been_delivered(
        smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    with smtp_server(SilentAfterData()) as (recorder, port):
        use(monkeypatch, port)
        resources = resources_for()
        resources["mail"] = resources["mail"].model_copy(update={"timeout_s": 0.5})
        with pytest.raises(ConnectorError) as caught:
            send(message(templateVariables=VARIABLES), resources)
    text = caught.value.body["message"]
    assert caught.value.status == 500 and text.startswith(f"the SMTP server at 127.0.0.1:{port} did not confirm")
    assert "the message may have been delivered, so it was not retried" in text
    assert len(recorder.envelopes) == 1  # sent once


@pytest.mark.parametrize(("host", "warned"), [
    ("smtp.example.com", True), ("10.0.0.5", True), ("2001:db8::1", True), ("localhost.example.com", True),
    ("127.0.0.1", False), ("127.8.9.10", False), ("::1", False), ("[::1]", False), ("localhost", False),
    ("LOCALHOST.", False),
])
def test_the_cleartext_warning_decision(host: str, warned: bool) -> None:
    """Decided from the host name alone: no connection, no DNS."""
    warning = cleartext_warning("SMTP login (SMTP_SECURITY=none with SMTP_USERNAME)", host)
    assert (warning is not None) is warned
    if warning:
        assert warning == (f"SMTP login (SMTP_SECURITY=none with SMTP_USERNAME): sent unencrypted to {host}, "
                           "readable by anyone on the network path")


def test_no_cleartext_warning_on_loopback(smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    with smtp_server(authenticator=_authenticator, auth_require_tls=False) as (recorder, port):
        use(monkeypatch, port, SMTP_USERNAME=USER, SMTP_PASSWORD=PASSWORD)
        with caplog.at_level(logging.WARNING, logger="connector_ops"):
            assert send(message(templateVariables=VARIABLES)) == {}
    assert len(recorder.envelopes) == 1
    assert [r for r in caplog.records if r.name.startswith("connector_ops") and r.levelno >= logging.WARNING] == []


def test_a_remote_cleartext_login_is_warned_once_without_the_secret(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    resource = SmtpMailResource(host="smtp.example.com", security="none", username=USER, password=PASSWORD,
                                templates_dir=str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="connector_ops"):
        resource._warn_cleartext_login()  # the check deliver() runs before login; nothing connects here
        resource._warn_cleartext_login()
    [record] = [r for r in caplog.records if r.name.startswith("connector_ops")]
    assert "sent unencrypted to smtp.example.com" in record.getMessage()
    assert PASSWORD not in record.getMessage() and USER not in record.getMessage()


ENCODED_CRLF = "=?utf-8?q?Hi=0D=0AReply-To:_evil@attacker.example=0D=0ABcc:_evil@attacker.example?="
FORGED_NAME = "=?utf-8?b?" + base64.b64encode(b"CEO <ceo@bank.example>, x").decode() + "?="
LONG_MIXED = "Prix été =?iso-8859-1?q?caf=E9?= " + "long " * 30 + "end"  # several encoded words


@pytest.mark.parametrize("where", ["subject", "recipient name", "sender name", "subject.j2 variable",
                                   "attachment name"])
@pytest.mark.parametrize("text", [ENCODED_CRLF, FORGED_NAME, LONG_MIXED], ids=["crlf", "address list", "long mixed"])
def test_text_that_is_an_encoded_word_arrives_literally(smtp_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                                        where: str, text: str) -> None:
    """Python's email package decoded an encoded word in a subject, a display name or a file name and wrote
    the decoded CR LF raw (Reply-To and Bcc headers of the caller's choosing) or a second From address; the
    received bytes now read back, by a standard parser, as exactly the text given, in one header."""
    files = resources_for()["platform_files"]
    variables = {"first_name": "A", "order_id": "1", "items": []}
    changes: dict[str, Any] = {"subject": None, "templateVariables": variables}
    if where == "subject":
        changes["subject"] = text
    elif where == "recipient name":
        changes["recipients"] = [{"to": "alice@example.org", "name": text}, {"to": "carol@example.org"}]
    elif where == "sender name":
        changes["from"] = f'"{text}" <noreply@example.com>'
    elif where == "subject.j2 variable":
        variables["order_id"] = text
    else:
        changes["attachments"] = [{"platformFile": files.add_bytes(b"data", text + ".pdf").to_json()}]
    with smtp_server() as (recorder, port):
        use(monkeypatch, port)
        send(message(**changes))
    envelope, mime = received(recorder)
    head = envelope.content.split(b"\r\n\r\n")[0]
    assert not [line for line in head.split(b"\r\n") if line.startswith((b"Reply-To", b"Bcc"))]
    assert mime["Reply-To"] is None and mime["Bcc"] is None
    [sender] = mime["From"].addresses
    assert sender.addr_spec == "noreply@example.com"
    recipients = [(a.display_name, a.addr_spec) for a in mime["To"].addresses]
    if where == "subject":
        assert mime["Subject"] == text
    elif where == "recipient name":
        assert recipients == [(text, "alice@example.org"), ("", "carol@example.org")]
    elif where == "sender name":
        assert sender.display_name == text
    elif where == "subject.j2 variable":
        assert mime["Subject"] == f"Order {text} confirmed"
    else:
        [part] = mime.iter_attachments()
        assert part.get_filename() == text + ".pdf" and part.get_payload(decode=True) == b"data"


def test_a_header_the_email_package_cannot_write_is_a_400_naming_the_field() -> None:
    """put() is what refuses a caller's value that would not be one header (HeaderWriteError on a Python
    with the CVE-2024-6923 fix was an uncaught 500)."""
    mime = EmailMessage()
    with pytest.raises(InvalidInput) as caught:
        put(mime, "Subject", "Hi\r\nBcc: x@evil.org", "subject")
    assert caught.value.status == 400 and str(caught.value).startswith("subject: cannot be written in the Subject")
    with pytest.raises(InvalidInput, match=r"^recipients: would be written as more than the To header"):
        put(mime, "To", WrittenHeader("To", ("a@example.org\r\nBcc: x@evil.org",)), "recipients")
