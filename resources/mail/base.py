"""What every mail backend shares: one ``send`` that checks the attachment budget, then delivers.

Interchangeable backends behind one interface (the idea of Django's e-mail backends): the action sends a
validated :class:`~connector_ops.resources.mail.message.MailMessage` and never knows whether it went to Mailjet, an
SMTP server or the outbox folder.
"""

from __future__ import annotations

import ipaddress
import logging
from abc import ABC, abstractmethod

from connector_ops.kernel.fence import check_fence
from connector_ops.kernel.resource import Resource
from connector_ops.resources.mail.attachments import AttachmentReader
from connector_ops.resources.mail.message import MailMessage
from connector_ops.resources.platform_files import PlatformFileStore

log = logging.getLogger("connector_ops.mail")


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ``::1``), judged from the name alone (no DNS)."""
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def cleartext_warning(secret: str, host: str) -> str | None:
    """The warning to log when ``secret`` (its name, never its value) would cross the network unencrypted to
    ``host``; ``None`` for a loopback host, where nothing leaves the machine (local relays, tests)."""
    if is_loopback(host):
        return None
    return f"{secret}: sent unencrypted to {host}, readable by anyone on the network path"


class MailResource(Resource, ABC):
    """Base of the ``mail`` resources. Subclasses implement :meth:`deliver`."""

    def send(self, message: MailMessage, files: PlatformFileStore) -> str:
        """Send ``message``; returns a reference for logs (a message id or a file name, no personal data)."""
        reader = AttachmentReader(files, message.attachments)
        reader.precheck()  # before any byte is read or any connection is opened
        check_fence("the mail")  # once handed over, it cannot be taken back
        reference = self.deliver(message, reader)
        log.info(
            "mail sent with %s: template %s, %d recipient(s), %d attachment(s), reference %s",
            type(self).__name__, message.template_id, len(message.envelope_recipients),
            len(message.attachments), reference,
        )
        return reference

    @abstractmethod
    def deliver(self, message: MailMessage, attachments: AttachmentReader) -> str:
        """Deliver the message, reading attachment bytes only through ``attachments`` (it owns the budget).

        Raise ``InvalidInput`` for input problems found late (an attachment over the budget) and
        ``UpstreamError``/``ActionFailed`` (status 500) when the provider fails; leave nothing half-written.
        """
