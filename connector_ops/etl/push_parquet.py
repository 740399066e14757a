"""Push of a Parquet file: read a batch at a time by pyarrow and stored through the same Arrow path as
``push_frame`` (:mod:`connector_ops.frames`), so each value becomes the text ``push_frame`` gives it and a
null stays missing. Parquet is typed and has no lines, so the CSV parameters do not apply and no row can
be refused; ``schema`` works as for JSON: those columns first, in that order, then the file's others.

A Parquet file keeps its index at its end, so it is read from a seekable file: one stored here is read
where it is; one that arrives over HTTP is first copied to a temporary file, a block at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from connector_ops.etl import models as m
from connector_ops.etl.suffixes import ends_with
from connector_ops.frame_text import batches_forms
from connector_ops.kernel.container import size_arrow_threads
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.limits import check_column_names
from connector_ops.kernel.media_types import media_type
from connector_ops.kernel.progress import track
from connector_ops.kernel.streams import Open, seekable_opener

if TYPE_CHECKING:
    from connector_ops.resources.virtual_files.store import VirtualFileStore

PARQUET_TYPES = ("application/vnd.apache.parquet", "application/x-parquet", "application/parquet")
MAGIC = b"PAR1"  # a Parquet file's first and last four bytes
#: the parameters that mean something for text only (``useFirstRowAsSchema`` is harmless: a Parquet file
#: names its columns)
FOR_TEXT_ONLY = frozenset({"lines_to_ignore", "csv_delimiter", "encoding"})
#: rows a batch: pyarrow's column readers hold buffers in proportion to it (its pool peaked at 37 MiB with
#: 65,536 rows, 21 MiB with 16,384, the 1M-row benchmark file; no time difference through the noise)
BATCH_ROWS = 16_384


#: the name endings of a Parquet file
PARQUET_SUFFIXES = (".parquet", ".pq")


def is_parquet(name: str, content_type: str) -> bool:
    """Whether the platform file says it is Parquet, by its name or its content type."""
    return ends_with(name, PARQUET_SUFFIXES) or media_type(content_type) in PARQUET_TYPES


def push_parquet(virtual_files: VirtualFileStore, reopen: Open, name: str, params: m.PushParameters) -> str:
    """A new virtual file holding the Parquet file's rows; returns its id. Raises, leaving nothing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from connector_ops.frames import frame_into

    m.refuse_given(params, FOR_TEXT_ONLY, "a Parquet file (it has no lines or text)")
    size_arrow_threads()  # its columns are decoded by as many threads as Arrow's pool has
    check_column_names(params.schema_ or [], "parameters.schema")
    with seekable_opener(reopen, "connector-ops-parquet-") as seekable, seekable() as raw:
        try:
            # column chunks read a page at a time, not a row group's whole: a 4M-row file of one row group
            # peaked at +169-174 MiB with pyarrow's default pre-buffering, +74-93 MiB without (throwaway
            # script, SQLite, the same speed)
            parquet = pq.ParquetFile(raw, pre_buffer=False, buffer_size=1 << 20)
        except (pa.ArrowInvalid, OSError) as exc:
            raise _unreadable(name, exc) from None
        names = parquet.schema_arrow.names
        check_column_names(names, "platformFile")
        columns = [*(params.schema_ or ()), *(n for n in names if n not in (params.schema_ or ()))]
        with track(f"push {name}", parquet.metadata.num_rows, "rows") as reporter:
            forms = _forms(parquet, name, columns)
            batches = _aligned(_read(parquet, name, reporter), columns)
            return frame_into(virtual_files, pa.RecordBatchReader.from_batches(_schema(parquet, columns), batches),
                              "platformFile", forms, _size(parquet))


def _forms(parquet: Any, name: str, columns: list[str]) -> dict[int, int | bool]:
    """The form of each float and timestamp column over the whole file (one read of those columns only), so
    that its values are written as a frame's are: ``3750``, not ``3750.0``, in a column of whole numbers
    (pandas' integers with gaps), and never ``1`` in one batch and ``1.0`` in the next."""
    import pyarrow as pa

    own = parquet.schema_arrow
    kinds = {f.name: f.type.value_type if pa.types.is_dictionary(f.type) else f.type for f in own}
    typed = [c for c in columns if c in kinds and (pa.types.is_floating(kinds[c]) or pa.types.is_timestamp(kinds[c]))]
    if not typed:
        return {}
    try:
        forms = batches_forms(parquet.iter_batches(batch_size=BATCH_ROWS, columns=typed))
    except (pa.ArrowInvalid, OSError) as exc:
        raise _unreadable(name, exc) from None
    return {columns.index(typed[i]): form for i, form in forms.items()}


def _read(parquet: Any, name: str, reporter: Any) -> Iterator[Any]:
    import pyarrow as pa

    try:
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
            yield batch
            reporter.update(batch.num_rows)
    except (pa.ArrowInvalid, OSError) as exc:  # a damaged row group, found as it is read
        raise _unreadable(name, exc) from None


def _size(parquet: Any) -> int:
    """The file's rows' size in bytes uncompressed, as its footer gives it: what decides how they are loaded
    (``frames.frame_into``), known without reading a batch."""
    metadata = parquet.metadata
    return sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))


def _unreadable(name: str, exc: BaseException) -> InvalidInput:
    """Not Parquet, or damaged: found as the file is opened (its footer) or as a row group is read."""
    return InvalidInput("platformFile", f"{name} is not a Parquet file that can be read: {exc}")


def _schema(parquet: Any, columns: list[str]) -> Any:
    """The file's Arrow schema in ``columns``' order; a column of ``schema`` the file lacks is all nulls."""
    import pyarrow as pa

    own = parquet.schema_arrow
    return pa.schema([own.field(c) if c in own.names else pa.field(c, pa.null()) for c in columns])


def _aligned(batches: Iterator[Any], columns: list[str]) -> Iterator[Any]:
    import pyarrow as pa

    for batch in batches:
        own = batch.schema.names
        yield pa.RecordBatch.from_arrays(
            [batch.column(c) if c in own else pa.nulls(batch.num_rows) for c in columns], names=columns)
