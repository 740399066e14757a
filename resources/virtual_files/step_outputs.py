"""Step outputs kept in the virtual-file store's database, so the host running a step reads what another
host's step wrote (Dagster's default IO manager writes pickles to the local disk of the run's host).

Values are opaque bytes here (the IO manager pickles them, as Dagster's own IO managers do); a key names
one output of one step of one run. Each write is one transaction and replaces an earlier value of the same
key (a retried step writes its output again).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import sqlalchemy as sa

from connector_ops.kernel.errors import NotFound
from connector_ops.kernel.fence import check_fence
from connector_ops.resources.virtual_files.catalog import step_output
from connector_ops.resources.virtual_files.core import as_utc
from connector_ops.resources.virtual_files.engines import WRITE, get_engine


class StepOutputs:
    """The step outputs in the database at ``database_url`` (the store's own, SQLite or PostgreSQL)."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url

    @property
    def engine(self) -> sa.Engine:
        """The store's engine, made (with the catalog) on first use: ``gc`` on a database nothing was ever
        stored in holds one of these and must leave the database as it was."""
        return get_engine(self.database_url)

    def put(self, key: str, run_id: str, value: bytes) -> None:
        table = step_output.c
        with self.engine.execution_options(**WRITE).begin() as conn:
            conn.execute(sa.delete(step_output).where(table.key == key))
            conn.execute(sa.insert(step_output).values(key=key, run_id=run_id, value=value))
            check_fence(f"step output {key!r}")

    def get(self, key: str) -> bytes:
        with self.engine.begin() as conn:
            value = conn.execute(sa.select(step_output.c.value).where(step_output.c.key == key)).scalar()
        if value is None:
            raise NotFound(f"step output {key!r} not found: the step that makes it has not run, or its "
                           "outputs were collected (connector-ops gc); re-execute from that step")
        return bytes(value)

    def runs(self) -> list[tuple[str, datetime]]:
        """Each run with outputs kept, with the time of its newest output: what garbage collection weighs."""
        table = step_output.c
        with self.engine.begin() as conn:
            rows = conn.execute(sa.select(table.run_id, sa.func.max(table.created_at)).group_by(table.run_id)).all()
        return [(run_id, as_utc(created)) for run_id, created in rows]

    def delete_runs(self, run_ids: Iterable[str]) -> int:
        """Drop every output of ``run_ids``; returns how many went."""
        ids = list(run_ids)
        if not ids:
            return 0
        with self.engine.execution_options(**WRITE).begin() as conn:
            return conn.execute(sa.delete(step_output).where(step_output.c.run_id.in_(ids))).rowcount
