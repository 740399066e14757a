"""The parent's side of the SQLite loader process (:mod:`.sqlite_ingest`): one per database file per process,
started on the first column-wise load and reused by the next ones.

A load sends the request, waits for ``ready``, streams the data as frames and reads the answer. The rule
that a failed load commits nothing holds whatever happens here: the loader commits only after the whole
data has arrived and been loaded; if the parent's reading fails, the data is withdrawn (the loader rolls
back); if anything else goes wrong on the way (an interrupt, a broken pipe), the loader is killed, and its
transaction dies with it. A loader found gone (it leaves when idle, or was killed) is started again before
any data is sent; one that dies during a load fails that load (the caller checks whether it committed).

Closing: :func:`close_loader` (the store's ``close``) and, for what is left, the end of the interpreter;
the loader also leaves by itself when its parent's end of the pipe closes (the parent died) or after
``IDLE_SECONDS`` without a request, so no process outlives its use for long.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import IO, Any

from connector_ops.kernel.disk import DiskBelowFloor, DiskFloor
from connector_ops.kernel.fence import check_fence
from connector_ops.kernel.forks import in_child
from connector_ops.resources.virtual_files.sqlite_ingest import (
    ABORT,
    COMMITTED,
    END,
    FAILED,
    FRAME,
    MODULE,
    READY,
    SYNCED,
    FileChanged,
)

#: a loader leaves after this many seconds without a request (the next load starts another)
IDLE_SECONDS = 30.0
#: loaders kept per process (the least recently used one is closed beyond this)
MAX_LOADERS = 4
#: below this size a SQLite load goes through the row loader when the loader process is not running (its
#: start, ≈ 0.15 s, is worth ≈ 4 MiB through the row loader) …
SQLITE_CHILD_MIN_BYTES = 4 << 20
#: … and when it is running (a request costs a few milliseconds)
SQLITE_WARM_MIN_BYTES = 1 << 20


_BELOW_FLOOR = f"{DiskBelowFloor.__name__}: "
_FILE_CHANGED = f"{FileChanged.__name__}: "


class IngestFailed(RuntimeError):
    """The load did not commit (the loader's message, or why the loader could not be asked)."""


class _Frames:
    """The request's data as frames on the loader's stdin. Stops (raises) once the loader has answered
    early (it failed: ``answered``) or the pipe broke (it died: ``broken``); the caller looks at those
    flags, since a writer between (Arrow's IPC writer) may wrap what ``write`` raises."""

    def __init__(self, child: subprocess.Popen, floor: DiskFloor | None) -> None:
        self._stdin, self._stdout = _pipes(child)
        self._floor = floor
        self.answered = False
        self.broken: OSError | None = None
        self.below_floor: DiskBelowFloor | None = None  # the free space fell below the floor: data withdrawn

    def write(self, data: bytes | memoryview) -> int:
        if not data:
            return 0
        if self.answered or _readable(self._stdout):
            self.answered = True
            raise RuntimeError("the SQLite loader answered before the end of the data")
        if self._floor is not None:  # the loader's database grows as fast as it is sent data
            try:
                self._floor.wrote(len(data))
            except DiskBelowFloor as exc:
                self.below_floor = exc
                raise
        self._send(FRAME.pack(len(data)), data)
        return len(data)

    def end(self, marker: int = END) -> None:
        self._send(FRAME.pack(marker))

    def _send(self, *parts: bytes | memoryview) -> None:
        try:
            for part in parts:
                self._stdin.write(part)
            self._stdin.flush()
        except OSError as exc:
            self.broken = exc
            raise

    closed = False

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        pass


class Loader:
    """The loader process for the SQLite file at ``path`` (started when needed); one load at a time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._child: subprocess.Popen | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The running loader's process id (``None`` before the first load or after closing)."""
        child = self._child  # read once: another thread may end it meanwhile
        return child.pid if child is not None and child.poll() is None else None

    def warm(self) -> None:
        """Start the loader now if it is not running (it loads its libraries while the caller prepares)."""
        with self._lock:
            if self._child is None or self._child.poll() is not None:
                self._kill()
                self._start()

    def sync(self) -> None:
        """Wait until the loader is idle: the write-ahead log checkpoint after its last load is done."""
        with self._lock:
            child = self._child
            if child is None or child.poll() is not None:
                return
            stdin, stdout = _pipes(child)
            try:
                stdin.write(b'{"op": "sync"}\n')
                stdin.flush()
                if stdout.readline() == SYNCED:
                    return
            except OSError:
                pass
            self._kill()

    def load(self, spec: dict[str, Any], feed: Callable[[Any], None], floor: DiskFloor | None = None) -> None:
        """Run one load: ``spec`` says what to create (:func:`.sqlite_ingest.ingest`), ``feed(sink)`` writes
        the data. Raises :class:`IngestFailed` when it did not commit; ``feed``'s own errors pass through
        (nothing committed), as does :class:`DiskBelowFloor` when the free space of the database's disk falls
        below ``floor`` (checked before the request and as the data is sent; the data is withdrawn)."""
        if floor is not None:
            floor.check()
        with self._lock:
            frames: _Frames | None = None
            try:  # from the loader's "ready" on: it has begun its write transaction, and holds the file's lock
                child = self._ready(spec)
                frames = _Frames(child, floor)  # an interrupt as it is entered left the loader waiting, locked
                failure = _send(frames, feed)
                answer = _pipes(child)[1].readline()
            except BaseException:
                self._kill()  # the pipe broke, or an interrupt: the loader's transaction dies with it
                if frames is not None and frames.broken is not None:
                    raise IngestFailed(f"the SQLite loader process stopped ({frames.broken})") from None
                raise
        if answer == COMMITTED:
            if failure is not None:
                raise AssertionError("the SQLite loader committed withdrawn data") from failure
            return
        if failure is not None:
            raise failure
        if answer.startswith(FAILED):
            message = json.loads(answer[len(FAILED):])
            if message.startswith(_BELOW_FLOOR):  # its check before the commit (:func:`.room_for_checkpoint`)
                raise DiskBelowFloor(message[len(_BELOW_FLOOR):])
            if message.startswith(_FILE_CHANGED):  # :func:`.sqlite_ingest.check_file`: rolled back
                from connector_ops.resources.virtual_files.store_file import changed_error

                raise changed_error(spec["path"], before_commit=True)
            raise IngestFailed(message)
        self._kill()
        raise IngestFailed("the SQLite loader process stopped during the load")

    def _ready(self, spec: dict[str, Any]) -> subprocess.Popen:
        """A loader that has accepted ``spec`` (a fresh one if the last is gone)."""
        request = json.dumps(spec).encode() + b"\n"
        for attempt in (1, 2):
            child = self._child if self._child is not None and self._child.poll() is None else self._start()
            stdin, stdout = _pipes(child)
            try:
                stdin.write(request)
                stdin.flush()
                if stdout.readline() == READY:
                    return child
            except OSError:
                pass
            except BaseException:  # an interrupt before its answer: it may hold the request, and would read
                self._kill()  # the next one as this one's data and give this one's "ready" to it
                raise
            self._kill()  # it left (idle) or died just now: nothing was sent to a load yet
            if attempt == 2:
                raise IngestFailed("the SQLite loader process could not be started")
        raise AssertionError("unreachable")

    def _start(self) -> subprocess.Popen:
        # its own session: a Ctrl-C at the terminal interrupts the parent, which then decides (kills it)
        self._child = subprocess.Popen([sys.executable, "-m", MODULE, str(IDLE_SECONDS)], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        return self._child

    def _kill(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.kill()
            child.wait()
            _close_pipes(child)

    def close(self, timeout: float = 5.0) -> None:
        """Let the loader finish and leave (killed after ``timeout`` seconds)."""
        with self._lock:
            child, self._child = self._child, None
        if child is None:
            return
        _close_pipes(child)  # end of requests: the loader leaves
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _readable(stream: IO[bytes]) -> bool:
    """Whether ``stream`` has something to read now (``poll``: ``select`` refuses descriptors ≥ 1024)."""
    poller = select.poll()
    poller.register(stream, select.POLLIN)
    return bool(poller.poll(0))


def _send(frames: _Frames, feed: Callable[[Any], None]) -> Exception | None:
    """Stream the data; the reading's own error (returned) withdraws it, as does an early answer."""
    try:
        feed(frames)
    except Exception as exc:
        if frames.broken is not None:
            raise
        frames.end(ABORT)
        return None if frames.answered else frames.below_floor or exc  # Arrow's writer may wrap it
    check_fence("the SQLite loader's load")  # the end of data is what commits; a refusal kills the loader
    frames.end()
    return None


def _close_pipes(child: subprocess.Popen) -> None:
    for pipe in (child.stdin, child.stdout):
        with contextlib.suppress(OSError):
            if pipe is not None:
                pipe.close()


def _pipes(child: subprocess.Popen) -> tuple[IO[bytes], IO[bytes]]:
    """The loader's request and answer pipes, which :meth:`Loader._start` always opens (``Popen`` types them
    optional: ``None`` for a process started without pipes)."""
    assert child.stdin is not None and child.stdout is not None
    return child.stdin, child.stdout


def _detach(child: subprocess.Popen) -> None:
    """In a forked child: let go of the parent's loader process without touching it. The ``Popen`` is marked as
    not this process's (no "still running" warning, no wait, never a signal: the loader is the parent's), and
    this process's copies of its pipes are closed quietly: the request pipe onto ``/dev/null`` first, so that
    closing it flushes nothing a parent's thread had buffered into the parent's loader."""
    child._child_created = False  # type: ignore[attr-defined]  # what Popen.__del__ looks at
    for pipe in (child.stdin, child.stdout):
        if pipe is None:
            continue
        with contextlib.suppress(OSError, ValueError):
            if pipe is child.stdin:
                with open(os.devnull, "wb") as devnull:
                    os.dup2(devnull.fileno(), pipe.fileno())
            pipe.close()


_LOADERS: OrderedDict[str, Loader] = OrderedDict()
_REGISTRY = threading.Lock()


@in_child
def _after_fork() -> None:
    """A forked child has no loader: it starts its own on its first load. The parent's are detached."""
    global _REGISTRY
    for loader in _LOADERS.values():
        if loader._child is not None:
            _detach(loader._child)
    _LOADERS.clear()
    _REGISTRY = threading.Lock()


def loader_for(path: str) -> Loader:
    """This process's loader for the SQLite file at ``path``."""
    key = os.path.realpath(path)
    with _REGISTRY:
        loader = _LOADERS.pop(key, None) or Loader(key)
        _LOADERS[key] = loader
        evicted = [_LOADERS.popitem(last=False)[1] for _ in range(len(_LOADERS) - MAX_LOADERS)]
    for old in evicted:
        old.close()
    return loader


def worth_it(path: str, size: int | None) -> bool:
    """Whether a load of ``size`` bytes into the SQLite file at ``path`` is faster through the loader than
    through the row loader. When it is and the loader is not running, it is started now: it loads its
    libraries while the caller opens the file and the database."""
    if size is None:
        return False
    loader = loader_for(path)
    if loader.pid is not None:
        return size >= min(SQLITE_CHILD_MIN_BYTES, SQLITE_WARM_MIN_BYTES)
    if size < SQLITE_CHILD_MIN_BYTES:
        return False
    loader.warm()
    return True


def close_loader(path: str) -> None:
    """Close this process's loader for ``path``, if it has one (a later load starts another)."""
    with _REGISTRY:
        loader = _LOADERS.pop(os.path.realpath(path), None)
    if loader is not None:
        loader.close()


def close_all() -> None:
    with _REGISTRY:
        loaders = list(_LOADERS.values())
        _LOADERS.clear()
    for loader in loaders:
        loader.close()


atexit.register(close_all)
