"""Keeping secrets out of what people see: reprs of resources, ``%connectors``, log lines.

One rule everywhere: a field whose name says it is secret shows as ``****``; a URL shows with its
password (``user:pw@`` or a ``password=`` style query parameter) replaced by ``****``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "****"
#: names of secret settings and query parameters (``private_key``, not ``allowed_private_hosts``)
SECRET_NAME = re.compile(r"secret|password|passwd|token|api_key|apikey|private_?key|credential", re.IGNORECASE)


#: a database URL's password as SQLAlchemy reads it: everything from the user's colon to the next ``@``,
#: ``/``, ``?`` and ``#`` included (``urlsplit`` would end the address at those and see no password)
_DATABASE_PASSWORD = re.compile(r"^(?P<head>[\w+]+://[^:/]*:)(?P<password>[^@]*)@")


def mask_url(value: str) -> str:
    """``scheme://user:****@host/…?password=****``: a URL with its secrets hidden, the rest readable.

    Web links are read as HTTP clients read them (``urlsplit``); other URLs (the database's) as SQLAlchemy
    does, which takes a password such as ``Ab/Cd#9`` whole."""
    if not value.lower().startswith(("http://", "https://")):
        value = _DATABASE_PASSWORD.sub(lambda m: f"{m['head']}{MASK}@" if m["password"] else m[0], value, count=1)
    parts = urlsplit(value)
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(SECRET_NAME.search(k) for k, _ in pairs):
            query = urlencode([(k, MASK if SECRET_NAME.search(k) else v) for k, v in pairs], safe="*/")
    if netloc == parts.netloc and query == parts.query:
        return value  # nothing more to hide (and urlunsplit would rewrite sqlite:////abs/path)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def masked(field: str, value: Any) -> Any:
    """How a setting may be shown: secret fields masked, URLs with their passwords hidden."""
    if not isinstance(value, str) or value == "":
        return value
    if "://" in value:
        return mask_url(value)
    return MASK if SECRET_NAME.search(field) else value


class RedactedRepr:
    """Mixin for pydantic models (Dagster resources): ``repr()`` never shows a secret."""

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():  # type: ignore[misc]
            yield name, (masked(name, value) if name else value)
