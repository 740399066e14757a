"""NDJSON whose numbers and booleans are written as strings of the very text the row reader stores for them,
so that a file with numbers can take the columnar path (:mod:`.ndjson_fast`) too.

Arrow reads a JSON number as a double and cannot give its text back (``1.50`` must stay ``"1.50"``), so it
only reads files of strings. But the row reader stores a number as ``str`` of what ``json`` makes of it, and
for most numbers that is the number's own text: ``7``, ``-12``, ``1.50``, ``-0.0``. So those are quoted
here, in the bytes, before Arrow reads them, and so are ``true`` and ``false`` (stored as that text).

Every value in a key's place (after ``":``, with at most one space between) that starts like a number, a
boolean or a nested value is looked at. A number or boolean whose stored text is its own is quoted. A line
holding any other — a nested object or array (stored as compact JSON), a number with an exponent (``1e5``
is stored ``1E+5``), ``-0`` (stored ``0``), a fraction with six zeros after the point (``0.0000001`` is
stored ``1E-7``), a number of more than 100 characters, anything that is not JSON at all (``01``, ``1.``,
``tru``) — is handed whole to ``rewrite``: the row reader's own conversion of the line
(:func:`.json_readers.stored_line`), which writes it again with every value as the text it stores, or
refuses it (and the file goes to the row reader, which words the error). Without ``rewrite`` such lines
refuse the bytes (:class:`NotPlainScalars`). A ``"`` followed by ``:`` ends a key unless it is escaped, sits
inside a string after an escaped one, or opens a string that starts with ``:`` (``"a": ": 1 "``,
``[": 1"]``). Where one of those may be the case — a line with an escaped quote, a quote after ``:``, ``,``,
``[`` or ``{`` — the line's quotes are counted (escaped ones aside) and a ``":`` that does not end a key is
left alone; counting every line would cost more than the rest together.

The work is a few numpy passes over whole lines (:func:`scalars_quoted`): 0.7 ms a MiB of strings,
≈ 7 ms a MiB of the benchmark's rows with two numbers each; a rewritten line costs ≈ 9 µs in Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from connector_ops.etl.json_array_lines import LONGEST_LINE
from connector_ops.kernel.streams import WholePieces

_QUOTE, _COLON, _SPACE, _MINUS, _DOT, _ZERO, _BACKSLASH, _NEWLINE, _T, _F, _NINE, _SLASH, _BRACE, _BRACKET = (
    ord(c) for c in '": -.0\\\ntf9/{[')
#: a number's or a boolean's text ends at one of these
_ENDS = np.zeros(256, dtype=bool)
_ENDS[list(b",}] \t\r\n")] = True
_DIGIT = np.zeros(256, dtype=bool)
_DIGIT[list(b"0123456789")] = True
_LONGEST_NUMBER = 100
#: what may stand before a quote that opens a string (after whitespace), and the whitespace looked past
_OPENERS = np.zeros(256, dtype=bool)
_OPENERS[list(b":,[{\n")] = True
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[list(b" \t\r")] = True
_LOOK_BACK = 4
_WORDS = [np.frombuffer(word, dtype=np.uint8) for word in (b"true", b"false")]


def _number_chars(b: np.ndarray) -> np.ndarray:
    """Which bytes are ``-``, ``.`` or a digit: two comparisons (uint8 wraps below ``-``), no table lookup."""
    return (b - _MINUS <= _NINE - _MINUS) & (b != _SLASH)


class NotPlainScalars(ValueError):
    """A value the bytes cannot make text (a nested value, a number whose stored text is not its own, not JSON)
    and no ``rewrite`` for its line, or a line too long to hold: the row reader reads the file."""


def scalars_quoted(lines: bytes, rewrite: Callable[[bytes], bytes] | None = None) -> bytes:
    """Whole NDJSON lines with each number and boolean in a key's place written as a string of its text.
    A line holding a value that cannot be (a nested value, ``1e5`` …) is ``rewrite``'s to make of it, or
    refuses the lines (:class:`NotPlainScalars`) without one. Passes over all the bytes only find the values
    (colons first: far fewer than quotes); everything after works on the values found."""
    if b'":' not in lines:
        return lines
    v = np.frombuffer(lines, dtype=np.uint8)
    n = len(v)
    colons = np.flatnonzero(v == _COLON)  # one pass of one comparison: colons are far fewer than quotes
    colons = colons[colons > 0]
    colons = colons[(v[colons - 1] == _QUOTE) & (colons + 1 < n)]
    starts = colons + 1
    starts = starts + (v[starts] == _SPACE)
    colons, starts = colons[starts < n], starts[starts < n]
    first = v[starts]
    is_word = (first == _T) | (first == _F)
    nested = (first == _BRACE) | (first == _BRACKET)
    picked = _number_chars(first) | is_word | nested
    if picked.any():  # a ``":`` inside a string: after an escaped quote, or where a quote opens the string
        opening = picked.copy()
        opening[picked] = _opens_string(v, colons[picked])  # only before the values that would be quoted
        if opening.any() or b"\\" in lines:
            picked &= ~_inside_strings(v, colons, picked, opening)
    starts, is_word, nested = starts[picked], is_word[picked], nested[picked]
    if not len(starts):
        return lines
    ends, refused = np.empty_like(starts), nested.copy()
    number = ~(is_word | nested)
    ends[is_word], refused[is_word] = _word_ends(v, starts[is_word])
    ends[number], refused[number] = _number_ends(v, starts[number])
    if not refused.any():
        return _quoted(v, starts, ends)
    if rewrite is None:
        raise NotPlainScalars("a value whose stored text is not its own: a nested value, 1e5, -0, not JSON …")
    return _rewritten(lines, v, starts, ends, refused, rewrite)


def _quoted(v: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bytes:
    """``v`` with a quote before each of ``starts`` and before each of ``ends``."""
    at = np.empty(2 * len(starts), dtype=np.int64)
    at[0::2], at[1::2] = starts, ends
    return np.insert(v, at, _QUOTE).tobytes()


def _rewritten(lines: bytes, v: np.ndarray, starts: np.ndarray, ends: np.ndarray, refused: np.ndarray,
               rewrite: Callable[[bytes], bytes]) -> bytes:
    """``lines`` quoted, but for the lines holding a ``refused`` value: those as ``rewrite`` makes them.
    A value never spans lines, so each line's quotes are its own values'; a rewritten line's place in the
    quoted bytes is its place in ``lines`` moved by two quotes for each value quoted before it."""
    newlines = np.flatnonzero(v == _NEWLINE)
    line_of = np.searchsorted(newlines, starts)
    rewritten = np.unique(line_of[refused])
    kept = ~np.isin(line_of, rewritten)
    quoted = _quoted(v, starts[kept], ends[kept])
    line_ends = np.append(newlines + 1, len(v))
    begins = np.append(0, line_ends)[rewritten]
    stops = line_ends[rewritten]
    moved = 2 * np.searchsorted(starts[kept], begins)
    pieces, done = [], 0
    for begin, stop, by in zip(begins.tolist(), stops.tolist(), moved.tolist(), strict=True):
        pieces += [quoted[done:begin + by], rewrite(lines[begin:stop])]
        done = stop + by
    pieces.append(quoted[done:])
    return b"".join(pieces)


def _ended(v: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which values end where a value may end (at a delimiter, or at the end of the bytes)."""
    return (ends >= len(v)) | _ENDS[v[np.minimum(ends, len(v) - 1)]]


def escaped(v: np.ndarray, quotes: np.ndarray) -> np.ndarray:
    """Which of ``quotes`` (positions in ``v``) are escaped: those after an odd run of backslashes (``\\"`` is,
    ``\\\\"`` is not). A run never crosses a line break, so whole lines hold it whole."""
    slashes = np.flatnonzero(v == _BACKSLASH)
    if not len(slashes):
        return np.zeros(len(quotes), dtype=bool)
    at = np.searchsorted(slashes, quotes - 1)  # where the backslash right before each quote would be
    after_slash = slashes[np.minimum(at, len(slashes) - 1)] == quotes - 1
    run_starts = np.flatnonzero(np.diff(slashes, prepend=-2) != 1)  # the first backslash of each run
    first = run_starts[np.maximum(np.searchsorted(run_starts, at, side="right") - 1, 0)]
    return after_slash & ((at - first) % 2 == 0)  # a run of at - first + 1 backslashes: odd


def _opens_string(v: np.ndarray, colons: np.ndarray) -> np.ndarray:
    """Which ``colons`` (each after a quote) follow a quote that may open a string rather than end a key: one
    after ``:``, ``,``, ``[`` or ``{`` and whitespace (``"a": ": 1 "``, ``[": 1"]``), first on its line, or
    after more whitespace than is looked at. A key may end with one of those too (``"k:": 1``):
    :func:`_inside_strings` counts."""
    undecided = np.ones(len(colons), dtype=bool)
    opens = np.zeros(len(colons), dtype=bool)
    for back in range(2, 2 + _LOOK_BACK):
        at = colons - back
        byte = v[np.maximum(at, 0)]
        opens |= undecided & ((at < 0) | _OPENERS[byte])  # after a delimiter, or first on its line
        undecided &= _WHITESPACE[byte]
    return opens | undecided


def _inside_strings(v: np.ndarray, colons: np.ndarray, picked: np.ndarray, opening: np.ndarray) -> np.ndarray:
    """Which of the ``picked`` ``colons`` (each after a quote) do not end a key, judged where that is in doubt:
    on the lines that hold an escaped quote, and at the ``opening`` ones. Each line on its own (so that how the
    bytes were cut into reads never matters), a quote before a ``:`` ends a key when an even number of
    unescaped quotes stand from the line's start up to it, itself included (a string never spans lines in
    JSON). The others open a string (``": 1 "`` is a value, not a key's end) or sit inside one (an escaped
    quote is never counted, and an odd number of quotes stands before it)."""
    quotes = np.flatnonzero(v == _QUOTE)
    is_escaped = escaped(v, quotes)
    newlines = np.flatnonzero(v == _NEWLINE)
    line_of_colon = np.searchsorted(newlines, colons)
    doubtful = picked & (opening | np.isin(line_of_colon, np.searchsorted(newlines, quotes[is_escaped])))
    inside = np.zeros(len(colons), dtype=bool)
    if doubtful.any():
        real, key_quotes = quotes[~is_escaped], colons[doubtful] - 1
        line_starts = np.append(-1, newlines)[line_of_colon[doubtful]] + 1
        count = np.searchsorted(real, key_quotes, side="right") - np.searchsorted(real, line_starts)
        inside[doubtful] = count % 2 == 1
    return inside


def _word_ends(v: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each ``true`` or ``false`` ends, and which values starting with ``t`` or ``f`` are neither."""
    ends = starts + np.where(v[starts] == _T, 4, 5)
    fits = np.zeros(len(starts), dtype=bool)
    for word in _WORDS:
        same = (ends - starts) == len(word)
        for offset, byte in enumerate(word):
            same &= v[np.minimum(starts + offset, len(v) - 1)] == byte
        fits |= same
    return ends, ~(fits & _ended(v, ends))


def _padded(positions: np.ndarray) -> np.ndarray:
    """Sorted ``positions`` and two past any end, so that the one after the last found is still there."""
    return np.append(positions, [np.iinfo(np.int64).max] * 2)


def _number_ends(v: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each number ends, and which are refused. A number is kept when it is
    ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?`` (JSON's number without an exponent), not ``-0``, not ``0.000000…``, at
    most 100 characters: then its text is what the row reader stores.

    A number is a run of digits, signs and points; the runs are found among the positions of those
    characters alone (a small part of the bytes), so no pass over all of them counts signs or points."""
    if not len(starts):
        return starts, np.zeros(0, dtype=bool)
    n = len(v)
    chars = np.flatnonzero(_number_chars(v))
    run_last = np.append(np.flatnonzero(np.diff(chars) != 1), len(chars) - 1)  # index in chars of each run's end
    first = np.searchsorted(chars, starts)
    last = run_last[np.searchsorted(run_last, first)]
    ends = chars[last] + 1
    refused = ~_ended(v, ends)  # an exponent, or not a number
    refused |= (ends - starts) > _LONGEST_NUMBER
    kind = v[chars]
    minus = _padded(chars[kind == _MINUS])
    refused |= minus[np.searchsorted(minus, starts + 1)] < ends  # a sign after a number's start
    point = _padded(chars[kind == _DOT])
    refused |= (point[np.searchsorted(point, starts) + 1] < ends) | (v[ends - 1] == _DOT)  # two points, or one last
    negative = v[starts] == _MINUS
    digits = starts + negative

    def at(offset: int) -> Any:  # the byte ``offset`` after each number's first digit (a delimiter past its end)
        return v[np.minimum(digits + offset, n - 1)]

    refused |= (digits >= ends) | ~_DIGIT[at(0)]  # a sign without digits
    zero = at(0) == _ZERO
    refused |= zero & (digits + 1 < ends) & _DIGIT[at(1)]  # a leading zero
    refused |= zero & negative & (digits + 1 == ends)  # -0, stored as 0
    tiny = zero & (digits + 8 <= ends) & (at(1) == _DOT)
    for offset in range(2, 8):
        tiny &= at(offset) == _ZERO
    return ends, refused | tiny  # six zeros after the point: stored in scientific notation


class ScalarsAsText(WholePieces):
    """``stream`` (NDJSON) with :func:`scalars_quoted` applied, whole lines at a time, the lines it cannot quote
    made by ``rewrite`` (or refused without one)."""

    longest = LONGEST_LINE

    def __init__(self, stream: Any, rewrite: Callable[[bytes], bytes] | None = None) -> None:
        super().__init__(stream)
        self._rewrite = rewrite

    def _cut(self, data: bytes) -> int:
        return data.rfind(b"\n") + 1

    def _made(self, pieces: bytes) -> bytes:
        return scalars_quoted(pieces, self._rewrite)

    def _too_long(self) -> None:
        raise NotPlainScalars(f"a line longer than {self.longest} bytes")
