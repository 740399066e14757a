"""NDJSON whose numbers and booleans are written as strings of the very text the row reader stores for them,
so that a file with numbers can take the columnar path (:mod:`.ndjson_fast`) too.

Arrow reads a JSON number as a double and cannot give its text back (``1.50`` must stay ``"1.50"``), so it
only reads files of strings. But the row reader stores a number as ``str`` of what ``json`` makes of it, and
for most numbers that is the number's own text: ``7``, ``-12``, ``1.50``, ``-0.0``. So those are quoted
here, in the bytes, before Arrow reads them, and so are ``true`` and ``false`` (stored as that text).

Every value in a key's place (after ``":``, with at most one space between) that starts like a number or a
boolean must be one of those, or the whole file goes to the row reader (:class:`NotPlainScalars`): a number
with an exponent (``1e5`` is stored ``1E+5``), ``-0`` (stored ``0``), a fraction with six zeros after the
point (``0.0000001`` is stored ``1E-7``), a number of more than 100 characters (the row reader refuses
integers past Python's 4,300 digits), or anything that is not JSON at all (``01``, ``1.``, ``tru``), which
the row reader words. So does an escaped quote on a line with a number or boolean: without one, a ``"``
followed by ``:`` can only end a key, so no string's content is ever taken for a value (strings of escaped
quotes alone are left as they are). Values in nested objects may be quoted as well; the nested object still
sends the file to the row reader.

The work is a few numpy passes over whole lines (:func:`scalars_quoted`): 0.7 ms a MiB of strings,
≈ 7 ms a MiB of the benchmark's rows with two numbers each.
"""

from __future__ import annotations

from typing import IO, Any

import numpy as np

from connector_ops.etl.json_array_lines import LONGEST_LINE
from connector_ops.kernel.streams import Transformed

_QUOTE, _COLON, _SPACE, _MINUS, _DOT, _ZERO, _BACKSLASH, _NEWLINE, _T, _F, _NINE, _SLASH = (
    ord(c) for c in '": -.0\\\ntf9/')
#: a number's or a boolean's text ends at one of these
_ENDS = np.zeros(256, dtype=bool)
_ENDS[list(b",}] \t\r\n")] = True
_DIGIT = np.zeros(256, dtype=bool)
_DIGIT[list(b"0123456789")] = True
_NUMBER_CHAR = _DIGIT.copy()
_NUMBER_CHAR[[_MINUS, _DOT]] = True
_LONGEST_NUMBER = 100
_WORDS = [np.frombuffer(word, dtype=np.uint8) for word in (b"true", b"false")]


class NotPlainScalars(ValueError):
    """A number or boolean whose stored text is not its own (or that is not JSON): the row reader reads the file."""


def scalars_quoted(lines: bytes) -> bytes:
    """Whole NDJSON lines with each number and boolean in a key's place written as a string of its text.
    Passes over all the bytes only find the values (colons first: far fewer than quotes); everything
    after works on the values found."""
    if b'":' not in lines:
        return lines
    v = np.frombuffer(lines, dtype=np.uint8)
    n = len(v)
    colons = np.flatnonzero(v == _COLON)  # one pass of one comparison: colons are far fewer than quotes
    colons = colons[colons > 0]
    starts = colons[v[colons - 1] == _QUOTE] + 1
    starts = starts[starts < n]
    starts = starts + (v[starts] == _SPACE)
    starts = starts[starts < n]
    first = v[starts]
    is_number = _NUMBER_CHAR[first]
    is_word = (first == _T) | (first == _F)
    starts, is_word = starts[is_number | is_word], is_word[is_number | is_word]
    if not len(starts):
        return lines
    if b'\\"' in lines:
        _check_no_escaped_quote_beside(v, starts)
    ends = np.empty_like(starts)
    ends[is_word] = _word_ends(v, starts[is_word])
    ends[~is_word] = _number_ends(v, starts[~is_word])
    at = np.empty(2 * len(starts), dtype=np.int64)
    at[0::2], at[1::2] = starts, ends
    return np.insert(v, at, _QUOTE).tobytes()


def _ended(v: np.ndarray, ends: np.ndarray) -> bool:
    """Does each value end where a value may end (at a delimiter, or at the end of the bytes)?"""
    return bool(_ENDS[v[np.minimum(ends, len(v) - 1)]][ends < len(v)].all())


def _check_no_escaped_quote_beside(v: np.ndarray, starts: np.ndarray) -> None:
    """Only an escaped quote puts ``":`` inside a string (an unescaped one would end it), and a string never
    spans lines: a line without one holds no value that is not a value."""
    escaped = np.flatnonzero((v[:-1] == _BACKSLASH) & (v[1:] == _QUOTE))
    newlines = np.flatnonzero(v == _NEWLINE)
    if np.isin(np.searchsorted(newlines, starts), np.searchsorted(newlines, escaped)).any():
        raise NotPlainScalars("an escaped quote on a line with a number or boolean")


def _word_ends(v: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Where each ``true`` or ``false`` ends; anything else starting with ``t`` or ``f`` is refused."""
    ends = starts + np.where(v[starts] == _T, 4, 5)
    fits = np.zeros(len(starts), dtype=bool)
    for word in _WORDS:
        same = (ends - starts) == len(word)
        for offset, byte in enumerate(word):
            same &= v[np.minimum(starts + offset, len(v) - 1)] == byte
        fits |= same
    if not fits.all() or not _ended(v, ends):
        raise NotPlainScalars("a value that is neither true nor false")
    return ends


def _padded(positions: np.ndarray) -> np.ndarray:
    """Sorted ``positions`` and two past any end, so that the one after the last found is still there."""
    return np.append(positions, [np.iinfo(np.int64).max] * 2)


def _number_ends(v: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Where each number ends. Every one must be ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?`` (JSON's number without an
    exponent), not ``-0``, not ``0.000000…``, at most 100 characters: its text is what the row reader stores.

    A number is a run of digits, signs and points; the runs are found among the positions of those
    characters alone (a small part of the bytes), so no pass over all of them counts signs or points."""
    if not len(starts):
        return starts
    n = len(v)
    chars = np.flatnonzero((v - _MINUS <= _NINE - _MINUS) & (v != _SLASH))  # - . 0-9 (uint8 wraps below '-')
    run_last = np.append(np.flatnonzero(np.diff(chars) != 1), len(chars) - 1)  # index in chars of each run's end
    first = np.searchsorted(chars, starts)
    last = run_last[np.searchsorted(run_last, first)]
    ends = chars[last] + 1
    if not _ended(v, ends):
        raise NotPlainScalars("a number with an exponent, or not a number")
    if ((ends - starts) > _LONGEST_NUMBER).any():
        raise NotPlainScalars("a number too long")
    kind = v[chars]
    minus = _padded(chars[kind == _MINUS])
    if (minus[np.searchsorted(minus, starts + 1)] < ends).any():  # the first sign after a number's start
        raise NotPlainScalars("a minus sign inside a number")
    point = _padded(chars[kind == _DOT])
    if (point[np.searchsorted(point, starts) + 1] < ends).any() or (v[ends - 1] == _DOT).any():  # a second point
        raise NotPlainScalars("a point without a digit on each side, or two")
    negative = v[starts] == _MINUS
    digits = starts + negative

    def at(offset: int) -> Any:  # the byte ``offset`` after each number's first digit (a delimiter past its end)
        return v[np.minimum(digits + offset, n - 1)]

    if (digits >= ends).any() or not _DIGIT[at(0)].all():
        raise NotPlainScalars("a sign without digits")
    zero = at(0) == _ZERO
    if (zero & (digits + 1 < ends) & _DIGIT[at(1)]).any():
        raise NotPlainScalars("a leading zero")
    if (zero & negative & (digits + 1 == ends)).any():
        raise NotPlainScalars("-0, stored as 0")
    tiny = zero & (digits + 8 <= ends) & (at(1) == _DOT)
    for offset in range(2, 8):
        tiny &= at(offset) == _ZERO
    if tiny.any():
        raise NotPlainScalars("six zeros after the point, stored in scientific notation")
    return ends


class ScalarsAsText(Transformed):
    """``stream`` (NDJSON) with :func:`scalars_quoted` applied, whole lines at a time."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(stream)
        self._held = b""  # the line begun but not yet ended

    def _take(self, chunk: bytes) -> None:
        if chunk:
            data = self._held + chunk
            cut = data.rfind(b"\n") + 1
            data, self._held = data[:cut], data[cut:]
            if len(self._held) > LONGEST_LINE:
                raise NotPlainScalars(f"a line longer than {LONGEST_LINE} bytes")
        else:
            data, self._held, self._ended = self._held, b"", True
        if data:
            self._out = memoryview(scalars_quoted(data))
