"""A virtual file's rows as Arrow record batches of strings (``pull_frame``, ``%etl pull --df``).

PostgreSQL: the server writes the rows as CSV (``COPY (SELECT …) TO STDOUT``, every present value quoted)
and Arrow's C parser reads them, so no value becomes a Python object on the way. ``FORCE_QUOTE *`` is what
keeps a missing value apart from an empty one: NULL is the only unquoted empty field, and Arrow is told
that only an unquoted empty field is null. SQLite writes each row as a JSON object (``json_object``, in C;
a missing value ``null``) and Arrow's JSON reader parses a page of them: one Python string per row instead
of one per value, and no ``pyarrow.array`` over Python objects, whose first call imports pandas (pyarrow
asks whether the objects are a pandas array: 400 modules; a command-line Parquet Pull peaked at 230 MiB
then, 180 MiB now, BENCHMARKS.md). Either way the rows are read in one snapshot, in row order, in bounded memory.

A scan that ends early on PostgreSQL cancels its ``COPY`` and waits until Arrow's thread has stopped reading
from the connection before the ``COPY``'s own exit runs. Arrow reads ahead in a thread of its own; psycopg's
exit of an unfinished ``COPY TO`` (and the rollback after it) read the connection in the caller's thread,
and two threads reading one connection lose each other's answers: one of them waits for bytes the other
has taken, for ever. A throwaway script that closed a scan early a hundred times hung after 11 closes in
one run and after 19 in another (the next scan waited for ever); with this, five runs of 100 went through.
Cancelled first, the server ends the ``COPY`` with an error that the read in flight gets;
:meth:`.Paced.stop` waits for that read and gives every later one the end, so only the caller's thread
touches the connection afterwards. A server that cannot be reached (the network stopped) answers neither
the cancel nor the read: the connection is then given up (``CancellingConnection.give_up``), which ends the
read with an error.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from connector_ops.kernel.streams import ChunkStream
from connector_ops.resources.virtual_files.catalog import VirtualFileInfo
from connector_ops.resources.virtual_files.crlf_blocks import WholeCRLF
from connector_ops.resources.virtual_files.driver_connection import driver_of
from connector_ops.resources.virtual_files.fetching import stream
from connector_ops.resources.virtual_files.paced import Paced
from connector_ops.resources.virtual_files.shapes import SCAN_BATCH

#: Arrow's block (the unit of parsing and of memory); a row longer than a block is read again with a larger one
BLOCK = 1 << 20
#: the largest block tried: PostgreSQL's own bound on one value is 1 GB
MAX_BLOCK = 1 << 30
#: columns per ``json_object`` call: two arguments each, and SQLite's default limit is 127 arguments
OBJECT_COLUMNS = 63


def arrow_batches(conn: sa.Connection, info: VirtualFileInfo, names: Sequence[str]) -> Iterator[Any]:
    """Record batches of ``names`` (columns of ``info``, in that order; strings, a missing value null)."""
    if not names:  # rows without values: nothing Arrow can hold
        return
    import pyarrow as pa

    schema = pa.schema([(n, pa.string()) for n in names])
    if conn.dialect.name == "postgresql":
        yield from _copied(conn, info, schema)
        return
    yield from _as_json(conn, info, schema)


def _as_json(conn: sa.Connection, info: VirtualFileInfo, schema: Any) -> Iterator[Any]:
    """SQLite: pages of rows as JSON objects, each page parsed as one block of NDJSON (a row's text is never
    split). A function takes at most 127 arguments in SQLite's default build, so a row of more than
    ``OBJECT_COLUMNS`` columns is several objects, one per group of columns, each group's page parsed apart
    (a ``json_patch`` of them made SQLite parse every object again: 130 columns read about twice as slowly)."""
    import pyarrow as pa
    import pyarrow.json as pajson

    columns = info.column_map()
    fields = [f"f{i}" for i in range(len(schema.names))]  # the user's names may repeat, or hold any character
    groups = [range(i, min(i + OBJECT_COLUMNS, len(fields))) for i in range(0, len(fields), OBJECT_COLUMNS)]
    objects = [sa.func.json_object(*itertools.chain.from_iterable(
        (sa.literal_column(f"'{fields[i]}'"), columns[schema.names[i]]) for i in group)) for group in groups]
    parses = [pajson.ParseOptions(explicit_schema=pa.schema([(fields[i], pa.string()) for i in group]),
                                  unexpected_field_behavior="error") for group in groups]
    for page in stream(conn, sa.select(*objects).order_by(info.table.c.seq), SCAN_BATCH):
        parsed = []
        for g, parse in enumerate(parses):
            text = "\n".join(map(operator.itemgetter(g), page)).encode()
            read = pajson.ReadOptions(use_threads=False, block_size=len(text) + 1)
            parsed.extend(pajson.read_json(pa.py_buffer(text), read_options=read, parse_options=parse).columns)
            del text
        del page
        yield from pa.Table.from_arrays(parsed, schema=schema).to_batches()


def _copied(conn: sa.Connection, info: VirtualFileInfo, schema: Any) -> Iterator[Any]:
    """Arrow's reader wants each row inside one block: a row longer than ``BLOCK`` (a value of a few MiB)
    fails it ("straddling object"). Then the rows not yet given are read again, by a new ``COPY`` in the
    same transaction (its ``FOR SHARE`` on the file holds writers off), with a block four times larger; the
    savepoint takes the cancelled ``COPY``'s error back. Only such files pay for a larger block."""
    import pyarrow as pa

    block, done = BLOCK, 0
    while True:
        savepoint = conn.begin_nested()
        try:
            for batch in _copied_from(conn, info, schema, block, done):
                done += batch.num_rows
                yield batch
        except pa.ArrowInvalid as exc:
            savepoint.rollback()
            if "straddl" not in str(exc) or block >= MAX_BLOCK:
                raise
            block = min(block * 4, MAX_BLOCK)
            continue
        except BaseException:  # the consumer stopped, or the scan failed: the first word is that
            with contextlib.suppress(Exception):  # a connection given up (the network stopped) takes no rollback
                savepoint.rollback()
            raise
        savepoint.commit()
        return


def _copied_from(conn: sa.Connection, info: VirtualFileInfo, schema: Any, block: int, skip: int) -> Iterator[Any]:
    """The rows after the first ``skip``, through Arrow's reader in blocks of ``block`` bytes."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from connector_ops.resources.virtual_files.pg_cancel import CANCEL_SECONDS

    columns = info.column_map()
    query = sa.select(*(columns[n] for n in schema.names)).order_by(info.table.c.seq).offset(skip or None)
    sql = query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})  # COPY takes no parameter
    statement = f"COPY ({sql}) TO STDOUT (FORMAT csv, FORCE_QUOTE *)"
    fields = [f"f{i}" for i in range(len(schema.names))]  # the user's names may repeat; Arrow's reader wants them apart
    with driver_of(conn.connection).cursor() as cursor, cursor.copy(statement) as copy:
        paced = Paced(ChunkStream(copy), block)  # psycopg hands it over a row at a time
        buffered = paced.buffered()
        if not buffered.peek(1):  # no rows (Arrow calls an empty input an error)
            return
        try:  # opening reads the first block already: a row longer than it fails here
            reader = pacsv.open_csv(
                paced.entrance(WholeCRLF(buffered)),
                read_options=pacsv.ReadOptions(column_names=fields, block_size=block, use_threads=False),
                parse_options=pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False),
                convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(fields, pa.string()),
                                                     null_values=[""], strings_can_be_null=True,
                                                     quoted_strings_can_be_null=False))
            for batch in paced.taken(reader):
                yield pa.RecordBatch.from_arrays(batch.columns, schema=schema)
        except BaseException:  # the reader failed, or the consumer stopped early (an interrupt, an error, closed)
            connection = cursor.connection
            try:
                connection.cancel_safe(timeout=CANCEL_SECONDS)
                cancelled = True
            except Exception:  # the server unreachable
                cancelled = False
            if not (cancelled and paced.stop(CANCEL_SECONDS)):  # the read in flight, which the cancel ends
                connection.give_up()  # no answer: its socket shut, the read in flight ends with an error
                paced.stop()
            raise
