"""The process session: made once however many threads make their first call together."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from connector_ops import session as sessions


@pytest.fixture
def no_process_session() -> Iterator[None]:
    kept = sessions._default
    sessions._default = None
    yield
    made, sessions._default = sessions._default, kept
    if made is not None and made is not kept:
        made.close()


def _first_call(barrier: threading.Barrier, seen: list[int]) -> None:
    barrier.wait()
    seen.append(id(sessions.default_session()))


def test_concurrent_first_calls_share_one_process_session(no_process_session: None) -> None:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race, if any, shows in a few trials
    try:
        for _ in range(200):
            sessions._default = None
            seen: list[int] = []
            barrier = threading.Barrier(8)

            threads = [threading.Thread(target=_first_call, args=(barrier, seen)) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert len(set(seen)) == 1, "threads making their first call together got different sessions"
    finally:
        sys.setswitchinterval(interval)
