"""Outbound proxies: which requests go through ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``ALL_PROXY``, and what a
proxy's refusal says.

httpx reads those variables (and ``NO_PROXY``) only for a client made without a ``transport=``, and ours
need one (connection retries), so a client with retries went straight out: in a network whose only way out
is a proxy, Drive worked and Mailjet and platform-file links did not. :class:`ProxiedTransport` routes every
request itself, from :class:`Routes`: the variables read as httpx reads them (``urllib``'s ``getproxies``,
httpx's own ``NO_PROXY`` patterns: ``host``, ``.domain``, ``*``, ``host:port``, IP addresses), plus CIDR
entries (``10.0.0.0/8``, as curl reads them), which httpx turns into a pattern that matches only the network's
first address. Each route keeps the client's retries; a request whose ``extensions`` hold :data:`DIRECT`
goes straight out whatever the variables say (a link pinned to its checked address, :mod:`.link_guard`; our
own file server).

A request whose tunnel the proxy did not open (its ``CONNECT`` unanswered within the read timeout, or the
connection lost before the tunnel's TLS was set up) reached no destination: a :class:`ProxyFailure` worth a
retry, not the "may have been sent" of a time-out after sending (:class:`_Tunnel`).

A proxy URL may carry a user and password (``http://user:pass@proxy:3128``): httpx sends them in
``Proxy-Authorization`` only; messages show the proxy as :func:`link_shown` does, without them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.request import getproxies

import httpx

# httpx's own reading of the variables and matching of its mount keys (httpx is pinned below 0.29), so a
# URL is routed as a plain httpx client would route it
from httpx._utils import URLPattern, get_environment_proxies

from connector_ops.kernel.errors import ActionFailed, link_shown

#: the request extension that sends a request straight out, never through a proxy
DIRECT = "connector_ops.direct"
#: the variable each of httpx's proxy keys comes from (also read in lower case, as curl and httpx do)
_VARIABLES = {"http://": "HTTP_PROXY", "https://": "HTTPS_PROXY", "all://": "ALL_PROXY"}
_STATUS = re.compile(r"^(\d{3})\b")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Proxy:
    """A proxy of the environment: its URL (credentials and all, for httpx only) and where it came from.

    Its repr shows :attr:`shown`, never :attr:`url`: a :class:`Routes`, a link guard or a client holding it is
    printed by tracebacks with locals and debug logs."""

    url: str = field(repr=False)
    variable: str

    def __repr__(self) -> str:
        return f"Proxy(shown={self.shown!r}, variable={self.variable!r})"

    @property
    def shown(self) -> str:
        """The proxy as messages show it: no user, no password."""
        return link_shown(self.url)

    @property
    def has_credentials(self) -> bool:
        return bool(httpx.URL(self.url).userinfo)


@dataclass(frozen=True)
class Routes:
    """Which proxy, if any, each URL goes through (``None``: straight out)."""

    patterns: tuple[tuple[URLPattern, Proxy | None], ...] = ()
    direct_networks: tuple[Network, ...] = ()

    @classmethod
    def from_environment(cls, direct: Iterable[str] = ()) -> Routes:
        """The routes the process's environment gives now; ``direct``: more httpx mount keys
        (``all://metadata.google.internal``) that go straight out, as if listed in ``NO_PROXY``."""
        keyed: dict[str, Proxy | None] = {}
        for key, url in get_environment_proxies().items():
            keyed[key] = None if url is None else Proxy(url, _VARIABLES.get(key, "NO_PROXY"))
        keyed.update(dict.fromkeys(direct))
        networks = []
        for entry in getproxies().get("no", "").split(","):
            if "/" in entry:
                with contextlib.suppress(ValueError):  # not a network: httpx's own pattern for it stands
                    networks.append(ipaddress.ip_network(entry.strip().strip("[]"), strict=False))
        patterns = []
        for key, proxy in keyed.items():
            try:
                patterns.append((URLPattern(key), proxy))
            except (httpx.InvalidURL, ValueError):  # httpx's key for an IPv6 network (all://[fd00::/8]): above
                continue
        return cls(tuple(sorted(patterns)), tuple(networks))  # sorted: httpx's order, most specific first

    def proxy_for(self, url: httpx.URL | str) -> Proxy | None:
        """The proxy a request for ``url`` goes through, ``None`` if it goes straight out."""
        if not self.patterns:
            return None
        url = httpx.URL(url)
        if self.direct_networks:
            try:
                address = ipaddress.ip_address(url.host)
            except ValueError:
                pass
            else:
                if any(address in network for network in self.direct_networks):
                    return None
        for pattern, proxy in self.patterns:
            if pattern.matches(url):
                return proxy
        return None

    def proxies(self) -> list[Proxy]:
        return list(dict.fromkeys(proxy for _, proxy in self.patterns if proxy is not None))


class ProxyFailure(httpx.ProxyError):
    """A request that a proxy refused, or that could not go through it: nothing reached the destination.
    ``retryable``: a later try may pass (the proxy unreachable, or it could not reach the destination); a
    407 or 403 is the proxy's answer until its settings or policy change."""

    def __init__(self, message: str, *, request: httpx.Request, retryable: bool) -> None:
        super().__init__(message, request=request)
        self.retryable = retryable


def _destination(url: httpx.URL) -> str:
    """``host:port`` of ``url``, the port given even when it is the scheme's (what a ``CONNECT`` names)."""
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{url.port or (443 if url.scheme == 'https' else 80)}"


def refused(proxy: Proxy, request: httpx.Request, answer: str) -> ProxyFailure:
    """What the proxy's non-2xx ``answer`` (``"407 Proxy Authentication Required"``) to a request for
    ``request.url`` means, naming the proxy (no credentials) and the destination."""
    target = _destination(request.url)
    match = _STATUS.match(answer)
    status = int(match[1]) if match else 0
    said = f"the proxy {proxy.shown} ({proxy.variable})"
    if status == 407 and proxy.has_credentials:
        why = f"{said} refused the user and password given in {proxy.variable} ({answer}) for {target}"
    elif status == 407:
        why = (f"{said} asks for a user and password ({answer}) for {target}: give them in {proxy.variable} "
               "(http://user:password@host:port)")
    elif status == 403:
        why = f"{said} refused to connect to {target} ({answer}): its policy does not allow that destination"
    else:
        why = f"{said} could not connect to {target} ({answer})"
    return ProxyFailure(why, request=request, retryable=status >= 500 or status == 0)


class _Tunnel:
    """Whether ``request``'s tunnel is being opened: its ``CONNECT`` sent and the TLS inside not yet set up,
    so nothing of the request has reached the destination. Told by httpcore's ``trace`` extension, which the
    ``CONNECT`` shares with its request (events ``http11.send_request_headers.started`` of the ``CONNECT``,
    ``proxy.start_tls.complete``); a caller's own ``trace`` is still called. A request on a tunnel opened
    before sees neither, and is never taken for one being opened."""

    def __init__(self, request: httpx.Request) -> None:
        self.opening = False
        self._request = request
        self._outer: Callable[[str, dict], object] | None = request.extensions.get("trace")
        request.extensions["trace"] = self

    def __call__(self, event: str, info: dict) -> object:
        if event == "http11.send_request_headers.started" and getattr(info.get("request"), "method", b"") == b"CONNECT":
            self.opening = True
        elif event == "proxy.start_tls.complete":
            self.opening = False
        return None if self._outer is None else self._outer(event, info)

    def close(self) -> None:
        """The request's ``trace`` as it was (the request may be sent again, by a redirect or a retry)."""
        if self._outer is None:
            self._request.extensions.pop("trace", None)
        else:
            self._request.extensions["trace"] = self._outer


class ProxiedTransport(httpx.BaseTransport):
    """Sends each request straight out or through the proxy :class:`Routes` give for its URL, each route an
    ``httpx.HTTPTransport`` with the same ``retries`` (connections that could not be opened, nothing sent)."""

    def __init__(self, routes: Routes, retries: int = 0) -> None:
        self.routes = routes
        self._direct = httpx.HTTPTransport(retries=retries)
        self._through: dict[Proxy, httpx.HTTPTransport] = {}
        for proxy in routes.proxies():
            try:
                self._through[proxy] = httpx.HTTPTransport(proxy=proxy.url, retries=retries)
            except ImportError:  # socks5:// without socksio
                raise ActionFailed(f"{proxy.variable} names a SOCKS proxy ({proxy.shown}), which needs the socksio "
                                   "package: pip install 'httpx[socks]'") from None
            except ValueError:  # the message would quote the URL, password included
                raise ActionFailed(f"{proxy.variable} is no proxy URL httpx can use ({proxy.shown}): http://, "
                                   "https://, socks5:// or socks5h://") from None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        proxy = None if request.extensions.get(DIRECT) else self.routes.proxy_for(request.url)
        if proxy is None:
            return self._direct.handle_request(request)
        tunnel = _Tunnel(request)
        try:
            response = self._through[proxy].handle_request(request)
        except httpx.ProxyError as exc:  # the CONNECT of an https:// request answered other than 2xx
            raise refused(proxy, request, str(exc)) from None
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # to the proxy, or TLS through its tunnel
            raise ProxyFailure(f"the connection to {_destination(request.url)} through the proxy {proxy.shown} "
                               f"({proxy.variable}) failed ({type(exc).__name__}: {exc})", request=request,
                               retryable=True) from None
        except httpx.TransportError as exc:
            if not tunnel.opening:  # sent to the destination, or no tunnel at all (an http:// request)
                raise
            what = "did not answer" if isinstance(exc, httpx.TimeoutException) else "ended"
            raise ProxyFailure(f"the proxy {proxy.shown} ({proxy.variable}) {what} the CONNECT to "
                               f"{_destination(request.url)} ({type(exc).__name__}): nothing was sent there",
                               request=request, retryable=True) from None
        finally:
            tunnel.close()
        if response.status_code == 407:  # an http:// request: the proxy's own answer, forwarded to nobody
            response.close()
            raise refused(proxy, request, f"407 {response.reason_phrase}".strip())
        return response

    def close(self) -> None:
        self._direct.close()
        for transport in self._through.values():
            transport.close()
