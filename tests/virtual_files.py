"""The virtual-file store with the helpers only tests need (building small files, reading them back whole).

The product never reads a whole file into memory nor builds one from a list; tests do both all the time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import sqlalchemy as sa

from connector_ops.kernel.scoped import batched
from connector_ops.resources.virtual_files import catalog as cat
from connector_ops.resources.virtual_files.rows import row_of
from connector_ops.resources.virtual_files.shapes import SCAN_BATCH, Row
from connector_ops.resources.virtual_files.store import VirtualFileStore


class StoreForTests(VirtualFileStore):
    """A :class:`VirtualFileStore` on the same database, plus test helpers."""

    @classmethod
    def of(cls, store: VirtualFileStore) -> StoreForTests:
        return cls(database_url=store.database_url)

    def create_from_rows(self, rows: Iterable[Mapping[str, Any]], *, batch_size: int = SCAN_BATCH) -> str:
        """A new virtual file holding ``rows`` (dicts of strings); returns its id."""
        return self.create_from_dicts(batched(rows, batch_size))

    def rows(self, vf_id: str) -> list[Row]:
        """All rows, missing values left out, in row order."""
        names, pages = self.scan_tuples(vf_id)
        return [row_of(names, values) for page in pages for values in page]

    # the SQL plumbing, for tests that look inside the database
    @property
    def engine(self) -> sa.Engine:
        return self.sql.engine

    def reading(self) -> Any:
        return self.sql.reading()

    def info(self, conn: sa.Connection, vf_id: str) -> Any:
        return self.sql.info(conn, vf_id)

    def create(self, columns: Sequence[str] = (), *, replace: str | None = None) -> Any:
        return self.sql.create(columns, replace=replace)

    def columns(self, vf_id: str) -> list[str]:
        with self.reading() as conn:
            return list(self.info(conn, vf_id).names)

    def count(self, vf_id: str) -> int:
        return self.summary(vf_id, 0)[0]

    def exists(self, vf_id: str) -> bool:
        with self.reading() as conn:
            return conn.execute(
                sa.select(cat.virtual_file.c.id).where(cat.virtual_file.c.id == vf_id)
            ).first() is not None

    #: what :meth:`row_key` is for every row table on PostgreSQL, however it was filled
    ROW_KEY: ClassVar[list[tuple[str, str]]] = [("<table>_pkey", "PRIMARY KEY (seq)")]

    def row_key(self, vf_id: str) -> list[tuple[str, str]] | None:
        """PostgreSQL: the row table's primary-key constraints as (name, definition), the table's own name
        written ``<table>``. SQLite: None (``seq`` is the rowid, the table itself)."""
        with self.reading() as conn:
            if conn.dialect.name != "postgresql":
                return None
            table = self.info(conn, vf_id).table_name
            return [(name.replace(table, "<table>"), definition) for name, definition in conn.execute(sa.text(
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conrelid = CAST(:t AS regclass) AND contype = 'p'"), {"t": f'"{table}"'})]
