"""Step outputs in the virtual-file store's database: the IO manager of our Definitions.

Dagster's default IO manager pickles each output to the local disk of the host that ran the step, so a
step on another host (a Celery worker, a Kubernetes pod) fails with ``FileNotFoundError`` reading its
input. Our outputs are small (ids, ``platformFile`` descriptors, batches of row ranges) and the store's
database is already reached by every host that runs ETL steps, so they are kept there
(:mod:`connector_ops.resources.virtual_files.step_outputs`): with PostgreSQL, any host reads what any
other wrote; with the default SQLite file, the run stays on one host, as it always was.

Values are pickled, as Dagster's own IO managers do (the database is the deployment's own, trusted).
``connector-ops gc`` removes the outputs of runs older than its cutoff.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from connector_ops.environment import recipes_for
from connector_ops.kernel.errors import NotFound


def output_key(identifier: list[str]) -> str:
    """One output's key: run id, step key, output name (and mapping key of a dynamic output)."""
    return "/".join(identifier)


class StepOutputIOManager(dg.ConfigurableIOManager):
    """Keeps step outputs in the database of the virtual-file store, so every host running steps reads them."""

    database_url: str | None = None
    """SQLAlchemy URL of the database (secret: pass an ``EnvVar``). Unset: the virtual-file store's database
    in the environment of the process running the step (``CONNECTOR_OPS_DATABASE_URL``, else the SQLite file
    under ``CONNECTOR_OPS_HOME``)."""

    _store: Any = PrivateAttr(default=None)

    def _outputs(self) -> Any:
        """The step-output table, resolved once per IO manager (once per run's process)."""
        if self._store is None:
            from connector_ops.resources.virtual_files.step_outputs import StepOutputs

            url = self.database_url or recipes_for(["virtual_files"])["virtual_files"].resolved()["database_url"]
            self._store = StepOutputs(url)
        return self._store

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if context.dagster_type.is_nothing:
            return
        self._outputs().put(output_key(context.get_identifier()), context.run_id,
                            pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    def load_input(self, context: dg.InputContext) -> Any:
        if context.dagster_type.is_nothing:
            return None
        upstream = context.upstream_output
        assert upstream is not None, "an input with no upstream output is loaded by its own input manager"
        try:
            data = self._outputs().get(output_key(upstream.get_identifier()))
        except NotFound as exc:
            raise dg.Failure(description=f"input {context.name!r}: {exc}") from None
        return pickle.loads(data)  # written by our own steps to the deployment's database


def step_output_io_manager() -> StepOutputIOManager:
    """The IO manager of our Definitions: the database URL as an ``EnvVar`` when it is set, else resolved
    where the step runs (never the loading process's path)."""
    url = os.environ.get("CONNECTOR_OPS_DATABASE_URL")
    return StepOutputIOManager(database_url=dg.EnvVar("CONNECTOR_OPS_DATABASE_URL") if url else None)
