"""JSON text as every entry point reads it, and JSON text of values from Python callers: compact as both
the ETL store and the mail payload write it, spaced as the magic's ``{{…}}`` inserts it.

``json`` writes NumPy's numbers only through a ``default`` and a ``Decimal`` only through ``float``, where
``2.50`` would become ``2.5`` and a 20-digit amount would lose digits: here each ``Decimal`` keeps its own
digits. The C encoder does all the work unless a ``Decimal`` is met, which stops it; then the value is
written again by a walk that hands every part without one back to the C encoder.
"""

from __future__ import annotations

import functools
import json
import numbers
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any


class _HasDecimal(Exception):
    pass


def _numbers(value: Any) -> Any:
    """The default ``default``: NumPy's numbers as Python's."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")  # check_payload refuses it first


COMPACT = (",", ":")
#: ``json.dumps``'s own spacing
SPACED = (", ", ": ")


@functools.lru_cache(maxsize=8)
def _encoder(separators: tuple[str, str], allow_nan: bool,
             default: Callable[[Any], Any]) -> Callable[[Any], str]:
    """The C encoder with ``default`` behind a check that stops it at a ``Decimal`` (see above)."""
    def stop_at_decimal(value: Any) -> Any:
        if isinstance(value, Decimal):
            raise _HasDecimal
        return default(value)

    return json.JSONEncoder(ensure_ascii=False, separators=separators, default=stop_at_decimal,
                            allow_nan=allow_nan).encode


def json_text(value: Any, *, separators: tuple[str, str] = SPACED, allow_nan: bool = True,
              default: Callable[[Any], Any] = _numbers) -> str:
    """JSON of ``value`` (not ASCII-escaped) with each ``Decimal`` written with its own digits, ``json.dumps``'s
    spacing unless ``separators`` says otherwise; ``default`` turns other objects into JSON values, as
    ``json.dumps``'s does. ``allow_nan=False`` raises ``ValueError`` at a NaN or an infinity, which JSON has
    not: for text sent to another program, where an input check should have refused them already."""
    encode = _encoder(separators, allow_nan, default)
    try:
        return encode(value)
    except _HasDecimal:
        return _with_decimals(value, encode, separators, allow_nan, default)


def compact_json(value: Any, *, allow_nan: bool = True) -> str:
    """Compact JSON of ``value``, as the ETL store keeps a row and the mail payload is sent (:func:`json_text`)."""
    return json_text(value, separators=COMPACT, allow_nan=allow_nan)


def _with_decimals(value: Any, encode: Callable[[Any], str], separators: tuple[str, str], allow_nan: bool,
                   default: Callable[[Any], Any]) -> str:
    item, key = separators

    def walk(part: Any) -> str:
        if isinstance(part, Mapping):
            return "{" + item.join(f"{encode(str(k))}{key}{walk(v)}" for k, v in part.items()) + "}"
        if isinstance(part, list | tuple):
            return "[" + item.join(walk(v) for v in part) + "]"
        if isinstance(part, Decimal):
            if not part.is_finite() and not allow_nan:
                raise ValueError(f"{part} is not a JSON number")
            return str(part)
        try:
            return encode(part)
        except _HasDecimal:  # an object whose ``default`` value holds a Decimal (a DataFrame of Decimals)
            return walk(default(part))

    return walk(value)


def read_json(data: str | bytes, *, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """JSON text as a payload: a number with a fraction or an exponent as a ``Decimal``, as a Push reads a
    JSON row, so ``1.50`` from the CLI or the magic is stored ``"1.50"`` as a Push stores it (a float would
    make it ``1.5``, and 20 digits 17), and ``1e5`` ``"1E+5"`` alike. ``parse_constant`` gets ``NaN`` and
    the infinities (default: floats, which the payload check refuses naming the field)."""
    return json.loads(data, parse_float=Decimal, parse_constant=parse_constant)
