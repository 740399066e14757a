"""Reading a platform file's ``contentType`` (``text/csv; charset="ISO-8859-1"``): its media type and its
``charset`` parameter, one way for every format test (TSV, NDJSON, Parquet) and for Push's charset, which had
each split the header their own way."""

from __future__ import annotations


def media_type(content_type: str) -> str:
    """The media type without its parameters, lower-cased (``Text/CSV; charset=x`` → ``text/csv``); ``""``
    for none."""
    return content_type.split(";", 1)[0].strip().lower()


def charset_parameter(content_type: str) -> str | None:
    """The ``charset`` parameter of a media type (``text/csv; charset="UTF-16"`` → ``UTF-16``), whatever the
    type (a compressed export's ``application/gzip; charset=ISO-8859-1`` too), else ``None``."""
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').strip() or None
    return None
