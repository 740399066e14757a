"""Which requests go through the environment's proxies (resources/proxies.py), and what stays straight.

The variables are read as httpx reads them (scheme-specific, ALL_PROXY, NO_PROXY's names, domains, ports,
addresses, ``*``), plus NO_PROXY's CIDR networks, which httpx reads as a single address. Our own file server
is reached straight whatever they say (docs/deployment.md, "Outbound proxies"). Mailjet, Drive and links
through a real loopback proxy: tests/mail/test_mail_proxy.py, tests/drive/test_google_proxy.py,
tests/test_link_guard_proxy.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connector_ops.kernel.errors import ActionFailed
from connector_ops.ops.metadata import _server_answers, platform_file_metadata
from connector_ops.resources.drive.google import METADATA_SERVER
from connector_ops.resources.file_server import create_app
from connector_ops.resources.platform_files import PlatformFileStore
from connector_ops.resources.proxies import Routes
from tests.servers import free_port, serving
from tests.servers.forward_proxy import ForwardProxy, proxy_env

P1, P2, P3 = "http://p1.example:3128", "http://user:secret@p2.example:3128", "http://p3.example:8080"


def proxy_of(url: str, direct: tuple[str, ...] = ()) -> str | None:
    proxy = Routes.from_environment(direct).proxy_for(url)
    return None if proxy is None else proxy.url


@pytest.mark.parametrize("url,expected", [
    ("http://api.example.com/x", P1),  # HTTP_PROXY for http://
    ("https://api.example.com/x", P2),  # HTTPS_PROXY for https://
    ("https://files.corp.example/x", None),  # .corp.example: its subdomains…
    ("https://corp.example/x", P2),  # …not the domain itself (httpx's reading)
    ("https://intranet.example/x", None),  # a name: the name and its subdomains
    ("https://www.intranet.example/x", None),
    ("https://notintranet.example/x", P2),
    ("https://reports.example:8443/x", None),  # host:port: that port only
    ("https://reports.example/x", P2),
    ("http://10.20.30.40/x", None),  # CIDR (httpx alone matched 10.0.0.0 only)
    ("http://11.0.0.1/x", P1),
    ("http://[::1]:8080/x", None),
    ("http://[fd00::5]/x", None),  # an IPv6 network
    ("http://192.168.1.7/x", None),  # a single address
])
def test_scheme_specific_proxies_and_no_proxy(monkeypatch, url, expected):
    proxy_env(monkeypatch, HTTP_PROXY=P1, HTTPS_PROXY=P2, NO_PROXY=(
        ".corp.example, intranet.example,reports.example:8443,10.0.0.0/8,::1,fd00::/8,192.168.1.7"))
    assert proxy_of(url) == expected


def test_all_proxy_lower_case_and_no_proxy_star(monkeypatch):
    proxy_env(monkeypatch, ALL_PROXY=P3)
    assert proxy_of("http://a.example") == proxy_of("https://a.example") == P3
    proxy_env(monkeypatch, all_proxy=P3, https_proxy=P2)  # lower case, as curl and httpx read them
    assert (proxy_of("http://a.example"), proxy_of("https://a.example")) == (P3, P2)
    proxy_env(monkeypatch, ALL_PROXY=P3, NO_PROXY="*")
    assert proxy_of("https://a.example") is None


def test_the_metadata_server_is_reached_straight_by_drive_sign_in(monkeypatch):
    """ADC on GCE/GKE gets its tokens from the metadata server, on the host's own link: never behind a proxy."""
    proxy_env(monkeypatch, ALL_PROXY=P3)
    assert proxy_of("http://metadata.google.internal/computeMetadata/v1/x", METADATA_SERVER) is None
    assert proxy_of("http://169.254.169.254/computeMetadata/v1/x", METADATA_SERVER) is None
    assert proxy_of("https://oauth2.googleapis.com/token", METADATA_SERVER) == P3


def test_our_own_file_server_is_reached_straight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of ours that another host wrote is read from our file server without the proxy (not in NO_PROXY),
    and so is the server's /health asked for a step's link (which went through the proxy before)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serving_host = PlatformFileStore(files_dir=str(tmp_path / "host-a"), file_server_url=url)
    pf = serving_host.add_bytes(b"a,b\n1,2\n", "t.csv").to_json()
    with ForwardProxy() as proxy, serving(create_app(serving_host), port):
        proxy_env(monkeypatch, HTTP_PROXY=proxy.url(), HTTPS_PROXY=proxy.url())
        other_host = PlatformFileStore(files_dir=str(tmp_path / "host-b"), file_server_url=url)
        assert other_host.read_bytes(pf) == b"a,b\n1,2\n"
        _server_answers.cache_clear()
        assert platform_file_metadata(pf, serving_host)["link"].value == pf["link"]
        other_host.close()
    assert proxy.received == []


def test_a_proxy_url_httpx_cannot_use_is_named_without_its_password(tmp_path, monkeypatch):
    proxy_env(monkeypatch, HTTP_PROXY="ftp://corp:pr0xy-s3cret@proxy.example:21")
    store = PlatformFileStore(files_dir=str(tmp_path / "files"), allowed_private_hosts="127.0.0.1")
    with pytest.raises(ActionFailed) as info:
        store.read_bytes({"name": "x.csv", "link": f"http://127.0.0.1:{free_port()}/x.csv"})
    assert str(info.value) == ("HTTP_PROXY is no proxy URL httpx can use (ftp://proxy.example:21): http://, https://, "
                               "socks5:// or socks5h://")
