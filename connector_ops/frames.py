"""DataFrames in and out of virtual files through Arrow: pandas, polars and pyarrow tables, no CSV between.

Push: every value becomes the text the same frame written to a file would hold
(:mod:`connector_ops.frame_text`), and a missing value (``None``, ``NaN``, ``NaT``, a null) stays missing,
never ``""``. A Series is a one-column frame. Pull: the strings and missing values exactly as
stored (``infer_types`` turns a column into numbers only where that loses nothing: ``"007"`` stays text).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from connector_ops.frame_polars import polars_table
from connector_ops.frame_streams import arrow_stream, peeked, positioned
from connector_ops.frame_text import NotText, column_form, float_text, text_column, values_text
from connector_ops.kernel import limits
from connector_ops.kernel.errors import ConnectorError, InvalidInput
from connector_ops.kernel.limits import NUL_REFUSED, check_column_names, holds_surrogate, lone_surrogate
from connector_ops.kernel.notices import warn
from connector_ops.kernel.progress import reported, track

if TYPE_CHECKING:  # for a user's type checker: pull_frame's result follows its kind (polars is optional)
    import pandas as pd
    import polars as pl
    import pyarrow as pa

    from connector_ops.resources.virtual_files.store import VirtualFileStore

Kind = Literal["pandas", "polars", "pyarrow"]
BATCH_ROWS = 65_536
#: canonical decimal integers of int64's length, 19 digits at most ("-0" is not one); the cast then refuses the
#: 19-digit ones past int64's range, which stay text
_INTEGER = r"(?:0|-?[1-9][0-9]{0,18})"
#: what push_frame takes, as a refusal says it
ACCEPTED = ("a pandas or polars DataFrame or Series, a polars LazyFrame, a pyarrow Table, RecordBatch, "
            "RecordBatchReader, Dataset or Scanner, or anything that gives an Arrow stream")


def _refused() -> tuple[type[Exception], ...]:
    """What ``Table.from_pandas`` raises for a column it cannot type (pyarrow is imported only when used)."""
    import pyarrow as pa

    return pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError


def _pandas(frame: Any) -> bool:  # not isinstance: pandas is imported only when a frame is one
    return type(frame).__module__.split(".")[0] == "pandas" and hasattr(frame, "iloc")


def as_frame(frame: Any, field: str = "frame") -> Any:
    """A pandas or polars Series as a one-column frame (named as ``to_csv`` would name it); a pandas frame
    with its index as columns (:func:`_index_as_columns`) and every column name a unique string (a column of
    several levels named ``"('x', 'a')"``, as pyarrow and polars name it); anything else as it is."""
    if type(frame).__module__.split(".")[0] in ("pandas", "polars") and hasattr(frame, "to_frame") \
            and not hasattr(frame, "columns"):
        frame = frame.to_frame()
    if not _pandas(frame):
        return frame
    frame = _index_as_columns(frame, field)
    frame = frame.set_axis([str(c) for c in frame.columns], axis=1)
    check_column_names(list(frame.columns), f"{field}.columns")
    return frame


def _index_as_columns(frame: Any, field: str) -> Any:
    """``frame`` with its index as its first column(s), as ``to_csv`` writes it (dates of a time series, the
    labels of a transposed frame), except an unnamed integer index: row numbers by pandas' convention (a
    RangeIndex, or what a filter ``df[df.x > 1]`` leaves), a noisy column in most frames. An unnamed level
    is named as ``reset_index()`` names it: ``index``, or ``level_0``, ``level_1`` … in a MultiIndex. Where
    a column has the name already, a 400: ``reset_index()`` would pick another for an unnamed one, which
    nothing here could tell, and fail for a named one (``set_index("id", drop=False)``). The frame keeps its
    index labels, by which an error names a value."""
    import pandas as pd

    index = frame.index
    if index.nlevels == 1 and index.name is None and pd.api.types.is_integer_dtype(index.dtype):
        return frame
    single = index.nlevels == 1
    names = [("index" if single else f"level_{i}") if name is None else name for i, name in enumerate(index.names)]
    for name, own in zip(names, index.names, strict=True):
        if _column_key(frame, name) not in frame.columns:
            continue
        if own is None:
            raise InvalidInput(f"{field}.index", f"the index, unnamed, would become the column {name!r}, but a "
                                                 "column has that name already: name the index "
                                                 "(df.rename_axis(…)) or drop it (df.reset_index(drop=True))")
        raise InvalidInput(f"{field}.index", f"the index is named {name!r}, as a column is (the index is kept "
                                             "as a column): drop the index (df.reset_index(drop=True)) or "
                                             "rename it (df.rename_axis(…))")
    return frame.reset_index(names=names).set_axis(index, axis=0)


def _column_key(frame: Any, name: Any) -> Any:
    """The column ``reset_index`` makes of an index level ``name``: with columns of several levels, the name
    then ``""`` for each further level."""
    levels = frame.columns.nlevels
    return name if levels == 1 or isinstance(name, tuple) else (name, *[""] * (levels - 1))


def to_arrow(frame: Any, field: str = "frame") -> Any:
    """``frame`` (after :func:`as_frame`) as a ``pyarrow.Table``; a pandas frame's index is dropped."""
    import pyarrow as pa

    if _pandas(frame):
        frame = _pandas_only_as_text(frame)
        try:
            try:
                return pa.Table.from_pandas(frame, preserve_index=False)
            except _refused():  # only the columns Arrow cannot type become text here: the others keep their form
                return pa.table({c: _pandas_column(frame[c], field) for c in frame.columns})
        except UnicodeEncodeError:
            where = _surrogate_at(frame, field)
            if where is None:
                raise
            raise where from None
    if type(frame).__module__.split(".")[0] == "polars" and hasattr(frame, "to_arrow"):
        return polars_table(frame)
    if isinstance(frame, pa.RecordBatch):
        return pa.Table.from_batches([frame])
    if isinstance(frame, pa.Table):
        return frame
    if isinstance(frame, pa.Array | pa.ChunkedArray):  # table["a"]
        raise InvalidInput(field, f"got a pyarrow {type(frame).__name__}, one column, not a table: make it one "
                                  "(pa.table({'name': column}))")
    raise InvalidInput(field, f"expected a DataFrame or table ({ACCEPTED}), got {type(frame).__name__}")


def _pandas_only_as_text(frame: Any) -> Any:
    """``frame`` with the columns of pandas' own types as pandas prints each value (Arrow refuses them, or
    takes a Period as its ordinal number): ``2024-01``, ``(0, 1]``, ``(1+2j)``, ``1 days 02:00:00``; Python
    ``Decimal`` values each as it prints (``2``, ``1.10``); and Python dates and datetimes of several kinds
    in one column (:func:`_several_kinds`) each as it prints, as ``to_csv`` writes them. A sparse column is
    made dense first."""
    import pandas as pd

    changed = {}
    for name in frame.columns:
        column = frame[name]
        if isinstance(column.dtype, pd.SparseDtype):
            column = changed[name] = column.sparse.to_dense()
        if _decoded_categorical(column):
            column = changed[name] = column.astype(column.dtype.categories.dtype)
        if isinstance(column.dtype, pd.PeriodDtype | pd.IntervalDtype) or column.dtype.kind in "cm":
            text = column.map(str) if column.dtype.kind == "m" else column.astype(str)  # timedeltas: each whole
            changed[name] = text.where(column.notna(), None)
        elif column.dtype == object:
            inferred = pd.api.types.infer_dtype(column, skipna=True)
            if inferred == "decimal":
                changed[name] = column.map(str, na_action="ignore")  # each its own digits: Arrow pads to one scale
            elif inferred in ("datetime", "date") and _several_kinds(column):
                changed[name] = column.map(str, na_action="ignore").where(column.notna(), None)
    return frame.assign(**changed) if changed else frame


def _decoded_categorical(column: Any) -> bool:
    """Whether ``column`` is a Categorical that goes to Arrow as its plain column: of zoned timestamps
    (pyarrow 22–24, the floor is 22, drop the categories' zone, storing Paris midnight as ``23:00`` naive),
    or of values :func:`_pandas_only_as_text` makes text, which Arrow would store otherwise than
    ``to_csv`` writes them: a Period as its ordinal number (``648`` for ``2024-01``), an Interval as a
    struct (``{"left":0,"right":1}``), a Python ``Decimal`` padded to one scale (``2.00``), a complex
    number refused."""
    import pandas as pd

    dtype = column.dtype
    if not isinstance(dtype, pd.CategoricalDtype):
        return False
    categories = dtype.categories
    if getattr(categories.dtype, "tz", None) is not None or categories.dtype.kind == "c" \
            or isinstance(categories.dtype, pd.PeriodDtype | pd.IntervalDtype):
        return True
    return categories.dtype == object and pd.api.types.infer_dtype(categories) in ("decimal", "datetime", "date")


def _several_kinds(column: Any) -> bool:
    """Whether an object column's dates and datetimes are of more than one kind, or finer than Arrow holds
    them: dates and datetimes, naive and aware datetimes, datetimes of different time zones (``+01:00`` and
    ``+02:00`` parsed from an API's text, Paris and UTC), a pandas ``Timestamp`` with nanoseconds. Arrow
    gives the column one type, the first value's, in microseconds: every value was stored in the first
    one's offset (``09:00+02:00`` as ``08:00+01:00``), a naive one labelled with it, a naive first made the
    aware ones naive, a date first cut the datetimes to their day, nanoseconds were dropped. One time zone
    (a ``ZoneInfo`` across summer and winter) is one kind: Arrow keeps it, and prints each value in its own
    offset."""
    import datetime as dt

    values = column.dropna()
    if values.empty:
        return False
    day, zone = not isinstance(values.iloc[0], dt.datetime), getattr(values.iloc[0], "tzinfo", None)
    for value in values:
        if getattr(value, "nanosecond", 0) or (not isinstance(value, dt.datetime)) != day:
            return True
        other = getattr(value, "tzinfo", None)
        if other is not zone and (other is None or zone is None or other != zone):
            return True
    return False


def _pandas_column(column: Any, field: str) -> Any:
    """One pandas column as Arrow types it; where it cannot (mixed types in an object column: ints and
    strings, a Python int past 64 bits, a UUID inside a dict), each value as text (:func:`_values_as_text`)."""
    import pyarrow as pa

    try:
        return pa.Table.from_pandas(column.to_frame(), preserve_index=False).column(0)
    except _refused():
        return _values_as_text(column, field)


def _values_as_text(column: Any, field: str) -> Any:
    try:
        return values_text(column)
    except NotText as exc:
        raise _not_text(exc, field, column.name, column.index) from None


def _not_text(exc: NotText, field: str, name: str, labels: Sequence[Any]) -> InvalidInput:
    """A 400 naming the column and the value's index label (a frame's) or row (a table's or stream's)."""
    label = labels[exc.position]
    label = label.item() if hasattr(label, "item") and hasattr(label, "dtype") else label  # np.int64(6) as 6
    return InvalidInput(f"{field}.{name}", f"the value at index {label!r} {exc.problem}")


def _surrogate_at(frame: Any, field: str) -> InvalidInput | None:
    """Where in the pandas ``frame`` a string holds half a surrogate pair (Arrow only says that one does)."""
    for column in frame.columns:
        for label, value in frame[column].items():
            if isinstance(value, str) and (half := lone_surrogate(value)) is not None:
                return InvalidInput(f"{field}.{column}", f"the value at index {label!r} {holds_surrogate(half)}")
    return None


def frame_into(store: VirtualFileStore, frame: Any, field: str = "frame",
               stream_forms: Mapping[int, int | bool | None] | None = None, stream_size: int | None = None) -> str:
    """A new virtual file holding ``frame``'s rows; returns its id. A pandas frame goes to Arrow a slice at a
    time, and a stream a batch at a time, so memory grows with the slice or batch, not the frame.
    ``stream_forms``: a stream's :func:`.frame_text.column_form` of each column, where its source could be
    read for them first (a Parquet file); else each value of a stream is written in its own form.
    ``stream_size``: a stream's size in bytes where its source knows it (a Parquet file's footer); else its
    first batches are read and held to measure it (:func:`.frame_streams.peeked`), and a stream without
    rows is told of (:func:`_told_if_empty`): a caller's reader may have been read before, a file cannot."""
    frame = as_frame(frame, field)
    if _pandas(frame):
        columns = list(frame.columns)
        forms: dict[int, int | bool | None] = {
            i: form for i, c in enumerate(columns) if (form := _pandas_form(frame[c])) is not None}
        slices = (frame.iloc[start:start + BATCH_ROWS] for start in range(0, len(frame), BATCH_ROWS))
        parts: Iterator[tuple[Any, Sequence[Any]]] = ((to_arrow(part, field), part.index) for part in slices)
        size: int | None = len(frame) * len(columns) * 16  # what the column-wise load needs: roughly the bytes
        total: int | None = len(frame)
    elif (stream := arrow_stream(frame)) is not None:  # later batches unseen: each timestamp its own form
        names, batches = stream
        columns, forms = [str(n) for n in names], dict(stream_forms or {})
        if stream_size is not None:  # a file read here, once (a Parquet file): its emptiness is its own
            size, parts = stream_size, positioned(batches)
        else:
            size, batches = peeked(batches)
            parts = _told_if_empty(positioned(batches), field)
        total = None
    else:
        table = to_arrow(frame, field)
        columns = [str(n) for n in table.column_names]
        forms = {i: column_form(c) for i, c in enumerate(table.columns)}
        parts = positioned(table.to_batches(max_chunksize=BATCH_ROWS))
        size, total = table.nbytes, table.num_rows
    check_column_names(columns, f"{field}.columns")
    with track("push DataFrame", total, "rows") as reporter:
        counted = reported(parts, reporter, lambda part: len(part[1]))
        nul = not store.holds_nul
        return store.create_from_arrow(columns, (_as_text(part, labels, columns, forms, field, nul)
                                                 for part, labels in counted), size=size)


def _pandas_form(column: Any) -> int | bool | None:
    """:func:`.frame_text.column_form` of a pandas column of timestamps or floats, or a Categorical of them
    (``to_csv`` writes a Categorical of dates as ``2024-01-01`` too), over the whole column before it goes
    to Arrow in slices; ``None`` for other columns. An ``object`` column of Python floats is a float column
    here, as Arrow makes it: what ``df.replace({np.nan: None})`` or ``df.where(df.notna(), None)`` leaves of
    integers with gaps, which were stored ``3750.0`` while the column they came from stores ``3750``."""
    import pandas as pd
    import pyarrow as pa

    if _decoded_categorical(column):
        column = column.astype(column.dtype.categories.dtype)
    categorical = isinstance(column.dtype, pd.CategoricalDtype)
    kind = column.dtype.categories.dtype.kind if categorical else column.dtype.kind
    if kind == "O" and pd.api.types.infer_dtype(column, skipna=True) in ("floating", "mixed-integer-float"):
        kind = "f"
    if kind not in "Mf":
        return None
    if kind == "M" or categorical:  # a Categorical: a dictionary column_form decodes
        return column_form(pa.array(column))
    return column_form(pa.array(column.to_numpy(dtype="float64", na_value=math.nan)))


def _told_if_empty(parts: Iterator[tuple[Any, range]], field: str) -> Iterator[tuple[Any, range]]:
    """``parts``, with a warning when a stream gives no rows: a reader already read gives none, silently, and
    nothing can tell it from one that is empty (pyarrow keeps no such state)."""
    rows = 0
    for part, labels in parts:
        rows += len(labels)
        yield part, labels
    if not rows:
        warn(f"{field}: the stream gave no rows, so the virtual file is empty (a RecordBatchReader or other "
             "Arrow stream can be read only once: was it read before?)")


def _as_text(table: Any, labels: Sequence[Any], columns: Sequence[str], forms: Mapping[int, int | bool | None],
             field: str, refuse_nul: bool = False) -> Any:
    """One slice or batch as text columns (:func:`.frame_text.text_column`); a value that cannot become text, or
    whose text is longer than :data:`~connector_ops.kernel.limits.MAX_VALUE` (:func:`_longer_than_allowed`),
    is a 400 naming its column and its index label (a frame's) or row (a table's or stream's)."""
    import pyarrow as pa

    texts = []
    for i, (name, column) in enumerate(zip(columns, table.columns, strict=True)):
        try:
            text = text_column(column, forms.get(i))
        except NotText as exc:
            raise _not_text(exc, field, name, labels) from None
        if (position := _longer_than_allowed(text)) is not None:
            raise _not_text(NotText(position, limits.longer_than_allowed("is")), field, name, labels)
        if refuse_nul and (position := _first_nul(text)) is not None:
            raise _not_text(NotText(position, NUL_REFUSED), field, name, labels)
        texts.append(text)
    return pa.RecordBatch.from_arrays(texts, names=[f"c{i}" for i in range(table.num_columns)])


def _first_nul(text: Any) -> int | None:
    """The position of the first value of the Arrow string column ``text`` that holds a NUL character, which
    PostgreSQL refuses: the load's own 400 could not say which column and row; ``None`` when there is none.
    The bytes of a ``string`` column's values are searched first (NumPy's ``min``: 0.6 ms per million values
    of 20 bytes, where Arrow's match on every value took 100 ms), the values only where a zero is found."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    data = text.buffers()[2] if text.type == pa.string() else None
    if data is not None and (data.size == 0 or np.frombuffer(data, np.uint8).min() > 0):
        return None
    found = pc.match_substring(text, "\x00")
    if not pc.any(found).as_py():
        return None
    return pc.index(found, True).as_py()


def _longer_than_allowed(text: Any) -> int | None:
    """The position of the first value of the Arrow string column ``text`` longer than ``limits.MAX_VALUE``
    characters, which Push would refuse once Pull exported the file; ``None`` when there is none. Arrow
    measures: the bytes of the longest value first (a value has at least as many bytes as characters, so
    this settles nearly every column), its characters only where that is over the limit."""
    import pyarrow.compute as pc

    if len(text) == 0 or (pc.max(pc.binary_length(text)).as_py() or 0) <= limits.MAX_VALUE:
        return None
    position = pc.index(pc.greater(pc.utf8_length(text), limits.MAX_VALUE), True).as_py()
    return None if position < 0 else position


def frame_from(store: VirtualFileStore, vf_id: str, columns: Sequence[str] | None = None, *,
               kind: Kind = "pandas", infer_types: bool = False, field: str = "schema") -> Any:
    """The rows of ``vf_id`` as a DataFrame (or a pyarrow Table): strings, missing values as nulls."""
    import pyarrow as pa

    names, batches = store.scan_arrow(vf_id, columns, field=field)
    with track("pull DataFrame", None, "rows") as reporter:  # the catalog does not know the row count
        read = list(reported(batches, reporter, lambda batch: batch.num_rows))
    table = pa.Table.from_batches(read, pa.schema([(n, pa.string()) for n in names]))
    if infer_types:
        table = pa.table([_lossless(c) for c in table.columns], names=names)
    if kind == "pyarrow":
        return table
    if kind == "polars":
        import polars as pl

        return pl.from_arrow(table)
    return _pandas_frame(table)


def _pandas_frame(table: Any) -> Any:
    """``table`` as a pandas DataFrame; an integer column with a missing value as pandas' nullable ``Int64``,
    where pandas' default float64 would round a number past 2**53 (``9007199254740993`` read back as
    ``…992``). Other integer columns stay NumPy's ``int64``, as ``read_csv`` makes them."""
    import pandas as pd
    import pyarrow as pa

    gapped = {name for name, column in zip(table.column_names, table.columns, strict=True)
              if pa.types.is_integer(column.type) and column.null_count}
    if not gapped:
        return table.to_pandas()
    frame = table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    return frame.astype({name: "int64" for name in frame.columns if frame[name].dtype == "Int64"
                         and name not in gapped})


def _lossless(column: Any) -> Any:
    """Integers (or floats) where every value's text is exactly what Push stores for that number (so a frame
    pushed and pulled keeps its numbers); else the strings. ``"nan"`` stays text: as a float it would
    read as a missing value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    present = pc.drop_null(column)
    if len(present) == 0:
        return column
    if pc.all(pc.match_substring_regex(present, f"^{_INTEGER}$")).as_py():
        try:
            return column.cast(pa.int64())  # a checked cast: a value past int64's range raises, never wraps
        except pa.ArrowInvalid:
            return column  # as floats they would lose digits
    try:
        numbers = column.cast(pa.float64())
    except pa.ArrowInvalid:
        return column
    if pc.any(pc.is_nan(numbers)).as_py():
        return column
    return numbers if pc.all(pc.equal(float_text(numbers), column)).as_py() else column


# -- beside invoke(): the same, with the virtual-file store from the environment -----------------------
def push_frame(frame: Any, resources: Mapping[str, Any] | None = None) -> str:
    """Push a pandas or polars DataFrame, a pyarrow Table or a stream (:data:`ACCEPTED`) into a new virtual
    file; returns its id.

    Errors are :class:`ConnectorError` as from ``invoke("etl.push", …)``."""
    return run_with_store("etl.push", resources, lambda store: frame_into(store, frame))


@overload
def pull_frame(virtual_file_id: str, columns: Sequence[str] | None = None, *, kind: Literal["pandas"] = "pandas",
               infer_types: bool = False, resources: Mapping[str, Any] | None = None) -> pd.DataFrame: ...
@overload
def pull_frame(virtual_file_id: str, columns: Sequence[str] | None = None, *, kind: Literal["polars"],
               infer_types: bool = False, resources: Mapping[str, Any] | None = None) -> pl.DataFrame: ...
@overload
def pull_frame(virtual_file_id: str, columns: Sequence[str] | None = None, *, kind: Literal["pyarrow"],
               infer_types: bool = False, resources: Mapping[str, Any] | None = None) -> pa.Table: ...
@overload
def pull_frame(virtual_file_id: str, columns: Sequence[str] | None = None, *, kind: Kind,
               infer_types: bool = False,
               resources: Mapping[str, Any] | None = None) -> pd.DataFrame | pl.DataFrame | pa.Table: ...
def pull_frame(virtual_file_id: str, columns: Sequence[str] | None = None, *, kind: Kind = "pandas",
               infer_types: bool = False, resources: Mapping[str, Any] | None = None) -> Any:
    """The virtual file as a DataFrame (``kind``: pandas, polars or pyarrow), strings and missing values exact;
    ``columns`` selects and orders columns. Errors are :class:`ConnectorError` as from ``invoke("etl.pull", …)``."""

    def work(store: VirtualFileStore) -> Any:
        names = _pull_arguments(virtual_file_id, columns, kind)
        return frame_from(store, virtual_file_id, names, kind=kind, infer_types=infer_types, field="columns")

    return run_with_store("etl.pull", resources, work)


def _pull_arguments(virtual_file_id: Any, columns: Any, kind: Any) -> list[str] | None:
    """``columns`` as a list, or a 400 naming the argument where a Python caller's mistake would otherwise
    read as something else: a string of columns as its letters, an unknown ``kind`` as pandas, an id that
    is no string as one not found."""
    if not isinstance(virtual_file_id, str):
        raise InvalidInput("virtualFileId", "expected a virtual file id (a string), "
                                            f"got {type(virtual_file_id).__name__}")
    try:
        names = None if columns is None or isinstance(columns, str) else list(columns)
    except TypeError:  # not iterable
        names = None
    if (columns is not None and names is None) or not all(isinstance(c, str) for c in names or []):
        raise InvalidInput("columns", f"expected a list of column names, got {columns!r}")
    if kind not in ("pandas", "polars", "pyarrow"):
        raise InvalidInput("kind", f"expected 'pandas', 'polars' or 'pyarrow', got {kind!r}")
    return names


def run_with_store(action: str, resources: Mapping[str, Any] | None, work: Callable[[VirtualFileStore], Any]) -> Any:
    """``work(store)`` with the session's (or the given) virtual-file store; errors as the action's."""
    from connector_ops.registry import configured, error_for, get_action
    from connector_ops.session import default_session

    spec = get_action(action)
    try:
        given = resources if resources is not None else default_session().resources_for(["virtual_files"])
        return work(configured(spec, given, ["virtual_files"])["virtual_files"])
    except ConnectorError:
        raise
    except Exception as exc:
        raise error_for(spec, exc) from exc
