"""The long-lived SQLite loader process (resources/virtual_files/sqlite_loader.py, sqlite_ingest.py).

Real loader processes on real SQLite files: a failed load (bad data, data withdrawn by the parent, the
loader killed mid-load, an interrupt) commits nothing and the next load works; a loader that is gone
(killed, idle) is started again; two databases get two loaders; closing the store stops its loader.
"""

from __future__ import annotations

import gc
import io
import os
import signal
import sqlite3
import time
import warnings
from pathlib import Path

import pytest

from connector_ops.resources.virtual_files import sqlite_loader
from connector_ops.resources.virtual_files.store import VirtualFileStore
from tests.signals import Stop, stopped_as_entered

COLUMNS = ["id", "name", "note"]


def csv_rows(n: int, start: int = 0) -> bytes:
    return b"".join(b'%d,name-%d,"a, ""quoted""\nnote"\n' % (i, i) for i in range(start, start + n))


@pytest.fixture
def store(tmp_path: Path):
    store = VirtualFileStore(database_url=f"sqlite:///{tmp_path / 'vf.db'}")
    yield store
    store.close()


def loader(store: VirtualFileStore) -> sqlite_loader.Loader:
    return sqlite_loader.loader_for(store.database_url.removeprefix("sqlite:///"))


def tables(store: VirtualFileStore) -> tuple[list[str], int]:
    """Row tables in the file and virtual files in the catalog, read with the plain sqlite3 module."""
    conn = sqlite3.connect(store.database_url.removeprefix("sqlite:///"))
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'vf_%' ORDER BY name")]
        count = conn.execute("SELECT count(*) FROM cop_virtual_file").fetchone()[0]
    finally:
        conn.close()
    return names, count


def load(store: VirtualFileStore, data: bytes | io.RawIOBase) -> str:
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    return store.create_from_csv(COLUMNS, stream, ",")


class Failing(io.RawIOBase):
    """``data`` then ``OSError`` (the platform file's reading fails midway), or a call of ``midway``."""

    def __init__(self, data: bytes, midway=None) -> None:
        self._data, self._midway, self.sent = data, midway, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.sent >= len(self._data):
            if self._midway is None:
                raise OSError("the disk went away")
            self._midway()
            self._midway = None
        chunk = self._data[self.sent:self.sent + len(buffer)] or b"1,x,y\n" * (len(buffer) // 6)
        buffer[:len(chunk)] = chunk
        self.sent += len(chunk)
        return len(chunk)


def test_loads_reuse_one_process(store):
    first = load(store, csv_rows(50_000))
    pid = loader(store).pid
    second = load(store, csv_rows(10, start=7))
    assert pid is not None and loader(store).pid == pid
    assert store.summary(first, 1) == (50_000, COLUMNS, [{"id": "0", "name": "name-0", "note": 'a, "quoted"\nnote'}])
    assert store.summary(second, 1)[0] == 10


def test_bad_data_commits_nothing_and_the_loader_stays(store):
    load(store, csv_rows(10))
    before, pid = tables(store), loader(store).pid
    with pytest.raises(sqlite_loader.IngestFailed):
        load(store, csv_rows(200_000) + b"1,ragged\n" + csv_rows(10))  # fails after many batches
    assert tables(store) == before
    assert loader(store).pid == pid
    assert store.summary(load(store, csv_rows(3)), 0)[0] == 3


def test_data_withdrawn_by_the_parent_commits_nothing(store):
    load(store, csv_rows(10))
    before, pid = tables(store), loader(store).pid
    with pytest.raises(OSError, match="the disk went away"):  # the reading's own error, not the loader's
        load(store, Failing(csv_rows(100_000)))
    assert tables(store) == before
    assert loader(store).pid == pid  # rolled back by the loader itself, which stays
    assert store.summary(load(store, csv_rows(4)), 0)[0] == 4


def test_a_loader_killed_between_loads_is_started_again(store):
    load(store, csv_rows(10))
    pid = loader(store).pid
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    vf = load(store, csv_rows(5))
    assert store.summary(vf, 0)[0] == 5
    assert loader(store).pid not in (None, pid)


def test_a_loader_killed_mid_load_commits_nothing(store):
    load(store, csv_rows(10))
    before, pid = tables(store), loader(store).pid
    with pytest.raises(sqlite_loader.IngestFailed, match="stopped"):
        load(store, Failing(csv_rows(200_000), midway=lambda: os.kill(pid, signal.SIGKILL)))
    assert tables(store) == before
    assert store.summary(load(store, csv_rows(6)), 0)[0] == 6  # a new loader


def test_an_interrupt_kills_the_load(store):
    load(store, csv_rows(10))
    before, pid = tables(store), loader(store).pid

    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        load(store, Failing(csv_rows(100_000), midway=interrupt))
    assert tables(store) == before
    assert loader(store).pid is None  # killed: its transaction died with it
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert store.summary(load(store, csv_rows(2)), 0)[0] == 2


def test_an_interrupt_once_the_loader_is_ready_kills_it(store):
    """The loader answers "ready" and begins its write transaction at once (``BEGIN IMMEDIATE``: the file's
    lock). A Stop that landed as the parent went on from that answer to sending the data (as its frames'
    writer was made, before the ``try`` that kills the loader on an interrupt) left the loader alive, waiting
    for data, holding the lock: every other write to the file waited the 60 s busy timeout, then failed
    "database is locked" (1 of 1 before the fix). It is killed there too."""
    load(store, csv_rows(10))
    before, pid = tables(store), loader(store).pid
    with stopped_as_entered(sqlite_loader._Frames.__init__.__code__) as raised, pytest.raises(Stop):
        load(store, csv_rows(100_000))
    assert raised
    assert loader(store).pid is None  # killed: its transaction died with it
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert tables(store) == before
    assert store.summary(load(store, csv_rows(2)), 0)[0] == 2


def test_an_idle_loader_leaves_and_the_next_load_starts_another(store, monkeypatch):
    monkeypatch.setattr(sqlite_loader, "IDLE_SECONDS", 0.3)
    loader(store).close()
    load(store, csv_rows(10))
    pid = loader(store).pid
    deadline = time.monotonic() + 10
    while loader(store).pid is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert loader(store).pid is None  # it left by itself
    assert store.summary(load(store, csv_rows(8)), 0)[0] == 8
    assert loader(store).pid not in (None, pid)


def test_two_databases_two_loaders(tmp_path, store):
    other = VirtualFileStore(database_url=f"sqlite:///{tmp_path / 'other.db'}")
    try:
        mine, theirs = load(store, csv_rows(3)), load(other, csv_rows(7))
        assert loader(store).pid != loader(other).pid
        assert store.summary(mine, 0)[0] == 3 and other.summary(theirs, 0)[0] == 7
        assert tables(store)[1] == 1 and tables(other)[1] == 1
        other.close()
        assert loader(other).pid is None and loader(store).pid is not None  # only its own
    finally:
        other.close()


def test_closing_the_store_stops_its_loader(store):
    load(store, csv_rows(10))
    pid = loader(store).pid
    loader(store).sync()  # its checkpoint is done: the write-ahead log is in the file
    store.close()
    assert loader(store).pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert store.summary(load(store, csv_rows(1)), 0)[0] == 1  # a later load starts another


def test_small_loads_start_no_loader_but_use_a_running_one(store):
    assert not store.columnar_load_pays(100_000) and loader(store).pid is None
    assert store.columnar_load_pays(sqlite_loader.SQLITE_CHILD_MIN_BYTES)  # starts it
    assert loader(store).pid is not None
    assert store.columnar_load_pays(sqlite_loader.SQLITE_WARM_MIN_BYTES)
    assert not store.columnar_load_pays(sqlite_loader.SQLITE_WARM_MIN_BYTES - 1)


def test_a_process_with_many_open_files(store):
    """The loader's pipes get descriptors above 1024 (``select`` would refuse them; the loader polls)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    loader(store).close()
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert store.summary(load(store, csv_rows(100_000)), 0)[0] == 100_000
    finally:
        for fd in held:
            os.close(fd)


def test_a_drain_beside_a_reader_thread_keeps_the_frames_whole():
    """A failed load drains its data while Arrow's read-ahead thread may still be reading it (it hung a
    retried Push): whatever the interleaving, the drain stops at the data's end and the next request's
    line is read whole. Tiny frames, a reader thread reading while the drain starts, many times over."""
    import threading

    from connector_ops.resources.virtual_files.sqlite_ingest import FRAME, Frames, Inbox

    for attempt in range(200):
        read_fd, write_fd = os.pipe()
        data = b"".join(FRAME.pack(3) + b"abc" for _ in range(2_000)) + FRAME.pack(0) + b'{"next": %d}\n' % attempt

        def write(data: bytes = data, fd: int = write_fd) -> None:
            with os.fdopen(fd, "wb") as sink:
                for start in range(0, len(data), 7):
                    sink.write(data[start:start + 7])
                    sink.flush()

        inbox = Inbox(read_fd)
        frames = Frames(inbox)
        writer = threading.Thread(target=write, daemon=True)
        reader = threading.Thread(target=lambda frames=frames: [frames.read(5) for _ in range(500)], daemon=True)
        writer.start()
        reader.start()
        frames.drain()
        reader.join(10)
        writer.join(10)
        assert not reader.is_alive() and not writer.is_alive(), attempt
        assert inbox.readline() == b'{"next": %d}\n' % attempt
        os.close(read_fd)


def test_an_interrupt_while_the_loader_takes_the_request_kills_it(store, signalled_after):
    """A Ctrl-C while the loader had the request but had not said it was ready (a fresh loader still
    importing, under load) left it holding that request: the next load's request was read as its data and
    its stale "ready" taken for an answer, and that load waited for ever. The loader is now killed there
    too, and the next load starts another."""
    import threading

    from tests.signals import Stop

    load(store, csv_rows(10))
    before, pid = tables(store), loader(store).pid
    os.kill(pid, signal.SIGSTOP)  # it cannot answer the request until the interrupt has come
    signalled_after(0.3)
    try:
        with pytest.raises(Stop):
            load(store, csv_rows(100_000))
    finally:
        os.kill(pid, signal.SIGCONT) if loader(store).pid == pid else None
    done: list[str] = []
    after = threading.Thread(target=lambda: done.append(load(store, csv_rows(7))), daemon=True)
    after.start()
    after.join(60)
    if after.is_alive():  # the bug: unblock the thread, then fail
        os.kill(pid, signal.SIGKILL)
        after.join(10)
        pytest.fail("the load after the interrupt waited for ever")
    assert loader(store).pid not in (None, pid)
    assert store.summary(done[0], 0)[0] == 7 and len(tables(store)[0]) == len(before[0]) + 1


def test_a_forked_child_leaves_its_parents_loader_alone(store):
    """A child made by fork (a multiprocessing worker) starts its own loader; the parent's, inherited, is let go
    without a warning, an unclosed pipe or a signal, and goes on serving the parent."""
    load(store, csv_rows(10))
    pid = loader(store).pid
    read, write = os.pipe()
    gc.collect()  # the garbage of earlier tests is not the child's to report
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's verdict is its exit status
        os.close(read)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ResourceWarning)
                loaded = store.summary(load(store, csv_rows(20)), 0)[0]
                own = loader(store).pid
                gc.collect()
            os.write(write, repr((loaded, own != pid, [str(w.message)[:80] for w in caught])).encode())
            store.close()
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        said = answer.read()
    os.waitpid(child, 0)
    assert said == repr((20, True, []))
    assert loader(store).pid == pid  # still running, still the parent's
    assert store.summary(load(store, csv_rows(30)), 0)[0] == 30 and loader(store).pid == pid
