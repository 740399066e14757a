"""The layout this code knows, and its refusal of a newer one: the part of :mod:`.layout` a driver-level
caller (the inline-array Iterate, :mod:`.array_cursors`, which stays clear of SQLAlchemy) needs too."""

from __future__ import annotations

from connector_ops.kernel.errors import ActionFailed
from connector_ops.kernel.version import package_version

#: the layout this code reads and writes. 2: ``cop_array_cursor.moved_at``, when an inline array's Iterate
#: position last moved, so ``connector-ops gc`` can remove those nobody has moved for long (:mod:`.layout`).
#: 3: ``cop_virtual_file.seq_floor``, so that SQLite never numbers a row with a ``seq`` it took back
#: (:mod:`.seq_floors`)
LAYOUT_VERSION = 3
#: the stamp, for a driver's own cursor (the inline-array Iterate): one row, by its key
STAMP_SQL = "SELECT version, written_by FROM cop_store_layout WHERE id = 1"


def refuse_newer(version: int, written_by: str, shown_url: str) -> None:
    """``ActionFailed`` when a store's stamp is a layout newer than this code's."""
    if version > LAYOUT_VERSION:
        raise ActionFailed(
            f"the virtual-file store at {shown_url} has layout {version}, written by connector-ops "
            f"{written_by}; this connector-ops ({package_version()}) knows layouts up to {LAYOUT_VERSION}. "
            "Upgrade connector-ops here: every process using one store must run a version that knows its layout")
