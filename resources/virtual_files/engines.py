"""One SQLAlchemy Engine per database URL per process, with each dialect set up for our workload.

SQLite: WAL, ``synchronous=NORMAL``, a busy timeout (parallel Dagster steps share the file), and real
transactions around DDL (pysqlite's legacy mode would auto-commit ``CREATE TABLE``), with
``BEGIN IMMEDIATE`` for writers so two writers never deadlock on a lock upgrade; WAL checkpoints in a
background thread once a write transaction has ended (:mod:`.checkpoints`), not inside its commit;
statements that stop on Ctrl-C (:mod:`.interrupts`); and the file checked against the one at its path, so that
a file deleted or replaced under the process gets an engine anew, never writes into the old one (:mod:`.store_file`).
PostgreSQL: psycopg 3 (``postgresql+psycopg://``), whose ``COPY`` the bulk loader uses; statements cancelled
in the server by any interrupt (:mod:`.interrupts`), and ended by the server once their client is gone.

A process keeps at most :data:`KEPT_ENGINES` engines: one more closes the least recently asked for that is idle
(no connection checked out, nor just handed to a thread that has not used it yet) and not held by an open
``Session`` (:mod:`.engine_holds`), so that a notebook kernel or a code server going through many stores keeps a
bounded number of files and server sessions open.

An engine is built outside the lock every thread asking for one takes (:data:`_BUILDING`): a new engine waits for
its database (a SQLite file's write lock, held by another process for up to the busy timeout), and the threads
asking for other stores' engines no longer wait with it. Two threads asking for the same new store still get one
engine: the second waits for the first's build.

A process made by ``fork`` (a multiprocessing pool's worker) keeps the engines but not their pooled connections:
those are its parent's sessions and files, and two processes on one PostgreSQL session read each other's answers
("server closed the connection unexpectedly"). The child's engines start on empty pools (SQLAlchemy's
``dispose(close=False)``); the parent's connections are left to it, unclosed (:mod:`~connector_ops.kernel.forks`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from connector_ops.kernel.file_modes import make_database_file
from connector_ops.kernel.forks import abandon, in_child
from connector_ops.kernel.secrets import mask_url
from connector_ops.resources.virtual_files import engine_holds
from connector_ops.resources.virtual_files.array_cursors import sqlite_path
from connector_ops.resources.virtual_files.catalog import metadata, virtual_file
from connector_ops.resources.virtual_files.checkpoints import after_write, before_write
from connector_ops.resources.virtual_files.checkpoints import closed as checkpoints_closed
from connector_ops.resources.virtual_files.checkpoints import forget as forget_checkpoints
from connector_ops.resources.virtual_files.checkpoints import opened as checkpoints_opened
from connector_ops.resources.virtual_files.db_errors import DatabaseRefused
from connector_ops.resources.virtual_files.interrupts import InterruptibleConnection
from connector_ops.resources.virtual_files.layout import RECHECK_SECONDS, check_stamp, check_unchanged
from connector_ops.resources.virtual_files.pool_settings import pool_settings
from connector_ops.resources.virtual_files.sqlite_faults import install as name_sqlite_faults
from connector_ops.resources.virtual_files.sqlite_faults import with_floor
from connector_ops.resources.virtual_files.sqlite_names import host_path, sqlite_name
from connector_ops.resources.virtual_files.store_file import StoreFile, watch

#: the engines by URL, least recently asked for first
_ENGINES: OrderedDict[str, sa.Engine] = OrderedDict()
#: the file each SQLite engine of :data:`_ENGINES` opened (same keys; none for a database in memory)
_FILES: dict[str, StoreFile] = {}
#: taken by every thread asking for an engine, for as long as it takes to find one kept or make room: never
#: while one is built (:data:`_BUILDING`). Re-entrant since builds ran under it (a catalog being created could
#: find its file changed: :func:`_forget`); kept so, though nothing run under it now is known to take it again
_LOCK = threading.RLock()
#: the engines being built, by key (:func:`_shared_engine`), each a future the threads asking for the same key
#: wait for; built outside :data:`_LOCK`, because a build waits for the database: a SQLite file's catalog check
#: for its write lock (up to the 60 s busy timeout, while another process writes), a PostgreSQL server for its
#: connection. Under the lock, every thread asking for any other store's engine, kept or not, waited as long
#: (5.6 s measured, for a store that had nothing to do with the locked file)
_BUILDING: dict[str, Future[None]] = {}
#: the engine last handed to each thread, and its key, until that thread checks out a connection of it: in use for
#: :func:`_make_room` as much as one with a connection checked out. Between :func:`get_engine`'s return and its
#: caller's first connection the pool counts nothing, and another thread's build closed the engine to make room:
#: the caller got an engine let go of (its file no longer watched, its checkpoints no longer run). Each thread
#: sets and clears its own entry only; :func:`_make_room` reads a copy, and drops the entries of ended threads.
#: The engine itself, not its key alone: once its file is replaced a key's engine is built anew, and a checkout
#: of the old one (an engine its thread still held) ended the entry meant for the new one, unused yet
_HANDED: dict[threading.Thread, tuple[str, sa.Engine]] = {}

#: name -> (nargs, fn) registered on every SQLite connection (e.g. the ``$regex`` matcher).
SQLITE_FUNCTIONS: dict[str, tuple[int, Callable[..., Any]]] = {}

#: engines a process keeps beyond those in use. Each idle one holds its pooled connections: a SQLite file's
#: three descriptors (the file, its log, its shared memory) per connection — 3 after a call, up to 18 after
#: parallel ones — or a PostgreSQL server's sessions. Keeping every engine ever made, a kernel switching among
#: stores, or a loop over per-day files, ran out of descriptors (1,024 by default) after a few hundred stores;
#: 16 keep at most ≈ 300. An engine closed to make room costs its next use a new one: ≈ 3.5 ms on SQLite
#: (open, PRAGMAs, the catalog checked; idle machine), a new session on PostgreSQL (≈ 12× a warm ``SELECT 1``)
KEPT_ENGINES = 16

#: how often PostgreSQL checks, while a statement of ours runs, that its client is still there
CLIENT_CHECK_MS = 5000

_WRITE_OPTION = "cop_write"
WRITE = {_WRITE_OPTION: True}
#: a SQLite write transaction that begins without waiting for a checkpoint of its file (``before_write``): the
#: catalog's check as an engine is made, which every thread asking for that store's engine waits for
_UNSETTLED_OPTION = "cop_unsettled"
_UNSETTLED = {_UNSETTLED_OPTION: True}


def is_writing(conn: sa.Connection) -> bool:
    """Whether ``conn``'s transaction was begun with :data:`WRITE`, as every writer's is: SQLite's ``BEGIN
    IMMEDIATE`` and the checkpoints, and PostgreSQL readers' unflushed commits, depend on it."""
    return bool(conn.get_execution_options().get(_WRITE_OPTION, False))


#: PostgreSQL work_mem for a transaction that hashes a set of row keys: 4M rows' ``seq`` fit in it
HASH_WORK_MEM = "64MB"
#: SQLite's page cache per connection, KiB. 20 Queries on 1M rows look up ≈ 20k table pages by rowid:
#: with 32 MiB the pages the previous Queries read were no longer cached, and the same SELECTs on a raw
#: table with the same cache took as long as ours (1.36–1.41× the raw table's with 64 MiB; 1.14× now)
SQLITE_CACHE_KIB = 65536
#: what one CREATE INDEX's sort holds in memory before it spills to a temp file, KiB. SQLite sizes the
#: sorter by the cache (vdbesort.c): with 64 MiB, indexing a column of 4M rows peaked at +120 MiB
SQLITE_SORT_KIB = 32768
#: the page cache while a new virtual file is filled in this process, KiB: the pages written stay in the cache,
#: dirty, until it is full and they spill to the log. A Push read row by row (1M rows) peaked at +89 MiB with
#: 64 MiB, at +30 MiB with 8 MiB, in the same time
SQLITE_LOAD_KIB = 8192
#: the page cache while a whole file is read in order (a Pull, a count of its rows), KiB: each page is read
#: once, so a larger cache holds nothing a later read asks for (the file's last pages) and grew a Pull of
#: 1M rows by 64 MiB; the B-tree's inner pages, which each keyset page descends, fit
SQLITE_SCAN_KIB = 2048
#: in a container, no page cache above this share of its memory limit: a process holds several connections
#: (a pool, a Dagster step's threads, the loader), and the whole cache is the process's own memory, which the
#: kernel cannot reclaim as it reclaims the file's pages in its cache
SQLITE_LIMIT_SHARE = 16


@functools.cache
def sized_kib(kib: int) -> int:
    """``kib`` of page cache, or less in a container: at most 1/:data:`SQLITE_LIMIT_SHARE` of its memory
    limit (:func:`~connector_ops.kernel.container.limits`). The same from a 1 GiB limit up and without one;
    in 192 MiB a connection caches 12 MiB. With a fixed 64 MiB per connection, a Validate and a Join of a
    file of 1M rows (86 MB) were OOM-killed in a 96 MiB container, and run there now. Read once per process
    (a container's limit does not move under it)."""
    from connector_ops.kernel.container import limits

    memory = limits().memory
    if memory is None:
        return kib
    return min(kib, (memory // SQLITE_LIMIT_SHARE) >> 10)


def room_to_hash_keys(conn: sa.Connection) -> None:
    """Let this PostgreSQL transaction hash up to ``HASH_WORK_MEM`` of row keys (Validate's anti-join, the
    ``$regex`` matches a Query probes). Past the default 4MB the planner spills the hash to disk or, for a
    subplan under ``OR``, probes an index once per row."""
    conn.exec_driver_sql(f"SET LOCAL work_mem = '{HASH_WORK_MEM}'")


@contextlib.contextmanager
def page_cache(conn: sa.Connection, kib: int) -> Iterator[None]:
    """Within this block this SQLite connection's page cache is ``kib`` (:data:`SQLITE_SORT_KIB` while an
    index is built, :data:`SQLITE_LOAD_KIB` while a new file is filled, :data:`SQLITE_SCAN_KIB` while a whole
    file is read), then ``SQLITE_CACHE_KIB`` again, each as :func:`sized_kib` sizes it in a container.
    Nothing on PostgreSQL (its ``maintenance_work_mem`` bounds an index build, its shared buffers a load).
    Nothing to set back on a connection an interrupt invalidated (closed, its cache with it): the statement
    refused there (``PendingRollbackError``) replaced the interrupt, and a Stop in a Push ended as "etl.push
    failed (500)"."""
    if conn.dialect.name != "sqlite":
        yield
        return
    conn.exec_driver_sql(f"PRAGMA cache_size=-{sized_kib(kib)}")
    try:
        yield
    finally:
        if not conn.invalidated:
            conn.exec_driver_sql(f"PRAGMA cache_size=-{sized_kib(SQLITE_CACHE_KIB)}")


@functools.lru_cache(maxsize=64)
def normalise_url(url: str) -> str:
    """``url`` as the engines are keyed (``postgresql://`` spelled with psycopg); cached, because every
    transaction asks for its engine by URL and parsing one took ≈ 60 µs of a 700 µs Query."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def open_by_host_path(engine: sa.Engine) -> None:
    """``sqlite3`` opens the file of ``engine``'s URL (UTF-8 text, which SQLAlchemy's URLs need) by the path
    as Python's file calls take it: ``sqlite3.connect`` encodes a name in the file-system encoding, which may
    be ASCII (:mod:`.sqlite_names`). A ``file:`` URI is left as it is."""

    @sa.event.listens_for(engine, "do_connect")
    def by_host_path(_dialect: Any, _record: Any, cargs: list[Any], _cparams: dict[str, Any]) -> None:
        if cargs and isinstance(cargs[0], str) and not cargs[0].startswith("file:") and cargs[0] != ":memory:":
            cargs[0] = host_path(cargs[0])


def _setup_sqlite(engine: sa.Engine, path: str | None) -> None:
    # first of the connect listeners, before :mod:`.store_file`'s: the log its PRAGMAs open is the one recorded
    @sa.event.listens_for(engine, "connect", insert=True)
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see "begin" below)
        cur = dbapi_conn.cursor()
        # sorts for CREATE INDEX spill to temp files (:func:`page_cache`), so memory stays
        # flat with file size; no checkpoint inside a commit: :mod:`.checkpoints` runs them in the background
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=60000", "foreign_keys=ON",
                       f"cache_size=-{sized_kib(SQLITE_CACHE_KIB)}", *(("wal_autocheckpoint=0",) if path else ())):
            cur.execute(f"PRAGMA {pragma}")
        cur.close()
        for name, (nargs, fn) in SQLITE_FUNCTIONS.items():
            dbapi_conn.create_function(name, nargs, fn, deterministic=True)

    @sa.event.listens_for(engine, "begin")
    def on_begin(conn: sa.Connection) -> None:
        immediate = is_writing(conn)
        # the log wholly checkpointed first, so that SQLite starts it over
        if immediate and path and not conn.get_execution_options().get(_UNSETTLED_OPTION, False):
            before_write(path)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
        if immediate:
            conn.connection.info["cop_wrote"] = True

    if path:
        @sa.event.listens_for(engine.pool, "checkin")
        def on_checkin(_dbapi_conn: Any, record: Any) -> None:
            if record is not None and record.info.pop("cop_wrote", False):  # a write transaction ended
                after_write(path)


def get_engine(url: str, min_free_disk: int | None = None) -> sa.Engine:
    """The process-wide engine for ``url``, with the catalog tables created. A SQLite file deleted or replaced
    since the engine opened it gets an engine anew, on the file now at the path (:mod:`.store_file`).
    ``min_free_disk``: the floor of the store asking, which its SQLite faults name, the catalog's creation
    included (:func:`.sqlite_faults.with_floor`: the engine is shared, the floor is each store's own)."""
    engine = _shared_engine(url, min_free_disk)
    return engine if min_free_disk is None else with_floor(engine, min_free_disk)


def _shared_engine(url: str, min_free_disk: int | None) -> sa.Engine:
    """The engine kept for ``url``, or one built for it outside :data:`_LOCK`: by this thread, or by the one
    building it already, which this one waits for (:data:`_BUILDING`). A build that fails keeps nothing, and the
    threads that waited for it raise its error: they asked at the same moment, and a try of their own each, one
    after another, made the last of n threads wait n busy timeouts for a file another process kept locked. Not
    when the builder's thread was interrupted (Ctrl-C): that is not their answer, and they try again.

    However the builder's call ends (an interrupt anywhere, even as it closes an old engine to make room), its
    ``finally`` ends the build: waiters were left waiting for ever when an interrupt landed between two steps."""
    key = normalise_url(url)
    while True:
        building: Future[None] | None = None
        try:
            with _LOCK:
                engine = _current(key)
                if engine is not None:
                    _ENGINES.move_to_end(key)
                    _HANDED[threading.current_thread()] = (key, engine)
                    return engine
                waited = _BUILDING.get(key)
                if waited is None:
                    building = _BUILDING[key] = Future()
            if building is None:
                _wait_for(waited)  # another thread's build: its error, or the engine it kept (asked for again)
                continue
            return _keep(key, *_build(key, min_free_disk))
        except Exception as exc:
            if building is not None:  # the database's answer: the waiters' own tries would only wait for it again
                building.set_exception(exc)
            raise
        finally:
            if building is not None:
                with _LOCK:
                    if _BUILDING.get(key) is building:
                        del _BUILDING[key]
                if not building.done():  # kept (the waiters take it), or interrupted (they try again)
                    building.set_result(None)


def _wait_for(building: Future[None] | None) -> None:
    """Until another thread's build ends; its error raised here as this thread's own: a copy (its arguments and
    attributes), not the builder's object, whose traceback every waiter's raise would add its frames to."""
    if building is None:
        return
    try:
        building.result()
    except Exception as exc:
        try:
            own = copy.copy(exc)
        except Exception:  # an exception that cannot be made again from its arguments
            raise exc from None
        raise own from exc


def _keep(key: str, engine: sa.Engine, file: StoreFile | None) -> sa.Engine:
    """``engine``, just built, kept for ``key`` (and its SQLite file watched), room made for it: never by closing
    it, handed to this thread first (:data:`_HANDED`)."""
    _used_once_checked_out(engine)
    with _LOCK:
        _ENGINES[key] = engine
        _HANDED[threading.current_thread()] = (key, engine)
        if file is not None:
            _FILES[key] = file
            checkpoints_opened(file.path)
        _make_room()
    return engine


def _used_once_checked_out(engine: sa.Engine) -> None:
    """A connection of ``engine`` checked out by a thread it was handed to ends that thread's :data:`_HANDED`
    entry: the pool counts the engine as in use from then on (:func:`_make_room`), and once the connection is
    back the engine may be closed to make room again, as any idle one."""
    @sa.event.listens_for(engine.pool, "checkout")
    def on_checkout(*_: Any) -> None:
        thread = threading.current_thread()
        handed = _HANDED.get(thread)
        if handed is not None and handed[1] is engine:
            del _HANDED[thread]


def _build(key: str, min_free_disk: int | None) -> tuple[sa.Engine, StoreFile | None]:
    """A new engine for ``key``, with its catalog created and checked, and the SQLite file it opened (not kept
    yet: :func:`_shared_engine` does). Disposed of if the catalog cannot be made: the next call tries again
    (the server may be back)."""
    parsed = make_url(key)
    file = None
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database if parsed.database and parsed.database != ":memory:" else None
        if path and not path.startswith("file:"):
            # the file as the process finds it now, for good: a relative path (sqlite:///my.db) read again
            # after a chdir (a notebook's %cd) would name another file, and the check of the file at the path
            # (:mod:`.store_file`) would take it for the store's file replaced
            path = host_path(os.path.abspath(path))  # Python's form for its own calls (:mod:`.sqlite_names`)
            parsed = parsed.set(database=sqlite_name(path))
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            make_database_file(path)  # with the umask's mode, which its -wal and -shm take (not SQLite's 0o644)
        engine = sa.create_engine(parsed, connect_args={"timeout": 60, "check_same_thread": False,
                                                        "factory": InterruptibleConnection})
        if path:  # its checks first: a transaction on a file gone stops before it waits for a lock
            file = watch(engine, path, functools.partial(_forget, key, engine), is_writing)
        _setup_sqlite(engine, path)
        open_by_host_path(engine)
        if path:  # a full disk, reads and connects included, named with its folder (:mod:`.sqlite_faults`)
            name_sqlite_faults(engine, path)
    else:  # the store's COPY bytes are UTF-8 whatever the database's encoding: the server converts
        from connector_ops.resources.virtual_files import db_errors
        from connector_ops.resources.virtual_files.pg_cancel import cancel_on_interrupt

        engine = sa.create_engine(key, pool_pre_ping=True, poolclass=db_errors.StorePool,
                                  **pool_settings(), connect_args={"client_encoding": "utf8"})
        cancel_on_interrupt(engine)
        db_errors.install(engine, functools.partial(_forget, key, engine))
        _check_client(engine)
    try:
        _create_catalog(engine if min_free_disk is None else with_floor(engine, min_free_disk))
    except BaseException:
        engine.dispose()
        raise
    _check_stamp_on_write(engine)
    return engine, file


def _make_room() -> None:
    """Close the least recently asked-for engines while more than :data:`KEPT_ENGINES` are kept (under
    :data:`_LOCK`). Never one with a connection checked out (a transaction, an open cursor) or one an open
    ``Session`` holds (its close disposes of it, :mod:`.engine_holds`): the count then stays above the bound
    until an engine is made after they are done. Nor a SQLite database without a file of its own (in memory,
    a ``file:`` URI): its rows live in its connections. Nor an engine handed to a thread that has not used it
    yet (:data:`_HANDED`), the one just made among them: its caller is about to use it, and with every other
    engine in use it was the only one left to close. An action asks for its engine at every transaction,
    which keeps it among the most recent; one closed between two of them gets a new engine at the next, as a
    fresh process would."""
    handed = _HANDED.copy()  # a copy: a thread's checkout ends its own entry outside the lock
    for thread in [thread for thread in handed if not thread.is_alive()]:  # no longer its own to change
        del handed[thread], _HANDED[thread]
    excess = len(_ENGINES) - KEPT_ENGINES
    if excess <= 0:
        return
    spared = engine_holds.held(normalise_url) | {key for key, engine in handed.values() if _ENGINES.get(key) is engine}
    for key, engine in list(_ENGINES.items()):
        if excess <= 0:
            break
        on_file = key in _FILES or engine.dialect.name != "sqlite"
        if not on_file or key in spared or engine.pool.checkedout() > 0:  # type: ignore[attr-defined]  # a StorePool's
            continue
        _drop(key)
        excess -= 1


def store_file(url: str) -> StoreFile | None:
    """The SQLite file the engine of ``url`` opened (``None``: PostgreSQL, in memory, or no engine yet)."""
    return _FILES.get(normalise_url(url))


def _current(key: str) -> sa.Engine | None:
    """The engine kept for ``key``, unless its SQLite file has been deleted or replaced since it opened it:
    that engine is forgotten (the caller builds one on the file now at the path). Under :data:`_LOCK`."""
    file = _FILES.get(key)
    if file is not None and file.moved():
        _drop(key)
        return None
    return _ENGINES.get(key)


def _drop(key: str) -> str | None:
    """Forget and close the engine of ``key`` (under :data:`_LOCK`). Connections checked out of it are closed
    as they come back; their transactions fail at their next begin or commit (:mod:`.store_file`). The SQLite
    file's checkpoint connection is closed by the checkpoint thread, a moment later (:func:`.checkpoints.forget`):
    the file's path, for a caller to wait for it (:func:`dispose`)."""
    engine = _ENGINES.pop(key, None)
    file = _FILES.pop(key, None)
    if engine is not None:
        engine.dispose()
    if file is None:
        return None
    forget_checkpoints(file.path)
    return file.path


def _forget(key: str, engine: sa.Engine) -> None:
    """Drop ``engine`` if it is still the one kept for ``key`` (another thread may have rebuilt it already):
    its SQLite file changed, or its PostgreSQL database lost the catalog (:mod:`.db_errors`). The next
    :func:`get_engine` builds one anew and creates the catalog, as a fresh process would."""
    with _LOCK:
        if _ENGINES.get(key) is engine:
            _drop(key)


def catalog_exists(url: str) -> bool:
    """Whether the database at ``url`` holds the store's catalog, found without creating anything.

    :func:`get_engine` creates the catalog (and a SQLite file, and its folders) on first use: right for a
    write, wrong for a command that only looks — ``gc --dry-run`` on a new home or a new PostgreSQL database
    must find nothing to collect and leave the database as it was. A missing SQLite file, or a database
    without the catalog's first table, has never stored anything. An engine already made means the catalog
    exists; a PostgreSQL server's refusals are translated as the store's (:mod:`.db_errors`)."""
    key = normalise_url(url)
    with _LOCK:
        if _current(key) is not None:
            return True
    with _probe(key) as conn:
        return conn is not None and sa.inspect(conn).has_table(virtual_file.name)


def same_database(url: str, other: str) -> bool:
    """Whether two URLs name one database however they are spelled (``postgresql://`` or with psycopg,
    ``localhost`` or ``127.0.0.1``, a password left out, a socket or a port; a SQLite file by two paths), asked
    of the databases themselves and without creating anything: ``store copy`` from a store into itself copied
    every file again on each run. PostgreSQL: the same server (the start of its postmaster, to the
    microsecond) and the same database in it (its oid); SQLite: the same file (device and inode)."""
    return (identity := _identity(normalise_url(url))) is not None and identity == _identity(normalise_url(other))


def _identity(key: str) -> tuple[Any, ...] | None:
    if make_url(key).get_backend_name() == "sqlite":
        path = sqlite_path(key)
        if path is None:
            return None  # in memory: a database of its own in every connection
        try:
            found = Path(path).expanduser().stat()
        except FileNotFoundError:
            return ("sqlite", str(Path(path).expanduser().resolve()))  # not made yet: by its path
        return ("sqlite", found.st_dev, found.st_ino)
    with _probe(key) as conn:
        assert conn is not None
        row = conn.exec_driver_sql("SELECT pg_postmaster_start_time(), oid FROM pg_database "
                                   "WHERE datname = current_database()").one()
        return ("postgresql", *row)


@contextlib.contextmanager
def _probe(key: str) -> Iterator[sa.Connection | None]:
    """A connection of its own to the database of ``key`` (no pool, nothing created), or ``None`` for a SQLite
    file that does not exist or a database in memory (new in every process)."""
    if make_url(key).get_backend_name() == "sqlite":
        path = sqlite_path(key)
        if path is None or not Path(path).expanduser().is_file():
            yield None
            return
        probe = sa.create_engine(key, poolclass=sa.pool.NullPool, connect_args={"timeout": 60})
        open_by_host_path(probe)
    else:
        from connector_ops.resources.virtual_files import db_errors

        probe = sa.create_engine(key, poolclass=sa.pool.NullPool, connect_args={"client_encoding": "utf8"})
        db_errors.install(probe)
    try:
        with probe.connect() as conn:
            yield conn
    finally:
        probe.dispose()


def _check_client(engine: sa.Engine) -> None:
    """Each session asks the server to check every :data:`CLIENT_CHECK_MS` while a statement runs that we are
    still connected. A server notices a vanished client (a worker killed mid-step, a host lost) only when it
    next sends to it, and a Join's ``CREATE TABLE … AS`` sends nothing until it ends: it ran on for minutes,
    holding its locks, for a transaction that could only roll back. PostgreSQL 14 or later; a server that
    cannot check on its platform (it checks on Linux) refuses the setting, and goes on without it."""
    import psycopg

    @sa.event.listens_for(engine, "connect")
    def connect(dbapi_conn: Any, _record: Any) -> None:
        if dbapi_conn.info.server_version < 140000:
            return
        try:
            dbapi_conn.execute(f"SET client_connection_check_interval = {CLIENT_CHECK_MS}")
            dbapi_conn.commit()
        except psycopg.Error:
            dbapi_conn.rollback()


def _check_stamp_on_write(engine: sa.Engine) -> None:
    """A write transaction first reads the layout stamp (:func:`.layout.check_unchanged`) when this process last
    read it :data:`.layout.RECHECK_SECONDS` ago or more: a process keeps its engine for its life, and a newer
    release may raise the layout meanwhile. Not at every write: an Iterate is a write transaction per batch, and
    a round trip more each (≈ 0.15 ms on PostgreSQL) was most of a batch's cost; the release that raises the
    layout waits that long after stamping (:mod:`.layout`). Registered once the catalog (and the stamp) exist;
    on SQLite after the listener that issues ``BEGIN IMMEDIATE``, so the read is inside the locked
    transaction."""
    shown = mask_url(engine.url.render_as_string(hide_password=False))
    last_read = [float("-inf")]  # monotonic time of this engine's last read of an unchanged stamp

    @sa.event.listens_for(engine, "begin")
    def on_begin(conn: sa.Connection) -> None:
        if is_writing(conn) and time.monotonic() - last_read[0] >= RECHECK_SECONDS:
            check_unchanged(conn, shown)
            last_read[0] = time.monotonic()


def _create_catalog(engine: sa.Engine, attempts: int = 3) -> None:
    """Create the catalog tables if missing, and check the store's layout stamp (:mod:`.layout`). Two
    processes starting together on a new PostgreSQL database can both see them missing; the loser's
    CREATE (or stamp) fails, and a retry then finds them. A privilege refused is said to be the catalog's:
    it is the first thing a new deployment's role is refused (``CREATE`` on ``public``, since PostgreSQL 15),
    and the message points to ``search_path``."""
    for attempt in range(attempts):
        try:  # without waiting for a checkpoint of a SQLite file (of an engine closed a moment ago): the check
            # mostly writes nothing, and a write that does only appends to a log not yet started over
            with engine.execution_options(**WRITE, **_UNSETTLED).begin() as conn:
                metadata.create_all(conn, checkfirst=True)
                check_stamp(conn, mask_url(engine.url.render_as_string(hide_password=False)))
            return
        except DatabaseRefused as exc:
            raise DatabaseRefused(f"the store's catalog tables (cop_*) could not be created: {exc}",
                                  exc.sqlstate) from None
        except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.1 * (attempt + 1))


@in_child
def _after_fork() -> None:
    """In a forked child: every engine on a new, empty pool; the parent's pooled connections are kept
    referenced and unclosed (closing one here would end the parent's PostgreSQL session, or touch its SQLite
    file's locks), and the lock, which a parent's thread may have held at the fork, made anew. The builds under
    way in the parent's other threads are not the child's: nothing would end them here, and a thread asking for
    one of those stores waits for none but builds its own."""
    global _LOCK
    _LOCK = threading.RLock()
    _BUILDING.clear()
    for engine in _ENGINES.values():
        abandon(engine.pool)
        engine.dispose(close=False)


def dispose(url: str) -> bool:
    """Dispose of the engine of ``url`` and forget it, if there is one (:mod:`.engine_holds`: its last scoped
    holder closed); a later :func:`get_engine` makes another. Returns once a SQLite file's connections are all
    closed, its checkpoint connection too (the last to close copies the log into the file and deletes it), as a
    ``with Session()`` block's end promises; waited for outside :data:`_LOCK`. A build of it under way in
    another thread is waited for first, and what it kept disposed of: left to keep its engine after this call,
    it had the file open again once this had said it was let go of. Whether the file was let go of within
    :data:`.checkpoints.SETTLE_SECONDS` (if not, a warning says so: :func:`.checkpoints.closed`)."""
    key = normalise_url(url)
    _builds_ended([key])
    with _LOCK:
        path = _drop(key)
    return path is None or checkpoints_closed(path)


def dispose_all() -> bool:
    """Dispose of every engine of the process, as :func:`dispose` does (the end of a test session, a test that
    needs the engines made anew), the builds under way first: their SQLite files waited for together, until one
    deadline, not in turn."""
    _builds_ended(None)
    with _LOCK:
        paths = [path for key in list(_ENGINES) if (path := _drop(key)) is not None]
    return checkpoints_closed(*paths)


def _builds_ended(keys: list[str] | None) -> None:
    """Until the builds under way of ``keys`` (``None``: every store) have ended, however (a build's error is its
    asker's to raise, not a dispose's)."""
    with _LOCK:
        builds = [build for key, build in _BUILDING.items() if keys is None or key in keys]
    for build in builds:
        with contextlib.suppress(Exception):
            build.result()
