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

from connector_ops.kernel.errors import ConnectorError
from connector_ops.ops.factory import error_of_failed_step
from connector_ops.pipelines.dsl import CompiledPipeline

QUIET_LOGGERS = {"console": {"config": {"log_level": "CRITICAL"}}}  # we report failures ourselves


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


def step_of(compiled: CompiledPipeline, step_key: str) -> str:
    """The YAML step that owns a Dagster step: its helpers are ``<id>__input``, ``<id>__batches``, …,
    and mapped copies ``<node>[key]``."""
    base = step_key.split("[", 1)[0]
    ids = {step.id for step in compiled.pipeline.steps}
    owner = base if base in ids else base.rsplit("__", 1)[0]
    return owner if owner in ids else base


def _failure(compiled: CompiledPipeline,
             result: dg.ExecuteInProcessResult) -> tuple[str | None, ConnectorError | None]:
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            return step_of(compiled, event.step_key or ""), error_of_failed_step(event)
    return None, None


def run_job(job: dg.JobDefinition, resources: Mapping[str, Any], *, verbose: bool = False,
            instance: dg.DagsterInstance | None = None) -> dg.ExecuteInProcessResult:
    """Run any job in this process, keeping its default config, without Dagster's console log unless
    ``verbose``. A failed step does not raise (see ``result.success``); a definition problem does."""
    if instance is None and os.environ.get("DAGSTER_HOME"):
        instance = dg.DagsterInstance.get()
    options: dict[str, Any] = {"resources": dict(resources), "raise_on_error": False, "instance": instance}
    if verbose:
        return job.execute_in_process(**options)
    try:
        return job.execute_in_process(run_config={**(job.run_config or {}), "loggers": QUIET_LOGGERS}, **options)
    except dg.DagsterInvalidConfigError:  # a job whose config mapping has no place for loggers
        return job.execute_in_process(**options)


def run_compiled(compiled: CompiledPipeline, resources: Mapping[str, Any], *, verbose: bool = False,
                 instance: dg.DagsterInstance | None = None) -> RunOutcome:
    """Execute the job in this process with ``resources``; never raises for a failed step."""
    result = run_job(compiled.job, resources, verbose=verbose, instance=instance)
    step, error = (None, None) if result.success else _failure(compiled, result)
    return RunOutcome(result.success, result.run_id, step_outputs(compiled, result), error, step)
