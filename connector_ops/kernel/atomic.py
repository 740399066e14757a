"""Files that appear whole or not at all: write under a temporary name in the same folder, then rename.

A writer holds an exclusive ``flock`` on its temporary file (``.tmp-<pid>-…``) for as long as it writes;
the kernel releases the lock when the process dies, even by kill -9. :func:`sweep_leftovers` removes the
temporary files whose lock it can take — those of dead writers — and never one a live writer holds, on
this host or another sharing the folder, whatever became of the pid.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import time
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import IO

from connector_ops.kernel.disk import DiskFloor, disk_full, is_disk_full
from connector_ops.kernel.file_modes import create_new, creation_mode, replaced, take_over

TEMP_PREFIX = ".tmp-"


def temp_prefix() -> str:
    """``.tmp-<pid>-``: the prefix of this process's temporary files."""
    return f"{TEMP_PREFIX}{os.getpid()}-"


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], *, file_mode: int | None = None,
                 durable: bool = False, min_free_disk: int = 0) -> Iterator[IO[bytes]]:
    """Yield a binary handle whose bytes replace ``path`` only if the block succeeds.

    The file ends with the mode ``open(path, "w")`` would give it (:mod:`.file_modes`): a new one ``0o666``
    less the umask, one written again the permission bits it had (and its group, and its owner when root
    writes it); ``file_mode`` sets the bits instead (secrets: ``0o600``, whatever the umask). All is set
    before any byte is written; a file system refusing a mode: :mod:`.file_modes`. ``durable`` fsyncs
    the data before the rename (a crash then leaves the old file or the new one, never an empty one);
    ``min_free_disk`` is the floor of free space the writing keeps (:class:`~.disk.DiskFloor`, checked
    before the first byte and as they are written; 0: none). A disk that fills up anyway is a
    :class:`~.disk.DiskFull` naming the folder, with the temporary file removed.
    """
    target = Path(path)
    floor = DiskFloor(str(target.parent), min_free_disk)
    floor.check()
    previous = replaced(target)
    fd, tmp = _new_temp(target.parent, creation_mode(previous, file_mode))
    try:
        # the handle owns the descriptor from here, closed however the block ends: a lock or a mode refused
        # before it owned it left it open, a descriptor lost per failed write
        with os.fdopen(fd, "wb") as handle:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held until the fd closes or the process dies
            take_over(fd, previous, file_mode, target)
            yield floor.guard(handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_disk_full(exc):  # the floor off (0) or outrun: the folder named, not a bare errno 28
            raise disk_full(str(target.parent), min_free_disk) from None
        raise


def _new_temp(folder: Path, mode: int) -> tuple[int, str]:
    """A new temporary file of this process in ``folder``, made with ``mode`` (less the umask), and its path.
    Not ``tempfile.mkstemp``: it makes every file ``0o600``, whatever the umask."""
    for _ in range(100):
        tmp = os.path.join(folder, temp_prefix() + secrets.token_hex(6))
        with contextlib.suppress(FileExistsError):
            return create_new(tmp, mode), tmp
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", str(folder))


#: a temporary file younger than this is left alone: its writer may not have locked it yet
SWEEP_MIN_AGE_S = 60.0


def is_young(mtime: float, min_age_s: float, now: float) -> bool:
    """Whether a file dated ``mtime`` is younger than ``min_age_s`` — to be left to its writer.

    A date ahead of the clock by up to ``min_age_s`` counts as young (hosts sharing a folder disagree by
    seconds). Further ahead it says nothing of the file's age: the clock stepped back since it was written,
    or the folder was restored from elsewhere; taken at its word, the file would stay young until the clock
    caught up (days, maybe) and its leftover for as long. It counts as old: a temporary file whose writer
    lives is kept anyway (its lock), and data no record claims has had its grace.
    """
    return -min_age_s <= now - mtime < min_age_s


def sweep_leftovers(folder: str | os.PathLike[str], min_age_s: float = SWEEP_MIN_AGE_S) -> list[Path]:
    """Remove the temporary files of dead writers in ``folder`` (not recursive); returns what was removed.

    A file counts as a dead writer's when nobody holds its lock and it is older than ``min_age_s``
    (:func:`is_young`: one dated far in the future is old).
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(TEMP_PREFIX) or not entry.is_file(follow_symlinks=False):
            continue
        with contextlib.suppress(OSError):
            if is_young(entry.stat(follow_symlinks=False).st_mtime, min_age_s, now):
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a live writer holds it
                os.unlink(entry.path)
                removed.append(Path(entry.path))
            finally:
                os.close(fd)
    return removed


def sweep_unclaimed(folder: str | os.PathLike[str], claimed: Callable[[str, AbstractSet[str]], bool],
                    min_age_s: float = SWEEP_MIN_AGE_S) -> None:
    """Remove the files of ``folder`` that no record claims (``claimed(name, every name in the folder)``
    false) and that are older than ``min_age_s``: data a writer killed between putting it in place and
    recording it left behind, which no listing would ever show. A younger one is left to its writer, which
    may be at that step; one dated more than ``min_age_s`` in the future has had it (:func:`is_young`).
    The folder is read once: a record beside its data (``<id>.json``) is looked up in the names, not by a
    ``stat`` each (40,000 files: 0.9 s)."""
    now = time.time()
    entries = list(os.scandir(folder))
    names = {entry.name for entry in entries}
    for entry in entries:
        if not entry.name.startswith(TEMP_PREFIX) and not claimed(entry.name, names):
            with contextlib.suppress(OSError):
                if not is_young(entry.stat(follow_symlinks=False).st_mtime, min_age_s, now):
                    os.unlink(entry.path)


#: a folder's crash leftovers are looked for at most this often by the processes that start on it
SWEEP_INTERVAL_S = 3600.0
#: the file whose mtime says when a folder was last swept (:func:`sweep_due`)
SWEPT_STAMP = ".swept"
#: how far in the future a :data:`SWEPT_STAMP` may be dated and still count (hosts sharing a folder
#: disagree by seconds); one further ahead is stale, see :func:`sweep_due`
STAMP_AHEAD_TOLERANCE_S = 60.0


def sweep_due(folder: str | os.PathLike[str], interval_s: float = SWEEP_INTERVAL_S) -> bool:
    """Whether ``folder`` was not swept in the last ``interval_s`` (its :data:`SWEPT_STAMP` older, or none);
    if so the stamp is dated now, so that the processes starting after this one leave the sweep to it.

    A sweep reads the whole folder, and every process used to do it at its start (each CLI Push, each
    Dagster step, the file server's first request): 0.9 s at 40,000 files. Leftovers are rare (a writer
    killed mid-write) and harmless until removed, so finding them within the interval is enough. A stamp
    that cannot be written (a read-only folder) leaves the sweep to every start, as before.

    A stamp dated more than :data:`STAMP_AHEAD_TOLERANCE_S` in the future (the clock stepped back after a
    sweep, a folder restored from elsewhere) is stale too: taken at its word, no start would sweep until the
    clock caught up with it, for days maybe."""
    stamp = Path(folder) / SWEPT_STAMP
    with contextlib.suppress(OSError):
        if -STAMP_AHEAD_TOLERANCE_S <= time.time() - stamp.stat().st_mtime < interval_s:
            return False
    with contextlib.suppress(OSError):
        stamp.touch()
    return True
