"""Arrow's streaming readers held to a few blocks of read-ahead.

``pyarrow.csv.open_csv`` and ``pyarrow.json.open_json`` read their input in a background thread of Arrow's
I/O pool, up to 32 blocks ahead of whoever takes the batches (Arrow's background generator queue; with or
without ``use_threads``). Ours take them slowly: PostgreSQL's ``COPY`` stores rows more slowly than Arrow
parses them, and so do the SQLite loader's inserts. So up to 34 MiB of input waited in that queue (measured
with 1 MiB blocks and a consumer that takes 20 ms a batch), and the heap it churned through is what kept a
4M-row NDJSON Push on PostgreSQL at 65–99 MiB of peak growth, against 33–57 MiB at 1M rows.

:class:`Paced` sits under Arrow's buffered reader and makes a read wait while the bytes read are more than
``limit`` blocks ahead of the batches taken. Arrow gives one batch per block (an empty one for a block of
blank lines) and needs at most the next block to finish a batch's last line (a longer line is its error,
"straddling object"), so a few blocks always suffice. Should a reader ever need more, a consumer left
waiting ``STALL`` seconds for a batch lets the read through: pacing may slow a read, never stop it.

The consumer waits for the next batch's bytes here, in Python, before it asks Arrow (:meth:`Paced._ready`):
a signal's handler cannot run while the main thread waits inside Arrow, so a source that sends nothing (a
link's server gone silent) would hold a Ctrl-C back until its read gave up.

Arrow's thread must be out of Python before the error or the stop that ends a read propagates: left waiting
here (a read paced, or the reader's opening failed, as on a line longer than its block: Push's line over 16
MiB), it was still inside Python as the interpreter shut down, which aborted the process ("Fatal Python
error: PyGILState_Release", SIGABRT) in 4 of 6 runs of the CLI on PostgreSQL. So Arrow reads
:meth:`Paced.entrance`, which counts its reads, and whoever opened the reader calls :meth:`Paced.stop` however
it ends: every read gets the end from then on, and ``stop`` waits until Arrow's thread has had it.

Having had the end is not the last time Arrow's thread enters Python. The stream it was given is held by the
reader's state, which the reader and its read task share, and whichever lets go of that state last lets go
of the stream, taking the interpreter's lock to do so. When that is Arrow's thread (the reader dropped while
its read task was ending: 7 of 60 scans closed early on PostgreSQL, under load), it may still be waiting for
the lock as the interpreter finalizes, and a thread that gets the lock then is stopped where it stands, inside
C++ code that may not be left that way: "terminate called without an active exception", SIGABRT, exit 134,
after the work was done and printed (1 in 6 runs of a child that closed 100 scans early, six at once on two
cores). So the interpreter's exit waits, at most ``EXIT_WAIT`` seconds, until Arrow's threads have let go of
every stream whose reader is gone (:class:`_Kept`, :func:`_let_arrow_go`). Once its reader is done, a stream
keeps nothing of what it read (:meth:`Paced._let_go_if_idle`), so keeping it costs a few small objects.

That wait covers the stream only, so the stream must be the last Python object Arrow's thread lets go of.
Given a Python stream, Arrow keeps each block it read as the Python ``bytes`` read (a ``PyBuffer``), and the
blocks of a reader closed early are let go of by whichever thread ends their read tasks: after the stream,
as late as the interpreter's finalizing. The same abort, from ``PyBuffer``'s destructor (core dumps of 2 of
24 such children, six at once, after the wait above had landed; then a CI run). So :meth:`Paced.entrance`
gives Arrow a stream of its own kind, which copies each read into Arrow's memory.
"""

from __future__ import annotations

import atexit
import io
import logging
import sys
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)

#: blocks Arrow may read ahead of the batches taken: the next batch's block and the one that ends its last
#: line, and two being parsed by the SQLite loader's threads
AHEAD = 4
#: seconds a read waits while the consumer waits for a batch before it is let through (never, so far)
STALL = 1.0
#: seconds the readers' :meth:`Paced.stop` waits for Arrow's thread to have the end: microseconds when its read
#: is local; a read from a server gone silent is ended by its caller closing the source, so a stop (Ctrl-C)
#: does not wait for it long
LEAVE = 0.25
#: bytes of the Arrow stream's own buffer (:meth:`Paced.entrance`), which Arrow's whole-block reads skip
STREAM_BUFFER = 1 << 16
#: seconds the interpreter's exit waits for Arrow's threads to let go of the streams of readers that are gone:
#: as long as such a thread takes to get the interpreter's lock and a core (a few ms; longer under load); all
#: of it only if something other than Arrow holds such a stream
EXIT_WAIT = 10.0


class Paced(io.RawIOBase):
    """``raw`` read at most ``limit`` blocks of ``block`` bytes ahead of the batches taken through
    :meth:`taken`; Arrow reads it through :meth:`buffered`. Once the consumer is done (the batches ended,
    or it stopped taking them), a read gets the end."""

    def __init__(self, raw: Any, block: int, limit: int | None = None, stall: float | None = None) -> None:
        self._raw = raw
        self._block = block
        self._limit = (AHEAD if limit is None else limit) * block
        self._stall = STALL if stall is None else stall
        self._ahead = 0  # bytes read beyond the blocks of the batches taken
        self._wanted = True  # the consumer waits for a batch (or has not taken one yet)
        self._done = False
        self._reading = False  # a read of raw in flight
        self._ended = False  # raw has given its end
        self._inside = 0  # reads of the entrance in progress (Arrow's thread inside Python)
        self._out = True  # whoever reads the entrance has had its end or an error (or there is no entrance)
        self._turn = threading.Condition()
        self._entrance: weakref.ref[_Entrance] | None = None
        self._reader: weakref.ref[Any] | None = None  # Arrow's reader, once :meth:`taken` has it

    def readable(self) -> bool:
        return True

    def buffered(self) -> io.BufferedReader:
        """This stream buffered a block at a time, as Arrow reads it (so its reads are the blocks counted)."""
        return io.BufferedReader(self, self._block)

    def entrance(self, stream: Any) -> Any:
        """``stream`` (read through this one, e.g. :meth:`buffered`) as Arrow's reader is given it: its reads
        are what :meth:`stop` waits for, and get the end once stopped, without touching ``stream``.

        It is an Arrow stream that copies each read into Arrow's memory. Given the Python stream itself, Arrow
        keeps each block as the ``bytes`` read (a ``PyBuffer``), and letting go of a block takes the
        interpreter's lock: a block let go of last by Arrow's thread, as the interpreter finalized, aborted
        the process (see the module's docstring). A copy of 1 MiB per block read costs microseconds. Arrow reads
        whole blocks, which skip the stream's own buffer: that buffer is kept small (it is allocated as the
        stream is made, up to 1 GiB for the largest block a PostgreSQL scan tries)."""
        import pyarrow as pa

        entrance = _Entrance(self, stream)
        with self._turn:
            self._out = False
            self._entrance = weakref.ref(entrance)
        return pa.BufferedInputStream(pa.PythonFile(entrance, mode="r"), min(self._block, STREAM_BUFFER))

    # override: callers pass a bytearray or memoryview, which it slices (typeshed: any buffer)
    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        with self._turn:
            while not self._done and self._ahead >= self._limit:
                if not self._turn.wait(self._stall) and self._wanted:
                    log.debug("a read let through: the consumer waited %.1f s for a batch", self._stall)
                    break  # the consumer has waited for a batch all this time: this read is what it needs
            if self._done:
                return 0
            self._reading = True
        n = 0
        try:
            n = self._raw.readinto(buffer)
        finally:
            with self._turn:
                self._ahead += n or 0
                self._ended = self._ended or n == 0
                self._reading = False
                self._let_go_if_idle()
                self._turn.notify_all()
        return n

    def stop(self, timeout: float | None = None) -> bool:
        """Every read from now on gets the end; waits (at most ``timeout`` seconds) until a read of ``raw`` in
        flight has returned and no read of :meth:`entrance` is in progress, so that no thread of Arrow's
        touches ``raw``, or waits in Python, after this (the caller makes a read in flight end, if it may
        wait); whether none is. Then, at most ``LEAVE`` seconds, until Arrow's thread has come back for the
        end (a reader that failed as it opened has stopped its thread already, and never does)."""
        with self._turn:
            self._done = True
            self._turn.notify_all()
            if not self._turn.wait_for(lambda: not self._reading and not self._inside, timeout):
                return False
            self._let_go_if_idle()
            self._turn.wait_for(lambda: self._out, LEAVE)
            opened = self._reader is not None
        if not opened:  # the reader failed as it opened (or was never opened): what Arrow has of it is its stream
            self._reader_gone(None)
        return True

    def taken(self, batches: Iterable[Any]) -> Iterator[Any]:
        """``batches`` (read from this stream), each one taken letting Arrow read a block more; when they end,
        or the consumer stops taking them, every read waiting here gets the end. Once ``batches`` (Arrow's
        reader) is gone, Arrow's letting go of this stream is waited for at the interpreter's exit."""
        try:
            self._reader = weakref.ref(batches, self._reader_gone)
        except TypeError:  # not a reader of Arrow's (a test's)
            self._reader = weakref.ref(self)
        source = iter(batches)
        del batches  # only the caller holds the reader: its going is the reader's end
        try:
            while True:
                self._set(wanted=True)
                self._ready()
                try:
                    batch = next(source)
                except StopIteration:
                    return
                finally:
                    self._set(wanted=False, took=True)
                yield batch
        finally:
            del source  # a traceback through here keeps no reader alive
            with self._turn:
                self._done = True
                self._let_go_if_idle()
                self._turn.notify_all()

    def _let_go_if_idle(self) -> None:
        """Once done and no read in flight (``_turn`` held), no read touches ``raw`` or the entrance's stream
        again: let go of both, so that a stream kept for Arrow (:class:`_Kept`) keeps nothing it read."""
        if self._done and not self._reading and not self._inside:
            self._raw = None
            entrance = self._entrance() if self._entrance else None
            if entrance is not None:
                entrance._stream = None

    def _reader_gone(self, _: object) -> None:
        """Arrow's reader is gone (or never opened): keep its stream until Arrow's thread has let go of it."""
        entrance = self._entrance() if self._entrance else None
        if entrance is not None:
            _kept.keep(entrance)

    def _ready(self) -> None:
        """Wait here, not inside Arrow, while a read is in flight and fewer than two blocks are read ahead of
        the batches taken (the next batch's block and the one that ends its last line). Python runs a signal's
        handler in this wait, and cannot while Arrow waits: with a source that sends nothing (a link's server
        gone silent), a Ctrl-C then stops the action at once instead of when the read gives up."""
        with self._turn:
            while self._reading and not (self._done or self._ended or self._ahead >= 2 * self._block):
                self._turn.wait()

    def _set(self, *, wanted: bool, took: bool = False) -> None:
        with self._turn:
            self._wanted = wanted
            if took:
                self._ahead = max(0, self._ahead - self._block)
            self._turn.notify_all()


class _Entrance(io.RawIOBase):
    """What Arrow reads (:meth:`Paced.entrance`): ``stream``, its reads counted while in progress, and the end
    once the consumer stopped."""

    def __init__(self, paced: Paced, stream: Any) -> None:
        self._paced, self._stream = paced, stream

    def readable(self) -> bool:
        return True

    # override: callers pass a bytearray or memoryview, which it slices (typeshed: any buffer)
    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        paced = self._paced
        with paced._turn:
            if paced._done:
                paced._out = True
                paced._turn.notify_all()
                return 0
            paced._inside += 1
            stream = self._stream
        n = 0  # an error ends Arrow's reading too
        try:
            n = stream.readinto(buffer)
        finally:
            with paced._turn:
                paced._inside -= 1
                paced._out = paced._out or not n
                paced._let_go_if_idle()
                paced._turn.notify_all()
        return n


class _Kept:
    """Streams given to Arrow whose reader is gone, kept until Arrow's threads have let go of them. Arrow's
    thread takes the interpreter's lock to close the stream (its buffer's destructor closes what it reads, a
    call of the stream's ``close``) and then to count its reference down, and that count going down, the last
    of it, is how this tells that Arrow has let go (CPython's reference count); held here as well, the
    stream is not freed in Arrow's thread."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # letting go of a stream here frees it, in this thread
        self._streams: list[_Entrance] = [object()]  # type: ignore[list-item]  # any object: its count is read
        self._alone = self._counts()[0]  # the count of a stream held here only
        self._streams = []

    def _counts(self) -> list[int]:
        return [sys.getrefcount(stream) for stream in self._streams]

    def keep(self, entrance: _Entrance) -> None:
        with self._lock:
            self._prune()
            self._streams.append(entrance)

    def held(self) -> int:
        """How many streams kept here Arrow's threads still hold (those no longer held are let go of)."""
        with self._lock:
            self._prune()
            return len(self._streams)

    def wait(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until Arrow's threads hold none of the streams kept here; whether
        none is. Polled: a thread of Arrow's lets go of one with a count, which wakes nobody."""
        deadline = time.monotonic() + timeout
        while self.held():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)  # the interpreter's lock is Arrow's meanwhile
        return True

    def _prune(self) -> None:
        counts = self._counts()
        self._streams = [stream for stream, count in zip(self._streams, counts, strict=True) if count > self._alone]


_kept = _Kept()


@atexit.register
def _let_arrow_go() -> None:
    """At the interpreter's exit, before it finalizes (a thread that gets its lock after that is stopped where
    it stands), wait until Arrow's threads have let go of every stream whose reader is gone."""
    if not _kept.wait(EXIT_WAIT):
        log.warning("exiting while Arrow still holds %d stream(s) of readers that are gone", _kept.held())
