"""A signal of the test's own (SIGUSR1, whose handler raises :class:`Stop`) that stops a long action as a
Ctrl-C would, without any risk that a late one stops pytest. ``signalled_after`` is a fixture (conftest);
:func:`signal_at` sends the signal at a point of the action's own progress, whatever the machine's speed."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import CodeType, FrameType

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


def signal_at(units: int) -> Callable[[str, int | None, str], object]:
    """A progress reporter factory (``reporting_to``) whose reporters send the test's signal once the work
    they report has done ``units`` units (bytes or rows): its exception is raised there, in the action's own
    code, with the rest of the work still to do. ``signalled_after`` installs the handler."""
    return at_progress(units, lambda: os.kill(os.getpid(), signal.SIGUSR1))


def at_progress(units: int, then: Callable[[], object]) -> Callable[[str, int | None, str], object]:
    """A progress reporter factory (``reporting_to``) whose reporters call ``then()`` once the work they report
    has done ``units`` units (bytes or rows), in the action's own code."""
    class Reporter:
        def __init__(self, _description: str, _total: int | None, _unit: str) -> None:
            self.done = 0

        def update(self, n: int) -> None:
            self.done += n
            if self.done >= units > self.done - n:
                then()

        def close(self) -> None:
            pass

    return Reporter


def stopping(when: Callable[[FrameType], bool], raised: list[bool] | None = None
             ) -> Callable[[FrameType, str, object], None]:
    """A trace function raising :class:`Stop` (once, noted in ``raised``) as the first Python function for whose
    frame ``when`` holds is entered, as a signal's handler raises when its signal comes just before."""
    def tracer(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call" and when(frame):
            sys.settrace(None)
            if raised is not None:
                raised.append(True)
            raise Stop

    return tracer


def stopping_at(k: int) -> Callable[[FrameType, str, object], None]:
    """A trace function that raises :class:`Stop` as the k-th Python function called is entered."""
    calls = itertools.count(1)
    return stopping(lambda _frame: next(calls) == k)


@contextlib.contextmanager
def stopped_as_entered(code: CodeType) -> Iterator[list[bool]]:
    """Within the block, :class:`Stop` raised in this thread the first time the function of ``code`` is
    entered (a trace function raises it: at that exact call, where a real signal would land at a moment of its
    own). Yields ``[True]`` once raised."""
    raised: list[bool] = []
    sys.settrace(stopping(lambda frame: frame.f_code is code, raised))
    try:
        yield raised
    finally:
        sys.settrace(None)
