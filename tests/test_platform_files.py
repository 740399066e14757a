"""Platform files: descriptors, atomic writes, the file server over real HTTP, links of other servers, the CLI."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.kernel.atomic import SWEPT_STAMP
from connector_ops.kernel.disk import DiskFull
from connector_ops.kernel.errors import NotFound
from connector_ops.resources.file_server import create_app
from connector_ops.resources.platform_files import PlatformFileStore, guess_content_type
from tests.servers import acting_once_answering, another_file_server, free_port, serving
from tests.test_etl_push_pull import push as files_push
from tests.test_etl_push_pull import rows

ISO_MS_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def store(tmp_path: Path) -> PlatformFileStore:
    return PlatformFileStore(files_dir=str(tmp_path / "files"), file_server_url="http://127.0.0.1:9/")


def test_descriptor_has_every_field(store):
    pf = store.add_bytes(b"hello", "greeting.txt")
    data = pf.to_json()
    assert set(data) == {"id", "name", "contentType", "link", "size", "lastModified"}
    assert data["name"] == "greeting.txt" and data["contentType"] == "text/plain" and data["size"] == 5
    assert data["link"] == f"http://127.0.0.1:9/files/{data['id']}"
    assert ISO_MS_Z.match(data["lastModified"])
    assert store.describe(data["id"]) == pf
    assert store.read_bytes(data) == b"hello"


def held(store: PlatformFileStore) -> list[Path]:
    """What the store's folder holds besides the date of its last sweep of crash leftovers."""
    return [p for p in Path(store.files_dir).iterdir() if p.name != SWEPT_STAMP]


def test_names_never_become_paths(store, tmp_path):
    pf = store.add_bytes(b"x", "../../etc/passwd")
    assert pf.name == "../../etc/passwd"
    files = sorted(p.name for p in held(store))
    assert files == sorted([pf.id, f"{pf.id}.json"])
    assert not (tmp_path / "etc").exists()
    for bad in ("../x", "..", "%2e%2e", "abc", "../../etc/passwd"):
        with pytest.raises(NotFound) as info:
            store.describe(bad)
        assert (info.value.status, str(info.value)) == (404, f"platform file {bad!r} not found")


def test_failed_write_leaves_nothing(store):
    with pytest.raises(RuntimeError), store.create("x.csv") as sink:
        sink.write(b"partial")
        raise RuntimeError("boom")
    assert held(store) == []


def test_a_full_disk_is_named_not_a_bare_errno(tmp_path):
    """With the floor off (``CONNECTOR_OPS_MIN_FREE_DISK=0``) a Pull into a full folder failed with a bare
    ``OSError: [Errno 28] No space left on device`` (500, no message). The disk's refusal is stood in by the
    writer's own ``OSError`` (a tmpfs to fill needs a mount): a 500 naming the folder, the free space and the
    setting, and nothing left."""
    store = PlatformFileStore(files_dir=str(tmp_path / "files"), min_free_disk=0)
    with pytest.raises(DiskFull) as caught, store.create("x.csv") as sink:
        sink.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert caught.value.status == 500
    message = str(caught.value)
    assert message.startswith(f"no space left on the disk of {store.files_dir}: ") and " free; " in message
    assert "nothing was written" in message and "CONNECTOR_OPS_MIN_FREE_DISK=0 turns off the check" in message
    assert held(store) == []


def check_verified_copy(store: PlatformFileStore, tmp_path: Path) -> None:
    """``add_file(verify=…)`` hands over the SHA-256 of the bytes it copied, in the one read that copies them (a
    pipeline's ``${file:…}`` check: hashing first and copying after let an edit between the two through), and a
    refusal there keeps nothing."""
    data = os.urandom(3 * 1024 * 1024 + 17)
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    seen: list[str] = []
    pf = store.add_file(source, verify=seen.append)
    assert seen == [hashlib.sha256(data).hexdigest()] and store.read_bytes(pf.to_json()) == data
    before = store.inventory()

    def refuse(digest: str) -> None:
        raise ConnectorError(409, {"message": f"changed: {digest}"})

    with pytest.raises(ConnectorError, match="changed"):
        store.add_file(source, verify=refuse)
    assert store.inventory() == before


def test_a_copy_is_verified_by_what_it_copied(store, tmp_path):
    check_verified_copy(store, tmp_path)


def test_file_server_serves_bytes_type_and_length(store):
    pf = store.add_bytes("a,b\n1,ʤ\n".encode(), "résumé.csv")
    with serving(create_app(store)) as base:
        response = httpx.get(f"{base}/files/{pf.id}")
        assert response.status_code == 200
        assert response.content == "a,b\n1,ʤ\n".encode()
        assert response.headers["content-type"] == "text/csv"  # as stored: no charset of Starlette's added
        assert response.headers["content-length"] == str(pf.size)
        assert response.headers["content-disposition"] == (
            "inline; filename=\"r_sum_.csv\"; filename*=UTF-8''r%C3%A9sum%C3%A9.csv")  # an ASCII fallback first
        assert response.headers["x-content-type-options"] == "nosniff"
        etag = response.headers["etag"]
        for asked in ({"If-None-Match": etag}, {"If-None-Match": f'"x", W/{etag}'},
                      {"If-Modified-Since": response.headers["last-modified"]}):
            again = httpx.get(f"{base}/files/{pf.id}", headers=asked)
            assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
        assert httpx.get(f"{base}/files/{pf.id}", headers={"If-None-Match": '"other"'}).content == response.content
        assert httpx.get(f"{base}/files/{'0' * 32}").status_code == 404
        assert httpx.get(f"{base}/files/..%2F..%2Fetc%2Fpasswd").status_code == 404
        assert httpx.get(f"{base}/files/../../etc/passwd").status_code == 404


def test_push_streams_a_link_of_another_server(files, env, tmp_path, monkeypatch):
    """A link that is not ours is fetched over HTTP (here: another file server on loopback, which the
    allow-list opens: loopback is refused by default, see tests/test_link_guard.py)."""
    with another_file_server(tmp_path / "remote", monkeypatch) as remote:
        pf = remote.add_bytes(b"a,b\n" + b"1,2\n" * 50_000, "remote.csv").to_json()
        vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
        missing = {**pf, "link": f"{remote.file_server_url}/files/{'f' * 32}"}
        with pytest.raises(ConnectorError) as info:
            invoke("etl.push", {"platformFile": missing})
    assert invoke("etl.query", {"virtualFileId": vf, "query": {"a": "1"}, "extractOnlyOneResult": True}) == {
        "result": [{"a": "1", "b": "2"}]
    }
    # the spec's fixed 404 body; the cause names the link the other server had no file for
    assert (info.value.action, info.value.status, info.value.body) == ("etl.push", 404, {"message": "not found"})
    assert isinstance(info.value.__cause__, NotFound)
    assert str(info.value.__cause__) == f"platform file at {missing['link']} not found"


def _counted(app: object, gets: list[str]) -> object:
    """``app``, recording the path of each HTTP request it answers."""
    async def counting(scope: dict, receive: object, send: object) -> None:
        if scope["type"] == "http":
            gets.append(scope["path"])
        await app(scope, receive, send)  # type: ignore[operator]
    return counting


LATE_KEY = b"".join(b'{"a": "%d", "b": "%s"}\n' % (i, b"x" * 40) for i in range(100_000)) + b'{"a": "z", "c": "late"}\n'
LATE_RAGGED = b"a,b\n" + b"".join(b"%d,%s\n" % (i, b"x" * 40) for i in range(100_000)) + b"1,2,3\n"


@pytest.mark.parametrize(("data", "name"), [(LATE_KEY, "late.ndjson"), (LATE_RAGGED, "late.csv")],
                         ids=["ndjson-key-late", "csv-ragged-late"])
def test_a_link_is_fetched_once_however_often_the_push_reads_it(files, env, tmp_path, monkeypatch, data, name):
    """The NDJSON path reads a probe, then the file, then every key and the file again (a key first seen
    late); a CSV file with a ragged row late is read by Arrow, then by the row reader, which words the error.
    Over HTTP each is one ``GET``: the later reads take what the first kept (:mod:`…kernel.replay`). Same
    rows, same error as a push of the same bytes kept here."""
    gets: list[str] = []
    with another_file_server(tmp_path / "remote", monkeypatch, lambda app: _counted(app, gets)) as remote:
        pf = remote.add_bytes(data, name)
        try:
            linked = rows(invoke("etl.push", {"platformFile": pf.to_json()})["virtualFileId"])
        except ConnectorError as exc:
            linked = exc.body
    try:
        here = rows(files_push(files, data, name, guess_content_type(name)))
    except ConnectorError as exc:
        here = exc.body
    assert gets == [f"/files/{pf.id}"]
    assert linked == here
    assert name.endswith(".csv") == ("message" in here)  # the CSV file's error; the NDJSON file's rows


def _cli(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "connector_ops.cli", *args], input=stdin, capture_output=True, text=True,
        env={**os.environ, **env}, timeout=60,
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_cli_files_add_invoke_and_errors(env, tmp_path):
    source = tmp_path / "in.csv"
    source.write_text("city\nParis\nRome\n")
    added = _cli("files", "add", str(source), "--name", "cities.csv", env=env)
    assert added.returncode == 0, added.stderr
    pf = json.loads(added.stdout)
    assert pf["name"] == "cities.csv" and pf["size"] == 16
    pushed = _cli("invoke", "etl.push", "-", env=env, stdin=json.dumps({"platformFile": pf}))
    assert pushed.returncode == 0, pushed.stderr
    vf = json.loads(pushed.stdout)["virtualFileId"]
    queried = _cli("invoke", "etl.query", json.dumps({"virtualFileId": vf, "query": {"city": "Rome"}}), env=env)
    assert json.loads(queried.stdout) == {"result": [{"city": "Rome"}]}
    cleaned = _cli("invoke", "etl.clean", json.dumps({"virtualFileId": vf}), env=env)
    assert cleaned.returncode == 0 and json.loads(cleaned.stdout) is None
    failed = _cli("invoke", "etl.iterate", json.dumps({"content": vf, "maxBatchSize": 1}), env=env)
    assert failed.returncode == 3  # not found
    assert json.loads(failed.stdout) == {"message": "not found"}
    assert failed.stderr == "connector-ops: etl.iterate failed (404): not found\n"
    bad = _cli("invoke", "etl.query", "{not json", env=env)
    assert bad.returncode == 2 and "not valid JSON" in json.loads(bad.stdout)["message"]
    assert bad.stderr.startswith("connector-ops: etl.query failed (400): input is not valid JSON")
    unknown = _cli("invoke", "etl.nope", "{}", env=env)
    assert unknown.returncode == 2 and "unknown action" in json.loads(unknown.stdout)["message"]
    assert unknown.stderr.startswith("connector-ops: etl.nope failed (400): unknown action 'etl.nope'")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_cli_files_serve(env, tmp_path):
    port = free_port()
    source = tmp_path / "a.json"
    source.write_text('[{"a": 1}]')
    pf = json.loads(_cli("files", "add", str(source), env=env).stdout)
    server = subprocess.Popen(
        [sys.executable, "-m", "connector_ops.cli", "files", "serve", "--port", str(port)],
        env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/files/{pf['id']}")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "file server did not start"
                time.sleep(0.1)
        assert response.status_code == 200 and response.json() == [{"a": 1}]
        assert response.headers["content-type"] == "application/json"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_host_without_the_bytes_reads_them_from_our_file_server(tmp_path):
    """Two hosts share the file server's URL but not ``files_dir``: the second reads the first's files over
    HTTP (streamed), and a file neither has is a plain 404."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serving_host = PlatformFileStore(files_dir=str(tmp_path / "host-a"), file_server_url=url)
    other_host = PlatformFileStore(files_dir=str(tmp_path / "host-b"), file_server_url=url)
    data = os.urandom(3 * 1024 * 1024 + 17)
    pf = serving_host.add_bytes(data, "big.bin").to_json()
    with serving(create_app(serving_host), port):
        assert other_host.read_bytes(pf) == data
        with other_host.open(pf) as stream:
            assert stream.read(10) == data[:10]
        missing = {**pf, "link": f"{url}/files/{'0' * 32}"}
        with pytest.raises(NotFound) as info:
            other_host.read_bytes(missing)
        assert str(info.value) == f"platform file {'0' * 32!r} not found"
    with pytest.raises(NotFound) as info:
        other_host.read_bytes(pf)  # the server is gone: not on this host, and nobody serves it
    assert "not stored on this host, and the file server at" in str(info.value)
    assert not list((tmp_path / "host-b").glob(pf["id"] + "*"))  # read through, never copied
    other_host.close()


def test_a_file_deleted_while_it_is_downloaded_arrives_whole(store):
    """The delete lands after the response's headers are sent, before its first byte: the download is served
    from the file opened before answering (Starlette's FileResponse opened the path again: a cut body, or a
    500 when the delete came before it looked)."""
    data = os.urandom(300_000)
    pf = store.add_bytes(data, "going.bin")

    with serving(acting_once_answering(create_app(store), lambda: store.delete(pf.id))) as base:
        response = httpx.get(f"{base}/files/{pf.id}")
        assert response.status_code == 200 and response.content == data
        assert httpx.get(f"{base}/files/{pf.id}").status_code == 404
    assert held(store) == []


@pytest.mark.parametrize("encoding,content_type", [("latin-1", "text/csv; charset=ISO-8859-1"),
                                                   ("utf-8", "text/csv")])
def test_a_pull_in_another_encoding_says_so_and_is_served_as_stored(files, env, encoding, content_type):
    """A Pull in Latin-1 records its charset in contentType; the file server sends exactly that (it said
    "text/csv; charset=utf-8" for every text file, whatever its bytes)."""
    vf = files_push(files, "name\ncafé\n".encode())
    out = invoke("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "out.csv",
                              "parameters": {"encoding": encoding}})["platformFile"]
    assert out["contentType"] == content_type
    with serving(create_app(files)) as base:
        response = httpx.get(f"{base}/files/{out['id']}")
    assert response.headers["content-type"] == content_type
    assert response.content == "name\r\ncafé\r\n".encode(encoding) and response.text == "name\r\ncafé\r\n"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_cli_refuses_bad_options_naming_them(env, tmp_path, capsys, monkeypatch):
    """Each was taken: --port 99999 listened on 34463 (and said 99999), --port 0 on 8765, an empty --name
    became the path's name, any --content-type was stored; a port in use exited 3, the code of "not found"."""
    from connector_ops.cli import main

    source = tmp_path / "x.csv"
    source.write_text("a,b\n1,2\n")
    for port in ("99999", "0"):
        assert main(["files", "serve", "--port", port]) == 2
        assert "'--port'" in capsys.readouterr().err
    for option, value, field in (("--name", "", "name"), ("--name", " ", "name"),
                                 ("--content-type", "not a type", "contentType"),
                                 ("--content-type", "text/", "contentType")):
        assert main(["files", "add", str(source), option, value]) == 2
        assert capsys.readouterr().err.startswith(f"connector-ops: files add failed (400): {field}: ")
    assert main(["files", "add", str(source), "--content-type", "text/csv; charset=iso8859-1"]) == 0
    assert json.loads(capsys.readouterr().out)["contentType"] == "text/csv; charset=iso8859-1"
    monkeypatch.setenv("CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS", "a:b:c")  # a 500 "invalid PlatformFileStore"
    assert main(["files", "add", str(source)]) == 2
    said = capsys.readouterr().err
    assert "(400): configuration error: CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS: cannot read 'a:b:c'" in said
    monkeypatch.delenv("CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["files", "serve", "--port", str(port)]) == 1
        err = capsys.readouterr().err
        assert err == f"Error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("url,problem", [
    ("not a url", "must be an http(s) URL with a host"),
    ("http://127.0.0.1:99999", "is not a URL (Port out of range"),
    ("http://127.0.0.1:0", "must have a port from 1 to 65535"),
    ("http://files.example.com:", "must have a port from 1 to 65535"),
    ("https://files:S3cretPw@files.example.com", "must not carry a user or a password (got "
                                                 "'https://files.example.com')"),
    ("https://files@files.example.com:8443/base", "must not carry a user or a password"),
    ("http://127.0.0.1:8765/base?x=1", "must not have a query"),
])
def test_a_bad_file_server_url_names_the_variable(env, monkeypatch, url, problem, capsys):
    """It made links ``not a url/files/<id>``, or a 500 "Port out of range" at the first read: it is checked
    where resources are built, a configuration error naming the variable (an action's 500, the CLI's 400)."""
    from connector_ops.cli import main

    monkeypatch.setenv("CONNECTOR_OPS_FILE_SERVER_URL", url)
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": {"name": "x.csv", "link": "http://127.0.0.2/x.csv"}})
    assert info.value.body["message"].startswith(f"configuration error: CONNECTOR_OPS_FILE_SERVER_URL: {problem}")
    assert main(["files", "serve"]) == 2
    said = capsys.readouterr().err
    assert f"(400): configuration error: CONNECTOR_OPS_FILE_SERVER_URL: {problem}" in said and "S3cretPw" not in said
