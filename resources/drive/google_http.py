"""The HTTP layer of the Google Drive resource: bearer auth, Drive's error envelope, and safe retries.

Retry policy (research §3): 429, 5xx, 403 with a rate-limit reason and transport errors are retried with
full-jitter exponential backoff (base, cap and attempts configurable), honouring ``Retry-After``; every
other 4xx is final. A 401 makes the token source refresh once and the request go again once.  Callers
say whether a request may be repeated (``idempotent``): creates are made repeatable with ids reserved
through ``files.generateIds``, so no retry can create a duplicate.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from connector_ops.kernel.errors import UpstreamError, host_of
from connector_ops.resources.drive.google_auth import TokenSource
from connector_ops.resources.proxies import ProxyFailure
from connector_ops.resources.retry import Backoff

RATE_LIMIT_REASONS = frozenset({"userRateLimitExceeded", "rateLimitExceeded", "sharingRateLimitExceeded"})
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Drive's answers that refuse the ids a request sent (no such item, or the wrong kind: a file as a parent)
INPUT_STATUSES = frozenset({400, 404})


class _RedactUploadIds(logging.Filter):
    """httpx logs request URLs at INFO and httpcore response headers at DEBUG; a resumable session URI
    (``upload_id=…``) is a credential for the upload, so it is masked in every such record."""

    _pattern = re.compile(r"(upload_id=)[^&\s\"']+")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "upload_id=" in message:
            record.msg, record.args = self._pattern.sub(r"\1<redacted>", message), ()
        return True


for _name in ("httpx", "httpcore.http11", "httpcore.http2", "httpcore.connection"):
    logging.getLogger(_name).addFilter(_RedactUploadIds())


class DriveApiError(UpstreamError):
    """Drive answered with an error envelope; ``status`` is Drive's status, ``reason`` its first reason."""

    def __init__(self, status: int, reason: str, message: str, *, retryable: bool = False) -> None:
        self.reason = reason
        super().__init__(message, status=status, retryable=retryable)


def parse_error(response: httpx.Response, action: str, field: str | None = None) -> DriveApiError:
    """Drive's ``{"error": {"code", "message", "errors": [{"reason"}]}}`` (or an HTML page) as an error.

    ``field`` is the input field the request's ids came from: a 400 or 404 refuses that input, so the
    message starts with its name, as every bad-input error does (Drive's own message names no field)."""
    reason, detail = "", ""
    with contextlib.suppress(ValueError, AttributeError, TypeError, IndexError, httpx.ResponseNotRead):
        error = response.json()["error"]
        detail = str(error.get("message") or "")
        errors = error.get("errors") or []
        reason = str(errors[0].get("reason") or "") if errors else str(error.get("status") or "")
    status = response.status_code
    if not detail:
        detail = response.reason_phrase or "no details"
    label = f" ({reason})" if reason else ""
    named = f"{field}: " if field and status in INPUT_STATUSES else ""
    return DriveApiError(status, reason, f"{named}Google Drive refused to {action}: {status}{label} {detail}".strip(),
                         retryable=is_retryable(response))


def is_retryable(response: httpx.Response) -> bool:
    """Whether Drive's answer is worth another attempt (research §3). An unexpected success whose body
    is still streaming (e.g. a 200 where a resumed download wanted 206) is not read: it is never retryable."""
    if response.status_code in RETRY_STATUSES:
        return True
    if response.status_code == 403:
        with contextlib.suppress(ValueError, AttributeError, TypeError, IndexError, KeyError):
            return response.json()["error"]["errors"][0]["reason"] in RATE_LIMIT_REASONS
    return False


class DriveHttp:
    """One ``httpx.Client`` with bearer auth, retries and Drive's errors; all Drive calls go through here."""

    def __init__(self, client: httpx.Client, tokens: TokenSource, backoff: Backoff) -> None:
        self.client = client
        self.tokens = tokens
        self.backoff = backoff

    def _authorised(self, headers: Mapping[str, str] | None) -> tuple[dict[str, str], str]:
        token = self.tokens.token()
        return {**(headers or {}), "Authorization": f"Bearer {token}"}, token

    @contextlib.contextmanager
    def open(self, method: str, url: str, *, action: str, idempotent: bool = True,
             params: Mapping[str, Any] | None = None, json: Any = None, content: bytes | None = None,
             headers: Mapping[str, str] | None = None, ok: Callable[[httpx.Response], bool] | None = None,
             preload: bool = True, field: str | None = None, own_conflict: bool = False) -> Iterator[httpx.Response]:
        """Send with retries and yield the final response, its body read (``preload``) or still streaming.

        ``ok`` decides which statuses are answers rather than errors (default: < 400); the response is
        yielded for those, anything else raises :class:`DriveApiError`. ``field`` names the input field
        whose id the request sends, for the error of a 400/404 (see :func:`parse_error`). ``own_conflict``: the
        request creates under an id reserved by this process for this call, so a 409 answering a *retry* of it
        is its earlier attempt's success (yielded); a 409 to the first attempt is someone else's item under
        that id, an error.
        """
        accept = ok or (lambda r: r.status_code < 400)
        attempt, refreshed = 0, False
        while True:
            auth_headers, token = self._authorised(headers)
            request = self.client.build_request(method, url, params=params, json=json, content=content,
                                                headers=auth_headers)
            try:
                response = self.client.send(request, stream=True)
                if preload:  # a body cut off by a dropped connection counts as a transport error
                    try:
                        response.read()
                    except httpx.TransportError:
                        response.close()
                        raise
            except httpx.TransportError as exc:
                if isinstance(exc, ProxyFailure) and not exc.retryable:  # the proxy's answer until its settings change
                    raise UpstreamError(f"Google Drive could not be reached at {host_of(request.url)} to {action}: "
                                        f"{exc}", status=502) from None
                never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | ProxyFailure)
                if (idempotent or never_sent) and attempt + 1 < self.backoff.attempts:
                    self.backoff.wait(attempt)
                    attempt += 1
                    continue
                # sent but unanswered: repeating a call that is not idempotent could do it twice
                # a proxy's failure names the proxy (never its password); others their type alone
                why = str(exc) if isinstance(exc, ProxyFailure) else type(exc).__name__
                raise UpstreamError(f"Google Drive could not be reached at {host_of(request.url)} to {action}: "
                                    f"{why}", status=503, retryable=idempotent or never_sent) from None
            try:
                if response.status_code == 401 and not refreshed:
                    response.close()
                    self.tokens.invalidate(token)
                    refreshed = True
                    continue
                if accept(response) or (own_conflict and attempt > 0 and response.status_code == 409):
                    yield response
                    return
                if response.status_code >= 400:  # a streamed error's envelope must be read to classify it
                    response.read()
                retry = is_retryable(response) and attempt + 1 < self.backoff.attempts
                # a 429 / rate-limit 403 was refused before any work; 5xx may have done it
                refused = response.status_code == 429 or response.status_code == 403
                if retry and (idempotent or refused):
                    response.close()
                    self.backoff.wait(attempt, response)
                    attempt += 1
                    continue
                error = parse_error(response, action, field)
                error.retryable = error.retryable and (idempotent or refused)  # a 5xx may have done the work
                raise error
            finally:
                response.close()

    def call(self, method: str, url: str, *, action: str, **kwargs: Any) -> Any:
        """A JSON request; returns the decoded body (``None`` for an empty one)."""
        with self.open(method, url, action=action, **kwargs) as response:
            body = response.read()
        if not body:
            return None
        try:
            return response.json()
        except ValueError:
            raise UpstreamError(f"Google Drive sent an unreadable answer to {action}", status=502) from None
