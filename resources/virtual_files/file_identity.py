"""Which file is at a path: ``(st_dev, st_ino)``, the identity :mod:`.store_file`, the checkpoints and the
SQLite loader process (:mod:`.sqlite_ingest`, which imports nothing heavier) compare to tell a store's file
from one deleted, replaced or moved since it was opened — and, of a database in WAL mode, its ``-wal`` log
(:func:`log_path`): a backup copied over the live file keeps the file's identity, and only its log's
changes (removed with it, then made anew)."""

from __future__ import annotations

import os
from collections.abc import Sequence

Identity = tuple[int, int]


def identity(path: str) -> Identity | None:
    """The identity of the file at ``path`` (``None``: there is none)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def log_path(path: str) -> str:
    """The write-ahead log of the SQLite database at ``path``: it exists while any connection has the
    database open in WAL mode, and SQLite deletes it only as the last one closes."""
    return path + "-wal"


def with_log(path: str) -> tuple[Identity | None, Identity | None]:
    """The identities of the SQLite database at ``path`` and of its log (:func:`log_path`): what a connection
    opened, and what a copy over the live file changes (only the log's, :mod:`.store_file`)."""
    return identity(path), identity(log_path(path))


def same_file(path: str, opened: Sequence[int] | None) -> bool:
    """Whether the file at ``path`` is still the one whose identity was ``opened`` (a list, once sent as JSON)."""
    return opened is not None and identity(path) == tuple(opened)
