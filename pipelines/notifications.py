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
"""


import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
#: runs looked at per evaluation (the rest at the next)
RUNS_PER_EVALUATION = 50
STATUSES = {"success": dg.DagsterRunStatus.SUCCESS, "failure": dg.DagsterRunStatus.FAILURE}


def run_assets(instance: dg.DagsterInstance, run_id: str) -> dict[str, Any]:
    """Asset key (``a/b``) -> the data the run materialised for it (a platform file, a virtual file id)."""
    found: dict[str, Any] = {}
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        materialization = entry.dagster_event.event_specific_data.materialization
        for name in ("platform_file", "virtual_file_id"):
            if name in materialization.metadata:
                found["/".join(materialization.asset_key.path)] = materialization.metadata[name].value
    return found


def failed_steps(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """What failed in the run: ``step: error`` per failed step (none when nothing did)."""
    lines = []
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        event = entry.dagster_event
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
    if not wanted or fresh.tags.get(NOTIFIED_TAG):
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
    """Where a notify sensor is: runs updated after ``after`` are still to look at; ``failing`` holds the
    runs whose mail failed, with the number of attempts so far."""

    after: datetime
    failing: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> "_Cursor | None":
        if not text:
            return None
        data = json.loads(text)
        return cls(datetime.fromisoformat(data["after"]), data.get("failing", {}))

    def dump(self) -> str:
        return json.dumps({"after": self.after.isoformat(), "failing": self.failing})


def _sensor(pipeline: Pipeline, job: dg.JobDefinition, status: str) -> dg.SensorDefinition:
    @dg.sensor(
        name=f"{pipeline.name}_notify_{status}", minimum_interval_seconds=NOTIFY_INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Mails what `notify` in {pipeline.file} says when a run of {pipeline.name} ends in {status}",
    )
    def _notify(context: dg.SensorEvaluationContext, mail: dg.ResourceParam[Any],
                platform_files: dg.ResourceParam[Any]) -> dg.SkipReason:
        """Mail the runs of the job that ended in ``status`` since the last evaluation, and try again those
        whose mail failed. The first evaluation only starts the watch: runs that ended before the sensor
        ran are not mailed."""
        cursor = _Cursor.parse(context.cursor)
        if cursor is None:
            context.update_cursor(_Cursor(datetime.now(UTC)).dump())
            return dg.SkipReason(f"watching runs of {job.name} that end in {status} from now on")
        resources = {"mail": mail, "platform_files": platform_files}
        instance = context.instance
        runs = [r for r in (instance.get_run_by_id(run_id) for run_id in cursor.failing) if r is not None]
        records = instance.get_run_records(
            dg.RunsFilter(job_name=job.name, statuses=[STATUSES[status]], updated_after=cursor.after),
            limit=RUNS_PER_EVALUATION, order_by="update_timestamp", ascending=True)
        runs += [r.dagster_run for r in records if r.dagster_run.run_id not in cursor.failing]
        if records:
            cursor.after = records[-1].update_timestamp
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
