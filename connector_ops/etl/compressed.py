"""Compressed CSV and JSON files. Pull writes one when the export's name asks for it (``report.csv.gz``:
gzip; ``.bz2``, ``.xz``). Push reads one (``rows.csv.gz``, ``events.ndjson.bz2``, ``export.csv.xz``): recognised
by its first bytes, decompressed as it is read (every stream of a file made by concatenating several), and
then read like the same file uncompressed, on the same paths, with the same rows and errors (their line
numbers counted in the decompressed text). The file's format comes from its name without the compression's
suffix, or from its content type. Progress counts the compressed bytes, whose total is the platform file's
size. Python's own ``gzip``, ``bz2`` and ``lzma`` read them; a zip archive (an ``.xlsx`` workbook is one) or a
zstd file is a 400 that says what to do instead.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from connector_ops.etl.readers import FIELD
from connector_ops.etl.readers import Reopen as Open
from connector_ops.kernel.errors import InvalidInput


@dataclass(frozen=True)
class Compression:
    name: str
    magic: re.Pattern[bytes]  # the file's first bytes
    suffix: str
    content_type: str
    reader: Callable[[Any], IO[bytes]]  # a file object of the compressed bytes -> one of the decompressed
    compressor: Callable[[], Any]  # a new incremental compressor (``compress(data)``, ``flush()``)


#: Each magic in full, so that no text is taken for compressed data: gzip's two bytes and its one method
#: (deflate); bzip2's "BZh" (which a CSV header may start with), its block size and the magic of its first
#: block or of its end; xz's six bytes. Written: gzip at level 6, the ``gzip`` command's default (a header
#: without name or time: the same rows make the same bytes); bzip2 at its usual 9; xz at preset 1, not the
#: command's 6, which took 12 times as long for a file a quarter smaller (20 MB of the benchmark's CSV: 2.0 s
#: against 24.7 s, 4.3 against 3.3 MB).
COMPRESSIONS = (Compression("gzip", re.compile(rb"\x1f\x8b\x08"), ".gz", "application/gzip",
                            lambda f: gzip.GzipFile(fileobj=f, mode="rb"),
                            lambda: zlib.compressobj(6, zlib.DEFLATED, 31)),
                Compression("bzip2", re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"), ".bz2", "application/x-bzip2",
                            bz2.BZ2File, bz2.BZ2Compressor),
                Compression("xz", re.compile(rb"\xfd7zXZ\x00"), ".xz", "application/x-xz", lzma.LZMAFile,
                            lambda: lzma.LZMACompressor(preset=1)))
#: what the decompressors raise on data that is not whole (bz2 raises a bare OSError: told apart from the
#: source's own failures by :class:`_Watched`)
BROKEN = (EOFError, OSError, zlib.error, lzma.LZMAError)
HEAD = 10  # the longest magic (bzip2's)


class _Watched:
    """The compressed stream as the decompressor reads it, noting whether a read of it failed (then the
    failure is the source's — a broken link, a disk — not the compressed data's)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream, self.failed = stream, False

    def read(self, size: int = -1) -> bytes:
        try:
            return self.stream.read(size)
        except BaseException:
            self.failed = True
            raise


class Decompressed(io.RawIOBase):
    """The decompressed bytes of ``stored``; data that is not whole is a 400. The decompressor is made at the
    first read, so that :func:`~connector_ops.kernel.progress.reading_with_progress` may put its counter
    around ``stored`` first."""

    def __init__(self, stored: IO[bytes], compression: Compression) -> None:
        self.stored, self._compression = stored, compression
        self._source: _Watched | None = None
        self._reader: IO[bytes] | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._reader is None:
            self._source = _Watched(self.stored)
            self._reader = self._compression.reader(self._source)
        try:
            return self._reader.readinto(buffer)  # type: ignore[attr-defined]
        except BROKEN as exc:
            if self._source is not None and self._source.failed:
                raise
            raise InvalidInput(FIELD, f"the file is {self._compression.name}-compressed, but its compressed data "
                                      f"is broken ({exc or type(exc).__name__}); nothing was loaded") from None


def compression_of(open_file: Open, name: str) -> Compression | None:
    """The file's compression, told by its first bytes (no text in UTF-8, UTF-16 or UTF-32 starts so); None
    for a plain file. A zip archive or a zstd file is a 400."""
    with open_file() as raw:
        head = b""
        while len(head) < HEAD and (chunk := raw.read(HEAD - len(head))):
            head += chunk
    if head.startswith(b"PK\x03\x04"):
        what = "an Excel workbook (.xlsx, a zip archive)" if name.lower().endswith((".xlsx", ".xlsm")) else \
            "a zip archive, which may hold several files"
        raise InvalidInput(FIELD, f"the file is {what}: Push reads CSV, JSON and Parquet; save or extract the "
                                  "CSV and push that (compressed with gzip, bzip2 or xz if you like)")
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        raise InvalidInput(FIELD, "the file is zstd-compressed, which Push does not read: decompress it, or "
                                  "compress it with gzip, bzip2 or xz")
    return next((c for c in COMPRESSIONS if c.magic.match(head)), None)


def decompressing(open_file: Open, compression: Compression) -> Open:
    """``open_file`` whose streams are decompressed (raw streams: every reader buffers what it reads)."""

    @contextmanager
    def opened() -> Iterator[IO[bytes]]:
        with open_file() as raw:
            yield Decompressed(raw, compression)  # type: ignore[misc]

    return opened


def format_name(name: str, compression: Compression) -> str:
    """The name that tells the decompressed file's format: without the compression's suffix."""
    return name[:-len(compression.suffix)] if name.lower().endswith(compression.suffix) else name


def compression_named(name: str) -> Compression | None:
    """The compression a file name asks for by its suffix (``report.csv.gz``), if any."""
    return next((c for c in COMPRESSIONS if name.lower().endswith(c.suffix)), None)


def compressing(chunks: Iterable[bytes], compression: Compression) -> Iterator[bytes]:
    """``chunks`` as one compressed stream, a piece at a time (the compressor holds what it has not yet
    written: bounded by its window, not by the data)."""
    compressor = compression.compressor()
    for chunk in chunks:
        if packed := compressor.compress(chunk):
            yield packed
    yield compressor.flush()
