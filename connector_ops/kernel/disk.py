"""A floor of free disk space that every writer on this host keeps (``CONNECTOR_OPS_MIN_FREE_DISK``).

Nothing else bounds what a Push, a Pull export or a download writes: a gzip bomb of short rows (a small file
that inflates to 1 GiB) grew a SQLite database by 1.87 GiB, and a large enough one ran until the disk was full
— SQLite rolled back, but by then Dagster's run storage, a database server and every other process on that
disk had failed too. So each writer that grows a file here checks the free space of the folder it writes in,
before it starts and then every :data:`CHECK_EVERY_BYTES` it writes (a ``statvfs`` costs a few µs), and stops
with :class:`DiskBelowFloor` (500: an out-of-space host is the server's condition, not the caller's input)
while the floor still stands. The writers roll back as on any other error, so nothing is left of them.

The choke points: :func:`connector_ops.kernel.atomic.atomic_write` (platform files, the local drive, the outbox), the
SQLite store's write transactions (its progress handler, :mod:`connector_ops.resources.virtual_files.interrupts`)
and its loader process's data (:mod:`connector_ops.resources.virtual_files.sqlite_loader`), and the temporary
files in ``TMPDIR`` that a Push or a Pull spools to (:func:`temp_floor`). A PostgreSQL server's disk is not
ours to see: the server refuses by itself.

A SQLite write takes its space twice, in its log and then, at the checkpoint after its commit, in the
database file: its floor keeps room for both (:attr:`DiskFloor.reserve`,
:func:`connector_ops.resources.virtual_files.checkpoints.checkpoint_growth`). A disk that fills up anyway
(the floor off, another process) is :class:`DiskFull`, in the same words (:func:`disk_full`).
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

from connector_ops.kernel.errors import ActionFailed, ConfigurationError

MIN_FREE_DISK_VARIABLE = "CONNECTOR_OPS_MIN_FREE_DISK"
#: 1 GiB: room for what the other processes of the host still write once we stop (Dagster's run and event
#: storage, logs, a database server's next checkpoint), and for the WAL and pages SQLite writes at a commit
#: after the last check; small beside today's disks, large beside one run's logs.
DEFAULT_MIN_FREE_DISK = 1 << 30

#: a writable handle, binary or text: :meth:`DiskFloor.guard` hands back the kind it was given
_Handle = TypeVar("_Handle", bound=IO[Any])
#: a writer looks at the free space again after this many bytes (a few µs per 4 MiB: nothing measurable)
CHECK_EVERY_BYTES = 4 << 20
#: a SQLite statement looks again after this many seconds (its progress handler counts instructions, not bytes)
CHECK_EVERY_SECONDS = 0.01

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "t": 1000**4, "tb": 1000**4, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``2GiB``, ``500MiB``, ``1.5GB``, ``1048576`` (bytes) or ``0`` as a number of bytes; ``ValueError`` else."""
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"must be a size such as 1GiB, 500MiB or a number of bytes (0 turns the check off), "
                         f"got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def shown_size(size: int) -> str:
    """``size`` bytes for a person: ``1.5 GiB``, ``29.6 GiB``, ``300 MiB``, ``512 bytes``."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"


def size_setting(variable: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """The size (:func:`parse_size`) the environment variable ``variable`` sets, else ``default``; a bad value
    is refused naming the variable, like every other setting's."""
    value = (os.environ if environ is None else environ).get(variable) or None
    if value is None:
        return default
    try:
        return parse_size(value)
    except ValueError as exc:
        raise ConfigurationError(variable, str(exc)) from None


def min_free_disk(environ: Mapping[str, str] | None = None) -> int:
    """The floor ``CONNECTOR_OPS_MIN_FREE_DISK`` sets (default :data:`DEFAULT_MIN_FREE_DISK`)."""
    return size_setting(MIN_FREE_DISK_VARIABLE, DEFAULT_MIN_FREE_DISK, environ)


class DiskBelowFloor(ActionFailed):
    """The free space of a folder written to fell below ``CONNECTOR_OPS_MIN_FREE_DISK`` (status 500)."""


class DiskFull(DiskBelowFloor):
    """The disk of a folder written to ran out of space (``ENOSPC``, SQLite's "database or disk is full"):
    the floor was off, or something else on the host took the space. A 500, like the floor's."""


def free_space(folder: str) -> int:
    """The bytes an unprivileged writer may still write on the disk of ``folder``.

    A folder not made yet is measured where it will be made: on the disk of its nearest existing parent
    (a new ``CONNECTOR_OPS_HOME``, a SQLite URL in a new folder). The check comes before the writer makes its
    folder, and a write refused must not leave an empty one behind; ``statvfs`` of the missing folder itself
    made the first Push to such a store a 500 ``FileNotFoundError``."""
    path = os.path.abspath(folder)
    while True:
        try:
            stats = os.statvfs(path)
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                raise
            path = parent
            continue
        return stats.f_bavail * stats.f_frsize


def disk_full(folder: str, min_free: int, detail: str = "", done: str = "nothing was written",
              advice: str | None = None) -> DiskFull:
    """The error for a disk that filled up under a writer in ``folder``, in the floor's words: where, how
    much is free now, ``detail`` (e.g. a database's log size), what became of the write, and the setting
    (``min_free``: its value here) that stops writers before this happens — or ``advice`` instead, for a
    writer the floor does not hold (Dagster's own storage)."""
    try:
        free = shown_size(free_space(folder))
    except OSError:
        free = "unknown"
    extra = f"; {detail}" if detail else ""
    setting = advice or (
        f"{MIN_FREE_DISK_VARIABLE}=0 turns off the check that stops writers before the disk fills up"
        if min_free <= 0 else
        f"another process took the space that {MIN_FREE_DISK_VARIABLE}={shown_size(min_free)} keeps free")
    return DiskFull(f"no space left on the disk of {folder}: {free} free{extra}; {done} (free some space; "
                    f"{setting})")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says a disk (or a quota) ran out of space."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


#: what a write will still take beyond what it wrote, given the room it has (free space less the floor): a
#: number of bytes, exact, or any cheap bound of them that fits in the room (the exact count can cost more)
Reserve = Callable[[int], int]


@dataclass
class DiskFloor:
    """Keep at least ``min_free`` bytes free on the disk of ``folder`` (0: no check), and room besides for
    what ``reserve`` says the write will still take once written (a SQLite checkpoint's copy of its log)."""

    folder: str
    min_free: int
    reserve: Reserve | None = None
    _last: float = field(default=0.0, repr=False)
    _unchecked: int = field(default=0, repr=False)

    def check(self, reserve: Reserve | None = None) -> None:
        """Raise :class:`DiskBelowFloor` if the free space is below the floor now, or below the floor plus
        what ``reserve`` (by default :attr:`reserve`) says."""
        if self.min_free <= 0:
            return
        free = free_space(self.folder)
        if free < self.min_free:
            self._refuse(free, 0)
        reserve = reserve or self.reserve
        needed = reserve(free - self.min_free) if reserve is not None else 0
        if free < self.min_free + needed:
            self._refuse(free, needed)

    def _refuse(self, free: int, reserve: int) -> None:
        besides = (f" plus the {shown_size(reserve)} the database's checkpoint needs to copy this write from its "
                   "log into its file") if reserve else ""
        raise DiskBelowFloor(
            f"not enough free disk space in {self.folder}: {shown_size(free)} free, below "
            f"{MIN_FREE_DISK_VARIABLE}={shown_size(self.min_free)}{besides}; stopped before the disk filled up, "
            "nothing was written (free some space, or lower the setting; 0 turns the check off)")

    def check_soon(self) -> None:
        """:meth:`check`, at most every :data:`CHECK_EVERY_SECONDS` (for a caller that cannot count bytes)."""
        now = time.monotonic()
        if self.min_free > 0 and now - self._last >= CHECK_EVERY_SECONDS:
            self._last = now
            self.check()

    def wrote(self, size: int) -> None:
        """Count ``size`` bytes written; :meth:`check` once :data:`CHECK_EVERY_BYTES` have been since the last."""
        self._unchecked += size
        if self._unchecked >= CHECK_EVERY_BYTES:
            self._unchecked = 0
            self.check()

    def guard(self, handle: _Handle) -> _Handle:
        """``handle``, checking the floor every :data:`CHECK_EVERY_BYTES` written to it (the caller checks
        before it creates the file, so a refusal up front leaves not even an empty one)."""
        # a _Guarded stands in for the handle it wraps: it has what the writers call (write, close, …)
        return handle if self.min_free <= 0 else _Guarded(handle, self)  # type: ignore[return-value]


def temp_floor(environ: Mapping[str, str] | None = None) -> DiskFloor:
    """The floor of the temporary folder (``TMPDIR``) that a Push or a Pull spools to, checked now: a spool
    is refused before its file exists."""
    floor = DiskFloor(tempfile.gettempdir(), min_free_disk(environ))
    floor.check()
    return floor


class _Guarded:
    """A writable handle that checks its floor every :data:`CHECK_EVERY_BYTES`; all else goes to the handle."""

    def __init__(self, handle: IO[Any], floor: DiskFloor) -> None:
        self._handle, self._floor = handle, floor

    def write(self, data: Any) -> int:
        written = self._handle.write(data)
        self._floor.wrote(len(data))
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __iter__(self) -> Any:
        return iter(self._handle)
