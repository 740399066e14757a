"""Limits on what callers may send, checked before any work starts, each a 400 naming the field.

Hostile or broken input must never become a 500, a runaway process or a database error: every entry
point's payload goes through :func:`check_payload` (nesting depth, integers beyond Python's int-string
limit, NUL characters), and every parser of tabular data (the CSV readers, the JSON readers, Arrow-based
loaders) names its columns through :func:`check_column_names`, so a new parser reuses the same rules.
"""

from __future__ import annotations

import codecs
import datetime as dt
import decimal
import math
import numbers
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from connector_ops.kernel.errors import InvalidInput, field_path

#: JSON nesting depth a payload, a JSON row or a filter may reach. Deep enough for any real document;
#: shallow enough that no recursive code (pydantic, json, SQL compilers, Jinja) can exhaust the stack.
MAX_DEPTH = 100
#: Columns a virtual file may have: PostgreSQL allows 1,600 per table and SQLite 2,000, and each row
#: table spends one on ``seq``. The smaller bound applies on both, so a file moves between them.
MAX_COLUMNS = 1599
#: Decimal digits of an integer (Python refuses to convert longer ones to or from text).
MAX_INT_DIGITS = sys.get_int_max_str_digits() or 4300
#: Rows one call may ask for (``maxBatchSize``): larger values mean "all" and are clamped to this,
#: which every database's LIMIT and integer arithmetic can take.
MAX_BATCH_SIZE = 2**31 - 1
#: Batches one ``foreach`` step may fan out to. Each batch is three or four Dagster steps with their events
#: and stored outputs, and a run's cost grows faster than the count: measured in process, 200 batches took
#: 16–21 s and 164 MiB, 1,000 batches 170 s and 352 MiB, 2,000 batches 208–290 s and 604 MiB; 10,000 would
#: be most of an hour and gigabytes, and the Dagster UI does not show that many steps usefully. A larger
#: maxBatchSize covers any file within this.
MAX_BATCHES = 1000
#: Characters one value may hold, and one line of a CSV or NDJSON file, which Push's row readers hold whole.
#: Every way in keeps to it (a payload's strings: :func:`check_payload`; a Map's results; a frame's columns),
#: so that whatever a file holds, Pull exports and Push takes back.
#: A value costs the row reader several times its size (the line, the csv module's 4-byte buffer, the
#: value, its row): at this limit a Push grows by 100–130 MiB (see README, "Hostile input"); without
#: one a 1 MiB gzip of a 1 GiB line took 6 GiB before the database refused it. Read at each Push, so a test
#: may lower it.
MAX_VALUE = 16 << 20

_MAX_INT_BITS = int(MAX_INT_DIGITS * 3.3219280948873626)  # log2(10): a bit below the digit limit


def deeper_than(limit: int = MAX_DEPTH) -> str:
    return f"nested deeper than {limit} levels"


def longer_than_allowed(what: str) -> str:
    """The words of a value or line over :data:`MAX_VALUE`: what it is, and the limit."""
    return f"{what} longer than {MAX_VALUE:,} characters ({MAX_VALUE / 2**20:g} MiB), the most one may hold"


def too_many_digits() -> str:
    return f"a number with more than {MAX_INT_DIGITS} digits"


def lone_surrogate(text: str) -> str | None:
    """The first half of a UTF-16 surrogate pair that stands alone in ``text``, as ``\\udXXX``, else ``None``.

    JSON can spell one (``"\\ud800"``; Python's ``json`` reads it as it is), but it is no character: UTF-8
    cannot encode it, so no database, file or HTTP body can take it, and it would fail deep inside an
    action as a 500. ``isascii`` is a flag lookup, so text without one costs next to nothing."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"\\u{ord(text[exc.start]):04x}"
    return None


def surrogate_refused(exc: BaseException | None) -> str | None:
    """The lone surrogate (as ``\\udXXX``) that ``exc`` or an error under it failed to encode, else ``None``:
    where a value is only found out when it is encoded, deep in a driver or in Arrow."""
    seen = 0
    while exc is not None and seen < 8:  # the error itself, what a wrapper keeps of it (``orig``), its cause
        if isinstance(exc, UnicodeEncodeError) and exc.reason == "surrogates not allowed":
            return f"\\u{ord(exc.object[exc.start]):04x}"
        exc = getattr(exc, "orig", None) or exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        seen += 1
    return None


#: PostgreSQL's refusal of a NUL, in one wording: the store's (after "a value"), and push_frame's, which finds it
#: first and names the value's column and row
NUL_REFUSED = "holds a NUL character (\\x00), which PostgreSQL cannot store"


def holds_surrogate(half: str) -> str:
    return f"holds {half}, half of a UTF-16 surrogate pair without its other half, which is not a character"


def check_payload(value: Any, field: str = "", *, limit: int = MAX_DEPTH, nul: bool = True,
                  finite: bool = True, nul_because: str = "", long_decimals: bool = False) -> None:
    """Refuse what no action can handle, naming the first offending field: nesting deeper than ``limit``,
    an integer too long for text, a NUL character in a key or a string (no database text column, header
    or file name can hold one), half a surrogate pair (:func:`lone_surrogate`), a string longer than
    :data:`MAX_VALUE` (a value Push would refuse once Pull exported it), NaN or an infinity
    (:func:`not_finite`). Iterative, so the check itself cannot exhaust the stack; a cyclic structure (from
    Python callers) ends at the depth limit. ``nul=False`` lets NUL through (data values the store itself
    checks); ``finite=False`` lets NaN and infinities through (readers that store them as text);
    ``nul_because`` ends the message of a NUL (the database that cannot hold one). A ``Decimal`` (a number
    with a fraction or an exponent, as the entry points read JSON) whose digits written out would pass the
    integer limit (``1E999999999``: an integer input would take minutes to build it) is refused too, unless
    ``long_decimals`` (readers that store its text)."""
    stack: list[tuple[Any, tuple[str | int, ...], int]] = [(value, (field,) if field else (), 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            if nul and "\x00" in item:
                raise InvalidInput(field_path(path), f"holds a NUL character (\\u0000){nul_because}")
            if (half := lone_surrogate(item)) is not None:
                raise InvalidInput(field_path(path), holds_surrogate(half))
            if len(item) > MAX_VALUE:
                raise InvalidInput(field_path(path), longer_than_allowed("a value"))
            continue
        if isinstance(item, int) and not isinstance(item, bool):
            if item.bit_length() > _MAX_INT_BITS and len(str_of_int(item)) > MAX_INT_DIGITS:
                raise InvalidInput(field_path(path), too_many_digits())
            continue
        is_map = isinstance(item, Mapping)
        if not is_map and not isinstance(item, list | tuple):
            if not isinstance(item, _JSON_SCALARS) and not _a_model(item):
                raise InvalidInput(field_path(path), not_json(item))
            if (not long_decimals and isinstance(item, decimal.Decimal) and item.is_finite()
                    and abs(item.adjusted()) >= MAX_INT_DIGITS):
                raise InvalidInput(field_path(path), too_many_digits())
            if finite and (word := not_finite(item)) is not None:
                raise InvalidInput(field_path(path), f"{word} is not a JSON number (JSON has no NaN or Infinity)")
            continue
        if depth >= limit:
            raise InvalidInput(field_path(path), deeper_than(limit))
        children: list[tuple[Any, tuple[str | int, ...], int]] = []
        if is_map:
            for key, child in item.items():
                if isinstance(key, str):
                    if nul and "\x00" in key:
                        raise InvalidInput(field_path(path), f"a key holds a NUL character: {key!r}{nul_because}")
                    if (half := lone_surrogate(key)) is not None:
                        raise InvalidInput(field_path(path), f"a key {holds_surrogate(half)}")
                children.append((child, (*path, str(key)), depth + 1))
        else:
            children = [(child, (*path, i), depth + 1) for i, child in enumerate(item)]
        stack.extend(reversed(children))  # the first child on top: the first offending field is named


#: what a payload may hold besides strings, lists and mappings: JSON's values (numbers as Python, NumPy or
#: ``Decimal`` make them), and the models of a Python caller (:func:`_a_model`), which pydantic checks
_JSON_SCALARS = (numbers.Real, decimal.Decimal, bool, type(None))


def not_finite(value: Any) -> str | None:
    """``NaN``, ``Infinity`` or ``-Infinity`` when ``value`` is such a number (a float, NumPy's, a ``Decimal``),
    else ``None``. The CLI's parser refuses them in the text; this catches them from Python callers and from
    text parsed inside a field (``1e999`` reads as ``inf``): written out, they would make invalid JSON."""
    if isinstance(value, decimal.Decimal):
        nan, finite = value.is_nan(), value.is_finite()
    elif isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        nan, finite = math.isnan(value), math.isfinite(value)
    else:
        return None
    if finite:
        return None
    return "NaN" if nan else ("-Infinity" if value < 0 else "Infinity")


def _a_model(value: Any) -> bool:
    from pydantic import BaseModel  # here: ``--help`` and ``actions`` import this module, not pydantic

    return isinstance(value, BaseModel)


def not_json(value: Any) -> str:
    """Why a value a Python caller (or YAML's ``!!timestamp``) gave is refused: only JSON values are data."""
    if isinstance(value, dt.date | dt.time):
        return f"{value.isoformat()!r} is a {type(value).__name__}, not a JSON value: give it as a string"
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"a {name} is not a JSON value (string, number, boolean, null, array or object)"


def str_of_int(value: int) -> str:
    """``str(value)`` even past Python's int-string limit (only to measure; the caller refuses it)."""
    try:
        return str(value)
    except ValueError:
        return "9" * (MAX_INT_DIGITS + 1)


def json_depth_error(where: str, limit: int = MAX_DEPTH) -> str:
    return f"{where}: {deeper_than(limit)}" if where else deeper_than(limit)


def check_column_names(columns: Sequence[str], field: str) -> None:
    """Column names as every path takes them (a parser's header, a schema, a frame's or a Parquet file's
    columns, a Join's outputSchema): at most :data:`MAX_COLUMNS`, none empty (no CSV header could carry
    it back: Push refuses an empty header name), none holding a NUL, none repeated. Checked before the
    database is touched, so a header of a million columns is a clean 400 instead of a table the database
    refuses."""
    check_column_count(len(columns), field)
    for position, name in enumerate(columns, 1):
        if (problem := name_problem(name)) is not None:
            raise InvalidInput(field, f"column {position}'s name {problem}")
    check_unique(columns, field)


def check_unique(columns: Sequence[str], field: str) -> None:
    """No name twice: a CSV header, a JSON object or a Parquet schema with twins reads back as something
    else (the rule alone, for a selection of a file's own columns, which are good names already)."""
    seen: set[str] = set()
    for name in columns:
        if name in seen:
            raise InvalidInput(field, f"duplicate column name {name!r}")
        seen.add(name)


def unknown_columns(unknown: Sequence[str], known: Sequence[str], owner: str) -> str:
    """The words of a 400 for column names ``owner`` (``the virtual file``, a join side's customId) lacks,
    with the names it has: the one builder of "unknown column" for every action.

    A name that differs from one of the file's only in Unicode normalisation (``clé`` typed on macOS or
    copied from a PDF, decomposed, where the file has it composed) prints the same as the column, so the
    message says so and spells both out in escapes: "'clé'; g has ['clé']" alone reads as a contradiction."""
    head = f"unknown column {unknown[0]!r}" if len(unknown) == 1 else f"unknown columns {list(unknown)}"
    message = f"{head}; {owner} has {list(known)}"
    composed = {unicodedata.normalize("NFC", name): name for name in known}
    for name in unknown:
        twin = composed.get(unicodedata.normalize("NFC", name))
        if twin is not None:
            message += (f"; {name!a} and the column {twin!a} differ only in Unicode normalisation "
                        "(one has an accented letter composed, the other decomposed): use the column's spelling")
    return message


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a column (``None`` when it can): one rule for headers and for the keys
    that add columns to a file (Append Rows, Map)."""
    if name == "":
        return "is empty"
    if "\x00" in name:
        return "holds a NUL character (\\u0000)"
    return None


def check_column_count(count: int, field: str) -> None:
    if count > MAX_COLUMNS:
        raise InvalidInput(field, f"{count} columns; a virtual file holds at most {MAX_COLUMNS}")


def text_encoding(value: str) -> str:
    """The canonical name of a text codec (``ValueError`` otherwise): ``base64``, ``rot13`` or ``zlib``
    are codecs but not text encodings, and reading a file with them fails deep inside ``io``."""
    try:
        info = codecs.lookup(value)
    except LookupError:
        raise ValueError(f"unknown encoding {value!r}") from None
    if not getattr(info, "_is_text_encoding", True):
        raise ValueError(f"{value!r} is not a text encoding (it converts bytes to bytes or text to text)")
    return info.name


def refuse_nul_for_postgres(value: Any, field: str) -> None:
    """A 400 naming the first string in ``value`` that holds a NUL, which PostgreSQL's text cannot hold (a
    parameter holding one fails in the driver, as a 500 "database error")."""
    check_payload(value, field, nul_because=", which PostgreSQL's text cannot hold")
