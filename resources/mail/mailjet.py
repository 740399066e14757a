"""MailjetResource: the Send API v3.1 over httpx with HTTP basic auth (research mail.md §1–2).

The request body is built completely (in a spooled temporary file, attachments streamed in as base64)
before the first connection, so every local check, the 15 MB budget included, is done before anything
is sent. Retries follow research §2.4: connection failures (the request never left), 429 and 5xx, at
most ``max_attempts`` in all; never a 4xx, and never a read timeout, since Mailjet has no idempotency key
and a retried POST could send the mail twice.

The keys travel only in the ``Authorization`` header built by httpx (never in a URL, a log line or an
error message); in Definitions they are ``EnvVar`` so Dagster never stores them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import IO

import httpx
from pydantic import PrivateAttr

from connector_ops.kernel.disk import disk_full, is_disk_full, temp_floor
from connector_ops.kernel.errors import ActionFailed, UpstreamError
from connector_ops.kernel.forks import per_process, take_own
from connector_ops.resources.http_client import make_client
from connector_ops.resources.mail.attachments import AttachmentReader
from connector_ops.resources.mail.base import MailResource, cleartext_warning, log
from connector_ops.resources.mail.mailjet_errors import Outcome, interpret
from connector_ops.resources.mail.message import MailMessage
from connector_ops.resources.mail.payload import write_payload
from connector_ops.resources.proxies import ProxyFailure
from connector_ops.resources.retry import Backoff

DEFAULT_API_URL = "https://api.mailjet.com"
_SPOOL_IN_MEMORY = 1 << 20  # bodies above 1 MiB (attachments) go to a temporary file


def _body_chunks(body: IO[bytes], chunk_size: int = 1 << 16) -> Iterator[bytes]:
    body.seek(0)
    while chunk := body.read(chunk_size):
        yield chunk


class MailjetResource(MailResource):
    """Sends through ``POST <api_url>/v3.1/send``; ``sandbox`` validates without delivering."""

    api_key: str | None = None
    """Mailjet API key (secret: an environment reference)."""
    api_secret: str | None = None
    """Mailjet API secret (secret)."""
    api_url: str = DEFAULT_API_URL
    """Mailjet API base URL; messages go to <api_url>/v3.1/send."""
    sandbox: bool = False
    """Validate messages without delivering them (Mailjet's SandboxMode)."""
    timeout_s: float = 60.0
    """Timeout of the send request, in seconds."""
    connect_retries: int = 2
    """Retries of a connection that could not be opened (nothing was sent)."""
    max_attempts: int = 3
    """Attempts when Mailjet answers 429 or 5xx."""
    backoff_s: float = 1.0
    """First retry delay in seconds."""
    max_wait_s: float = 30.0
    """Longest retry delay in seconds."""

    #: per process (:mod:`~connector_ops.kernel.forks`): a forked child must not send on its parent's connection
    _client: tuple[int, httpx.Client] | None = PrivateAttr(default=None)

    def __repr__(self) -> str:  # never show the keys, even by accident in a debugger or a log line
        return f"MailjetResource(api_url={self.api_url!r}, sandbox={self.sandbox})"

    __str__ = __repr__

    def _http(self) -> httpx.Client:
        if not self.api_key or not self.api_secret:
            raise ActionFailed("Mailjet is not configured: set MAILJET_API_KEY and MAILJET_API_SECRET")
        url = httpx.URL(self.api_url)
        if url.userinfo or url.scheme not in ("http", "https"):
            raise ActionFailed("MAILJET_API_URL must be an http(s) URL without credentials in it")
        return per_process(self, "_client", self._connect)

    def _connect(self) -> httpx.Client:
        url = httpx.URL(self.api_url)
        if url.scheme == "http" and (warning := cleartext_warning(
                "Mailjet API keys (MAILJET_API_URL is http://)", url.host)):
            log.warning(warning)
        return make_client(
            base_url=self.api_url.rstrip("/"),
            auth=httpx.BasicAuth(str(self.api_key), str(self.api_secret)),
            timeout=httpx.Timeout(self.timeout_s, connect=10.0),
            retries=self.connect_retries,  # connect failures only
            follow_redirects=False,
        )

    def deliver(self, message: MailMessage, attachments: AttachmentReader) -> str:
        client = self._http()
        floor = temp_floor()  # the payload spools to TMPDIR past 1 MiB: up to 15 MB of attachments, in base64
        try:
            with tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY) as body:
                write_payload(floor.guard(body), message, attachments, sandbox=self.sandbox)
                body.flush()  # the buffered tail written now: a full disk met before anything is sent
                length = body.tell()
                outcome = self._post(client, body, length)
        except OSError as exc:  # the floor off (0) or outrun: TMPDIR named, not a bare errno 28 (also at close)
            if not is_disk_full(exc):
                raise
            raise disk_full(floor.folder, floor.min_free, done="nothing was sent") from None
        return ",".join(outcome.references) or "sandbox"

    def _post(self, client: httpx.Client, body: IO[bytes], length: int) -> Outcome:
        headers = {"Content-Type": "application/json", "Content-Length": str(length)}
        for attempt in range(1, self.max_attempts + 1):
            try:
                response = client.post("/v3.1/send", content=_body_chunks(body), headers=headers)
            except ProxyFailure as exc:  # nothing reached Mailjet: safe to try again when it may pass
                raise UpstreamError(f"cannot reach Mailjet at {self.api_url}: {exc}", retryable=exc.retryable) from None
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                raise UpstreamError(f"cannot reach Mailjet at {self.api_url}: {type(exc).__name__}: {exc}",
                                    retryable=True) from None
            except httpx.TimeoutException:
                raise UpstreamError(
                    f"Mailjet did not answer within {self.timeout_s:g} s; the message may have been sent, "
                    "so it was not retried (Mailjet has no idempotency key)"
                ) from None
            except httpx.TransportError as exc:
                raise UpstreamError(
                    f"the connection to Mailjet failed after the request was sent ({type(exc).__name__}); "
                    "the message may have been sent, so it was not retried"
                ) from None
            outcome = interpret(response)
            if outcome.ok:
                return outcome
            if not outcome.retryable or attempt == self.max_attempts:
                suffix = f" (after {attempt} attempts)" if attempt > 1 else ""
                raise UpstreamError(outcome.message + suffix, retryable=outcome.retryable)
            Backoff(self.backoff_s, self.max_wait_s, self.max_attempts, self.max_wait_s).wait(attempt - 1, response)
        raise AssertionError("unreachable: the loop returns or raises")

    def close(self) -> None:
        client = take_own(self, "_client")
        if client is not None:
            client.close()
