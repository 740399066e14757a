"""SSRF (issue 14): remote platform-file links reach only public destinations, on every hop.

Traffic stays on 127.0.0.0/8: loopback servers play the "internal services" (and, once allowed, the remote
hosts); names resolve through a stand-in resolver, and no test ever connects to a private, link-local or
public address, even to prove it is refused.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.environment import resources_for
from connector_ops.resources.link_guard import kind_of

CSV = b"a,b\n1,2\n"


class Server:
    """A loopback HTTP server that records every request; ``routes`` maps a path to (status, headers, body)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.requests: list[tuple[str, str | None]] = []
        self.authorizations: list[str | None] = []
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {"/data.csv": (200, {}, CSV)}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append((self.path, self.headers.get("Host")))
                outer.authorizations.append(self.headers.get("Authorization"))
                status, headers, body = outer.routes.get(self.path, (404, {}, b"no"))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.host, self.port = host, self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/data.csv", host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for server in made:
        server.close()


def serve(servers: list[Server], host: str = "127.0.0.1", port: int = 0) -> Server:
    server = Server(host, port)
    servers.append(server)
    return server


class FakeDNS:
    """The resolver stand-in: name -> the addresses of each successive lookup (the last one repeats)."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        if host not in self.answers:
            raise LookupError(f"{host} is not known")
        queue = self.answers[host]
        return queue.pop(0) if len(queue) > 1 else queue[0]


def as_getaddrinfo(dns: FakeDNS) -> Callable[[str, int], list[str]]:
    """``dns`` consulted as the system resolver consults DNS: a host written as an address (inet_aton's forms
    too: ``127.1``, ``2130706433``) answered by ``getaddrinfo`` itself, numerically, never looked up; a name
    first encoded with Python's ``idna`` codec (IDNA 2003: ``straße.example`` → ``strasse.example``), as
    ``getaddrinfo`` encodes a ``str``."""
    def resolve(host: str, port: int) -> list[str]:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        except (socket.gaierror, UnicodeError):
            try:
                name = host.encode("idna").decode("ascii")
            except UnicodeError as exc:
                raise LookupError(str(exc)) from None
            return dns(name, port)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))
    return resolve


def push(res: dict[str, Any], link: str) -> Any:
    pf = {"name": "data.csv", "contentType": "text/csv", "link": link}
    return invoke("etl.push", {"platformFile": pf}, res)


def refused(res: dict[str, Any], link: str) -> str:
    with pytest.raises(ConnectorError) as info:
        push(res, link)
    assert info.value.status == 400, info.value.body
    message = info.value.body["message"]
    assert message.startswith("platformFile.link: "), message
    return message


def with_env(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, allowed: str = "",
             dns: FakeDNS | None = None) -> dict[str, Any]:
    monkeypatch.setenv("CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS", allowed)
    res = resources_for(environ={**env, "CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS": allowed})
    if dns is not None:
        res["platform_files"].set_resolver(dns)
    return res


def rows(res: dict[str, Any], vf: str) -> list[dict]:
    return invoke("etl.iterate", {"content": vf, "maxBatchSize": 100}, res)["content"]


def test_a_loopback_internal_service_is_refused_before_any_connection(env, servers, monkeypatch):
    internal = serve(servers)
    res = with_env(env, monkeypatch)
    message = refused(res, internal.url())
    assert "127.0.0.1, a loopback address" in message and "CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS" in message
    assert internal.requests == []


def test_a_mail_attachment_link_is_guarded_like_every_link(env, servers, monkeypatch):
    """docs/mail.md once said attachments had no guard: they are read by the same store, so the same 400."""
    internal = serve(servers)
    res = with_env(env, monkeypatch)
    message = {"from": "shop@example.com", "recipients": [{"to": "ana@example.com"}], "templateId": 1,
               "templateVariables": {},
               "attachments": [{"platformFile": {"name": "a.csv", "link": internal.url(), "size": len(CSV)}}]}
    with pytest.raises(ConnectorError) as info:
        invoke("mail.send_transactional_message", message, res)
    assert info.value.status == 400
    assert info.value.body["message"].startswith("attachments[0].platformFile.link: ")
    assert "127.0.0.1, a loopback address" in info.value.body["message"]
    outbox = Path(env["CONNECTOR_OPS_HOME"]) / "outbox"
    assert internal.requests == [] and not any(outbox.glob("*"))  # nothing fetched, nothing sent


@pytest.mark.parametrize("name,addresses,kind", [
    ("metadata.test", ["169.254.169.254"], "link-local"),
    ("db.test", ["10.1.2.3"], "private"),
    ("v6.test", ["fd00::5"], "private"),
    ("mapped.test", ["::ffff:169.254.169.254"], "link-local"),
    ("shared.test", ["100.64.0.1"], "non-public"),
    ("sixtofour.test", ["2002:7f00:1::"], "loopback"),  # 127.0.0.1 inside 6to4: "public" to Python 3.11.7
    ("sixtofour-lan.test", ["2002:a00:1::5"], "private"),  # 10.0.0.1
    ("teredo.test", ["2001:0:4136:e378:8000:63bf:80ff:fffe"], "loopback"),  # client 127.0.0.1 (bits inverted)
    ("teredo-server.test", ["2001:0:a9fe:a9fe::1"], "link-local"),  # server 169.254.169.254
])
def test_names_resolving_to_non_public_addresses_are_refused(env, monkeypatch, name, addresses, kind):
    dns = FakeDNS({name: [addresses]})
    res = with_env(env, monkeypatch, dns=dns)
    message = refused(res, f"http://{name}/latest/meta-data")
    assert f"a {kind} address" in message
    assert dns.lookups == [name]


@pytest.mark.parametrize("address,kind", [
    ("2002:7f00:1::", "loopback"), ("2002:a00:1::", "private"), ("2002:a9fe:a9fe::", "link-local"),
    ("2002:808:808::1", None),  # 8.8.8.8 inside: public, as ::ffff:8.8.8.8 (3.12.4+ alone called it private)
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "private"),  # Teredo, both IPv4s public: 2001::/32 itself
])
def test_an_ipv6_address_wrapping_an_ipv4_one_is_judged_by_it_on_every_python(address, kind):
    """Address strings only (nothing connects): what the stdlib's tables said differed by patch release."""
    assert kind_of(ipaddress.ip_address(address)) == kind


def test_every_resolved_address_is_checked(env, servers, monkeypatch):
    internal = serve(servers)
    dns = FakeDNS({"mixed.test": [["127.0.0.1", "10.0.0.1"]]})
    res = with_env(env, monkeypatch, allowed="127.0.0.1/32", dns=dns)
    assert "10.0.0.1, a private address" in refused(res, internal.url(host="mixed.test"))
    assert internal.requests == []


def test_unresolvable_names_and_other_schemes_are_400s(env, monkeypatch):
    res = with_env(env, monkeypatch, dns=FakeDNS({}))
    assert "cannot be resolved" in refused(res, "http://nowhere.test/x.csv")
    assert "http(s) URL" in refused(res, "file:///etc/passwd")


@pytest.mark.parametrize("allowed", ["127.0.0.1:{port}", "127.0.0.0/8", "files.test", "files.test:{port}"])
def test_the_allow_list_opens_exactly_its_entries(env, servers, monkeypatch, allowed):
    internal = serve(servers)
    dns = FakeDNS({"files.test": [["127.0.0.1"]]})
    res = with_env(env, monkeypatch, allowed=allowed.format(port=internal.port), dns=dns)
    vf = push(res, internal.url(host="files.test"))["virtualFileId"]
    assert rows(res, vf) == [{"a": "1", "b": "2"}]
    assert internal.requests == [("/data.csv", f"files.test:{internal.port}")]  # the name in Host


def test_an_allow_list_entry_for_another_port_does_not_open_this_one(env, servers, monkeypatch):
    internal = serve(servers)
    res = with_env(env, monkeypatch, allowed=f"127.0.0.1:{internal.port + 1}, 10.0.0.0/8")
    refused(res, internal.url())
    assert internal.requests == []


def test_a_redirect_to_an_internal_address_is_refused(env, servers, monkeypatch):
    internal = serve(servers)
    internal.routes["/secret.csv"] = (200, {}, b"secret\nvalue\n")
    public = serve(servers)
    public.routes["/data.csv"] = (302, {"Location": internal.url("/secret.csv")}, b"")
    res = with_env(env, monkeypatch, allowed=f"127.0.0.1:{public.port}")
    message = refused(res, public.url())
    assert "redirected from" in message and "loopback" in message
    assert internal.requests == [] and len(public.requests) == 1


def test_allowed_redirects_are_followed_hop_by_hop(env, servers, monkeypatch, files):
    target = serve(servers)
    hop = serve(servers)
    hop.routes["/data.csv"] = (301, {"Location": "/moved.csv"}, b"")
    hop.routes["/moved.csv"] = (307, {"Location": target.url()}, b"")
    res = with_env(env, monkeypatch, allowed=f"127.0.0.1:{hop.port},127.0.0.1:{target.port}")
    vf = push(res, hop.url())["virtualFileId"]
    assert rows(res, vf) == [{"a": "1", "b": "2"}]
    assert [p for p, _ in hop.requests] == ["/data.csv", "/moved.csv"] and len(target.requests) == 1


def test_a_redirect_loop_ends(env, servers, monkeypatch):
    loop = serve(servers)
    loop.routes["/data.csv"] = (302, {"Location": "/data.csv"}, b"")
    res = with_env(env, monkeypatch, allowed=f"127.0.0.1:{loop.port}")
    with pytest.raises(ConnectorError) as info:
        push(res, loop.url())
    assert "redirects" in info.value.body["message"] and len(loop.requests) == 11


@pytest.mark.parametrize(("location", "says"), [
    ("data:text/csv,a%0A1", "must be an http(s) URL or a link of this file server, got 'data:text/csv,a%0A1'"),
    ("javascript:alert(1)", "must be an http(s) URL or a link of this file server, got 'javascript:alert(1)'"),
    ("mailto:x@example.com", "must be an http(s) URL or a link of this file server, got 'mailto:x@example.com'"),
    ("http://[::1", "is not a URL (Invalid IPv6 URL): 'http://…'"),
    ("data:text/csv;base64," + "QUFB" * 500 + "?token=t0ken",
     "must be an http(s) URL or a link of this file server, got 'data:text/csv;base64,QUFB"),
])
def test_a_redirect_to_what_no_http_client_can_fetch_is_a_400_naming_the_link(env, servers, monkeypatch,
                                                                               location, says):
    """httpx read a redirect's Location even when it followed none: a ``data:`` one raised its InvalidURL (a
    500), a malformed one a retryable "cannot reach". The Location is shown clipped, without its query; the link
    it came from without its password or signature."""
    hop = serve(servers)
    hop.routes["/data.csv?sig=s3cr3t"] = (302, {"Location": location}, b"")
    res = with_env(env, monkeypatch, allowed=f"127.0.0.1:{hop.port}")
    with pytest.raises(ConnectorError) as info:
        push(res, hop.url("/data.csv?sig=s3cr3t").replace("http://", "http://user:pa55word@"))
    assert (info.value.status, info.value.retryable) == (400, False), info.value.body
    message = info.value.body["message"]
    assert message.startswith(f"platformFile.link: {says}") and message.endswith(
        f"' (redirected from {hop.url()}?…)"), message
    assert len(message) < 400 and "t0ken" not in message and "pa55word" not in message and "s3cr3t" not in message
    assert len(hop.requests) == 1


def test_a_redirect_to_our_own_file_server_reads_storage(env, servers, monkeypatch):
    res = with_env(env, monkeypatch)
    own = res["platform_files"].add_bytes(CSV, "mine.csv")
    hop = serve(servers)
    hop.routes["/data.csv"] = (302, {"Location": own.link}, b"")
    res = with_env(env, monkeypatch, allowed=f"127.0.0.1:{hop.port}")
    vf = push(res, hop.url())["virtualFileId"]
    assert rows(res, vf) == [{"a": "1", "b": "2"}]
    assert push(res, own.link)["virtualFileId"]  # our own links: no check, no connection


def test_dns_rebinding_connects_to_the_checked_address(env, servers, monkeypatch):
    """The name resolves to an allowed address when checked and to an internal one afterwards: the
    connection goes to the checked address, and the name is looked up once."""
    good = serve(servers, host="127.0.0.2")
    internal = serve(servers, host="127.0.0.1", port=good.port)
    internal.routes["/data.csv"] = (200, {}, b"secret\nvalue\n")
    dns = FakeDNS({"rebind.test": [["127.0.0.2"], ["127.0.0.1"]]})
    res = with_env(env, monkeypatch, allowed="127.0.0.2/32", dns=dns)
    vf = push(res, good.url(host="rebind.test"))["virtualFileId"]
    assert rows(res, vf) == [{"a": "1", "b": "2"}]
    assert internal.requests == [] and len(good.requests) == 1
    assert dns.lookups == ["rebind.test"]


def test_a_links_userinfo_is_sent_as_basic_auth_and_never_shown(env, servers, monkeypatch, caplog):
    """The connection goes to the checked address, a URL rebuilt without the link's ``user:password``: they
    travel as Basic auth (as httpx sends them), and no message, log line or repr shows the password."""
    import base64
    import logging

    from connector_ops.resources.link_guard import AllowList, LinkGuard

    caplog.set_level(logging.DEBUG)
    remote = serve(servers)
    remote.routes["/private.csv"] = (401, {}, b"who are you")
    res = with_env(env, monkeypatch, allowed=f"127.0.0.1:{remote.port}")
    link = remote.url().replace("http://", "http://r%C3%A9my:s3cr%40t@")
    assert rows(res, push(res, link)["virtualFileId"]) == [{"a": "1", "b": "2"}]
    credentials = base64.b64encode("rémy:s3cr@t".encode()).decode()
    assert remote.authorizations == [f"Basic {credentials}"]
    with pytest.raises(ConnectorError) as info:
        push(res, link.replace("/data.csv", "/private.csv"))
    hop = LinkGuard(AllowList.parse(f"127.0.0.1:{remote.port}")).hop(link, "platformFile.link")
    for shown in (str(info.value.body), caplog.text, repr(hop)):
        assert "s3cr" not in shown and credentials not in shown
    assert "401" in info.value.body["message"]


def test_a_bad_allow_list_is_a_configuration_error(env, monkeypatch):
    monkeypatch.setenv("CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS", "10.0.0.0/8, a:b:c")
    pf = {"name": "data.csv", "contentType": "text/csv", "link": "http://x.test/d.csv"}
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf})
    assert info.value.status == 500  # the service's configuration, not the caller's input (session.py)
    assert info.value.body["message"] == ("configuration error: CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS: "
                                          "cannot read 'a:b:c' (host, host:port or CIDR)")


def test_a_link_that_only_looks_like_ours_is_checked_like_any_other(env, servers, monkeypatch, tmp_path):
    """The file server mounted under /platform of a host that serves internal pages too: a link of its prefix
    whose "id" climbs out (``files/../../admin/secret``), or a redirect there, is not ours and is refused as
    loopback, never fetched (httpx would resolve the dot segments to /admin/secret)."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    from connector_ops.resources.file_server import create_app
    from connector_ops.resources.platform_files import PlatformFileStore
    from tests.servers import serving

    seen: list[str] = []

    async def secret(request: Any) -> PlainTextResponse:
        seen.append(request.url.path)
        return PlainTextResponse("user,password\nadmin,hunter2\n", media_type="text/csv")

    app = Starlette(routes=[Mount("/platform", app=create_app(PlatformFileStore(files_dir=str(tmp_path / "served")))),
                            Route("/admin/secret", secret)])
    with serving(app) as base:
        env = {**env, "CONNECTOR_OPS_FILE_SERVER_URL": base + "/platform"}
        escape = base + "/platform/files/../../admin/secret"
        assert "loopback" in refused(with_env(env, monkeypatch), escape)
        hop = serve(servers)
        hop.routes["/data.csv"] = (302, {"Location": escape}, b"")
        message = refused(with_env(env, monkeypatch, allowed=f"127.0.0.1:{hop.port}"), hop.url())
        assert "redirected from" in message and "loopback" in message
        own = with_env(env, monkeypatch)["platform_files"]
        assert own.local_id({"link": own.link_for("0" * 32)}) == "0" * 32
        assert own.local_id({"link": own.link_for("0" * 32 + "\n")}) is None
    assert seen == []


def test_an_international_name_is_resolved_and_sent_as_httpx_sends_it(env, servers, monkeypatch, tmp_path):
    """httpx sends ``straße.example`` as ``xn--strae-oqa.example`` (IDNA 2008); the system resolver and
    ``ssl`` would have encoded the link's text as ``strasse.example`` (IDNA 2003), another name. The name
    looked up, allowed, put in ``Host`` and SNI is the one httpx sends (failed before: "cannot be resolved",
    the lookup being of strasse.example; had it resolved, a 500, the link's text in ``Host`` being no
    ASCII)."""
    import trustme

    from connector_ops.resources.file_server import create_app
    from connector_ops.resources.platform_files import PlatformFileStore
    from tests.servers import serving
    from tests.servers.forward_proxy import trusting

    remote = serve(servers)
    dns = FakeDNS({"xn--strae-oqa.example": [["127.0.0.1"]]})
    res = with_env(env, monkeypatch, allowed="straße.example")
    res["platform_files"].set_resolver(as_getaddrinfo(dns))
    assert rows(res, push(res, remote.url(host="straße.example"))["virtualFileId"]) == [{"a": "1", "b": "2"}]
    assert remote.requests == [("/data.csv", f"xn--strae-oqa.example:{remote.port}")]
    assert dns.lookups == ["xn--strae-oqa.example"]
    ca = trustme.CA()
    trusting(ca, tmp_path, monkeypatch)
    elsewhere = PlatformFileStore(files_dir=str(tmp_path / "elsewhere"))
    pf = elsewhere.add_bytes(CSV, "data.csv").to_json()
    with serving(create_app(elsewhere), certificate=ca.issue_cert("xn--strae-oqa.example")) as url:
        res = with_env(env, monkeypatch, allowed="127.0.0.1/32")  # a new client: it trusts the CA
        res["platform_files"].set_resolver(as_getaddrinfo(dns))
        link = f"https://straße.example:{url.rsplit(':', 1)[1]}/files/{pf['id']}"
        pushed = invoke("etl.push", {"platformFile": {**pf, "link": link}}, res)  # SNI and certificate agree
        assert rows(res, pushed["virtualFileId"]) == [{"a": "1", "b": "2"}]


@pytest.mark.parametrize("host,kind", [
    ("127.0.0.1.", "loopback"),  # a trailing dot: no address to getaddrinfo, a DNS name to look up
    ("169.254.169.254.", "link-local"),
    ("0x7f.1", "loopback"),  # inet_aton's forms: getaddrinfo read them as the address already
    ("2130706433", "loopback"),
])
def test_an_address_written_otherwise_is_checked_as_that_address(env, servers, monkeypatch, host, kind):
    """Read as the address a URL parser or a proxy reads (tests/test_link_guard_proxy.py: what a proxy made
    of them), never looked up (failed before for the trailing dots: "cannot be resolved")."""
    internal = serve(servers)
    dns = FakeDNS({})
    res = with_env(env, monkeypatch)
    res["platform_files"].set_resolver(as_getaddrinfo(dns))
    assert f"a {kind} address" in refused(res, internal.url(host=host))
    assert dns.lookups == [] and internal.requests == []


@pytest.mark.parametrize("host,says", [
    ("%31%32%37.0.0.1", "it is percent-encoded"),
    ("127.0.0.1.1", "it ends in a number, so URL parsers read it as an IPv4 address, and it is none"),
    ("files.test.7", "it ends in a number"),
    ("files..test", "it is no host name"),
])
def test_a_host_other_parsers_read_otherwise_is_refused_unlooked_up(env, servers, monkeypatch, host, says):
    internal = serve(servers)
    dns = FakeDNS({})
    res = with_env(env, monkeypatch, allowed="127.0.0.0/8")
    res["platform_files"].set_resolver(as_getaddrinfo(dns))
    message = refused(res, internal.url(host=host))
    assert f"the host of 'http://{host}:{internal.port}/data.csv' is refused: {says}" in message
    assert dns.lookups == [] and internal.requests == []


@pytest.mark.parametrize("host,sent", [
    ("files.test.", "files.test"), ("FILES.Test", "files.test"), ("127.0.0.1.", "127.0.0.1"), ("127.1", "127.0.0.1"),
])
def test_a_host_written_otherwise_is_fetched_as_it_is_read(env, servers, monkeypatch, host, sent):
    """Straight (no proxy): pinned to the checked address, the host as read in ``Host`` (failed before for
    the trailing dots: "cannot be resolved")."""
    internal = serve(servers)
    dns = FakeDNS({"files.test": [["127.0.0.1"]]})
    res = with_env(env, monkeypatch, allowed="files.test.,127.0.0.1")
    res["platform_files"].set_resolver(as_getaddrinfo(dns))
    assert rows(res, push(res, internal.url(host=host))["virtualFileId"]) == [{"a": "1", "b": "2"}]
    assert internal.requests == [("/data.csv", f"{sent}:{internal.port}")]
