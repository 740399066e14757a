"""The row count a progress bar ends at, counted only when a bar is shown."""

from __future__ import annotations

from typing import Any

from connector_ops.kernel.progress import showing


def rows_to_show(store: Any, virtual_file_id: str) -> int | None:
    """The rows of the file, as the end (and ETA) of a Pull's or a Map's bar; ``None`` where no progress is
    shown. The count is a ``count(*)``: 25-70 ms on 1M rows on SQLite, a scan of the table on PostgreSQL,
    paid by every call when it was made whether a bar was shown or not (a Dagster step, a library call). It
    is read outside the export's snapshot, so rows appended meanwhile can take a bar past its end."""
    return store.summary(virtual_file_id, 0)[0] if showing() else None
