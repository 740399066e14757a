"""Garbage collection of the stores: ``connector-ops gc [--older-than 7d] [--dry-run]``.

Every pipeline run makes virtual files and platform files (a Push, a Pull, a Validate's two outputs …),
and nothing removed them: a daily ``sales_report`` grew the stores by 6 tables and 12 files a day. A file
is kept when something may still read it, and removed otherwise:

* **recent**: it was made after the cutoff (``now - older_than``) — a notebook or a run may be using it;
* **an asset's data**: the latest materialisation of any asset records it (``virtual_file_id`` /
  ``platform_file`` metadata), so downstream assets and the UI still find it;
* **a recent run refers to it**: a run created after the cutoff, or one not finished, or an ancestor of
  either (a re-execution reads what its parent's and root's steps made), named it in its run config, its
  outputs' metadata (``virtual_file_id`` / ``platform_file_id``, which our ops record) or its asset checks'
  results (the rejected rows and their CSV);
* **a job's latest successful run produced or read it**: the products of the last good run of every job
  (the report a schedule made last night) and its inputs (the reference table it reads each night, however
  given: each step records what it read, :func:`connector_ops.ops.metadata.read_metadata`) stay until a
  newer run of that job succeeds;
* **a run it must keep may have read it, and did not say what it read**: steps of connector-ops before the
  ``reads_recorded`` marker (:data:`~connector_ops.ops.metadata.READS_RECORDED`) recorded no reads, or not
  surely. When such a run is one of the above (a job's latest successful run, a recent run), gc cannot rule
  out any file made before it ended, so it keeps them all (:class:`UnweighedRun`, named in its output) until
  the job has a newer successful run — run each job once after an upgrade — or the run is no longer recent.

An inline array's Iterate position (the one the store keeps per array content until its last batch) goes
once it has not moved since the cutoff: nothing else refers to it, and the next Iterate over that array
starts again at its first item, as after its last batch.

Step outputs kept in the database by our IO manager (:mod:`connector_ops.ops.io_manager`) go with their run:
a run's outputs are removed once its newest output is older than the cutoff and the run is neither recent
nor an ancestor of a recent run (:func:`recent_runs`; a run unknown to the instance is not recent);
re-executing such a run starts from its first step.

References come from the Dagster instance (``DAGSTER_HOME``). Without one, runs leave no history, so only
age protects a file; the CLI says so. Removal uses the stores' own ``drop``/``delete`` (a virtual file is
removed in one transaction; a platform file's descriptor and bytes together). Last, a SQLite database gives
back the disk space of what was dropped, when it is a good share of the file (:mod:`…virtual_files.compaction`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import sqlalchemy as sa
from dagster._core.storage.runs.schema import RunsTable
from dagster._core.storage.runs.sql_run_storage import SqlRunStorage

from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.leaves import leaves
from connector_ops.ops.metadata import (
    READ_PLATFORM_FILES,
    READ_VIRTUAL_FILES,
    READS_RECORDED,
    STORED_PLATFORM_FILES,
)
from connector_ops.pipelines.gc_unused import UnusedStore
from connector_ops.resources.virtual_files.compaction import Compaction

#: metadata keys whose values name a virtual file or platform file
REFERENCE_KEYS = ("virtual_file_id", "platform_file", "platform_file_id", "rejects_file_id",
                  # what a step read, however its input was given (a job's default config, ${env.…})
                  READ_VIRTUAL_FILES, READ_PLATFORM_FILES, STORED_PLATFORM_FILES,
                  # an asset check's (connector_ops.ops.checks): its rejected rows stay one click away
                  "rejects_virtual_file_id", "validated_virtual_file_id", "rejects_platform_file_id")
_FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
_UNFINISHED = [status for status in dg.DagsterRunStatus if status not in _FINISHED]
_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)  # a cutoff before this is "every run" (a second less would not be a date)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
#: what an action step's events carried in every connector-ops version gc may meet (since 2026-11-23): an
#: output's or materialisation's ``duration_s`` (``run_metadata``), a failure's ``status`` and ``body``
_ACTION_OUTPUT_KEY, _ACTION_FAILURE_KEYS = "duration_s", ("status", "body")


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``12h``, ``7d``, ``2w`` -> a ``timedelta`` (``InvalidInput`` naming the option)."""
    match = _DURATION.fullmatch(text or "")
    if match is None:
        raise InvalidInput("--older-than", f"{text!r} is not a duration; write a number and a unit s, m, h, d or "
                                           "w (e.g. 7d, 12h, 0s)")
    try:
        duration = timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
        datetime.now(UTC) - duration  # the cutoff must be a date
    except OverflowError:
        raise InvalidInput("--older-than", f"{text!r} is too long: the cutoff would be before the year 1") from None
    return duration


@dataclass(frozen=True)
class UnweighedRun:
    """A run gc keeps the files of (a job's latest successful run, a recent run) whose action steps did not
    record what they read (a connector-ops version before :data:`READS_RECORDED`)."""

    job: str
    run_id: str
    ended: datetime | None  # None: not finished
    #: files made before this may have been read by it: its end, or, unfinished, its start (its own outputs,
    #: made since, are named by its events) — not "everything": a run stuck STARTED since an upgrade would have
    #: kept every file for good, and running the job again would not have helped
    reads_until: datetime

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "runId": self.run_id,
                "endedAt": self.ended.isoformat() if self.ended is not None else None,
                "readsUntil": self.reads_until.isoformat()}


@dataclass
class References:
    """What gc keeps besides the recent: the ids (and links' last segments) something names, and the runs that
    may have read files without naming them."""

    strings: set[str] = field(default_factory=set)
    unweighed: list[UnweighedRun] = field(default_factory=list)

    @property
    def horizon(self) -> datetime | None:
        """Files made before this may have been read by an unweighed run (``None``: there is none)."""
        return max((run.reads_until for run in self.unweighed), default=None)

    def keeps(self, file_id: str, made: datetime) -> bool:
        horizon = self.horizon
        return file_id in self.strings or (horizon is not None and made < horizon)


@dataclass
class Collection:
    """What one garbage collection removed (or, in a dry run, would remove) and kept."""

    cutoff: datetime
    dry_run: bool
    virtual_files: list[str] = field(default_factory=list)
    platform_files: list[str] = field(default_factory=list)
    kept_virtual_files: int = 0
    kept_platform_files: int = 0
    step_output_runs: list[str] = field(default_factory=list)
    kept_step_output_runs: int = 0
    #: inline arrays' Iterate positions not moved since the cutoff, removed (would be), and those kept
    array_positions: int = 0
    kept_array_positions: int = 0
    history: bool = True
    stored: bool = True  # False: nothing was ever stored in either store (a new home, a new database)
    compaction: Compaction | None = None  # the disk space a SQLite database gave back (or would)
    unweighed_runs: list[UnweighedRun] = field(default_factory=list)  # their files kept whole (:class:`References`)
    #: the home's default stores the settings do not use, never weighed nor touched (:mod:`.gc_unused`)
    unused_stores: list[UnusedStore] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        compacted = None if self.compaction is None else {
            "bytesBefore": self.compaction.before, "bytesAfter": self.compaction.after, "busy": self.compaction.busy}
        return {"cutoff": self.cutoff.isoformat(), "dryRun": self.dry_run, "history": self.history,
                "stored": self.stored,
                "virtualFiles": {"removed": self.virtual_files, "kept": self.kept_virtual_files},
                "platformFiles": {"removed": self.platform_files, "kept": self.kept_platform_files},
                "stepOutputs": {"removedRuns": self.step_output_runs, "keptRuns": self.kept_step_output_runs},
                "arrayPositions": {"removed": self.array_positions, "kept": self.kept_array_positions},
                "compaction": compacted,
                "unweighedRuns": [run.to_json() for run in self.unweighed_runs],
                "unusedStores": [store.to_json() for store in self.unused_stores]}


def collect(virtual_files: Any, platform_files: Any, instance: dg.DagsterInstance | None, *,
            older_than: timedelta, dry_run: bool = False, now: datetime | None = None,
            step_outputs: Any = None) -> Collection:
    """Remove the virtual files, platform files and step outputs nothing refers to (see the module's rules)."""
    cutoff = (now or datetime.now(UTC)) - older_than
    result = Collection(cutoff=cutoff, dry_run=dry_run, history=instance is not None)
    # a store nothing was ever stored in has nothing to weigh; opening it would create it, a dry run too
    stored_virtual, stored_platform = virtual_files.stored(), platform_files.stored()
    result.stored = stored_virtual or stored_platform
    if not result.stored:  # nor is the run history read
        return result
    records = weighed_records(instance, cutoff) if instance is not None else []
    recent = recent_runs(records, cutoff)
    refs = referenced(instance, records, recent) if instance is not None else References()
    result.unweighed_runs = refs.unweighed
    unreferenced: list[tuple[str, datetime]] = []
    for vf_id, created in virtual_files.inventory() if stored_virtual else ():
        if created >= cutoff or refs.keeps(vf_id, created):
            result.kept_virtual_files += 1
            continue
        unreferenced.append((vf_id, created))
    # many per transaction; one removed meanwhile (a Clean) counts as removed, one written since stays. None
    # to remove: the store is not opened (a store never stored in would be created)
    listed = dry_run or not unreferenced
    gone = [vf_id for vf_id, _ in unreferenced] if listed else virtual_files.drop_unchanged(unreferenced)
    result.virtual_files += gone
    result.kept_virtual_files += len(unreferenced) - len(gone)
    for file_id, written in platform_files.inventory() if stored_platform else ():
        if written >= cutoff or refs.keeps(file_id, written):
            result.kept_platform_files += 1
            continue
        if not dry_run:
            platform_files.delete(file_id)
        result.platform_files.append(file_id)
    if not stored_virtual:  # step outputs live in its database too
        return result
    if step_outputs is not None:
        _collect_step_outputs(step_outputs, recent, result)
    # nothing refers to a position but its next Iterate: age alone decides
    result.array_positions, result.kept_array_positions = virtual_files.collect_array_positions(cutoff,
                                                                                               dry_run=dry_run)
    result.compaction = virtual_files.compact(dry_run=dry_run)  # last: what was removed is given back too
    return result


def deletable_runs(instance: dg.DagsterInstance, *, older_than: timedelta,
                   now: datetime | None = None) -> list[str]:
    """The ids of the runs that can be deleted from Dagster's history without changing what gc keeps: finished,
    created before ``now - older_than``, and none of what gc weighs — not a job's latest successful run, not an
    ancestor of a recent or unfinished run — nor the run of an asset's latest materialisation.

    Open-source Dagster keeps every run and its events for good, and deleting runs (the UI, ``dagster run
    delete``, a script) is how a deployment bounds its history; but gc knows what a job still needs only from
    its runs: deleting a job's latest successful run made gc remove the reference file its next run reads
    and the data of the assets it made. ``older_than`` at least gc's own ``--older-than``: a run recent to gc
    is then never one of these."""
    cutoff = (now or datetime.now(UTC)) - older_than
    keep = {record.dagster_run.run_id for record in weighed_records(instance, cutoff)}
    for key in instance.get_asset_keys():
        event = instance.get_latest_materialization_event(key)
        if event is not None:
            keep.add(event.run_id)
    old = instance.get_run_ids(dg.RunsFilter(created_before=cutoff.astimezone(UTC), statuses=list(_FINISHED)))
    return [run_id for run_id in old if run_id not in keep]


def _collect_step_outputs(step_outputs: Any, recent: set[str], result: Collection) -> None:
    for run_id, newest in step_outputs.runs():
        if newest >= result.cutoff or run_id in recent:
            result.kept_step_output_runs += 1
        else:
            result.step_output_runs.append(run_id)
    if not result.dry_run:
        step_outputs.delete_runs(result.step_output_runs)


def weighed_records(instance: dg.DagsterInstance, cutoff: datetime) -> list[dg.RunRecord]:
    """The run records gc weighs, newest first (as ``get_run_records`` orders them): the runs created since the
    cutoff, the unfinished, their ancestors and each job's latest successful run — the inputs of
    :func:`recent_runs` and :func:`referenced`, which ignore every other run.

    Reading the whole history instead cost a year-old deployment (50,000 runs) 10 s and 300 MiB on every gc,
    growing with each run. The other runs are never read: an ancestor is looked up by its id, a job's latest
    success by its job's name (``limit=1``). A run created before the cutoff and ended after it is not recent —
    its creation decides, as it always did (unfinished runs of any age are, through their status)."""
    records: dict[str, dg.RunRecord] = {}
    # ``created_after`` is strict and compares at the storage's precision: a second more, and the exact test below
    after = cutoff.astimezone(UTC) - timedelta(seconds=1) if cutoff > _EARLIEST else None
    for chosen in (dg.RunsFilter(created_after=after), dg.RunsFilter(statuses=_UNFINISHED)):
        for record in instance.get_run_records(chosen):
            if _is_recent(record, cutoff):
                records[record.dagster_run.run_id] = record
    own = list(records.values())
    _add_records(instance, records, {run.root_run_id for run in (r.dagster_run for r in own) if run.root_run_id})
    wanted = _parents(own)
    while wanted - records.keys():  # up each chain, a generation per query, to a run no longer stored
        asked = {run_id for run_id in wanted if run_id not in records}
        found = _add_records(instance, records, asked)
        wanted = _parents(found)
    for job in _succeeded_jobs(instance):
        latest = instance.get_run_records(dg.RunsFilter(job_name=job, statuses=[dg.DagsterRunStatus.SUCCESS]),
                                          limit=1)
        records.update((record.dagster_run.run_id, record) for record in latest)
    return sorted(records.values(), key=lambda record: record.storage_id, reverse=True)


def _parents(records: list[dg.RunRecord]) -> set[str]:
    """The ids of the runs ``records`` were re-executed from."""
    return {run.parent_run_id for run in (r.dagster_run for r in records) if run.parent_run_id is not None}


def _add_records(instance: dg.DagsterInstance, records: dict[str, dg.RunRecord],
                 run_ids: set[str]) -> list[dg.RunRecord]:
    """Read the runs of ``run_ids`` not in ``records`` yet into it; those found."""
    asked = sorted(run_id for run_id in run_ids if run_id not in records)
    found: list[dg.RunRecord] = []
    for start in range(0, len(asked), 500):  # a bound on the query's parameters
        found += instance.get_run_records(dg.RunsFilter(run_ids=asked[start:start + 500]))
    records.update((record.dagster_run.run_id, record) for record in found)
    return found


def _succeeded_jobs(instance: dg.DagsterInstance) -> list[str]:
    """The names of the jobs with a successful run stored, however old (a job since removed from the code
    too). Dagster has no call for it; its SQL run storage (SQLite, PostgreSQL) answers from its runs table.
    Another storage is read whole, as before."""
    storage = instance.run_storage
    success = dg.DagsterRunStatus.SUCCESS
    if isinstance(storage, SqlRunStorage):
        query = sa.select(RunsTable.c.pipeline_name).where(RunsTable.c.status == success.value).distinct()
        with storage.connect() as connection:
            return sorted(row[0] for row in connection.execute(query))
    return sorted({record.dagster_run.job_name for record in instance.get_run_records(dg.RunsFilter(
        statuses=[success]))})


def _is_recent(record: dg.RunRecord, cutoff: datetime) -> bool:
    """Created after the cutoff, or not finished (queued, starting, running …)."""
    return not (record.create_timestamp < cutoff and record.dagster_run.status in _FINISHED)


def recent_runs(records: Sequence[dg.RunRecord], cutoff: datetime) -> set[str]:
    """The ids of the runs whose files and step outputs are kept as recent: those created after the cutoff,
    those not finished (queued, starting, running …), and every ancestor of either (``parent_run_id`` up to
    ``root_run_id``).

    A re-execution reads the outputs of the steps it does not run, and so their files, from the run that
    produced them — its parent, or an older run up its chain. One created but not finished names none of
    them; one that failed recently may be re-executed from failure in turn, reading the same. Their whole
    chain stays, however old, as long as they are recent."""
    by_id = {record.dagster_run.run_id: record.dagster_run for record in records}
    recent: set[str] = set()
    for record in records:
        run = record.dagster_run
        if not _is_recent(record, cutoff):
            continue
        recent.add(run.run_id)
        ancestor: dg.DagsterRun | None = run
        while ancestor is not None and ancestor.parent_run_id and ancestor.parent_run_id not in recent:
            recent.add(ancestor.parent_run_id)
            ancestor = by_id.get(ancestor.parent_run_id)
        if run.root_run_id:
            recent.add(run.root_run_id)
    return recent


def referenced(instance: dg.DagsterInstance, records: Sequence[dg.RunRecord], recent: set[str]) -> References:
    """Every id (and the last path segment of every link or path) that an asset's latest materialisation,
    a recent run (:func:`recent_runs`) or a job's latest successful run names, and those of these runs that
    did not record what they read. ``records``: the run records gc weighs, newest first (:func:`weighed_records`;
    the whole history would give the same answer)."""
    strings: set[str] = set()
    unweighed: list[UnweighedRun] = []
    for key in instance.get_asset_keys():
        event = instance.get_latest_materialization_event(key)
        if event is not None and event.asset_materialization is not None:
            strings.update(_metadata_strings(event.asset_materialization.metadata))
    latest_success: set[str] = set()
    for record in records:  # newest first
        run = record.dagster_run
        first_success = run.status == dg.DagsterRunStatus.SUCCESS and run.job_name not in latest_success
        if first_success:
            latest_success.add(run.job_name)
        if run.run_id in recent or first_success:
            strings.update(_walk_strings(run.run_config))
            if _run_output_strings(instance, run.run_id, strings):
                unweighed.append(_unweighed(record))
    return References({*strings, *(s.rstrip("/").rsplit("/", 1)[-1] for s in strings)}, unweighed)


def _unweighed(record: dg.RunRecord) -> UnweighedRun:
    run = record.dagster_run
    if run.status in _FINISHED and record.end_time is not None:
        ended = datetime.fromtimestamp(record.end_time, UTC)
        return UnweighedRun(run.job_name, run.run_id, ended, ended)
    began = record.start_time if record.start_time is not None else record.create_timestamp.timestamp()
    return UnweighedRun(run.job_name, run.run_id, None, datetime.fromtimestamp(began, UTC))


def _run_output_strings(instance: dg.DagsterInstance, run_id: str, strings: set[str]) -> bool:
    """Add to ``strings`` what the run's events name; whether its action steps left no record of their reads.

    A run is told by its steps, not its tags: a tag would say nothing of a job defined in code, and the
    version tag of a compiled job cannot be ordered. An action step of a version that records its reads marks
    every output and failure (:data:`READS_RECORDED`); one of an older version left its usual metadata
    (``duration_s``, a failure's ``status``) unmarked. A run with neither has no action step: its ops' reads
    were never recorded by any version, and are weighed as before (by its run config and outputs)."""
    kinds = {dg.DagsterEventType.STEP_OUTPUT, dg.DagsterEventType.ASSET_MATERIALIZATION,
             dg.DagsterEventType.ASSET_CHECK_EVALUATION, dg.DagsterEventType.STEP_FAILURE}
    unmarked = False
    for entry in instance.all_logs(run_id, of_type=kinds):
        event = entry.dagster_event
        if event is None:
            continue
        action: tuple[str, ...]  # the metadata keys an action step leaves (none for a check)
        if event.event_type == dg.DagsterEventType.STEP_OUTPUT:
            metadata, action = event.step_output_data.metadata, (_ACTION_OUTPUT_KEY,)
        elif event.event_type == dg.DagsterEventType.STEP_FAILURE:  # what a failed step read (its input)
            user = event.step_failure_data.user_failure_data if event.step_failure_data else None
            metadata, action = (user.metadata if user is not None else {}), _ACTION_FAILURE_KEYS
        elif event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            metadata, action = event.asset_check_evaluation_data.metadata, ()
        else:
            metadata, action = event.materialization.metadata, (_ACTION_OUTPUT_KEY,)
        strings.update(_metadata_strings(metadata))
        if READS_RECORDED not in metadata and action and all(key in metadata for key in action):
            unmarked = True  # one step unweighed is enough: a step of ours is only ever marked or not
    return unmarked


def _metadata_strings(metadata: Mapping[str, Any]) -> Iterator[str]:
    for key in REFERENCE_KEYS:
        if key in metadata:
            value = metadata[key]
            yield from _walk_strings(getattr(value, "value", value))


def _walk_strings(value: Any) -> Iterable[str]:
    return (leaf for leaf in leaves(value) if isinstance(leaf, str))
