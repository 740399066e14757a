"""The few ops the compiler adds around the action ops: reference resolvers, fan-in, the trigger.

* resolver (``<step>__input``): receives exactly the upstream outputs a step's ``${…}`` references
  need, resolves its input template at run time and hands the finished fields to the action op's
  ``fields`` input. ``${env.…}`` values are handed over by name (:class:`.references.EnvFields`), read by
  the action op where it runs: they never enter run config, nor the stored step outputs;
* gather (``<step>__gather``): collects the per-batch outputs of a ``foreach`` step into lists;
* trigger (``trigger``): the drive file that started the run (run config, set by the sensor).
"""


import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from connector_ops.kernel.errors import ConnectorError, InvalidInput, NotFound
from connector_ops.ops.factory import STALE_DEFINITION_STATUS, ensure_launched_definition, failing_as, failure
from connector_ops.ops.metadata import STORED_PLATFORM_FILES, output_metadata
from connector_ops.pipelines.dsl import references as r
from connector_ops.pipelines.dsl.local_files import referenced_paths

BATCH_INPUT, ROWS_INPUT, TRIGGER_INPUT = "batch", "batch_rows", "trigger"


def upstream_input(step_id: str, out_name: str) -> str:
    return f"{step_id}__{out_name}"


def resolver_op(
    name: str,
    template: Any,
    steps: Mapping[str, Mapping[str, str]],
    *,
    action: str,
    base_dir: str,
    files: Mapping[str, str],
    batch: bool = False,
    rows: bool = False,
    trigger: bool = False,
    defer_env: bool = True,
) -> dg.OpDefinition:
    """An op resolving ``template`` from the outputs of ``steps`` (step id -> {spec field: op output}).

    ``defer_env``: hand ``${env.…}`` values over by name, for an action op's ``fields``; ``False`` for a
    value wired into a typed input (a ``foreach``'s virtual file id, which is no secret).

    ``files``: the content digests of the pipeline's ``${file:path}`` files as its process loaded them (the
    pipeline's digest covers them): a file changed since is refused with a 409, like a step of another version
    of the pipeline than its run's, never stored and run in its new content."""
    inputs: dict[str, tuple[str, str]] = {}
    for step_id, fields in steps.items():
        for field, out_name in fields.items():
            inputs[upstream_input(step_id, out_name)] = (step_id, field)
    paths = referenced_paths([template])

    def compute(context: dg.OpExecutionContext, values: dict[str, Any]) -> Iterator[dg.Output]:
        with failing_as(action):  # storing a ${file:…} meets the disk guard, an unwritable home: their words
            yield from resolve(context, values)

    def resolve(context: dg.OpExecutionContext, values: dict[str, Any]) -> Iterator[dg.Output]:
        ensure_launched_definition(context)
        outputs: dict[str, Any] = {}
        for input_name, (step_id, field) in inputs.items():
            if field:
                outputs.setdefault(step_id, {})[field] = values[input_name]
            else:
                outputs[step_id] = values[input_name]  # a bare output ("ok", null, {})
        scope = r.Scope(steps=outputs, environ=os.environ, trigger=values.get(TRIGGER_INPUT))
        if batch:
            descriptor = values[BATCH_INPUT]
            scope.batch = {"index": descriptor["index"], "virtualFileId": descriptor["virtualFileId"],
                           "rows": values.get(ROWS_INPUT)}
        stored: list[str] = []
        if paths:
            store = context.resources.platform_files

            def add_file(rel: str, options: Mapping[str, Any]) -> dict[str, Any]:
                descriptor = store.add_file(Path(base_dir) / rel, name=options.get("name"),
                                            content_type=options.get("contentType"),
                                            verify=unchanged_file_check(context, files, base_dir, rel))
                stored.append(descriptor.id)
                return descriptor.to_json()

            scope.add_file = add_file
        try:
            value = (r.resolve_deferring_env if defer_env else r.resolve)(template, scope)
        except (InvalidInput, NotFound) as exc:
            raise failure(ConnectorError(exc.status, {"message": str(exc)}, action=action)) from None
        # what this step stored, named where gc looks: a run killed before its action step read the file, then
        # re-executed from failure, reads it from this output
        yield dg.Output(value, "result", metadata={STORED_PLATFORM_FILES: dg.MetadataValue.json(stored)} if stored
                        else None)

    ins = {input_name: dg.In(dg.Any) for input_name in inputs}
    if batch:
        ins[BATCH_INPUT] = dg.In(dg.Any)
    if rows:
        ins[ROWS_INPUT] = dg.In(dg.Any)
    if trigger:
        ins[TRIGGER_INPUT] = dg.In(dg.Any)
    return dg.OpDefinition(
        name=name,
        compute_fn=compute,
        ins=ins,
        outs={"result": dg.Out(dg.Any, description="the resolved input fields")},
        required_resource_keys={"platform_files"} if paths else set(),
        description=f"Resolve the `${{…}}` references of a `{action}` step's input.",
        tags={"kind": "pipeline-resolver"},
    )


def unchanged_file_check(context: dg.OpExecutionContext, files: Mapping[str, str], base_dir: str,
                         rel: str) -> Callable[[str], None] | None:
    """What fails the step (409, never retried) when the ``${file:…}`` file ``rel`` it stores, hashed as it is
    copied, is not the content its process loaded with the pipeline: that process's digest matched the run's
    (:func:`ensure_launched_definition`), so that content is the one the run was launched with. ``None`` for
    a file that was not readable then (its step says so, or stores what is there now)."""
    loaded = files.get(rel)
    if loaded is None:
        return None

    def check(copied: str) -> None:
        if copied == loaded:
            return
        message = (f"{Path(base_dir) / rel} (a ${{file:…}} of the pipeline) changed since the run was launched: the "
                   f"run is of its earlier content, and step {context.op_handle} would store the new one in its "
                   "place. Reload the code location (and restart the processes that run steps, see "
                   "docs/deployment.md), then launch the run again to run the file as it is now.")
        raise failure(ConnectorError(STALE_DEFINITION_STATUS, {"message": message},
                                     action=f"pipeline {context.job_name}"))
    return check


def gather_op(name: str, out_names: list[str]) -> dg.OpDefinition:
    """Fan-in of a foreach step: each output becomes the list of its per-batch values (batch order)."""

    def compute(context: dg.OpExecutionContext, values: dict[str, Any]) -> Iterator[dg.Output]:
        with failing_as(f"pipeline {context.job_name}"):
            ensure_launched_definition(context)
        for out_name in out_names:
            value = list(values[out_name])
            yield dg.Output(value, out_name, metadata=output_metadata("", value, {}))

    return dg.OpDefinition(
        name=name,
        compute_fn=compute,
        ins={n: dg.In(dg.Any) for n in out_names},
        outs={n: dg.Out(dg.Any, description="one value per batch") for n in out_names},
        description="Collect the per-batch outputs of a foreach step.",
        tags={"kind": "pipeline-gather"},
    )


class TriggerConfig(dg.Config):
    """The drive file that started the run (set by the pipeline's sensor; editable in the launchpad)."""

    fileId: str = ""
    name: str = ""
    folderId: str = ""


@dg.op(tags={"kind": "pipeline-trigger"})
def pipeline_trigger(context: dg.OpExecutionContext, config: TriggerConfig) -> dict:
    """The new drive file the run is about: ``${trigger.fileId}``, ``${trigger.name}``, ``${trigger.folderId}``.

    A run launched by hand without a file id is a 400 saying where to set it, here, before the first step reads
    the empty id (that said only ``fileId: String should have at least 1 character``)."""
    with failing_as(f"pipeline {context.job_name}"):
        ensure_launched_definition(context)
    if not config.fileId.strip():
        raise failure(ConnectorError(400, {"message": (
            f"trigger.fileId is empty: a run of {context.job_name} is about one drive file, which its sensor "
            f"{context.job_name}_on_new_file sets; to launch it by hand, set ops.{context.op_handle}.config.fileId "
            "(a drive file id) in the launchpad")}, action=f"pipeline {context.job_name}"))
    return {"fileId": config.fileId, "name": config.name, "folderId": config.folderId}
