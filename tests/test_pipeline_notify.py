"""``notify:``: a pipeline's products mailed when a run succeeds or fails (outbox backend, both databases).

In process (``connector-ops pipeline run`` sends once the run has ended) and through the run-status
sensor the daemon evaluates (``build_run_status_sensor_context``, the sensor function itself); a run is
mailed once whichever path sees it first.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops.pipelines.dsl import PipelineError, compile_pipeline, load_pipeline
from connector_ops.pipelines.notifications import NOTIFIED_TAG
from connector_ops.pipelines.runner import run_compiled
from tests.pipeline_files import write

CSV = b"city,n\nParis,1\nRome,2\n"

PIPELINE = """
    name: cities
    notify:
      - when: [{when}]
        message:
          from: "Reports <reports@example.com>"
          recipients: [{{to: team@example.com}}]
          subject: "cities: ${{run.status}}"
          templateId: 1
          templateVariables: {{status: "${{run.status}}", error: "${{run.error}}", run: "${{run.id}}",
                               report: "${{asset:cities/export}}", link: "at ${{asset:cities/export}}",
                               literal: "$${{kept}}"}}
          attachments: ["${{asset:cities/export}}"]
    steps:
      - id: load
        action: etl.push
        asset: cities/raw
        input: {{platformFile: {pf}}}
      - id: export
        action: etl.pull
        asset: cities/export
        input: {{virtualFileId: "{source}", exportType: csv, exportName: cities.csv}}
"""


def pipeline(tmp_path: Path, files: Any, when: str = "success, failure", source: str = "${load.virtualFileId}"):
    pf = json.dumps(files.add_bytes(CSV, "cities.csv").to_json())
    return compile_pipeline(load_pipeline(write(tmp_path, PIPELINE.format(pf=pf, when=when, source=source))))


def outbox(resources: dict) -> list[dict[str, Any]]:
    return [json.loads(p.read_text())["Messages"][0] for p in sorted(Path(resources["mail"].outbox_dir).glob("*.json"))]


def test_a_successful_run_mails_its_products(tmp_path: Path, resources: dict, files: Any) -> None:
    compiled = pipeline(tmp_path, files)
    instance = dg.DagsterInstance.ephemeral()
    run = run_compiled(compiled, resources, instance=instance)
    assert run.result.success
    [message] = outbox(resources)
    assert message["Subject"] == "cities: success"
    report = run.result.output_for_node("export", "platform_file")
    variables = message["Variables"]
    assert variables["status"] == "success" and variables["error"] == "" and variables["literal"] == "${kept}"
    assert variables["run"] == run.result.run_id and variables["report"] == report
    assert variables["link"] == f"at {report['link']}"
    [attachment] = message["Attachments"]
    assert attachment["Filename"] == "cities.csv"
    assert base64.b64decode(attachment["Base64Content"]) == files.read_bytes(report) == CSV.replace(b"\n", b"\r\n")
    assert instance.get_run_by_id(run.result.run_id).tags[NOTIFIED_TAG] == "success"


def test_a_failed_run_mails_what_failed_without_what_it_did_not_make(tmp_path: Path, resources: dict,
                                                                     files: Any) -> None:
    compiled = pipeline(tmp_path, files, when="failure", source="no-such-virtual-file")
    run = run_compiled(compiled, resources, instance=dg.DagsterInstance.ephemeral())
    assert not run.result.success
    [message] = outbox(resources)
    assert message["Subject"] == "cities: failure"
    error = "export: etl.pull failed (500): virtual file 'no-such-virtual-file' not found"
    assert message["Variables"]["error"] == error
    assert message["Variables"]["report"] == "" and not message.get("Attachments")


def test_only_the_statuses_asked_for_are_mailed(tmp_path: Path, resources: dict, files: Any) -> None:
    compiled = pipeline(tmp_path, files, when="failure")
    assert run_compiled(compiled, resources, instance=dg.DagsterInstance.ephemeral()).result.success
    assert outbox(resources) == []
    assert [s.name for s in compiled.notify_sensors] == ["cities_notify_failure"]


def test_the_sensor_mails_a_run_once(tmp_path: Path, resources: dict, files: Any) -> None:
    compiled = pipeline(tmp_path, files)
    success, failure = compiled.notify_sensors
    assert (success.name, failure.name) == ("cities_notify_success", "cities_notify_failure")
    assert success.default_status == dg.DefaultSensorStatus.RUNNING
    with dg.DagsterInstance.ephemeral() as instance:
        result = compiled.job.execute_in_process(resources=resources, instance=instance)  # no notify: a daemon's run
        assert outbox(resources) == []
        [ended] = instance.all_logs(result.run_id, of_type=dg.DagsterEventType.RUN_SUCCESS)

        def evaluate() -> Any:  # the context closes the resources it built (else the garbage collector does, late)
            with dg.build_run_status_sensor_context(
                    sensor_name=success.name, dagster_event=ended.dagster_event, dagster_instance=instance,
                    dagster_run=instance.get_run_by_id(result.run_id),
                    resources={"mail": resources["mail"], "platform_files": files}) as context:
                return success(context)

        assert evaluate() is None
        [message] = outbox(resources)
        assert message["Subject"] == "cities: success" and len(message["Attachments"]) == 1
        assert isinstance(evaluate(), dg.SkipReason)  # already notified: no second mail
        assert len(outbox(resources)) == 1


def test_notify_problems_are_reported_with_lines(tmp_path: Path) -> None:
    path = write(tmp_path, """
        name: bad
        notify:
          - when: [sometimes]
            message:
              from: not an address
              recipients: [{to: team@example.com}]
              templateId: 1
              templateVariables: {a: "${load.virtualFileId}", b: "${asset:nope/x}"}
              attachments: ["${asset:a/raw}", "x"]
        steps:
          - id: load
            action: etl.push
            asset: a/raw
            input: {platformFile: {name: a.csv, link: "file:///tmp/a.csv", size: 1}}
    """)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    text = str(caught.value)
    assert "p.yaml:3: `when` must list success and/or failure, got ['sometimes']" in text
    assert "p.yaml:8: ${load.virtualFileId}: a notification names only ${run.status|id|job|error} or " \
           "${asset:KEY}" in text
    assert "p.yaml:8: ${asset:nope/x}: no step of this pipeline is that asset (its assets: a/raw)" in text
    assert "p.yaml:9: an attachment is exactly ${asset:KEY} of an asset step whose data is a platform file" in text
