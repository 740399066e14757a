"""Readable binary streams made of others: over an iterator of byte chunks (:class:`ChunkStream`: an HTTP
body, the rows of a ``COPY … TO``), or another stream's chunks transformed (:class:`Transformed`,
:class:`WholePieces`: a JSON array handed on as NDJSON, numbers quoted; :func:`as_utf8`: text in another
encoding as UTF-8); :func:`seekable_opener` for a reader that must seek (a zip archive's or a Parquet file's
index is at its end). ``Open`` is how the readers take a file: a callable that opens a new read of it.

Each read of a ``ChunkStream`` gathers whole chunks up to the reader's buffer, so chunks as small as one row
(psycopg hands out ``COPY`` data a row at a time) cost an append each, not a read call each; memory stays
one buffer plus one chunk.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

from connector_ops.kernel.disk import temp_floor

#: a new read of a file from its first byte, each call (a file on disk opened again, a fetched link replayed)
Open = Callable[[], AbstractContextManager[IO[bytes]]]

#: the encodings whose bytes are UTF-8 already (a BOM is the reader's to judge)
UTF8 = frozenset({"utf-8", "utf-8-sig"})
UTF8_BOM = codecs.BOM_UTF8


def peekable(stream: Any, size: int = io.DEFAULT_BUFFER_SIZE) -> Any:
    """``stream`` if it can ``peek`` (and ``size`` is the default), else a ``BufferedReader`` over it whose
    ``peek`` shows up to ``size`` bytes."""
    return stream if hasattr(stream, "peek") and size == io.DEFAULT_BUFFER_SIZE else io.BufferedReader(stream, size)


def past_bom(stream: Any) -> Any:
    """``stream`` (bytes) past one UTF-8 BOM at its start, if it starts with one; a readable, peekable stream.

    For a JSON array: its parsers (yajl, the line parser) refuse the BOM, which RFC 8259 lets a reader ignore
    and which Windows tools (PowerShell 5, Notepad's "UTF-8 with BOM") and Pull's own ``utf-8-sig`` export
    write. The first bytes are peeked; a first read shorter than a BOM is read on and handed back in front."""
    buffered = peekable(stream)
    head = buffered.peek(len(UTF8_BOM))[:len(UTF8_BOM)]
    if not head or not UTF8_BOM.startswith(head):  # the usual: empty, or no BOM
        return buffered
    first = buffered.read(len(UTF8_BOM))  # the BOM, or a first read shorter than one: read on
    if first == UTF8_BOM:
        return buffered
    rest = iter(lambda: buffered.read(1 << 16), b"")
    return io.BufferedReader(ChunkStream(itertools.chain([first], rest)), 1 << 16)


class Transformed(io.RawIOBase):
    """What :meth:`_take` makes of ``stream``'s chunks, as a raw stream; wrap it in a ``BufferedReader``.
    ``_take`` gets each chunk read (``b""`` at the end), sets ``_out`` to what is ready, and ``_ended`` once
    nothing more will be."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._out = memoryview(b"")  # made but not yet read
        self._ended = False

    def readable(self) -> bool:
        return True

    # override: callers pass a bytearray or memoryview, which it slices (typeshed: any buffer)
    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        while not self._out and not self._ended:
            self._take(self._stream.read(max(len(view), 1 << 16)))
        size = min(len(view), len(self._out))
        view[:size] = self._out[:size]
        self._out = self._out[size:]
        return size

    def _take(self, chunk: bytes) -> None:
        raise NotImplementedError


class WholePieces(Transformed):
    """A :class:`Transformed` that works on whole pieces (lines, items): what follows the last place a piece
    may end (:meth:`_cut`) waits for the next read, at most ``longest`` bytes (then :meth:`_too_long`
    raises), and each run of whole pieces goes through :meth:`_made`."""

    longest = 8 << 20

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._held = b""  # after the last cut: the piece begun but not yet ended

    def _take(self, chunk: bytes) -> None:
        data = self._held + chunk
        if chunk:
            cut = self._cut(data)
            data, self._held = data[:cut], data[cut:]
            if len(self._held) > self.longest:
                self._too_long()
        else:
            self._held, self._ended = b"", True
        if data:
            self._out = memoryview(self._made(data))

    def _cut(self, data: bytes) -> int:
        raise NotImplementedError

    def _made(self, pieces: bytes) -> bytes:
        raise NotImplementedError

    def _too_long(self) -> None:
        raise ValueError(f"a piece longer than {self.longest} bytes")


class _Utf8From(Transformed):
    """Text in ``encoding`` as UTF-8, decoded strictly a chunk at a time (a character cut between two chunks
    waits for the next): a byte the encoding has no character for raises ``UnicodeDecodeError``."""

    def __init__(self, stream: Any, encoding: str) -> None:
        super().__init__(stream)
        self._decoder = codecs.getincrementaldecoder(encoding)("strict")

    def _take(self, chunk: bytes) -> None:
        self._ended = not chunk
        self._out = memoryview(self._decoder.decode(chunk, final=self._ended).encode("utf-8"))


def as_utf8(stream: IO[bytes], encoding: str) -> tuple[IO[bytes], str]:
    """``(stream, encoding)`` as they are when ``encoding`` is UTF-8 (with or without ``-sig``), else the
    stream's text as UTF-8 and ``"utf-8"``: what reads UTF-8 column-wise in C (Arrow, ``COPY``) then reads
    a file in any encoding. The decoder is the one Python's text readers use (a BOM that ``utf-16`` consumes
    is gone; one that ``utf-16-le`` keeps is a U+FEFF at the start, as it would be there too)."""
    if encoding in UTF8:
        return stream, encoding
    return io.BufferedReader(_Utf8From(stream, encoding), 1 << 20), "utf-8"


class ChunkStream(io.RawIOBase):
    """The bytes of ``chunks`` (bytes or buffers), in order, as a raw stream; wrap it in a ``BufferedReader``."""

    def __init__(self, chunks: Iterable[Any]) -> None:
        self._chunks = iter(chunks)
        self._left = b""  # the part of the last chunk not handed out yet

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        parts, size = [self._left], len(self._left)
        while size < len(view):
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            parts.append(chunk)
            size += len(chunk)
        gathered = b"".join(parts)
        n = min(size, len(view))
        view[:n] = memoryview(gathered)[:n]
        self._left = gathered[n:]
        return n


#: a process's open files by number (Linux): opening an entry opens that file anew, named or not
_PROC_FD = Path("/proc/self/fd")


@contextlib.contextmanager
def seekable_opener(open_file: Open, prefix: str = "connector-ops-") -> Iterator[Open]:
    """Opens of ``open_file``'s file that can seek: its own when they can (a file on disk), else of a copy
    made once, from the one read that found it could not, a block at a time (a body over HTTP: one ``GET``;
    a file kept in the database; a decompressed stream).

    The copy is a file without a name (``tempfile.TemporaryFile``), which the kernel removes when the last
    handle closes, also when the process is killed: a named copy in a temporary folder stayed there for
    ever after a ``kill -9`` (as large as the file). Each open reads it through ``/proc/self/fd``, with a
    position of its own; where there is no ``/proc`` a named copy in a temporary folder is kept instead."""
    with contextlib.ExitStack() as stack:
        with open_file() as raw:
            path = None if raw.seekable() else _copy(raw, stack, prefix)
        yield open_file if path is None else (lambda: path.open("rb"))


def _copy(raw: IO[bytes], stack: contextlib.ExitStack, prefix: str) -> Path:
    """A copy of ``raw``'s bytes that lives as long as ``stack``, and the path that opens it."""
    floor = temp_floor()  # the copy grows TMPDIR as large as the file
    out: IO[bytes]
    if _PROC_FD.is_dir():
        out = stack.enter_context(tempfile.TemporaryFile(prefix=prefix))  # noqa: SIM115 - the stack closes it
        path = _PROC_FD / str(out.fileno())
    else:
        path = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix))) / "copy"
        out = stack.enter_context(path.open("wb"))
    shutil.copyfileobj(raw, floor.guard(out), 1 << 20)
    out.flush()
    return path
