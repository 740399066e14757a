"""The command line's standard streams, made safe once where the console script starts.

An answer that cannot be printed must not turn the action behind it into a failure: the work is done (a
file stored, a drive item copied) and a script that retries on exit 1 would do it twice. So printing
never fails for an encoding: on a console whose encoding lacks a character of the output (Windows'
cp1252, ``PYTHONIOENCODING=ascii``, a ``C`` locale without UTF-8 mode) JSON is written with ``\\u``
escapes (still JSON, with the same data) and human lines with Python's backslash escapes.

A stream a daemon, a cron job or ``<&- 2>&-`` left closed is opened on ``/dev/null``, at the level of its
file descriptor: else the first file the command opens (a SQLite database) would take number 0, 1 or 2,
and a ``print`` (or a child process's output) would be written into it; and ``print(file=sys.stderr)``
with no stderr writes to stdout, spoiling ``--json``. A stdout that fails (a full disk, a reader gone)
raises :class:`OutputError`, which the command line turns into one line and an exit code, not a traceback.
"""

from __future__ import annotations

import errno
import io
import json
import locale
import os
import sys
from typing import Any, TextIO


def carries(text: str, stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (stdout by default) can write ``text`` as it is, in its own encoding."""
    stream = stream if stream is not None else sys.stdout
    try:
        text.encode(getattr(stream, "encoding", None) or "utf-8")
    except UnicodeEncodeError:  # a character the encoding lacks, or a lone surrogate (an undecodable name)
        return False
    return True


def json_text(value: Any, *, indent: int | None = None, default: Any = None, stream: TextIO | None = None) -> str:
    """``value`` as JSON text that ``stream`` (stdout by default) can carry: its characters as they are
    when the stream's encoding has them all, else ``\\u`` escapes (``ensure_ascii``), never half a document."""
    text = json.dumps(value, indent=indent, default=default, ensure_ascii=False)
    return text if carries(text, stream) else json.dumps(value, indent=indent, default=default)


class OutputError(Exception):
    """Writing stdout failed. Not an ``OSError``: click answers a broken pipe with a silent exit 1 of its own,
    which a ``set -o pipefail`` script cannot tell from a failure."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))
        self.errno = error.errno
        self.strerror = error.strerror or str(error)

    @property
    def reader_gone(self) -> bool:
        """The reader stopped reading (``| head``, ``| grep -q``): not a failure of the command."""
        return self.errno == errno.EPIPE


class _Stdout(io.FileIO):
    """File descriptor 1, whose write errors are :class:`OutputError`."""

    def write(self, data: Any) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            raise OutputError(exc) from None


def prepare_standard_streams() -> None:
    """For the console script, before anything else: open closed descriptors 0-2 on ``/dev/null``; stdout
    raising :class:`OutputError`, stdout and stderr writing a character their encoding lacks as a backslash
    escape (every ``print`` and ``click.echo`` after it is safe). A closed stdin stays ``sys.stdin is None``,
    so that reading the input from it can say it is closed."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    encoding = getattr(sys.stdout, "encoding", None) or locale.getpreferredencoding(False)
    unbuffered = bool(getattr(sys.stdout, "write_through", False))  # python -u, PYTHONUNBUFFERED
    if sys.stdout is not None:
        sys.stdout.flush()
    raw = _Stdout(1, "w", closefd=False)
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors="backslashreplace",
                                  line_buffering=raw.isatty(), write_through=unbuffered)
    if sys.stderr is None:
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), errors="backslashreplace",
                                      line_buffering=True)
    else:
        sys.stderr.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]  # the interpreter's TextIOWrapper


def silence_stdout() -> None:
    """After an :class:`OutputError`: what is still buffered for stdout goes to ``/dev/null`` (its flush as
    the interpreter ends would fail again, with a traceback)."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
