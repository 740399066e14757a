"""Waiting between retries of an HTTP call: jittered exponential backoff, ``Retry-After`` first.

Shared by the Google Drive and Mailjet clients; *whether* a call may be retried is each client's own
decision (research drive.md §3, mail.md §2.4), only *how long to wait* lives here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx


@dataclass
class Backoff:
    """Full-jitter exponential backoff with a cap; a numeric ``Retry-After`` takes precedence."""

    base_s: float = 1.0
    max_s: float = 32.0
    attempts: int = 7
    max_retry_after_s: float = 120.0
    sleep: Callable[[float], None] = time.sleep

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0-based)."""
        if response is not None:
            header = response.headers.get("retry-after")
            if header and header.strip().isdigit():
                return min(float(header), self.max_retry_after_s)
        return random.uniform(0, min(self.max_s, self.base_s * (2 ** attempt)))

    def wait(self, attempt: int, response: httpx.Response | None = None) -> None:
        self.sleep(self.delay(attempt, response))
