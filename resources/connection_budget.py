"""How many connections ``files serve`` takes at once, from the descriptors its process may open.

Every connection is a descriptor, taken when it is accepted, before any application code runs. Out of
descriptors, a server cannot even accept: uvloop (libuv) then accepts each waiting connection and closes it
(its client sees a reset), which is why ``files serve`` runs on asyncio's loop, which leaves them queued and
tries again a second later. To keep it from getting there at all, uvicorn's ``limit_concurrency`` answers a
503 to the requests of connections above the limit (then closes them) and ``backlog`` bounds the
connections accepted in one round; both are chosen here so that what they may hold fits under
``RLIMIT_NOFILE``, beside what the process and its store hold already.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: descriptors a served connection may hold at once: its socket, and the file it streams (the stored file
#: opened before answering, or the spool of a database read); the descriptor JSON of the lookup is read and
#: closed before the file is opened
PER_CONNECTION = 2
#: descriptors opened after the count, whatever the load: the event loop's own (uvloop's epoll, its wake-up
#: and signal pipes, libuv's spare for running out), modules imported by a first request, a log reopened
SPARE = 16
#: uvicorn's default backlog, kept where descriptors are plenty
MOST_BACKLOG = 2048


@dataclass(frozen=True)
class ConnectionLimits:
    """uvicorn's ``limit_concurrency`` (``None``: no limit, the process may open any number) and ``backlog``."""

    concurrency: int | None
    backlog: int


def open_descriptors() -> int | None:
    """Descriptors this process has open now: Linux's ``/proc/self/fd``, else ``/dev/fd`` (macOS and the
    BSDs, which have no ``/proc``); ``None`` where the system lists neither."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return max(0, len(os.listdir(folder)) - 1)  # the listing's own descriptor
        except OSError:
            continue
    return None


def connection_limits(reserved: int) -> ConnectionLimits:
    """The limits for a server whose store may hold ``reserved`` more descriptors of its own (its database
    connections), counted from the descriptors open now and the process's soft ``RLIMIT_NOFILE``.

    What is left after those, :data:`SPARE` and the descriptors open now is shared: a quarter for the
    backlog (connections accepted in one round may all be over the limit, each holding its socket until
    its 503 is sent), the rest for :data:`PER_CONNECTION` descriptors per connection served. Under
    ``ulimit -n 1024`` that is about 370 connections at once and a backlog of 250; under 48, about 10 and 6."""
    try:
        import resource
    except ImportError:  # not a Unix: no limit to read, uvicorn's defaults
        return ConnectionLimits(None, MOST_BACKLOG)
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return ConnectionLimits(None, MOST_BACKLOG)
    room = soft - (open_descriptors() or 0) - reserved - SPARE
    backlog = min(MOST_BACKLOG, max(1, room // 4))
    return ConnectionLimits(max(1, (room - backlog) // PER_CONNECTION), backlog)
