"""Which remote platform-file links may be fetched: public destinations only, checked on every hop.

A platform-file descriptor comes from whoever calls the action, and a component inside a data platform
can reach metadata services, databases and admin pages no outside caller should read through it. So a
link that is not our own file server's is fetched only if every address its host resolves to is public
(not loopback, private, link-local, shared, reserved or multicast). The name — as httpx will send it
(:func:`sent_host`: IDNA 2008 for a non-ASCII one) — is resolved here, the addresses checked, and the
connection made to the checked address (the name goes in the ``Host`` header and TLS's SNI): a second lookup
by the HTTP client could answer differently (DNS rebinding). Redirects are followed by :class:`LinkGuard`'s
caller one hop at a time, each hop checked the same way.

``CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS`` opens exactly the destinations a deployment needs: comma-separated
``host`` (any port), ``host:port`` or CIDR entries (``10.0.0.0/8``, ``[fd00::]/8`` style without brackets).

A link whose URL the environment sends through a proxy (``HTTPS_PROXY`` …, :mod:`.proxies`) is connected to
the proxy, which resolves the name itself: no address can be pinned there. Every check that still can be
made is: a literal non-public address is refused, and so is a name that resolves *here* to one (unless
allowed); a name that does not resolve here (a network whose only way out is the proxy) is left to the
proxy, whose egress policy decides — the usual practice with egress proxies. A deployment that wants the
strict check for some hosts lists them in ``NO_PROXY``: those hops are resolved and pinned as above. Each
redirect hop is decided the same way, and nothing is sent, not even to the proxy, before its hop passes.
"""

from __future__ import annotations

import base64
import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from connector_ops.kernel.errors import InvalidInput, link_shown
from connector_ops.resources.proxies import DIRECT, Routes

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: ``(host, port) -> addresses``: the system resolver, or a stand-in (tests never resolve real names)
Resolver = Callable[[str, int], Sequence[str]]
MAX_REDIRECTS = 10
#: characters of a link a message shows: a redirect's ``Location`` is the server's text (a ``data:`` URL
#: may hold a whole file)
SHOWN_CHARS = 200
ALLOWED_HOSTS_ENV = "CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS"


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``getaddrinfo`` gives for ``host`` (IPv4 and IPv6), in its order, without repeats."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise LookupError(str(exc)) from None
    return list(dict.fromkeys(str(info[4][0]).split("%", 1)[0] for info in infos))


def sent_host(url: str) -> str:
    """The host of ``url`` as httpx puts it on the wire: lower case, a non-ASCII name in IDNA 2008
    (``straße.example`` → ``xn--strae-oqa.example``; ``。`` read as a dot), an IPv6 address without brackets.
    The link's own text is not that name: ``getaddrinfo`` and ``ssl`` encode a ``str`` host with Python's
    IDNA 2003 codec (``strasse.example``), so a check made on it looked up one name while the proxy would be
    asked for another, SNI named a third, and in ``Host`` it was no ASCII at all. Every check, the ``Host``
    header and SNI use this one. ``httpx.InvalidURL`` for a host IDNA refuses."""
    return httpx.URL(url).raw_host.decode("ascii")


def shown_link(url: str) -> str:
    """``url`` as messages show it (:func:`link_shown`: no credentials, no query), at most :data:`SHOWN_CHARS`."""
    shown = link_shown(url)
    return shown if len(shown) <= SHOWN_CHARS else shown[:SHOWN_CHARS - 1] + "…"


def basic_auth(username: str, password: str) -> str:
    """The ``Authorization`` value for a link's ``user:password`` (RFC 7617, UTF-8), as httpx sends it."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


def kind_of(address: IPAddress) -> str | None:
    """What makes ``address`` non-public (``"loopback"``, ``"link-local"`` …), or ``None`` if it is public.

    An IPv6 address that wraps an IPv4 one is judged by the IPv4 address it carries: IPv4-mapped
    (``::ffff:a.b.c.d``) and 6to4 (``2002:AABB:CCDD::/48``) wholly, as the IPv4 address; Teredo
    (``2001:0::/32``) by its server's and client's IPv4 addresses, then as ``2001::/32``, non-public in every
    Python's table. The stdlib's own verdict on 6to4 changed between patch releases (gh-113171: 3.11.7
    calls ``2002:7f00:1::``, loopback inside, public; 3.12.4+ and 3.13 call all of 2002::/16 private), so
    without this the same link was refused or fetched depending on the Python it ran on."""
    if isinstance(address, ipaddress.IPv6Address):
        wrapped = address.ipv4_mapped or address.sixtofour
        if wrapped is not None:
            return kind_of(wrapped)
        for inside in address.teredo or ():
            if (kind := kind_of(inside)) is not None:
                return kind
    for kind in ("loopback", "link_local", "private", "multicast", "reserved", "unspecified"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if address.is_global else "non-public"


@dataclass(frozen=True)
class AllowList:
    """The parsed ``CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS``: names, name:port pairs and networks."""

    hosts: frozenset[str] = frozenset()
    host_ports: frozenset[tuple[str, int]] = frozenset()
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> AllowList:
        hosts: set[str] = set()
        host_ports: set[tuple[str, int]] = set()
        networks = []
        for raw in (text or "").split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            host, sep, port = entry.rpartition(":")
            if sep and port.isdigit() and host and (host.count(":") == 0 or host.startswith("[")):
                host_ports.add((_listed(host.strip("[]")), int(port)))
            elif ":" in entry and not entry.startswith("["):
                raise ValueError(f"cannot read {raw.strip()!r} (host, host:port or CIDR)")
            else:
                hosts.add(_listed(entry.strip("[]")))
        return cls(frozenset(hosts), frozenset(host_ports), tuple(networks))

    def allows(self, host: str, port: int, address: IPAddress) -> bool:
        host = host.lower()
        return (host in self.hosts or (host, port) in self.host_ports or (str(address), port) in self.host_ports
                or any(address in net for net in self.networks))


def _listed(name: str) -> str:
    """An allow-list name as :func:`sent_host` gives a link's (``straße.example`` listed matches its link)."""
    if ":" in name:  # an IPv6 address
        return name
    try:
        return sent_host(f"http://{name}/")
    except httpx.InvalidURL as exc:
        raise ValueError(f"cannot read {name!r} ({exc})") from None


@dataclass(frozen=True)
class Hop:
    """One checked request: connect to ``url`` (the address in place of the name) with ``headers``."""

    original: str = field(repr=False)  # the link as given (for resolving relative redirects; may hold a password)
    url: str
    host: str
    headers: dict[str, str] = field(repr=False)  # may hold Authorization
    extensions: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class LinkGuard:
    """Checks a link's destination and pins it to the checked address, or, for a URL ``routes`` send through
    a proxy, leaves the name to the proxy once every check that can be made here passed."""

    allow: AllowList = AllowList()
    resolver: Resolver = system_resolver
    #: the client's proxies (:attr:`…http_client.Client.routes`); none: every hop pinned
    routes: Routes = field(default_factory=Routes)

    def hop(self, url: str, field_name: str, *, redirected_from: str | None = None) -> Hop:
        """The request to make for ``url``, or ``InvalidInput`` on ``field_name`` before any connection."""
        via = f" (redirected from {shown_link(redirected_from)})" if redirected_from else ""
        shown = shown_link(url)  # without credentials or query
        try:
            parts = urlsplit(url)
        except ValueError as exc:  # "Invalid IPv6 URL": a bracket left open
            raise InvalidInput(field_name, f"is not a URL ({exc}): {shown!r}{via}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(field_name, f"must be an http(s) URL or a link of this file server, got {shown!r}{via}")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise InvalidInput(field_name, f"{shown!r} has an invalid port{via}") from None
        try:  # the host as it will be sent (without the link's user:password), which every check sees
            host = sent_host(urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], "", "", "")))
        except httpx.InvalidURL as exc:  # a host httpx cannot send to (one IDNA refuses)
            raise InvalidInput(field_name, f"is not a URL ({exc}): {shown!r}{via}") from None
        try:
            literal: IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        place = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            place += f":{parts.port}"
        plain = urlunsplit((parts.scheme, place, parts.path, parts.query, ""))
        proxied = self.routes.proxy_for(plain) is not None
        unresolved: Exception | None = None
        try:
            found = [literal] if literal is not None else [ipaddress.ip_address(a) for a in self.resolver(host, port)]
        except (LookupError, OSError) as exc:  # through a proxy: it resolves the name, its egress policy decides
            found, unresolved = [], exc
        except ValueError as exc:
            found, unresolved, proxied = [], exc, False  # an answer that is no address: never left to a proxy
        if unresolved is not None and not proxied:
            raise InvalidInput(field_name, f"the host {host!r} of {shown!r} cannot be resolved ({unresolved}){via}")
        if not found and not proxied:
            raise InvalidInput(field_name, f"the host {host!r} of {shown!r} has no address{via}")
        for address in found:
            kind = kind_of(address)
            if kind is not None and not self.allow.allows(host, port, address):
                raise InvalidInput(field_name, (
                    f"{shown!r}{via} points at {address}, a {kind} address; links must point at public hosts "
                    f"(or be allowed in {ALLOWED_HOSTS_ENV})"))
        headers = {"Host": place}
        if parts.username is not None:  # the URL sent has no userinfo: send it as httpx would
            headers["Authorization"] = basic_auth(unquote(parts.username), unquote(parts.password or ""))
        if proxied:  # to the proxy, by name (CONNECT host:port, or the URL in absolute form)
            return Hop(url, plain, host, headers)
        pinned = found[0]
        netloc = f"[{pinned}]" if pinned.version == 6 else str(pinned)
        if parts.port is not None:
            netloc += f":{parts.port}"
        extensions: dict[str, object] = {DIRECT: True}  # to the checked address, whatever HTTPS_PROXY says
        if parts.scheme == "https" and literal is None:
            extensions["sni_hostname"] = host
        return Hop(url, urlunsplit((parts.scheme, netloc, parts.path, parts.query, "")), host, headers, extensions)
