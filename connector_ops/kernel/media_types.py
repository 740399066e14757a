"""Reading a platform file's ``contentType`` (``text/csv; charset="ISO-8859-1"``): its media type and its
parameters (``charset``, Pull's ``delimiter``), one way for every format test (TSV, NDJSON, Parquet), for
Push's charset and for its delimiter, which had each split the header their own way. A parameter's value is
a token, a quoted string (``delimiter=";"``: a ``;`` or ``,`` must be quoted) or RFC 8187's
``name*=UTF-8''%C2%A7`` for characters a header cannot carry as they are."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

#: RFC 9110's token: what a parameter's name, and a value needing no quotes, is made of
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
#: ``; name=value``, the value a quoted string (``;`` inside it included) or anything up to the next ``;``
_PARAMETER = re.compile(rf'\s*;\s*({_TOKEN})\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)')


def media_type(content_type: str) -> str:
    """The media type without its parameters, lower-cased (``Text/CSV; charset=x`` → ``text/csv``); ``""``
    for none."""
    return content_type.split(";", 1)[0].strip().lower()


def parameter(content_type: str, name: str) -> str | None:
    """The value of the parameter ``name`` (lower case; matched case-insensitively) of a media type, its
    quotes and backslash escapes undone, or decoded from ``name*=charset'lang'%XX``; ``None`` without one."""
    for found in _PARAMETER.finditer(content_type, content_type.find(";") if ";" in content_type else 0):
        key, raw = found.group(1).lower(), found.group(2).strip()
        if key == name:
            return re.sub(r"\\(.)", r"\1", raw[1:-1]) if raw.startswith('"') else raw
        if key == f"{name}*":
            charset, _, rest = raw.partition("'")
            try:
                return unquote(rest.partition("'")[2], encoding=charset or "utf-8", errors="strict")
            except (LookupError, UnicodeDecodeError):
                return None
    return None


def parameter_text(name: str, value: str) -> str:
    """``; name=value`` for a content type: a token as it is, other printable ASCII quoted, anything else
    (a character outside ASCII, a control character) as ``name*=UTF-8''…``."""
    if re.fullmatch(_TOKEN, value):
        return f"; {name}={value}"
    if value.isascii() and value.isprintable():
        escaped = re.sub(r'([\\"])', r"\\\1", value)
        return f'; {name}="{escaped}"'
    return f"; {name}*=UTF-8''{quote(value, safe='')}"


def charset_parameter(content_type: str) -> str | None:
    """A media type's ``charset`` (``text/csv; charset="UTF-16"`` → ``UTF-16``), whatever the type (a
    compressed export's ``application/gzip; charset=ISO-8859-1`` too), else ``None``."""
    return (parameter(content_type, "charset") or "").strip() or None
