"""Which database URLs the store works with, checked without importing SQLAlchemy.

The check runs where settings are read (``CONNECTOR_OPS_DATABASE_URL``), also for calls that never touch
the database (Iterate over an inline array), so it must stay cheap: SQLAlchemy's own URL grammar starts with
``name[+driver]://``, and that is all we need to tell a path or another database from ours.
"""

from __future__ import annotations

import os
import re
from typing import Annotated

from pydantic import AfterValidator

#: the database URLs the store works with (what error messages offer)
SUPPORTED_URLS = "sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"
_SUPPORTED_DRIVERS = frozenset({"sqlite", "sqlite+pysqlite", "postgresql", "postgres", "postgresql+psycopg"})
_SCHEME = re.compile(r"^([\w+]+)://", re.ASCII)
#: the host and port as SQLAlchemy's URL grammar (``sqlalchemy.engine.url._parse_url``) finds them: the password
#: runs to the first ``@``, the host to the next ``:``, ``/`` or ``?``; SQLAlchemy then calls ``int()`` on the port
_PORT = re.compile(r"^[\w+]+://(?:[^:/]*(?::[^@]*)?@)?(?P<host>\[[^/?]+\]|[^/:?]+)?(?::(?P<port>[^/?]*))?")
#: what to do about a port that is not a number, which is most often a password's ``@`` ``:`` or ``/``
_PORT_HINT = "URL-encode @ : / in the password (%40 %3A %2F)"


def database_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as the store's database URL, or ``None``. Never repeats the URL (it may
    hold a password): a path (``data/x.db``) or another database (``mysql://…``) is named by its kind."""
    match = _SCHEME.match(url)
    if match is None:
        return f"is not a database URL (a path needs sqlite:///); use {SUPPORTED_URLS}"
    driver = match.group(1)
    if driver in _SUPPORTED_DRIVERS:
        if driver.startswith("sqlite"):
            from connector_ops.resources.virtual_files.sqlite_names import utf8_problem

            return utf8_problem(url)
        return _port_problem(url)
    if driver.lower() in _SUPPORTED_DRIVERS:  # passed here once, then SQLAlchemy said "Can't load plugin" (a 500)
        return f"names the database driver {driver!r}, which is written in lower case ({driver.lower()}); " \
               f"use {SUPPORTED_URLS}"
    return f"names the database driver {driver!r}, which is not supported; use {SUPPORTED_URLS}"


def _port_problem(url: str) -> str | None:
    """A port SQLAlchemy would fail to read (``int('wo5rd@127.0.0.1')``, a 500 quoting a piece of the
    password), or a host holding an ``@`` — the rest of a password whose ``@`` was not encoded, which the
    driver then tried to resolve and quoted in its error (``failed to resolve host 'wo5rd@db'``): each named
    without repeating it."""
    parts = _PORT.match(url)
    if parts is None:
        return None
    if parts["host"] and "@" in parts["host"]:
        return f"has an @ in its host (as read after the password, which ends at the first @); {_PORT_HINT}"
    if not parts["port"] or (parts["port"].isascii() and parts["port"].isdigit()):
        return None
    return f"has a port that is not a number (as read after the host); {_PORT_HINT}"


def supported_url(url: str) -> str:
    """``url``, or a ``ValueError`` naming its problem: the body of the resources' pydantic check, which shows
    no input (``hide_input_in_errors``), so the message is all a caller sees. A SQLite file given by a
    relative path is made absolute (:func:`absolute_sqlite`)."""
    problem = database_url_problem(url)
    if problem:
        raise ValueError(problem)
    if url.startswith("sqlite"):  # a path read from the host, as SQLite and SQLAlchemy take it (UTF-8 text)
        from connector_ops.resources.virtual_files.sqlite_names import sqlite_name

        url = sqlite_name(url)
    return absolute_sqlite(url)


_SQLITE_RELATIVE = re.compile(r"^(sqlite(?:\+pysqlite)?:///)(?![/~])(?!file:)(?!:memory:)([^?]+)(\?.*)?$", re.DOTALL)


def absolute_sqlite(url: str) -> str:
    """``sqlite:///my.db`` as ``sqlite:////where/it/is/now/my.db``; any other URL as it is. A store made with a
    relative path keeps the file it found when it was made: its loader process, its checkpoints and its
    engine all name the same file, whatever directory the process moves to later (a notebook's ``%cd``)."""
    match = _SQLITE_RELATIVE.match(url)
    if match is None:
        return url
    return match.group(1) + os.path.abspath(match.group(2)) + (match.group(3) or "")


#: a store's ``database_url``: checked when the store is made (the facade, and the SQL store built directly),
#: also where it is made by hand (``%connectors set``, ``VirtualFileStoreAdapter(database_url=EnvVar(…))``)
DatabaseUrl = Annotated[str, AfterValidator(supported_url)]
