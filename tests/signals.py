"""A signal of the test's own (SIGUSR1, whose handler raises :class:`Stop`) that stops a long action as a
Ctrl-C would, without any risk that a late one stops pytest. ``signalled_after`` is a fixture (conftest)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator

import pytest


class Stop(BaseException):
    """What the test's signal handler raises."""


@pytest.fixture
def signalled_after() -> Iterator[Callable[[float], None]]:
    """``signalled_after(s)``: SIGUSR1 to this process in ``s`` seconds, its handler raising :class:`Stop`
    until the test ends (a timer still pending then is cancelled first)."""
    def handler(_signo: int, _frame: object) -> None:
        raise Stop

    timers: list[threading.Timer] = []

    def arm(seconds: float) -> None:
        timers.append(threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGUSR1)))
        timers[-1].start()

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        yield arm
    finally:
        for timer in timers:
            timer.cancel()
            timer.join()
        signal.signal(signal.SIGUSR1, previous)
