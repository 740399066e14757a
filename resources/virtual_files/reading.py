"""Reading virtual files: previews, ordered scans in one snapshot, fan-out ranges and the Iterate cursors.

Scans stream keyset pages through the driver's cursor (bounded memory whatever the size). Iterate keeps
each cursor's position in the catalog and advances it in the same transaction as the read.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
from collections.abc import Callable, Generator, Iterator, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from connector_ops.kernel.errors import InvalidInput, NotFound
from connector_ops.kernel.limits import check_unique, unknown_columns
from connector_ops.resources.virtual_files import catalog as cat
from connector_ops.resources.virtual_files.arrow_reads import arrow_batches
from connector_ops.resources.virtual_files.catalog import VirtualFileInfo
from connector_ops.resources.virtual_files.core import StoreCore
from connector_ops.resources.virtual_files.engines import SQLITE_SCAN_KIB, page_cache
from connector_ops.resources.virtual_files.fetching import fetch_pages
from connector_ops.resources.virtual_files.rows import as_dicts, fetch_dicts, keyset_pages, select_rows
from connector_ops.resources.virtual_files.shapes import SCAN_BATCH, Row

DEFAULT_CURSOR = "default"

#: PostgreSQL's estimate of a table's rows, as its planner makes it: the rows per page its statistics last
#: found (autovacuum, ANALYZE) times the pages the table has now; none before statistics were kept
_PLANNED_ROWS = sa.text(
    "SELECT CASE WHEN relpages > 0 AND reltuples >= 0 THEN round(reltuples / relpages * "
    "(pg_relation_size(oid) / current_setting('block_size')::int)) END FROM pg_class WHERE oid = to_regclass(:t)")


def _planned_rows(conn: sa.Connection, info: VirtualFileInfo) -> int | None:
    """PostgreSQL's estimate of the file's rows (:data:`_PLANNED_ROWS`); ``None`` before it keeps statistics."""
    rows = conn.execute(_PLANNED_ROWS, {"t": conn.dialect.identifier_preparer.quote(info.table.name)}).scalar()
    return None if rows is None else int(rows)


def _counted_rows(conn: sa.Connection, info: VirtualFileInfo) -> int:
    with page_cache(conn, SQLITE_SCAN_KIB):  # SQLite's count walks every page of the table
        return conn.execute(sa.select(sa.func.count()).select_from(info.table)).scalar_one()


class Reading(StoreCore):
    """Reading rows: previews, scans, fan-out ranges and Iterate's cursors."""

    def summary(self, vf_id: str, n: int = 5) -> tuple[int, list[str], list[Row]]:
        """``(row count, column names, first n rows)`` in one snapshot (op metadata, previews)."""
        with self.reading() as conn:
            info = self.info(conn, vf_id)
            count = _counted_rows(conn, info)
            first = fetch_dicts(conn, info.names, select_rows(info).order_by(info.table.c.seq).limit(n))
            return count, list(info.names), first

    def row_count(self, vf_id: str, *, estimate: bool = False) -> tuple[int, bool]:
        """``(rows, exact)``. With ``estimate``, on PostgreSQL, its own estimate (``exact`` false) where it has
        statistics for the file's table, which autovacuum keeps for a file that has settled: a ``count(*)``
        reads the whole table, long on a large file, for a number a look ahead (``store copy --dry-run``)
        does not need exactly. Otherwise counted: the store keeps no count, and SQLite no estimate."""
        with self.reading() as conn:
            info = self.info(conn, vf_id)
            if estimate and conn.dialect.name == "postgresql" and (rows := _planned_rows(conn, info)) is not None:
                return rows, False
            return _counted_rows(conn, info), True

    def progress_rows(self, vf_id: str) -> tuple[int | None, bool]:
        """``(rows, exact)`` to show a read of the whole file against (``store copy``), costing no read of the
        table where a count is one: on PostgreSQL its estimate (as :meth:`row_count` with ``estimate``), else
        ``None``, since a ``count(*)`` reads every row and the copy reads them all again. SQLite, which keeps
        no estimate, counts: its ``count(*)`` walks the table's pages without decoding a row, short beside a
        copy's read of them (a 130 MiB table of 1 KiB rows, its pages dropped from the cache: 0.1 s, where the
        copy into SQLite took 1.2 to 1.5 s; 1M rows of three short values: at most 47 ms, copied in 2.4 s)."""
        with self.reading() as conn:
            info = self.info(conn, vf_id)
            if conn.dialect.name == "postgresql":
                return _planned_rows(conn, info), False
            return _counted_rows(conn, info), True

    def scan_tuples(self, vf_id: str, columns: Sequence[str] | None = None, *, batch_size: int = SCAN_BATCH,
                    field: str = "schema") -> tuple[list[str], Generator[list[tuple], None, None]]:
        """``(column names, batches of value tuples)`` in row order: keyset pages read in one snapshot.

        ``columns`` selects and orders columns (an unknown name is an ``InvalidInput`` on ``field``).
        The snapshot is opened now, so the names and the rows always agree.
        """
        return self._scan(vf_id, columns, field,
                          lambda conn, info, names: keyset_pages(conn, info, names, batch_size))

    def scan_arrow(self, vf_id: str, columns: Sequence[str] | None = None, *,
                   field: str = "schema") -> tuple[list[str], Generator[Any, None, None]]:
        """``(column names, Arrow record batches of strings)`` in row order, read in one snapshot
        (:mod:`.arrow_reads`); ``columns`` as for :meth:`scan_tuples`."""
        return self._scan(vf_id, columns, field, arrow_batches)

    def _scan(self, vf_id: str, columns: Sequence[str] | None, field: str,
              read: Callable[[sa.Connection, VirtualFileInfo, list[str]], Iterator[Any]]
              ) -> tuple[list[str], Generator[Any, None, None]]:
        """``(column names, what read yields)``; the snapshot is opened now, so the names and the rows agree.
        A generator: ``close()`` ends the snapshot before the end of the rows."""
        def scan() -> Generator[Any, None, None]:
            with self.reading() as conn:
                info = self.info(conn, vf_id)
                names = list(info.names) if columns is None else list(columns)
                unknown = [n for n in names if n not in info.names]
                if unknown:
                    raise InvalidInput(field, unknown_columns(unknown, info.names, "the virtual file"))
                check_unique(names, field)  # a name twice: an export no Push reads back, a frame of twins
                yield names
                with page_cache(conn, SQLITE_SCAN_KIB):
                    yield from read(conn, info, names)

        items = scan()
        return next(items), items

    def read_range(self, vf_id: str, after_seq: int, upto_seq: int | None,
                   generation: int | None = None) -> list[Row]:
        """Rows with ``after_seq < seq <= upto_seq`` (a fan-out batch; re-reading it is idempotent).

        With ``generation``, a file replaced since the batch was planned is refused in the same snapshot
        as the read (its ``seq`` numbers start over, so the range would silently mean other rows).
        """
        with self.reading() as conn:
            info = self.info(conn, vf_id)
            if generation is not None and info.generation != generation:
                raise NotFound(f"virtual file {vf_id!r} was replaced after the batches were planned")
            table = info.table
            query = select_rows(info).where(table.c.seq > after_seq).order_by(table.c.seq)
            if upto_seq is not None:
                query = query.where(table.c.seq <= upto_seq)
            return fetch_dicts(conn, info.names, query)

    def batch_bounds(self, vf_id: str, batch_size: int) -> tuple[int, list[tuple[int, int]]]:
        """``(generation, [(after_seq, upto_seq), …])`` splitting the file into batches of ``batch_size``."""
        with self.reading() as conn:
            info = self.info(conn, vf_id)
            seq = info.table.c.seq
            numbered = sa.select(seq, sa.func.row_number().over(order_by=seq).label("n")).subquery()
            ends = list(conn.execute(
                sa.select(numbered.c.seq).where(sa.func.mod(numbered.c.n, batch_size) == 0).order_by(numbered.c.seq)
            ).scalars())
            last = conn.execute(sa.select(sa.func.max(seq))).scalar()
        if last is not None and (not ends or ends[-1] != last):
            ends.append(last)  # the last, partial batch
        starts = [0, *ends[:-1]]
        return info.generation, list(zip(starts, ends, strict=True))

    def next_batch(self, vf_id: str, limit: int, cursor: str = DEFAULT_CURSOR, *,
                   progress: Callable[[int], object] | None = None) -> tuple[list[Row], bool]:
        """The next ``limit`` rows after this cursor's position, and whether more remain.

        The position advances in the same transaction as the read. When a call returns
        ``hasNext = false`` the position resets, so the next call starts from the first row again.
        A replaced file (new generation) restarts the cursor.
        A read: its write is the cursor's one row, so a disk below the floor does not stop it.
        Rows are converted a page at a time (``progress`` told each page's count), as a Query's are.
        """
        with self.writing(grows=False) as conn:
            postgres = conn.dialect.name == "postgresql"
            # PostgreSQL: the file is only read (a reader's lock: a Pull of it does not hold this back); the
            # cursor's own row, locked as it is read, keeps two Iterates of one cursor in turn
            info = self.info(conn, vf_id, lock=not postgres)
            ids = {"vf_id": vf_id, "cursor_name": cursor}
            state = conn.execute(_cursor_locked(conn.dialect.name), ids).first()
            last = state.last_seq if state is not None and state.generation == info.generation else 0
            table = info.table
            query = select_rows(info).where(table.c.seq > last).order_by(table.c.seq).limit(limit + 1)
            rows: list[Row] = []
            has_next, position = False, 0
            for page in fetch_pages(conn, query, SCAN_BATCH):
                if len(rows) + len(page) > limit:  # the one row past the batch: only tells that more remain
                    page, has_next = page[:limit - len(rows)], True
                if page:
                    rows.extend(as_dicts(info.names, page))
                    position = page[-1][-1]
                if progress is not None:
                    progress(len(page))
            _upsert(conn, cat.vf_cursor, {"vf_id": vf_id, "cursor_name": cursor},
                    {"last_seq": position if has_next else 0, "generation": info.generation})
            return rows, has_next

    def next_array_batch(self, items: list[Any], limit: int) -> tuple[list[Any], bool]:
        """Iterate over an inline array: the same array continues where its last call stopped."""
        digest = hashlib.sha256(json.dumps(items, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        with self.writing(grows=False) as conn:  # the cursor's one row
            key = cat.array_cursor.c.digest == digest
            position = conn.execute(sa.select(cat.array_cursor.c.position).where(key)).scalar() or 0
            batch = items[position:position + limit]
            has_next = position + limit < len(items)
            if has_next:
                _upsert(conn, cat.array_cursor, {"digest": digest},
                        {"position": position + limit, "moved_at": cat.write_ended(conn)})
            else:
                conn.execute(sa.delete(cat.array_cursor).where(key))
            return batch, has_next

    def collect_array_positions(self, cutoff: datetime, *, dry_run: bool = False) -> tuple[int, int]:
        """Remove the inline arrays' Iterate positions not moved since ``cutoff`` (``connector-ops gc``): each
        partly read array left one for good. ``(removed, kept)``; ``dry_run``: would be removed. A position
        without a date (a write of layout 1 during the upgrade) counts as old. An Iterate over a removed
        position's array starts again at its first item, as after its last batch."""
        moved_at = cat.array_cursor.c.moved_at
        old = moved_at.is_(None) | (moved_at < cutoff)
        with self.reading() if dry_run else self.writing(grows=False) as conn:
            total = conn.execute(sa.select(sa.func.count()).select_from(cat.array_cursor)).scalar_one()
            if dry_run:
                removed = conn.execute(sa.select(sa.func.count()).select_from(cat.array_cursor).where(old)).scalar_one()
            else:
                removed = conn.execute(sa.delete(cat.array_cursor).where(old)).rowcount
        return removed, total - removed


@functools.cache
def _cursor_locked(dialect: str) -> sa.Executable:
    """A cursor's position and generation. PostgreSQL: its row made if new and locked, in one statement
    (an upsert whose update changes nothing takes the row's lock and returns what it holds), so that the
    next Iterate of the same cursor waits for this one's position. SQLite writes one at a time anyway."""
    c = cat.vf_cursor.c
    if dialect != "postgresql":
        return sa.select(c.last_seq, c.generation).where(
            (c.vf_id == sa.bindparam("vf_id")) & (c.cursor_name == sa.bindparam("cursor_name")))
    from sqlalchemy.dialects import postgresql

    made = postgresql.insert(cat.vf_cursor).values(vf_id=sa.bindparam("vf_id"),
                                                   cursor_name=sa.bindparam("cursor_name"), last_seq=0,
                                                   generation=0)  # generation 0: no file has it, so "start"
    return made.on_conflict_do_update(index_elements=["vf_id", "cursor_name"], set_={"last_seq": c.last_seq}
                                      ).returning(c.last_seq, c.generation)


def _upsert(conn: sa.Connection, table: sa.Table, keys: dict[str, Any], values: dict[str, Any]) -> None:
    dialect = importlib.import_module(f"sqlalchemy.dialects.{conn.dialect.name}")  # only the one in use
    insert = dialect.insert(table)
    conn.execute(insert.values(**keys, **values).on_conflict_do_update(index_elements=list(keys), set_=values))

