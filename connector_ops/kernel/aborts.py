"""Ending, from another thread, a wait on the network that will not end by itself.

A stop (Ctrl-C, Dagster's Terminate) unwinds the action in the main thread while another thread may be
waiting for bytes that do not come: Arrow's reading thread on a link whose server went silent (until the HTTP
client's read time-out, a minute by default), psycopg's on a PostgreSQL server the network no longer
reaches. Whatever the unwinding then closes waits for that thread. :func:`shut` ends its wait first.
"""

from __future__ import annotations

import contextlib
import os
import socket


def shut(fileno: int) -> None:
    """Shut the connection on socket ``fileno``: every read or write waiting on it, in any thread, ends at
    once with an error. Shut, not closed: closing would not wake those waits, and the descriptor could be
    given to another file while they still hold it. Shut through a copy of the descriptor, so that the
    socket's own object (a TLS socket's state, which its reader is using) is left alone."""
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fileno)) as copy:  # OSError: already closed
        copy.shutdown(socket.SHUT_RDWR)
