"""A store's engine is built without holding up the threads asking for other stores' engines
(:data:`engines._BUILDING`).

A new SQLite engine checks its catalog in a write transaction, which waits for the file's write lock while
another process holds it (up to the 60 s busy timeout). That build ran under the lock every thread asking for
any engine takes: a thread asking for an unrelated store, its engine kept or new, waited as long (5.6 s
measured). Here another process holds the write lock of a store's file until the test lets it go (through a
pipe), and the engines of other stores are asked for while that store's build waits for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from connector_ops.kernel.errors import ActionFailed
from connector_ops.resources.virtual_files import engines
from connector_ops.resources.virtual_files.engines import get_engine
from tests.stacks import comes_to, runs

#: holds the write lock of the SQLite file argv[1] (in WAL mode, so readers go on), having run the statements
#: argv[2:] in its transaction, until it reads a line; then commits
HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("BEGIN IMMEDIATE")
for statement in sys.argv[2:]:
    conn.execute(statement)
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
conn.close()
"""


@contextlib.contextmanager
def write_locked(path: Path, *statements: str) -> Iterator[Callable[[], None]]:
    """Another process holds the write lock of the SQLite file at ``path`` until the call this gives is made
    (or the block ends)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), *statements], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdin is not None and holder.stdout is not None

    def release() -> None:  # a line, not the pipe's end: a forked child keeps the pipe open
        assert holder.stdin is not None
        if not holder.stdin.closed:
            holder.stdin.write("\n")
            holder.stdin.close()
        assert holder.wait(60) == 0

    try:
        assert holder.stdout.readline().strip() == "locked"
        yield release
    finally:
        release()
        holder.stdout.close()


class Asking(threading.Thread):
    """A thread asking for the engine of ``url``: the engine it got, or the error; ``connects``, the connections
    opened in it (one per engine built: the catalog's check), and ``connected`` from the first (its build is
    under way). With ``go``, its connections wait for that event as they open."""

    def __init__(self, url: str, go: threading.Event | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.go = url, go
        self.engine: sa.Engine | None = None
        self.error: BaseException | None = None
        self.connected = threading.Event()
        self.connects = 0

    def run(self) -> None:
        try:
            self.engine = get_engine(self.url)
        except BaseException as exc:
            self.error = exc

    def answered(self, timeout: float = 60) -> bool:
        """Whether the thread has its answer within ``timeout`` seconds (generous: it is not a speed)."""
        self.join(timeout)
        return not self.is_alive()


@pytest.fixture(autouse=True)
def connects() -> Iterator[None]:
    """Every new connection of every pool, counted in the :class:`Asking` thread that opened it."""
    def on_connect(_dbapi_conn: Any, _record: Any) -> None:
        thread = threading.current_thread()
        if isinstance(thread, Asking):
            thread.connects += 1
            thread.connected.set()
            if thread.go is not None:
                assert thread.go.wait(120)

    sa.event.listen(sa.pool.Pool, "connect", on_connect)
    try:
        yield
    finally:
        sa.event.remove(sa.pool.Pool, "connect", on_connect)


def store_url(folder: Path, name: str) -> str:
    return f"sqlite:///{folder / name / 'vf.db'}"


def test_a_new_engine_waiting_for_its_file_holds_up_no_other_store(tmp_path: Path) -> None:
    locked, kept, new = (store_url(tmp_path, name) for name in ("locked", "kept", "new"))
    kept_engine = get_engine(kept)
    with write_locked(tmp_path / "locked" / "vf.db") as release:
        building = Asking(locked)
        building.start()
        assert building.connected.wait(60)  # its build is under way: the catalog's check waits for the lock
        others = [Asking(kept), Asking(new)]
        for other in others:
            other.start()
        for other in others:  # they waited with the locked store's build, until its lock was let go
            assert other.answered(30) and other.error is None
        assert others[0].engine is kept_engine and others[1].engine is get_engine(new)
        assert building.is_alive()  # still waiting for the file's write lock
        release()
        assert building.answered() and building.error is None
    assert building.engine is get_engine(locked)
    assert building.connects == 1


def waits_for_a_build(thread: Asking) -> bool:
    """Whether ``thread`` comes to wait for another thread's build (``Future.result``, seen in its stack)
    within 60 s: started alone, it may not have got there yet when the build ends, and would build again."""
    return comes_to(thread, lambda frame: runs("result")(frame) and "concurrent" in frame.f_code.co_filename)


def asked_together(url: str, release: Callable[[], None]) -> tuple[Asking, Asking]:
    """Two threads asking for ``url``'s new engine: the first building it (waiting for the file's write lock),
    the second waiting for that build; then the lock let go, and both answered."""
    first, second = Asking(url), Asking(url)
    first.start()
    assert first.connected.wait(60)
    second.start()
    assert waits_for_a_build(second)
    release()
    assert first.answered() and second.answered()
    return first, second


def test_two_threads_asking_for_a_new_store_get_one_engine(tmp_path: Path) -> None:
    url = store_url(tmp_path, "one")
    with write_locked(tmp_path / "one" / "vf.db") as release:
        first, second = asked_together(url, release)
    assert first.error is None and second.error is None
    assert first.engine is second.engine is get_engine(url)
    assert first.connects + second.connects == 1  # built once


def test_the_threads_waiting_for_a_failed_build_raise_its_error(tmp_path: Path) -> None:
    """The build fails (a newer release's layout, stamped by the process holding the lock): nothing is kept,
    and the thread waiting for it raises the same error, as its own, rather than trying again after it (another
    wait for the lock, each thread in turn)."""
    url = store_url(tmp_path, "newer")
    newer = ("CREATE TABLE cop_store_layout (id INTEGER PRIMARY KEY, version INTEGER NOT NULL, "
             "written_by VARCHAR NOT NULL)", "INSERT INTO cop_store_layout VALUES (1, 999, '999.0')")
    with write_locked(tmp_path / "newer" / "vf.db", *newer) as release:
        first, second = asked_together(url, release)
    assert isinstance(first.error, ActionFailed) and isinstance(second.error, ActionFailed)
    # the same error, as the waiter's own: raised by every waiter, the builder's one object had each waiter's
    # frames added to its traceback
    assert str(second.error) == str(first.error) and second.error is not first.error
    assert second.error.__cause__ is first.error
    assert first.connects + second.connects == 1
    assert engines.store_file(url) is None  # nothing kept: the next call tries again
    with pytest.raises(ActionFailed, match="layout 999"):
        get_engine(url)


def _ask_in_child(url: str) -> None:
    get_engine(url)


def test_a_child_forked_while_a_build_is_under_way_builds_its_own(tmp_path: Path) -> None:
    """A process forked while a thread builds an engine has no such thread: asking for that store there waited
    for a build nothing would end. The build is held as its connection opens (not inside SQLite, whose locks a
    fork would leave held in the child)."""
    url = store_url(tmp_path, "forked")
    go = threading.Event()
    building = Asking(url, go)
    building.start()
    try:
        assert building.connected.wait(60)
        child = multiprocessing.get_context("fork").Process(target=_ask_in_child, args=(url,))
        child.start()
        try:
            child.join(60)
            assert child.exitcode == 0  # its own engine, while the parent's build still waits
        finally:
            if child.is_alive():
                child.terminate()
                child.join()
    finally:
        go.set()
    assert building.answered() and building.error is None
    assert building.engine is get_engine(url)


def test_a_build_interrupted_as_it_makes_room_leaves_no_thread_waiting(tmp_path: Path) -> None:
    """The builder's thread interrupted (Ctrl-C) after its engine was kept, as it closed an old engine to make
    room: the thread waiting for that build waited for ever (its build was never said to be over). It now
    takes the engine kept."""
    engines.dispose_all()  # the process's engines are these tests' alone: the oldest is closed first
    kept = [get_engine(store_url(tmp_path, f"other-{i}")) for i in range(engines.KEPT_ENGINES)]
    for engine in kept:
        with engine.connect():  # a pooled connection, which making room closes
            pass
    oldest = kept[0]  # the least recently asked for

    def interrupted(*_: Any) -> None:
        if isinstance(threading.current_thread(), Asking):
            raise KeyboardInterrupt

    sa.event.listen(oldest.pool, "close", interrupted)
    url = store_url(tmp_path, "new")
    try:
        with write_locked(tmp_path / "new" / "vf.db") as release:
            first, second = asked_together(url, release)
    finally:
        sa.event.remove(oldest.pool, "close", interrupted)
    assert isinstance(first.error, KeyboardInterrupt)
    assert second.error is None and second.engine is get_engine(url)


def interrupt(thread: threading.Thread) -> None:
    """A ``KeyboardInterrupt`` raised in ``thread`` at its next bytecode, as a Ctrl-C would be on the main thread
    (a signal reaches no other thread)."""
    assert thread.ident is not None
    sent = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt))
    assert sent == 1


def test_the_threads_waiting_for_an_interrupted_build_try_again(tmp_path: Path) -> None:
    """The builder's thread interrupted (Ctrl-C) during its build, before it kept anything: that is not the
    database's answer, and the thread waiting for the build does not raise it but builds the engine itself. The
    builder is held as its connection opens, in a loop of Python calls (so that the interrupt lands there, not
    inside a lock's wait), and interrupted once the other thread waits for its build."""
    url = store_url(tmp_path, "interrupted")
    builder, waiter = Asking(url), Asking(url)
    parked = threading.Event()

    def park(_dbapi_conn: Any, _record: Any) -> None:
        if threading.current_thread() is builder:
            parked.set()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # until the interrupt
                time.sleep(0.005)

    sa.event.listen(sa.pool.Pool, "connect", park)
    try:
        builder.start()
        assert parked.wait(60)
        waiter.start()
        assert waits_for_a_build(waiter)
        interrupt(builder)
        assert builder.answered() and waiter.answered()
    finally:
        sa.event.remove(sa.pool.Pool, "connect", park)
    assert isinstance(builder.error, KeyboardInterrupt)
    assert waiter.error is None and waiter.engine is get_engine(url)
    assert (builder.connects, waiter.connects) == (1, 1)  # the waiter's engine is its own build


def test_dispose_waits_for_a_build_under_way_and_disposes_of_what_it_kept(tmp_path: Path) -> None:
    """A store disposed of while another thread built its engine: the build kept it afterwards, and the file was
    open again once ``dispose`` had said it was let go of (a ``with Session()`` block's end)."""
    url = store_url(tmp_path, "disposed")
    with write_locked(tmp_path / "disposed" / "vf.db") as release:
        building = Asking(url)
        building.start()
        assert building.connected.wait(60)
        disposed: list[bool] = []
        disposing = threading.Thread(target=lambda: disposed.append(engines.dispose(url)), daemon=True)
        disposing.start()
        disposing.join(1)
        assert disposing.is_alive()  # waits for the build (its file's write lock)
        release()
        assert building.answered() and building.error is None
        disposing.join(60)
    assert disposed == [True] and engines.store_file(url) is None
