"""A real SMTP server on loopback (aiosmtpd) that records what it receives, for the mail tests.

``smtp_server(...)`` starts it on a free port of 127.0.0.1 (aiosmtpd needs a pre-picked port: its
readiness check connects to it) with any ``Controller`` option: ``authenticator``, ``tls_context`` +
``require_starttls`` for STARTTLS, ``ssl_context`` for implicit TLS.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.servers import free_port


class Recorder:
    """aiosmtpd handler keeping every envelope; ``refuse`` lists addresses answered 550 at RCPT."""

    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.envelopes: list[Any] = []
        self.refuse = refuse

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          rcpt_options: list[str]) -> str:
        if address in self.refuse:
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"


def password_authenticator(user: str, password: str) -> Any:
    """An aiosmtpd authenticator accepting exactly one login/password pair."""

    def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
        ok = (isinstance(auth_data, LoginPassword) and auth_data.login == user.encode()
              and auth_data.password == password.encode())
        return AuthResult(success=ok, handled=False)

    return authenticate


@contextlib.contextmanager
def smtp_server(recorder: Recorder | None = None, **options: Any) -> Iterator[tuple[Recorder, int]]:
    """Serve SMTP on 127.0.0.1 in a thread; yields the recorder and the port."""
    recorder = recorder or Recorder()
    port = free_port()
    controller = Controller(recorder, hostname="127.0.0.1", port=port, **options)
    controller.start()
    try:
        yield recorder, port
    finally:
        controller.stop()
