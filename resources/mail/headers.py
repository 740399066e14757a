"""The SMTP backend's headers that carry the caller's text, written so a client shows exactly that text.

Python's email package (``policy.default``) decodes every RFC 2047 encoded word in a value it is given
(``=?utf-8?q?Hi=0D=0ABcc:_x@evil.org?=``) and, up to 3.11.9, writes the decoded text back raw: a subject,
a display name or a file name that was literally an encoded word became headers of the caller's choosing
or a second address in From (a Python with the CVE-2024-6923 fix raises HeaderWriteError instead). The
package only decodes text holding ``=?``, so such text is written here, as encoded words of its own UTF-8
(a file name as an RFC 2231 parameter), and handed over as a finished header, which the package neither
parses nor refolds (a value with a ``name`` attribute: ``EmailPolicy.header_store_parse`` and ``fold``).
Other text stays with the package, which quotes and encodes it correctly. :func:`put` then checks that
every such header is written as one header, whatever the Python, and names the caller's field if not.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from email.errors import MessageError
from email.headerregistry import Address as HeaderAddress
from email.message import EmailMessage
from email.policy import Policy

from connector_ops.kernel.errors import InvalidInput

_WORD_BYTES = 45  # 60 base64 characters: "=?utf-8?b?…?=" is 72 long, within RFC 2047's 75
#: a display name's words: one for any real name (see address_list), 812 characters within the 998 of a line
_PHRASE_WORD_BYTES = 600
#: a line break that does not continue the header (RFC 5322 folding is a line break then a space or tab)
_UNFOLDED_BREAK = re.compile(r"\r\n(?![ \t])|\r(?!\n)|(?<!\r)\n(?![ \t])")
UTF8 = "utf-8''"  # an RFC 2231 value's charset and (empty) language
_PARAMETER_CHUNK = re.compile(r"(?:%[0-9A-F]{2}|[^%]){1,20}")  # never splits a %XX escape


def decodable(text: str) -> bool:
    """Whether the email package would decode part of ``text`` as an encoded word (it needs ``=?``)."""
    return "=?" in text


@dataclass(frozen=True)
class WrittenHeader:
    """A header already in its wire form: ASCII ``lines``, written joined by folding (line break, space)."""

    name: str
    lines: tuple[str, ...]

    def fold(self, *, policy: Policy) -> str:
        return f"{self.name}: " + f"{policy.linesep} ".join(self.lines) + policy.linesep

    def __str__(self) -> str:
        return " ".join(self.lines)


def encoded_words(text: str, word_bytes: int = _WORD_BYTES) -> list[str]:
    """``text`` as RFC 2047 encoded words of its UTF-8; a word never splits a character (RFC 2047 §5)."""
    chunks: list[bytes] = []
    chunk = b""
    for char in text:
        data = char.encode()
        if chunk and len(chunk) + len(data) > word_bytes:
            chunks.append(chunk)
            chunk = b""
        chunk += data
    chunks.append(chunk)
    return [f"=?utf-8?b?{base64.b64encode(c).decode('ascii')}?=" for c in chunks]


def unstructured(name: str, text: str) -> str | WrittenHeader:
    """A Subject-like header's value: ``text`` itself, or encoded words when the package would decode it."""
    return WrittenHeader(name, tuple(encoded_words(text))) if decodable(text) else text


def address_list(name: str, addresses: Sequence[tuple[str, str]]) -> list[HeaderAddress] | WrittenHeader:
    """``(display name, ASCII address)`` pairs as From/To/Cc. When a display name holds ``=?``, every name
    of the header goes as an encoded word (allowed as a phrase, RFC 2047 §5), one per line. One word, longer
    than RFC 2047's 75 characters as ``email.utils.formataddr`` writes it: Python's parser reads a space
    between two words of a phrase, which RFC 2047 §6.2 says to drop, so a split name would not read back
    the same everywhere (only a name over 600 bytes is split, to keep lines within 998 characters)."""
    if not any(decodable(display) for display, _ in addresses):
        return [HeaderAddress(display_name=display, addr_spec=addr) for display, addr in addresses]
    lines: list[str] = []
    for index, (display, addr) in enumerate(addresses):
        words = encoded_words(display, _PHRASE_WORD_BYTES) if display else []
        lines += [*words, (f"<{addr}>" if words else addr) + ("," if index < len(addresses) - 1 else "")]
    return WrittenHeader(name, tuple(lines))


def attachment_disposition(filename: str) -> WrittenHeader:
    """``attachment`` with the file name as an RFC 2231 parameter (UTF-8, percent-encoded, in continuations
    of at most 20 characters or escapes), which no client reads as an encoded word."""
    chunks = _PARAMETER_CHUNK.findall(urllib.parse.quote(filename, safe=""))
    if len(chunks) == 1:
        params = [f"filename*={UTF8}{chunks[0]}"]
    else:
        params = [f"filename*{i}*={UTF8 if i == 0 else ''}{chunk}" for i, chunk in enumerate(chunks)]
    return WrittenHeader("Content-Disposition", ("attachment;", *(p + ";" for p in params[:-1]), params[-1]))


def put(message: EmailMessage, name: str, value: object, field: str) -> None:
    """Set header ``name`` of ``message`` (replacing it) to the caller's ``value``; refused as a 400 naming
    ``field`` when it cannot be written as exactly one header (the package's own refusals included)."""
    try:
        if name in message:
            message.replace_header(name, value)
        else:
            message[name] = value
        folded = message.policy.fold(name, message[name])
    except (MessageError, ValueError) as exc:
        raise InvalidInput(field, f"cannot be written in the {name} header: {exc}") from None
    if _UNFOLDED_BREAK.search(folded.removesuffix(message.policy.linesep)):
        raise InvalidInput(field, f"would be written as more than the {name} header, which it must not be")
