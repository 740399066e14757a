"""Where the drive-folder sensor keeps the files it has seen: Dagster's key-value store, not its cursor.

The cursor held every file still in the folder (id and version), and Dagster copies a sensor's cursor into
every tick it stores — skipped ones too, kept for days, successful ones for good. ``drive_inbox`` never
removes the files it converted, so a year of one file every 15 minutes (35,040 files) made a 2.4 MiB cursor
and 7 GiB a day of ticks. A high-water mark on ``modifiedTime`` would be small but wrong: a file moved or
copied into the folder (or uploaded by a client that sets it) keeps an older ``modifiedTime``, and a local
file moved in keeps its ``mtime``. So the seen files go to the instance's key-value store (its run storage:
SQLite or PostgreSQL, wherever the sensor runs), in one row rewritten only when they change, and the cursor
is a small token naming which row holds them and what it must contain::

    {"generation": 12, "digest": "3f…", "files": 35040}

Two rows per sensor, by the generation's parity: a tick reading generation ``g`` writes ``g + 1`` in the
other row and returns its token. If Dagster never stores that cursor (the tick failed, the daemon died), the
next tick reads ``g`` again, still whole, and asks again for the same changes — the same run keys, which the
daemon does not start twice, as with the cursor itself before. A row that does not hold what the token
names (the store wiped, a cursor set by hand, a "Test sensor" in the UI racing a tick) is a first start:
every file counts as new and the run keys of the files already run keep them from running again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import dagster as dg

#: the key-value store's key of a sensor's seen files, one per generation parity; ``sensor`` is
#: :func:`sensor_key` (one instance serves several code locations, which may each have a sensor of the name)
KEY = "connector_ops/drive_sensor/{sensor}/{slot}"

Seen = dict[str, str | None]  # file id -> its version (None: seen by a release that did not record it)


@dataclass(frozen=True)
class Token:
    """What the cursor holds: the generation of the seen files, and their digest."""

    generation: int
    digest: str
    files: int

    def dumps(self) -> str:
        return json.dumps({"generation": self.generation, "digest": self.digest, "files": self.files})


def read_cursor(cursor: str | None) -> Token | Seen:
    """The cursor's token, or the seen files an earlier release kept in the cursor itself (a map of ids to
    versions, or, earlier still, a list of ids: "seen, version unknown"); ``{}`` for none."""
    value = json.loads(cursor) if cursor else {}
    if isinstance(value, list):
        return dict.fromkeys(value)
    if isinstance(value.get("generation"), int) and isinstance(value.get("digest"), str):
        return Token(value["generation"], value["digest"], int(value.get("files", 0)))
    return value


def sensor_key(context: dg.SensorEvaluationContext, sensor: str) -> str:
    """Who the seen files are of: the sensor in its code location and repository, as Dagster keeps a cursor
    (a staging and a production location of one instance with a pipeline of the same name would otherwise
    each find the other's files in the row, and count every file as new at every tick)."""
    origin = context.code_location_origin
    location = getattr(origin, "location_name", None)
    return "/".join(part for part in (location, context.repository_name, sensor) if part)


def instance_of(context: dg.SensorEvaluationContext) -> dg.DagsterInstance | None:
    """The context's instance, or ``None`` for one built without any (``dg.build_sensor_context()`` in a
    user's unit test): the seen files are then kept in the cursor itself, as before this module."""
    try:
        return context.instance
    except dg.DagsterInvariantViolationError:
        return None


def load(instance: dg.DagsterInstance | None, sensor: str, cursor: str | None) -> tuple[Seen, Token | None, bool]:
    """The files seen as of ``cursor``, its token (``None``: a cursor of an earlier release, or none), and
    whether the row named by the token held them (``False``: a first start, see the module)."""
    read = read_cursor(cursor)
    if not isinstance(read, Token):
        return read, None, True
    if instance is None:  # a token, but no store to read it from
        return {}, read, False
    key = KEY.format(sensor=sensor, slot=read.generation % 2)
    stored = instance.run_storage.get_cursor_values({key}).get(key)
    row = json.loads(stored) if stored else {}
    if row.get("generation") != read.generation or row.get("digest") != read.digest:
        return {}, read, False
    return row["files"], read, True


def save(instance: dg.DagsterInstance | None, sensor: str, after: Token | None, seen: Seen) -> str:
    """Store ``seen`` as the generation after ``after``, in the row the tick did not read; its cursor. With no
    instance, the cursor is the seen files themselves."""
    if instance is None:
        return json.dumps(seen, sort_keys=True)
    generation = (after.generation if after is not None else 0) + 1
    files = json.dumps(seen, sort_keys=True)
    token = Token(generation, hashlib.sha256(files.encode()).hexdigest()[:32], len(seen))
    row = f'{{"generation": {generation}, "digest": "{token.digest}", "files": {files}}}'
    instance.run_storage.set_cursor_values({KEY.format(sensor=sensor, slot=generation % 2): row})
    return token.dumps()
