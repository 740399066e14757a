"""Keeping secrets out of what people see: reprs of resources, ``%connectors``, log lines.

One rule everywhere: a field whose name says it is secret shows as ``****``, unless its value is a URL of a
kind we read (a web or database URL with its host); a URL shows with its password (``user:pw@`` or a
``password=`` style query parameter) replaced by ``****``. A secret that merely holds ``://``
(``k3y://Zq9``) is a secret, not a URL: it is masked whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from connector_ops.kernel.leaves import leaves

MASK = "****"
#: names of secret settings and query parameters (``private_key``, not ``allowed_private_hosts``)
SECRET_NAME = re.compile(r"secret|password|passwd|token|api_key|apikey|private_?key|credential", re.IGNORECASE)


#: a database URL's password as SQLAlchemy reads it: everything from the user's colon to the next ``@``,
#: ``/``, ``?`` and ``#`` included (``urlsplit`` would end the address at those and see no password)
_DATABASE_PASSWORD = re.compile(r"^(?P<head>[\w+]+://[^:/]*:)(?P<password>[^@]*)@")


#: where a list of URLs (Celery's failover brokers, ``sentinel://:pw@h1;sentinel://:pw@h2``) starts its next one
_NEXT_URL = re.compile(r";(?=[A-Za-z][\w+.-]*://)")


def mask_url(value: str) -> str:
    """``scheme://user:****@host/…?password=****``: a URL with its secrets hidden, the rest readable.

    Web links are read as HTTP clients read them (``urlsplit``); other URLs (the database's) as SQLAlchemy
    does, which takes a password such as ``Ab/Cd#9`` whole. A ``;``-separated list of URLs, as Celery reads
    ``CONNECTOR_OPS_CELERY_BROKER_URL``, is masked URL by URL: the first one's alone hid no other's password.
    The whole value is masked first, so a database password holding ``;x://`` is never split apart."""
    shown = _mask_one_url(value)
    if not _NEXT_URL.search(shown):
        return shown
    return ";".join(_mask_one_url(url) for url in _NEXT_URL.split(shown))


def _mask_one_url(value: str) -> str:
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


#: the URL schemes a secret setting may hold as a URL (a database URL's driver, ``+psycopg``, aside)
_URL_SCHEMES = frozenset({"http", "https", "postgresql", "postgres", "sqlite"})


def _is_url_we_read(value: str) -> bool:
    """Whether ``value`` is a web or database URL with its host (or SQLite's file path): only then may a
    secret show as a URL. Telling by ``://`` alone showed a password such as ``Tr0ub4dor://x`` in clear."""
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.split("+", 1)[0] not in _URL_SCHEMES:
        return False
    if scheme.startswith("sqlite"):
        return rest.startswith("/")  # sqlite:///relative.db or sqlite:////abs.db
    masked_value = mask_url(value)  # a database password may hold / # ? that urlsplit would end the host at
    try:
        return bool(urlsplit(masked_value).hostname)
    except ValueError:
        return False


def mask_secret(value: str) -> str:
    """A secret setting's value as it may be shown: a URL we read with its password hidden, anything else
    ``****`` whole."""
    return mask_url(value) if _is_url_we_read(value) else MASK


def masked(field: str, value: Any) -> Any:
    """How a setting may be shown: secret fields masked, URLs with their passwords hidden."""
    if not isinstance(value, str) or value == "":
        return value
    if SECRET_NAME.search(field):
        return mask_secret(value)
    return mask_url(value) if "://" in value else value


class RedactedRepr:
    """Mixin for pydantic models (Dagster resources): ``repr()`` never shows a secret."""

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():  # type: ignore[misc]  # a mixin: the model after it has it
            yield name, (masked(name, value) if name else value)


def _texts(value: Any) -> Iterator[str]:
    """The texts ``value`` may show as in a message: each string (quoted first: ``'sk_live_…' is not a valid
    e-mail address``, then as it is) and number inside it."""
    for leaf in leaves(value):
        if isinstance(leaf, str) and leaf:
            yield repr(leaf)
            yield leaf
        elif isinstance(leaf, int | float) and not isinstance(leaf, bool):
            yield str(leaf)


def named_instead(message: str, value: Any, name: str) -> str:
    """``message`` about ``value`` (a field read from a secret place, the environment) with ``name`` where it
    showed the value: ``'sk_live_…' is not a valid e-mail address`` -> ``the value of ${env.TO} is not a valid
    e-mail address``. A message that did not show it names it first (``Input should be …`` -> ``the value of
    ${env.ID} should be …``), so the reader still knows which value was wrong. Matched without regard to case
    (a check may show the value normalised), and a short value only as a whole word, so ``1`` leaves ``10``
    alone while a secret is hidden wherever it shows."""
    texts = sorted(set(_texts(value)), key=len, reverse=True)
    if not texts:
        return f"{name}: {message}"
    pattern = "|".join(_whole(text) for text in texts)
    shown, count = re.subn(pattern, lambda _match: name, message, flags=re.IGNORECASE)
    if count:
        return shown
    if message.startswith("Input "):
        return f"{name} {message.removeprefix('Input ')}"
    return f"{name}: {message}"


def _whole(text: str) -> str:
    """A pattern of ``text``; one shorter than 4 characters a word character cannot continue on either side."""
    if len(text) >= 4:
        return re.escape(text)
    before = r"(?<!\w)" if re.match(r"\w", text) else ""
    after = r"(?!\w)" if re.search(r"\w$", text) else ""
    return f"{before}{re.escape(text)}{after}"
