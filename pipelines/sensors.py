"""The drive-folder sensor: start a pipeline once for every new or modified file in a drive folder.

The cursor maps the id of each file already seen to its version (Google: the MD5 of its content, or its
modifiedTime for native documents; local drive: modification time and size), pruned to the files still in
the folder, so it stays as small as the folder. A file is *new* when its id is not in the cursor and
*modified* when its version differs. Each run request carries ``run_key = <folder>/<file id>@<revision>``,
the file's change counter (Google: its ``version``; local drive: a counter in its row), which grows with
every change and never repeats. Dagster's daemon drops a request whose run key already has a run, so the
key must be new for every change the sensor counts: a file that leaves the folder and comes back (pruned
from the cursor, so *new* again) or whose content goes back to an earlier MD5 gets a revision never used
before, while a lost cursor update repeats the same revision and cannot start a second run for the same
change. Files present when the sensor is first turned on count as new:
nothing dropped into the folder earlier is silently skipped. A cursor of an earlier release (a list of
ids) is read as "seen, version unknown": those files start runs only once they change after the upgrade.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg

from connector_ops.kernel.errors import InvalidInput
from connector_ops.pipelines.dsl import references as r
from connector_ops.pipelines.dsl.model import Trigger
from connector_ops.registry import error_for, get_action
from connector_ops.resources.drive.base import DriveItem

LIST_ACTION = "drive.list"


@dataclass(frozen=True)
class Change:
    """A file the sensor starts a run for: new (``modified`` false) or with new content."""

    item: DriveItem
    modified: bool

    def run_key(self, folder: str) -> str:
        return f"{folder}/{self.item.id}@{self.item.revision}"


def changed_files(listing: list[DriveItem], cursor: str | None) -> tuple[list[Change], str]:
    """The files of ``listing`` that are new or modified since ``cursor``, and the next cursor."""
    seen = _read_cursor(cursor)
    files = [item for item in listing if item.type == "file"]
    changes = [Change(item, item.id in seen) for item in files
               if item.id not in seen or seen[item.id] not in (None, item.version)]
    return changes, json.dumps({item.id: item.version for item in sorted(files, key=lambda i: i.id)})


def _read_cursor(cursor: str | None) -> dict[str, str | None]:
    value = json.loads(cursor) if cursor else {}
    if isinstance(value, list):  # an earlier release's cursor: ids only
        return dict.fromkeys(value)
    return value


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
    """A sensor that lists ``trigger.folder_id`` with the drive resource and starts ``job`` per change."""

    @dg.sensor(
        name=f"{job.name}_on_new_file",
        job=job,
        minimum_interval_seconds=trigger.minimum_interval_seconds,
        required_resource_keys={"drive"},
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Starts {job.name} for each new or modified file in a drive folder",
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        try:  # read at each tick: an unset ${env.X} skips it, like a listing error, until the variable is set
            folder = str(r.resolve(trigger.folder_id, r.Scope(environ=os.environ)))
        except InvalidInput as exc:
            return dg.SkipReason(f"on_new_file.folderId: {exc}")
        try:  # the resource, not the drive.list action: the spec's List output carries no version
            listing = context.resources.drive.list_folder(folder)
        except Exception as exc:  # reported like an action's failure: one line, the tick skipped
            return dg.SkipReason(error_for(get_action(LIST_ACTION), exc).summary())
        changes, cursor = changed_files(listing, context.cursor)
        if not changes:  # the cursor still moves: versions recorded, removed files pruned
            return dg.SensorResult(skip_reason=f"no new or modified file in drive folder {folder}", cursor=cursor)
        requests = [
            dg.RunRequest(
                run_key=change.run_key(folder),
                run_config=with_defaults(default_config or {}, {"ops": {trigger_node: {"config": {
                    "fileId": change.item.id, "name": change.item.name, "folderId": folder}}}}),
                tags={"drive/file_id": change.item.id, "drive/folder_id": folder,
                      "drive/change": "modified" if change.modified else "new"},
            )
            for change in changes
        ]
        return dg.SensorResult(run_requests=requests, cursor=cursor)

    return _sensor
