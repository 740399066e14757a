"""The Mailjet Send API v3.1 request body, written as a stream (research mail.md §1.2).

Shared by the Mailjet backend (the body it posts) and the outbox (the file it keeps), so what the outbox
shows is exactly what Mailjet would receive, minus the credentials, which never are in the body.
Attachments are base64-encoded straight from the platform files into the sink, so a 15 MB attachment
never has to sit in memory as a 20 MB JSON string.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping
from decimal import Decimal
from typing import IO, Any

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


def _python_number(value: Any) -> Any:
    """The encoder's ``default``: NumPy's numbers as Python's (``check_payload`` admits them as JSON numbers)."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"a {type(value).__name__} is not a JSON value")


#: compact JSON; ``allow_nan=False`` so a NaN that escaped the input check fails here, never on the wire
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                           default=_python_number).encode


def _text(value: Any) -> str:
    """Compact JSON of ``value``, each ``Decimal`` written with its own digits (``json`` cannot write one,
    and through ``float`` ``2.50`` or a 20-digit amount would change)."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} is not a JSON number")
        return str(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_encode(str(k))}:{_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(map(_text, value)) + "]"
    return _encode(value)


def _json(value: Any) -> bytes:
    return _text(value).encode()


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
