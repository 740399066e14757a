"""The drive-folder sensor: start a pipeline once for every new or modified file in a drive folder.

The sensor remembers the version of each file already seen (Google: the MD5 of its content, or its
modifiedTime for native documents; local drive: modification time and size), pruned to the files still in
the folder — in Dagster's key-value store, the cursor holding only a small token (:mod:`.sensor_state`:
Dagster copies the cursor into every tick, and the folder grows with every file dropped in it). A file is
*new* when its id was not seen and *modified* when its version differs. Each run request carries
``run_key = <folder>/<file id>@<revision>``,
the file's change counter (Google: its ``version``; local drive: a counter in its row), which grows with
every change and never repeats. Dagster's daemon drops a request whose run key already has a run, so the
key must be new for every change the sensor counts: a file that leaves the folder and comes back (pruned
from the seen files, so *new* again) or whose content goes back to an earlier MD5 gets a revision never used
before, while a lost cursor update repeats the same revision and cannot start a second run for the same
change. Files present when the sensor is first turned on count as new:
nothing dropped into the folder earlier is silently skipped. A tick that finds nothing new, changed or gone
keeps its cursor and writes nothing. A cursor of an earlier release (a map of ids to versions, or a list of
ids: "seen, version unknown") is read as the files seen; those of a list start runs only once they change.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg

from connector_ops.kernel.errors import InvalidInput
from connector_ops.pipelines import sensor_state
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


def changed_files(listing: list[DriveItem], seen: sensor_state.Seen) -> tuple[list[Change], sensor_state.Seen]:
    """The files of ``listing`` that are new or modified since ``seen`` (id -> version), and those to see
    next: the folder's files and their versions."""
    files = [item for item in listing if item.type == "file"]
    changes = [Change(item, item.id in seen) for item in files
               if item.id not in seen or seen[item.id] not in (None, item.version)]
    return changes, {item.id: item.version for item in sorted(files, key=lambda i: i.id)}


def with_defaults(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` deep-merged over ``defaults`` (Dagster replaces, not merges, a job's default config)."""
    merged = dict(defaults)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = with_defaults(merged[key], value)
        else:
            merged[key] = value
    return merged


def watched_folder(folder_id: Any, environ: Mapping[str, str]) -> str:
    """The drive folder ``on_new_file.folderId`` names now, its ``${env.…}`` read as text; ``InvalidInput`` when
    there is none. An empty id is refused, not listed: the drive lists its *root* for it, and the sensor would
    start a run for every unrelated file of the whole drive (``INBOX=`` left blank in an env file). The loader
    refuses a literal empty id; this covers a variable that is empty when the tick runs."""
    if not isinstance(folder_id, str):
        raise InvalidInput("", f"{folder_id!r} is not a drive folder id")
    folder = r.resolve_text(folder_id, r.Scope(environ=environ))
    if not folder.strip():
        refs = sum(isinstance(part, r.Ref) for part in r.parse_template(folder_id))
        what = ("is empty (the variable is set but empty): set it to" if refs == 1 else
                "is empty (its variables are set but empty): set them to" if refs else "is empty: write")
        raise InvalidInput(folder_id, f"{what} the drive folder to watch; an empty id would watch the drive's root, "
                                      "a run for every file there")
    return folder


def drive_folder_sensor(job: dg.JobDefinition, trigger: Trigger, *, trigger_node: str,
                        default_config: Mapping[str, Any] | None = None) -> dg.SensorDefinition:
    """A sensor that lists ``trigger.folder_id`` with the drive resource and starts ``job`` per change."""

    name = f"{job.name}_on_new_file"

    @dg.sensor(
        name=name,
        job=job,
        minimum_interval_seconds=trigger.minimum_interval_seconds,
        required_resource_keys={"drive"},
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Starts {job.name} for each new or modified file in a drive folder",
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        try:  # read at each tick: an unset ${env.X} skips it, like a listing error, until the variable is set
            folder = watched_folder(trigger.folder_id, os.environ)
        except InvalidInput as exc:
            return dg.SkipReason(f"on_new_file.folderId: {exc}")
        try:  # the resource, not the drive.list action: the spec's List output carries no version
            listing = context.resources.drive.list_folder(folder)
        except Exception as exc:  # reported like an action's failure: one line, the tick skipped
            return dg.SkipReason(error_for(get_action(LIST_ACTION), exc).summary())
        instance, key = sensor_state.instance_of(context), sensor_state.sensor_key(context, name)
        seen, token, whole = sensor_state.load(instance, key, context.cursor)
        if not whole:
            context.log.warning(f"the files seen by {name} are not stored as its cursor says ({context.cursor}): "
                                "every file of the folder counts as new; those already run are not run again")
        changes, now_seen = changed_files(listing, seen)
        cursor = context.cursor if token is not None and whole and now_seen == seen else sensor_state.save(
            instance, key, token, now_seen)  # stored again only when versions or files changed
        if not changes:
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
