"""CONNECTOR_OPS_MIN_FREE_DISK: every writer on this host stops before the disk's free space falls below the
floor, with a 500 naming the folder, the free space and the setting, and leaves nothing behind.

Real SQLite files, real folders, the real disk: the floors are set relative to the free space measured just
before, with margins other tests writing to the same disk (``pytest -n 2``) cannot close: far above it
(free + 1 TiB) to be refused up front, and a bomb that would grow the database by ≈ 0.9 GiB against a floor
64 MiB below the free space to be stopped mid-way. Either way the assertions hold: if another test took the
64 MiB first, the Push is refused before it starts, with the same message and the same nothing left.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from connector_ops import ConnectorError, invoke
from connector_ops.environment import resources_for
from connector_ops.kernel.disk import MIN_FREE_DISK_VARIABLE, parse_size
from connector_ops.resources.virtual_files import catalog as cat
from connector_ops.resources.virtual_files import sqlite_loader
from tests.servers import another_file_server

#: the floor guards this host's disk: SQLite's (PostgreSQL's server refuses by itself)
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def free_bytes(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A TMPDIR of the test's own, to see that a refused writer leaves no temporary file there."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def refused(name: str, payload: dict[str, Any]) -> str:
    with pytest.raises(ConnectorError) as caught:
        invoke(name, payload)
    assert caught.value.status == 500
    return caught.value.message


def assert_worded(message: str, folder: Path) -> None:
    assert f"not enough free disk space in {folder}: " in message
    assert f"below {MIN_FREE_DISK_VARIABLE}=" in message
    assert "nothing was written" in message


def virtual_files(env: dict[str, str]) -> int:
    store = resources_for(["virtual_files"], env)["virtual_files"]
    with store.sql.reading() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(cat.virtual_file)).scalar_one()


def far_above(folder: Path) -> str:
    return str(free_bytes(folder) + (1 << 40))


@sqlite_only
def test_a_push_a_pull_export_and_a_platform_file_are_refused_up_front(env, tmp_path, temp_dir, monkeypatch):
    files = resources_for(["platform_files"], env)["platform_files"]
    pf = files.add_bytes(b"a,b\n1,2\n3,4\n", "rows.csv", "text/csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
    home, files_dir = database_file(env).parent, Path(files.files_dir)
    listing = sorted(os.listdir(files_dir))

    floor = far_above(tmp_path)
    monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, floor)
    assert_worded(refused("etl.push", {"platformFile": pf}), home)
    assert virtual_files(env) == 1
    assert_worded(refused("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "out.csv"}),
                  files_dir)
    assert_worded(refused("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"a": "5", "b": "6"}}]}),
                  home)
    with pytest.raises(Exception, match="not enough free disk space") as caught:
        resources_for(["platform_files"])["platform_files"].add_bytes(b"x" * 100, "x.bin")
    assert caught.value.status == 500

    drive = resources_for(["drive"])["drive"]
    with pytest.raises(Exception, match="not enough free disk space") as caught:
        drive.upload(io.BytesIO(b"x" * 100), "x.txt", "text/plain", 100, None)
    assert caught.value.status == 500
    assert drive.list_folder(None) == []
    assert [p.name for p in Path(drive.drive_dir).rglob("*") if p.is_file() and ".tmp-" in p.name] == []

    assert sorted(os.listdir(files_dir)) == listing  # no data, no descriptor, no temporary file
    assert os.listdir(temp_dir) == []
    monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, "0")
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 10})["content"] == [
        {"a": "1", "b": "2"}, {"a": "3", "b": "4"}]  # the file as it was: nothing appended


@sqlite_only
def test_a_link_spooled_to_tmpdir_is_refused_before_it_is_fetched(env, tmp_path, temp_dir, monkeypatch):
    """A link of another server is kept in TMPDIR as it is read (:mod:`…kernel.replay`): checked there too."""
    with another_file_server(tmp_path / "remote", monkeypatch) as remote:
        pf = remote.add_bytes(b"a,b\n1,2\n", "rows.csv", "text/csv")
        monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, far_above(tmp_path))
        message = refused("etl.push", {"platformFile": {"name": pf.name, "link": pf.link,
                                                         "contentType": pf.content_type}})
    assert_worded(message, temp_dir)
    assert os.listdir(temp_dir) == []
    assert virtual_files(env) == 0


@sqlite_only
def test_a_mail_into_the_outbox_and_a_platform_file_into_the_database_are_refused(env, tmp_path, temp_dir,
                                                                                 monkeypatch):
    """The outbox (a message holds its attachments in base64) and the database backend's spool (in TMPDIR)
    wrote with no floor at all."""
    files = resources_for(["platform_files"], env)["platform_files"]
    attachment = files.add_bytes(b"x" * 1000, "report.txt", "text/plain").to_json()
    outbox = Path(resources_for(["mail"], env)["mail"].outbox_dir)
    monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, far_above(tmp_path))
    assert_worded(refused("mail.send_transactional_message", {
        "from": "Shop <noreply@example.com>", "recipients": [{"to": "alice@example.org", "type": "To"}],
        "subject": "Report", "templateId": 1, "templateVariables": "{}",
        "attachments": [{"platformFile": attachment}]}), outbox)
    assert not outbox.exists() or os.listdir(outbox) == []
    monkeypatch.setenv("CONNECTOR_OPS_FILES_BACKEND", "database")
    with pytest.raises(Exception, match="not enough free disk space") as caught:
        resources_for(["platform_files"])["platform_files"].add_bytes(b"x" * 100, "x.bin")
    assert caught.value.status == 500
    assert os.listdir(temp_dir) == []


def database_file(env: dict[str, str]) -> Path:
    return Path(resources_for(["virtual_files"], env)["virtual_files"].sqlite_file)


def log_and_file(database: Path) -> int:
    """The bytes of the database file and its write-ahead log."""
    return sum(p.stat().st_size for p in (database, database.with_name(f"{database.name}-wal")) if p.exists())


@sqlite_only
@pytest.mark.parametrize("path", ["row loader", "loader process"])
def test_a_gzip_bomb_stops_mid_way_and_leaves_the_database_as_it_was(env, tmp_path, temp_dir, monkeypatch, path):
    """A 0.5 MB gzip of 512 MiB of short rows (≈ 0.9 GiB of database) against a floor 64 MiB below the free
    space: stopped, rolled back, and the log's pages given back to the disk."""
    if path == "loader process":
        monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)
    else:
        monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 1 << 62)
        monkeypatch.setattr(sqlite_loader, "SQLITE_WARM_MIN_BYTES", 1 << 62)
    files = resources_for(["platform_files"], env)["platform_files"]
    member = gzip.compress(b"1,2\n" * (1 << 18))  # 1 MiB of rows in ≈ 1 KiB
    bomb = files.add_bytes(gzip.compress(b"a,b\n") + member * 512, "bomb.csv.gz", "application/gzip").to_json()
    invoke("etl.push", {"platformFile": files.add_bytes(b"a\n1\n", "one.csv").to_json()})
    database = database_file(env)
    before = log_and_file(database)

    monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, str(free_bytes(tmp_path) - (64 << 20)))
    assert_worded(refused("etl.push", {"platformFile": bomb}), database.parent)

    assert virtual_files(env) == 1  # the small file only
    assert log_and_file(database) <= before + (1 << 20)
    assert os.listdir(temp_dir) == []


@pytest.fixture
def quiet_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder on a disk other processes hardly write to, for a floor set a few MiB from its free space:
    ``/dev/shm`` (a tmpfs) when there is one with room, else ``tmp_path`` (on a disk shared with busy
    neighbours the test's retries may then be needed)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK) and free_bytes(shm) >= 1 << 30):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(dir=shm, prefix="connector-ops-test-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def settled(database: Path) -> None:
    """Until the checkpoints of the writes so far (this process's and its loader's) are done, and the log's
    file is cut down: the next write's log takes new space (a log file keeps its largest length, and a
    write reuses it)."""
    from connector_ops.resources.virtual_files import checkpoints

    sqlite_loader.loader_for(str(database)).sync()
    checkpoints.wait()
    checkpoints.checkpoint(str(database), "TRUNCATE")


@sqlite_only
@pytest.mark.parametrize("path", ["row loader", "loader process"])
def test_the_floor_keeps_room_for_the_checkpoint_after_the_write(env, quiet_folder, temp_dir, monkeypatch, path):
    """The floor counted only the write-ahead log a write grows; once it committed, the checkpoint copied the
    log into the database file and took as much again: a Push the floor let through (8 MiB floor, 64 MiB disk)
    left 0 bytes free, and no write, not even a Clean, could run after it. Here a Push whose log alone fits
    above the floor (by a third of it) but whose log and checkpoint do not is refused before its commit, and
    leaves nothing; with room for both it goes through."""
    if path == "loader process":
        monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)
    else:
        monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 1 << 62)
        monkeypatch.setattr(sqlite_loader, "SQLITE_WARM_MIN_BYTES", 1 << 62)
    env = {**env, "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{quiet_folder / 'vf.db'}"}
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_URL", env["CONNECTOR_OPS_DATABASE_URL"])
    files = resources_for(["platform_files"], env)["platform_files"]
    rows = gzip.compress(b"a,b\n" + (b"1," + b"x" * 120 + b"\n") * 400_000)  # ≈ 50 MiB of log, then of file
    pf = files.add_bytes(rows, "rows.csv.gz", "application/gzip").to_json()
    invoke("etl.push", {"platformFile": files.add_bytes(b"a\n1\n", "one.csv").to_json()})
    database = database_file(env)
    start = free_bytes(quiet_folder)

    monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, str(start - (512 << 20)))  # room for both, and to spare
    invoke("etl.push", {"platformFile": pf})
    log = database.with_name(f"{database.name}-wal").stat().st_size
    assert log > 40 << 20  # the size of what follows
    settled(database)
    before = log_and_file(database)

    # a floor below the free space by 1.5 logs: the log alone fits, log and checkpoint do not. Other
    # processes writing to this disk meanwhile can make it a refusal of the floor alone, or, freeing space,
    # let it through: a few tries, until the refusal that counts the checkpoint is seen
    for _ in range(20):
        monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, str(free_bytes(quiet_folder) - log * 3 // 2))
        try:
            invoke("etl.push", {"platformFile": pf})
        except ConnectorError as exc:
            assert exc.status == 500
            assert_worded(exc.message, database.parent)
            if "the database's checkpoint needs" in exc.message:
                break
        settled(database)
    else:
        pytest.fail("never refused for the checkpoint's room")
    count = virtual_files(env)  # 2, unless the disk's noise let a try through
    settled(database)
    assert log_and_file(database) <= before + (count - 2) * log + (1 << 20)  # the log given back
    assert os.listdir(temp_dir) == []


@sqlite_only
def test_a_full_database_is_named_not_a_bare_database_error(env, tmp_path, monkeypatch):
    """SQLite's own "database or disk is full" (the floor off, or another process took the space) was a 500
    "database error: database or disk is full" (Clean: no message at all), naming neither the file nor the
    room. ``max_page_count`` stands in for the full disk: SQLite answers it with the same ``SQLITE_FULL``."""
    monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, "0")
    monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(sqlite_loader, "SQLITE_WARM_MIN_BYTES", 1 << 62)
    files = resources_for(["platform_files"], env)["platform_files"]
    vf = invoke("etl.push", {"platformFile": files.add_bytes(b"a\n1\n", "one.csv").to_json()})["virtualFileId"]
    big = files.add_bytes(b"a\n" + (b"x" * 100 + b"\n") * 50_000, "big.csv").to_json()
    database = database_file(env)
    engine = resources_for(["virtual_files"], env)["virtual_files"].sql.engine

    def capped(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute(f"PRAGMA max_page_count={dbapi_conn.execute('PRAGMA page_count').fetchone()[0] + 8}")

    sa.event.listen(engine, "connect", capped)
    engine.pool.dispose()
    try:
        message = refused("etl.push", {"platformFile": big})
    finally:
        sa.event.remove(engine, "connect", capped)
        engine.pool.dispose()
    assert message.startswith(f"no space left on the disk of {database.parent}: ")
    assert f"the database {database}, its log {database}-wal: " in message
    assert "the write was rolled back, nothing was written" in message
    assert "CONNECTOR_OPS_MIN_FREE_DISK=0 turns off the check" in message
    assert virtual_files(env) == 1
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 5})["content"] == [{"a": "1"}]


@sqlite_only
def test_reads_and_what_makes_room_go_on_below_the_floor(env, tmp_path, monkeypatch):
    """Iterate and Query write a little (a cursor's row, an index Query would build) but are reads: below the
    floor Iterate goes on and Query answers by a scan; Delete Rows and Clean free space, so they run."""
    files = resources_for(["platform_files"], env)["platform_files"]
    pf = files.add_bytes(b"a,b\n1,2\n3,4\n5,6\n", "rows.csv", "text/csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
    monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, far_above(tmp_path))
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 1}) == {"content": [{"a": "1", "b": "2"}],
                                                                         "hasNext": True}
    assert invoke("etl.iterate", {"content": [1, 2, 3], "maxBatchSize": 2}) == {"content": [1, 2], "hasNext": True}
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"a": "3"}}) == {"result": [{"a": "3", "b": "4"}]}
    assert invoke("etl.delete_rows", {"virtualFileId": vf, "request": {"a": "1"}}) == {"deletedCount": 1}
    assert invoke("etl.query", {"virtualFileId": vf, "query": {}})["result"] == [{"a": "3", "b": "4"},
                                                                                {"a": "5", "b": "6"}]
    assert invoke("etl.clean", {"virtualFileId": vf}) is None
    assert virtual_files(env) == 0


@sqlite_only
def test_the_first_write_to_a_store_in_a_folder_not_made_yet(env, tmp_path, monkeypatch):
    """The floor measured the store's folder before the store made it: the first Push to a SQLite URL in a
    new folder, and an Append Rows (even of no rows) on a new home, were a 500 ``FileNotFoundError``. A folder
    not made yet is measured on the disk it will be made on (its nearest existing parent); refused, the write
    leaves it unmade."""
    new = tmp_path / "new" / "deeper"
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_URL", f"sqlite:///{new / 'store.db'}")
    pf = resources_for(["platform_files"])["platform_files"].add_bytes(b"a,b\n1,2\n", "a.csv")
    monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, far_above(tmp_path))
    assert_worded(refused("etl.push", {"platformFile": pf.to_json()}), new)
    assert not (tmp_path / "new").exists()

    monkeypatch.delenv(MIN_FREE_DISK_VARIABLE)  # the default floor, far below this disk's free space
    vf = invoke("etl.push", {"platformFile": pf.to_json()})["virtualFileId"]
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 5})["content"] == [{"a": "1", "b": "2"}]
    assert (new / "store.db").is_file()

    monkeypatch.delenv("CONNECTOR_OPS_DATABASE_URL")
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path / "fresh"))
    assert invoke("etl.append_rows", {"rows": []}) == "ok"  # the documented no-op


@sqlite_only
def test_0_turns_the_check_off(env, tmp_path, monkeypatch):
    monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, "0")
    files = resources_for(["platform_files"])["platform_files"]
    pf = files.add_bytes(b"a\n1\n", "one.csv").to_json()
    assert invoke("etl.iterate", {"content": invoke("etl.push", {"platformFile": pf})["virtualFileId"],
                                  "maxBatchSize": 5})["content"] == [{"a": "1"}]


@pytest.mark.parametrize(("text", "size"), [("0", 0), ("1048576", 1 << 20), ("500MiB", 500 << 20),
                                            ("2GiB", 2 << 30), ("1.5 GB", 1_500_000_000), ("64kib", 64 << 10)])
def test_sizes(text, size):
    assert parse_size(text) == size


@sqlite_only
@pytest.mark.parametrize("value", ["lots", "-1", "1 PiB", "2 GiBs", "1e9"])
def test_a_bad_value_is_refused_naming_the_variable(env, tmp_path, monkeypatch, value):
    monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, value)
    files = resources_for(["platform_files"], {**env, MIN_FREE_DISK_VARIABLE: "0"})["platform_files"]
    pf = files.add_bytes(b"a\n1\n", "one.csv").to_json()
    with pytest.raises(ConnectorError) as caught:
        invoke("etl.push", {"platformFile": pf})
    assert caught.value.message.startswith(f"configuration error: {MIN_FREE_DISK_VARIABLE}: must be a size")
    assert virtual_files({**env, MIN_FREE_DISK_VARIABLE: "0"}) == 0


def test_a_full_temporary_folder_is_named_not_the_databases_roomy_disk(tmp_path: Path) -> None:
    """SQLite says "database or disk is full" when its temporary files fill their folder too (the sort of an
    index the store builds, gc's VACUUM copy): the message named the database's disk, with its gigabytes
    free, and said to free space there. When SQLite's temporary folder is on another disk, it is named with
    its free space. (A 2 MiB tmpfs as that folder, in a mount namespace of its own.)"""
    import subprocess
    import sys
    import textwrap

    small, db = tmp_path / "small_tmp", tmp_path / "db"
    small.mkdir()
    db.mkdir()
    build = textwrap.dedent(f"""
        from connector_ops.resources.virtual_files.store import VirtualFileStore
        store = VirtualFileStore(database_url="sqlite:///{db / 'vf.db'}")
        try:
            with store.sql.writing() as conn:
                conn.exec_driver_sql("CREATE TABLE t (x)")
                conn.exec_driver_sql("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) "
                                     "INSERT INTO t SELECT hex(randomblob(40)) FROM n")
                conn.exec_driver_sql("PRAGMA cache_size=-512")
                conn.exec_driver_sql("CREATE INDEX t_x ON t (x)")  # the sort spills to a temporary file
            print("no error")
        except Exception as exc:
            print(type(exc).__name__ + ":", exc)
    """)
    env = {**os.environ, "SQLITE_TMPDIR": str(small), "TMPDIR": str(small), MIN_FREE_DISK_VARIABLE: "0"}
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           f'mount -t tmpfs -o size=2m tmpfs {small} && exec "$0" -c "$1"', sys.executable, build],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said.startswith("DiskFull: no space left on the disk of"), said
    assert f"SQLite's temporary files (an index's sort, gc's VACUUM) go to {small}, another disk" in said, said
