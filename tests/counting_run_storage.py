"""A Dagster run storage (SQLite, Dagster's own) that counts the runs it reads, for ``dagster.yaml``'s
``run_storage``: how many runs a caller deserialised, observed where Dagster builds each one."""

from __future__ import annotations

from typing import Any

from dagster._core.storage.runs import SqliteRunStorage


class CountingRunStorage(SqliteRunStorage):
    """:class:`SqliteRunStorage` with ``runs_read``: every run body it turned into a ``DagsterRun``."""

    runs_read = 0

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> CountingRunStorage:
        return cls.from_local(inst_data=inst_data, **config_value)  # the base builds a SqliteRunStorage

    def _row_to_run(self, row: Any) -> Any:
        self.runs_read += 1
        return super()._row_to_run(row)
