"""Waiting between retries of an HTTP call: jittered exponential backoff, ``Retry-After`` first.

``Retry-After`` is either a number of seconds or an HTTP date (RFC 9110 §10.2.3); both are honoured, within
the same cap. A date is read against this host's clock: a date already past, or a value that is neither
form, leaves the wait to the backoff.

Shared by the Google Drive and Mailjet clients; *whether* a call may be retried is each client's own
decision (research drive.md §3, mail.md §2.4), only *how long to wait* lives here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx


@dataclass
class Backoff:
    """Full-jitter exponential backoff with a cap; ``Retry-After`` (seconds or a date) takes precedence."""

    base_s: float = 1.0
    max_s: float = 32.0
    attempts: int = 7
    max_retry_after_s: float = 120.0
    sleep: Callable[[float], None] = time.sleep

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0-based)."""
        if response is not None:
            asked = retry_after_s(response.headers.get("retry-after"))
            if asked is not None:
                return min(asked, self.max_retry_after_s)
        return random.uniform(0, min(self.max_s, self.base_s * (2 ** attempt)))

    def wait(self, attempt: int, response: httpx.Response | None = None) -> None:
        self.sleep(self.delay(attempt, response))


def retry_after_s(header: str | None) -> float | None:
    """Seconds a ``Retry-After`` value asks to wait: its delay-seconds, or how far ahead its HTTP date is;
    None when absent, unreadable or a date not in the future (the server's wish is then unknown or over)."""
    value = (header or "").strip()
    if value.isascii() and value.isdigit():  # "²" is a digit to str.isdigit, not to float()
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" or an obsolete form without zone: HTTP dates are GMT
        when = when.replace(tzinfo=UTC)
    ahead = (when - datetime.now(UTC)).total_seconds()
    return ahead if ahead > 0 else None
