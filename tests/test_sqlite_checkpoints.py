"""SQLite WAL checkpoints off the writers' path (resources/virtual_files/checkpoints.py): the store's
connections never checkpoint inside a commit; after a large write a background thread copies the log into
the database file; readers and writers see the same rows throughout."""

from __future__ import annotations

import functools
import itertools
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from connector_ops.resources.virtual_files import checkpoints, engines
from connector_ops.resources.virtual_files.store import VirtualFileStore
from tests.signals import Stop, stopping_at
from tests.stacks import comes_to, runs


def test_the_store_connections_leave_checkpoints_to_the_thread(tmp_path):
    store = VirtualFileStore(database_url=f"sqlite:///{tmp_path / 'vf.db'}")
    with store.sql.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0


@pytest.fixture
def asked(monkeypatch) -> list[str]:
    """The files the background thread is asked to checkpoint, in order (the checkpoints still run)."""
    paths: list[str] = []
    real = checkpoints.checkpoint

    def recording(p: str) -> None:
        paths.append(p)
        real(p)

    monkeypatch.setattr(checkpoints, "checkpoint", recording)
    return paths


def test_a_large_write_is_checkpointed_in_the_background(tmp_path, asked):
    path = tmp_path / "vf.db"
    store = VirtualFileStore(database_url=f"sqlite:///{path}")
    small = store.create_from_batches(["a"], [[("x",)]])
    checkpoints.wait()
    assert asked == []  # a small log is left alone
    big = store.create_from_batches(["a", "b"], [[(str(i), "v" * 60) for i in range(100_000)]])
    checkpoints.wait()
    assert asked == [str(path)]
    conn = sqlite3.connect(path)
    try:
        busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        conn.close()
    assert busy == 0 and log == done  # everything was already copied into the database file
    assert store.summary(big, 1) == (100_000, ["a", "b"], [{"a": "0", "b": "v" * 60}])
    assert store.summary(small, 0)[0] == 1


def test_a_checkpoint_of_a_removed_file_creates_nothing(tmp_path):
    checkpoints.checkpoint(str(tmp_path / "gone.db"))
    assert not (tmp_path / "gone.db").exists()


def test_writes_that_follow_each_other_start_the_log_over(tmp_path):
    """SQLite starts the log over only when a write begins on a log that is wholly checkpointed. Writes that
    followed each other faster than the background checkpoint each appended to the log instead, and the
    file kept its largest size: a Map and a clean, four times over, left 4 × the Map's log. A write now
    waits for the checkpoint still running on its file."""
    path = tmp_path / "vf.db"
    store = VirtualFileStore(database_url=f"sqlite:///{path}")
    rows = [[(str(i), "v" * 60) for i in range(100_000)]]
    store.drop(store.create_from_batches(["a", "b"], rows))
    checkpoints.wait()
    one_write = (tmp_path / "vf.db-wal").stat().st_size
    for _ in range(4):
        store.drop(store.create_from_batches(["a", "b"], rows))  # no pause: the next write comes at once
    checkpoints.wait()
    assert (tmp_path / "vf.db-wal").stat().st_size <= 1.5 * one_write
    assert store.inventory() == []


def test_small_writes_after_a_large_one_ask_for_no_checkpoint(tmp_path, asked):
    """The ``-wal`` file keeps its largest length: when that was the measure, every small write after one
    large write (an Iterate call storing its cursor) asked for a checkpoint and its ``fsync``, and the next
    write waited for it. The measure is the log SQLite wrote since it started it over."""
    path = tmp_path / "vf.db"
    store = VirtualFileStore(database_url=f"sqlite:///{path}")
    big = store.create_from_batches(["a", "b"], [[(str(i), "v" * 60) for i in range(100_000)]])
    checkpoints.wait()
    asked.clear()
    for i in range(5):
        store.append({big: [{"a": str(i), "b": "w"}]})
    checkpoints.wait()
    assert asked == []
    assert checkpoints.log_bytes(str(path)) < 100_000 < (tmp_path / "vf.db-wal").stat().st_size
    assert store.summary(big, 0)[0] == 100_005


def test_the_log_is_measured_from_its_restart(tmp_path):
    """``log_bytes`` counts the frames of the log SQLite is writing now, not those left in the file from
    before it started over; as SQLite itself reports them (``wal_checkpoint``'s frame count)."""
    path = tmp_path / "raw.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for pragma in ("journal_mode=WAL", "wal_autocheckpoint=0"):
            conn.execute(f"PRAGMA {pragma}")
        assert checkpoints.log_bytes(str(path)) == 0  # no log yet
        conn.execute("CREATE TABLE t (a)")
        with conn:  # one transaction
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO t VALUES (?)", (("x" * 200,) for _ in range(50_000)))
        _, large, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        frame = 24 + conn.execute("PRAGMA page_size").fetchone()[0]
        assert checkpoints.log_bytes(str(path)) == large * frame
        conn.execute("INSERT INTO t VALUES ('y')")  # the log starts over: a frame or two at its start
        _, small, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert 0 < small < 5
        assert checkpoints.log_bytes(str(path)) == small * frame
        assert (tmp_path / "raw.db-wal").stat().st_size >= large * frame  # the file kept its length
    finally:
        conn.close()
    assert checkpoints.log_bytes(str(path)) == 0  # the last connection checkpointed and removed it


@pytest.mark.parametrize("cache_kib", [64 << 10, 1 << 10])  # the new pages in the page cache, or in the log
def test_the_room_a_checkpoint_will_take_is_known_before_the_commit(tmp_path, cache_kib):
    """The floor of free disk space keeps room for the checkpoint that copies a write's log into the database
    file: before the commit, :func:`checkpoints.checkpoint_growth` covers what the commit still writes to the
    log and what the checkpoint then adds to the file (their sum, measured, is at most that), and during the
    write its bound covers the log so far."""
    path = tmp_path / "vf.db"
    store = VirtualFileStore(database_url=f"sqlite:///{path}")
    checkpoints.wait()
    wal = path.with_name("vf.db-wal")
    with store.sql.writing() as conn:
        conn.exec_driver_sql(f"PRAGMA cache_size=-{cache_kib}")
        conn.exec_driver_sql("CREATE TABLE t (x)")
        conn.exec_driver_sql("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) "
                             "INSERT INTO t SELECT randomblob(100) FROM n")
        page_size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
        during = checkpoints.checkpoint_growth(str(path), 0, page_size)
        logged = wal.stat().st_size
        page_count = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        need = checkpoints.checkpoint_growth(str(path), 0, page_size, page_count, (cache_kib << 10) // page_size)
        before = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    checkpoints.wait()  # the background one, or
    checkpoints.checkpoint(str(path))
    taken = path.stat().st_size + wal.stat().st_size - before
    assert taken > 20 << 20
    assert taken <= need <= taken * 1.1 + (1 << 20)
    assert during >= logged * page_size // (page_size + 24) - (1 << 20)


def test_the_room_before_the_commit_counts_the_whole_page_cache(tmp_path):
    """A write that first rewrites existing pages (spilled to the log as it goes) and then adds new ones (kept
    in the page cache): the exact count before the commit took the new pages still unlogged to be ``growth -
    logged``, as if every logged frame were a new page, and undercut the floor by 31 MiB of the 61 MiB the
    commit and its checkpoint took. Which logged frames are new cannot be told, so the whole cache counts."""
    path = tmp_path / "vf.db"
    store = VirtualFileStore(database_url=f"sqlite:///{path}")
    wal = path.with_name("vf.db-wal")
    rows = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30000) "
    with store.sql.writing() as conn:
        conn.exec_driver_sql("CREATE TABLE old (x)")
        conn.exec_driver_sql(rows + "INSERT INTO old SELECT randomblob(1000) FROM n")  # ~30 MiB
    checkpoints.wait()
    checkpoints.checkpoint(str(path), "TRUNCATE")
    with store.sql.writing() as conn:
        conn.exec_driver_sql("PRAGMA cache_size=-2048")  # the rewrite spills to the log as it goes
        conn.exec_driver_sql("UPDATE old SET x = randomblob(1000)")
        conn.exec_driver_sql("PRAGMA cache_size=-65536")
        conn.exec_driver_sql("CREATE TABLE new (x)")
        conn.exec_driver_sql(rows + "INSERT INTO new SELECT randomblob(1000) FROM n")  # ~30 MiB, in the cache
        room = checkpoints.CheckpointRoom(str(path), 65536 << 10)
        room.begin(conn)
        need = room.before_commit(lambda: conn.exec_driver_sql("PRAGMA page_count").scalar_one())(0)  # exact
        before = path.stat().st_size + wal.stat().st_size
    checkpoints.wait()
    checkpoints.checkpoint(str(path))
    taken = path.stat().st_size + wal.stat().st_size - before
    assert taken > 50 << 20
    assert taken <= need


def test_counting_the_room_keeps_the_writers_locks(tmp_path):
    """The room's exact count, during the write and before its commit, reads nothing of the database file:
    in a process holding SQLite connections, opening and closing that file drops their POSIX locks. It did:
    another process's connection then counted itself the last one, and at its close checkpointed and deleted
    the log a Join was writing into, then took the write lock in the middle of the Join."""
    path = tmp_path / "vf.db"
    store = VirtualFileStore(database_url=f"sqlite:///{path}")
    probe = ("import sqlite3, sys\n"
             "other = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n"
             "try:\n other.execute('BEGIN IMMEDIATE')\n"
             "except sqlite3.OperationalError as exc:\n print(exc)\n"
             "other.close()")
    with store.sql.writing() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x)")
        conn.exec_driver_sql("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
                             "INSERT INTO t SELECT randomblob(100) FROM n")
        room = checkpoints.CheckpointRoom(str(path), 0)
        room.begin(conn)
        assert room.during(0) > 0 and room.before_commit(
            lambda: conn.exec_driver_sql("PRAGMA page_count").scalar_one())(0) > 0  # no room: the exact counts
        for _ in range(2):  # the second finds what the first one's close left
            other = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True,
                                   check=True)
            assert other.stdout.strip() == "database is locked", other
        assert path.with_name("vf.db-wal").exists()
    assert store.sql.engine.connect().exec_driver_sql("SELECT count(*) FROM t").scalar_one() == 20000


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """The files the checkpoints open a connection to (``sqlite3.connect`` as :mod:`.checkpoints` calls it)."""
    paths: list[str] = []
    real = sqlite3.connect

    def counting(database: str, *args, **kwargs) -> sqlite3.Connection:
        paths.append(database)
        return real(database, *args, **kwargs)

    monkeypatch.setattr(checkpoints.sqlite3, "connect", counting)
    return paths


def test_the_checkpoints_of_a_file_reuse_one_connection(tmp_path, asked, opened):
    """Each background checkpoint opened a new connection, which read the whole schema (one table per virtual
    file: 63 ms at 5,000 files, 600 ms at 20,000) while the next write waited for it. One connection per file
    now, across writes and checkpoints; it closes with the store's engine."""
    from connector_ops.resources.virtual_files.engines import dispose_all

    path = tmp_path / "vf.db"
    store = VirtualFileStore(database_url=f"sqlite:///{path}")
    rows = [(str(i), "v" * 60) for i in range(70_000)]
    for _ in range(3):
        store.create_from_batches(["a", "b"], [rows])
        checkpoints.wait()
    assert asked == [str(path)] * 3 and len(opened) == 1
    dispose_all()
    assert str(path) not in checkpoints._connections  # closed with the engine


def test_a_checkpoint_connection_follows_the_file_at_its_path(tmp_path, opened):
    """A kept connection must not checkpoint a file replaced since (a backup restored) for good: the file at
    the path is recognised by its identity, and a new one opened anew."""
    path, other = tmp_path / "vf.db", tmp_path / "restored.db"
    for file in (path, other):
        conn = sqlite3.connect(file, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (a)")
        conn.close()
    opened.clear()
    checkpoints.checkpoint(str(path))
    checkpoints.checkpoint(str(path))
    assert len(opened) == 1
    other.replace(path)
    writer = sqlite3.connect(path, isolation_level=None)
    opened.clear()
    try:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("INSERT INTO t VALUES (1)")
        checkpoints.checkpoint(str(path))
        assert len(opened) == 1  # the file now at the path
        busy, log, done = writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        writer.close()
    assert busy == 0 and log == done
    checkpoints.forget(str(path))


@pytest.fixture
def checkpoint_held(tmp_path, monkeypatch):
    """A store whose background checkpoint is held as it opens its connection (inside
    :func:`checkpoints.checkpoint`) until the test sets the event given (or ends): the thread closes no file's
    connection meanwhile. Yields the file's path and the event; the process's other engines disposed of first."""
    path = tmp_path / "held" / "vf.db"
    go, connecting = threading.Event(), threading.Event()
    real = sqlite3.connect

    def held(database, *args, **kwargs):
        if threading.current_thread().name == "sqlite-checkpoints" and str(path) in str(database):
            connecting.set()
            go.wait(120)
        return real(database, *args, **kwargs)

    engines.dispose_all()
    store = VirtualFileStore(database_url=f"sqlite:///{path}")
    monkeypatch.setattr(checkpoints.sqlite3, "connect", held)
    store.create_from_batches(["a", "b"], [[(str(i), "v" * 60) for i in range(70_000)]])  # a checkpoint asked
    try:
        assert connecting.wait(120)
        yield str(path), go
    finally:
        go.set()
        checkpoints.wait()


def warnings_of_checkpoints(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == checkpoints.__name__ and r.levelno == logging.WARNING]


def test_a_close_not_done_in_time_says_so(checkpoint_held, monkeypatch, caplog):
    """The wait for a file's checkpoint connection to close ended at its timeout in silence: a ``with Session()``
    block's end returned as if the file were let go of. It now says which file is still open, and returns so."""
    path, go = checkpoint_held
    with monkeypatch.context() as short, caplog.at_level(logging.WARNING, logger=checkpoints.__name__):
        short.setattr(checkpoints, "SETTLE_SECONDS", 0.2)
        assert engines.dispose(f"sqlite:///{path}") is False
    [said] = warnings_of_checkpoints(caplog)
    assert said.startswith("1 SQLite file(s) still open after 0.2 s") and said.endswith(f": {path}")
    go.set()
    assert checkpoints.closed(path) is True  # once the checkpoint is done, the thread closes it


class Deadlines(threading.Condition):
    """A condition as :data:`checkpoints._finished` is (on its lock), that records where each timed wait on it
    ends: the moment it was entered plus its timeout."""

    def __init__(self, lock) -> None:
        super().__init__(lock)
        self.ends: list[float] = []

    def wait(self, timeout=None) -> bool:
        if timeout is not None:
            self.ends.append(time.monotonic() + timeout)
        return super().wait(timeout)


#: the settle time the files of all engines are waited for within
SETTLE = 0.5


def test_the_files_of_all_engines_are_waited_for_together(checkpoint_held, tmp_path, monkeypatch, caplog):
    """``dispose_all`` waited for each file's connection to close in turn, each up to ``SETTLE_SECONDS``: 60 s
    per file behind one long checkpoint (the thread closes them in order). One wait now, by one deadline, for
    them all: no wait goes on past the first one's end (waits of a file each, in turn, gave the second file
    ``SETTLE_SECONDS`` more), and it expires once, with one warning naming every file still open."""
    path, go = checkpoint_held
    other = VirtualFileStore(database_url=f"sqlite:///{tmp_path / 'other' / 'vf.db'}")
    other.create_from_batches(["a"], [[("x",)]])
    deadlines = Deadlines(checkpoints._lock)
    with monkeypatch.context() as short, caplog.at_level(logging.WARNING, logger=checkpoints.__name__):
        short.setattr(checkpoints, "SETTLE_SECONDS", SETTLE)
        short.setattr(checkpoints, "_finished", deadlines)
        assert engines.dispose_all() is False
    assert deadlines.ends  # it waited
    # by the first wait's deadline: a wait per file ends the second one SETTLE on. Half of it is the margin for
    # the moments a loaded machine lets pass between a wait's timeout computed and the wait entered (0.1 s of
    # 0.2 s could fail spuriously on 2 busy cores)
    assert max(deadlines.ends) - deadlines.ends[0] < SETTLE / 2
    [said] = warnings_of_checkpoints(caplog)
    assert said.startswith("2 SQLite file(s) still open") and path in said and str(tmp_path / "other") in said
    go.set()
    assert engines.dispose_all() is True and checkpoints.closed(path, str(tmp_path / "other" / "vf.db")) is True


def test_a_fork_waits_until_the_checkpoint_thread_is_out_of_sqlite(checkpoint_held, tmp_path):
    """SQLite's locks are the process's: a child forked while the thread held one (its allocator's, inside a
    checkpoint) inherited it held by a thread it does not have, and its first SQLite call, on any file, waited
    for ever (7 of 400 children forked right after large writes; the child's stack in ``sqlite3Malloc``). The
    thread is held here inside its SQLite work (opening its connection); a fork from another thread waits for
    it, then the child uses SQLite and exits."""
    _, go = checkpoint_held
    forked, status = threading.Event(), []

    def fork() -> None:
        pid = os.fork()
        if pid == 0:  # the child: SQLite on a file of its own, then out without running the parent's cleanup
            code = 1
            try:
                conn = sqlite3.connect(str(tmp_path / f"child-{os.getpid()}.db"))
                conn.execute("CREATE TABLE t (a)")
                conn.close()
                code = 0
            finally:
                os._exit(code)
        forked.set()
        status.append(os.waitpid(pid, 0)[1])

    forking = threading.Thread(target=fork, daemon=True)
    forking.start()
    try:
        assert not forked.wait(1), "forked while the checkpoint thread was inside SQLite"
    finally:
        go.set()
    forking.join(60)
    assert forked.is_set() and [os.waitstatus_to_exitcode(s) for s in status] == [0]


def test_a_fork_does_not_wait_for_a_truncate_waiting_for_readers(tmp_path):
    """``give_back`` (after a write stopped on a low disk) truncates the log, which waits for the file's readers.
    It held the lock a fork waits for (:func:`checkpoints._before_fork`) through one wait of up to 60 s: a fork
    by a thread with a read open on the file waited the whole minute. The wait is now made of short tries, the
    lock let go of between them: the fork goes through while the truncate still waits for the reader."""
    path = tmp_path / "vf.db"
    VirtualFileStore(database_url=f"sqlite:///{path}").create_from_batches(["a"], [[("x",)]])
    checkpoints.wait()
    reader = sqlite3.connect(str(path), isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM cop_virtual_file").fetchall()  # a read open: TRUNCATE waits for it
    giving_back = threading.Thread(target=checkpoints.give_back, args=(str(path),), daemon=True)
    try:
        giving_back.start()
        assert comes_to(giving_back, runs("checkpoint"))
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        assert giving_back.is_alive()  # forked while the truncate still waited for the read
    finally:
        reader.execute("COMMIT")
        reader.close()
    giving_back.join(60)
    assert not giving_back.is_alive()


def interrupted_at_each_call(run: Callable[[], object]) -> Iterator[int]:
    """``run()`` over and over, the k-th Python function it calls interrupted as it is entered (k = 1, 2, …),
    where a signal's handler raises (Jupyter's Stop, in the main thread, which begins and ends every write);
    yields k after each run so interrupted, until a run ends without the interrupt. The interrupt is raised
    by a trace function, at that exact call: a real signal's handler would run at a moment of its own."""
    for k in itertools.count(1):
        sys.settrace(stopping_at(k))
        try:
            run()
        except Stop:
            pass
        else:
            return
        finally:
            sys.settrace(None)
        yield k


def lock_free() -> bool:
    if not checkpoints._lock.acquire(blocking=False):
        return False
    checkpoints._lock.release()
    return True


@pytest.mark.parametrize("step", ["after_write", "before_write"])
def test_an_interrupt_anywhere_in_the_bookkeeping_of_a_write_leaves_no_wait_behind(tmp_path, step):
    """A write begins with :func:`.checkpoints.before_write` and ends with :func:`.checkpoints.after_write`,
    in the main thread, where Jupyter's Stop lands. Interrupted at any of their Python calls, they must leave
    nothing a later write waits for. ``after_write`` counted a checkpoint before queueing it: interrupted
    between the two (as ``_ask`` was entered), every later write of the process waited SETTLE_SECONDS (60 s)
    for a checkpoint that was never to run. ``before_write`` held the lock through ``with`` on a
    ``threading.Condition``, whose ``__exit__`` is a Python function: interrupted as it was entered, the lock
    stayed held, and every later write, and the thread, waited for it for ever."""
    path = tmp_path / "vf.db"
    store = VirtualFileStore(database_url=f"sqlite:///{path}")
    store.create_from_batches(["a", "b"], [[(str(i), "v" * 60) for i in range(100_000)]])
    checkpoints.wait()
    assert checkpoints.log_bytes(str(path)) >= checkpoints.WAL_BYTES  # after_write asks for a checkpoint
    run = functools.partial(getattr(checkpoints, step), str(path))
    for k in interrupted_at_each_call(run):
        checkpoints.wait()
        assert lock_free(), f"{step} interrupted at its call {k}: the lock is held"
        assert str(path) not in checkpoints._unfinished, f"{step} interrupted at its call {k}: a count is left"
        assert str(path) not in checkpoints._pending, f"{step} interrupted at its call {k}: a request is left"
