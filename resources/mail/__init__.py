"""The ``mail`` resource: one interface, three backends chosen by ``CONNECTOR_OPS_MAIL_BACKEND``.

* ``outbox`` (default): messages become JSON files in ``CONNECTOR_OPS_OUTBOX_DIR`` (home/outbox);
* ``mailjet``: ``MAILJET_API_KEY``/``MAILJET_API_SECRET`` (secrets), ``MAILJET_API_URL``, ``MAILJET_SANDBOX``;
* ``smtp``: ``SMTP_HOST``, ``SMTP_PORT``, ``SMTP_USERNAME``, ``SMTP_PASSWORD`` (secret), ``SMTP_SECURITY``
  (``starttls``/``tls``/``none``), ``SMTP_CA_FILE``, templates in ``CONNECTOR_OPS_TEMPLATES_DIR``
  (home/templates).

Secrets go through ``env.value`` so Definitions get ``EnvVar``s, resolved only inside the run.
"""

from __future__ import annotations

from connector_ops.environment import Env, resource_builder
from connector_ops.errors import InvalidInput
from resources.mail.base import MailResource
from resources.mail.mailjet import DEFAULT_API_URL, MailjetResource
from resources.mail.message import Address, Attachment, MailMessage
from resources.mail.outbox import OutboxMailResource
from resources.mail.smtp import DEFAULT_PORTS, SmtpMailResource

__all__ = [
    "Address",
    "Attachment",
    "MailMessage",
    "MailResource",
    "MailjetResource",
    "OutboxMailResource",
    "SmtpMailResource",
]

BACKENDS = ("outbox", "mailjet", "smtp")


def _port(env: Env) -> int | None:
    value = env.get("SMTP_PORT")
    if value is None:
        return None
    if not value.isdigit():
        raise InvalidInput("SMTP_PORT", f"must be a port number, got {value!r}")
    return int(value)


@resource_builder("mail")
def mail_from_env(env: Env) -> MailResource:
    backend = (env.get("CONNECTOR_OPS_MAIL_BACKEND") or "outbox").strip().lower()
    if backend == "outbox":
        return OutboxMailResource(outbox_dir=env.path("CONNECTOR_OPS_OUTBOX_DIR", "outbox"))
    if backend == "mailjet":
        return MailjetResource(
            api_key=env.value("MAILJET_API_KEY"),
            api_secret=env.value("MAILJET_API_SECRET"),
            api_url=env.get("MAILJET_API_URL", DEFAULT_API_URL),
            sandbox=env.flag("MAILJET_SANDBOX"),
        )
    if backend == "smtp":
        security = (env.get("SMTP_SECURITY") or "starttls").strip().lower()
        if security not in DEFAULT_PORTS:
            raise InvalidInput("SMTP_SECURITY", f"must be one of {', '.join(DEFAULT_PORTS)}, got {security!r}")
        return SmtpMailResource(
            host=env.get("SMTP_HOST"),
            port=_port(env),
            username=env.get("SMTP_USERNAME"),
            password=env.value("SMTP_PASSWORD"),
            security=security,
            ca_file=env.get("SMTP_CA_FILE"),
            templates_dir=env.path("CONNECTOR_OPS_TEMPLATES_DIR", "templates"),
        )
    raise InvalidInput("CONNECTOR_OPS_MAIL_BACKEND", f"must be one of {', '.join(BACKENDS)}, got {backend!r}")
