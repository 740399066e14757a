"""A JSON array laid out one object per line, handed on as NDJSON, so that it can take the columnar path
(:mod:`.ndjson_fast`). It is the layout Pull's JSON export writes, and most exports and ``jq``-style tools:

    [
    {"id": "1", "name": "Ann"},
    {"id": "2", "name": "Bob"}
    ]

The bytes pass through unchanged but for the brackets and the commas between items (dropped, or made
spaces where every line is an item and its comma). A comma is taken for a separator only where it follows
an object's ``}`` and ends its line (spaces, tabs and CRs aside): a raw line break never occurs inside a
JSON string, so such a comma is always between values. Any other layout — an object over several lines,
items side by side on one line, a comma where no item ends — is left as it is and so is not NDJSON
afterwards: Arrow's read or the store's line audit fails it, and the row reader reads the file. The faults
that dropping brackets and separators could hide are caught here (:class:`NotOneObjectPerLine`): two items
without a comma between them, a comma after the last item, anything but an item before the closing bracket
or after it; so is a line too long to hold.

An array with its items side by side on one line (``[{…}, {…}]``, what ``json.dump`` and ``JSON.stringify``
write) is first laid out one item per line by :class:`ItemsSplit`.
"""

from __future__ import annotations

import codecs
import re
from typing import IO

from connector_ops.kernel.streams import UTF8, UTF8_BOM, Transformed, WholePieces, past_bom

_SPACE = b" \t\r\n"
#: what may come before an array's ``[``: one BOM first (dropped by :func:`~connector_ops.kernel.streams.past_bom`
#: before either parser reads the array), then blanks
LEADING = UTF8_BOM + _SPACE
#: a separator: an object's closing brace, a comma, the end of the line (both kept, the comma dropped)
_SEPARATOR = re.compile(rb"\}[ \t\r]*,(?=[ \t\r]*\n)")
#: an object ending its line without a separator
_UNSEPARATED = re.compile(rb"\}[ \t\r]*\n")
_NEWLINE, _COMMA, _BRACE, _BLANK = b"\n,} "
#: a line longer than this is left to the row reader, so what waits here stays bounded
LONGEST_LINE = 8 << 20


class NotOneObjectPerLine(ValueError):
    """The bytes are not a JSON array of objects laid out one per line: the row reader reads the file."""


def _commas_blanked(lines: bytes) -> bytearray | None:
    """The usual layout, each line an item and its comma (``…},\\n``), with those commas made spaces; ``None``
    for any other. Found and changed by numpy, at C speed: 1.1 ms a MiB, against 2.7 ms for ``bytes.count``
    twice and ``bytes.replace`` (the first take of this module spent 0.4 s of a 1M-row Push there)."""
    import numpy as np

    out = bytearray(lines)
    view = np.frombuffer(out, dtype=np.uint8)
    ends = np.flatnonzero(view == _NEWLINE)
    if not len(ends) or ends[0] < 2 or not ((view[ends - 1] == _COMMA) & (view[ends - 2] == _BRACE)).all():
        return None
    view[ends - 1] = _BLANK
    return out


#: how ``json.dumps`` and ``JSON.stringify`` separate items by default
_SEPARATORS = (b"}, {", b"},{")
#: how much of a file :func:`is_array` and :func:`separator_of` look at: the first item and its separator
LAYOUT_PEEK = 1 << 20


def separator_of(head: bytes) -> bytes | None:
    """The separator between items (``}, {`` or ``},{``) if the array starting with ``head`` holds its items
    side by side on its first line (``json.dump``'s and ``JSON.stringify``'s default layout) rather than one
    per line; then :class:`ItemsSplit` lays it out. ``None`` for any other layout."""
    first_line = head.lstrip(LEADING).split(b"\n", 1)[0]
    return next((separator for separator in _SEPARATORS if separator in first_line), None)


class ItemsSplit(WholePieces):
    """A JSON array whose items sit side by side, with a line break after each ``separator``'s comma (the one
    the first line uses): one object per line, for :class:`ArrayLines`. A separator spelled otherwise leaves
    items side by side, and one inside a string gets a raw line break, which no JSON string may hold: either
    way the line is no longer one object, and the row reader reads the file."""

    longest = LONGEST_LINE

    def __init__(self, stream: IO[bytes], separator: bytes) -> None:
        super().__init__(stream)
        self._separator, self._split = separator, line_broken(separator)

    def _cut(self, data: bytes) -> int:
        return max(data.rfind(b"}"), 0)  # from the last ``}``: a separator may straddle two reads

    def _made(self, pieces: bytes) -> bytes:
        return pieces.replace(self._separator, self._split)

    def _too_long(self) -> None:
        raise NotOneObjectPerLine(f"an item longer than {self.longest} bytes")


def line_broken(separator: bytes) -> bytes:
    """``separator`` with a line break after its comma: in place of the blank that follows the comma where
    there is one (``}, {`` → ``},\\n{``), so that the bytes keep their length: ``bytes.replace`` is then twice as
    fast (1M items, 178 MB: 0.12 s against 0.24 s). Inserted otherwise (``},{`` → ``},\\n{``)."""
    comma = separator.index(b",") + 1
    blank = separator[comma:comma + 1] in (b" ", b"\t")
    return separator[:comma] + b"\n" + separator[comma + blank:]


def is_array(head: bytes) -> bool:
    """Does a file starting with ``head`` hold a JSON array? (The row reader's test too, so both paths agree.)"""
    return head.removeprefix(UTF8_BOM).lstrip(_SPACE).startswith(b"[")


def array_head(start: bytes, encoding: str) -> bytes | None:
    """``start``, a file's first bytes in ``encoding``, as UTF-8 if the file holds a JSON array, else ``None``:
    an array in another encoding is read as UTF-8 (:func:`~connector_ops.kernel.streams.as_utf8`), as NDJSON
    is, and its layout is judged on that. A byte the encoding lacks is replaced here, for the judging only:
    the read itself fails on it and names its line."""
    if encoding not in UTF8:
        start = codecs.getincrementaldecoder(encoding)("replace").decode(start).encode("utf-8", "replace")
    return start if is_array(start) else None


class ArrayLines(Transformed):
    """``stream`` (a JSON array laid out one object per line, a BOM before it dropped) as NDJSON, whole lines at
    a time."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(past_bom(stream))
        self._opened = False  # has the opening bracket been passed
        self._held = b""  # the last line with anything in it, and what follows (before the bracket: what precedes it)
        self._last = b""  # the last byte of the lines handed on, blanks aside, as the file had it
        self._unended = False  # they end with an object and no separator: only the closing bracket may follow

    def _take(self, chunk: bytes) -> None:
        if not chunk:
            self._end()
            return
        data = self._held + chunk
        if not self._opened:
            body = data.lstrip(_SPACE)  # a BOM after blanks, or a second one, is "not an array": the parser refuses it
            if not body:
                self._held = data
                self._bounded()
                return
            if not body.startswith(b"["):
                raise NotOneObjectPerLine("not a JSON array")
            self._opened, data = True, body[1:]
        # the last line with anything in it waits, ended or not: it may hold the closing bracket
        end = data.rfind(b"\n") + 1
        if end > 1 and data[end - 2] not in _SPACE:  # the usual: that line is the last whole one, found in place
            cut = data.rfind(b"\n", 0, end - 1) + 1
        else:  # past trailing blanks and empty lines, on a copy of the lines (0.05 s per 178 MB read this way)
            cut = data[:end].rstrip(_SPACE).rfind(b"\n") + 1
        lines, self._held = data[:cut], data[cut:]
        self._bounded()
        if lines:
            self._out = memoryview(self._separated(lines))

    def _end(self) -> None:
        self._ended = True
        if not self._opened:
            raise NotOneObjectPerLine("not a JSON array")
        tail = self._held.rstrip(_SPACE)
        if not tail.endswith(b"]"):
            raise NotOneObjectPerLine("the array does not end with its closing bracket")
        body = tail[:-1].rstrip(_SPACE)
        cut = body.rfind(b"\n") + 1  # the line before the bracket, after any lines still held before it
        before, last = self._separated(body[:cut]), body[cut:]
        if last and self._unended:
            raise NotOneObjectPerLine("two items without a comma between them")
        if (last[-1:] or self._last) != b"}":  # a comma after the last item, or no item at all
            raise NotOneObjectPerLine("the array does not end with an object")
        self._out = memoryview(before + last + b"\n")

    def _separated(self, lines: bytes) -> bytes | bytearray:
        """Whole lines with their separators dropped. Every object they end must end with a separator but
        the last one, which then may only be followed by the closing bracket (``_unended``)."""
        if not lines:
            return lines
        if not self._unended:
            plain = _commas_blanked(lines)
            if plain is not None:
                self._last = b","
                return plain
        kept = lines.rstrip(_SPACE)
        if not kept:
            return lines
        bare = _UNSEPARATED.search(lines)
        if self._unended or (bare is not None and bare.start() < len(kept) - 1):
            raise NotOneObjectPerLine("two items without a comma between them")
        self._unended, self._last = bare is not None, kept[-1:]
        return _SEPARATOR.sub(b"}", lines)

    def _bounded(self) -> None:
        if len(self._held) > LONGEST_LINE:
            raise NotOneObjectPerLine(f"a line longer than {LONGEST_LINE} bytes")
