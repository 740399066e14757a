"""A JSON array's bytes as the event parser (yajl, through ``ijson``) reads them, but for an escaped lone LOW
surrogate (``"\\udc00"``), which becomes ``?`` as a lone high one always did.

yajl makes a high surrogate not followed by an escape ``?`` (the README documents it: "in an array it becomes
``?``"), but writes a lone low one out as the three bytes UTF-8 would give it, which are no UTF-8 (a surrogate
is no character), and ``ijson`` then fails to decode them: a pure-ASCII file was refused as "not valid UTF-8".
Here such an escape is written ``?`` before yajl reads it, so a lone half of either kind reads alike, in keys
and values, at any depth, whichever reader handed the file to the event parser.

The escapes are found as yajl reads them, left to right: an escaped backslash (``\\\\``) is passed over whole
(so ``\\\\udc00`` is a backslash and the text ``udc00``), and a high surrogate's escape takes the escape after
it as its other half (yajl combines them, whatever that one is), so only a low surrogate's escape that no high
one took is rewritten. The bytes are rewritten a block at a time; the last few bytes of a block, where an
escape may be cut off, wait for the next block.

The rewritten blocks are pushed into the parser (:func:`basic_events`), not pulled by it: ijson's C backend,
reading from a Python ``read``, called it with an exception still set after one of its callbacks failed (a
number past Python's int-string limit), and the process died of a segmentation fault.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import IO, Any

import ijson

#: what yajl reads as one: an escaped backslash, a high surrogate's escape with the escape after it (its pair),
#: a low surrogate's escape (alone, as the two before it would have taken it otherwise)
_ESCAPES = re.compile(rb"\\(?:\\|u[dD][89abAB][0-9a-fA-F]{2}\\u[0-9a-fA-F]{4}|(u[dD][c-fC-F][0-9a-fA-F]{2}))")
#: the longest of them, less one: a block's last bytes that may begin one cut off by the block's end
_HELD = 11


def _rewrite(match: re.Match[bytes]) -> bytes:
    return b"?" if match.group(1) is not None else match.group(0)


class LoneLowSurrogates:
    """``stream`` (bytes) with each escaped lone low surrogate written ``?`` (the module says why); what ``ijson``
    reads (``read``, ``read(0)`` telling it bytes)."""

    def __init__(self, stream: IO[bytes], block: int = 1 << 16) -> None:
        self._stream = stream
        self._block = block
        self._held = b""  # the last bytes read, not yet judged
        self._ended = False

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            return b""
        while not self._ended:
            data = self._stream.read(max(size, self._block))
            if not data:
                self._ended = True
                break
            head = self._judged(self._held + data)
            if head:
                return head
        data, self._held = self._held, b""
        return _ESCAPES.sub(_rewrite, data)

    def _judged(self, data: bytes) -> bytes:
        """``data`` rewritten up to where an escape may be cut off by its end; the rest held for the next block.
        An escape that begins before ``cut`` lies whole in ``data``; the bytes from where the rewriting stops
        are read again from there, as the scan would have read them."""
        cut = max(len(data) - _HELD, 0)
        parts: list[bytes] = []
        done = 0
        for match in _ESCAPES.finditer(data):
            if match.start() >= cut:
                break
            parts += (data[done:match.start()], _rewrite(match))
            done = match.end()
        cut = max(cut, done)
        parts.append(data[done:cut])
        self._held = data[cut:]
        return b"".join(parts)


def basic_events(stream: IO[bytes], block: int = 1 << 16) -> Iterator[tuple[str, Any]]:
    """ijson's flat events (``basic_parse``) of ``stream``'s JSON, lone low surrogates written ``?``: each block
    rewritten and pushed into the parser, its events handed on (one block's events in memory at a time)."""
    events = ijson.sendable_list()
    parser = ijson.basic_parse_coro(events)
    rewritten = LoneLowSurrogates(stream, block)
    while chunk := rewritten.read(block):
        parser.send(chunk)
        yield from events
        del events[:]
    parser.close()
    yield from events
