"""PostgreSQL ``COPY`` through psycopg's writer thread with a short queue (loaders.open_copy): the rows all
arrive, and the queue the writer thread reads is ours, bounded — psycopg's default holds 1,024 buffers,
which let a Push queue 115 MiB when the server was the slower side."""

from __future__ import annotations

import queue

import psycopg
from psycopg.copy import QueuedLibpqWriter

from connector_ops.resources.virtual_files.loaders import COPY_QUEUE, open_copy


def test_copy_through_the_bounded_writer_loads_every_row_and_keeps_the_queue_short(postgres_url: str) -> None:
    dsn = postgres_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn) as conn, conn.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE t (n text)")
        assert "_queue" in vars(QueuedLibpqWriter(cursor))  # the attribute open_copy replaces is psycopg's
        with open_copy(cursor, "COPY t (n) FROM STDIN") as copy:
            writer = copy.writer
            assert isinstance(writer._queue, queue.Queue) and writer._queue.maxsize == COPY_QUEUE
            for start in range(0, 200_000, 1_000):  # 200 writes: far more than the queue holds
                copy.write("".join(f"{i}\n" for i in range(start, start + 1_000)).encode())
        cursor.execute("SELECT count(*), count(DISTINCT n), max(n::int) FROM t")
        assert cursor.fetchone() == (200_000, 200_000, 199_999)
