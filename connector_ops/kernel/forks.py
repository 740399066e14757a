"""What a process made by ``fork`` (multiprocessing's default start method on Linux before Python 3.14) must
not share with its parent: sockets, database connections, ids reserved for one process.

A child starts with copies of its parent's objects, and their descriptors name the same sockets and pipes.
Two processes talking over one HTTP keep-alive connection or one PostgreSQL session read each other's
answers; two processes popping copies of one pool of reserved Drive ids create under the same id. So such
state is made per process: :func:`per_process` keeps a value with the process that made it, and another
process gets its own. What the parent made is *abandoned* in the child, never closed there: closing it would
end the parent's connection (a TLS close, a PostgreSQL terminate message, a pipe's end of data). Abandoned
objects are kept referenced (:func:`abandon`) so that no finalizer of theirs runs in the child either.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: what this process inherited from its parent and must neither use nor close (kept so no finalizer runs)
_ABANDONED: list[Any] = []
#: taken while a :func:`per_process` value is made, so that two threads agree on one
_OWNING = threading.Lock()


def abandon(*objects: Any) -> None:
    """Keep ``objects`` (the parent's, inherited through fork) referenced for the life of this process, unused
    and unclosed: a finalizer running on them here could close what the parent still uses."""
    _ABANDONED.extend(o for o in objects if o is not None)


def in_child(hook: Callable[[], None]) -> Callable[[], None]:
    """Run ``hook`` in every child this process forks, right after the fork (decorator)."""
    os.register_at_fork(after_in_child=hook)
    return hook


@in_child
def _renew_lock() -> None:
    global _OWNING
    _OWNING = threading.Lock()


def per_process(owner: Any, attr: str, make: Callable[[], T]) -> T:
    """``owner``'s value in its private attribute ``attr`` (``(pid, value)``), made by ``make`` on first use in
    this process; in a forked child the parent's is abandoned and the child's own is made. Kept in the
    resource itself, not in a holder object: a copy of a resource (``model_copy(update=…)``) made before its
    first use makes its own, with its own settings."""
    kept = getattr(owner, attr)
    if kept is not None and kept[0] == os.getpid():
        return kept[1]
    with _OWNING:
        kept = getattr(owner, attr)
        if kept is not None and kept[0] == os.getpid():
            return kept[1]
        if kept is not None:
            abandon(kept[1])
        value = make()
        setattr(owner, attr, (os.getpid(), value))
        return value


def take_own(owner: Any, attr: str) -> Any:
    """Remove ``owner``'s :func:`per_process` value and return it for the caller to close, if this process
    made it; a parent's is abandoned (``None`` returned): it is not this process's to close."""
    with _OWNING:
        kept = getattr(owner, attr)
        setattr(owner, attr, None)
    if kept is None:
        return None
    if kept[0] != os.getpid():
        abandon(kept[1])
        return None
    return kept[1]
