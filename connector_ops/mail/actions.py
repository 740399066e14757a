"""The e-mail action (spec 4.B): the one implementation every entry point calls.

Input was checked by :mod:`connector_ops.mail.models` (400 naming the field); here it becomes a
:class:`~connector_ops.resources.mail.message.MailMessage` and goes to whichever ``mail`` backend is configured.
Provider failures leave as status 500 ``{"message": …}``, the only error the spec shows.
"""

from __future__ import annotations

from connector_ops.mail import models as m
from connector_ops.models import EmptyOutput
from connector_ops.registry import action
from connector_ops.resources.mail.base import MailResource
from connector_ops.resources.mail.message import Address, Attachment, MailMessage, parse_address
from connector_ops.resources.platform_files import PlatformFileStore, guess_content_type


def _recipients(inp: m.SendTransactionalMessageInput) -> dict[str, list[Address]]:
    """To/Cc/Bcc buckets; an address listed twice is kept once, in its most visible place (To > Cc > Bcc)."""
    buckets: dict[str, list[Address]] = {"To": [], "Cc": [], "Bcc": []}
    seen: set[str] = set()
    for kind in buckets:
        for r in inp.recipients:
            if r.type != kind:
                continue
            address = parse_address(r.to)
            if address.email.lower() not in seen:
                seen.add(address.email.lower())
                buckets[kind].append(Address(address.email, r.name))
    return buckets


def to_message(inp: m.SendTransactionalMessageInput) -> MailMessage:
    buckets = _recipients(inp)
    attachments = [
        Attachment(
            filename=a.platform_file.name,
            content_type=a.platform_file.content_type or guess_content_type(a.platform_file.name),
            file=a.platform_file,
            field=f"attachments[{i}].platformFile",
        )
        for i, a in enumerate(inp.attachments)
    ]
    return MailMessage(
        sender=parse_address(inp.from_, allow_display_name=True),
        to=buckets["To"],
        cc=buckets["Cc"],
        bcc=buckets["Bcc"],
        subject=inp.subject,
        template_id=inp.template_id,
        variables=inp.variables,
        attachments=attachments,
    )


@action("mail.send_transactional_message", m.SendTransactionalMessageInput, EmptyOutput,
        resources=("mail", "platform_files"), extra_inputs={"attachments": "attachments"})
def send_transactional_message(inp: m.SendTransactionalMessageInput, mail: MailResource,
                               platform_files: PlatformFileStore) -> EmptyOutput:
    """Send one template e-mail to its recipients, with platform files attached; returns {}."""
    mail.send(to_message(inp), platform_files)
    return EmptyOutput()
