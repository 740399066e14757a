"""Warnings for the user about a call that succeeded but probably did not do what they meant.

Like :mod:`.progress`, decoupled from where they are shown: actions call :func:`warn`; the entry point
decides where the line goes with :func:`warnings_to` — stderr in the CLI and the notebook magics, the op's
log in Dagster. Without a sink (library use) they go to the ``connector_ops`` logger at WARNING level, so
nothing is lost and nothing is printed unasked.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator

from connector_ops.kernel.scoped import scoped

Sink = Callable[[str], None]

_sink: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("notices", default=None)
_log = logging.getLogger("connector_ops")


@contextlib.contextmanager
def warnings_to(sink: Sink | None) -> Iterator[None]:
    """Within this block, :func:`warn` sends its one-line messages to ``sink``."""
    with scoped(_sink, sink):
        yield


def silenced() -> contextlib.AbstractContextManager[None]:
    """Within this block, :func:`warn` drops its messages: for work that repeats what was already shown (a file
    loaded again only to read its name or digest)."""
    return warnings_to(_dropped)


def _dropped(message: str) -> None:
    """The sink of :func:`silenced`."""


def warn(message: str) -> None:
    """Tell the user about a likely mistake without failing the call."""
    sink = _sink.get()
    if sink is None:
        _log.warning(message)
    else:
        sink(message)
