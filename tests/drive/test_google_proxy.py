"""Google Drive and its OAuth token endpoint behind a company's egress proxy (HTTPS_PROXY …, NO_PROXY).

The network is proxy-only: ``drive.test`` (the API) and ``oauth.test`` (the token endpoint) are the loopback fake
of tests/servers/fake_drive.py over TLS, names only the proxy resolves (tests/servers/forward_proxy.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from connector_ops.environment import resources_for
from connector_ops.kernel.errors import ConnectorError
from connector_ops.session import invoke
from tests.drive.support import CLIENT_ID, CLIENT_SECRET, REFRESH_TOKEN, fast_google, google_env
from tests.servers import serving
from tests.servers.fake_drive import FakeDrive
from tests.servers.forward_proxy import ForwardProxy, proxy_env, trusting

NAMES = {"drive.test": "127.0.0.1", "oauth.test": "127.0.0.1"}


@pytest.fixture
def fake(tmp_path: Path, clean_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDrive]:
    """The fake Drive at ``https://drive.test:<port>``, its token endpoint at ``https://oauth.test:<port>/token``."""
    ca = trustme.CA()
    trusting(ca, tmp_path, monkeypatch)
    drive = FakeDrive(storage=tmp_path / "fake-drive", client_id=CLIENT_ID, client_secret=CLIENT_SECRET,
                      refresh_tokens={REFRESH_TOKEN})
    with serving(drive.app, certificate=ca.issue_cert("drive.test", "oauth.test")) as url:
        port = url.rsplit(":", 1)[1]
        drive.base_url = f"https://drive.test:{port}"
        google_env(drive, monkeypatch)
        monkeypatch.setenv("GOOGLE_OAUTH_TOKEN_URL", f"https://oauth.test:{port}/token")
        yield drive


def run(action: str, payload: dict) -> dict:
    resources = resources_for()
    resources["drive"] = fast_google(resources)
    return invoke(action, payload, resources)


def failure(action: str, payload: dict) -> ConnectorError:
    with pytest.raises(ConnectorError) as caught:
        run(action, payload)
    return caught.value


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "ALL_PROXY"])
def test_drive_and_its_sign_in_go_through_the_proxy(fake, monkeypatch, variable):
    port = fake.base_url.rsplit(":", 1)[1]
    with ForwardProxy(NAMES) as proxy:
        proxy_env(monkeypatch, **{variable: proxy.url()})
        folder = run("drive.create_folder", {"name": "Behind the proxy"})["folderId"]
        assert [item["id"] for item in run("drive.list", {})["content"]] == [folder]
    assert len(fake.token_requests) == 2  # a sign-in per resource (each run builds its own)
    assert set(proxy.targets) == {f"oauth.test:{port}", f"drive.test:{port}"}
    assert proxy.targets[0] == f"oauth.test:{port}" and {r.method for r in proxy.received} == {"CONNECT"}


def test_a_token_endpoint_in_no_proxy_is_reached_straight(fake, monkeypatch):
    """NO_PROXY takes the token endpoint out of the proxy's way (here the same fake, served again on plain
    HTTP at 127.0.0.1, as an internal endpoint would be)."""
    port = fake.base_url.rsplit(":", 1)[1]
    with serving(fake.app) as plain, ForwardProxy(NAMES) as proxy:
        monkeypatch.setenv("GOOGLE_OAUTH_TOKEN_URL", f"{plain}/token")
        proxy_env(monkeypatch, HTTPS_PROXY=proxy.url(), HTTP_PROXY=proxy.url(), NO_PROXY="localhost,127.0.0.1")
        assert run("drive.list", {}) == {"content": []}
    assert proxy.targets == [f"drive.test:{port}"] and len(fake.token_requests) == 1


def test_a_sign_in_the_proxy_refuses_is_final_and_names_it(fake, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    with ForwardProxy(NAMES, credentials=("corp", "pr0xy-s3cret")) as proxy:
        proxy_env(monkeypatch, HTTPS_PROXY=proxy.url("corp", "not-it"))
        error = failure("drive.list", {})
    port = fake.base_url.rsplit(":", 1)[1]
    assert error.message == (
        f"could not reach the Google token endpoint: the proxy http://127.0.0.1:{proxy.port} (HTTPS_PROXY) refused "
        f"the user and password given in HTTPS_PROXY (407 Proxy Authentication Required) for oauth.test:{port}")
    assert not error.retryable and proxy.targets == [f"oauth.test:{port}"]  # asked once: not retried
    assert "not-it" not in caplog.text and fake.token_requests == []


def test_a_drive_call_the_proxy_refuses_is_final_and_names_it(fake, monkeypatch):
    """Drive retries what may pass later (7 attempts here); a proxy's 403 is its policy: one attempt, a 502."""
    port = fake.base_url.rsplit(":", 1)[1]
    with ForwardProxy(NAMES, forbidden=frozenset({"drive.test"})) as proxy:
        proxy_env(monkeypatch, HTTPS_PROXY=proxy.url())
        error = failure("drive.list", {})
    assert error.message.endswith(f"the proxy http://127.0.0.1:{proxy.port} (HTTPS_PROXY) refused to connect to "
                                  f"drive.test:{port} (403 Forbidden): its policy does not allow that destination")
    assert not error.retryable and proxy.targets == [f"oauth.test:{port}", f"drive.test:{port}"]
