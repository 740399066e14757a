"""Send a pipeline's ``notify:`` mails when a run ends (:mod:`.dsl.notify` describes the YAML).

Two ways a run ends, one sender: runs launched from Dagster (UI, schedule, sensor, daemon) are seen by
run-status sensors ``<pipeline>_notify_success`` / ``<pipeline>_notify_failure`` (running by default,
since declaring ``notify`` asks for them); runs of ``connector-ops pipeline run`` / ``%pipeline run`` in
this process send right after the run. Whichever sends first tags the run (``connector_ops/notified``),
so a CLI run on an instance a daemon also watches is mailed once. The mail goes through the configured
mail backend (``run_action`` of ``mail.send_transactional_message``), attachments read by the platform
file store.
"""


import logging
from collections.abc import Mapping
from typing import Any

import dagster as dg

from connector_ops.pipelines.dsl.model import Notify, Pipeline
from connector_ops.pipelines.dsl.notify import MAIL_ACTION, resolve
from connector_ops.registry import get_action, run_action

logger = logging.getLogger(__name__)

NOTIFIED_TAG = "connector_ops/notified"
STATUSES = {"success": dg.DagsterRunStatus.SUCCESS, "failure": dg.DagsterRunStatus.FAILURE}
_ERROR_CHARS = 2000


def run_assets(instance: dg.DagsterInstance, run_id: str) -> dict[str, Any]:
    """Asset key (``a/b``) -> the data the run materialised for it (a platform file, a virtual file id)."""
    found: dict[str, Any] = {}
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        materialization = entry.dagster_event.event_specific_data.materialization
        for name in ("platform_file", "virtual_file_id"):
            if name in materialization.metadata:
                found["/".join(materialization.asset_key.path)] = materialization.metadata[name].value
    return found


def run_error(instance: dg.DagsterInstance, run_id: str) -> str:
    """What failed in the run, one line per failed step (empty when nothing did)."""
    lines = []
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        event = entry.dagster_event
        data = event.step_failure_data
        text = (data.user_failure_data.description if data.user_failure_data and data.user_failure_data.description
                else data.error.message.strip() if data.error else "failed")
        lines.append(f"{event.step_key}: {text}")
    return "\n".join(lines)[:_ERROR_CHARS]


def notify_run(pipeline: Pipeline, instance: dg.DagsterInstance, run: dg.DagsterRun,
               resources: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Send the notifications ``pipeline`` declares for how ``run`` ended; the mail action's outputs.

    Nothing is sent twice for one run: the run is tagged once its notifications are sent.
    """
    fresh = instance.get_run_by_id(run.run_id) or run
    status = next((name for name, value in STATUSES.items() if value == fresh.status), None)
    wanted = [n for n in pipeline.notify if status in n.when]
    if not wanted or fresh.tags.get(NOTIFIED_TAG):
        return []
    instance.add_run_tags(run.run_id, {NOTIFIED_TAG: status})
    facts = {"status": status, "id": run.run_id, "job": run.job_name,
             "error": run_error(instance, run.run_id) if status == "failure" else ""}
    assets = run_assets(instance, run.run_id)
    return [send(n, facts, assets, resources) for n in wanted]


def send(notify: Notify, facts: Mapping[str, str], assets: Mapping[str, Any],
         resources: Mapping[str, Any]) -> dict[str, Any]:
    """One notification's mail, its references resolved (raises ``ConnectorError`` as the action does)."""
    payload = resolve(notify.message, facts, assets)
    spec = get_action(MAIL_ACTION)
    return run_action(spec, payload, {k: resources[k] for k in spec.resource_keys})


def notify_sensors(pipeline: Pipeline, job: dg.JobDefinition) -> list[dg.SensorDefinition]:
    """One run-status sensor per run status the pipeline's notifications ask for."""
    sensors = []
    for status in dict.fromkeys(w for n in pipeline.notify for w in n.when):
        sensors.append(_sensor(pipeline, job, status))
    return sensors


def _sensor(pipeline: Pipeline, job: dg.JobDefinition, status: str) -> dg.SensorDefinition:
    @dg.run_status_sensor(
        run_status=STATUSES[status], name=f"{pipeline.name}_notify_{status}", monitored_jobs=[job],
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Mails what `notify` in {pipeline.file} says when a run of {pipeline.name} ends in {status}",
    )
    def _notify(context: dg.RunStatusSensorContext, mail: dg.ResourceParam[Any],
                platform_files: dg.ResourceParam[Any]) -> dg.SkipReason | None:
        resources = {"mail": mail, "platform_files": platform_files}
        sent = notify_run(pipeline, context.instance, context.dagster_run, resources)
        if not sent:
            return dg.SkipReason(f"run {context.dagster_run.run_id} was already notified")
        context.log.info(f"notified {len(sent)} message(s) for run {context.dagster_run.run_id}")
        return None

    return _notify
