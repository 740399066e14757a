"""Ending the ``with`` blocks an interrupt cut between their generator's two halves.

A ``@contextmanager`` block (the store's write transaction, SQLAlchemy's ``Engine.begin``) is a generator
suspended at its ``yield`` while the block runs: ``contextlib``'s ``__exit__`` resumes it to commit or roll back.
A Stop (Ctrl-C, Jupyter's Stop, Dagster's Terminate) is raised wherever Python checks for signals, and that can
be inside ``__exit__`` before it resumes the generator, or inside ``__enter__`` after the generator began the
transaction and before the block was entered. The generator then stays suspended, its transaction open: on
SQLite the file's write lock held, as long as something keeps the exception's traceback, whose frames keep the
context manager. IPython keeps the last traceback until the next error, so the next cell's write waited the
60 s busy timeout and failed "database is locked".

:func:`end_cut_blocks` closes those generators once the exception has left the action: every frame of its
traceback has ended, so a generator context manager still suspended in one of them belongs to a block that was
cut, never to one still running. Closing raises ``GeneratorExit`` at its ``yield``, which rolls back as any
other exception would.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Iterator
from types import TracebackType

log = logging.getLogger(__name__)


def end_cut_blocks(exc: BaseException) -> None:
    """Close every generator context manager left suspended in the frames ``exc`` and the exceptions it was
    raised while handling have left. Its own errors are logged (debug) and dropped: ``exc`` is what happened."""
    for cm in _left_in(exc):
        if inspect.getgeneratorstate(cm.gen) == inspect.GEN_SUSPENDED:
            try:
                cm.gen.close()
            except Exception:  # a rollback on a connection the interrupt broke: the interrupt is the news
                log.debug("ending a block the interrupt cut", exc_info=True)


def _left_in(exc: BaseException) -> Iterator[contextlib._GeneratorContextManager]:
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        tb: TracebackType | None = cause.__traceback__
        while tb is not None:
            for value in list(tb.tb_frame.f_locals.values()):
                if isinstance(value, contextlib._GeneratorContextManager):
                    yield value
            tb = tb.tb_next
        cause = cause.__context__
