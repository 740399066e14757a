"""A SQLite file's name in two forms, when Python's file-system encoding is not UTF-8.

Python holds a path it read from the host (``CONNECTOR_OPS_HOME``, ``CONNECTOR_OPS_DATABASE_URL``) as text in
the file-system encoding; where that is ASCII (``LC_ALL=C`` with UTF-8 mode off, ``PYTHONUTF8=0``), the bytes
of ``/srv/hömé`` are kept as surrogate escapes, which Python's own ``open``/``mkdir`` turn back into the same
bytes. SQLite, SQLAlchemy's URLs and ADBC take a name as UTF-8 text, and a surrogate in the store's URL made
every action on the store a 500 "UnicodeEncodeError: … surrogates not allowed".

So the store's URL holds the file's bytes read as UTF-8 (:func:`sqlite_name`: the same file, in the text
SQLite opens it by), and Python's own calls on it take it back in the file-system encoding
(:func:`host_path`: in an ASCII encoding ``ö`` itself cannot be passed to ``mkdir``). A path whose bytes are
not UTF-8 cannot be named to SQLite at all: refused where the setting is read (:func:`utf8_problem`).
"""

from __future__ import annotations

import os


def sqlite_name(path: str) -> str:
    """``path`` (as Python's file calls take it, or already as text) as the text SQLite opens the same file by:
    its bytes (``os.fsencode``) read as UTF-8. ``UnicodeDecodeError`` when they are not UTF-8."""
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:  # characters the file-system encoding has no bytes for: text already
        return path
    return raw.decode("utf-8")


def host_path(name: str) -> str:
    """The text ``name`` SQLite knows a file by, as Python's file calls (``os``, ``pathlib``) take it."""
    return os.fsdecode(name.encode("utf-8", "surrogateescape"))


def utf8_problem(path: str) -> str | None:
    """Why SQLite cannot be given ``path`` (its bytes are not UTF-8 text), or ``None``."""
    try:
        sqlite_name(path)
    except UnicodeDecodeError as exc:
        return (f"names a file whose path is not UTF-8 text (byte {exc.object[exc.start]:#x} at {exc.start}); "
                f"SQLite takes file names as UTF-8: use a path in UTF-8")
    return None
