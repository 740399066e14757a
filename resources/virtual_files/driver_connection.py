"""The driver's own connection (sqlite3's, psycopg's) under a pooled SQLAlchemy connection.

The jobs that talk to the driver directly (COPY, named cursors, executemany, PRAGMA and VACUUM outside a
transaction) take it from the connection they hold. SQLAlchemy types ``driver_connection`` optional, as it is
``None`` once a pooled connection is closed or detached; one checked out and in use never is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import PoolProxiedConnection


def driver_of(pooled: PoolProxiedConnection) -> Any:
    """``pooled.driver_connection``, which a connection in use always has (``Connection.connection``,
    ``Engine.raw_connection()``). ``Any``: the driver is the store's URL's, sqlite3 or psycopg."""
    driver = pooled.driver_connection
    assert driver is not None, "a pooled connection in use has its driver connection"
    return driver
