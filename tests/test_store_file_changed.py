"""A store's database changed under a live process (resources/virtual_files/store_file.py, db_errors.py).

SQLite: the file deleted or replaced (a backup restored, the home removed, a volume swapped) while the
process's pooled connections keep the old one open. Every write of that process went on "succeeding" into
the unlinked file, lost for every other process. Now the next call opens the file at the path (a new store
there, as a fresh process would make it), and a transaction already under way on the old file fails with a
503 naming the file — a write before its commit, through the process's own connections or its loader
process. PostgreSQL: the database re-created (or the cop_* tables dropped) made every call a raw 500 until
the process restarted; now the call says what happened and the next one creates the catalog again.

Real SQLite files, real loader processes, a real PostgreSQL database of the test's own.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from connector_ops.environment import resources_for
from connector_ops.kernel.errors import NotFound
from connector_ops.resources.virtual_files.checkpoints import close_all as close_checkpoint_connections
from connector_ops.resources.virtual_files.db_errors import CatalogMissing
from connector_ops.resources.virtual_files.engines import WRITE, dispose_all, get_engine
from connector_ops.resources.virtual_files.log_on_close import keep_log_on_close
from connector_ops.resources.virtual_files.store import VirtualFileStore
from connector_ops.resources.virtual_files.store_file import StoreFileChanged

COLUMNS = ["id", "name"]


def csv_rows(n: int, start: int = 0) -> bytes:
    return b"".join(b"%d,name-%d\n" % (i, i) for i in range(start, start + n))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "vf.db"


@pytest.fixture
def store(db: Path):
    store = VirtualFileStore(database_url=f"sqlite:///{db}")
    yield store
    store.close()


def remove(db: Path) -> None:
    """``rm vf.db*``, as an operator starting over would."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def on_disk(db: Path) -> list[str]:
    """The virtual files the file at ``db`` lists, read as another process would (the plain sqlite3 module)."""
    conn = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in conn.execute("SELECT id FROM cop_virtual_file"))
    finally:
        conn.close()


def other_store(path: Path) -> str:
    """A backup of another store, holding one file, written at ``path`` (SQLite's backup API); the file's id."""
    source = path.with_name(f"source-of-{path.name}")
    other = VirtualFileStore(database_url=f"sqlite:///{source}")
    try:
        vf = other.create_from_dicts([[{"z": "9"}]], (), "rows")
    finally:
        other.close()
    with sqlite3.connect(source) as src, sqlite3.connect(path) as dst:
        src.backup(dst)
    dst.close()
    src.close()
    return vf


def test_a_deleted_file_is_made_again_and_written_where_others_see_it(store, db):
    old = store.create_from_dicts([[{"a": "1"}]], (), "rows")
    remove(db)
    with pytest.raises(NotFound):  # the file at the path is a new, empty store: not the old one's rows
        store.summary(old)
    new = store.create_from_dicts([[{"c": "3"}]], (), "rows")
    assert store.summary(new, 1) == (1, ["c"], [{"c": "3"}])
    assert on_disk(db) == [new]  # written into the file at the path, not the removed one


def test_a_replaced_file_is_used(store, db, tmp_path):
    store.create_from_dicts([[{"a": "1"}]], (), "rows")
    restored = other_store(tmp_path / "backup.db")
    remove(db)
    os.replace(tmp_path / "backup.db", db)
    assert store.summary(restored, 1) == (1, ["z"], [{"z": "9"}])
    new = store.create_from_dicts([[{"c": "3"}]], (), "rows")
    assert on_disk(db) == sorted([restored, new])


def test_a_transaction_on_an_engine_taken_before_the_swap_fails_before_it_begins(store, db):
    store.create_from_dicts([[{"a": "1"}]], (), "rows")
    engine = get_engine(store.database_url)  # held, as a caller between two statements holds it
    remove(db)
    with pytest.raises(StoreFileChanged) as info, engine.begin() as conn:
        conn.exec_driver_sql("SELECT 1")
    assert info.value.status == 503 and info.value.retryable
    assert str(info.value).startswith(f"the virtual-file store's SQLite file {db} was deleted, replaced or moved")
    assert "nothing was read from or written to it by this call" in str(info.value)
    assert get_engine(store.database_url) is not engine  # the next call: the file now at the path
    assert on_disk(db) == []


def test_a_write_under_way_when_the_file_goes_is_not_reported_stored(store, db):
    first = store.create_from_dicts([[{"a": "1"}]], (), "rows")
    with pytest.raises(StoreFileChanged, match="this write was rolled back before its commit"), \
            store.sql.writing() as conn:
        conn.execute(sa.text("DELETE FROM cop_virtual_file"))  # a write under way …
        remove(db)  # … when the file is removed
    restored = other_store(db)  # a store put back at the path: this process now uses it
    assert store.summary(restored, 1)[0] == 1
    with pytest.raises(NotFound):
        store.summary(first)


def test_a_write_on_a_replaced_file_is_rolled_back(store, db, tmp_path):
    store.create_from_dicts([[{"a": "1"}]], (), "rows")
    restored = other_store(tmp_path / "backup.db")
    with pytest.raises(StoreFileChanged), store.sql.engine.execution_options(**WRITE).begin() as conn:
        conn.exec_driver_sql("CREATE TABLE lost (x)")
        remove(db)  # a backup restored: the old file's log goes with it
        os.replace(tmp_path / "backup.db", db)
    assert on_disk(db) == [restored]
    assert store.summary(restored, 1)[0] == 1


class Swapping(io.RawIOBase):
    """``first``, then ``swap()`` (the file removed mid-load), then ``rest``."""

    def __init__(self, first: bytes, swap, rest: bytes) -> None:
        self._parts, self._swap = [first, rest], swap

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._parts and not self._parts[0]:
            self._parts.pop(0)
            if self._swap is not None:
                self._swap()
                self._swap = None
        if not self._parts:
            return 0
        chunk = self._parts[0][:len(buffer)]
        buffer[:len(chunk)] = chunk
        self._parts[0] = self._parts[0][len(chunk):]
        return len(chunk)


def test_the_loader_process_does_not_commit_into_a_file_removed_mid_load(store, db):
    store.create_from_csv(COLUMNS, io.BytesIO(csv_rows(10)), ",")  # through the loader process
    with pytest.raises(StoreFileChanged, match="this write was rolled back before its commit"):
        store.create_from_csv(COLUMNS, Swapping(csv_rows(100_000), lambda: remove(db), csv_rows(10)), ",")
    vf = store.create_from_csv(COLUMNS, io.BytesIO(csv_rows(7)), ",")  # the loader, on the file now there
    assert store.summary(vf, 0)[0] == 7
    assert on_disk(db) == [vf]


def recreate_database(url: str) -> None:
    """``DROP DATABASE`` and ``CREATE DATABASE`` of the same name, as a reset or a restore into a new one does."""
    parsed = make_url(url)
    admin = parsed.set(drivername="postgresql", database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{parsed.database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{parsed.database}"')


def drop_catalog(url: str) -> None:
    """The store's cop_* tables dropped (the row tables left)."""
    with psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'cop%'")]
        conn.execute(f"DROP TABLE {', '.join(names)} CASCADE")


@pytest.mark.parametrize("own_database_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize("lose_catalog", [recreate_database, drop_catalog])
def test_a_postgresql_store_that_lost_its_catalog_gets_it_again(own_database_url, lose_catalog):
    store = VirtualFileStore(database_url=own_database_url)
    try:
        old = store.create_from_dicts([[{"a": "1"}]], (), "rows")
        lose_catalog(own_database_url)
        with pytest.raises(CatalogMissing) as info:
            store.summary(old)
        assert info.value.status == 503 and info.value.retryable
        assert str(info.value).startswith("the virtual-file store's catalog table cop_")
        assert "was the database dropped or re-created, or the store's tables (cop_*) dropped" in str(info.value)
        assert "the next call creates the catalog again" in str(info.value)
        with pytest.raises(NotFound):  # the next call: the catalog made again, empty
            store.summary(old)
        new = store.create_from_dicts([[{"c": "3"}]], (), "rows")
        assert store.summary(new, 1) == (1, ["c"], [{"c": "3"}])
    finally:
        store.close()


def test_platform_files_in_a_database_follow_the_file_at_the_path(db, tmp_path):
    """``CONNECTOR_OPS_FILES_BACKEND=database`` keeps its storage for the process's life: it asks for the
    engine at each use, so it too writes into the file now at the path."""
    environ = {"CONNECTOR_OPS_HOME": str(tmp_path / "home"), "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{db}",
               "CONNECTOR_OPS_FILES_BACKEND": "database"}
    files = resources_for(["platform_files"], environ)["platform_files"]
    files.add_bytes(b"old", "old.txt")
    remove(db)
    pf = files.add_bytes(b"new", "new.txt")
    assert files.read_bytes(pf.to_json()) == b"new"
    with sqlite3.connect(db) as conn:
        assert [r[0] for r in conn.execute("SELECT id FROM cop_platform_file")] == [pf.id]
    conn.close()


def test_a_relative_sqlite_url_keeps_its_file_after_a_change_of_directory(tmp_path, monkeypatch):
    """``sqlite:///vf.db`` and then a ``%cd``: the store goes on with the file it found, not a new empty one in
    the new directory (the check of the file at the path read the relative path against the new directory,
    and took the store's file for one removed). Through the store, and through an engine asked for by the
    relative URL itself."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    store = VirtualFileStore(database_url="sqlite:///vf.db")
    assert store.database_url == f"sqlite:///{first / 'vf.db'}"
    vf_id = store.sql.create_from_dicts([[{"x": "1"}]])
    engine = get_engine("sqlite:///raw.db")
    monkeypatch.chdir(second)
    assert [v for v, _ in store.sql.inventory()] == [vf_id]
    assert get_engine("sqlite:///raw.db") is engine
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA database_list").all()[0][2] == str(first / "raw.db")
    assert os.listdir(second) == []


def backup_of(db: Path, path: Path) -> None:
    """``path``: a backup of the live store at ``db`` (SQLite's backup API, as ``sqlite3 db ".backup path"``)."""
    src, dst = sqlite3.connect(db), sqlite3.connect(path)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def copy_over(backup: Path, db: Path) -> None:
    """``cp backup db; rm db-wal db-shm``: the backup written into the live file's own inode."""
    inode = db.stat().st_ino
    with open(backup, "rb") as src, open(db, "r+b") as dst:  # as cp does: the same file, truncated
        dst.truncate(0)
        dst.write(src.read())
    assert db.stat().st_ino == inode
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink()


def pushed_by_another_process(db: Path) -> str:
    """A virtual file pushed into the store at ``db`` by another (new) process; its id."""
    code = ("import sys; from connector_ops.resources.virtual_files.store import VirtualFileStore\n"
            "s = VirtualFileStore(database_url='sqlite:///' + sys.argv[1])\n"
            "print(s.create_from_dicts([[{'n': 'd'}]], (), 'rows')); s.close()")
    return subprocess.run([sys.executable, "-c", code, str(db)], check=True, capture_output=True,
                          text=True).stdout.strip()


def live_process_ends() -> None:
    """This process lets go of the store as a process ending does: every connection closed."""
    dispose_all()
    close_checkpoint_connections()


def test_a_backup_copied_over_the_live_file_is_used_and_never_undone(store, db, tmp_path):
    """``cp backup.db vf.db`` and the log removed, while this process has the store open: the inode is the
    same, so only the log shows it. Before, this process went on with the old log (b still found, c pushed
    where no other process saw it) and, as it closed, copied that log back into the restored file: the
    restore undone, and d, pushed by another process after it, lost."""
    a = store.create_from_dicts([[{"n": "a"}]], (), "rows")
    backup_of(db, tmp_path / "backup.db")
    b = store.create_from_dicts([[{"n": "b"}]], (), "rows")  # after the backup: the restore drops it
    copy_over(tmp_path / "backup.db", db)
    with pytest.raises(StoreFileChanged) as info:  # its pooled connection had the removed log open: a 503
        store.summary(b)
    assert info.value.status == 503 and info.value.retryable
    with pytest.raises(NotFound):  # the next call is on the restored file
        store.summary(b)
    assert store.summary(a, 1)[2] == [{"n": "a"}]
    d = pushed_by_another_process(db)
    c = store.create_from_dicts([[{"n": "c"}]], (), "rows")
    assert on_disk(db) == sorted([a, c, d])  # c where every process sees it
    live_process_ends()
    assert on_disk(db) == sorted([a, c, d])  # nothing undone as it closed
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()


def test_a_transaction_on_an_engine_taken_before_a_copy_over_fails_and_its_log_is_not_applied(store, db, tmp_path):
    """A transaction already under way as the backup is copied over: a 503 before it reads anything, its
    connection closed without copying its old log (which holds b) into the restored file."""
    a = store.create_from_dicts([[{"n": "a"}]], (), "rows")
    backup_of(db, tmp_path / "backup.db")
    engine = get_engine(store.database_url)  # held, as a caller between two statements holds it
    b = store.create_from_dicts([[{"n": "b"}]], (), "rows")
    copy_over(tmp_path / "backup.db", db)
    with pytest.raises(StoreFileChanged) as info, engine.begin() as conn:
        conn.exec_driver_sql("SELECT 1")
    assert info.value.status == 503 and info.value.retryable
    assert str(info.value).startswith(f"the virtual-file store's SQLite file {db} was deleted, replaced or moved")
    assert on_disk(db) == [a]  # not b: the old log stayed out of the restored file
    assert get_engine(store.database_url) is not engine
    with pytest.raises(NotFound):
        store.summary(b)
    live_process_ends()
    assert on_disk(db) == [a]


def test_a_connection_is_really_kept_from_copying_its_log_back(tmp_path):
    """On the Pythons the tests run (3.11 through ctypes, 3.12+ by ``setconfig``) the flag is set, not turned
    off silently: the connection closes without its checkpoint, so its log is still there after it."""
    path = tmp_path / "kept.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (a)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    assert keep_log_on_close(conn, str(path))
    conn.close()
    assert (tmp_path / "kept.db-wal").stat().st_size > 0  # a closing checkpoint would have applied and removed it
