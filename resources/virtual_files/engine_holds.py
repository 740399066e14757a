"""How long each database engine (:mod:`.engines`) is kept: who holds the engine of a URL.

An engine is one per URL per process, and keeps its pooled connections (a SQLite file's descriptors, a
PostgreSQL server's sessions) until it is disposed of. Holders that last the process — the process session of
``invoke()``, Dagster's resources (built and closed per run or step, where a PostgreSQL reconnect per step
would be paid for nothing) — *pin* it: kept for the process's life. A user's ``Session`` *holds* it while it
is open: when the last such hold is released and nothing pinned the URL, the engine is disposed of (its
connections and SQLite checkpoint connection closed; a later use makes another). An engine nobody holds, or
only pinned, is kept while it is among the :data:`.engines.KEPT_ENGINES` most recently used; one a ``Session``
holds is never closed to make room. Light: URLs are kept as given, and compared as the engines key them
(which needs SQLAlchemy) only on a release, when there are engines to dispose of.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from connector_ops.kernel.forks import in_child

_HOLDS: dict[str, int] = {}
_PINNED: set[str] = set()
_LOCK = threading.Lock()


def pin(url: str) -> None:
    """Keep the engine of ``url`` for the life of the process (a process-lifetime holder uses it)."""
    with _LOCK:
        _PINNED.add(url)


def hold(url: str) -> None:
    """A scoped holder (a user's ``Session``) uses the engine of ``url`` until it calls :func:`release`."""
    with _LOCK:
        _HOLDS[url] = _HOLDS.get(url, 0) + 1


def held(normalise: Callable[[str], str]) -> set[str]:
    """The databases an open scoped holder uses, keyed by ``normalise`` (as the engines are): never closed to
    make room for another (:func:`.engines._make_room`)."""
    with _LOCK:
        return {normalise(url) for url in _HOLDS}


def release(url: str) -> None:
    """End a :func:`hold`; the last one on the database of ``url`` disposes of its engine, unless it is pinned."""
    with _LOCK:
        left = _HOLDS.get(url, 0) - 1
        if left > 0:
            _HOLDS[url] = left
            return
        _HOLDS.pop(url, None)
        engines = sys.modules.get("connector_ops.resources.virtual_files.engines")
        if engines is None:  # no engine was ever made in this process
            return
        key = engines.normalise_url(url)
        if any(engines.normalise_url(other) == key for other in (*_HOLDS, *_PINNED)):
            return  # another spelling of the same database is still held, or pinned
    engines.dispose(key)


@in_child
def _after_fork() -> None:
    global _LOCK
    _LOCK = threading.Lock()
