"""The drive-folder sensor: start a pipeline once for every new file that appears in a drive folder.

The cursor holds the ids of the files already seen (pruned to the ones still in the folder, so it
stays as small as the folder); each run request also carries ``run_key = <folder>/<file id>``, so even
a lost cursor update cannot start a second run for the same file. Files present when the sensor is
first turned on count as new: nothing dropped into the folder earlier is silently skipped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import dagster as dg

from connector_ops.kernel.errors import ConnectorError
from connector_ops.pipelines.dsl import references as r
from connector_ops.pipelines.dsl.model import Trigger
from connector_ops.registry import get_action, run_action

LIST_ACTION = "drive.list"


def new_files(listing: list[dict], cursor: str | None) -> tuple[list[dict], str]:
    """The files of ``listing`` not in ``cursor``, and the next cursor (ids still present, sorted)."""
    seen = set(json.loads(cursor)) if cursor else set()
    files = [item for item in listing if item.get("type") == "file"]
    fresh = [item for item in files if item["id"] not in seen]
    return fresh, json.dumps(sorted(item["id"] for item in files))


def with_defaults(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` deep-merged over ``defaults`` (Dagster replaces, not merges, a job's default config)."""
    merged = dict(defaults)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = with_defaults(merged[key], value)
        else:
            merged[key] = value
    return merged


def drive_folder_sensor(job: dg.JobDefinition, trigger: Trigger, *, trigger_node: str,
                        default_config: Mapping[str, Any] | None = None) -> dg.SensorDefinition:
    """A sensor that lists ``trigger.folder_id`` with the ``drive.list`` action and starts ``job``."""

    @dg.sensor(
        name=f"{job.name}_on_new_file",
        job=job,
        minimum_interval_seconds=trigger.minimum_interval_seconds,
        required_resource_keys={"drive"},
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Starts {job.name} for each new file in a drive folder",
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        spec = get_action(LIST_ACTION)
        folder = str(r.resolve(trigger.folder_id, r.Scope(environ=os.environ)))
        try:
            out = run_action(spec, {"folderId": folder}, {k: getattr(context.resources, k) for k in spec.resource_keys})
        except ConnectorError as exc:
            return dg.SkipReason(exc.summary())
        fresh, cursor = new_files(out["content"], context.cursor)
        if not fresh:
            return dg.SkipReason(f"no new file in drive folder {folder}")
        requests = [
            dg.RunRequest(
                run_key=f"{folder}/{item['id']}",
                run_config=with_defaults(default_config or {}, {"ops": {trigger_node: {"config": {
                    "fileId": item["id"], "name": item["name"], "folderId": folder}}}}),
                tags={"drive/file_id": item["id"], "drive/folder_id": str(folder)},
            )
            for item in fresh
        ]
        return dg.SensorResult(run_requests=requests, cursor=cursor)

    return _sensor
