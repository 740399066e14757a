"""The validated message every mail backend sends, and the checks that make a value safe in a header.

The action builds a :class:`MailMessage` only from input that passed these checks, so a backend never
has to wonder whether a subject carries a line break (header injection) or whether a recipient list is
empty. Limits are Mailjet's (research mail.md §3); every backend applies them so that switching from the
outbox to Mailjet never turns a message that "worked" into one that is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from connector_ops.kernel.addresses import normalised_email
from connector_ops.kernel.platform_file import PlatformFile

MAX_RECIPIENTS = 50  # To + Cc + Bcc (Mailjet send-0015)
MAX_SUBJECT_LENGTH = 255  # Mailjet mj-0006
MAX_ATTACHMENT_BYTES = 15_000_000  # "15 MB total" (Mailjet); decimal MB, the stricter reading

#: C0/C1 controls, DEL, and every other line break ``str.splitlines()`` knows (research §7.1).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MEDIA_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$")


def check_header_text(value: str, what: str = "value") -> str:
    """Refuse (never strip) characters that could end a header line or hide in one."""
    bad = CONTROL.search(value)
    if bad:
        raise ValueError(f"{what} must not contain line breaks or control characters (found {bad.group()!r})")
    return value


@dataclass(frozen=True)
class Address:
    email: str
    name: str | None = None


def parse_address(value: str, *, allow_display_name: bool = False) -> Address:
    """A syntactically valid address (no DNS look-up: the op stays fast and hermetic), normalised.

    ``allow_display_name`` accepts ``Shop <noreply@example.com>`` (used for ``from``). A non-ASCII local
    part (``josé@…``) is refused for every backend: SMTP would need SMTPUTF8 for it, and the same input
    must pass or fail the same way whatever the backend. An internationalised domain is fine: it has an
    ASCII (IDNA) form, which the SMTP backend sends.
    """
    check_header_text(value, "the address")
    return Address(*normalised_email(value, allow_display_name=allow_display_name, ascii_local_part=True))


def find_null(value: Any, path: str = "") -> str | None:
    """The JSON path of the first ``null`` inside ``value`` (Mailjet refuses null variables), else None."""
    if value is None:
        return path or "(the whole value)"
    if isinstance(value, dict):
        for key, item in value.items():
            found = find_null(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = find_null(item, f"{path}[{index}]")
            if found:
                return found
    return None


def media_type(value: str) -> str:
    """``type/subtype`` without parameters (Mailjet adds its own ``charset`` to text types)."""
    bare = value.split(";", 1)[0].strip().lower()
    if not _MEDIA_TYPE.fullmatch(bare):
        raise ValueError(f"{value!r} is not a media type such as application/pdf")
    return bare


@dataclass(frozen=True)
class Attachment:
    """A platform file to attach: its bytes are read by the backend, within the size budget."""

    filename: str
    content_type: str
    file: PlatformFile
    field: str  # "attachments[0].platformFile", for error messages


@dataclass(frozen=True)
class MailMessage:
    """One template message, already validated (addresses, header text, limits, variables)."""

    sender: Address
    to: list[Address]
    template_id: int
    variables: dict[str, Any] = field(default_factory=dict)
    cc: list[Address] = field(default_factory=list)
    bcc: list[Address] = field(default_factory=list)
    subject: str | None = None
    attachments: list[Attachment] = field(default_factory=list)

    @property
    def envelope_recipients(self) -> list[str]:
        """Every address the message goes to (To, Cc and Bcc): the SMTP ``RCPT TO`` list."""
        return [a.email for a in (*self.to, *self.cc, *self.bcc)]
