"""Compressed CSV and JSON files, and zip archives of one file. Pull writes one when the export's name asks
for it (``report.csv.gz``: gzip; ``.bz2``, ``.xz``, ``.zst``; ``.zip``: an archive holding ``report.csv``).
Push reads one (``rows.csv.gz``, ``events.ndjson.zst``, ``export.zip``), recognised by its first bytes, and
then reads what it holds like the same file uncompressed, on the same paths, with the same rows and errors
(their line numbers counted in the decompressed text):

- a compressed stream is decompressed as it is read (every stream of a file made by concatenating several);
  the format comes from the name without the compression's suffix, or from the content type; progress
  counts the compressed bytes, whose total is the platform file's size. Python's own ``gzip``, ``bz2`` and
  ``lzma`` read and write them, and its ``compression.zstd`` zstd (from Python 3.14; before it, the same
  module as ``backports.zstd``).
- a zip archive must hold exactly one file (folders and the ``__MACOSX`` copies macOS adds do not count),
  or one data file beside others (``orders.csv`` beside ``README.txt``), which names the format; progress
  counts its decompressed bytes. A zip archive's directory is at its
  end, so one that arrives over HTTP is copied to a temporary file first. An Excel workbook (a zip archive
  too), an archive of several files or an encrypted one is a 400 that says what to do instead.
- a binary format Push does not read, told by its first bytes, is a 400 saying what it is and what to push
  instead, before any text reader takes it for text in a wrong encoding: a legacy Excel workbook (``.xls``,
  an OLE2 compound file) and an Arrow IPC (Feather) file.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import re
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, NamedTuple, cast

from connector_ops.etl.json_readers import JSON_SUFFIXES
from connector_ops.etl.push_parquet import PARQUET_SUFFIXES
from connector_ops.etl.readers import FIELD
from connector_ops.etl.suffixes import ends_with, without
from connector_ops.etl.tsv import CSV_SUFFIXES
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.overlap import overlapped
from connector_ops.kernel.platform_file import base_name
from connector_ops.kernel.streams import Open, seekable_opener


class ZipCompressor:
    """A zip archive of one file, ``member``, deflated at level 6, with the incremental API of ``zlib``'s
    compressors: ``compress(data)`` and ``flush()`` each answer the archive's bytes written since. Its size
    is not known before the end, so the sizes follow the data (a data descriptor) in the Zip64 form, which
    keeps a file past 4 GiB whole."""

    def __init__(self, member: str) -> None:
        self._parts: list[bytes] = []
        info = zipfile.ZipInfo(member, time.localtime()[:6])
        info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o100644 << 16  # a file, rw-r--r--
        self._archive = zipfile.ZipFile(_Collected(self._parts), "w", compresslevel=6)
        self._stream = self._archive.open(info, "w", force_zip64=True)

    def compress(self, data: bytes) -> bytes:
        self._stream.write(data)
        return self._taken()

    def flush(self) -> bytes:
        self._stream.close()
        self._archive.close()
        return self._taken()

    def _taken(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


class _Collected(io.RawIOBase):
    """A sink that keeps what is written to it in ``parts``, for the caller to take."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.parts.append(bytes(data))
        return len(data)


try:
    from compression import zstd  # type: ignore[import-not-found]  # Python 3.14's; mypy checks as 3.11
except ImportError:
    from backports import zstd

#: zstd as the ``zstd`` command writes it, with a checksum of the content (which libzstd checks on reading),
#: at level 1: 83 MB of the benchmark's CSV in 0.55 s and 19.3 MB, where gzip's level 6 took 4.3 s for
#: 19.7 MB (level 3, the command's default, 0.85-1.2 s for 21.0 MB; a throwaway script, 2-3 rounds each)
ZSTD_OPTIONS = {zstd.CompressionParameter.compression_level: 1, zstd.CompressionParameter.checksum_flag: 1}


@dataclass(frozen=True)
class Compression:
    name: str
    magic: re.Pattern[bytes]  # the file's first bytes
    suffix: str
    content_type: str
    reader: Callable[[Any], io.BufferedIOBase]  # a file object of the compressed bytes -> one of the decompressed
    compressor: Callable[[], Any]  # a new incremental compressor (``compress(data)``, ``flush()``)


#: Each magic in full, so that no text is taken for compressed data: gzip's two bytes and its one method
#: (deflate); bzip2's "BZh" (which a CSV header may start with), its block size and the magic of its first
#: block or of its end; xz's six bytes; zstd's frame, or the skippable frame ``pzstd`` starts with. Written:
#: gzip at level 6, the ``gzip`` command's default (a header without name or time: the same rows make the
#: same bytes); bzip2 at its usual 9; xz at preset 1, not the command's 6, which took 12 times as long for a
#: file a quarter smaller (20 MB of the benchmark's CSV: 2.0 s against 24.7 s, 4.3 against 3.3 MB); zstd as
#: :data:`ZSTD_OPTIONS` say.
COMPRESSIONS = (Compression("gzip", re.compile(rb"\x1f\x8b\x08"), ".gz", "application/gzip",
                            lambda f: gzip.GzipFile(fileobj=f, mode="rb"),
                            lambda: zlib.compressobj(6, zlib.DEFLATED, 31)),
                Compression("bzip2", re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"), ".bz2", "application/x-bzip2",
                            bz2.BZ2File, bz2.BZ2Compressor),
                Compression("xz", re.compile(rb"\xfd7zXZ\x00"), ".xz", "application/x-xz", lzma.LZMAFile,
                            lambda: lzma.LZMACompressor(preset=1)),
                Compression("zstd", re.compile(rb"\x28\xb5\x2f\xfd|[\x50-\x5f]\x2a\x4d\x18"), ".zst",
                            "application/zstd", zstd.ZstdFile, lambda: zstd.ZstdCompressor(options=ZSTD_OPTIONS)))
#: a zip archive's first bytes: a file's header, or the end of an archive that holds nothing
ZIP_MAGIC = re.compile(rb"PK(\x03\x04|\x05\x06)")
ZIP_SUFFIX, ZIP_TYPE = ".zip", "application/zip"
#: what the decompressors raise on data that is not whole (bz2 raises a bare OSError: told apart from the
#: source's own failures by :class:`_Watched`)
BROKEN = (EOFError, OSError, zlib.error, lzma.LZMAError, zstd.ZstdError, zipfile.BadZipFile)
HEAD = 10  # the longest magic (bzip2's)
#: an OLE2 compound file's first bytes: a legacy Excel workbook (.xls), or another Office 97-2003 document
OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
#: an Arrow IPC file's (Feather version 2's) first bytes
ARROW_MAGIC = b"ARROW1"
#: what a zip tool adds beside the files: macOS's resource forks and Finder's and Explorer's own files
NOT_A_MEMBER = re.compile(r"(^|/)(__MACOSX/|\.DS_Store$|Thumbs\.db$)")
#: the suffixes that name each export type's data, as Push tells formats (a name with none of them is any
#: type's)
TYPE_SUFFIXES = {"csv": CSV_SUFFIXES, "json": JSON_SUFFIXES, "parquet": PARQUET_SUFFIXES}
DATA_SUFFIXES = tuple(suffix for suffixes in TYPE_SUFFIXES.values() for suffix in suffixes)
#: the zip methods Python reads (stored, deflate, bzip2, lzma), and the names of some it does not
READABLE_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA})
METHOD_NAMES = {9: "Deflate64", 93: "Zstandard", 95: "xz", 96: "JPEG", 97: "WavPack", 98: "PPMd"}


class _Watched:
    """The stored stream as the decompressor reads it, noting whether a read of it failed (then the failure
    is the source's — a broken link, a disk — not the compressed data's). Closing it leaves the stream to its
    opener, as ``gzip``, ``bz2``, ``lzma`` and ``zipfile`` do with a file object they were given."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream, self.failed = stream, False

    def read(self, size: int = -1) -> bytes:
        try:
            return self.stream.read(size)
        except BaseException:
            self.failed = True
            raise

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:  # seek and tell for a zip archive
        return getattr(self.stream, name)


class _Decoded(io.RawIOBase):
    """What ``reader`` makes of ``source``'s bytes; data that is not whole is a 400 that says the file is
    ``described``. The reader is made at the first read (after :func:`reading_with_progress` may have put its
    counter around a :class:`Decompressed` stream's ``stored``)."""

    def __init__(self, source: IO[bytes], reader: Callable[[Any], io.BufferedIOBase], described: str) -> None:
        self._source, self._make, self._described = source, reader, described
        self._watched: _Watched | None = None
        self._reader: io.BufferedIOBase | None = None

    def readable(self) -> bool:
        return True

    # override: callers pass a bytearray or memoryview, which it slices (typeshed: any buffer)
    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        try:
            if self._reader is None:
                self._watched = _Watched(self._source)
                self._reader = self._make(self._watched)
            return self._reader.readinto(buffer)
        except BROKEN as exc:
            if self._watched is not None and self._watched.failed:
                raise
            raise BrokenData(FIELD, f"the file is {self._described}, but its compressed data is broken "
                                    f"({exc or type(exc).__name__}); nothing was loaded") from None


class BrokenData(InvalidInput):
    """Compressed data that is cut short or damaged (a 400)."""


class Decompressed(_Decoded):
    """The decompressed bytes of ``stored``, a compressed stream; progress counts ``stored``'s bytes."""

    def __init__(self, stored: IO[bytes], compression: Compression) -> None:
        super().__init__(stored, compression.reader, f"{compression.name}-compressed")

    @property
    def stored(self) -> IO[bytes]:
        return self._source

    @stored.setter
    def stored(self, stream: IO[bytes]) -> None:
        self._source = stream


def _head(open_file: Open) -> bytes:
    with open_file() as raw:
        head = b""
        while len(head) < HEAD and (chunk := raw.read(HEAD - len(head))):
            head += chunk
    return head


#: the least a compressed CSV or JSON file is taken to hold for each byte stored, where a loader is chosen
#: before it is read: text compresses 4 to 9 times with each of these (the benchmark's CSV 4.3 times by gzip
#: and by zstd, its NDJSON 8.8 times by gzip). A 2.8 MiB gzip CSV of 150,000 rows (11.7 MiB) then goes
#: column-wise on SQLite, 0.43 s against 0.90 s by the row reader (a throwaway script, 3 rounds each).
TEXT_RATIO = 3


class Unpacked(NamedTuple):
    """What a Push reads: a new read of it, its name (which tells the format), the bytes progress counts
    (``size``) and the bytes of text the load reads (``text_size``; estimated for a compressed stream)."""

    open: Open
    name: str
    size: int | None
    text_size: int | None


@contextlib.contextmanager
def unpacked(open_file: Open, name: str, size: int | None, in_archive: bool = False) -> Iterator[Unpacked]:
    """The file a Push reads: the platform file itself; what its compressed stream decompresses to, named
    without the compression's suffix (``size``, what progress counts, stays the stored size); or the one file
    of a zip archive, by its own name and size (and decompressed in turn if it is a compressed stream)."""
    head = _head(open_file)
    _refuse_binary(head)
    if ZIP_MAGIC.match(head):
        if ends_with(name, (".xlsx", ".xlsm")):
            raise _workbook()
        if in_archive:
            raise InvalidInput(FIELD, f"the zip archive's file {name} is a zip archive too: extract the file "
                                      "you want and push that")
        with seekable_opener(open_file, "connector-ops-zip-") as archive:
            member = _the_member(archive)
            with unpacked(_member_opener(archive, member), member.filename.rsplit("/", 1)[-1], member.file_size,
                          in_archive=True) as inner:
                yield inner
        return
    compression = next((c for c in COMPRESSIONS if c.magic.match(head)), None)
    if compression is None:
        inside = Unpacked(open_file, name, size, size)
    else:
        inside = Unpacked(_decompressing(open_file, compression), format_name(name, compression), size,
                          None if size is None else size * TEXT_RATIO)
    if compression is None and not in_archive:  # the platform file itself: nothing decoded, no check to read
        yield inside
        return
    with _judged_whole(inside.open):  # the innermost decoder's check covers the archive's too
        yield inside


def _decompressing(open_file: Open, compression: Compression) -> Open:
    """``open_file``'s reads decompressed (raw streams: every reader buffers what it reads)."""

    @contextlib.contextmanager
    def opened() -> Iterator[IO[bytes]]:
        with open_file() as raw:
            # a RawIOBase: a binary file, which typeshed's IO[bytes] (a class of its own) does not take in
            yield Decompressed(raw, compression)  # type: ignore[misc]

    return opened


@contextlib.contextmanager
def _judged_whole(open_file: Open) -> Iterator[None]:
    """A 400 about the file's content is checked against the compressed data's own check (a CRC, read at its
    end): broken data may decompress to text that fails first, a ragged row of garbage, which is then
    called what it is, broken data."""
    try:
        yield
    except InvalidInput as exc:
        if exc.field == FIELD and not isinstance(exc, BrokenData):
            with open_file() as raw:
                while raw.read(1 << 20):
                    pass
        raise


def _the_member(archive: Open) -> zipfile.ZipInfo:
    """The archive's one file, checked that Python can read it; else a 400 that says why."""
    with archive() as raw:
        try:
            listed = zipfile.ZipFile(raw).infolist()
        except (zipfile.BadZipFile, EOFError, ValueError) as exc:  # a download cut short loses the directory
            raise InvalidInput(FIELD, f"the file starts as a zip archive, but its directory at the end is missing "
                                      f"or broken ({exc}): is the file whole? nothing was loaded") from None
    if any(info.filename == "[Content_Types].xml" for info in listed):  # every Office Open XML file holds it
        raise _workbook()
    files = [info for info in listed if not info.is_dir() and not NOT_A_MEMBER.search(info.filename)]
    if not files:
        raise InvalidInput(FIELD, "the file is a zip archive that holds no file: nothing was loaded")
    data = [info for info in files if _is_data(info.filename)] if len(files) > 1 else files
    if len(data) != 1:  # several files, and not one data file among them (a README beside a CSV is fine)
        shown = ", ".join(info.filename for info in files[:5]) + (f" and {len(files) - 5} more" * (len(files) > 5))
        raise InvalidInput(FIELD, f"the file is a zip archive of {len(files)} files ({shown}): Push reads one "
                                  "file; push that file, or a zip archive that holds only it (or only it as CSV, "
                                  "JSON or Parquet)")
    member = data[0]
    if member.flag_bits & 0x1:
        raise InvalidInput(FIELD, f"the file is a zip archive whose {member.filename} is encrypted (it has a "
                                  "password): extract it and push the file itself")
    if member.compress_type not in READABLE_METHODS:
        method = METHOD_NAMES.get(member.compress_type, "an unusual method")
        raise InvalidInput(FIELD, f"the file is a zip archive whose {member.filename} is compressed by "
                                  f"{method} (method {member.compress_type}), which Push cannot read: make the "
                                  "archive again with Deflate (every zip tool's default), or push the file itself")
    return member


def _is_data(name: str) -> bool:
    """Whether a file's name says CSV (or TSV), JSON, NDJSON or Parquet, compressed or not, as Push tells
    formats: the one such file of an archive is read when others lie beside it (a README, a licence)."""
    plain = next((format_name(name, c) for c in COMPRESSIONS if ends_with(name, c.suffix)), name)
    return ends_with(plain, DATA_SUFFIXES)


def _refuse_binary(head: bytes) -> None:
    """A 400 for a binary format told by its first bytes ``head``: read as text, it got "set
    parameters.encoding", and with one set, rows of garbage or a NUL error."""
    if head.startswith(OLE2_MAGIC):
        raise InvalidInput(FIELD, "the file is a legacy Excel workbook (.xls) or another Office 97-2003 document "
                                  "(an OLE2 compound file), not text: Push reads CSV, JSON and Parquet, also "
                                  "compressed or zipped; save the sheet as CSV and push that")
    if head.startswith(ARROW_MAGIC):
        raise InvalidInput(FIELD, "the file is an Arrow IPC file (Feather; it starts with ARROW1), not text: Push "
                                  "reads CSV, JSON and Parquet; write the table as Parquet (pyarrow.parquet."
                                  "write_table, pandas' to_parquet) and push that")


def _workbook() -> InvalidInput:
    return InvalidInput(FIELD, "the file is an Excel workbook (a zip archive of XML): Push reads CSV, JSON and "
                               "Parquet, also compressed or zipped; save the sheet as CSV and push that")


def _member_opener(archive: Open, member: zipfile.ZipInfo) -> Open:
    """Opens of ``member`` of the zip ``archive`` (a seekable file), as raw streams that cannot seek: a
    Parquet reader then copies the member once, instead of seeking back through its deflate stream."""

    @contextlib.contextmanager
    def opened() -> Iterator[IO[bytes]]:
        def reader(watched: Any) -> io.BufferedIOBase:  # the member's reader keeps the archive; both end with ``raw``
            # cast: opened to read, a ZipExtFile (a BufferedIOBase); typeshed types open() for writing too
            return cast(io.BufferedIOBase, zipfile.ZipFile(watched).open(member))

        with archive() as raw:
            yield _Decoded(raw, reader, "a zip archive")  # type: ignore[misc]  # as Decompressed above

    return opened


def format_name(name: str, compression: Compression) -> str:
    """The name that tells the decompressed file's format: without the compression's suffix."""
    return without(name, compression.suffix)


class Packing(NamedTuple):
    """How Pull writes an export whose name asks for it: the name's suffix, the file's content type and a
    new compressor (``compress(data)``, ``flush()``)."""

    suffix: str
    content_type: str
    compressor: Callable[[], Any]


def packing_named(export_name: str, export_type: str) -> Packing | None:
    """What an export's name asks for by its suffix: a compression (``report.csv.gz``), a zip archive of
    one file (``report.zip``), or nothing. A 400 for a name that asks for two (``report.csv.gz.zip``: the
    archive would hold a plain file named ``.gz``) or names another type's data (``report.parquet`` for a
    CSV export, which Push would then read as Parquet)."""
    suffixes = [ZIP_SUFFIX, *(c.suffix for c in COMPRESSIONS)]
    packing = next((suffix for suffix in suffixes if ends_with(export_name, suffix)), None)
    data = (without(export_name, packing) if packing else export_name).strip().lower()
    if packing and data.endswith(tuple(suffixes)):
        raise InvalidInput("exportName", f"{export_name!r} asks for two packings: keep one of "
                                         f"{data[data.rindex('.'):]} and {packing}")
    other = next((kind for kind, ends in TYPE_SUFFIXES.items() if kind != export_type and data.endswith(ends)), None)
    if other is not None:
        raise InvalidInput("exportName", f"{export_name!r} names a {other} file, but exportType is {export_type}: "
                                         f"end it in {TYPE_SUFFIXES[export_type][0]}, or ask for exportType {other}")
    if packing == ZIP_SUFFIX:
        return Packing(ZIP_SUFFIX, ZIP_TYPE, lambda: ZipCompressor(member_name(export_name, export_type)))
    return next((Packing(c.suffix, c.content_type, c.compressor) for c in COMPRESSIONS if c.suffix == packing), None)


def compressing(chunks: Iterable[bytes], compressor: Any) -> Iterator[bytes]:
    """``chunks`` through ``compressor`` (``compress(data)``, ``flush()``) as one compressed stream, a piece
    at a time (the compressor holds what it has not yet written: bounded by its window, not by the data),
    each compressed in a thread of its own while the next is made."""
    for packed in overlapped(chunks, compressor.compress, "connector-ops-compress"):
        if packed:
            yield packed
    yield compressor.flush()


def member_name(export_name: str, export_type: str) -> str:
    """The file a zip export holds: the export's name without ``.zip``, with the type's suffix if it has none
    (``report.zip`` holds ``report.csv``; ``report.tsv.zip``, ``report.tsv``). Only its file name: an
    extractor writes a member where its path says, so no folder (``/`` or ``\\``) or drive letter of the
    name, which outside data may have made (``${trigger.name}``), goes in; ``export`` when none is left."""
    base = base_name(without(export_name, ZIP_SUFFIX)) or "export"
    return base if "." in base.lstrip(".") else f"{base}.{export_type}"
