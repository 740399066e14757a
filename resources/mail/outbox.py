"""OutboxMailResource: the offline default; each message becomes one JSON file in a folder.

The file holds exactly the Mailjet v3.1 request body the Mailjet backend would post (attachments
included as base64), so a pipeline can be developed and checked without an account. It is written to a
temporary name and renamed into place: a reader of the folder never sees half a message, and the
temporary files of writers killed mid-write are swept when the outbox starts (its first message).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from pydantic import PrivateAttr

from connector_ops.kernel.atomic import atomic_write, sweep_leftovers
from connector_ops.kernel.disk import DEFAULT_MIN_FREE_DISK
from connector_ops.resources.mail.attachments import AttachmentReader
from connector_ops.resources.mail.base import MailResource
from connector_ops.resources.mail.message import MailMessage
from connector_ops.resources.mail.payload import write_payload


class OutboxMailResource(MailResource):
    """Writes ``<outbox_dir>/<UTC timestamp>-<random>.json``, named by the UTC time each was written.

    Names sort in sending order only while the host's clock runs steadily: after it steps back (an NTP
    correction, a VM resumed) a later message can sort first. An exact order would need a counter shared by
    every process writing to the folder, under a lock; the outbox is a development aid and does without."""

    outbox_dir: str
    """Folder the messages are written to, one JSON file each."""
    min_free_disk: int = DEFAULT_MIN_FREE_DISK
    """Bytes kept free on the outbox's disk (``CONNECTOR_OPS_MIN_FREE_DISK``): a message holds its attachments
    in base64, as large as the files it carries."""

    def single_host(self) -> str | None:
        return f"the outbox is the folder {self.outbox_dir} of one host; use CONNECTOR_OPS_MAIL_BACKEND=mailjet or smtp"

    _swept: bool = PrivateAttr(default=False)

    def deliver(self, message: MailMessage, attachments: AttachmentReader) -> str:
        root = Path(self.outbox_dir)
        root.mkdir(parents=True, exist_ok=True)
        if not self._swept:  # the outbox's start: remove what writers killed mid-write left behind
            sweep_leftovers(root)
            self._swept = True
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        final = root / f"{stamp}-{uuid.uuid4().hex[:12]}.json"
        with atomic_write(final, durable=True, min_free_disk=self.min_free_disk) as sink:
            write_payload(sink, message, attachments, sandbox=False)
        return final.name
