"""Mailjet behind a company's egress proxy: HTTPS_PROXY / HTTP_PROXY / ALL_PROXY / NO_PROXY as curl and httpx
read them, with the client's own connection retries (which made httpx ignore the variables: Mailjet went
straight out and failed with "cannot reach").

The network is proxy-only: ``mailjet.test`` resolves at the loopback proxy alone (tests/servers/forward_proxy.py),
so a send that did not go through it fails. A proxy's password never reaches a message or a log record.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from connector_ops.environment import resources_for
from connector_ops.kernel.errors import ConnectorError
from tests.mail.conftest import API_KEY, API_SECRET, message, send
from tests.servers import free_port, serving
from tests.servers.fake_mailjet import Canned, FakeMailjet
from tests.servers.forward_proxy import ForwardProxy, Received, proxy_env, trusting

USER, PASSWORD = "corp-user", "pr0xy-s3cret"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


@pytest.fixture
def fake() -> FakeMailjet:
    return FakeMailjet(API_KEY, API_SECRET)


@pytest.fixture
def tls_mailjet(fake: FakeMailjet, mailjet_env: dict[str, str], tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The fake Mailjet over TLS as ``https://mailjet.test:<port>`` (a name only the proxy resolves); yields
    the port."""
    ca = trustme.CA()
    trusting(ca, tmp_path, monkeypatch)
    with serving(fake.app, certificate=ca.issue_cert("mailjet.test")) as url:
        port = int(url.rsplit(":", 1)[1])
        monkeypatch.setenv("MAILJET_API_URL", f"https://mailjet.test:{port}")
        yield port


@pytest.fixture
def http_mailjet(fake: FakeMailjet, mailjet_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The fake Mailjet over plain HTTP as ``http://mailjet.test:<port>``; yields the port."""
    with serving(fake.app) as url:
        port = int(url.rsplit(":", 1)[1])
        monkeypatch.setenv("MAILJET_API_URL", f"http://mailjet.test:{port}")
        yield port


def failure() -> ConnectorError:
    with pytest.raises(ConnectorError) as caught:
        send(message(), resources_for())
    return caught.value


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy", "ALL_PROXY"])
def test_mailjet_sends_through_the_https_proxy(tls_mailjet, fake, monkeypatch, variable):
    """CONNECT mailjet.test:<port>, TLS to Mailjet inside the tunnel (failed before: the client went straight
    to mailjet.test, which does not resolve here: "cannot reach Mailjet")."""
    with ForwardProxy({"mailjet.test": "127.0.0.1"}) as proxy:
        proxy_env(monkeypatch, **{variable: proxy.url()})
        assert send(message(), resources_for()) == {}
    assert proxy.received == [Received("CONNECT", f"mailjet.test:{tls_mailjet}", None, True)]
    assert len(fake.accepted) == 1


def test_mailjet_over_http_goes_through_http_proxy_only(http_mailjet, fake, monkeypatch):
    """An http:// API URL goes through HTTP_PROXY (the POST in absolute form); HTTPS_PROXY, here a proxy that
    is not there, is for https:// URLs."""
    with ForwardProxy({"mailjet.test": "127.0.0.1"}) as proxy:
        proxy_env(monkeypatch, HTTP_PROXY=proxy.url(), HTTPS_PROXY=f"http://127.0.0.1:{free_port()}")
        assert send(message(), resources_for()) == {}
    assert proxy.targets == [f"http://mailjet.test:{http_mailjet}/v3.1/send"]
    assert proxy.received[0].method == "POST" and len(fake.accepted) == 1


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "127.0.0.0/8", "*", "localhost,127.0.0.1:{port}",
                                      "example.org, 127.0.0.1"])
def test_no_proxy_sends_mailjet_straight(fake, mailjet_env, monkeypatch, no_proxy):
    """Hosts in NO_PROXY (an address, a CIDR network, everything, host:port) are reached straight."""
    with serving(fake.app) as url, ForwardProxy() as proxy:
        monkeypatch.setenv("MAILJET_API_URL", url)
        proxy_env(monkeypatch, HTTP_PROXY=proxy.url(), HTTPS_PROXY=proxy.url(),
                  NO_PROXY=no_proxy.format(port=url.rsplit(":", 1)[1]))
        assert send(message(), resources_for()) == {}
    assert proxy.received == [] and len(fake.accepted) == 1


def test_the_proxy_password_is_sent_to_the_proxy_alone(tls_mailjet, fake, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)  # httpx's and httpcore's records too
    with ForwardProxy({"mailjet.test": "127.0.0.1"}, credentials=(USER, PASSWORD)) as proxy:
        proxy_env(monkeypatch, HTTPS_PROXY=proxy.url(USER, PASSWORD))
        assert send(message(), resources_for()) == {}
    assert proxy.received == [Received("CONNECT", f"mailjet.test:{tls_mailjet}", BASIC, True)]
    assert all("proxy-authorization" not in r["headers"] for r in fake.requests)  # not past the proxy
    assert "HTTP Request: POST https://mailjet.test" in caplog.text  # the records were seen…
    assert PASSWORD not in caplog.text and BASIC.split()[1] not in caplog.text  # …without the password


@pytest.mark.parametrize("scheme", ["https", "http"])
@pytest.mark.parametrize("given", [None, "wrong"])
def test_a_407_names_the_proxy_and_the_host_and_is_final(request, fake, monkeypatch, caplog, scheme, given):
    """The proxy's 407 (to the CONNECT of https://, as its answer to an http:// request) is an error of its
    own: naming the proxy without the password, the host, and what to change; not worth a retry."""
    port = request.getfixturevalue(f"{'tls' if scheme == 'https' else 'http'}_mailjet")
    caplog.set_level(logging.DEBUG)
    variable = f"{scheme.upper()}_PROXY"
    with ForwardProxy({"mailjet.test": "127.0.0.1"}, credentials=(USER, PASSWORD)) as proxy:
        proxy_env(monkeypatch, **{variable: proxy.url(USER, given) if given else proxy.url()})
        error = failure()
    said = (f"cannot reach Mailjet at {scheme}://mailjet.test:{port}: the proxy http://127.0.0.1:{proxy.port} "
            f"({variable})")
    if given:
        assert error.message == (f"{said} refused the user and password given in {variable} (407 Proxy "
                                 f"Authentication Required) for mailjet.test:{port}")
    else:
        assert error.message == (f"{said} asks for a user and password (407 Proxy Authentication Required) for "
                                 f"mailjet.test:{port}: give them in {variable} (http://user:password@host:port)")
    assert not error.retryable and len(proxy.received) == 1 and fake.requests == []
    assert "wrong" not in error.message and "wrong" not in caplog.text and PASSWORD not in caplog.text


def test_a_destination_the_proxy_refuses_is_a_final_403(tls_mailjet, fake, monkeypatch):
    with ForwardProxy({"mailjet.test": "127.0.0.1"}, forbidden=frozenset({"mailjet.test"})) as proxy:
        proxy_env(monkeypatch, HTTPS_PROXY=proxy.url())
        error = failure()
    assert error.message.endswith(f"(HTTPS_PROXY) refused to connect to mailjet.test:{tls_mailjet} (403 Forbidden): "
                                  "its policy does not allow that destination")
    assert not error.retryable and fake.requests == []


def test_a_connect_the_proxy_leaves_unanswered_sent_nothing_and_is_worth_a_retry(tls_mailjet, fake, monkeypatch):
    """A read time-out waiting for the CONNECT's answer is no "may have been sent": no tunnel, no request."""
    resources = resources_for()
    resources["mail"] = resources["mail"].model_copy(update={"timeout_s": 0.5})
    with ForwardProxy({"mailjet.test": "127.0.0.1"}, silent=frozenset({"mailjet.test"})) as proxy:
        proxy_env(monkeypatch, HTTPS_PROXY=proxy.url())
        with pytest.raises(ConnectorError) as caught:
            send(message(), resources)
    assert caught.value.retryable, caught.value.message
    assert caught.value.message == (
        f"cannot reach Mailjet at https://mailjet.test:{tls_mailjet}: the proxy http://127.0.0.1:{proxy.port} "
        f"(HTTPS_PROXY) did not answer the CONNECT to mailjet.test:{tls_mailjet} (ReadTimeout): nothing was sent there")
    assert proxy.targets == [f"mailjet.test:{tls_mailjet}"] and fake.requests == []


def test_a_time_out_after_the_tunnel_opened_may_have_sent_and_is_final(tls_mailjet, fake, monkeypatch):
    """Through an open tunnel, Mailjet's own silence is what it was straight: the message may have been sent."""
    fake.queue(Canned(200, {"Messages": [{"Status": "success"}]}, delay_s=2.0))
    resources = resources_for()
    resources["mail"] = resources["mail"].model_copy(update={"timeout_s": 0.5})
    with ForwardProxy({"mailjet.test": "127.0.0.1"}) as proxy:
        proxy_env(monkeypatch, HTTPS_PROXY=proxy.url())
        with pytest.raises(ConnectorError) as caught:
            send(message(), resources)
    assert not caught.value.retryable
    assert caught.value.message.startswith("Mailjet did not answer within 0.5 s; the message may have been sent")
    assert len(fake.requests) == 1


def test_a_proxy_that_is_not_there_or_cannot_connect_is_worth_a_retry(tls_mailjet, fake, monkeypatch):
    port = free_port()
    proxy_env(monkeypatch, HTTPS_PROXY=f"http://{USER}:{PASSWORD}@127.0.0.1:{port}")
    error = failure()
    assert error.retryable and PASSWORD not in error.message
    assert error.message.startswith(f"cannot reach Mailjet at https://mailjet.test:{tls_mailjet}: the connection to "
                                    f"mailjet.test:{tls_mailjet} through the proxy http://127.0.0.1:{port} "
                                    "(HTTPS_PROXY) failed (ConnectError: ")
    with ForwardProxy() as proxy:  # mailjet.test is no name it knows: its 502 to the CONNECT
        proxy_env(monkeypatch, HTTPS_PROXY=proxy.url())
        error = failure()
    assert error.retryable and error.message.endswith(
        f"(HTTPS_PROXY) could not connect to mailjet.test:{tls_mailjet} (502 Bad Gateway)")
    assert fake.requests == []
