"""Names and content types of platform files that come from elsewhere: a disk name that is not UTF-8, a
content type that is no media type. Each must give a readable file or a 400, never a stored file that
later breaks the file server (500) or an action."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.kernel.errors import InvalidInput
from connector_ops.resources.file_server import create_app
from connector_ops.resources.platform_files import PlatformFileStore
from tests.servers import serving

LATIN1_NAME = os.fsdecode(b"caf\xe9.csv")  # as Python reads it from the disk: 'caf\udce9.csv'


@pytest.fixture
def store(tmp_path: Path) -> PlatformFileStore:
    return PlatformFileStore(files_dir=str(tmp_path / "files"))


def latin1_file(tmp_path: Path) -> Path:
    path = tmp_path / LATIN1_NAME
    path.write_bytes(b"a,b\n1,2\n")
    return path


def test_a_disk_name_that_is_not_utf8_is_stored_readable_and_served(store, tmp_path):
    pf = store.add_file(latin1_file(tmp_path))
    assert pf.name == "caf\ufffd.csv"  # the undecodable byte as U+FFFD, as decoding with "replace" gives
    assert store.describe(pf.id).name == "caf\ufffd.csv"
    with serving(create_app(store)) as base:
        response = httpx.get(f"{base}/files/{pf.id}")
    assert response.status_code == 200 and response.content == b"a,b\n1,2\n"
    assert response.headers["content-disposition"].endswith("filename*=UTF-8''caf%EF%BF%BD.csv")


def test_a_disk_name_with_a_line_break_is_stored_with_a_space(store, tmp_path):
    path = tmp_path / "a\r\nb\tc.csv"
    path.write_bytes(b"a\n1\n")
    assert store.add_file(path).name == "a b c.csv"


def test_a_name_given_as_text_with_half_a_surrogate_pair_is_refused_and_nothing_stored(store, tmp_path):
    with pytest.raises(InvalidInput) as info:
        store.add_file(latin1_file(tmp_path), name=LATIN1_NAME)  # `files add --name $'caf\xe9.csv'`
    assert str(info.value).startswith("name: holds \\udce9, half of a UTF-16 surrogate pair")
    assert not (tmp_path / "files").exists() or list((tmp_path / "files").iterdir()) == []


def test_a_descriptor_stored_with_such_a_name_is_still_served(store, tmp_path):
    """Stores written before the names were made readable may hold one."""
    pf = store.add_bytes(b"x", "a.csv")
    meta = tmp_path / "files" / f"{pf.id}.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "name": LATIN1_NAME}))
    with serving(create_app(store)) as base:
        response = httpx.get(f"{base}/files/{pf.id}")
    assert response.status_code == 200 and "caf%EF%BF%BD.csv" in response.headers["content-disposition"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_local_drive_takes_a_file_added_from_such_a_disk_name(env, files, tmp_path):
    pf = files.add_file(latin1_file(tmp_path))
    uploaded = invoke("drive.upload_file", {"platformFile": {"link": pf.link}})
    listed = invoke("drive.list", {})["content"]
    assert [e["name"] for e in listed if e["id"] == uploaded["fileId"]] == ["caf\ufffd.csv"]


# -- content types -----------------------------------------------------------------------------------
NOT_MEDIA_TYPES = ["text/plain; name=日本", "text/csv; charset=ütf-8", 'text/plain; name="日本"', "csv",
                   "text/csv; charset = utf-8"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("content_type", NOT_MEDIA_TYPES)
@pytest.mark.parametrize("action", ["drive.upload_file", "etl.push"])
def test_a_content_type_that_is_no_ascii_media_type_is_a_400_naming_it(env, files, action, content_type):
    pf = files.add_bytes(b"a,b\n1,2\n", "x.csv").to_json()
    with pytest.raises(ConnectorError) as info:
        invoke(action, {"platformFile": {**pf, "contentType": content_type}})
    assert info.value.status == 400
    assert info.value.body["message"].startswith("platformFile.contentType: must be a media type in ASCII")
    assert invoke("drive.list", {})["content"] == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("content_type", ["text/csv;", "text/csv; charset=utf-8;", 'text/csv; name="a\\"b.csv"',
                                          "text/csv;; header=present"])
def test_media_types_with_empty_parameters_or_quoted_pairs_are_taken(env, files, content_type):
    """RFC 9110 allows an empty parameter (a trailing ';', which many servers send) and a quoted pair in a
    quoted value; both were taken before types were checked, and must stay taken."""
    pf = files.add_bytes(b"a,b\n1,2\n", "x.csv", content_type).to_json()
    assert pf["contentType"] == content_type
    assert invoke("etl.push", {"platformFile": pf})


@pytest.mark.parametrize("content_type", NOT_MEDIA_TYPES)
def test_the_store_keeps_no_file_of_such_a_type(store, tmp_path, content_type):
    with pytest.raises(InvalidInput) as info:
        store.add_bytes(b"x", "a.txt", content_type)
    assert str(info.value).startswith("contentType: must be a media type")
    assert not (tmp_path / "files").exists() or list((tmp_path / "files").iterdir()) == []


@pytest.mark.parametrize(("stored", "served"), [("text/plain; name=日本", "text/plain"),
                                                ("text/csv; charset=ütf-8", "text/csv"),
                                                ("日本/plain", "application/octet-stream")])
def test_a_descriptor_stored_with_such_a_type_is_served_without_it(store, tmp_path, stored, served):
    """Stores written before the check may hold one; Starlette writes headers in Latin-1 (a 500 for 日本)."""
    pf = store.add_bytes(b"payload", "a.txt", "text/plain")
    meta = tmp_path / "files" / f"{pf.id}.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "contentType": stored}))
    assert store.describe(pf.id).content_type == (None if served.startswith("application") else served)
    with serving(create_app(store)) as base:
        response = httpx.get(f"{base}/files/{pf.id}")
    assert response.status_code == 200 and response.content == b"payload"
    assert response.headers["content-type"] == served
