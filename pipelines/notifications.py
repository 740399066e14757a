"""Send a pipeline's ``notify:`` mails when a run ends (:mod:`.dsl.notify` describes the YAML).

Two ways a run ends, one sender: runs launched from Dagster (UI, schedule, sensor, daemon) are found by
the sensors ``<pipeline>_notify_success`` / ``<pipeline>_notify_failure`` (running by default, since
declaring ``notify`` asks for them); runs of ``connector-ops pipeline run`` / ``%pipeline run`` in this
process send right after the run. Whichever sends first tags the run (``connector_ops/notified``), so a
CLI run on an instance a daemon also watches is mailed once. The mail goes through the configured mail
backend (``run_action`` of ``mail.send_transactional_message``), attachments read by the platform file
store.

A mail that cannot be sent is not lost: the sender gives its claim back (the tag emptied, the notifications
already sent listed in ``connector_ops/notify_sent``), and the sensor tries the run again at its next
evaluations, up to :data:`MAX_ATTEMPTS` times. That is why the sensors are plain sensors that look for
ended runs rather than Dagster's run-status sensors: those consume a run's event whether the mail went out
or not.

A run's end is dated by the clock of the process that wrote it, so a sensor does not trust those dates to
come in order: it looks again, :data:`LOOK_BACK` behind the newest it has seen, for runs it has not mailed.
"""


import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg

from connector_ops.pipelines.dsl.model import Notify, Pipeline
from connector_ops.pipelines.dsl.notify import MAIL_ACTION, resolve_message, run_facts
from connector_ops.registry import get_action, run_action

logger = logging.getLogger(__name__)

NOTIFIED_TAG = "connector_ops/notified"
#: the indices (in ``notify:``) of the run's notifications already sent, while some are still to go
SENT_TAG = "connector_ops/notify_sent"
#: how often the daemon evaluates a notify sensor (and so how soon a mail that failed is tried again)
NOTIFY_INTERVAL_SECONDS = 30
#: a run whose mail still fails after this many evaluations is given up: tagged and logged as an error
MAX_ATTEMPTS = 5
#: runs looked at per evaluation (the rest at the next): as many new ones, and as many behind the cursor
RUNS_PER_EVALUATION = 50
#: how far behind the newest run it has seen a notify sensor looks again for ended runs not yet mailed.
#: Dagster dates a run's end (``update_timestamp``) by the clock of the process that wrote it: another
#: host's, or one an NTP correction stepped back; and of two runs ending together, the earlier dated can be
#: committed after the sensor read the other. Either way a run appears dated before the cursor, and a read
#: of the runs updated strictly after it would pass over that run for good. Runs read again and already
#: mailed are passed over by their ``connector_ops/notified`` tag. The pass over this window goes
#: :data:`RUNS_PER_EVALUATION` runs per evaluation (a page, continued at the next), so each evaluation reads
#: a bounded number of runs however many ended in the window; where more than that end in it, a pass takes
#: several evaluations and the lateness tolerated shrinks by that time.
LOOK_BACK = timedelta(minutes=10)
#: the watch's start when the job has no run in the sensor's status yet: every run that ends is new
NO_RUN_YET = datetime(1970, 1, 1, tzinfo=UTC)
STATUSES = {"success": dg.DagsterRunStatus.SUCCESS, "failure": dg.DagsterRunStatus.FAILURE}


def run_assets(instance: dg.DagsterInstance, run_id: str) -> dict[str, Any]:
    """Asset key (``a/b``) -> the data the run materialised for it (a platform file, a virtual file id)."""
    found: dict[str, Any] = {}
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        materialization = entry.get_dagster_event().materialization
        for name in ("platform_file", "virtual_file_id"):
            if name in materialization.metadata:
                found["/".join(materialization.asset_key.path)] = materialization.metadata[name].value
    return found


def failed_steps(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """What failed in the run: ``step: error`` per failed step (none when nothing did)."""
    lines = []
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        event = entry.get_dagster_event()
        data = event.step_failure_data
        text = (data.user_failure_data.description if data.user_failure_data and data.user_failure_data.description
                else data.error.message.strip() if data.error else "failed")
        lines.append(f"{event.step_key}: {text}")
    return lines


def notify_run(pipeline: Pipeline, instance: dg.DagsterInstance, run: dg.DagsterRun,
               resources: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Send the notifications ``pipeline`` declares for how ``run`` ended; the mail action's outputs.

    Nothing is sent twice for one run: the run is tagged (claimed) before its mails go out. When one cannot
    be sent, the claim is given back with the ones already sent listed, and the error raised: the next
    attempt sends the rest.
    """
    fresh = instance.get_run_by_id(run.run_id) or run
    status = next((name for name, value in STATUSES.items() if value == fresh.status), None)
    sent_before = set(filter(None, fresh.tags.get(SENT_TAG, "").split(",")))
    wanted = [(str(i), n) for i, n in enumerate(pipeline.notify) if status in n.when and str(i) not in sent_before]
    if status is None or not wanted or fresh.tags.get(NOTIFIED_TAG):  # (no status: none wanted either)
        return []
    instance.add_run_tags(run.run_id, {NOTIFIED_TAG: status})
    facts = run_facts(status, run.run_id, run.job_name,
                      failed_steps(instance, run.run_id) if status == "failure" else [])
    assets = run_assets(instance, run.run_id)
    outputs: list[dict[str, Any]] = []
    for index, notify in wanted:
        try:
            outputs.append(send(notify, facts, assets, resources))
        except Exception:
            instance.add_run_tags(run.run_id, {NOTIFIED_TAG: "", SENT_TAG: ",".join(sorted(sent_before))})
            raise
        sent_before.add(index)
    return outputs


def send(notify: Notify, facts: Mapping[str, str], assets: Mapping[str, Any],
         resources: Mapping[str, Any]) -> dict[str, Any]:
    """One notification's mail, its references resolved (raises ``ConnectorError`` as the action does)."""
    payload = resolve_message(notify.message, facts, assets)
    spec = get_action(MAIL_ACTION)
    return run_action(spec, payload, {k: resources[k] for k in spec.resource_keys})


def notify_sensors(pipeline: Pipeline, job: dg.JobDefinition) -> list[dg.SensorDefinition]:
    """One sensor per run status the pipeline's notifications ask for."""
    sensors = []
    for status in dict.fromkeys(w for n in pipeline.notify for w in n.when):
        sensors.append(_sensor(pipeline, job, status))
    return sensors


@dataclass
class _Cursor:
    """Where a notify sensor is: runs updated after ``after`` are new; those updated in the
    :data:`LOOK_BACK` before it, but not before ``start`` (the newest run's date when the watch began), are
    looked at again, a page per evaluation from ``again`` (None: from the window's beginning); ``failing``
    holds the runs whose mail failed, with the number of attempts so far."""

    after: datetime
    start: datetime
    again: datetime | None = None
    failing: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> "_Cursor | None":
        if not text:
            return None
        data = json.loads(text)
        after = datetime.fromisoformat(data["after"])
        again = data.get("again")
        # a cursor of a version without look-back: the watch is taken to begin where it was
        return cls(after, datetime.fromisoformat(data.get("start", data["after"])),
                   datetime.fromisoformat(again) if again else None, data.get("failing", {}))

    def dump(self) -> str:
        return json.dumps({"after": self.after.isoformat(), "start": self.start.isoformat(),
                           "again": self.again.isoformat() if self.again else None, "failing": self.failing})

    def window(self) -> datetime:
        """Where the page read behind the cursor begins."""
        window = max(self.after - LOOK_BACK, self.start)
        return max(self.again, window) if self.again else window


def _ended(instance: dg.DagsterInstance, job: dg.JobDefinition, status: str, after: datetime,
           before: datetime | None = None) -> list[dg.RunRecord]:
    """The runs of ``job`` that ended in ``status``, updated after ``after`` (and before ``before``): the
    oldest first, at most :data:`RUNS_PER_EVALUATION`."""
    return list(instance.get_run_records(
        dg.RunsFilter(job_name=job.name, statuses=[STATUSES[status]], updated_after=after, updated_before=before),
        limit=RUNS_PER_EVALUATION, order_by="update_timestamp", ascending=True))


def _sensor(pipeline: Pipeline, job: dg.JobDefinition, status: str) -> dg.SensorDefinition:
    @dg.sensor(
        name=f"{pipeline.name}_notify_{status}", minimum_interval_seconds=NOTIFY_INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Mails what `notify` in {pipeline.file} says when a run of {pipeline.name} ends in {status}",
    )
    def _notify(context: dg.SensorEvaluationContext, mail: dg.ResourceParam[Any],
                platform_files: dg.ResourceParam[Any]) -> dg.SkipReason:
        """Mail the runs of the job that ended in ``status`` since the last evaluation (and those dated
        within :data:`LOOK_BACK` before it, not mailed yet), and try again those whose mail failed. The
        first evaluation only starts the watch: runs that ended before the sensor ran are not mailed. It
        begins at the newest such run's date, not at this host's clock, which the writers' may be behind."""
        instance = context.instance
        cursor = _Cursor.parse(context.cursor)
        if cursor is None:
            newest = instance.get_run_records(dg.RunsFilter(job_name=job.name, statuses=[STATUSES[status]]),
                                              limit=1, order_by="update_timestamp", ascending=False)
            start = newest[0].update_timestamp if newest else NO_RUN_YET
            context.update_cursor(_Cursor(start, start).dump())
            return dg.SkipReason(f"watching runs of {job.name} that end in {status} from now on")
        resources = {"mail": mail, "platform_files": platform_files}
        runs = [r for r in (instance.get_run_by_id(run_id) for run_id in cursor.failing) if r is not None]
        behind = _ended(instance, job, status, cursor.window(), cursor.after + timedelta(microseconds=1))
        new = _ended(instance, job, status, cursor.after)
        cursor.again = behind[-1].update_timestamp if len(behind) == RUNS_PER_EVALUATION else None
        if new:
            cursor.after = new[-1].update_timestamp
        looked_at = set(cursor.failing)
        for record in (*behind, *new):  # those mailed already (tagged) need no more reading
            run = record.dagster_run
            if run.run_id not in looked_at and not run.tags.get(NOTIFIED_TAG):
                looked_at.add(run.run_id)
                runs.append(run)
        failing, sent, problems = {}, 0, []
        for run in runs:
            try:
                sent += len(notify_run(pipeline, instance, run, resources))
            except Exception as exc:  # a ConnectorError of the mail action, or the instance failing
                attempts = cursor.failing.get(run.run_id, 0) + 1
                problems.append(f"run {run.run_id}: {exc} (attempt {attempts} of {MAX_ATTEMPTS})")
                if attempts < MAX_ATTEMPTS:
                    failing[run.run_id] = attempts
                else:
                    instance.add_run_tags(run.run_id, {NOTIFIED_TAG: "given up"})
                    context.log.error(f"notification of run {run.run_id} given up after {attempts} attempts: {exc}")
        cursor.failing = failing
        context.update_cursor(cursor.dump())
        for problem in problems:
            context.log.warning(f"notification not sent: {problem}")
        said = [f"{sent} message(s) sent"] + [f"not sent, {p}" for p in problems]
        return dg.SkipReason("; ".join(said))

    return _notify
