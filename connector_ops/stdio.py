"""The command line's standard streams, made safe once where the console script starts.

An answer that cannot be printed must not turn the action behind it into a failure: the work is done (a
file stored, a drive item copied) and a script that retries on exit 1 would do it twice. So printing
never fails for an encoding: on a console whose encoding lacks a character of the output (Windows'
cp1252, ``PYTHONIOENCODING=ascii``, a ``C`` locale without UTF-8 mode) JSON is written with ``\\u``
escapes (still JSON, with the same data) and human lines with Python's backslash escapes.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO


def carries(text: str, stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (stdout by default) can write ``text`` as it is, in its own encoding."""
    stream = stream if stream is not None else sys.stdout
    try:
        text.encode(getattr(stream, "encoding", None) or "utf-8")
    except UnicodeEncodeError:  # a character the encoding lacks, or a lone surrogate (an undecodable name)
        return False
    return True


def json_text(value: Any, *, indent: int | None = None, default: Any = None, stream: TextIO | None = None) -> str:
    """``value`` as JSON text that ``stream`` (stdout by default) can carry: its characters as they are
    when the stream's encoding has them all, else ``\\u`` escapes (``ensure_ascii``), never half a document."""
    text = json.dumps(value, indent=indent, default=default, ensure_ascii=False)
    return text if carries(text, stream) else json.dumps(value, indent=indent, default=default)


def make_printing_safe() -> None:
    """Have stdout and stderr write a character their encoding lacks as a backslash escape, not fail
    (for the console script; every ``print`` and ``click.echo`` after it is safe)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
