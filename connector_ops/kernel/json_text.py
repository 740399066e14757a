"""JSON text as every entry point reads it, and compact JSON text of values from Python callers, as both
the ETL store and the mail payload write it.

``json`` writes NumPy's numbers only through a ``default`` and a ``Decimal`` only through ``float``, where
``2.50`` would become ``2.5`` and a 20-digit amount would lose digits: here each ``Decimal`` keeps its own
digits. The C encoder does all the work unless a ``Decimal`` is met, which stops it; then the value is
written again by a walk that hands every part without one back to the C encoder.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any


class _HasDecimal(Exception):
    pass


def _no_decimal(value: Any) -> Any:
    """The encoder's ``default``: NumPy's numbers as Python's; a ``Decimal`` stops it (see above)."""
    if isinstance(value, Decimal):
        raise _HasDecimal
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")  # check_payload refuses it first


_lenient = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_no_decimal).encode
_strict = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_no_decimal, allow_nan=False).encode


def compact_json(value: Any, *, allow_nan: bool = True) -> str:
    """Compact JSON of ``value`` (not ASCII-escaped). ``allow_nan=False`` raises ``ValueError`` at a NaN or an
    infinity, which JSON has not: for text sent to another program, where an input check should have
    refused them already."""
    encode = _lenient if allow_nan else _strict
    try:
        return encode(value)
    except _HasDecimal:
        return _with_decimals(value, encode)


def _with_decimals(value: Any, encode: Callable[[Any], str]) -> str:
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{encode(str(k))}:{_with_decimals(v, encode)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_with_decimals(v, encode) for v in value) + "]"
    if isinstance(value, Decimal):
        if not value.is_finite() and encode is _strict:
            raise ValueError(f"{value} is not a JSON number")
        return str(value)
    return encode(value)


def read_json(data: str | bytes, *, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """JSON text as a payload: a number with a fraction or an exponent as a ``Decimal``, as a Push reads a
    JSON row, so ``1.50`` from the CLI or the magic is stored ``"1.50"`` as a Push stores it (a float would
    make it ``1.5``, and 20 digits 17), and ``1e5`` ``"1E+5"`` alike. ``parse_constant`` gets ``NaN`` and
    the infinities (default: floats, which the payload check refuses naming the field)."""
    return json.loads(data, parse_float=Decimal, parse_constant=parse_constant)
