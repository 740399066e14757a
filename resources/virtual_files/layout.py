"""The store's layout stamp: which version of the catalog and row tables a database holds.

Every process of a deployment (code servers, the daemon, Celery workers, notebooks) opens the same
database, and they are not upgraded at the same instant. A process must never read or write tables laid
out by a newer connector-ops than its own as if they were its own layout: it would misread them or write
rows the newer code does not expect. So the first process to open a database stamps it with
:data:`LAYOUT_VERSION`, and a process whose code knows only older layouts refuses the store, saying which
versions met, before it reads or writes anything.

Layout 1 is every store written since the first release: the tables have only been added to since
(``create_all`` adds a missing one), never changed, so an unstamped store is stamped 1 as it stands. The
release that changes a table raises :data:`LAYOUT_VERSION` and brings the step that upgrades a store from
the version before, run here in the same transaction as the stamp.
"""

from __future__ import annotations

import sqlalchemy as sa

from connector_ops.kernel.errors import ActionFailed
from connector_ops.kernel.version import package_version
from connector_ops.resources.virtual_files.catalog import store_layout

#: the layout this code reads and writes
LAYOUT_VERSION = 1


def check_stamp(conn: sa.Connection, shown_url: str) -> None:
    """Stamp a store that has no stamp yet; refuse one laid out by newer code (``ActionFailed``).

    ``conn`` is the catalog's creating transaction: two processes stamping a new PostgreSQL database
    together collide on the one row's key, and the loser's retry finds the winner's stamp."""
    row = conn.execute(sa.select(store_layout.c.version, store_layout.c.written_by)).first()
    if row is None:
        conn.execute(sa.insert(store_layout).values(id=1, version=LAYOUT_VERSION, written_by=package_version()))
        return
    if row.version > LAYOUT_VERSION:
        raise ActionFailed(
            f"the virtual-file store at {shown_url} has layout {row.version}, written by connector-ops "
            f"{row.written_by}; this connector-ops ({package_version()}) knows layouts up to {LAYOUT_VERSION}. "
            "Upgrade connector-ops here: every process using one store must run a version that knows its layout")
