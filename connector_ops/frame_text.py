"""How a DataFrame's values become the text Push stores, one Arrow column at a time.

The rule is "what the same frame written to a file would hold": what ``DataFrame.to_csv`` and
``json.dumps`` write, so that pushing a frame and pushing the file made from it give the same rows.

- Strings as they are; integers in decimal; booleans as ``true``/``false`` (JSON's words, as Push stores
  a JSON file's booleans).
- A float column whose values are all whole numbers (pandas' way of holding integers with gaps) as
  integers: ``3750``, not ``3750.0``. Like a timestamp's form, :func:`column_form` decides this over the
  whole column (a frame goes in slices); in a stream, whose later batches cannot be seen, each float is
  printed as Python prints it (``1.0``), so no column holds both ``1`` and ``1.0``.
- Any other float as Python prints it (``1.0``, ``1e-07``, ``123456789012.0``). Arrow's own cast prints
  the same shortest digits, in another form (``1``, ``1.5e-7``, ``1.23456789012e+11``). So Arrow does the
  work, and only the values whose form differs are fixed: whole numbers get their ``.0``; numbers Arrow
  wrote with an exponent, and those where Python (or numpy, for a narrower float) switches to one — below
  1e-4, from 1e16 (a float32 from 1e6) — are printed again by numpy. Those are rare in real data.
- Dates and times as ``to_csv`` writes them: a column of dates only (all at midnight, no time zone) as
  ``2024-01-01``, else ``2024-01-01 05:06:07`` with as many digits of the second as the column needs (0,
  3, 6 or 9) and the offset of its time zone (``+01:00``). :func:`timestamp_form` decides over the whole
  column (a frame goes in slices); Arrow prints, and its text is cut to that form.
- A duration as pandas prints each (``1 days 02:00:00``), whichever library made the column. (pandas' own
  types that Arrow lacks are turned into text before Arrow sees them: ``frames._pandas_only_as_text``; so
  are Python datetimes of several time zones in one column, which Arrow would put in the first one's.)
- Bytes as the UTF-8 text they hold; bytes that are not UTF-8 are refused (:class:`NotText`), since no
  text file holds them either.
- A list, struct, map or dict as compact JSON (``[1,2]``, ``{"a":"x"}``), a NaN inside as ``null``; a
  value inside one that JSON has no type for as the text it would have in a column of its own: a date
  or time as Python prints it (``"2024-01-01 05:00:00"``), a duration as pandas prints it, bytes as
  their UTF-8 text (:func:`_json_part`).
- A missing value (``None``, ``NaN``, ``NaT``, a null) stays missing, never ``""``.
"""

from __future__ import annotations

import datetime as dt
import math
import numbers
from collections.abc import Iterable
from typing import Any

from connector_ops.kernel.json_text import COMPACT, json_text


class NotText(ValueError):
    """The value at ``position`` of a column cannot become text: ``problem`` says why."""

    def __init__(self, position: int, problem: str) -> None:
        super().__init__(problem)
        self.position = position
        self.problem = problem


NOT_UTF8 = "is bytes that are not UTF-8 text; decode them to text first"


def column_form(column: Any) -> int | bool | None:
    """What the whole column decides for the text of each of its slices: a timestamp column's
    :func:`timestamp_form`, whether a float column holds only whole numbers, ``None`` for other columns. A
    dictionary (a Categorical) decides by the values it holds, as ``to_csv`` writes them, not by its
    dictionary (a category no row holds)."""
    import pyarrow as pa

    kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    if pa.types.is_timestamp(kind):
        if kind != column.type:
            column = column.cast(kind)  # the dictionary's values, row by row (a chunked one too)
        return timestamp_form(column)
    if pa.types.is_floating(kind):
        return _whole_numbers(_floats(column)[1])
    return None


def _floats(column: Any) -> tuple[Any, Any]:
    """A float column with NaN as a missing value, and the same widened where Arrow cannot compute on it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    column = pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column)  # NaN is a missing value
    return column, column.cast(pa.float32()) if pa.types.is_float16(column.type) else column  # exact


def _whole_numbers(wide: Any) -> bool:
    """Whether every float is a whole number an integer holds (true of no value at all, so that the parts
    of a column combine: :func:`batches_forms`)."""
    import pyarrow.compute as pc

    largest = pc.max(pc.abs(wide)).as_py()
    return largest is None or (largest < 2**63 and pc.all(pc.equal(pc.floor(wide), wide)).as_py())


def batches_forms(batches: Iterable[Any]) -> dict[int, int | bool]:
    """:func:`column_form` of each column over every batch (a file read once for them, a batch at a time):
    the most digits of a second any batch needs, whole numbers only if every batch holds only those."""
    forms: dict[int, int | bool] = {}
    for batch in batches:
        for i, column in enumerate(batch.columns):
            form = column_form(column)
            if form is None:
                continue
            if i in forms:
                form = (forms[i] and form) if isinstance(form, bool) else max(forms[i], form)
            forms[i] = form
    return forms


def text_column(column: Any, form: int | bool | None = None) -> Any:
    """One Arrow column as strings, missing values as nulls (the module doc says how); ``form`` is the
    :func:`column_form` of the whole column a slice comes from (``None``, a stream's: each value's own)."""
    import pyarrow as pa

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.dictionary_decode(), kind.value_type
    if pa.types.is_floating(kind):
        column, wide = _floats(column)
        return wide.cast(pa.int64()).cast(pa.string()) if form is True else float_text(column)
    if pa.types.is_timestamp(kind):
        return timestamp_text(column, form)
    if pa.types.is_duration(kind):  # as pandas prints each (1 days 02:00:00), whichever library made it
        durations = column.to_pandas()
        return pa.array(durations.map(str).where(durations.notna(), None), pa.string())
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind) \
            or pa.types.is_binary_view(kind):
        return _utf8(column)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind) \
            or pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_null(kind) \
            or pa.types.is_decimal(kind) or pa.types.is_date(kind):
        return column.cast(pa.string())
    return values_text(column.to_pylist())


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


_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def timestamp_form(column: Any) -> int:
    """How many characters of Arrow's text of a timestamp to keep: 10 (dates only), 19 (whole seconds), or
    19 + 1 + 3, 6 or 9 (the fewest digits of the second that hold every value), as ``to_csv`` picks."""
    import numpy as np
    import pyarrow as pa

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    ticks = np.asarray(column.cast(pa.int64()).drop_null())
    per_second = _PER_SECOND[column.type.unit]
    if column.type.tz is None and not np.any(ticks % (86_400 * per_second)):
        return 10
    for digits in (0, 3, 6):
        if 10**digits >= per_second or not np.any(ticks % (per_second // 10**digits)):
            return 19 + (digits and 1 + digits)
    return 29


def timestamp_text(column: Any, form: int | None) -> Any:
    """A timestamp column's text in ``form`` (:func:`timestamp_form`), the offset of its time zone after.
    ``None`` (a stream, whose later batches cannot be seen): each value as Python prints it, its seconds
    then the digits of the unit where the value has a fraction (``2024-01-01 05:06:07``, ``….500000``).
    Arrow's text is cut from its end, so a year of five digits (numpy's can reach 294,247) stays whole."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = column.cast(pa.string())  # 2024-01-01 05:06:07.000000, then Z or +0100 where there is a time zone
    zoned = column.type.tz is not None
    if form is None:
        text, drop = pc.replace_substring_regex(text, r"^([^.]*)\.0+([Z+-].*)?$", r"\1\2"), 0
    else:
        printed = {"s": 0, "ms": 4, "us": 7, "ns": 10}[column.type.unit]  # the fraction Arrow prints, its point too
        drop = printed - (form - 19) if form > 10 else printed + 9  # …and a date's " 05:06:07"
    if not zoned:
        return pc.utf8_slice_codeunits(text, 0, -drop) if drop else text
    text = pc.replace_substring_regex(text, "Z$", "+0000")
    return pc.replace_substring_regex(text, f"^(.*).{{{drop}}}([+-][0-9][0-9])([0-9][0-9])$", r"\1\2:\3")


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
    if isinstance(value, dict | list):
        return json_text(_nan_as_null(value), separators=COMPACT, default=_json_part)
    if isinstance(value, bool | int | str):
        return cell_text(value)
    if isinstance(value, dt.timedelta):  # as in a column of durations, not Python's "1 day, 0:00:00"
        return _json_part(value)
    return str(value)  # a NumPy float32 as NumPy prints it: 0.1


def _nan_as_null(value: Any) -> Any:
    """``value`` (a list or dict) with each NaN inside as ``None``: a missing value, JSON's ``null``, as from a
    pandas column of lists (Arrow's ``from_pandas`` reads NaN so), not ``NaN``, which no JSON reader takes."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_as_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nan_as_null(v) for v in value]
    return value


def _json_part(value: Any) -> Any:
    """A value inside a list or dict that JSON has no type for, as JSON: NumPy's numbers and arrays as
    Python's, bytes as their UTF-8 text (``UnicodeDecodeError`` where they are not), a duration as pandas
    prints it (``1 days 02:00:00``, as in a column of durations), anything else (a date, a time, a UUID)
    as it prints. A struct of an Arrow or polars column hands its dates and times as Python's here."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return None if math.isnan(value) else float(value)  # a NumPy float32 NaN, as a float's
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8")
    if isinstance(value, dt.timedelta):
        import pandas as pd

        return str(pd.Timedelta(value))
    if hasattr(value, "tolist") and hasattr(value, "ndim"):  # a NumPy array in a pandas object column
        return value.tolist()
    return str(value)


def values_text(values: Iterable[Any]) -> Any:
    """Python values as an Arrow string array (:func:`value_text` each); :class:`NotText` at the first that
    cannot become text."""
    import pyarrow as pa

    return pa.array([_text_at(position, value) for position, value in enumerate(values)], pa.string())


def _text_at(position: int, value: Any) -> str | None:
    try:
        return value_text(value)
    except UnicodeDecodeError:
        raise NotText(position, NOT_UTF8) from None


def _utf8(column: Any) -> Any:
    import pyarrow as pa

    try:
        return column.cast(pa.string())
    except pa.ArrowInvalid:  # bytes that are not UTF-8: the values again, one at a time, to say which
        return values_text(column.to_pylist())
