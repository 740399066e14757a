"""polars frames as Arrow tables, with the columns that polars exports as something else than their values
made text first. A polars DataFrame is read whole (:func:`connector_ops.frames.to_arrow`), a LazyFrame a
part at a time (:func:`connector_ops.frame_streams.arrow_stream`): both through :func:`polars_table`."""

from __future__ import annotations

from typing import Any

from connector_ops.frame_text import value_text


def polars_table(frame: Any) -> Any:
    """``frame`` (a polars DataFrame) as a ``pyarrow.Table``. An ``Int128`` or ``UInt128`` column (no Arrow
    type: the export fails) as its digits. An ``Object`` column, whose Python values polars exports as the
    8 bytes of each one's memory address, as each value's text, as pandas gives an ``object`` column of
    such values (:func:`.frame_text.value_text`: ``str(value)``, a ``Decimal``'s digits, a dict or list as
    compact JSON); that text goes as UTF-8 bytes, and bytes as they are, so that
    :func:`.frame_text.text_column` refuses bytes that are not UTF-8 with the row that holds them, here as
    for any column of bytes."""
    import polars as pl

    wide = [name for name, kind in frame.schema.items() if str(kind) in ("Int128", "UInt128")]  # none in Arrow
    objects = [pl.Series(name, [_bytes(v) for v in frame[name].to_list()], dtype=pl.Binary)
               for name, kind in frame.schema.items() if kind == pl.Object]
    if wide or objects:
        frame = frame.with_columns(pl.col(wide).cast(pl.String), *objects)
    return frame.to_arrow()


def _bytes(value: Any) -> bytes | None:
    """A Python value as the UTF-8 bytes of its text (a lone surrogate kept, to be refused with its row as
    bytes that are not UTF-8 are); bytes as they are; a missing value as ``None``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    try:
        text = value_text(value)
    except UnicodeDecodeError as exc:  # bytes inside a list or dict: refused as those bytes, with the row
        return bytes(exc.object)
    return None if text is None else text.encode("utf-8", "surrogatepass")
