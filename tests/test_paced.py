"""Arrow's streaming readers read only a few blocks ahead of a slow consumer (:mod:`.paced`), without ever
stopping a read the consumer needs, and let go of their reading thread when the consumer stops."""

from __future__ import annotations

import contextlib
import io
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pyarrow as pa
import pytest

from connector_ops.resources.virtual_files import csv_columns, paced
from connector_ops.resources.virtual_files.csv_columns import csv_batches
from connector_ops.resources.virtual_files.ndjson_columns import ndjson_batches
from connector_ops.resources.virtual_files.paced import Paced

BLOCK = 1 << 16
BLOCKS = 40


class Counted(io.RawIOBase):
    """``data`` as a raw stream that counts the bytes read from it."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:  # type: ignore[override]
        n = self._data.readinto(buffer)
        self.read_bytes += n
        return n


def _ndjson(data: Counted) -> Generator[Any, None, None]:
    return ndjson_batches(io.BufferedReader(data, BLOCK), ["a", "b"], BLOCK)


def _csv(data: Counted) -> Generator[Any, None, None]:
    return csv_batches(io.BufferedReader(data, BLOCK), 2, ",")


READERS: dict[str, tuple[bytes, Callable[[Counted], Generator[Any, None, None]]]] = {
    "ndjson": (b'{"a": "' + b"x" * 40 + b'", "b": "y"}\n', _ndjson),
    "csv": (b"x" * 40 + b",y\n", _csv),
}


def most_ahead(kind: str) -> tuple[float, int]:
    """The most blocks read beyond the batches a slow consumer had taken, and the rows it took."""
    line, batches = READERS[kind]
    data = Counted(line * (BLOCKS * BLOCK // len(line)))
    ahead, rows = 0.0, 0
    for taken, batch in enumerate(batches(data)):
        rows += batch.num_rows
        time.sleep(0.3 if taken == 0 else 0.01)  # the database storing the batch: Arrow's thread reads meanwhile
        ahead = max(ahead, data.read_bytes / BLOCK - taken)
    return ahead, rows


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(csv_columns, "BLOCK", BLOCK)


@pytest.mark.parametrize("kind", READERS)
def test_a_slow_consumer_has_only_a_few_blocks_read_ahead_of_it(kind: str, monkeypatch) -> None:
    line = READERS[kind][0]
    ahead, rows = most_ahead(kind)
    assert rows == BLOCKS * BLOCK // len(line)
    assert ahead <= paced.AHEAD + 1
    monkeypatch.setattr(paced, "AHEAD", 1000)  # unpaced: Arrow's own queue holds up to 32 blocks
    assert most_ahead(kind)[0] > 20


class ArrowLike:
    """Reads ``stream`` in a thread of its own, as Arrow's I/O thread does, a batch being ``first`` blocks
    and then one block each; the batches come out of its queue."""

    def __init__(self, stream: Paced, first: int = 1) -> None:
        self._queue: queue.Queue[bytes | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, args=(stream.buffered(), first),
                                       daemon=True)
        self.thread.start()

    def _read(self, buffered: io.BufferedReader, first: int) -> None:
        self._queue.put(b"".join(buffered.read(BLOCK) for _ in range(first)))
        while block := buffered.read(BLOCK):
            self._queue.put(block)
        self._queue.put(None)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._queue.get, None)


def test_a_busy_consumer_holds_the_reader_back_however_long_it_takes() -> None:
    data = Counted(bytes(8 * BLOCK))
    stream = Paced(data, BLOCK, limit=2, stall=0.02)
    arrow = ArrowLike(stream)
    taken = stream.taken(arrow)
    next(taken)  # the consumer busy with its first batch from now on: many stalls long
    time.sleep(0.3)
    assert data.read_bytes == 3 * BLOCK  # the batch's block and two ahead
    next(taken)
    time.sleep(0.1)
    assert data.read_bytes == 4 * BLOCK
    assert sum(map(len, taken)) == 6 * BLOCK
    arrow.thread.join(5)
    assert not arrow.thread.is_alive()


def test_a_reader_needing_more_blocks_than_the_limit_is_let_through_while_its_consumer_waits() -> None:
    stream = Paced(io.BytesIO(bytes(8 * BLOCK)), BLOCK, limit=1, stall=0.05)
    batches: list[bytes] = []
    started = time.monotonic()
    consumer = threading.Thread(target=lambda: batches.extend(stream.taken(ArrowLike(stream, first=5))), daemon=True)
    consumer.start()
    consumer.join(5)
    assert not consumer.is_alive()
    assert [len(b) // BLOCK for b in batches] == [5, 1, 1, 1]
    assert time.monotonic() - started >= 3 * 0.05  # it waited before each block past the limit


def test_a_read_waiting_gets_the_end_once_the_consumer_stops() -> None:
    data = Counted(bytes(8 * BLOCK))
    stream = Paced(data, BLOCK, limit=1)
    arrow = ArrowLike(stream)
    taken = stream.taken(arrow)
    next(taken)
    arrow.thread.join(0.1)
    assert arrow.thread.is_alive()  # waiting to read the third block
    taken.close()  # the consumer failed, or has what it wanted
    arrow.thread.join(5)
    assert not arrow.thread.is_alive() and data.read_bytes == 2 * BLOCK


class Blocking(io.RawIOBase):
    """A raw stream whose reads wait until ``release`` is set (a network that carries nothing)."""

    def __init__(self) -> None:
        self.reading, self.release = threading.Event(), threading.Event()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:  # type: ignore[override]
        self.reading.set()
        self.release.wait()
        return 0


def test_stop_waits_for_the_read_in_flight_only_as_long_as_it_is_told() -> None:
    raw = Blocking()
    stream = Paced(raw, BLOCK)
    reader = threading.Thread(target=stream.readinto, args=(bytearray(BLOCK),), daemon=True)
    reader.start()
    assert raw.reading.wait(5)
    started = time.monotonic()
    assert stream.stop(0.2) is False  # the read still in flight: the caller must end it (pg_cancel.give_up)
    assert 0.2 <= time.monotonic() - started < 2
    raw.release.set()
    assert stream.stop() is True
    reader.join(5)
    assert stream.readinto(bytearray(BLOCK)) == 0  # every read after the stop gets the end


#: the modules of the streams Arrow's reading thread reads through (not the store's own long-lived threads,
#: such as the background checkpointer, which an earlier test in the same process may have started)
STREAM_MODULES = tuple(f"virtual_files/{name}.py" for name in ("paced", "csv_columns", "ndjson_columns", "crlf_blocks"))


def in_our_streams() -> list[str]:
    """Where other threads (Arrow's reading one among them) are inside this package's streams."""
    own, inside = threading.get_ident(), []
    for ident, frame in sys._current_frames().items():
        while frame is not None and ident != own:
            if frame.f_code.co_filename.endswith(STREAM_MODULES):
                inside.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")
            frame = frame.f_back
    return inside


@pytest.mark.parametrize("kind", READERS)
@pytest.mark.parametrize("end", ["opening fails", "consumer stops"])
def test_however_the_batches_end_arrows_thread_has_left_the_stream(kind: str, end: str) -> None:
    """Left inside Python, Arrow's thread aborted the interpreter's shutdown (test_arrow_reader_exit.py)."""
    line, batches = READERS[kind]
    if end == "opening fails":  # a first line longer than Arrow's block: its reader fails as it opens
        long = b"x" * (4 * BLOCK) + b",y\n" if kind == "csv" else b'{"a": "' + b"x" * (4 * BLOCK) + b'"}\n'
        with pytest.raises(pa.ArrowInvalid, match="straddl"), contextlib.closing(batches(Counted(long * 8))) as read:
            next(read)
    else:
        with contextlib.closing(batches(Counted(line * (BLOCKS * BLOCK // len(line))))) as read:
            next(read)
            time.sleep(0.1)  # Arrow's thread reads ahead, until the pacing holds it
    assert in_our_streams() == []



#: a process whose Arrow reader is gone while Arrow's thread still holds the stream it was given: a thread
#: standing in for Arrow's lets go of it late, as Arrow's does when the reader is dropped while its read task
#: is ending. ``keep``: the reader is kept (a scan left open), and the exit has nothing to wait for.
HELD_AT_EXIT = """
import io, sys, threading, time
from connector_ops.resources.virtual_files.paced import Paced

class Reader(list):
    pass

keep, late = sys.argv[1] == "keep", float(sys.argv[2])
paced = Paced(io.BytesIO(b""), 1024)
held = [paced.entrance(io.BytesIO(b""))]  # Arrow's hold on its stream
reader = Reader()
list(paced.taken(reader))
if not keep:
    del reader

def arrow():
    time.sleep(late)
    print("letting go", flush=True)
    held.clear()

threading.Thread(target=arrow, daemon=True).start()
print("exiting", flush=True)
"""


def test_the_exit_waits_for_arrows_thread_to_let_go_of_a_stream_whose_reader_is_gone() -> None:
    """Let go of by Arrow's thread as the interpreter finalized, the stream aborted the process ("terminate
    called without an active exception", exit 134) after its work was done (test_arrow_scan_closed_early.py)."""
    exited = subprocess.run([sys.executable, "-c", HELD_AT_EXIT, "drop", "0.5"], capture_output=True, text=True,
                            timeout=60)
    assert exited.returncode == 0, exited.stderr
    assert exited.stdout.split("\n") == ["exiting", "letting go", ""]


def test_a_reader_still_open_at_exit_does_not_hold_the_exit_up() -> None:
    started = time.monotonic()
    exited = subprocess.run([sys.executable, "-c", HELD_AT_EXIT, "keep", "60"], capture_output=True, text=True,
                            timeout=60)
    assert exited.returncode == 0, exited.stderr
    assert exited.stdout.split("\n") == ["exiting", ""]
    assert time.monotonic() - started < paced.EXIT_WAIT


def test_a_block_arrow_reads_is_in_arrows_memory_not_a_python_object() -> None:
    """Kept as the Python ``bytes`` read (a ``PyBuffer``), a block let go of by Arrow's thread as the interpreter
    finalized aborted the process from ``PyBuffer``'s destructor (test_arrow_scan_closed_early.py)."""
    paced_read = Paced(io.BytesIO(b"x" * (4 * BLOCK)), BLOCK)
    stream = pa.input_stream(paced_read.entrance(paced_read.buffered()))  # what Arrow's reader opens
    before = pa.total_allocated_bytes()
    block = stream.read_buffer(BLOCK)
    assert block.to_pybytes() == b"x" * BLOCK
    assert pa.total_allocated_bytes() - before >= BLOCK  # a copy Arrow owns, which needs no interpreter to free
