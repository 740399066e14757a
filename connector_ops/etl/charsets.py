"""The encoding a Push reads a file in: ``parameters.encoding`` when given, else the ``charset`` its
``contentType`` names (``text/csv; charset=iso8859-1``, ``application/json; charset=utf-16``: what Pull writes
for an export in another encoding than UTF-8, and what many servers send), else the default ``utf-8-sig``.

So Pull's own export in another encoding pushes back from its descriptor alone. A charset naming UTF-8 keeps
the default, which also drops a BOM; one Python does not know is a 400 naming it, since reading the file in
another encoding than its label says would store garbage or fail further on.
"""

from __future__ import annotations

from connector_ops.etl import models as m
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.limits import text_encoding


def content_charset(content_type: str) -> str | None:
    """The ``charset`` parameter of a media type (``text/csv; charset="UTF-16"`` → ``UTF-16``), else ``None``."""
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').strip() or None
    return None


def with_charset(params: m.PushParameters, content_type: str) -> m.PushParameters:
    """``params`` reading the file in the charset ``content_type`` names, unless they name an encoding."""
    charset = content_charset(content_type)
    if charset is None or "encoding" in params.model_fields_set:
        return params
    try:
        encoding = text_encoding(charset)
    except ValueError as exc:
        raise InvalidInput("platformFile.contentType", f"names charset {charset!r}, which Push cannot read ({exc}); "
                                                       "set parameters.encoding to the file's encoding") from None
    if encoding == "utf-8":  # the default, utf-8-sig, reads it and drops a BOM too
        return params
    return params.model_copy(update={"encoding": encoding})
