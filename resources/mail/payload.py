"""The Mailjet Send API v3.1 request body, written as a stream (research mail.md §1.2).

Shared by the Mailjet backend (the body it posts) and the outbox (the file it keeps), so what the outbox
shows is exactly what Mailjet would receive, minus the credentials, which never are in the body.
Attachments are base64-encoded straight from the platform files into the sink, so a 15 MB attachment
never has to sit in memory as a 20 MB JSON string.
"""

from __future__ import annotations

from typing import IO, Any

from connector_ops.kernel.json_text import compact_json
from connector_ops.resources.mail.attachments import AttachmentReader
from connector_ops.resources.mail.message import Address, MailMessage


def _address(address: Address) -> dict[str, str]:
    entry = {"Email": address.email}
    if address.name:
        entry["Name"] = address.name
    return entry


def message_fields(message: MailMessage) -> dict[str, Any]:
    """The message object of the payload, everything but ``Attachments``."""
    fields: dict[str, Any] = {"From": _address(message.sender), "To": [_address(a) for a in message.to]}
    if message.cc:
        fields["Cc"] = [_address(a) for a in message.cc]
    if message.bcc:
        fields["Bcc"] = [_address(a) for a in message.bcc]
    if message.subject:
        fields["Subject"] = message.subject  # else the template's own subject applies
    fields["TemplateID"] = message.template_id  # an integer: a string is mj-0004
    fields["TemplateLanguage"] = True  # without it {{var:…}} is silently not rendered
    if message.variables:
        fields["Variables"] = message.variables
    return fields


def _json(value: Any) -> bytes:
    """Compact JSON; a NaN that escaped the input check fails here, never on the wire."""
    return compact_json(value, allow_nan=False).encode()


def write_payload(sink: IO[bytes], message: MailMessage, reader: AttachmentReader, *, sandbox: bool) -> None:
    """Write ``{"SandboxMode", "AdvanceErrorHandling", "Messages": [message]}`` to ``sink``."""
    head = {"SandboxMode": sandbox, "AdvanceErrorHandling": True}
    sink.write(_json(head)[:-1] + b',"Messages":[')
    body = _json(message_fields(message))
    if message.attachments:
        sink.write(body[:-1] + b',"Attachments":[')
        for index, attachment in enumerate(message.attachments):
            meta = _json({"ContentType": attachment.content_type, "Filename": attachment.filename})
            sink.write((b"," if index else b"") + meta[:-1] + b',"Base64Content":"')
            for chunk in reader.base64_chunks(attachment):  # raises at an empty one (Mailjet's mj-0012)
                sink.write(chunk)
            sink.write(b'"}')
        sink.write(b"]}")
    else:
        sink.write(body)
    sink.write(b"]}")
