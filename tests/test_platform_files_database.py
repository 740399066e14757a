"""Platform files in the database (``CONNECTOR_OPS_FILES_BACKEND=database``), on both databases: every host
reads and writes the same files; bytes stream a chunk at a time; a failed write leaves nothing."""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.environment import resources_for
from connector_ops.kernel.errors import NotFound
from connector_ops.resources.file_server import create_app
from connector_ops.resources.platform_files import PlatformFileStore
from connector_ops.resources.virtual_files.db_errors import DatabaseBusy
from tests.servers import acting_once_answering, free_port, serving
from tests.test_platform_files import check_verified_copy


@pytest.fixture
def hosts(env: dict[str, str], tmp_path: Path) -> tuple[PlatformFileStore, PlatformFileStore]:
    """Two hosts: the same database, each its own home (nothing shared on disk)."""
    made = []
    for name in ("host-a", "host-b"):
        environ = {**env, "CONNECTOR_OPS_FILES_BACKEND": "database", "CONNECTOR_OPS_HOME": str(tmp_path / name)}
        made.append(resources_for(["platform_files"], environ)["platform_files"])
    return made[0], made[1]


def test_what_one_host_writes_the_other_reads(hosts: Any, env: dict[str, str]) -> None:
    a, b = hosts
    assert a.files_database_url == env["CONNECTOR_OPS_DATABASE_URL"]
    data = os.urandom(2 * 1024 * 1024 + 333)  # three chunks, the last one short
    pf = a.add_bytes(data, "big.bin")
    assert b.read_bytes(pf.to_json()) == data
    assert b.describe(pf.id) == pf and pf.size == len(data)
    with b.open(pf.to_json()) as stream:
        assert stream.read(5) == data[:5]
    assert pf.id in {file_id for file_id, _ in b.inventory()}
    empty = b.add_bytes(b"", "empty.txt")
    assert a.read_bytes(empty.to_json()) == b""
    b.delete(pf.id)
    with pytest.raises(NotFound):
        a.describe(pf.id)
    assert not any(Path(a.files_dir).parent.rglob(pf.id))  # never on disk


def test_a_copy_is_verified_by_what_it_copied(hosts: Any, tmp_path: Path) -> None:
    check_verified_copy(hosts[0], tmp_path)


def test_a_failed_write_leaves_nothing(hosts: Any) -> None:
    a, b = hosts
    before = set(dict(a.inventory()))
    with pytest.raises(RuntimeError), a.create("partial.csv") as sink:
        sink.write(os.urandom(1024 * 1024 + 1))  # one chunk already sent to the database
        raise RuntimeError("boom")
    assert set(dict(b.inventory())) == before


def test_a_file_being_written_does_not_hold_other_writers_off(hosts: Any) -> None:
    """A file that arrives slowly (a Drive download) held SQLite's write lock from its first byte to its
    last, so every other writer of the database, another host's file or any Push, waited for it and failed
    after the 60 s busy timeout. Another host's whole write now commits while the slow one is still open."""
    a, b = hosts
    done: list[Any] = []
    with a.create("slow.bin") as sink:
        sink.write(os.urandom(1024 * 1024 + 1))
        other = threading.Thread(target=lambda: done.append(b.add_bytes(b"quick\n", "quick.txt")))
        other.start()
        other.join(timeout=10)
        assert done, "another host's write waited for the file still being written"
        sink.write(b"the end")
    assert b.read_bytes(sink.descriptor.to_json()).endswith(b"the end")
    assert a.read_bytes(done[0].to_json()) == b"quick\n"


def test_the_file_server_streams_from_the_database(hosts: Any) -> None:
    a, _ = hosts
    data = os.urandom(1024 * 1024 * 2 + 5)
    pf = a.add_bytes(data, "report.csv")
    port = free_port()
    with serving(create_app(a), port) as base:
        response = httpx.get(f"{base}/files/{pf.id}")
        assert response.status_code == 200 and response.content == data
        assert response.headers["content-length"] == str(len(data))
        assert response.headers["content-type"] == "text/csv"  # as stored
        head = httpx.head(f"{base}/files/{pf.id}")
        assert head.status_code == 200 and head.headers["content-length"] == str(len(data))
        assert httpx.get(f"{base}/files/{'0' * 32}").status_code == 404


def test_an_etl_round_trip_through_database_files(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from connector_ops import invoke

    monkeypatch.setenv("CONNECTOR_OPS_FILES_BACKEND", "database")
    pushed = invoke("etl.push", {"platformFile": resources_for(["platform_files"])["platform_files"]
                                 .add_bytes(b"a,b\n1,2\n3,4\n", "in.csv").to_json()})
    pulled = invoke("etl.pull", {"virtualFileId": pushed["virtualFileId"], "exportType": "json",
                                 "exportName": "out.json"})
    store = resources_for(["platform_files"])["platform_files"]
    assert store.files_database_url is not None
    assert json.loads(store.read_bytes(pulled["platformFile"])) == [{"a": "1", "b": "2"}, {"a": "3", "b": "4"}]


def test_an_unknown_files_backend_names_the_variable(env: dict[str, str]) -> None:
    from connector_ops.kernel.errors import InvalidInput

    with pytest.raises(InvalidInput) as caught:
        resources_for(["platform_files"], {**env, "CONNECTOR_OPS_FILES_BACKEND": "s3"})
    assert str(caught.value) == "CONNECTOR_OPS_FILES_BACKEND: must be one of local, database, got 's3'"


def test_the_stored_size_counts_not_the_declared_one(hosts: Any, env: dict[str, str]) -> None:
    """A caller's descriptor of one of our files may carry any ``size``: mail's limit, Drive's upload length
    and the load path are decided from the stored one, as on the folder backend."""
    a, b = hosts
    pf = a.add_bytes(b"x" * 100, "invoice.txt").to_json()
    wrong = {**pf, "size": 20_000_000}
    assert b.size_of(wrong) == 100
    with b.opener(wrong) as (_, size):
        assert size == 100
    mail = resources_for(["mail", "platform_files"], {**env, "CONNECTOR_OPS_FILES_BACKEND": "database",
                                                      "CONNECTOR_OPS_MAIL_BACKEND": "outbox"})
    message = {"from": "a@example.org", "recipients": [{"to": "b@example.org", "type": "To"}], "templateId": 1,
               "templateVariables": "{}", "attachments": [{"platformFile": wrong}]}
    assert invoke("mail.send_transactional_message", message, resources=mail) == {}  # not "over the limit"


def test_a_download_is_one_snapshot_a_delete_cannot_cut(hosts: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The delete commits after the headers are sent, before the first chunk is read: the download still
    arrives whole (it was "200", its Content-Length, and no byte, with a traceback in the server's log)."""
    a, b = hosts
    data = os.urandom(2 * 1024 * 1024 + 7)
    pf = a.add_bytes(data, "going.bin")
    with serving(acting_once_answering(create_app(a), lambda: b.delete(pf.id))) as base:
        response = httpx.get(f"{base}/files/{pf.id}")
        assert response.status_code == 200 and response.content == data
        assert httpx.get(f"{base}/files/{pf.id}").status_code == 404
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # PostgreSQL's pool and sessions
def test_stalled_downloads_hold_no_connection(hosts: Any) -> None:
    """20 clients that read 100 bytes and keep their socket: no session is left 'idle in transaction' (each
    held a pooled connection in its snapshot, and past 15 every other request waited 30 s for a 500)."""
    a, _ = hosts
    data = os.urandom(4 * 1024 * 1024 + 11)
    pf = a.add_bytes(data, "big.bin")
    engine = a._db.engine
    with serving(create_app(a)) as base:
        port = int(base.rsplit(":", 1)[1])
        stalled = []
        try:
            for _ in range(20):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(f"GET /files/{pf.id} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                assert sock.recv(100).startswith(b"HTTP/1.1 200")
                stalled.append(sock)
            with engine.connect() as conn:
                waiting = conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND state = 'idle in transaction'").scalar_one()
            assert waiting == 0
            response = httpx.get(f"{base}/files/{pf.id}", timeout=10)
            assert response.status_code == 200 and response.content == data
        finally:
            for sock in stalled:
                sock.close()


def test_a_pool_with_no_connection_free_is_a_503_naming_it(postgres_url: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection of the process's pool taken: a retryable 503 naming the pool and the settings that
    size it, not a 500 traceback. The sizes and the wait are the deployment's, read at the first connect."""
    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}application_name=pool_{uuid.uuid4().hex[:8]}"
    environ = {"CONNECTOR_OPS_HOME": str(tmp_path / "home"), "CONNECTOR_OPS_DATABASE_URL": url,
               "CONNECTOR_OPS_FILES_BACKEND": "database"}
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_POOL_SIZE", "2")
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_MAX_OVERFLOW", "1")
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_POOL_TIMEOUT", "1")  # SQLAlchemy's 30 s, shortened
    files = resources_for(["platform_files"], environ)["platform_files"]
    pf = files.add_bytes(b"hello", "a.txt")
    engine = files._db.engine
    assert (engine.pool.size(), engine.pool._max_overflow, engine.pool._timeout) == (2, 1, 1)
    held = [engine.connect() for _ in range(3)]
    try:
        with pytest.raises(DatabaseBusy) as info:
            files.describe(pf.id)
        assert info.value.status == 503 and info.value.retryable
        assert "within 1 s (CONNECTOR_OPS_DATABASE_POOL_TIMEOUT): all 2 pooled + 1 overflow connections " \
               "(CONNECTOR_OPS_DATABASE_POOL_SIZE, CONNECTOR_OPS_DATABASE_MAX_OVERFLOW) were in use" in str(info.value)
        with serving(create_app(files)) as base:
            response = httpx.get(f"{base}/files/{pf.id}", timeout=10)
        assert response.status_code == 503 and "pool" in response.json()["message"]
        assert response.headers["retry-after"] == "1"
        with pytest.raises(ConnectorError) as raised:
            invoke("etl.push", {"platformFile": pf.to_json()}, resources_for(environ=environ))
        assert raised.value.status == 503 and raised.value.retryable
    finally:
        for conn in held:
            conn.close()

