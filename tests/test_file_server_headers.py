"""The file server never opens a stored file as a live page (stored XSS): over real HTTP on loopback, every
file response — 200, 206, HEAD, 304, on both backends — carries a Content-Security-Policy, and the types a
browser would run (HTML, SVG, XML, JavaScript) are ``attachment``.

Before, a stranger's ``report.html`` from a shared Drive folder was served ``inline`` as ``text/html`` with
no policy: opening its link ran its script on the file server's origin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from connector_ops import invoke
from connector_ops.environment import resources_for
from connector_ops.resources.file_server import create_app
from connector_ops.resources.platform_files import PlatformFileStore
from tests.servers import serving

SANDBOXED = "sandbox; default-src 'none'; style-src 'unsafe-inline'"
#: audio and video: a browser's player plays nothing in a sandbox (resources/file_headers.py)
MEDIA = "default-src 'none'; media-src 'self'; style-src 'unsafe-inline'"
SCRIPT = b"<script>fetch('/files/'+location.hash.slice(1)).then(r=>r.text()).then(alert)</script>"

#: name, stored content type, expected disposition, expected policy
FILES = [
    ("report.html", "text/html", "attachment", SANDBOXED),
    ("report.htm", "text/html; charset=utf-8", "attachment", SANDBOXED),
    ("logo.svg", "image/svg+xml", "attachment", SANDBOXED),
    ("page.xhtml", "Application/XHTML+XML", "attachment", SANDBOXED),
    ("feed.atom", "application/atom+xml", "attachment", SANDBOXED),
    ("data.xml", "text/xml", "attachment", SANDBOXED),
    ("style.xsl", "text/xsl", "attachment", SANDBOXED),
    ("app.js", "text/javascript", "attachment", SANDBOXED),
    ("old.js", "application/x-javascript", "attachment", SANDBOXED),
    ("data.csv", "text/csv", "inline", SANDBOXED),
    ("doc.pdf", "application/pdf", "inline", SANDBOXED),
    ("pic.png", "image/png", "inline", SANDBOXED),
    ("notes.txt", "text/plain", "inline", SANDBOXED),
    ("rows.json", "application/json", "inline", SANDBOXED),
    ("blob.bin", "application/octet-stream", "inline", SANDBOXED),
    ("sound.wav", "audio/wav", "inline", MEDIA),
    ("clip.mp4", "video/mp4", "inline", MEDIA),
]


def _check(response: httpx.Response, name: str, content_type: str, disposition: str, policy: str) -> None:
    assert response.headers["content-security-policy"] == policy
    assert response.headers["content-disposition"] == f"{disposition}; filename=\"{name}\"; filename*=UTF-8''{name}"
    assert response.headers["content-type"] == content_type  # as stored, whatever the disposition
    assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(("name", "content_type", "disposition", "policy"), FILES, ids=[f[0] for f in FILES])
def test_each_response_of_the_folder_backend_carries_the_policy(tmp_path: Path, name: str, content_type: str,
                                                                disposition: str, policy: str) -> None:
    """GET, a range (206), HEAD and a revalidation (304) of one file: the policy on each, the disposition
    and the rest as they were (ranges, ``ETag``, ``Last-Modified``)."""
    store = PlatformFileStore(files_dir=str(tmp_path / "files"))
    data = SCRIPT * 20
    pf = store.add_bytes(data, name, content_type)
    with serving(create_app(store)) as base:
        link = f"{base}/files/{pf.id}"
        whole = httpx.get(link)
        part = httpx.get(link, headers={"Range": "bytes=8-27"})
        head = httpx.head(link)
        again = httpx.get(link, headers={"If-None-Match": whole.headers["etag"]})
    assert whole.status_code == 200 and whole.content == data
    _check(whole, name, content_type, disposition, policy)
    assert part.status_code == 206 and part.content == data[8:28]
    assert part.headers["content-range"] == f"bytes 8-27/{len(data)}"
    _check(part, name, content_type, disposition, policy)
    assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == str(len(data))
    _check(head, name, content_type, disposition, policy)
    assert again.status_code == 304 and again.content == b""
    assert again.headers["content-security-policy"] == policy
    assert (again.headers["etag"], again.headers["last-modified"]) == (
        whole.headers["etag"], whole.headers["last-modified"])


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_database_backend_sends_the_same_headers(env: dict[str, str], tmp_path: Path) -> None:
    """Files in the database stream through another response class: same headers on GET and HEAD."""
    store = resources_for(["platform_files"], {**env, "CONNECTOR_OPS_FILES_BACKEND": "database"})["platform_files"]
    assert store.files_database_url is not None
    html = store.add_bytes(SCRIPT, "report.html")
    png = store.add_bytes(b"\x89PNG\r\n\x1a\n", "pic.png")
    with serving(create_app(store)) as base:
        for pf, disposition in ((html, "attachment"), (png, "inline")):
            for response in (httpx.get(f"{base}/files/{pf.id}"), httpx.head(f"{base}/files/{pf.id}")):
                assert response.status_code == 200
                _check(response, pf.name, pf.content_type, disposition, SANDBOXED)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_strangers_html_downloaded_from_drive_is_an_attachment(env: dict[str, str], tmp_path: Path) -> None:
    """The audit's path: an HTML file in a shared Drive folder, fetched by Download File, its link opened."""
    store: Any = resources_for(["platform_files"], env)["platform_files"]
    uploaded = invoke("drive.upload_file", {"platformFile": store.add_bytes(SCRIPT, "report.html").to_json()})
    downloaded = invoke("drive.download_file", {"fileId": uploaded["fileId"]})["platformFile"]
    assert (downloaded["name"], downloaded["contentType"]) == ("report.html", "text/html")
    with serving(create_app(store)) as base:
        response = httpx.get(f"{base}/files/{downloaded['id']}")
    assert response.status_code == 200 and response.content == SCRIPT
    _check(response, "report.html", "text/html", "attachment", SANDBOXED)
