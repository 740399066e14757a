"""SmtpMailResource: for users without Mailjet; any SMTP server, templates from a local folder.

The MIME message is built with the standard library's modern policy (which itself refuses line breaks
in headers), rendered from :mod:`connector_ops.resources.mail.templates`, and sent with ``smtplib``. Addresses go
in their ASCII form (an internationalised domain as ``xn--…``), so no server needs SMTPUTF8. Bcc recipients are
only in the envelope (``RCPT TO``), never in a header, so no recipient can see them. The template is
rendered and the attachments read (within the 15 MB budget) before the connection is opened.
"""

from __future__ import annotations

import base64
import smtplib
import ssl
from email.errors import MessageError
from email.headerregistry import Address as HeaderAddress
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import TYPE_CHECKING, Literal

from pydantic import PrivateAttr

from connector_ops.kernel.addresses import ascii_email
from connector_ops.kernel.errors import ActionFailed, UpstreamError
from connector_ops.resources.mail.attachments import AttachmentReader
from connector_ops.resources.mail.base import MailResource, cleartext_warning, log
from connector_ops.resources.mail.headers import (
    WrittenHeader,
    address_list,
    attachment_disposition,
    decodable,
    put,
    unstructured,
)
from connector_ops.resources.mail.message import Address, MailMessage
from connector_ops.resources.mail.templates import LocalTemplates

if TYPE_CHECKING:  # typeshed's alias (collections.abc.Buffer from Python 3.12): what smtplib.SMTP.send takes
    from _typeshed import ReadableBuffer

Security = Literal["starttls", "tls", "none"]
DEFAULT_PORTS = {"starttls": 587, "tls": 465, "none": 25}


def _text(reply: bytes | str) -> str:
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)


def _part_type(content_type: str) -> tuple[str, str]:
    """``(maintype, subtype)`` of an attachment's MIME part. RFC 2046 allows only 7bit/8bit/binary for
    ``message/*`` and ``multipart/*``, but an attachment is sent base64, so recipients would parse it
    as a broken nested message; as ``application/octet-stream`` (the file name kept) its bytes arrive exact,
    as they do through Mailjet or in the outbox."""
    maintype, subtype = content_type.split("/", 1)
    if maintype in ("message", "multipart"):
        return "application", "octet-stream"
    return maintype, subtype


def _address_list(name: str, addresses: list[Address]) -> list[HeaderAddress] | WrittenHeader:
    return address_list(name, [(a.name or "", ascii_email(a.email)) for a in addresses])


class _Watched(smtplib.SMTP):
    """Knows whether the whole message went out (the body up to DATA's final ``.``): after that, a
    failure (a timeout waiting for the server's last reply) may come after the server took the message."""

    message_sent = False

    def send(self, s: ReadableBuffer | str) -> None:
        super().send(s)
        if isinstance(s, bytes) and s.endswith(b"\r\n.\r\n"):  # only data() sends bytes: the message body
            self.message_sent = True

    def login(self, user: str, password: str, *, initial_response_ok: bool = True) -> tuple[int, bytes]:
        """smtplib's own login, but a user name or password with a non-ASCII character goes as UTF-8 through
        AUTH PLAIN (RFC 4616): smtplib encodes every login as ASCII, and its UnicodeEncodeError (a 500) quoted
        the character of the password and its position."""
        if f"{user}{password}".isascii():
            return super().login(user, password, initial_response_ok=initial_response_ok)
        self.ehlo_or_helo_if_needed()
        if "PLAIN" not in self.esmtp_features.get("auth", "").upper().split():
            raise ActionFailed("SMTP_USERNAME or SMTP_PASSWORD holds a non-ASCII character, which only AUTH PLAIN "
                               "carries (as UTF-8, RFC 4616); the SMTP server does not offer it")
        token = base64.b64encode(b"\0" + user.encode() + b"\0" + password.encode()).decode("ascii")
        code, reply = self.docmd("AUTH", f"PLAIN {token}")
        if code in (235, 503):  # authenticated / already authenticated, as smtplib's login
            return code, reply
        raise smtplib.SMTPAuthenticationError(code, reply)


class _WatchedSSL(_Watched, smtplib.SMTP_SSL):
    pass


class SmtpMailResource(MailResource):
    """SMTP with ``security`` = ``starttls`` (default, port 587), ``tls`` (465) or ``none`` (25)."""

    host: str | None = None
    """SMTP server host."""
    port: int | None = None
    """SMTP server port (default: 587 starttls, 465 tls, 25 none)."""
    username: str | None = None
    """SMTP user name (none: no authentication)."""
    password: str | None = None
    """SMTP password (secret: an environment reference)."""
    security: Security = "starttls"
    """starttls, tls or none."""
    ca_file: str | None = None
    """PEM file of a private CA that signed the server's certificate (default: the system's CAs)."""
    templates_dir: str
    """Folder of the local templates (<templateId>.subject / .txt / .html)."""
    timeout_s: float = 30.0
    """Timeout of the SMTP conversation, in seconds."""

    _warned: bool = PrivateAttr(default=False)

    def __repr__(self) -> str:
        return f"SmtpMailResource(host={self.host!r}, port={self.port!r}, security={self.security!r})"

    __str__ = __repr__

    def build(self, message: MailMessage, attachments: AttachmentReader) -> EmailMessage:
        """The MIME message (no Bcc header): rendered template, then attachments as MIME parts. The caller's
        text goes in through :mod:`~connector_ops.resources.mail.headers`, so it arrives as given."""
        rendered = LocalTemplates(self.templates_dir).render(message.template_id, message.variables)
        mime = EmailMessage()
        put(mime, "From", _address_list("From", [message.sender]), "from")
        put(mime, "To", _address_list("To", message.to), "recipients")
        if message.cc:
            put(mime, "Cc", _address_list("Cc", message.cc), "recipients")
        subject = message.subject or rendered.subject
        if subject:
            put(mime, "Subject", unstructured("Subject", subject),
                "subject" if message.subject else f"templateVariables (the subject rendered by template "
                                                  f"{message.template_id})")
        mime["Date"] = formatdate(localtime=True)
        mime["Message-ID"] = make_msgid(domain=ascii_email(message.sender.email).rpartition("@")[2])
        if rendered.text is not None:
            mime.set_content(rendered.text)
            if rendered.html is not None:
                mime.add_alternative(rendered.html, subtype="html")
        else:
            mime.set_content(rendered.html or "", subtype="html")
        for attachment in message.attachments:
            maintype, subtype = _part_type(attachment.content_type)
            own = decodable(attachment.filename)
            mime.add_attachment(attachments.read(attachment), maintype=maintype, subtype=subtype,
                                filename=None if own else attachment.filename)
            parts = mime.get_payload()
            assert isinstance(parts, list)  # (multipart: an attachment was just added)
            part = parts[-1]
            assert isinstance(part, EmailMessage)  # (an EmailMessage makes its parts of its own class)
            put(part, "Content-Disposition", attachment_disposition(attachment.filename) if own
                else part["Content-Disposition"], attachment.field)
        return mime

    def _warn_cleartext_login(self) -> None:
        if self.security == "none" and self.host and not self._warned:
            self._warned = True
            warning = cleartext_warning("SMTP login (SMTP_SECURITY=none with SMTP_USERNAME)", self.host)
            if warning:
                log.warning(warning)

    def _tls(self) -> ssl.SSLContext:
        """The TLS context, only when TLS is used; an unreadable ``ca_file`` is named with its variable."""
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except OSError as exc:  # FileNotFoundError, PermissionError, ssl.SSLError (not PEM)
            raise ActionFailed(f"SMTP_CA_FILE: cannot use {self.ca_file}: {exc.strerror or exc}") from None

    def _connect(self) -> _Watched:
        if not self.host:
            raise ActionFailed("SMTP is not configured: set SMTP_HOST")
        port = self.port or DEFAULT_PORTS[self.security]
        if self.security == "tls":
            return _WatchedSSL(self.host, port, timeout=self.timeout_s, context=self._tls())
        smtp = _Watched(self.host, port, timeout=self.timeout_s)
        if self.security == "starttls":
            try:
                smtp.starttls(context=self._tls())
            except BaseException:
                smtp.close()
                raise
        return smtp

    def deliver(self, message: MailMessage, attachments: AttachmentReader) -> str:
        mime = self.build(message, attachments)
        where = f"{self.host}:{self.port or DEFAULT_PORTS[self.security]}"
        connection: _Watched | None = None
        try:
            with self._connect() as smtp:
                connection = smtp
                if self.username:
                    self._warn_cleartext_login()
                    smtp.login(self.username, self.password or "")
                refused = smtp.send_message(mime, from_addr=ascii_email(message.sender.email),
                                            to_addrs=[ascii_email(a) for a in message.envelope_recipients])
        except smtplib.SMTPAuthenticationError as exc:
            raise UpstreamError(f"SMTP authentication failed at {where} ({exc.smtp_code}): "
                                "check SMTP_USERNAME and SMTP_PASSWORD") from None
        except smtplib.SMTPRecipientsRefused as exc:
            refused_all = ", ".join(f"{addr} ({code})" for addr, (code, _) in exc.recipients.items())
            raise UpstreamError(f"the SMTP server refused every recipient: {refused_all}") from None
        except smtplib.SMTPSenderRefused as exc:
            raise UpstreamError(f"the SMTP server refused the sender {exc.sender} ({exc.smtp_code}: "
                                f"{_text(exc.smtp_error)})") from None
        except smtplib.SMTPResponseException as exc:
            raise UpstreamError(f"the SMTP server at {where} answered {exc.smtp_code}: "
                                f"{_text(exc.smtp_error)}") from None
        except MessageError as exc:  # every header of the caller's text was checked by put(): this one is ours
            raise ActionFailed(f"the message could not be written as MIME: {type(exc).__name__}: {exc}") from None
        except (smtplib.SMTPException, OSError) as exc:
            if connection is not None and connection.message_sent:  # like Mailjet's read timeout: no retry
                raise UpstreamError(
                    f"the SMTP server at {where} did not confirm the message ({type(exc).__name__}: {exc}) after "
                    "receiving all of it; the message may have been delivered, so it was not retried") from None
            raise UpstreamError(f"sending through the SMTP server at {where} failed: "
                                f"{type(exc).__name__}: {exc}") from None
        if refused:
            listed = ", ".join(f"{addr} ({code})" for addr, (code, _) in refused.items())
            raise UpstreamError(f"the message was sent, but the SMTP server refused some recipients: {listed}")
        return str(mime["Message-ID"])
