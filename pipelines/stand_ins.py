"""Stand-ins for the schedule and drive-folder sensor of a pipeline file that did not load.

Dagster keeps a schedule's or sensor's running state in the instance by name. When a scheduled pipeline's file
breaks and the code location reloads, its schedule is gone: the daemon's ticks said only ``Could not find
schedule 'x_schedule'``, and nothing told the person who turned it on what broke. So a broken file whose YAML
still names itself and has ``schedule:`` (or ``on_new_file:``) keeps a schedule (sensor) of the same name whose
every tick skips with the file's located problems. It targets ``broken_pipelines`` (a schedule needs a job) and
never runs it. Once the file is fixed and the location reloaded, the real one is back under that name, still
running if it was. A file whose name cannot be read (not YAML, no valid ``name``) has no stand-in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from connector_ops.pipelines.dsl import Problem
from connector_ops.pipelines.dsl.cron import schedule_definition, valid_cron
from connector_ops.pipelines.dsl.names import NAME
from connector_ops.pipelines.dsl.source import SourceError, parse_yaml
from connector_ops.pipelines.dsl.validate import iana_time_zones

#: the cron of a stand-in whose file's own ``schedule`` is not a valid cron string: hourly, so the reason shows
FALLBACK_CRON = "0 * * * *"
_NAME = re.compile(NAME)


def stand_ins(problems: Sequence[Problem], job: dg.JobDefinition, taken: Iterable[str]
              ) -> tuple[list[dg.ScheduleDefinition], list[dg.SensorDefinition]]:
    """The stand-in schedules and sensors of the files of ``problems`` (``job``: their target), leaving out any
    name in ``taken`` (a loaded pipeline's; two broken files of one name: the first)."""
    used = set(taken)
    schedules: list[dg.ScheduleDefinition] = []
    sensors: list[dg.SensorDefinition] = []
    by_file: dict[str, list[Problem]] = {}
    for problem in problems:
        by_file.setdefault(problem.file, []).append(problem)
    for file, its in by_file.items():
        data = _raw(file)
        name = data.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            continue
        why = f"pipeline file {file} did not load: fix it, then reload the code location\n" + "\n".join(map(str, its))
        if "schedule" in data and (schedule := f"{name}_schedule") not in used:
            used.add(schedule)
            schedules.append(_schedule(schedule, data, job, why))
        if "on_new_file" in data and (sensor := f"{name}_on_new_file") not in used:
            used.add(sensor)
            sensors.append(dg.SensorDefinition(
                name=sensor, job=job, evaluation_fn=lambda _context, why=why: dg.SkipReason(why),
                default_status=dg.DefaultSensorStatus.STOPPED,
                description=f"Stand-in: {file} did not load; each tick skips saying why"))
    return schedules, sensors


def _schedule(name: str, data: Mapping[str, Any], job: dg.JobDefinition, why: str) -> dg.ScheduleDefinition:
    cron, timezone = data.get("schedule"), data.get("timezone")
    return schedule_definition(
        name=name, job=job, cron_schedule=cron if isinstance(cron, str) and valid_cron(cron) else FALLBACK_CRON,
        execution_timezone=timezone if isinstance(timezone, str) and timezone in iana_time_zones() else None,
        execution_fn=lambda _context: dg.SkipReason(why), default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Stand-in: the pipeline file did not load; each tick skips saying why\n{why}")


def _raw(file: str) -> Mapping[str, Any]:
    """The top-level values of a file that did not load, as far as they can be read (else empty)."""
    try:
        data = parse_yaml(Path(file).read_text(encoding="utf-8"), file).data
    except (OSError, UnicodeDecodeError, SourceError):
        return {}
    return data if isinstance(data, Mapping) else {}
