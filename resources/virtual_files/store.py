"""VirtualFileStore: virtual files (ordered rows of string values) in SQLite or PostgreSQL.

Every public method is one transaction: a failed push, append or replace leaves the database exactly
as it was (DDL is transactional in both SQLite and PostgreSQL). Rows are ``dict[str, str]``; a column
a row does not have is stored as NULL and left out of the row when read back, so "missing" and
"empty string" stay different.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from connector_ops.kernel.errors import InvalidInput, NotFound
from connector_ops.kernel.resource import Resource
from connector_ops.resources.virtual_files import catalog as cat
from connector_ops.resources.virtual_files.catalog import VirtualFileInfo, internal_name
from connector_ops.resources.virtual_files.engines import WRITE, get_engine
from connector_ops.resources.virtual_files.fetching import fetch_all, stream
from connector_ops.resources.virtual_files.filters import compile_filter, equality_columns
from connector_ops.resources.virtual_files.loaders import insert_batches

Row = dict[str, str]
DEFAULT_CURSOR = "default"
SCAN_BATCH = 10_000


class RowWriter:
    """Adds rows to one row table inside an open transaction, growing its columns as needed."""

    def __init__(self, store: VirtualFileStore, conn: sa.Connection, info: VirtualFileInfo) -> None:
        self.store, self.conn = store, conn
        self.vf_id, self.table_name = info.id, info.table_name
        self.names: list[str] = list(info.names)
        self.ordinals: list[int] = list(info.ordinals)
        self.replaced: VirtualFileInfo | None = None  # create(replace=…): the old rows, still readable here

    def ensure_columns(self, names: Iterable[str]) -> None:
        """Add the columns in ``names`` that the virtual file does not have yet (in that order)."""
        known = set(self.names)
        for name in names:
            if name in known:
                continue
            known.add(name)
            ordinal = (max(self.ordinals) + 1) if self.ordinals else 0
            self.conn.execute(sa.insert(cat.vf_column).values(vf_id=self.vf_id, ordinal=ordinal, name=name,
                                                              indexed=False))
            quote = self.conn.dialect.identifier_preparer.quote_identifier
            self.conn.exec_driver_sql(
                f"ALTER TABLE {quote(self.table_name)} ADD COLUMN {quote(internal_name(ordinal))} TEXT"
            )
            self.names.append(name)
            self.ordinals.append(ordinal)

    def write_tuples(self, names: Sequence[str], rows: Iterable[Sequence[str | None]]) -> int:
        """Rows as tuples aligned with ``names`` (user column names already in the file)."""
        return self.write_batches(names, [rows if isinstance(rows, list) else list(rows)])

    def write_batches(self, names: Sequence[str], batches: Iterable[list[Sequence[str | None]]]) -> int:
        """A stream of row batches, loaded in one go (one ``COPY`` on PostgreSQL): the database stores
        rows while the caller produces the next batch. Nothing else may use the connection meanwhile."""
        index = {n: o for n, o in zip(self.names, self.ordinals, strict=True)}
        internal = [internal_name(index[n]) for n in names]
        return insert_batches(self.conn, self.table_name, internal, batches)

    def write_dicts(self, rows: Sequence[Mapping[str, str | None]]) -> int:
        """Rows as dicts; new keys become new columns first."""
        if not rows:
            return 0
        seen: dict[str, None] = {}
        for row in rows:
            seen.update(dict.fromkeys(row))
        self.ensure_columns(seen)
        names = list(seen)
        return self.write_tuples(names, ([row.get(n) for n in names] for row in rows))


class VirtualFileStore(Resource):
    """Virtual files in the database at ``database_url`` (``sqlite:///…`` or ``postgresql+psycopg://…``)."""

    database_url: str

    # -- plumbing --------------------------------------------------------------------------------
    @property
    def engine(self) -> sa.Engine:
        return get_engine(self.database_url)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextlib.contextmanager
    def reading(self) -> Iterator[sa.Connection]:
        with self.engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def writing(self) -> Iterator[sa.Connection]:
        with self.engine.execution_options(**WRITE).begin() as conn:
            yield conn

    def info(self, conn: sa.Connection, vf_id: str, *, lock: bool = False) -> VirtualFileInfo:
        """The catalog entry of ``vf_id`` (``NotFound`` if there is none)."""
        if not isinstance(vf_id, str) or not vf_id:
            raise NotFound(f"virtual file {vf_id!r} not found")
        vf, col = cat.virtual_file, cat.vf_column
        query = (
            sa.select(vf.c.table_name, vf.c.generation, col.c.ordinal, col.c.name, col.c.indexed)
            .select_from(vf.outerjoin(col, col.c.vf_id == vf.c.id))
            .where(vf.c.id == vf_id)
            .order_by(col.c.ordinal)
        )
        if lock and conn.dialect.name == "postgresql":
            query = query.with_for_update(of=vf)
        rows = conn.execute(query).all()  # one round trip: the file and its columns
        if not rows:
            raise NotFound(f"virtual file {vf_id!r} not found")
        head = rows[0]
        cols = [r for r in rows if r.ordinal is not None]
        return VirtualFileInfo(
            id=vf_id,
            table_name=head.table_name,
            generation=head.generation,
            names=tuple(c.name for c in cols),
            ordinals=tuple(c.ordinal for c in cols),
            indexed=frozenset(c.ordinal for c in cols if c.indexed),
        )

    def _new_table(self, conn: sa.Connection, vf_id: str, names: Sequence[str]) -> VirtualFileInfo:
        """A new row table with ``names`` as its columns, catalogued under ``vf_id``."""
        if len(set(names)) != len(names):
            raise InvalidInput("schema", "column names must be unique")
        table_name = f"vf_{uuid.uuid4().hex}"
        info = VirtualFileInfo(vf_id, table_name, 1, tuple(names), tuple(range(len(names))), frozenset())
        info.table.create(conn)
        return info

    @staticmethod
    def _catalogue_columns(conn: sa.Connection, info: VirtualFileInfo) -> None:
        if info.names:
            conn.execute(sa.insert(cat.vf_column), [
                {"vf_id": info.id, "ordinal": o, "name": n, "indexed": False}
                for n, o in zip(info.names, info.ordinals, strict=True)
            ])

    # -- creating --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def create(self, columns: Sequence[str] = (), *, replace: str | None = None) -> Iterator[RowWriter]:
        """A new virtual file, filled inside the ``with`` block; it exists only if the block succeeds.

        With ``replace=vf_id`` the rows of that virtual file are swapped for the new ones atomically
        (same id, new generation: running iterations start over).
        """
        with self.writing() as conn:
            if replace is None:
                old, writer = None, self.new_file(conn, columns)
            else:
                old = self.info(conn, replace, lock=True)
                conn.execute(sa.delete(cat.vf_column).where(cat.vf_column.c.vf_id == replace))
                conn.execute(sa.delete(cat.vf_cursor).where(cat.vf_cursor.c.vf_id == replace))
                info = self._new_table(conn, replace, columns)
                conn.execute(
                    sa.update(cat.virtual_file)
                    .where(cat.virtual_file.c.id == replace)
                    .values(table_name=info.table_name, generation=old.generation + 1)
                )
                self._catalogue_columns(conn, info)
                writer = RowWriter(self, conn, info)
            writer.replaced = old
            yield writer
            if old is not None:
                old.table.drop(conn)

    def new_file(self, conn: sa.Connection, columns: Sequence[str] = ()) -> RowWriter:
        """A new virtual file inside the caller's ``writing()`` transaction (several files, one commit).

        Nesting ``create()`` instead would open a second writer, which on SQLite waits for the first.
        """
        info = self._new_table(conn, uuid.uuid4().hex, columns)
        conn.execute(sa.insert(cat.virtual_file).values(id=info.id, table_name=info.table_name, generation=1))
        self._catalogue_columns(conn, info)
        return RowWriter(self, conn, info)

    def create_from_rows(self, rows: Iterable[Mapping[str, Any]], *, batch_size: int = SCAN_BATCH) -> str:
        """A new virtual file holding ``rows`` (dicts of strings); returns its id."""
        with self.create() as writer:
            for batch in _batched(rows, batch_size):
                writer.write_dicts(batch)
        return writer.vf_id

    # -- appending -------------------------------------------------------------------------------
    def append(self, rows_by_file: Mapping[str, Sequence[Mapping[str, str | None]]]) -> int:
        """Append rows to one or several virtual files in one transaction; new keys add columns."""
        total = 0
        with self.writing() as conn:
            for vf_id, rows in rows_by_file.items():
                writer = RowWriter(self, conn, self.info(conn, vf_id, lock=True))
                for batch in _batched(rows, SCAN_BATCH):
                    total += writer.write_dicts(batch)
        return total

    # -- reading ---------------------------------------------------------------------------------
    def columns(self, vf_id: str) -> list[str]:
        with self.reading() as conn:
            return list(self.info(conn, vf_id).names)

    def count(self, vf_id: str) -> int:
        with self.reading() as conn:
            table = self.info(conn, vf_id).table
            return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()

    def summary(self, vf_id: str, n: int = 5) -> tuple[int, list[str], list[Row]]:
        """``(row count, column names, first n rows)`` in one snapshot (op metadata, previews)."""
        with self.reading() as conn:
            info = self.info(conn, vf_id)
            count = conn.execute(sa.select(sa.func.count()).select_from(info.table)).scalar_one()
            first = fetch_all(conn, _select_rows(info).order_by(info.table.c.seq).limit(n))
            return count, list(info.names), _dicts(info.names, first)

    def exists(self, vf_id: str) -> bool:
        with self.reading() as conn:
            return conn.execute(
                sa.select(cat.virtual_file.c.id).where(cat.virtual_file.c.id == vf_id)
            ).first() is not None

    def scan_tuples(self, vf_id: str, columns: Sequence[str] | None = None, *, batch_size: int = SCAN_BATCH,
                    field: str = "schema") -> tuple[list[str], Iterator[list[tuple]]]:
        """``(column names, batches of value tuples)`` in row order: keyset pages read in one snapshot.

        ``columns`` selects and orders columns (an unknown name is an ``InvalidInput`` on ``field``).
        The snapshot is opened now, so the names and the rows always agree.
        """
        pages = self._pages(vf_id, columns, batch_size, field)
        names = next(pages)
        return names, pages  # type: ignore[return-value]

    def _pages(self, vf_id: str, columns: Sequence[str] | None, batch_size: int, field: str) -> Iterator[Any]:
        with self.reading() as conn:
            info = self.info(conn, vf_id)
            names = list(info.names) if columns is None else list(columns)
            unknown = [n for n in names if n not in info.names]
            if unknown:
                raise InvalidInput(field, f"unknown column(s) {unknown}; the virtual file has {list(info.names)}")
            yield names
            yield from keyset_pages(conn, info, names, batch_size)

    def scan(self, vf_id: str, *, batch_size: int = SCAN_BATCH) -> Iterator[list[Row]]:
        """Yield batches of rows as dicts (missing values left out), in row order."""
        names, pages = self.scan_tuples(vf_id, batch_size=batch_size)
        for batch in pages:
            yield [present(names, values) for values in batch]

    def rows(self, vf_id: str) -> list[Row]:
        """All rows (for small files: tests, previews, notebooks)."""
        return [row for batch in self.scan(vf_id) for row in batch]

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
            query = _select_rows(info).where(table.c.seq > after_seq).order_by(table.c.seq)
            if upto_seq is not None:
                query = query.where(table.c.seq <= upto_seq)
            return _dicts(info.names, fetch_all(conn, query))

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

    # -- iterate (server-side cursor) ------------------------------------------------------------
    def next_batch(self, vf_id: str, limit: int, cursor: str = DEFAULT_CURSOR) -> tuple[list[Row], bool]:
        """The next ``limit`` rows after this cursor's position, and whether more remain.

        The position advances in the same transaction as the read. When a call returns
        ``hasNext = false`` the position resets, so the next call starts from the first row again.
        A replaced file (new generation) restarts the cursor.
        """
        with self.writing() as conn:
            info = self.info(conn, vf_id, lock=True)
            key = (cat.vf_cursor.c.vf_id == vf_id) & (cat.vf_cursor.c.cursor_name == cursor)
            state = conn.execute(sa.select(cat.vf_cursor.c.last_seq, cat.vf_cursor.c.generation).where(key)).first()
            last = state.last_seq if state is not None and state.generation == info.generation else 0
            table = info.table
            rows = fetch_all(conn, _select_rows(info).where(table.c.seq > last).order_by(table.c.seq).limit(limit + 1))
            has_next = len(rows) > limit
            rows = rows[:limit]
            position = rows[-1][-1] if has_next else 0
            _upsert(conn, cat.vf_cursor, {"vf_id": vf_id, "cursor_name": cursor},
                    {"last_seq": position, "generation": info.generation})
            return _dicts(info.names, rows), has_next

    def next_array_batch(self, items: list[Any], limit: int) -> tuple[list[Any], bool]:
        """Iterate over an inline array: the same array continues where its last call stopped."""
        digest = hashlib.sha256(json.dumps(items, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        with self.writing() as conn:
            key = cat.array_cursor.c.digest == digest
            position = conn.execute(sa.select(cat.array_cursor.c.position).where(key)).scalar() or 0
            batch = items[position:position + limit]
            has_next = position + limit < len(items)
            if has_next:
                _upsert(conn, cat.array_cursor, {"digest": digest}, {"position": position + limit})
            else:
                conn.execute(sa.delete(cat.array_cursor).where(key))
            return batch, has_next

    # -- query and delete ------------------------------------------------------------------------
    def ensure_indexes(self, vf_id: str, names: Iterable[str]) -> None:
        """Index the given columns once, so repeated queries on them are fast."""
        with self.reading() as conn:
            info = self.info(conn, vf_id)
        self._create_indexes(info, names)

    def _create_indexes(self, info: VirtualFileInfo, names: Iterable[str]) -> bool:
        """Create the missing indexes on ``names``; ``False`` when there was nothing to do."""
        wanted = [o for n in names if (o := info.ordinal_of(n)) is not None and o not in info.indexed]
        if not wanted:
            return False
        with self.writing() as conn:
            info = self.info(conn, info.id, lock=True)
            table = info.table
            for ordinal in wanted:
                if ordinal in info.indexed:
                    continue
                sa.Index(f"ix_{info.table_name}_{internal_name(ordinal)}", table.c[internal_name(ordinal)]).create(
                    conn, checkfirst=True
                )
                conn.execute(
                    sa.update(cat.vf_column)
                    .where((cat.vf_column.c.vf_id == info.id) & (cat.vf_column.c.ordinal == ordinal))
                    .values(indexed=True)
                )
        return True

    def find(self, vf_id: str, flt: Mapping[str, Any], *, limit: int | None = None,
             field: str = "query") -> list[Row]:
        """Rows matching the filter, in row order.

        The first query on a column indexes it (once); later queries are one read transaction.
        """
        while True:
            with self.reading() as conn:
                info = self.info(conn, vf_id)
                if not self._needs_index(info, flt):
                    table = info.table
                    where = compile_filter(flt, info.column_map(table), field=field, dialect=conn.dialect.name,
                                           conn=conn)
                    query = _select_rows(info).where(where).order_by(table.c.seq)
                    if limit is not None:
                        query = query.limit(limit)
                    return _dicts(info.names, fetch_all(conn, query))
            self._create_indexes(info, equality_columns(flt))

    @staticmethod
    def _needs_index(info: VirtualFileInfo, flt: Mapping[str, Any]) -> bool:
        return any((o := info.ordinal_of(n)) is not None and o not in info.indexed for n in equality_columns(flt))

    def delete_where(self, vf_id: str, flt: Mapping[str, Any], *, field: str = "request") -> int:
        """Delete the rows matching the filter; returns how many were deleted."""
        with self.writing() as conn:
            info = self.info(conn, vf_id, lock=True)
            table = info.table
            where = compile_filter(flt, info.column_map(table), field=field, dialect=conn.dialect.name, conn=conn)
            return conn.execute(sa.delete(table).where(where)).rowcount

    # -- removing --------------------------------------------------------------------------------
    def drop(self, vf_id: str) -> None:
        """Remove the virtual file and free its storage (``NotFound`` if it does not exist)."""
        with self.writing() as conn:
            info = self.info(conn, vf_id, lock=True)
            conn.execute(sa.delete(cat.vf_cursor).where(cat.vf_cursor.c.vf_id == vf_id))
            conn.execute(sa.delete(cat.vf_column).where(cat.vf_column.c.vf_id == vf_id))
            conn.execute(sa.delete(cat.virtual_file).where(cat.virtual_file.c.id == vf_id))
            info.table.drop(conn)


def keyset_pages(conn: sa.Connection, info: VirtualFileInfo, names: Sequence[str],
                 batch_size: int = SCAN_BATCH) -> Iterator[list[tuple]]:
    """Batches of value tuples (aligned with ``names``) in row order, streamed in bounded memory."""
    if not names:  # a file without columns: SELECT needs one, the rows are empty tuples
        for page in stream(conn, sa.select(info.table.c.seq).order_by(info.table.c.seq), batch_size):
            yield [() for _ in page]
        return
    colmap = info.column_map()
    query = sa.select(*(colmap[n] for n in names)).order_by(info.table.c.seq)
    yield from stream(conn, query, batch_size)


def present(names: Sequence[str], values: Sequence[str | None]) -> Row:
    """A stored row as a dict, missing (NULL) values left out; one C call when none is missing (hot loops)."""
    if None not in values:
        return dict(zip(names, values))  # type: ignore[arg-type]  # noqa: B905 - same length
    return {n: v for n, v in zip(names, values, strict=True) if v is not None}


def _select_rows(info: VirtualFileInfo) -> sa.Select:
    """The value columns in catalog order, then ``seq`` last (see :func:`_dicts`)."""
    table = info.table
    return sa.select(*(table.c[internal_name(o)] for o in info.ordinals), table.c.seq)


def _dicts(names: Sequence[str], rows: list[tuple]) -> list[Row]:
    """Rows of :func:`_select_rows` -> dicts; ``zip`` stops before the trailing ``seq``. Missing
    values are left out (only rows that have any are filtered: the common case stays one C call)."""
    out = []
    for r in rows:
        row = dict(zip(names, r))  # noqa: B905 - r is one longer (seq)
        if None in r:
            row = {k: v for k, v in row.items() if v is not None}
        out.append(row)
    return out


def _batched(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _upsert(conn: sa.Connection, table: sa.Table, keys: dict[str, Any], values: dict[str, Any]) -> None:
    insert = (postgresql if conn.dialect.name == "postgresql" else sqlite).insert(table)
    conn.execute(insert.values(**keys, **values).on_conflict_do_update(index_elements=list(keys), set_=values))
