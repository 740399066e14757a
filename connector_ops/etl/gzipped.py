"""Push of a gzip-compressed CSV or JSON file (``rows.csv.gz``, ``events.ndjson.gz``): recognised by its first
bytes, decompressed as it is read (every member of a file made by concatenating several), and then read
like the same file uncompressed, on the same paths, with the same rows and errors (their line numbers
counted in the decompressed text). The file's format comes from its name without ``.gz``, or from its
content type. Progress counts the compressed bytes, whose total is the platform file's size.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import IO

from connector_ops.kernel.errors import InvalidInput

MAGIC = b"\x1f\x8b"
FIELD = "platformFile"

Open = Callable[[], AbstractContextManager[IO[bytes]]]


class Gunzipped(io.RawIOBase):
    """The decompressed bytes of ``stored``, a gzip file; a file that is not whole is a 400. The gzip reader
    is made at the first read, so that :func:`~connector_ops.kernel.progress.reading_with_progress` may put
    its counter around ``stored`` first."""

    def __init__(self, stored: IO[bytes]) -> None:
        self.stored = stored
        self._reader: gzip.GzipFile | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._reader is None:
            self._reader = gzip.GzipFile(fileobj=self.stored, mode="rb")
        try:
            return self._reader.readinto(buffer)
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise InvalidInput(FIELD, f"the file is gzip-compressed, but its compressed data is broken "
                                      f"({exc or type(exc).__name__}); nothing was loaded") from None


def is_gzip(open_file: Open) -> bool:
    """Whether the file starts with gzip's two bytes (no text in UTF-8, UTF-16 or UTF-32 does)."""
    with open_file() as raw:
        head = b""
        while len(head) < len(MAGIC) and (chunk := raw.read(len(MAGIC) - len(head))):
            head += chunk
    return head == MAGIC


def gunzipping(open_file: Open) -> Open:
    """``open_file`` whose streams are decompressed (raw streams: every reader buffers what it reads)."""

    @contextmanager
    def opened() -> Iterator[IO[bytes]]:
        with open_file() as raw:
            yield Gunzipped(raw)  # type: ignore[misc]

    return opened


def format_name(name: str) -> str:
    """The name that tells the decompressed file's format: without its ``.gz``."""
    return name[:-3] if name.lower().endswith(".gz") else name
