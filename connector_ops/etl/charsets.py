"""Charsets of platform files' ``contentType``, both ways.

Push: the encoding a Push reads a file in is ``parameters.encoding`` when given, else the ``charset`` its
``contentType`` names (``text/csv; charset=ISO-8859-1``, ``application/json; charset=UTF-16``: what Pull writes
for an export in another encoding than UTF-8, and what many servers send), else the default ``utf-8-sig``.
So Pull's own export in another encoding pushes back from its descriptor alone. A charset naming UTF-8 keeps
the default, which also drops a BOM; one Python does not know is a 400 naming it, since reading the file in
another encoding than its label says would store garbage or fail further on.

Pull: the ``charset`` it names is IANA's preferred MIME name. Pull once wrote Python's codec name
(``utf-16-le``, ``euc_jp``, ``mac-roman``), which browsers and most HTTP clients outside Python do not know;
IANA's registry names them ``UTF-16LE``, ``EUC-JP``, ``macintosh``. Every label here is also one Python's
``codecs.lookup`` finds (a test checks it), so a Push reading the charset back gets the same codec. A codec
IANA names by a label Python does not know (``cp932``: ``Windows-31J``; ``cp874``: ``windows-874``; ``cp858``:
``IBM00858``; ``cp1140``: ``IBM01140``), or that IANA has no name for (``iso8859-11``, ``mac-cyrillic``,
``cp949``), keeps its Python name.
"""

from __future__ import annotations

import codecs

from connector_ops.etl import models as m
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.limits import text_encoding
from connector_ops.kernel.media_types import charset_parameter
from connector_ops.kernel.streams import UTF8

#: Python's canonical codec name (``codecs.lookup(…).name``) -> IANA's preferred MIME name (or its name)
IANA_NAMES = {
    "ascii": "US-ASCII",
    "utf-7": "UTF-7",
    "utf-16": "UTF-16", "utf-16-le": "UTF-16LE", "utf-16-be": "UTF-16BE",
    "utf-32": "UTF-32", "utf-32-le": "UTF-32LE", "utf-32-be": "UTF-32BE",
    **{f"iso8859-{n}": f"ISO-8859-{n}" for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 14, 15, 16)},
    **{f"cp125{n}": f"windows-125{n}" for n in range(9)},
    **{f"cp{n}": f"IBM{n}" for n in ("037", "273", "424", "437", "500", "775", "850", "852", "855", "857",
                                     "860", "861", "862", "863", "864", "865", "866", "869", "1026")},
    "koi8-r": "KOI8-R", "koi8-u": "KOI8-U", "mac-roman": "macintosh", "hp-roman8": "hp-roman8",
    "ptcp154": "PTCP154", "tis-620": "TIS-620",
    "shift_jis": "Shift_JIS", "euc_jp": "EUC-JP", "iso2022_jp": "ISO-2022-JP", "iso2022_jp_2": "ISO-2022-JP-2",
    "euc_kr": "EUC-KR", "iso2022_kr": "ISO-2022-KR",
    "gb2312": "GB2312", "gbk": "GBK", "gb18030": "GB18030", "hz": "HZ-GB-2312",
    "big5": "Big5", "big5hkscs": "Big5-HKSCS",
}


def charset_label(encoding: str) -> str:
    """The ``charset`` parameter's value for text in ``encoding`` (any name Python knows)."""
    name = codecs.lookup(encoding).name
    return IANA_NAMES.get(name, name)


def charset_suffix(encoding: str) -> str:
    """``"; charset=…"`` for a content type, or ``""`` for UTF-8 (with or without a BOM), which needs none."""
    name = codecs.lookup(encoding).name
    return "" if name in UTF8 else f"; charset={charset_label(name)}"


def with_charset(params: m.PushParameters, content_type: str) -> m.PushParameters:
    """``params`` reading the file in the charset ``content_type`` names, unless they name an encoding."""
    charset = charset_parameter(content_type)
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
