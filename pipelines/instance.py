"""The Dagster instance of ``DAGSTER_HOME``, as every command-line path opens it (``pipeline run``, ``gc``, the
``%pipeline`` magic).

Opening the instance of a new home creates its SQLite storage (``history/runs.db``, ``history/runs/index.db``,
``schedules/schedules.db``) and stamps each with its Alembic revision. Two processes doing that at once (two cron
jobs, ``gc`` and ``pipeline run``, starting together on a fresh home) both stamp: one fails with ``Version table
'alembic_version' has more than one head present``, and the home stays broken for every later command
(upstream dagster-io/dagster#27390). So the first creation is done under an exclusive ``flock`` on a file in the
home; once the storage exists, opening takes the lock shared (one system call, never waiting but for a creation
under way, which a process that merely saw the files appear must not read half-stamped).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from connector_ops.kernel.disk import DiskFull, disk_full
from connector_ops.kernel.errors import ActionFailed, ConfigurationError, chained
from connector_ops.kernel.file_modes import NEW_FILE_MODE
from connector_ops.resources.virtual_files.db_errors import first_line
from connector_ops.resources.virtual_files.disk_full import is_full
from connector_ops.resources.virtual_files.sqlite_faults import sqlite_error_in

#: the lock file, in DAGSTER_HOME
LOCK_FILE = ".connector_ops.instance.lock"
#: what the default (SQLite) storage creates when the instance is first opened
SQLITE_STORAGE = ("history/runs.db", "history/runs/index.db", "schedules/schedules.db")
#: an environment variable ``dagster.yaml`` reads (``postgres_url: {env: DAGSTER_PG_URL}``)
_ENV_REFERENCE = re.compile(r"\benv:\s*[\"']?([A-Za-z_][A-Za-z0-9_]*)")
#: the password of a URL, up to the last ``@`` of its authority (an unencoded ``@`` in it included)
_URL_PASSWORD = re.compile(r"^[\w+.-]+://[^:/@]*:([^/?#]*)@[^@/?#]*(?:[/?#]|$)")


def home_instance() -> dg.DagsterInstance | None:
    """The instance of ``DAGSTER_HOME``, or ``None`` when it is unset. A home that is not an absolute path to a
    folder is a configuration error naming the variable (Dagster's own error was a 500)."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        return None
    path = Path(home)
    if not path.is_absolute():
        raise ConfigurationError("DAGSTER_HOME", f"must be an absolute path, got {home!r}")
    if not path.is_dir():
        raise ConfigurationError("DAGSTER_HOME", f"{home} is not a folder (create it, or point DAGSTER_HOME at one)")
    with _storage_lock(path), storage_faults():
        try:
            return dg.DagsterInstance.get()
        except Exception as exc:
            unreachable = storage_unreachable(exc, path)
            if unreachable is None:
                raise
            raise unreachable from None


def storage_unreachable(exc: BaseException, home: Path) -> ActionFailed | None:
    """``exc`` as Dagster's instance storage on a database server that could not be opened (refused, a wrong
    password, no such database), or ``None`` when it is not that. ``pipeline run`` and ``gc`` said only
    ``failed (500): DagsterPostgresException: too many retries for DB connection``: neither what failed to
    connect nor where it is configured. The driver's words keep no password of the URLs ``dagster.yaml`` reads
    from the environment (a password with an unencoded ``@`` shows its rest as the host the driver tried)."""
    import sqlalchemy as sa

    cause = next((seen for seen in chained(exc) if isinstance(seen, sa.exc.OperationalError)), None)
    if cause is None or sqlite_error_in(exc) is not None:
        return None
    words = first_line(cause)
    for secret in _passwords_read_by(home / "dagster.yaml"):
        for part in sorted({secret, *(p for p in secret.split("@") if len(p) >= 4)}, key=len, reverse=True):
            words = words.replace(part, "***")
    return ActionFailed(f"cannot open Dagster's instance storage, which {home / 'dagster.yaml'} configures: {words}; "
                        "check the URL its storage is given (deploy/dagster.yaml reads DAGSTER_PG_URL) and that "
                        "the server is running")


def _passwords_read_by(config: Path) -> list[str]:
    """The passwords of the URLs in the environment variables ``config`` reads (none if it cannot be read)."""
    try:
        names = set(_ENV_REFERENCE.findall(config.read_text(errors="replace")))
    except OSError:
        return []
    found = (_URL_PASSWORD.match(os.environ.get(name, "")) for name in sorted(names))
    return [match.group(1) for match in found if match and match.group(1)]


@contextlib.contextmanager
def storage_faults() -> Iterator[None]:
    """The block's failure to write the SQLite storage of ``DAGSTER_HOME`` for want of space, as
    :class:`~connector_ops.kernel.disk.DiskFull` naming that folder (:func:`storage_full`)."""
    try:
        yield
    except Exception as exc:
        full = storage_full(exc)
        if full is None:
            raise
        raise full from None


def storage_full(exc: BaseException) -> DiskFull | None:
    """``exc`` as the full disk of ``DAGSTER_HOME``'s SQLite storage, or ``None`` when it is not that.

    Dagster writes every event of a run to it; once its disk filled, ``pipeline run`` ended with
    ``failed (500): database error: database or disk is full`` (or "disk I/O error"), naming neither the
    folder nor that it was Dagster's history, not the store, that had no room."""
    home = os.environ.get("DAGSTER_HOME")
    error = sqlite_error_in(exc)
    if not home or not os.path.isabs(home) or error is None:
        return None
    if not is_full(error, os.path.join(home, SQLITE_STORAGE[0])):
        return None
    return disk_full(home, 0,
                     detail=f"Dagster's run and event storage in DAGSTER_HOME ({', '.join(SQLITE_STORAGE)}) "
                            "could not grow",
                     done="the run stopped where its history could not be written",
                     advice="Dagster's own writes are not held to CONNECTOR_OPS_MIN_FREE_DISK: keep DAGSTER_HOME "
                            "on a disk with room")


@contextlib.contextmanager
def _storage_lock(home: Path) -> Iterator[None]:
    """Exclusive while the SQLite storage is not all there yet (or the instance stores elsewhere: PostgreSQL's
    first migration is no safer), shared once it is. A home the process cannot write to is opened unlocked:
    nothing can be created there anyway. The lock file is made as ``open`` would (0o666 less the umask): made
    ``0o644``, the other users of a home shared with a group could not open it to take the lock."""
    created = all((home / name).exists() for name in SQLITE_STORAGE)
    try:
        fd = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, NEW_FILE_MODE)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if created else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
