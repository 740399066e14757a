"""Streaming writers for Pull: batches of value tuples -> encoded CSV or JSON bytes.

CSV is written as RFC 4180 (CRLF, minimal quoting); a missing value is an empty field. JSON is an
array of objects, one per line, a missing value left out of its object. Text is encoded with the
requested codec in strict mode, so a character the codec cannot represent is a clear error instead
of a silently corrupted file.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator, Sequence

from connector_ops.kernel.errors import InvalidInput

Rows = list[tuple]


def _encoder(encoding: str) -> Callable[[str, int], bytes]:
    """One incremental encoder per export: a BOM (``utf-8-sig``, ``utf-16``) is written once, at the start."""
    encoder = codecs.getincrementalencoder(encoding)(errors="strict")

    def encode(text: str, first_row: int) -> bytes:
        try:
            return encoder.encode(text)
        except UnicodeEncodeError as exc:
            bad = exc.object[exc.start:exc.end]
            raise InvalidInput(
                "parameters.encoding",
                f"{encoding} cannot represent {bad!r} (in the rows from row {first_row} on); "
                "choose utf-8 or remove the character",
            ) from None

    return encode


def csv_chunks(names: Sequence[str], batches: Iterable[Rows], *, delimiter: str, header: bool,
               encoding: str) -> Iterator[bytes]:
    """Encoded CSV, one chunk per batch of rows (tuples aligned with ``names``)."""
    encode = _encoder(encoding)
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)
    if header:
        writer.writerow(names)
    row_number = 1
    for rows in batches:
        writer.writerows(rows)
        yield encode(buffer.getvalue(), row_number)
        row_number += len(rows)
        buffer.seek(0)
        buffer.truncate()
    if buffer.tell():
        yield encode(buffer.getvalue(), row_number)


def json_chunks(names: Sequence[str], batches: Iterable[Rows], *, encoding: str) -> Iterator[bytes]:
    """An encoded JSON array of objects, one object per line; missing values left out."""
    encode = _encoder(encoding)
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    row_number = 1
    separator = "[\n"
    for rows in batches:
        parts = []
        for values in rows:
            parts.append(separator)
            parts.append(dumps({n: v for n, v in zip(names, values, strict=True) if v is not None}))
            separator = ",\n"
        yield encode("".join(parts), row_number)
        row_number += len(rows)
    yield encode("[]\n" if separator == "[\n" else "\n]\n", row_number)
