"""The start of a CSV file for Push's columnar path: BOM, ignored lines and header read in Python, exactly
as :func:`.readers.read_csv` reads them, on the first bytes; the data rows are left as bytes for the store
(``create_from_csv``: Arrow's C parser behind a check of the quoting).

A file in another encoding is read as UTF-8 (:func:`~connector_ops.kernel.streams.as_utf8`, decoded as
the slow path decodes it), so its rows take the same path. Files this cannot start exactly like the slow
path (a delimiter of more than one byte in UTF-8, a BOM under plain ``utf-8`` or a U+FEFF an encoding
keeps, a U+FEFF starting the first data row, no header row, bytes that are not in the encoding in the first
lines) get ``None``: Push reads them with the ``csv`` module.
"""

from __future__ import annotations

import codecs
import csv
from typing import IO

from connector_ops.etl.physical_lines import Head, skipped
from connector_ops.etl.readers import named_columns
from connector_ops.kernel.streams import as_utf8


def data_rows(stream: IO[bytes], *, delimiter: str, lines_to_ignore: int, header: bool,
              schema: list[str] | None, encoding: str) -> tuple[list[str], IO[bytes]] | None:
    """``(column names, the data rows' bytes)``, or ``None`` when the slow path must read this file."""
    if len(delimiter.encode()) != 1:
        return None
    stream, encoding = as_utf8(stream, encoding)
    head = Head(stream)
    head.more()
    if head.data.startswith(codecs.BOM_UTF8):
        if encoding != "utf-8-sig":
            return None  # then the BOM is a character of the text: its rules are the slow path's
        head.pos = len(codecs.BOM_UTF8)
    try:
        skipped(head, lines_to_ignore)
        columns = next((r for r in csv.reader(head.lines(), delimiter=delimiter, strict=True) if r), None) \
            if header else None
    except (UnicodeDecodeError, csv.Error):
        return None
    if not columns and schema is None:
        return None
    columns = named_columns(columns, schema)
    while len(head.data) - head.pos < len(codecs.BOM_UTF8) and head.more():
        pass
    if head.data.startswith(codecs.BOM_UTF8, head.pos):
        return None  # a U+FEFF starting the first data row is a character, which Arrow would drop as a BOM
    return columns, head.rest()
