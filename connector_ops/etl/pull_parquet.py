"""Pull to Parquet (an extension): the virtual file's rows read as Arrow batches of strings in one snapshot
and written by pyarrow a row group at a time, so memory holds one group. Every column is a string column, a
missing value a null. The CSV and text parameters do not apply.

A row group ends at ``GROUP_ROWS`` rows or ``GROUP_BYTES`` of Arrow data, whichever comes first: counted in
rows alone, a group of wide rows grew without bound (70,000 rows of 1 KiB were one group of 70 MiB of
strings, and the writer holds its encoded pages beside them). The group written is let go before the next
one is gathered (tests/test_memory_limit.py; docs/deployment.md "Memory limits")."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from connector_ops.etl import models as m
from connector_ops.etl.row_totals import rows_to_show
from connector_ops.kernel.progress import track

if TYPE_CHECKING:
    from connector_ops.resources.platform_files import PendingFile, PlatformFileStore
    from connector_ops.resources.virtual_files.store import VirtualFileStore

CONTENT_TYPE = "application/vnd.apache.parquet"
GROUP_ROWS = 131_072
#: … or of this many bytes of Arrow data, whichever is reached first
GROUP_BYTES = 16 << 20
#: the parameters that mean something for text only: a CSV export's, and the encoding JSON has too
FOR_TEXT_ONLY = m.FOR_CSV_EXPORT_ONLY | {"encoding"}


def pull_parquet(inp: m.PullInput, virtual_files: VirtualFileStore, platform_files: PlatformFileStore) -> Any:
    """A new platform file holding the virtual file as Parquet; returns its descriptor."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    m.refuse_given(inp.parameters, FOR_TEXT_ONLY, "a Parquet export (it has no text lines)")
    names, batches = virtual_files.scan_arrow(inp.virtual_file_id, inp.parameters.schema_, field="parameters.schema")
    schema = pa.schema([(n, pa.string()) for n in names])
    total = rows_to_show(virtual_files, inp.virtual_file_id)
    # the read snapshot ends with the export, even when it fails; nothing is kept of a failed one
    with contextlib.closing(batches), platform_files.create(inp.export_name, CONTENT_TYPE) as sink, \
            track(f"pull {inp.export_name}", total, "rows") as reporter, \
            pq.ParquetWriter(_Sink(sink), schema) as writer:
        for group in _groups(batches, schema):
            writer.write_table(group, row_group_size=GROUP_ROWS)
            reporter.update(group.num_rows)
            del group  # its batches go before the next group's are read (the generator lets go of its own)
    return sink.descriptor


def _groups(batches: Iterator[Any], schema: Any) -> Iterator[Any]:
    """The batches as tables of at most about ``GROUP_ROWS`` rows or ``GROUP_BYTES`` (a row group each)."""
    import pyarrow as pa

    held, rows, size = [], 0, 0
    for batch in batches:
        held.append(batch)
        rows, size = rows + batch.num_rows, size + batch.nbytes
        if rows >= GROUP_ROWS or size >= GROUP_BYTES:
            group = pa.Table.from_batches(held, schema)
            held, rows, size = [], 0, 0
            yield group
            del group
    if held:
        yield pa.Table.from_batches(held, schema)


class _Sink(io.RawIOBase):
    """The platform file being written, as the file object pyarrow writes to (it asks where it is)."""

    def __init__(self, pending: PendingFile) -> None:
        self._pending = pending

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self._pending.write(bytes(data))

    def tell(self) -> int:
        return self._pending.size
