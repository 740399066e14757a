"""Reading attachment bytes from platform files inside the 15 MB budget, in bounded memory.

The budget is checked twice: once before anything is read, from what is known about the files (the
size on disk for our own files, the declared ``size`` otherwise), and again while the bytes stream in,
because a remote server may send more than it declared. Either way the error is raised before the
message leaves the process.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator

import httpx

from connector_ops.kernel.errors import ActionFailed, InvalidInput, NotFound, UpstreamError
from connector_ops.resources.mail.message import MAX_ATTACHMENT_BYTES, Attachment
from connector_ops.resources.platform_files import PlatformFileStore

CHUNK = 3 * (1 << 18)  # a multiple of 3, so base64 of each chunk concatenates cleanly


def _too_big(total: int, limit: int) -> InvalidInput:
    return InvalidInput("attachments", f"total size {total:,} bytes is over the limit of {limit:,} bytes (15 MB)")


class AttachmentReader:
    """Streams the attachments of one message and enforces their total size."""

    def __init__(self, files: PlatformFileStore, attachments: Iterable[Attachment],
                 limit: int = MAX_ATTACHMENT_BYTES) -> None:
        self.files = files
        self.attachments = list(attachments)
        self.limit = limit
        self.read_total = 0

    def precheck(self) -> None:
        """Refuse before any download when the known sizes already exceed the budget."""
        total = sum(self.files.size_of(a.file) or 0 for a in self.attachments)
        if total > self.limit:
            raise _too_big(total, self.limit)

    def chunks(self, attachment: Attachment) -> Iterator[bytes]:
        """The bytes of one attachment; raises once the running total passes the budget, and at the end of
        an empty file: Mailjet refuses an empty attachment (``mj-0012``), so every backend does."""
        size = 0
        try:
            with self.files.open(attachment.file, field=attachment.field) as stream:
                while chunk := stream.read(CHUNK):
                    size += len(chunk)
                    self.read_total += len(chunk)
                    if self.read_total > self.limit:
                        raise _too_big(self.read_total, self.limit)
                    yield chunk
        except (NotFound, UpstreamError, httpx.HTTPError, OSError) as exc:
            raise ActionFailed(f"{attachment.field}: cannot read {attachment.filename!r}: {exc}") from exc
        if not size:
            raise InvalidInput(attachment.field, f"{attachment.filename!r} is empty; empty attachments are refused")

    def read(self, attachment: Attachment) -> bytes:
        """All bytes of one attachment (bounded by the budget), for MIME parts."""
        return b"".join(self.chunks(attachment))

    def base64_chunks(self, attachment: Attachment) -> Iterator[bytes]:
        """Standard base64 of the attachment, without line breaks, produced chunk by chunk."""
        carry = b""
        for chunk in self.chunks(attachment):
            data = carry + chunk
            cut = len(data) - len(data) % 3
            carry = data[cut:]
            if cut:
                yield base64.b64encode(data[:cut])
        if carry:
            yield base64.b64encode(carry)
