"""``kernel.replay``: a stream read several times from its first byte, fetched once."""

from __future__ import annotations

import contextlib
import io
import os
import random
import threading
from collections.abc import Iterator
from typing import IO

import pytest

from connector_ops.kernel.replay import fetched_once

DATA = random.Random(7).randbytes(5_000_000)


class Source(io.RawIOBase):
    """``DATA`` in reads of at most 70,000 bytes, counting them; ``abort()`` recorded."""

    def __init__(self) -> None:
        self._at, self.reads, self.aborted = 0, 0, False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        self.reads += 1
        n = min(len(buffer), 70_000, len(DATA) - self._at)
        memoryview(buffer)[:n] = DATA[self._at:self._at + n]
        self._at += n
        return n

    def abort(self) -> None:
        self.aborted = True


@pytest.fixture
def opened() -> Iterator[tuple[list[Source], object]]:
    """(the sources opened, an opener making them)."""
    sources: list[Source] = []

    @contextlib.contextmanager
    def opener() -> Iterator[IO[bytes]]:
        sources.append(Source())
        yield sources[-1]

    return sources, opener


def test_every_open_reads_the_whole_stream_which_is_opened_and_read_once(opened):
    sources, opener = opened
    with fetched_once(opener) as replay:
        with replay.open() as probe:
            assert probe.read(1000) == DATA[:1000]  # a probe of the start, closed early
        with replay.open() as first:
            assert first.read() == DATA
        with replay.open() as again:
            assert b"".join(iter(lambda: again.read(12_345), b"")) == DATA
    assert len(sources) == 1
    reads = sources[0].reads
    assert reads <= len(DATA) // 70_000 + 2  # nothing read from the source twice


def test_reads_open_at_once_each_read_from_the_start(opened):
    sources, opener = opened
    with fetched_once(opener) as replay, replay.open() as one, replay.open() as two:
        parts_one, parts_two = [], []
        while chunk := one.read(300_000):
            parts_one.append(chunk)
            parts_two.append(two.read(100_000))  # behind the first: from what was kept
        parts_two.append(two.read())
    assert b"".join(parts_one) == DATA and b"".join(parts_two) == DATA
    assert len(sources) == 1


def test_reads_from_threads_each_get_every_byte(opened):
    _, opener = opened
    got: dict[int, bytes] = {}
    with fetched_once(opener) as replay:
        def read(k: int) -> None:
            with replay.open() as stream:
                got[k] = stream.read()
        threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert all(value == DATA for value in got.values()) and len(got) == 4


class Interrupt(BaseException):
    pass


def test_an_interrupt_ends_the_sources_read_and_an_error_leaves_it_for_a_retry(opened):
    sources, opener = opened
    with fetched_once(opener) as replay:
        with pytest.raises(ValueError), replay.open() as stream:
            stream.read(10)
            raise ValueError("a retry reads on")
        assert not sources[0].aborted
        with replay.open() as stream:
            assert stream.read() == DATA
        with pytest.raises(Interrupt), replay.open() as stream:
            raise Interrupt
        assert sources[0].aborted


def test_a_failed_block_ends_the_sources_read_and_nothing_is_kept(opened):
    sources, opener = opened
    before = set(os.listdir(f"/proc/{os.getpid()}/fd"))
    with pytest.raises(ValueError), fetched_once(opener) as replay:
        with replay.open() as stream:
            stream.read(2_000_000)
        raise ValueError("the load failed")
    assert sources[0].aborted
    assert set(os.listdir(f"/proc/{os.getpid()}/fd")) <= before  # the temporary file closed (it had no name)


def test_a_source_that_failed_fails_every_read_past_what_it_gave(opened):
    """Not an end: a retry after a broken download must not read a truncated file as the whole of it."""
    sources, opener = opened

    class Broken(Exception):
        pass

    failed: list[bool] = []

    def broken(_buffer: object) -> int:  # as an HTTP body over a generator: the error once, then the end
        if failed:
            return 0
        failed.append(True)
        raise Broken("the connection broke")

    with fetched_once(opener) as replay:
        with replay.open() as stream:
            assert stream.read(100_000) == DATA[:100_000]
            sources[0].readinto = broken  # type: ignore[method-assign]
            with pytest.raises(Broken):
                stream.read()
        with replay.open() as stream:
            assert stream.read(100_000) == DATA[:100_000]  # what was kept
            with pytest.raises(Broken):
                stream.read()
