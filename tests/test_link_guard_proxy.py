"""Remote platform-file links through a company's egress proxy (HTTPS_PROXY …): a proxy-only network works,
and the link guard keeps every check it still can (resources/link_guard.py).

The network is proxy-only: ``files.test`` and ``other.test`` resolve at the loopback proxy alone
(tests/servers/forward_proxy.py) and nowhere here (the resolver stand-in of tests/test_link_guard.py knows no
name unless told). A literal non-public address, or a name that resolves here to one, is refused before any
connection: the proxy records nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from connector_ops import ConnectorError, invoke
from connector_ops.resources.file_server import create_app
from connector_ops.resources.platform_files import PlatformFileStore
from tests.servers import serving
from tests.servers.forward_proxy import ForwardProxy, proxy_env, trusting
from tests.test_link_guard import CSV, FakeDNS, Server, as_getaddrinfo, push, refused, rows, with_env

NAMES = {"files.test": "127.0.0.1", "other.test": "127.0.0.1"}


@pytest.fixture
def remote() -> Iterator[Server]:
    """A loopback HTTP server of tests/test_link_guard.py (it records each request's path, Host and
    Authorization), reached by the names of :data:`NAMES` through the proxy."""
    server = Server()
    yield server
    server.close()


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: what is tested is where a link's request goes, not the store it is pushed into."""
    return f"sqlite:///{tmp_path / 'vf.db'}"


def test_a_push_from_a_link_goes_through_the_http_proxy(env, remote, monkeypatch):
    """The name resolves nowhere here: the hop is left to the proxy (failed before: "cannot be resolved")."""
    with ForwardProxy(NAMES) as proxy:
        proxy_env(monkeypatch, HTTP_PROXY=proxy.url())
        res = with_env(env, monkeypatch, dns=FakeDNS({}))
        link = remote.url(host="files.test").replace("http://", "http://reader:s3cr%40t@")
        assert rows(res, push(res, link)["virtualFileId"]) == [{"a": "1", "b": "2"}]
    assert proxy.targets == [remote.url(host="files.test")]  # absolute form, by name, no user:password in it
    assert remote.requests == [("/data.csv", f"files.test:{remote.port}")]
    assert remote.authorizations[0] is not None and remote.authorizations[0].startswith("Basic ")


def test_a_push_from_an_https_link_goes_through_the_tunnel(env, tmp_path, monkeypatch):
    """CONNECT files.test:<port>, then TLS to the file's server by its name (its certificate, SNI)."""
    ca = trustme.CA()
    trusting(ca, tmp_path, monkeypatch)
    elsewhere = PlatformFileStore(files_dir=str(tmp_path / "elsewhere"))
    pf = elsewhere.add_bytes(CSV, "data.csv").to_json()
    with serving(create_app(elsewhere), certificate=ca.issue_cert("files.test")) as url, \
            ForwardProxy(NAMES) as proxy:
        port = url.rsplit(":", 1)[1]
        proxy_env(monkeypatch, HTTPS_PROXY=proxy.url())
        res = with_env(env, monkeypatch, dns=FakeDNS({}))
        link = f"https://files.test:{port}/files/{pf['id']}"
        pushed = invoke("etl.push", {"platformFile": {**pf, "link": link}}, res)
        assert rows(res, pushed["virtualFileId"]) == [{"a": "1", "b": "2"}]
    assert proxy.targets == [f"files.test:{port}"] and proxy.received[0].method == "CONNECT"


@pytest.mark.parametrize("link,kind", [
    ("http://10.1.2.3/data.csv", "private"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://[fd00::5]/data.csv", "private"),
    ("http://[::ffff:169.254.169.254]/x", "link-local"),
    ("http://127.0.0.1:9/data.csv", "loopback"),
    ("http://db.test/data.csv", "private"),  # a name that resolves here to 10.0.0.7
])
def test_non_public_destinations_are_refused_before_the_proxy_is_asked(env, monkeypatch, link, kind):
    with ForwardProxy(NAMES) as proxy:
        proxy_env(monkeypatch, ALL_PROXY=proxy.url())
        res = with_env(env, monkeypatch, dns=FakeDNS({"db.test": [["10.0.0.7"]]}))
        message = refused(res, link)
    assert f"a {kind} address" in message and proxy.received == []


def test_the_name_checked_is_the_name_the_proxy_is_asked_for(env, monkeypatch):
    """``straße.example``: the proxy is asked for ``xn--strae-oqa.example`` (httpx: IDNA 2008), a private
    address here; the check looked up ``strasse.example`` (the system resolver: IDNA 2003), a public one, and
    passed (failed before: a 500, the link's text put in ``Host`` being no ASCII — which alone kept the
    request from the proxy)."""
    dns = FakeDNS({"strasse.example": [["93.184.215.14"]], "xn--strae-oqa.example": [["10.0.0.7"]]})
    with ForwardProxy({"xn--strae-oqa.example": "127.0.0.1"}) as proxy:
        proxy_env(monkeypatch, HTTP_PROXY=proxy.url())
        res = with_env(env, monkeypatch)
        res["platform_files"].set_resolver(as_getaddrinfo(dns))
        message = refused(res, "http://straße.example/data.csv")
    assert "10.0.0.7, a private address" in message and proxy.received == []
    assert dns.lookups == ["xn--strae-oqa.example"]


def test_each_redirect_hop_is_decided_the_same_way(env, remote, monkeypatch):
    remote.routes["/moved.csv"] = (302, {"Location": remote.url(host="other.test")}, b"")
    remote.routes["/metadata.csv"] = (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, b"")
    with ForwardProxy(NAMES) as proxy:
        proxy_env(monkeypatch, HTTP_PROXY=proxy.url())
        res = with_env(env, monkeypatch, dns=FakeDNS({}))
        vf = push(res, remote.url("/moved.csv", host="files.test"))["virtualFileId"]
        assert rows(res, vf) == [{"a": "1", "b": "2"}]
        assert proxy.targets == [remote.url("/moved.csv", host="files.test"), remote.url(host="other.test")]
        message = refused(res, remote.url("/metadata.csv", host="files.test"))
    assert "169.254.169.254, a link-local address" in message and "redirected from" in message
    assert proxy.targets[2:] == [remote.url("/metadata.csv", host="files.test")]  # the refused hop: never sent


@pytest.mark.parametrize("written", ["files.test", "files.test.", "FILES.test"])
def test_a_host_in_no_proxy_gets_the_strict_check(env, remote, monkeypatch, written):
    """NO_PROXY takes a host out of the proxy's way: resolved here, checked and pinned to the checked address,
    as without a proxy (a name that does not resolve here is then a 400) — however the link writes it
    (``files.test.`` failed before: NO_PROXY did not match it, and it went to the proxy)."""
    with ForwardProxy({**NAMES, "files.test.": "127.0.0.1"}) as proxy:
        proxy_env(monkeypatch, HTTP_PROXY=proxy.url(), NO_PROXY="files.test")
        res = with_env(env, monkeypatch, dns=FakeDNS({}))
        assert "cannot be resolved" in refused(res, remote.url(host=written))
        res = with_env(env, monkeypatch, allowed="files.test", dns=FakeDNS({"files.test": [["127.0.0.1"]]}))
        assert rows(res, push(res, remote.url(host=written))["virtualFileId"]) == [{"a": "1", "b": "2"}]
    assert proxy.received == [] and remote.requests == [("/data.csv", f"files.test:{remote.port}")]


@pytest.mark.parametrize("link,says", [
    ("http://10.1.2.3./data.csv", "10.1.2.3, a private address"),
    ("http://169.254.169.254./latest/meta-data/", "169.254.169.254, a link-local address"),
    ("http://127.0.0.1.:{port}/data.csv", "127.0.0.1, a loopback address"),
    ("http://0x7f.1:{port}/data.csv", "127.0.0.1, a loopback address"),
    ("http://%31%32%37.0.0.1:{port}/data.csv", "is refused: it is percent-encoded"),
    ("http://127.0.0.1.1:{port}/data.csv", "is refused: it ends in a number"),
])
def test_an_address_in_disguise_is_refused_before_the_proxy_is_asked(env, remote, monkeypatch, link, says):
    """The proxy here reads each as the address (Squid drops a trailing dot; a WHATWG parser reads a numeric
    last label as IPv4 and percent-decodes): none may reach it, and the loopback server behind it is never
    fetched (failed before: the proxy relayed the trailing-dot and percent-encoded ones, and fetched
    127.0.0.1)."""
    disguises = {"127.0.0.1.": "127.0.0.1", "%31%32%37.0.0.1": "127.0.0.1", "127.0.0.1.1": "127.0.0.1"}
    with ForwardProxy(disguises) as proxy:
        proxy_env(monkeypatch, HTTP_PROXY=proxy.url())
        res = with_env(env, monkeypatch)
        res["platform_files"].set_resolver(as_getaddrinfo(FakeDNS({})))
        message = refused(res, link.format(port=remote.port))
    assert says in message and proxy.received == [] and remote.requests == []


def test_a_name_with_a_trailing_dot_goes_to_the_proxy_without_it(env, remote, monkeypatch):
    """``files.test.`` is ``files.test``: the proxy is asked for the name the checks saw (failed before: it was
    asked for ``files.test.``, a name it does not know)."""
    with ForwardProxy(NAMES) as proxy:
        proxy_env(monkeypatch, HTTP_PROXY=proxy.url())
        res = with_env(env, monkeypatch, dns=FakeDNS({}))
        assert rows(res, push(res, remote.url(host="files.test."))["virtualFileId"]) == [{"a": "1", "b": "2"}]
    assert proxy.targets == [remote.url(host="files.test")]
    assert remote.requests == [("/data.csv", f"files.test:{remote.port}")]


def test_a_proxy_refusing_a_link_names_itself_and_not_its_password(env, remote, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    with ForwardProxy(NAMES, credentials=("corp", "pr0xy-s3cret")) as proxy:
        proxy_env(monkeypatch, HTTP_PROXY=proxy.url("corp", "not-it"))
        res = with_env(env, monkeypatch, dns=FakeDNS({}))
        with pytest.raises(ConnectorError) as info:
            push(res, remote.url(host="files.test"))
    assert info.value.body["message"] == (
        f"fetching {remote.url(host='files.test')} failed: the proxy http://127.0.0.1:{proxy.port} (HTTP_PROXY) "
        f"refused the user and password given in HTTP_PROXY (407 Proxy Authentication Required) for "
        f"files.test:{remote.port}")
    assert not info.value.retryable and remote.requests == []
    assert "not-it" not in caplog.text and "not-it" not in str(info.value)


def test_no_repr_shows_a_proxys_password(monkeypatch):
    """Tracebacks with locals and debug logs print reprs: the proxy's URL is in none (failed before: the
    dataclass repr of Proxy showed it, and with it those of Routes and LinkGuard)."""
    from connector_ops.resources.http_client import make_client
    from connector_ops.resources.link_guard import LinkGuard

    proxy_env(monkeypatch, HTTPS_PROXY="http://corp:pr0xy-s3cret@127.0.0.1:3128", NO_PROXY="files.test")
    with make_client(retries=1) as client:
        (proxy,) = client.routes.proxies()
        held = (proxy, client.routes, LinkGuard(routes=client.routes), client._transport, client)
        shown = [repr(thing) for thing in held]
    assert all("pr0xy-s3cret" not in text and "corp:" not in text for text in shown), shown
    assert shown[0] == "Proxy(shown='http://127.0.0.1:3128', variable='HTTPS_PROXY')"
    assert shown[0] in shown[1] and shown[0] in shown[2]
