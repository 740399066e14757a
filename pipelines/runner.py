"""Run a compiled pipeline in process and read back what each step produced.

Used by ``connector-ops pipeline run`` and the tests. Runs go to the persistent instance when
``DAGSTER_HOME`` is set (they then show in the UI), else to an ephemeral one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg

from connector_ops.errors import ConnectorError
from connector_ops.op_factory import error_of_failed_step
from pipelines.dsl import CompiledPipeline

QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class RunOutcome:
    success: bool
    run_id: str
    outputs: dict[str, Any]  # step id -> {output field: value} (bare outputs as the value itself)
    error: ConnectorError | None = None
    failed_step: str | None = None


def step_outputs(compiled: CompiledPipeline, result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    """The outputs of every step that succeeded, by spec field names."""
    outputs: dict[str, Any] = {}
    for step_id, (node, names) in compiled.outputs.items():
        try:
            values = {field: result.output_for_node(node, out) for field, out in names.items()}
        except Exception:  # the step did not run (an upstream step failed)
            continue
        outputs[step_id] = values.get("", values)
    return outputs


def _failure(result: dg.ExecuteInProcessResult) -> tuple[str | None, ConnectorError | None]:
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            return (event.step_key or "").split("[", 1)[0], error_of_failed_step(event)
    return None, None


def run_compiled(compiled: CompiledPipeline, resources: Mapping[str, Any], *, verbose: bool = False,
                 instance: dg.DagsterInstance | None = None) -> RunOutcome:
    """Execute the job in this process with ``resources``; never raises for a failed step."""
    if instance is None and os.environ.get("DAGSTER_HOME"):
        instance = dg.DagsterInstance.get()
    result = compiled.job.execute_in_process(
        resources=dict(resources), instance=instance, raise_on_error=False,
        run_config=None if verbose else QUIET_LOGS,
    )
    step, error = (None, None) if result.success else _failure(result)
    return RunOutcome(result.success, result.run_id, step_outputs(compiled, result), error, step)
