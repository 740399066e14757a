"""Where another thread of the test's process is, read from its stack: for a test that must act once a thread
has reached a wait (a build it shares, a lock it holds) rather than after a sleep that may be too short."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import FrameType


def comes_to(thread: threading.Thread, found: Callable[[FrameType], bool], timeout: float = 60.0) -> bool:
    """Whether a frame of ``thread``'s stack is ``found`` within ``timeout`` seconds (looked at every 10 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or 0)
        while frame is not None:
            if found(frame):
                return True
            frame = frame.f_back
        time.sleep(0.01)
    return False


def runs(name: str) -> Callable[[FrameType], bool]:
    """A frame of the function ``name``."""
    return lambda frame: frame.f_code.co_name == name
