"""DataFrames in and out of virtual files through Arrow: pandas, polars and pyarrow tables, no CSV between.

Push: every column becomes text the way Push stores a file's values — strings as they are, integers in
decimal, a float column whose values are all whole numbers (pandas' way of holding integers with gaps) as
integers (``3750``, not ``3750.0``), booleans as ``true``/``false`` — and a missing value (``None``,
``NaN``, ``NaT``, a null) stays missing, never ``""``. Pull: the strings and missing values exactly as
stored (``infer_types`` turns a column into numbers only where that loses nothing: ``"007"`` stays text).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from connector_ops.etl.readers import cell_text
from connector_ops.kernel.errors import ConnectorError, InvalidInput
from connector_ops.kernel.limits import holds_surrogate, lone_surrogate
from connector_ops.resources.virtual_files.shapes import unique_columns

if TYPE_CHECKING:
    from connector_ops.resources.virtual_files.store import VirtualFileStore

Kind = Literal["pandas", "polars", "pyarrow"]
BATCH_ROWS = 65_536
_INTEGER = r"-?(?:0|[1-9][0-9]{0,17})"  # canonical decimal integers that fit in int64


def _pandas(frame: Any) -> bool:
    return type(frame).__module__.split(".")[0] == "pandas" and hasattr(frame, "iloc")


def to_arrow(frame: Any, field: str = "frame") -> Any:
    """``frame`` as a ``pyarrow.Table`` (a pandas index with a name becomes a column; the default one is dropped)."""
    import pyarrow as pa

    if _pandas(frame):
        frame = _columns_as_text(frame)
        try:
            try:
                return pa.Table.from_pandas(frame, preserve_index=False)
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types in an object column: each value as text
                return pa.table({c: pa.array([_text(v) for v in frame[c]], pa.string()) for c in frame.columns})
        except UnicodeEncodeError:
            where = _surrogate_at(frame, field)
            if where is None:
                raise
            raise where from None
    if type(frame).__module__.split(".")[0] == "polars" and hasattr(frame, "to_arrow"):
        return frame.to_arrow()
    if isinstance(frame, pa.RecordBatch):
        return pa.Table.from_batches([frame])
    if isinstance(frame, pa.Table):
        return frame
    raise InvalidInput(field, f"expected a pandas DataFrame, got {type(frame).__name__} "
                              "(a polars DataFrame or a pyarrow Table works too)")


def _surrogate_at(frame: Any, field: str) -> InvalidInput | None:
    """Where in the pandas ``frame`` a string holds half a surrogate pair (Arrow only says that one does)."""
    for column in frame.columns:
        for label, value in frame[column].items():
            if isinstance(value, str) and (half := lone_surrogate(value)) is not None:
                return InvalidInput(f"{field}.{column}", f"the value at index {label!r} {holds_surrogate(half)}")
    return None


def _columns_as_text(frame: Any) -> Any:
    """A pandas frame with its named index as columns and every column name a unique string."""
    if [n for n in getattr(frame.index, "names", [None]) if n is not None]:
        frame = frame.reset_index()
    frame = frame.rename(columns=str)
    unique_columns(list(frame.columns))
    return frame


def _text(value: Any) -> str | None:
    import math

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if type(value).__name__ in ("NAType", "NaTType"):
        return None
    return cell_text(value) if isinstance(value, bool | int | float | dict | list | str) else str(value)


def text_column(column: Any) -> Any:
    """One Arrow column as strings, missing values as nulls (see the module doc for numbers)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.dictionary_decode(), kind.value_type
    if pa.types.is_floating(kind):
        column = pc.if_else(pc.is_nan(column), pa.scalar(None, kind), column)  # NaN is a missing value
        largest = pc.max(pc.abs(column)).as_py()
        if largest is not None and largest < 2**63 and pc.all(pc.equal(pc.floor(column), column)).as_py():
            return column.cast(pa.int64()).cast(pa.string())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind) \
            or pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind) \
            or pa.types.is_null(kind) or pa.types.is_decimal(kind):
        return column.cast(pa.string())
    return pa.array([_text(v) for v in column.to_pylist()], pa.string())


def frame_into(store: VirtualFileStore, frame: Any, field: str = "frame") -> str:
    """A new virtual file holding ``frame``'s rows; returns its id. A pandas frame goes to Arrow a slice at a
    time, so memory grows with the slice, not the frame."""
    if _pandas(frame):
        frame = _columns_as_text(frame)
        columns = list(frame.columns)
        parts = (frame.iloc[start:start + BATCH_ROWS] for start in range(0, len(frame), BATCH_ROWS))
        size = len(frame) * len(columns) * 16  # what the column-wise load needs to know: roughly the bytes
    else:
        table = to_arrow(frame, field)
        columns = [str(n) for n in table.column_names]
        parts = iter(table.to_batches(max_chunksize=BATCH_ROWS))
        size = table.nbytes
    return store.create_from_arrow(columns, (_as_text(to_arrow(part, field)) for part in parts), size=size)


def _as_text(table: Any) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([text_column(c) for c in table.columns],
                                      names=[f"c{i}" for i in range(table.num_columns)])


def frame_from(store: VirtualFileStore, vf_id: str, columns: Sequence[str] | None = None, *,
               kind: Kind = "pandas", infer_types: bool = False, field: str = "schema") -> Any:
    """The rows of ``vf_id`` as a DataFrame (or a pyarrow Table): strings, missing values as nulls."""
    import pyarrow as pa

    names, batches = store.scan_arrow(vf_id, columns, field=field)
    table = pa.Table.from_batches(list(batches), pa.schema([(n, pa.string()) for n in names]))
    if infer_types:
        table = pa.table([_lossless(c) for c in table.columns], names=names)
    if kind == "pyarrow":
        return table
    if kind == "polars":
        import polars as pl

        return pl.from_arrow(table)
    return table.to_pandas()


def _lossless(column: Any) -> Any:
    """Integers (or floats) where every value's text is exactly what the number prints as; else the strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    present = pc.drop_null(column)
    if len(present) == 0:
        return column
    if pc.all(pc.match_substring_regex(present, f"^{_INTEGER}$")).as_py():
        return column.cast(pa.int64())
    try:
        numbers = column.cast(pa.float64())
    except pa.ArrowInvalid:
        return column
    return numbers if pc.all(pc.equal(numbers.cast(pa.string()), column)).as_py() else column


# -- beside invoke(): the same, with the virtual-file store from the environment -----------------------
def push_frame(frame: Any, resources: Mapping[str, Any] | None = None) -> str:
    """Push a pandas or polars DataFrame or a pyarrow Table into a new virtual file; returns its id.

    Errors are :class:`ConnectorError` as from ``invoke("etl.push", …)``."""
    return run_with_store("etl.push", resources, lambda store: frame_into(store, frame))


def pull_frame(virtual_file_id: str, columns: Sequence[str] | None = None, *, kind: Kind = "pandas",
               infer_types: bool = False, resources: Mapping[str, Any] | None = None) -> Any:
    """The virtual file as a DataFrame (``kind``: pandas, polars or pyarrow), strings and missing values exact;
    ``columns`` selects and orders columns. Errors are :class:`ConnectorError` as from ``invoke("etl.pull", …)``."""
    return run_with_store("etl.pull", resources, lambda store: frame_from(store, virtual_file_id, columns, kind=kind,
                                                              infer_types=infer_types, field="columns"))


def run_with_store(action: str, resources: Mapping[str, Any] | None, work: Callable[[VirtualFileStore], Any]) -> Any:
    """``work(store)`` with the session's (or the given) virtual-file store; errors as the action's."""
    from connector_ops.registry import error_for, get_action
    from connector_ops.session import default_session

    spec = get_action(action)
    try:
        store = (resources if resources is not None else default_session().resources_for(["virtual_files"]))
        return work(store["virtual_files"])
    except ConnectorError:
        raise
    except Exception as exc:
        raise error_for(spec, exc) from exc
