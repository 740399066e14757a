"""CONNECTOR_OPS_FILE_SERVER_URL changed (the week-two move from 127.0.0.1:8765 to the real host): the platform
files made before keep being read, from this host's storage, by every reader of descriptors."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.environment import resources_for
from connector_ops.magic_frames import file_preview
from connector_ops.ops.metadata import platform_file_metadata
from connector_ops.resources.file_server import create_app
from connector_ops.resources.platform_files import PlatformFileStore
from tests.mail.conftest import message
from tests.servers import free_port, serving

BEFORE, AFTER = "http://127.0.0.1:8765", "https://files.example.org"  # nothing listens at either


@pytest.fixture(params=["local", "database"])
def backend(request: pytest.FixtureRequest, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test on the folder and on the database backend (of both databases, through ``env``)."""
    monkeypatch.setenv("CONNECTOR_OPS_FILES_BACKEND", request.param)
    return request.param


def made_before(monkeypatch: pytest.MonkeyPatch, data: bytes, name: str) -> dict:
    """A platform file stored under the first URL; the URL moved afterwards."""
    monkeypatch.setenv("CONNECTOR_OPS_FILE_SERVER_URL", BEFORE)
    pf = resources_for()["platform_files"].add_bytes(data, name).to_json()
    assert pf["link"] == f"{BEFORE}/files/{pf['id']}"
    monkeypatch.setenv("CONNECTOR_OPS_FILE_SERVER_URL", AFTER)
    return pf


def test_every_reader_reads_a_file_made_under_the_earlier_url(backend, env, monkeypatch):
    """Push, Drive upload, mail attachments and the magics' preview all read the old descriptor from storage
    (before: Push was a 400 "points at 127.0.0.1, a loopback address")."""
    pf = made_before(monkeypatch, b"a,b\n1,2\n", "old.csv")
    vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
    assert invoke("etl.query", {"virtualFileId": vf, "query": {}})["result"] == [{"a": "1", "b": "2"}]
    file_id = invoke("drive.upload_file", {"platformFile": pf})["fileId"]
    assert invoke("drive.download_file", {"fileId": file_id})["platformFile"]["size"] == 8
    assert invoke("mail.send_transactional_message", message(attachments=[{"platformFile": pf}])) == {}
    [sent] = (Path(env["CONNECTOR_OPS_HOME"]) / "outbox").iterdir()
    [attachment] = json.loads(sent.read_text())["Messages"][0]["Attachments"]
    assert base64.b64decode(attachment["Base64Content"]) == b"a,b\n1,2\n"
    files = resources_for()["platform_files"]
    assert files.local_id(pf) == pf["id"] and files.size_of({**pf, "size": 1}) == 8  # the stored size
    assert file_preview(files)(pf) == [{"a": "1", "b": "2"}]


def test_only_the_descriptors_own_stored_id_is_read_from_here(backend, monkeypatch):
    """The old base is accepted for a file this store holds, named by the descriptor's own id; a link of that
    shape naming a file not here is refused as any loopback link, its message naming why it is not ours."""
    pf = made_before(monkeypatch, b"a\n1\n", "old.csv")
    files = resources_for()["platform_files"]
    missing = "0123456789abcdef" * 2
    gone = {**pf, "id": missing, "link": f"http://u:secret@127.0.0.1:8765/files/{missing}?sig=token"}
    assert files.local_id(gone) is None
    with pytest.raises(ConnectorError) as refused:
        invoke("etl.push", {"platformFile": gone})
    assert refused.value.status == 400
    assert refused.value.message == (
        f"platformFile.link: 'http://127.0.0.1:8765/files/{missing}?…' points at 127.0.0.1, a loopback address; "
        "links must point at public hosts (or be allowed in CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS); the platform "
        f"file {missing} is not stored on this host, and the link's base http://127.0.0.1:8765 is not the file "
        f"server's URL {AFTER} (CONNECTOR_OPS_FILE_SERVER_URL)")
    assert "secret" not in refused.value.message and "token" not in refused.value.message
    for other in ({**pf, "id": None}, {**pf, "id": missing}):  # a link of ours under another descriptor's id
        assert files.local_id(other) is None
        with pytest.raises(ConnectorError) as refused:
            invoke("etl.push", {"platformFile": other})
        assert refused.value.message.endswith(
            f"the platform file {pf['id']} is stored on this host, but the descriptor "
            f"{'has no id' if other['id'] is None else f'has the id {missing!r}'}: with \"id\": {pf['id']!r} it "
            "is read from here")
    for shape in (f"{BEFORE}/files/{pf['id']}/x", f"{BEFORE}/other/{pf['id']}", f"ftp://h/files/{pf['id']}"):
        assert files.local_id({**pf, "link": shape}) is None  # not a file server's link
    assert files.local_id({**pf, "link": f"https://elsewhere.example/a/b/files/{pf['id']}?x=1"}) == pf["id"]


def test_a_steps_metadata_links_an_old_file_at_todays_url(tmp_path):
    """The UI's link of a step's platform file is the one that opens today, not the earlier URL's."""
    before = PlatformFileStore(files_dir=str(tmp_path / "files"), file_server_url=f"http://127.0.0.1:{free_port()}")
    pf = before.add_bytes(b"a\n1\n", "old.csv").to_json()
    with serving(create_app(before)) as url:  # the file server, now at another port
        today = PlatformFileStore(files_dir=str(tmp_path / "files"), file_server_url=url)
        meta = platform_file_metadata(pf, today)
    assert meta["platform_file_id"].value == pf["id"] and meta["link"].url == f"{url}/files/{pf['id']}"
