"""Which remote platform-file links may be fetched: public destinations only, checked on every hop.

A platform-file descriptor comes from whoever calls the action, and a component inside a data platform
can reach metadata services, databases and admin pages no outside caller should read through it. So a
link that is not our own file server's is fetched only if every address its host resolves to is public
(not loopback, private, link-local, shared, reserved or multicast). The name — as httpx will send it
(:func:`sent_host`: IDNA 2008 for a non-ASCII one) — is resolved here, the addresses checked, and the
connection made to the checked address (the name goes in the ``Host`` header and TLS's SNI): a second lookup
by the HTTP client could answer differently (DNS rebinding). Redirects are followed by :class:`LinkGuard`'s
caller one hop at a time, each hop checked the same way.

A host is read once (:func:`canonical_host`) and every check, ``NO_PROXY`` and the request see that reading:
an address written otherwise (``127.0.0.1.``, ``0x7f.1``, ``2130706433``) is that address; a name loses one
trailing dot; a host that other parsers would read as another one — percent-encoded, not letters, digits,
``-`` and ``_``, or ending in a number without being an IPv4 address — is refused.

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
import re
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
#: one label of a host name: letters, digits, ``-`` inside (RFC 1123), and ``_`` (internal names have it; no
#: parser reads it otherwise)
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
#: a last label that makes a URL parser (WHATWG: "ends in a number") read the whole host as IPv4
_NUMBER = re.compile(r"[0-9]+|0x[0-9a-f]*")


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


def canonical_host(url: str) -> tuple[str, IPAddress | None]:
    """The host of ``url`` as it is checked and sent — :func:`sent_host`'s, one trailing dot dropped, an
    IPv4 address in dotted-quad form — and the address it is, if it is one; ``ValueError`` saying why a host
    is refused.

    A proxy does not read a host as ``ipaddress`` does: Squid drops a trailing dot (``10.1.2.3.``), a WHATWG
    URL parser reads a host whose last label is a number as IPv4 in inet_aton's forms (``127.1``, ``0x7f.1``,
    ``2130706433``, ``0177.0.0.1``) and percent-decodes it (``%31%32%37.0.0.1``). Such a host was no address
    here, did not resolve here, and so went to the proxy, which connected to the address. So: a host that
    ends in a number must be an IPv4 address in one of inet_aton's forms (a literal, checked as one) or it is
    refused; a name must be letters, digits, ``-`` and ``_`` in dot-separated labels (after IDNA), so nothing
    percent-encoded or otherwise read differently elsewhere. ``NO_PROXY``, the allow list and ``Host`` see the
    same host (``files.test.`` is ``files.test``)."""
    host = sent_host(url)
    if ":" in host:  # an IPv6 address (httpx checked the brackets hold one)
        return host, ipaddress.ip_address(host)
    if "%" in host:
        raise ValueError("it is percent-encoded (or holds a character httpx would percent-encode)")
    name = host.removesuffix(".")
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError("it is no host name (letters, digits, '-' and '_', in labels separated by dots)")
    if not _NUMBER.fullmatch(labels[-1]):
        return name, None
    try:
        address = ipaddress.IPv4Address(socket.inet_aton(name))
    except OSError:
        raise ValueError("it ends in a number, so URL parsers read it as an IPv4 address, and it is none") from None
    return str(address), address


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
    """An allow-list name as :func:`canonical_host` gives a link's (``straße.example`` or ``files.test.``
    listed matches its link)."""
    if ":" in name:  # an IPv6 address
        return name
    try:
        return canonical_host(f"http://{name}/")[0]
    except (httpx.InvalidURL, ValueError) as exc:
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
            host, literal = canonical_host(urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], "", "", "")))
        except httpx.InvalidURL as exc:  # a host httpx cannot send to (one IDNA refuses)
            raise InvalidInput(field_name, f"is not a URL ({exc}): {shown!r}{via}") from None
        except ValueError as exc:
            raise InvalidInput(field_name, f"the host of {shown!r} is refused: {exc}{via}") from None
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
