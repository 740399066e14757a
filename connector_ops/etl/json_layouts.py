"""The layouts of a JSON array that can be handed on one item per line (:class:`.json_array_lines.ArrayLines`
takes it from there, for the columnar path or the row reader's line parser), and the one that needs
unindenting first.

* one object per line (Pull's JSON export, most exports): as it is;
* items side by side on one line (``json.dump``, ``JSON.stringify``): split (:class:`.json_array_lines.ItemsSplit`);
* pretty-printed (``json.dump(rows, indent=2)``, ``JSON.stringify(rows, null, 2)``): its line breaks
  dropped (:class:`Joined`), then split at ``},`` + the items' indentation + ``{``::

    [                                [  {    "id": 1,    "name": "Ann"  },  {    "id": 2, ...
      {
        "id": 1,
        "name": "Ann"
      },
      ...

Dropping a line break may only ever drop whitespace between tokens, so each one is checked first, and the
file goes to the next reader (:class:`NotPretty`) unless every line break

* stands an even number of quotes into the bytes, escaped quotes aside, so outside any string (a line break
  inside one is not JSON, and dropping it would make a broken file read); and
* has a space, a tab or one of ``[]{},:`` on one side or the other, so that no two tokens are joined
  (``tru`` and ``e``, ``1`` and ``2``); a CR only ever comes right before it.

Any other layout is handed on as it is, and the line parsers refuse it.
"""

from __future__ import annotations

import io
from typing import IO

import numpy as np

from connector_ops.etl.json_array_lines import LEADING, LONGEST_LINE, ItemsSplit, separator_of
from connector_ops.etl.json_scalars import escaped
from connector_ops.kernel.streams import WholePieces

_NEWLINE, _CR, _QUOTE, _SPACE_BYTE = b'\n\r" '
#: what keeps two tokens apart when a line break between them goes
_APART = np.zeros(256, dtype=bool)
_APART[list(b"[]{},: \t")] = True


class NotPretty(ValueError):
    """A line break that may not be whitespace between tokens: the row reader reads the file."""


def item_indentation(head: bytes) -> bytes | None:
    """The indentation of the items of the array starting with ``head`` if it is pretty-printed (``[``, a line
    break, the indentation, ``{`` and a line break), else ``None``."""
    body = head.lstrip(LEADING)
    if not body.startswith(b"["):
        return None
    after = body[1:].lstrip(b" \t\r")
    if not after.startswith(b"\n"):
        return None
    item = after[1:]
    indentation = item[:len(item) - len(item.lstrip(b" \t"))]
    rest = item[len(indentation):]
    return indentation if rest.startswith(b"{") and rest[1:].lstrip(b" \t")[:1] in (b"\n", b"\r") else None


def joined(block: bytes, before: int) -> bytes:
    """``block`` (whole lines: it ends where a line break starts, or at the end of the file) without its line
    breaks; ``before`` is the byte before the block (a space at the start)."""
    v = np.frombuffer(block, dtype=np.uint8)
    n = len(v)
    breaks = np.flatnonzero(v == _NEWLINE)
    if not len(breaks):
        return block
    quotes = np.flatnonzero(v == _QUOTE)
    if b"\\" in block:  # a quote may be escaped
        quotes = quotes[~escaped(v, quotes)]
    if len(quotes) % 2 or (np.searchsorted(quotes, breaks) % 2).any():
        raise NotPretty("a line break inside a string")
    has_cr = b"\r" in block  # without one, a count and a byte-by-byte translate are spared (215 MB: 0.2 s)
    if has_cr:
        cr = (breaks > 0) & (v[np.maximum(breaks - 1, 0)] == _CR)
        if block.count(b"\r") != cr.sum():
            raise NotPretty("a CR that does not end a line")
        starts = breaks - cr
    else:
        starts = breaks
    previous = np.where(starts > 0, v[np.maximum(starts - 1, 0)], before)
    following = np.where(breaks + 1 < n, v[np.minimum(breaks + 1, n - 1)], _NEWLINE)  # past the block: a break
    if not (_APART[previous] | _APART[following]).all():
        raise NotPretty("a line break between two tokens")
    return block.translate(None, b"\r\n") if has_cr else block.replace(b"\n", b"")


class Joined(WholePieces):
    """``stream`` (a pretty-printed JSON array) without its line breaks (:func:`joined`)."""

    longest = LONGEST_LINE

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(stream)
        self._before = _SPACE_BYTE  # the byte before the pieces to come

    def _cut(self, data: bytes) -> int:
        cut = max(data.rfind(b"\n"), 0)  # at the last line break, which waits with its indentation
        return cut - (cut > 0 and data[cut - 1] == _CR)  # a CR goes with its line break

    def _made(self, pieces: bytes) -> bytes:
        out = joined(pieces, self._before)
        self._before = pieces[-1]
        return out

    def _too_long(self) -> None:
        raise NotPretty(f"a line longer than {self.longest} bytes")


def items_per_line(stream: IO[bytes], head: bytes, size: int) -> IO[bytes]:
    """``stream``, a JSON array starting with ``head``, with its items one per line as far as its layout
    allows (read in blocks of ``size``)."""
    indentation = item_indentation(head)
    if indentation is not None:
        joined_items = io.BufferedReader(Joined(stream), size)
        return io.BufferedReader(ItemsSplit(joined_items, b"}," + indentation + b"{"), size)
    separator = separator_of(head)
    return stream if separator is None else io.BufferedReader(ItemsSplit(stream, separator), size)
