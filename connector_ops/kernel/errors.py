"""The one error type every entry point understands, and the precise errors resources raise.

Resources and actions raise the precise exceptions below; the action runner in
:mod:`connector_ops.registry` turns them into a :class:`ConnectorError` whose ``status`` and ``body``
are exactly what the spec shows for that action (404 ``{"message": "not found"}`` where the spec lists
it, ``null`` for Clean, 400 for invalid input).  Entry points only ever see ``ConnectorError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


class ConnectorError(Exception):
    """An action failed: ``status`` is the HTTP-style status, ``body`` the spec's error body.

    ``retryable`` says whether running the action again may succeed. It follows from *what* failed (a
    429, a 5xx or a dropped connection at Google or Mailjet: yes; invalid input, not found: never), not
    from ``status``: the spec answers many different failures with 500, and a Dagster ``RetryPolicy``
    must not spend its attempts on a file that does not exist.
    """

    def __init__(self, status: int, body: Any, *, action: str | None = None, detail: str | None = None,
                 retryable: bool = False) -> None:
        self.status = status
        self.body = body
        self.action = action
        #: what went wrong when the spec's body cannot say it (Clean answers every error with ``null``)
        self.detail = detail
        self.retryable = retryable
        super().__init__(self.summary())

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (Dagster, processes) with its keyword arguments
        return (_rebuild, (type(self), self.status, self.body, self.action, self.detail, self.retryable))

    @property
    def message(self) -> str:
        if isinstance(self.body, dict) and "message" in self.body:
            return str(self.body["message"])
        if self.body is None:
            return self.detail or "failed"
        return str(self.body)

    def summary(self) -> str:
        """One line: ``etl.push failed (404): not found``."""
        prefix = f"{self.action} failed" if self.action else "failed"
        return f"{prefix} ({self.status}): {self.message}"


def _rebuild(cls: type[ConnectorError], status: int, body: Any, action: str | None,
             detail: str | None, retryable: bool = False) -> ConnectorError:
    error = ConnectorError.__new__(cls)
    ConnectorError.__init__(error, status, body, action=action, detail=detail, retryable=retryable)
    return error


class ConnectorOpsError(Exception):
    """Base of the precise errors raised below the action layer."""

    status = 500
    #: whether the same call may succeed later (a transient provider failure); see ConnectorError
    retryable = False


def field_path(parts: Iterable[str | int]) -> str:
    """The one notation of a field in messages: ``rows[0].content``, ``recipients[2].email``, ``schema``.

    pydantic's own locations also carry validator names (``function-after[…]``); those are dropped.
    """
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not part.startswith("function-"):
            text += f".{part}" if text else part
    return text


class InvalidInput(ConnectorOpsError):
    """The caller's input is wrong; the message names the field and the problem."""

    status = 400

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)


class ConfigurationError(InvalidInput):
    """A setting (an environment variable connector-ops reads) is wrong: the deployment's input, named.

    One rule wherever it is met (README, Exit codes): the command line exits 2, and its line says
    ``configuration error: VARIABLE: problem``, whichever command met it. ``invoke()`` and the CLI's ``invoke``
    keep the action's 500 body (the caller's input was fine; the service cannot run it), so a script told
    ``failed (400)`` by ``gc`` and ``failed (500)`` by ``invoke`` for one variable sees exit 2 from both."""


class NotFound(ConnectorOpsError):
    """A virtual file, platform file, drive item … does not exist."""

    status = 404


class ActionFailed(ConnectorOpsError):
    """The action could not complete for a reason that is not the caller's input (status 500)."""


class UpstreamError(ConnectorOpsError):
    """A remote service answered with an error; ``status`` is the status to report.

    ``retryable``: the service was unreachable, rate-limited us or failed on its side (429, 5xx, a
    dropped connection before the request was delivered), so the same call may succeed later.
    """

    def __init__(self, message: str, status: int = 500, *, retryable: bool = False) -> None:
        self.status = status
        self.retryable = retryable
        super().__init__(message)


def host_of(url: object) -> str:
    """``host`` or ``host:port`` of a URL, for messages: where a connection went, without the credentials,
    path or query a URL may carry."""
    from urllib.parse import urlsplit

    parts = urlsplit(str(url))
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


def link_shown(url: str) -> str:
    """A link as messages show it: scheme, host, port and path, without the credentials or the query (a
    signed URL's signature, an access token) it may carry."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL (``http://[::1/x``): nothing of it is shown, the check that follows says why
        return f"{url.partition(':')[0][:20]}://…"
    hidden = parts.username is not None or parts.query or parts.fragment
    place = parts.netloc.rpartition("@")[2]  # host and port as written (a port that is no number included)
    slashes = "//" if url[len(parts.scheme) + 1:].startswith("//") else ""  # none in data:…, mailto:…
    return f"{parts.scheme}:{slashes}{place}{parts.path}" + ("?…" if parts.query else "") if hidden else url


def gave_up_because(exc: BaseException) -> str:
    """Why a fast path gave up, for a debug log, without the file's content: the exception's type, and a
    database's primary message (``extra data after last expected column``), which names no value. Its full
    text is left out: PostgreSQL's CONTEXT quotes the refused row, Arrow's parse errors the line."""
    primary = getattr(getattr(exc, "diag", None), "message_primary", None)
    return f"{type(exc).__name__}: {primary}" if primary else type(exc).__name__


def chained(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it was raised from or while handling, and so on: where a driver's error lies under
    the library that wrapped it (``DagsterPostgresException`` over SQLAlchemy's ``OperationalError``)."""
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__
