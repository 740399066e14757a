"""How a DataFrame's values become the text Push stores, one Arrow column at a time.

The rule is "what the same frame written to a file would hold": what ``DataFrame.to_csv`` and
``json.dumps`` write, so that pushing a frame and pushing the file made from it give the same rows.

- Strings as they are; integers in decimal; booleans as ``true``/``false`` (JSON's words, as Push stores
  a JSON file's booleans).
- A float column whose values are all whole numbers (pandas' way of holding integers with gaps) as
  integers: ``3750``, not ``3750.0``.
- Any other float as Python prints it (``1.0``, ``1e-07``, ``123456789012.0``). Arrow's own cast prints
  the same shortest digits, in another form (``1``, ``1.5e-7``, ``1.23456789012e+11``). So Arrow does the
  work, and only the values whose form differs are fixed: whole numbers get their ``.0``; numbers Arrow
  wrote with an exponent, and those where Python (or numpy, for a narrower float) switches to one — below
  1e-4, from 1e16 (a float32 from 1e6) — are printed again by numpy. Those are rare in real data.
- Bytes as the UTF-8 text they hold; bytes that are not UTF-8 are refused (:class:`NotText`), since no
  text file holds them either.
- A missing value (``None``, ``NaN``, ``NaT``, a null) stays missing, never ``""``.
"""

from __future__ import annotations

import math
from typing import Any


class NotText(ValueError):
    """The value at ``position`` of a column cannot become text: ``problem`` says why."""

    def __init__(self, position: int, problem: str) -> None:
        super().__init__(problem)
        self.position = position
        self.problem = problem


NOT_UTF8 = "is bytes that are not UTF-8 text; decode them to text first"


def text_column(column: Any) -> Any:
    """One Arrow column as strings, missing values as nulls (the module doc says how)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.dictionary_decode(), kind.value_type
    if pa.types.is_floating(kind):
        column = pc.if_else(pc.is_nan(column), pa.scalar(None, kind), column)  # NaN is a missing value
        wide = column.cast(pa.float32()) if pa.types.is_float16(kind) else column  # exact; Arrow computes on it
        largest = pc.max(pc.abs(wide)).as_py()
        if largest is not None and largest < 2**63 and pc.all(pc.equal(pc.floor(wide), wide)).as_py():
            return wide.cast(pa.int64()).cast(pa.string())
        return float_text(column)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind) \
            or pa.types.is_binary_view(kind):
        return _utf8(column)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind) \
            or pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_null(kind) \
            or pa.types.is_decimal(kind):
        return column.cast(pa.string())
    return pa.array([_at(i, value_text, v) for i, v in enumerate(column.to_pylist())], pa.string())


def float_text(column: Any) -> Any:
    """Each float of an Arrow float column (no NaN) as Python prints it; nulls stay null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_float16(column.type):  # Arrow prints a half float's digits widened: numpy prints them all
        redo = pc.is_valid(column)
        text = pa.nulls(len(column), pa.string())
    else:
        text = column.cast(pa.string())
        whole = pc.invert(pc.match_substring_regex(text, "[.en]"))  # "1", "-0"; not "inf", "1e+20"
        text = pc.if_else(whole, pc.binary_join_element_wise(text, ".0", ""), text)
        size = pc.abs(column)
        odd = pc.or_(pc.less(size, 1e-4), pc.greater_equal(size, 1e16 if pa.types.is_float64(column.type) else 1e6))
        redo = pc.fill_null(pc.or_(pc.match_substring(text, "e"), pc.and_(odd, pc.not_equal(column, 0))), False)
    if not pc.any(redo).as_py():
        return text
    natives = column.to_numpy(zero_copy_only=False)
    again = pa.array([str(natives[i]) for i in pc.indices_nonzero(redo).to_numpy()], pa.string())
    return pc.replace_with_mask(text, redo, again)


def value_text(value: Any) -> str | None:
    """One Python value as text (a column Arrow could not type as a whole: mixed, nested, dates…)."""
    from connector_ops.etl.readers import cell_text

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if type(value).__name__ in ("NAType", "NaTType"):
        return None
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8")
    return cell_text(value) if isinstance(value, bool | int | dict | list | str) else str(value)


def _at(position: int, convert: Any, value: Any) -> str | None:
    try:
        return convert(value)
    except UnicodeDecodeError:
        raise NotText(position, NOT_UTF8) from None


def _utf8(column: Any) -> Any:
    import pyarrow as pa

    try:
        return column.cast(pa.string())
    except pa.ArrowInvalid:
        for position, value in enumerate(column.to_pylist()):
            _at(position, value_text, value)
        raise
