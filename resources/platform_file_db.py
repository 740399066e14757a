"""Platform files kept in a database (``CONNECTOR_OPS_FILES_BACKEND=database``): bytes and descriptors in the
virtual-file store's database, so every host of a deployment reads and writes the same files.

Bytes are rows of at most 1 MiB (``cop_platform_file_chunk``), read back one chunk at a time, so memory stays
bounded whatever the file's size. A file is written in one transaction, its descriptor last: until it commits
nobody sees it, and a failure leaves nothing. On PostgreSQL the chunks go in as the writer produces them. On
SQLite a write transaction holds the whole database's write lock, so a file that arrives slowly (a Drive
download) would make every other writer — each Push, each step of a run — wait for it and fail after the
busy timeout: there the bytes are spooled to a temporary file first, and the transaction only copies them.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime
from typing import IO, Any

import sqlalchemy as sa

from connector_ops.kernel.disk import DEFAULT_MIN_FREE_DISK, temp_floor
from connector_ops.kernel.errors import NotFound
from connector_ops.resources.virtual_files.catalog import platform_file, platform_file_chunk, write_ended
from connector_ops.resources.virtual_files.core import as_utc
from connector_ops.resources.virtual_files.engines import WRITE, get_engine

CHUNK = 1 << 20


class _ChunkWriter:
    """Buffers writes into chunks of :data:`CHUNK` bytes, each inserted as one row of the open transaction."""

    def __init__(self, conn: sa.Connection, file_id: str) -> None:
        self._conn, self._file_id = conn, file_id
        self._buffer = bytearray()
        self._seq = 0

    def write(self, data: bytes) -> int:
        self._buffer += data
        while len(self._buffer) >= CHUNK:
            self._insert(bytes(self._buffer[:CHUNK]))
            del self._buffer[:CHUNK]
        return len(data)

    def flush(self) -> None:
        """Nothing to do: rows are sent as chunks fill, the rest at the end of the file."""

    def finish(self) -> None:
        if self._buffer or self._seq == 0:
            self._insert(bytes(self._buffer))
            self._buffer.clear()

    def _insert(self, data: bytes) -> None:
        self._conn.execute(sa.insert(platform_file_chunk).values(file_id=self._file_id, seq=self._seq, data=data))
        self._seq += 1


class _ChunkReader(io.RawIOBase):
    """The bytes of one file, a chunk row at a time (one short query per chunk), on ``conn``: its transaction
    is one snapshot, so a file deleted meanwhile is still read whole. Closing it ends the transaction (and
    gives the connection back to the pool)."""

    def __init__(self, conn: sa.Connection, file_id: str, size: int | None) -> None:
        self._conn, self._file_id, self._size = conn, file_id, size
        self._seq = 0
        self._read = 0
        self._buffer = b""
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._buffer and not self._done:
            c = platform_file_chunk.c
            data = self._conn.execute(
                sa.select(c.data).where(c.file_id == self._file_id, c.seq == self._seq)).scalar()
            if data is None:
                self._done = True
                if self._size is not None and self._read != self._size:  # the snapshot should make this impossible
                    raise NotFound(f"platform file {self._file_id!r} not found (its bytes are incomplete)")
            else:
                self._buffer = bytes(data)
                self._read += len(self._buffer)
                self._seq += 1
        n = min(len(target), len(self._buffer))
        target[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n

    def close(self) -> None:
        if not self.closed:
            self._conn.close()
        super().close()


def _descriptor(conn: sa.Connection, file_id: str) -> dict[str, Any]:
    stored = conn.execute(sa.select(platform_file.c.descriptor).where(platform_file.c.id == file_id)).scalar()
    if stored is None:
        raise NotFound(f"platform file {file_id!r} not found")
    return json.loads(stored)


class DatabaseFiles:
    """The platform files in the database at ``database_url``."""

    def __init__(self, database_url: str, min_free_disk: int = DEFAULT_MIN_FREE_DISK) -> None:
        self.database_url = database_url
        self.min_free_disk = min_free_disk
        _ = self.engine  # the catalog created now, as before

    @property
    def engine(self) -> sa.Engine:
        """The process's engine, asked for at each use: one kept would stay on a SQLite file deleted or
        replaced since (:mod:`.virtual_files.store_file`), or on a database whose catalog was re-created.
        Its SQLite faults name the platform files' ``min_free_disk``."""
        return get_engine(self.database_url, self.min_free_disk)

    @contextlib.contextmanager
    def create(self, file_id: str) -> Iterator[tuple[IO[bytes] | _ChunkWriter, list[dict[str, Any]]]]:
        """Yields a writer and a list to append the descriptor to; both are committed together."""
        descriptor: list[dict[str, Any]] = []
        if self.engine.dialect.name == "sqlite":
            floor = temp_floor()
            with tempfile.TemporaryFile() as spool:
                yield floor.guard(spool), descriptor
                spool.seek(0)
                with self._transaction(file_id, descriptor) as writer:
                    shutil.copyfileobj(spool, writer, CHUNK)
            return
        with self._transaction(file_id, descriptor) as writer:
            yield writer, descriptor

    @contextlib.contextmanager
    def _transaction(self, file_id: str, descriptor: list[dict[str, Any]]) -> Iterator[_ChunkWriter]:
        """The write transaction of one file: the chunks written in the block, then its descriptor."""
        with self.engine.execution_options(**WRITE).begin() as conn:
            writer = _ChunkWriter(conn, file_id)
            yield writer
            writer.finish()
            # dated when the write ends, as lastModified
            conn.execute(sa.insert(platform_file).values(id=file_id, descriptor=json.dumps(descriptor[0]),
                                                         created_at=write_ended(conn)))

    def describe(self, file_id: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            return _descriptor(conn, file_id)

    def open(self, file_id: str, *, detached: bool = False) -> IO[bytes]:
        """The file's bytes, its descriptor and every chunk read in one snapshot (PostgreSQL's ``REPEATABLE
        READ``, SQLite's read transaction): a file already deleted is ``NotFound`` before any byte, and a
        delete or ``gc`` committed while it is read does not cut it.

        The stream holds its snapshot's pooled connection until it is closed: right for a reader in this
        process, which reads on to the end (a Push, a Drive upload). ``detached``: for a reader that may stall
        (a client of ``files serve`` over the network), the snapshot is read whole into a spool first (in
        memory up to one chunk, then a temporary file kept above ``CONNECTOR_OPS_MIN_FREE_DISK``) and the
        transaction ends before the caller reads a byte — 15 stalled downloads held the whole pool "idle in
        transaction", and every other request waited 30 s for a 500."""
        conn = self.engine.connect()
        try:
            if conn.dialect.name == "postgresql":
                conn.execution_options(isolation_level="REPEATABLE READ")
            conn.begin()
            size = _descriptor(conn, file_id).get("size")
        except BaseException:
            conn.close()
            raise
        if not detached:
            return io.BufferedReader(_ChunkReader(conn, file_id, size), CHUNK)
        spool = tempfile.SpooledTemporaryFile(max_size=CHUNK)  # noqa: SIM115 (returned open: the caller closes it)
        try:
            with contextlib.closing(_ChunkReader(conn, file_id, size)) as reader:
                sink = temp_floor().guard(spool) if size is None or size > CHUNK else spool
                shutil.copyfileobj(reader, sink, CHUNK)
            spool.seek(0)
        except BaseException:
            spool.close()
            raise
        return spool

    def inventory(self) -> list[tuple[str, datetime]]:
        c = platform_file.c
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(c.id, c.created_at).order_by(c.created_at, c.id)).all()
        return [(file_id, as_utc(created)) for file_id, created in rows]

    def copies(self, key: str) -> dict[str, str]:
        """The files whose descriptor names, under ``key``, the file of another store each copies, by that
        id; of two copies of one file, the later."""
        c = platform_file.c
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(c.id, c.descriptor).where(c.descriptor.contains(f'"{key}"'))
                                .order_by(c.created_at, c.id)).all()
        found = {}
        for file_id, stored in rows:
            old_id = json.loads(stored).get(key)
            if isinstance(old_id, str):
                found[old_id] = file_id
        return found

    def delete(self, file_id: str) -> None:
        with self.engine.execution_options(**WRITE).begin() as conn:
            conn.execute(sa.delete(platform_file_chunk).where(platform_file_chunk.c.file_id == file_id))
            conn.execute(sa.delete(platform_file).where(platform_file.c.id == file_id))
