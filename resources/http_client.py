"""The HTTP client every connector uses: ``httpx.Client`` whose requests reach the logs without secrets.

httpx logs each request at INFO (``HTTP Request: GET https://…?sig=… "HTTP/1.1 200 OK"``) and httpcore, at
DEBUG, each response's headers (a redirect's ``Location`` with its token). A platform file's link may be a
signed URL or carry a password, a Drive upload session's URL is a capability, and any logging set-up that
shows INFO (Dagster capturing ``httpx``, a notebook's ``basicConfig``) would store them. While one of our
clients sends, those loggers show every URL as error messages do (:func:`link_shown`: scheme, host and
path, ``?…`` for a query); other clients' records in the same process are left as they are.

:func:`make_client` makes every connector's client: its requests go through the environment's proxies
(``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``: :mod:`.proxies`) with the connector's
connection retries, which httpx alone gives only to clients without retries.
"""

from __future__ import annotations

import contextvars
import logging
import re
from collections.abc import Iterable
from typing import Any

import httpx

from connector_ops.kernel.errors import host_of, link_shown
from connector_ops.kernel.fence import check_fence
from connector_ops.resources.proxies import ProxiedTransport, Routes

#: set while one of our clients sends (records are made in the sending thread, so a context variable
#: tells ours from another library's)
_SENDING = contextvars.ContextVar("connector_ops_http_sending", default=False)
#: methods that change nothing on the server: never fenced (:mod:`connector_ops.kernel.fence`)
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_URL = re.compile(r"""https?://[^\s'"<>]+""", re.IGNORECASE)
#: a relative redirect in httpcore's header list: ``(b'Location', b'/next?token=…')``
_RELATIVE_LOCATION = re.compile(r"""(\(b'location', b')(/[^'?]*)\?[^']*'""", re.IGNORECASE)


class _LinksAsShown(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if _SENDING.get():
            text = record.getMessage()
            shown = _RELATIVE_LOCATION.sub(r"\1\2?…'", _URL.sub(lambda m: link_shown(m[0]), text))
            if shown != text:
                record.msg, record.args = shown, ()
        return True


_FILTER = _LinksAsShown()
# a logger's filters see only its own records, not its children's: httpcore logs under these names
for _name in ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy",
              "httpcore.socks"):
    if _FILTER not in logging.getLogger(_name).filters:
        logging.getLogger(_name).addFilter(_FILTER)


class Client(httpx.Client):
    """``httpx.Client`` whose requests' URLs reach httpx's and httpcore's log lines as messages show them."""

    #: the proxies its requests go through (:func:`make_client`), for a caller that must know before it
    #: sends (a link's check, :mod:`.link_guard`)
    routes: Routes = Routes()

    def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        if request.method not in _SAFE_METHODS:  # a request that may change something is a commit
            check_fence(f"{request.method} request to {host_of(request.url)}")
        token = _SENDING.set(True)
        try:
            return super().send(request, **kwargs)
        finally:
            _SENDING.reset(token)


def make_client(*, retries: int = 0, direct: Iterable[str] = (), **settings: Any) -> Client:
    """A :class:`Client` (``settings``: httpx's) whose requests go through the proxies the environment names
    now, when it is made (a client lives as long as its resource: a variable changed later is read by the
    next one), each route retrying a connection that could not be opened ``retries`` times. ``direct``:
    httpx mount keys (``all://metadata.google.internal``) that go straight out whatever ``NO_PROXY`` says."""
    routes = Routes.from_environment(direct)
    client = Client(transport=ProxiedTransport(routes, retries), **settings)
    client.routes = routes
    return client
