"""Delete Rows (spec 4.C): remove the rows matching a MongoDB query filter, in one SQL statement.

The filter language (resources/virtual_files/filters.py, docs/etl-transforms.md) is shared with Query.
A malformed or unsupported filter is refused before anything runs, so nothing is deleted.
"""

from __future__ import annotations

from connector_ops.etl import models as m
from connector_ops.kernel.progress import PHASE, track
from connector_ops.registry import action
from connector_ops.resources.virtual_files.store import VirtualFileStore


@action("etl.delete_rows", m.DeleteRowsInput, m.DeleteRowsOutput, resources=("virtual_files",), nul_in_values=True)
def delete_rows(inp: m.DeleteRowsInput, virtual_files: VirtualFileStore) -> m.DeleteRowsOutput:
    """Delete the rows matching a MongoDB-style filter; returns how many were deleted.

    With ``dryRun``, returns how many would be, deleting nothing. An operand may hold a NUL where a stored
    value may (SQLite; the filter compiler refuses one on PostgreSQL:
    :func:`~connector_ops.resources.virtual_files.filters.compile_filter`)."""
    what = "counting the rows to delete" if inp.dry_run else "deleting rows"
    with track(f"delete rows of {inp.virtual_file_id}: {what}", None, PHASE):  # one SQL statement: a phase
        deleted = virtual_files.delete_where(inp.virtual_file_id, inp.request, dry_run=inp.dry_run)
    return m.DeleteRowsOutput(deleted_count=deleted)
