"""Google Drive specifics against the loopback fake: pagination, query escaping, retries exactly where
research §3 allows them, dropped connections, token refresh and revocation, service accounts, secrets."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest

from connector_ops.environment import resources_for
from connector_ops.kernel.errors import ConnectorError
from connector_ops.resources.drive.google import GoogleDriveResource
from connector_ops.resources.drive.google_auth import SignInRequired
from connector_ops.session import invoke
from tests.drive.support import CLIENT_SECRET, REFRESH_TOKEN, Drive, fast_google, google_env
from tests.servers.fake_drive import FakeDrive


def drive_calls(fake: FakeDrive, method: str, fragment: str = "") -> int:
    return sum(1 for m, p, _ in fake.requests if m == method and fragment in p)


def test_list_follows_every_page_and_escapes_the_folder_id(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    odd = fake.add_file("Odd", mime="application/vnd.google-apps.folder", file_id="it's\\odd")
    for i in range(5):
        fake.add_file(f"f{i}.txt", b"x", parent=odd)
    fake.max_page = 2  # Drive may return short pages before the end
    listed = google.run("drive.list", {"folderId": odd})["content"]
    assert sorted(i["name"] for i in listed) == [f"f{i}.txt" for i in range(5)]
    lists = [p for m, path, p in fake.requests if path == "/drive/v3/files" and m == "GET"]
    assert len(lists) == 3
    assert lists[0]["q"] == "'it\\'s\\\\odd' in parents and trashed = false"
    assert all(p["pageSize"] == "1000" for p in lists)


def test_429_with_retry_after_is_retried_after_waiting(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    fake.fail("GET", "/drive/v3/files", status=429, reason="rateLimitExceeded", retry_after="1")
    started = time.monotonic()
    assert google.run("drive.list", {}) == {"content": []}
    assert time.monotonic() - started >= 1.0
    assert drive_calls(fake, "GET", "/drive/v3/files") == 2


def test_retry_after_as_an_http_date_is_waited_for(google: Drive) -> None:
    """RFC 9110 §10.2.3: Retry-After may be a date; the retry comes once it is past, not after the backoff's
    milliseconds. HTTP dates have whole seconds: the date is the second after next (1-2 s ahead)."""
    fake = google.fake
    assert fake is not None
    at = int(time.time()) + 2
    fake.fail("GET", "/drive/v3/files", status=503, reason="backendError", retry_after=formatdate(at, usegmt=True))
    assert google.run("drive.list", {}) == {"content": []}
    assert time.time() >= at - 0.05  # a little tolerance: sleep's and the clock's granularity
    assert drive_calls(fake, "GET", "/drive/v3/files") == 2


def test_a_retry_after_of_other_digits_is_left_to_the_backoff(google: Drive) -> None:
    """``"²"`` is a digit to ``str.isdigit`` but no number to ``float``: the retry failed with a ValueError (a
    500) instead of waiting the backoff, as an unreadable Retry-After does."""
    fake = google.fake
    assert fake is not None
    fake.fail("GET", "/drive/v3/files", status=503, reason="backendError", retry_after="²")
    assert google.run("drive.list", {}) == {"content": []}
    assert drive_calls(fake, "GET", "/drive/v3/files") == 2


@pytest.mark.parametrize("status,reason", [(503, "backendError"), (500, "internalError"),
                                           (403, "userRateLimitExceeded"), (403, "rateLimitExceeded")])
def test_transient_errors_on_create_leave_exactly_one_folder(google: Drive, status: int, reason: str) -> None:
    fake = google.fake
    assert fake is not None
    fake.fail("POST", "/drive/v3/files", status=status, reason=reason, times=2)
    folder = google.run("drive.create_folder", {"name": "Once"})["folderId"]
    assert [f["id"] for f in fake.named("Once")] == [folder]


@pytest.mark.parametrize("status,reason", [(403, "insufficientFilePermissions"), (400, "badRequest"),
                                           (403, "storageQuotaExceeded")])
def test_other_4xx_are_not_retried(google: Drive, status: int, reason: str) -> None:
    fake = google.fake
    assert fake is not None
    fake.fail("POST", "/drive/v3/files", status=status, reason=reason)
    with pytest.raises(ConnectorError) as err:
        google.run("drive.create_folder", {"name": "Denied"})
    assert err.value.status == status
    assert reason in err.value.message and "Google Drive refused to create the folder" in err.value.message
    assert drive_calls(fake, "POST", "/drive/v3/files") == 1 and not fake.named("Denied")


def test_not_found_keeps_drives_404_and_message(google: Drive) -> None:
    with pytest.raises(ConnectorError) as err:
        google.run("drive.move", {"id": "nope", "folderId": "my-drive"})
    assert err.value.status == 404
    assert err.value.body == {"message": err.value.message} and "File not found: nope." in err.value.message


@pytest.mark.parametrize("action,payload,path,name", [
    ("drive.create_folder", {"name": "Lost"}, "/drive/v3/files", "Lost"),
    ("drive.create_file", {"name": "Lost", "type": "document"}, "/drive/v3/files", "Lost"),
    ("drive.copy_file", {"keepSamePermissions": False}, "/copy", "Source-copy"),
])
def test_a_lost_answer_never_creates_a_duplicate(google: Drive, action: str, payload: dict, path: str,
                                                 name: str) -> None:
    fake = google.fake
    assert fake is not None
    source = fake.add_file("Source", b"abc")
    if action == "drive.copy_file":
        payload = {**payload, "fileId": source}
    fake.fail("POST", path, mode="lost_answer")  # the work is done, then the connection drops
    out = google.run(action, payload)
    assert len(fake.named(name)) == 1
    assert fake.named(name)[0]["id"] in out.values()
    assert drive_calls(fake, "POST", path) == 2


def test_a_lost_answer_to_a_multipart_upload_makes_one_file(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    pf = google.resources["platform_files"].add_bytes(b"hello", "hello.txt")
    fake.fail("POST", "/upload/drive/v3/files", mode="lost_answer")
    file_id = google.run("drive.upload_file", {"platformFile": pf.to_json()})["fileId"]
    assert [f["id"] for f in fake.named("hello.txt")] == [file_id]


@contextlib.contextmanager
def upload_source(google: Drive, data: bytes, source: str) -> Iterator[dict[str, Any]]:
    """A platform file to upload: ``local`` (on our file server: a seekable file, streamed in one PUT) or
    ``remote`` (a link to another server: not seekable, size unknown, sent in chunks)."""
    if source == "local":
        yield google.resources["platform_files"].add_bytes(data, "big.bin").to_json()
        return
    from starlette.responses import Response

    from tests.servers import serving

    async def other_server(scope, receive, send):  # type: ignore[no-untyped-def]
        await Response(data, media_type="application/octet-stream")(scope, receive, send)

    with serving(other_server) as url:
        # loopback stands for a remote host here: the allow-list opens it (refused by default, test_link_guard)
        files = google.resources["platform_files"]
        google.resources["platform_files"] = files.model_copy(update={"allowed_private_hosts": url.removeprefix("http://")})
        yield {"name": "big.bin", "link": f"{url}/big.bin", "size": 1}  # a wrong size is not trusted


@pytest.mark.parametrize("source", ["local", "remote"])
def test_resumable_upload_survives_dropped_connections_and_5xx(google: Drive, source: str) -> None:
    fake = google.fake
    assert fake is not None
    data = os.urandom(5 * 256 * 1024 + 123)
    fake.fail("PUT", "/upload/drive/v3/files", mode="drop_mid_body", times=2)
    fake.fail("PUT", "/upload/drive/v3/files", status=503, times=1)
    fake.fail("POST", "/upload/drive/v3/files", status=503, times=1)  # starting the session
    with upload_source(google, data, source) as pf:
        file_id = google.run("drive.upload_file", {"platformFile": pf})["fileId"]
    assert fake.blob(file_id) == data
    assert [f["id"] for f in fake.named("big.bin")] == [file_id]
    assert len(fake.upload_ranges) >= 5  # the PUTs, plus status queries after each interruption
    assert len(fake.sessions) == 1


def test_resumable_upload_of_a_remote_file_of_unknown_size_goes_in_chunks(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    data = os.urandom(3 * 256 * 1024 + 7)
    with upload_source(google, data, "remote") as pf:
        file_id = google.run("drive.upload_file", {"platformFile": pf})["fileId"]
    assert fake.blob(file_id) == data
    q = 256 * 1024
    assert fake.upload_ranges == [f"bytes 0-{q - 1}/*", f"bytes {q}-{2 * q - 1}/*", f"bytes {2 * q}-{3 * q - 1}/*",
                                  f"bytes {3 * q}-{3 * q + 6}/{len(data)}"]


def test_local_file_streams_in_one_put_and_resumes_from_the_reported_offset(google: Drive) -> None:
    """A cut mid-stream: the session keeps what arrived; we ask where it stands and send only the rest."""
    fake = google.fake
    assert fake is not None
    data = os.urandom(9 * 256 * 1024 + 5)
    n = len(data)
    kept = (n // 2) // (256 * 1024) * (256 * 1024)  # what the fake persists of a cut PUT
    fake.fail("PUT", "/upload/drive/v3/files", mode="drop_mid_body")
    with upload_source(google, data, "local") as pf:
        file_id = google.run("drive.upload_file", {"platformFile": pf})["fileId"]
    assert fake.upload_ranges == [f"bytes 0-{n - 1}/{n}", f"bytes */{n}", f"bytes {kept}-{n - 1}/{n}"]
    assert fake.blob(file_id) == data and fake.files[file_id]["md5Checksum"] == hashlib.md5(data).hexdigest()
    assert [f["id"] for f in fake.named("big.bin")] == [file_id]


def test_streamed_upload_refreshes_an_expired_token_without_resending_blindly(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    data = os.urandom(2 * 256 * 1024 + 1)
    n = len(data)
    fake.fail("PUT", "/upload/drive/v3/files", status=401, reason="authError")
    with upload_source(google, data, "local") as pf:
        file_id = google.run("drive.upload_file", {"platformFile": pf})["fileId"]
    assert fake.upload_ranges == [f"bytes 0-{n - 1}/{n}", f"bytes */{n}", f"bytes 0-{n - 1}/{n}"]
    assert fake.blob(file_id) == data
    assert len(fake.token_requests) == 2


def test_streamed_upload_with_a_lost_session_starts_one_new_session(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    data = os.urandom(2 * 256 * 1024 + 1)
    fake.fail("PUT", "/upload/drive/v3/files", status=404, reason="notFound")
    with upload_source(google, data, "local") as pf:
        file_id = google.run("drive.upload_file", {"platformFile": pf})["fileId"]
    assert fake.blob(file_id) == data
    assert [f["id"] for f in fake.named("big.bin")] == [file_id]
    assert len(fake.sessions) == 2


def test_streamed_upload_gives_up_after_the_attempts_and_creates_nothing(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    fake.fail("PUT", "/upload/drive/v3/files", status=503, times=100)
    with upload_source(google, os.urandom(2 * 256 * 1024 + 1), "local") as pf, \
            pytest.raises(ConnectorError) as err:
        google.run("drive.upload_file", {"platformFile": pf})
    assert err.value.status == 503 and "kept failing" in err.value.message
    assert fake.named("big.bin") == []


def test_interrupted_download_resumes_with_range(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    data = os.urandom(3 << 20)
    file_id = fake.add_file("movie.bin", data)
    fake.fail("GET", f"/drive/v3/files/{file_id}", mode="drop_mid_body", query={"alt": "media"})
    out = google.run("drive.download_file", {"fileId": file_id})["platformFile"]
    assert google.resources["platform_files"].read_bytes(out) == data and out["size"] == len(data)
    media = [q for m, p, q in fake.requests if q.get("alt") == "media"]
    assert len(media) == 2
    metadata = [q for m, p, q in fake.requests if p.endswith(file_id) and "alt" not in q]
    assert len(metadata) == 2  # once before, and once after the resumed part: is it still that version?
    fake.requests.clear()
    google.run("drive.download_file", {"fileId": file_id})  # never cut: one metadata read, nothing to check
    assert len([q for m, p, q in fake.requests if p.endswith(file_id) and "alt" not in q]) == 1


def test_a_resume_answered_with_the_whole_file_goes_on_past_what_was_kept(google: Drive) -> None:
    """A connection cut mid-body, then the ``Range`` request answered 200 with the whole file (a server may
    ignore ``Range``): the bytes already saved are read past, the rest appended, the file whole and checked
    as a resumed one. Before, this was a non-retryable 500, "Drive could not resume it"."""
    fake = google.fake
    assert fake is not None
    data = os.urandom(3 << 20)
    file_id = fake.add_file("movie.bin", data)
    fake.fail("GET", f"/drive/v3/files/{file_id}", mode="drop_mid_body", query={"alt": "media"})
    fake.fail("GET", f"/drive/v3/files/{file_id}", mode="ignore_range", query={"alt": "media"})
    out = google.run("drive.download_file", {"fileId": file_id})["platformFile"]
    assert google.resources["platform_files"].read_bytes(out) == data and out["size"] == len(data)
    assert len([q for m, p, q in fake.requests if q.get("alt") == "media"]) == 2  # the second one whole
    metadata = [q for m, p, q in fake.requests if p.endswith(file_id) and "alt" not in q]
    assert len(metadata) == 2  # the version read again, as after a 206
    assert not any(fault.times for fault in fake.faults)


def test_a_file_replaced_before_a_resume_answered_whole_is_not_mixed(google: Drive) -> None:
    """The 200 to the ``Range`` request carries a new version: the end of the new one is never appended to the
    start of the old one (the version read again says so), nothing is kept."""
    fake = google.fake
    assert fake is not None
    file_id = fake.add_file("report.bin", b"A" * (2 << 20))
    fake.fail("GET", f"/drive/v3/files/{file_id}", mode="drop_mid_body", query={"alt": "media"},
              replace_with=b"B" * (2 << 20))
    fake.fail("GET", f"/drive/v3/files/{file_id}", mode="ignore_range", query={"alt": "media"})
    store = google.resources["platform_files"]
    before = store.inventory()
    with pytest.raises(ConnectorError) as err:
        google.run("drive.download_file", {"fileId": file_id})
    assert (err.value.status, err.value.retryable) == (409, True) and "changed on Google Drive" in err.value.message
    assert store.inventory() == before


def test_a_download_drive_trickles_is_continued_then_fails_retryably(google: Drive) -> None:
    """A byte every 0.1 s is never silent for the read time-out (timeout_s): fewer than 64 KiB in a time-out's
    worth of waiting is a break, continued with Range as a dropped connection is; a download that keeps
    trickling is a retryable 503 saying how little came, after ``max_attempts`` tries, not days later."""
    fake = google.fake
    assert fake is not None
    google.resources["drive"] = fast_google(google.resources, timeout_s=1.0, max_attempts=2)
    data = os.urandom(1 << 20)
    file_id = fake.add_file("slow.bin", data)
    fake.fail("GET", f"/drive/v3/files/{file_id}", mode="trickle", query={"alt": "media"})
    out = google.run("drive.download_file", {"fileId": file_id})["platformFile"]
    assert google.resources["platform_files"].read_bytes(out) == data
    media = [q for m, p, q in fake.requests if q.get("alt") == "media"]
    assert len(media) == 2
    fake.fail("GET", f"/drive/v3/files/{file_id}", mode="trickle", query={"alt": "media"}, times=2)
    started = time.monotonic()
    with pytest.raises(ConnectorError) as err:
        google.run("drive.download_file", {"fileId": file_id})
    assert (err.value.status, err.value.retryable) == (503, True), err.value.message
    assert re.fullmatch(r"the download was interrupted: Drive sent only \d+ bytes in the last 1(\.\d+)? s \(a "
                        r"download needs 65,536 bytes per read time-out, 1 s\); try again", err.value.message)
    assert time.monotonic() - started < 8


@pytest.mark.parametrize("new_size", [2 << 20, 3 << 20])
def test_a_file_replaced_between_the_cut_and_the_resume_is_not_mixed(google: Drive, new_size: int) -> None:
    fake = google.fake
    assert fake is not None
    file_id = fake.add_file("report.bin", b"A" * (2 << 20))
    fake.fail("GET", f"/drive/v3/files/{file_id}", mode="drop_mid_body", query={"alt": "media"},
              replace_with=b"B" * new_size)
    store = google.resources["platform_files"]
    before = store.inventory()
    with pytest.raises(ConnectorError) as err:
        google.run("drive.download_file", {"fileId": file_id})
    assert err.value.status == 409 and "changed on Google Drive" in err.value.message
    assert store.inventory() == before  # nothing half-written is kept


def test_expired_access_token_is_refreshed_once(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    google.run("drive.list", {})
    fake.expire_access_tokens()
    google.run("drive.create_folder", {"name": "After expiry"})
    assert len(fake.token_requests) == 2
    assert all(r["grant_type"] == "refresh_token" for r in fake.token_requests)


def test_revoked_refresh_token_says_sign_in_again_and_leaks_nothing(google: Drive, caplog: pytest.LogCaptureFixture,
                                                                    capfd: pytest.CaptureFixture[str]) -> None:
    fake = google.fake
    assert fake is not None
    caplog.set_level(logging.DEBUG)
    pf = google.resources["platform_files"].add_bytes(os.urandom(400 * 1024), "x.bin")
    fake.fail("PUT", "/upload/drive/v3/files", mode="drop_mid_body")
    google.run("drive.upload_file", {"platformFile": pf.to_json()})  # session URIs went through logs
    access_tokens = list(fake.access_tokens)
    upload_ids = list(fake.sessions)
    fake.revoke_refresh_tokens()
    fake.expire_access_tokens()
    with pytest.raises(ConnectorError) as err:
        google.run("drive.list", {})
    assert err.value.status == 401
    assert "sign in again" in err.value.message or "connector-ops drive login" in err.value.message
    assert "invalid_grant" in err.value.message
    out, errs = capfd.readouterr()
    seen = caplog.text + out + errs + err.value.message + json.dumps(err.value.body)
    for secret in [CLIENT_SECRET, REFRESH_TOKEN, *access_tokens, *upload_ids]:
        assert secret not in seen


def test_check_token(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    result = google.drive.check_token()
    assert result["valid"] is True and result["credentials"] == "refresh_token"
    assert 3000 < result["expiresInSeconds"] <= 3599
    fake.revoke_refresh_tokens()
    with pytest.raises(SignInRequired) as err:
        google.drive.check_token()
    assert err.value.status == 401
    assert str(err.value) == (
        "Google sign-in has expired or was revoked (refresh token: invalid_grant); run `connector-ops drive login` "
        "and set GOOGLE_REFRESH_TOKEN to the new token (refresh tokens of apps in Google's 'Testing' status "
        "expire after 7 days)")


def test_wrong_client_secret_is_a_clear_configuration_error(google: Drive) -> None:
    drive = fast_google(google.resources, client_secret="wrong")
    with pytest.raises(ConnectorError) as err:
        invoke("drive.list", {}, {**google.resources, "drive": drive})
    assert err.value.status == 401 and "GOOGLE_CLIENT_SECRET" in err.value.message and "wrong" not in err.value.message


def test_service_account_with_domain_wide_delegation(google: Drive, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    fake = google.fake
    assert fake is not None
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    email = "robot@project.iam.gserviceaccount.com"
    fake.service_account = {"email": email, "public_key_pem": public}
    key_file = tmp_path / "sa.json"
    key_file.write_text(json.dumps({"type": "service_account", "client_email": email, "private_key": pem,
                                    "private_key_id": "k1", "token_uri": "https://oauth2.googleapis.com/token"}))
    drive = GoogleDriveResource(api_url=fake.base_url, token_url=fake.base_url + "/token",
                                service_account_file=str(key_file), subject="ann@example.com")
    assert invoke("drive.create_folder", {"name": "SA"}, {**google.resources, "drive": drive})["folderId"]
    grant = fake.token_requests[-1]
    assert grant["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer" and grant["sub"] == "ann@example.com"
    assert drive.check_token()["credentials"] == "service_account"


def test_no_credentials_is_a_400_naming_the_variables(google: Drive) -> None:
    drive = GoogleDriveResource(api_url="http://127.0.0.1:9")
    with pytest.raises(ConnectorError) as err:
        invoke("drive.list", {}, {**google.resources, "drive": drive})
    assert err.value.status == 400 and "GOOGLE_REFRESH_TOKEN" in err.value.message


def test_an_unreachable_drive_api_names_its_host(clean_env, fake, monkeypatch):
    """A connection error says where it tried to connect (issue 15), not only ``ConnectError``."""
    from tests.servers import free_port

    google_env(fake, monkeypatch)
    port = free_port()  # nothing listens there
    monkeypatch.setenv("GOOGLE_DRIVE_API_URL", f"http://127.0.0.1:{port}")
    resources = resources_for()
    resources["drive"] = fast_google(resources)
    with pytest.raises(ConnectorError) as info:
        invoke("drive.list", {}, resources)
    assert f"Google Drive could not be reached at 127.0.0.1:{port} to" in info.value.message, info.value.message


@pytest.mark.parametrize("reason", ["downloadQuotaExceeded", "cannotDownloadAbusiveFile"])
def test_a_final_403_on_the_media_download_is_returned_as_is(google: Drive, reason: str) -> None:
    fake = google.fake
    assert fake is not None
    file_id = fake.add_file("blob.bin", b"hello")
    fake.fail("GET", f"/drive/v3/files/{file_id}", status=403, reason=reason, query={"alt": "media"})
    with pytest.raises(ConnectorError) as err:
        google.run("drive.download_file", {"fileId": file_id})
    assert err.value.status == 403 and reason in err.value.message
    assert "Google Drive refused to download the file" in err.value.message


def test_export_size_limit_is_returned_as_is(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    doc = fake.add_file("Big", mime="application/vnd.google-apps.document")
    fake.fail("GET", f"/drive/v3/files/{doc}/export", status=403, reason="exportSizeLimitExceeded")
    with pytest.raises(ConnectorError) as err:
        google.run("drive.download_file", {"fileId": doc})
    assert err.value.status == 403 and "exportSizeLimitExceeded" in err.value.message
    assert drive_calls(fake, "GET", "/export") == 1


@pytest.mark.parametrize("path_suffix,query", [("", {"alt": "media"}), ("/export", {})])
def test_a_rate_limit_403_on_a_download_is_retried(google: Drive, path_suffix: str, query: dict[str, str]) -> None:
    fake = google.fake
    assert fake is not None
    blob = fake.add_file("blob.bin", b"hello")
    doc = fake.add_file("Doc", mime="application/vnd.google-apps.document")
    file_id = doc if path_suffix else blob
    fake.fail("GET", f"/drive/v3/files/{file_id}{path_suffix}", status=403, reason="userRateLimitExceeded",
              query=query)
    out = google.run("drive.download_file", {"fileId": file_id})["platformFile"]
    assert out["size"] > 0
    downloads = [q for m, p, q in fake.requests if p.startswith(f"/drive/v3/files/{file_id}")
                 and (p.endswith("/export") or q.get("alt") == "media")]
    assert len(downloads) == 2


@pytest.mark.parametrize("kind", ["blob", "export"])
def test_downloads_ask_for_the_identity_encoding(google: Drive, kind: str) -> None:
    fake = google.fake
    assert fake is not None and fake.compress_downloads  # the fake gzips whenever the client allows it
    data = b"id,name\n" + b"".join(b"%d,row %d\n" % (i, i) for i in range(5000))
    file_id = fake.add_file("rows.csv", data, mime="text/csv") if kind == "blob" else \
        fake.add_file("Sheet", mime="application/vnd.google-apps.spreadsheet")
    out = google.run("drive.download_file", {"fileId": file_id})["platformFile"]
    got = google.resources["platform_files"].read_bytes(out)
    assert got == data if kind == "blob" else got.startswith(b"exported Sheet as ")


@pytest.mark.parametrize("claimed", [5, 10 << 30])
def test_upload_from_database_files_declares_the_stored_size(clean_env: dict[str, str], fake: FakeDrive,
                                                             database_url: str, monkeypatch: pytest.MonkeyPatch,
                                                             claimed: int) -> None:
    google_env(fake, monkeypatch)
    monkeypatch.setenv("CONNECTOR_OPS_FILES_BACKEND", "database")
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_URL", database_url)
    resources = resources_for()
    resources["drive"] = fast_google(resources)
    data = os.urandom(1 << 20)
    pf = resources["platform_files"].add_bytes(data, "one-mib.bin").to_json()
    file_id = invoke("drive.upload_file", {"platformFile": {**pf, "size": claimed}}, resources)["fileId"]
    assert fake.blob(file_id) == data


SHORTCUT = "application/vnd.google-apps.shortcut"


def test_a_shortcut_downloads_its_target(google: Drive) -> None:
    fake = google.fake
    assert fake is not None
    target = fake.add_file("target.txt", b"the target's bytes", mime="text/plain")
    link = fake.add_file("link", mime=SHORTCUT, shortcutDetails={"targetId": target, "targetMimeType": "text/plain"})
    out = google.run("drive.download_file", {"fileId": link})["platformFile"]
    assert out["name"] == "target.txt"


@pytest.mark.parametrize("details", [{}, {"targetMimeType": "text/plain"}, {"targetId": None}])
def test_a_shortcut_drive_answers_without_its_target_fails_clearly(google: Drive, details: dict[str, Any]) -> None:
    """A shortcut's metadata without ``shortcutDetails.targetId`` used to reach ``quote(None)``: a TypeError,
    an unexplained 500. It is the action's 500 naming the shortcut, and no second metadata read is sent."""
    fake = google.fake
    assert fake is not None
    extra = {"shortcutDetails": details} if details else {}
    link = fake.add_file("link", mime=SHORTCUT, **extra)
    with pytest.raises(ConnectorError) as err:
        google.run("drive.download_file", {"fileId": link})
    assert err.value.status == 500
    assert err.value.message == (f"Google Drive returned the shortcut {link!r} without its target "
                                 "(shortcutDetails.targetId); nothing was downloaded")
    assert drive_calls(fake, "GET", "/drive/v3/files/") == 1
