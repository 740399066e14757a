"""VirtualFileStore: virtual files (ordered rows of string values) in SQLite or PostgreSQL.

The store owns whole operations, each one transaction, and keeps its connections to itself: actions
call the methods below and never see a connection. This module is the light facade: it imports neither
SQLAlchemy nor the job modules, which load on the first database operation, so a CLI call that needs no
row table (Iterate over an inline array, through the plain DB-API driver) never pays for them. The jobs:

- :mod:`.core` — the engine, read/write transactions, the catalog lookup;
- :mod:`.writing` — create (or replace) and fill a file, append rows, drop a file;
- :mod:`.arrow_loads` — create a file from Arrow record batches (the columnar fast path);
- :mod:`.reading` — previews, ordered scans, fan-out ranges, Iterate's cursors;
- :mod:`.querying` — find and delete rows by filter, with indexes built on first use;
- :mod:`.transforms` — map rows, split rows (Validate), join;
- :mod:`.array_cursors` — Iterate over an inline array.

Rows are ``dict[str, str]``; a column a row does not have is stored as NULL and left out of the row when
read back, so "missing" and "empty string" stay different.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pydantic import PrivateAttr

from connector_ops.kernel.container import arrow_pool_for_limit
from connector_ops.kernel.disk import DEFAULT_MIN_FREE_DISK
from connector_ops.kernel.limits import refuse_nul_for_postgres
from connector_ops.kernel.resource import Resource
from connector_ops.resources.virtual_files import engine_holds
from connector_ops.resources.virtual_files.array_cursors import holds_positions, sqlite_path
from connector_ops.resources.virtual_files.shapes import (
    SCAN_BATCH,
    JoinKind,
    PageFunction,
    Refusal,
    Row,
    Side,
    Values,
    Verdicts,
)
from connector_ops.resources.virtual_files.urls import DatabaseUrl

if TYPE_CHECKING:
    from datetime import datetime

    from connector_ops.resources.virtual_files.compaction import Compaction
    from connector_ops.resources.virtual_files.sql_store import SqlStore



class VirtualFileStore(Resource):
    """Virtual files in the database at ``database_url`` (``sqlite:///…`` or ``postgresql+psycopg://…``)."""

    database_url: DatabaseUrl
    """SQLAlchemy URL: ``sqlite:///path.db`` or ``postgresql+psycopg://user:password@host/db`` (secret)."""
    min_free_disk: int = DEFAULT_MIN_FREE_DISK
    """Bytes of free disk space writes to a SQLite file leave on its disk (``CONNECTOR_OPS_MIN_FREE_DISK``;
    0: no check): a write that would go below stops with a 500 and leaves nothing. Not PostgreSQL's: its
    server's disk is not ours to see, and the server refuses by itself."""

    _scoped: bool = PrivateAttr(default=False)  # held its engine until close (:mod:`.engine_holds`)

    def model_post_init(self, context: Any, /) -> None:
        """In a container, Arrow's memory pool is chosen now, before our first import of pyarrow: every
        Push, Pull and frame goes through a store (:func:`~connector_ops.kernel.container.arrow_pool_for_limit`)."""
        arrow_pool_for_limit()

    def close(self) -> None:
        """Stop this database's SQLite loader process, if this process started one (a later column-wise
        load starts it again); held for a scope (a user's ``Session``), release the database's engine, which
        the last holder's release disposes of (:mod:`.engine_holds`)."""
        loaders = sys.modules.get("connector_ops.resources.virtual_files.sqlite_loader")
        if loaders is not None and self.sqlite_file is not None:
            loaders.close_loader(self.sqlite_file)
        if self._scoped:
            self._scoped = False
            engine_holds.release(self.database_url)

    def held(self, for_process: bool) -> None:
        if for_process:
            engine_holds.pin(self.database_url)
        elif not self._scoped:
            engine_holds.hold(self.database_url)
            self._scoped = True

    def single_host(self) -> str | None:
        if self.database_url.startswith("sqlite"):
            return "virtual files are in a SQLite file of one host; set CONNECTOR_OPS_DATABASE_URL to PostgreSQL"
        return None

    @property
    def sqlite_file(self) -> str | None:
        """The SQLite file of ``database_url`` (``None``: PostgreSQL, or SQLite in memory)."""
        return sqlite_path(self.database_url)

    def check_exists(self) -> None:
        """``NotFound`` when the store is a SQLite file that does not exist.

        Opening a store creates its file (and directories): right for a run's first write, wrong for a command
        that only looks at a store or removes from it — ``gc --dry-run`` on a mistyped URL made an empty store
        there and reported nothing to collect, as if the typo were a clean store."""
        path = self.sqlite_file
        if path is not None and not Path(path).expanduser().is_file():
            from connector_ops.kernel.errors import NotFound

            raise NotFound(f"the virtual-file store's database {path} does not exist: check "
                           "CONNECTOR_OPS_DATABASE_URL")

    def stored(self) -> bool:
        """Whether anything was ever stored here: ``False`` while the database (a SQLite file, a PostgreSQL
        database) has no catalog yet. Asked without creating it, as every other method would."""
        from connector_ops.resources.virtual_files.engines import catalog_exists

        # an inline array's Iterate once made only its positions' table (before layout 2)
        return catalog_exists(self.database_url) or holds_positions(self.database_url)

    @property
    def holds_nul(self) -> bool:
        """Whether a stored value may hold a NUL character: SQLite's text can, PostgreSQL's cannot."""
        return self.database_url.startswith("sqlite")

    def check_nul(self, value: Any, field: str) -> None:
        """A 400 naming the first string in ``value`` (a row's values) that holds a NUL where the database's
        text cannot hold one (PostgreSQL); on SQLite a value keeps it, as a Push keeps a file's, so a file's
        own rows can be appended to it. A filter's operands get the same check from the filter compiler,
        which every filter passes (:func:`~.filters.compile_filter`)."""
        if not self.holds_nul:
            refuse_nul_for_postgres(value, field)

    @property
    def sql(self) -> SqlStore:
        """The SQL jobs behind this facade (for the store's own modules, tests and benchmarks)."""
        from connector_ops.resources.virtual_files.sql_store import sql_store

        return sql_store(self.database_url, self.min_free_disk)

    # -- writing ---------------------------------------------------------------------------------
    def create_from_batches(self, columns: Sequence[str], batches: Iterable[Sequence[Values]], *,
                            copied_from: str | None = None) -> str:
        """A new virtual file with ``columns`` holding every batch of value rows; returns its id.
        ``copied_from``: the id of the file of another store it copies (``store copy``), recorded with it in
        one transaction (:meth:`copies`)."""
        return self.sql.create_from_batches(columns, batches, copied_from=copied_from)

    def create_from_dicts(self, batches: Iterable[Sequence[Mapping[str, str | None]]],
                          columns: Sequence[str] = (), field: str = "") -> str:
        """A new virtual file holding every batch of dict rows (``columns`` first); returns its id."""
        return self.sql.create_from_dicts(batches, columns, field)

    def columnar_load_pays(self, size: int | None) -> bool:
        """Whether loading ``size`` bytes column-wise (``create_from_csv``/``create_from_arrow``) is faster.
        On a SQLite file this is answered (and the loader process started) before SQLAlchemy is imported,
        so the two overlap."""
        if self.sqlite_file is not None:
            from connector_ops.resources.virtual_files.sqlite_loader import worth_it

            return worth_it(self.sqlite_file, size)
        return self.sql.columnar_load_pays(size)

    def create_from_csv(self, columns: Sequence[str], stream: IO[bytes], delimiter: str, *,
                        through_arrow: bool = False) -> str:
        """A new virtual file from CSV data rows parsed column-wise (plain RFC 4180 quoting, UTF-8, one field
        per column); returns its id. Raises on anything else, leaving nothing (the caller reads row-wise);
        ``csv_copy.NotForCopy`` asks for another try ``through_arrow`` (PostgreSQL)."""
        return self.sql.create_from_csv(columns, stream, delimiter, through_arrow=through_arrow)

    def create_from_ndjson(self, columns: Sequence[str], stream: IO[bytes]) -> str:
        """A new virtual file from NDJSON whose every value is a string or null and whose keys are ``columns``,
        parsed column-wise; returns its id. Raises on anything else (other keys or types, not one object a
        line), leaving nothing (the caller reads row-wise)."""
        return self.sql.create_from_ndjson(columns, stream)

    def create_from_arrow(self, columns: Sequence[str], batches: Iterable[Any], size: int | None = None, *,
                          copied_from: str | None = None) -> str:
        """A new virtual file with ``columns`` holding every Arrow record batch (columns aligned with
        ``columns``; a null is a missing value), loaded column-wise; returns its id. ``copied_from`` as for
        :meth:`create_from_batches`."""
        return self.sql.create_from_arrow(columns, batches, size, copied_from=copied_from)

    def append(self, rows_by_file: Mapping[str, Sequence[Mapping[str, str | None]]], field: str = "rows") -> int:
        """Append rows to one or several virtual files in one transaction; new keys add columns (errors
        about them name ``field``)."""
        return self.sql.append(rows_by_file, field)

    def drop(self, vf_id: str) -> None:
        """Remove the virtual file and free its storage (``NotFound`` if it does not exist)."""
        self.sql.drop(vf_id)

    def drop_unchanged(self, listed: Sequence[tuple[str, datetime]]) -> list[str]:
        """Remove the files :meth:`inventory` listed that nobody wrote since (many per transaction); the ids
        gone, removed here or meanwhile. What gc removes with."""
        return self.sql.drop_unchanged(listed)

    def publish(self, name: str, source: str) -> str:
        """Make the virtual file ``name`` hold the rows of ``source`` (which ceases to exist), replacing what
        ``name`` held, in one transaction; returns ``name``. A named file (an asset's) keeps its id across
        re-materialisations, and its readers see either the old rows or the new ones, never a mix."""
        return self.sql.publish(name, source)

    def inventory(self) -> list[tuple[str, datetime]]:
        """Every virtual file's id and creation time (UTC), oldest first."""
        return self.sql.inventory()

    def copies(self) -> dict[str, str]:
        """The copies ``store copy`` made here that are still here, by the id of the file each copies."""
        return self.sql.copies()

    def inventory_and_copies(self) -> tuple[list[tuple[str, datetime]], dict[str, str]]:
        """:meth:`inventory` and :meth:`copies` together, as the platform-file store gives them (``store copy``)."""
        return self.inventory(), self.copies()

    def collect_array_positions(self, cutoff: datetime, *, dry_run: bool = False) -> tuple[int, int]:
        """Remove the inline arrays' Iterate positions not moved since ``cutoff``; ``(removed, kept)``."""
        return self.sql.collect_array_positions(cutoff, dry_run=dry_run)

    def compact(self, *, dry_run: bool = False) -> Compaction | None:
        """Give back the disk space of dropped files where the database keeps it (SQLite); what it gave."""
        return self.sql.compact(dry_run=dry_run)

    # -- reading ---------------------------------------------------------------------------------
    def summary(self, vf_id: str, n: int = 5) -> tuple[int, list[str], list[Row]]:
        """``(row count, column names, first n rows)`` in one snapshot (op metadata, previews)."""
        return self.sql.summary(vf_id, n)

    def row_count(self, vf_id: str, *, estimate: bool = False) -> tuple[int, bool]:
        """``(rows, exact)``; with ``estimate``, PostgreSQL's estimate where it keeps one (no count read)."""
        return self.sql.row_count(vf_id, estimate=estimate)

    def progress_rows(self, vf_id: str) -> tuple[int | None, bool]:
        """``(rows, exact)`` to show a read of the whole file against, at no read of its own where a count is
        one: PostgreSQL's estimate (``None`` without one); SQLite's count, which decodes no row."""
        return self.sql.progress_rows(vf_id)

    def scan_tuples(self, vf_id: str, columns: Sequence[str] | None = None, *, batch_size: int = SCAN_BATCH,
                    field: str = "schema") -> tuple[list[str], Generator[list[tuple], None, None]]:
        """``(column names, batches of value tuples)`` in row order, read in one snapshot; ``columns`` selects
        and orders columns (an unknown one is an ``InvalidInput`` on ``field``)."""
        return self.sql.scan_tuples(vf_id, columns, batch_size=batch_size, field=field)

    def scan_arrow(self, vf_id: str, columns: Sequence[str] | None = None, *,
                   field: str = "schema") -> tuple[list[str], Generator[Any, None, None]]:
        """``(column names, Arrow record batches of strings)`` in row order, read in one snapshot; a missing
        value is null. ``columns`` as for :meth:`scan_tuples`."""
        return self.sql.scan_arrow(vf_id, columns, field=field)

    def read_range(self, vf_id: str, after_seq: int, upto_seq: int | None,
                   generation: int | None = None) -> list[Row]:
        """Rows with ``after_seq < seq <= upto_seq`` (a fan-out batch), refused if the file was replaced."""
        return self.sql.read_range(vf_id, after_seq, upto_seq, generation)

    def batch_bounds(self, vf_id: str, batch_size: int) -> tuple[int, list[tuple[int, int]]]:
        """``(generation, [(after_seq, upto_seq), …])`` splitting the file into batches of ``batch_size``."""
        return self.sql.batch_bounds(vf_id, batch_size)

    def next_batch(self, vf_id: str, limit: int, cursor: str = "default", *,
                   progress: Callable[[int], object] | None = None) -> tuple[list[Row], bool]:
        """The next ``limit`` rows after this cursor's position, and whether more remain; ``progress`` is
        told how many rows each page read adds."""
        return self.sql.next_batch(vf_id, limit, cursor, progress=progress)

    def next_array_batch(self, items: list[Any], limit: int) -> tuple[list[Any], bool]:
        """Iterate over an inline array: the same array continues where its last call stopped."""
        from connector_ops.resources.virtual_files.array_cursors import next_array_batch

        found = next_array_batch(self.database_url, items, limit)
        return self.sql.next_array_batch(items, limit) if found is None else found

    # -- querying --------------------------------------------------------------------------------
    def find(self, vf_id: str, flt: Mapping[str, Any], *, limit: int | None = None,
             field: str = "query", progress: Callable[[int], object] | None = None) -> list[Row]:
        """Rows matching the filter, in row order (the first query on a column indexes it); ``progress`` is
        told how many rows each page read adds."""
        return self.sql.find(vf_id, flt, limit=limit, field=field, progress=progress)

    def delete_where(self, vf_id: str, flt: Mapping[str, Any], *, field: str = "request",
                     dry_run: bool = False) -> int:
        """Delete the rows matching the filter; returns how many were deleted (``dry_run``: would be)."""
        return self.sql.delete_where(vf_id, flt, field=field, dry_run=dry_run)

    # -- transforms ------------------------------------------------------------------------------
    def map_rows(self, vf_id: str, transform: PageFunction, *, overwrite: bool = False,
                 batch_size: int | None = None) -> str:
        """Write ``transform(page)`` for every page of rows into a new virtual file (or in place of ``vf_id``);
        returns its id. Whatever ``transform`` raises rolls everything back."""
        return self.sql.map_rows(vf_id, transform, overwrite=overwrite, batch_size=batch_size)

    def split_rows(self, vf_id: str, refuse: Refusal, refused_columns: Sequence[str],
                   batch_size: int | None = None, verdicts: Verdicts | None = None) -> tuple[str, str]:
        """Two new virtual files: the rows ``refuse`` accepts, and what it returned for the others; their ids.
        With ``verdicts`` (Validate's rules and words), the database decides every row it can judge surely;
        only the others reach ``refuse``."""
        return self.sql.split_rows(vf_id, refuse, refused_columns, batch_size, verdicts)

    def join(self, left: Side, right: Side, kind: JoinKind = "INNER",
             output_schema: Mapping[str, str] | None = None) -> tuple[str, str]:
        """Join two virtual files on a key; returns ``(output id, rejection id)``."""
        return self.sql.join(left, right, kind, output_schema)
