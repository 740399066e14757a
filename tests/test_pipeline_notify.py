"""``notify:``: a pipeline's products mailed when a run succeeds or fails (outbox backend, both databases).

In process (``connector-ops pipeline run`` sends once the run has ended) and through the run-status
sensor the daemon evaluates (``build_run_status_sensor_context``, the sensor function itself); a run is
mailed once whichever path sees it first.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops.pipelines import notifications
from connector_ops.pipelines.dsl import PipelineError, compile_pipeline, load_pipeline
from connector_ops.pipelines.notifications import MAX_ATTEMPTS, NOTIFIED_TAG
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


class Sensor:
    """A notify sensor evaluated as the daemon does, one evaluation after another: its cursor kept between
    them, its resources given (the context closes those it built, else the garbage collector does, late)."""

    def __init__(self, sensor: dg.SensorDefinition, instance: dg.DagsterInstance, files: Any) -> None:
        self.sensor, self.instance, self.files, self.cursor = sensor, instance, files, None

    def evaluate(self, mail: Any) -> str:
        with dg.build_sensor_context(instance=self.instance, cursor=self.cursor,
                                     resources={"mail": mail, "platform_files": self.files}) as context:
            reason = self.sensor(context)
            self.cursor = context.cursor
        assert isinstance(reason, dg.SkipReason)  # it requests no run
        return reason.skip_message or ""


def test_the_sensor_mails_a_run_once(tmp_path: Path, resources: dict, files: Any) -> None:
    compiled = pipeline(tmp_path, files)
    success, failure = compiled.notify_sensors
    assert (success.name, failure.name) == ("cities_notify_success", "cities_notify_failure")
    assert success.default_status == dg.DefaultSensorStatus.RUNNING
    with dg.DagsterInstance.ephemeral() as instance:
        before = compiled.job.execute_in_process(resources=resources, instance=instance)  # before the sensor ran
        sensor = Sensor(success, instance, files)
        assert sensor.evaluate(resources["mail"]).startswith("watching runs of cities that end in success")
        result = compiled.job.execute_in_process(resources=resources, instance=instance)  # no notify: a daemon's run
        assert outbox(resources) == []
        assert sensor.evaluate(resources["mail"]) == "1 message(s) sent"
        [message] = outbox(resources)
        assert message["Subject"] == "cities: success" and len(message["Attachments"]) == 1
        assert message["Variables"]["run"] == result.run_id
        assert sensor.evaluate(resources["mail"]) == "0 message(s) sent"  # already notified: no second mail
        assert len(outbox(resources)) == 1
        assert NOTIFIED_TAG not in instance.get_run_by_id(before.run_id).tags  # ended before the watch began


def test_a_mail_that_fails_is_sent_at_a_later_evaluation(tmp_path: Path, resources: dict, files: Any) -> None:
    """The mail backend fails (here an outbox folder that cannot be made; a Mailjet or SMTP outage alike):
    the run is not marked notified, and the sensor's next evaluations try it again until it is sent, or
    give it up after MAX_ATTEMPTS, tagged and logged."""
    compiled = pipeline(tmp_path, files)
    (tmp_path / "plain-file").write_text("not a folder")
    broken = resources["mail"].model_copy(update={"outbox_dir": str(tmp_path / "plain-file" / "outbox")})
    with dg.DagsterInstance.ephemeral() as instance:
        sensor = Sensor(compiled.notify_sensors[0], instance, files)
        sensor.evaluate(resources["mail"])
        first, second = (compiled.job.execute_in_process(resources=resources, instance=instance) for _ in range(2))
        said = sensor.evaluate(broken)
        assert said.startswith(f"0 message(s) sent; not sent, run {first.run_id}: mail.send_transactional_message "
                               "failed (500)") and f"(attempt 1 of {MAX_ATTEMPTS})" in said
        assert instance.get_run_by_id(first.run_id).tags[NOTIFIED_TAG] == ""  # the claim given back
        assert sensor.evaluate(resources["mail"]) == "2 message(s) sent"
        assert sorted(m["Variables"]["run"] for m in outbox(resources)) == sorted([first.run_id, second.run_id])
        assert sensor.evaluate(resources["mail"]) == "0 message(s) sent"
        third = compiled.job.execute_in_process(resources=resources, instance=instance)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            assert f"(attempt {attempt} of {MAX_ATTEMPTS})" in sensor.evaluate(broken)
        assert instance.get_run_by_id(third.run_id).tags[NOTIFIED_TAG] == "given up"
        assert sensor.evaluate(resources["mail"]) == "0 message(s) sent"
        assert len(outbox(resources)) == 2


@contextlib.contextmanager
def writer_clock_behind(seconds: float) -> Iterator[None]:
    """Runs executed within end as written by a process whose clock is ``seconds`` behind (another host's,
    one an NTP correction stepped back): Dagster dates a run's end (``update_timestamp``) by its event's
    timestamp, that process's ``time.time()``."""
    import dagster._time as dagster_time

    real = dagster_time.datetime_from_timestamp
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dagster_time, "datetime_from_timestamp", lambda ts, *a, **k: real(ts - seconds, *a, **k))
        yield


@pytest.mark.parametrize("ending", ["success", "failure"])
def test_a_run_whose_end_is_dated_before_the_cursor_is_mailed_once(tmp_path: Path, resources: dict, files: Any,
                                                                   ending: str) -> None:
    """The sensor read the runs updated strictly after the newest it had seen: a run dated 2 minutes earlier
    (its writer's clock behind, or committed after a run dated later) was passed over for good — two runs,
    one mail — and so was the first run after the watch began, dated before the daemon's clock. Runs dated
    within the look-back are read again: each mailed once, a failed mail tried again and sent once."""
    source = "${load.virtualFileId}" if ending == "success" else "no-such-virtual-file"
    compiled = pipeline(tmp_path, files, when=ending, source=source)
    [sensor_def] = compiled.notify_sensors
    (tmp_path / "plain-file").write_text("not a folder")
    broken = resources["mail"].model_copy(update={"outbox_dir": str(tmp_path / "plain-file" / "outbox")})
    mail = resources["mail"]
    with dg.DagsterInstance.ephemeral() as instance:

        def run(behind_s: float = 0) -> dg.ExecuteInProcessResult:
            with writer_clock_behind(behind_s):
                return compiled.job.execute_in_process(resources=resources, instance=instance, raise_on_error=False)

        sensor = Sensor(sensor_def, instance, files)
        assert sensor.evaluate(mail).startswith("watching runs of cities")
        first = run(120)  # the first run after the watch began, dated 2 min before the daemon's clock
        assert sensor.evaluate(mail) == "1 message(s) sent"
        second = run()
        assert sensor.evaluate(mail) == "1 message(s) sent"
        late = run(120)  # dated 2 min before the sensor's cursor
        assert sensor.evaluate(mail) == "1 message(s) sent"
        assert sensor.evaluate(mail) == "0 message(s) sent"  # read again, not mailed again
        retried = run(120)
        assert "(attempt 1 of " in sensor.evaluate(broken)
        assert instance.get_run_by_id(retried.run_id).tags[NOTIFIED_TAG] == ""
        assert sensor.evaluate(mail) == "1 message(s) sent"
        assert sensor.evaluate(mail) == "0 message(s) sent"
        runs = [first, second, late, retried]
        assert sorted(m["Variables"]["run"] for m in outbox(resources)) == sorted(r.run_id for r in runs)
        assert {instance.get_run_by_id(r.run_id).tags[NOTIFIED_TAG] for r in runs} == {ending}


def test_the_look_back_reads_a_page_of_runs_per_evaluation(tmp_path: Path, resources: dict, files: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs read again are bounded per evaluation (a busy deployment ends hundreds of runs in the look-back):
    a page, continued at the next evaluation and begun again once the window is covered, so the pass moves
    on even when every run in the window was mailed already."""
    monkeypatch.setattr(notifications, "RUNS_PER_EVALUATION", 2)
    compiled = pipeline(tmp_path, files, when="success")
    with dg.DagsterInstance.ephemeral() as instance:
        sensor = Sensor(compiled.notify_sensors[0], instance, files)
        sensor.evaluate(resources["mail"])
        for _ in range(5):
            run_compiled(compiled, resources, instance=instance)  # mailed in process, tagged
        assert len(outbox(resources)) == 5

        def again() -> str | None:
            assert sensor.evaluate(resources["mail"]) == "0 message(s) sent"
            return json.loads(sensor.cursor or "")["again"]

        for _ in range(5):  # the new runs read, two an evaluation, and the pass under way ended
            if again() is None:
                break
        dates = [r.update_timestamp.isoformat() for r in instance.get_run_records(
            dg.RunsFilter(job_name="cities"), order_by="update_timestamp", ascending=True)]
        assert len(dates) == 5
        assert [again(), again(), again(), again()] == [dates[1], dates[3], None, dates[1]]
        assert len(outbox(resources)) == 5


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


def test_a_failure_subject_naming_run_error_is_sent_on_one_line(tmp_path: Path, resources: dict) -> None:
    """``${run.error}`` holds one line per failed step and can exceed the subject's 255 characters: the mail
    action refused such a subject (400, line breaks) and the failure mail was lost. In a one-line field it is
    now one line ('; ' between steps), the subject shortened with '…'; the template variable keeps it whole."""
    missing = ["missing-" + "a" * 120, "missing-" + "b" * 120]
    compiled = compile_pipeline(load_pipeline(write(tmp_path, f"""
        name: failing
        notify:
          - when: [failure]
            message:
              from: "Reports <reports@example.com>"
              recipients: [{{to: team@example.com, name: "On call (${{run.error}})"}}]
              subject: "${{run.job}} failed: ${{run.error}}"
              templateId: 1
              templateVariables: {{error: "${{run.error}}"}}
        steps:
          - id: q1
            action: etl.query
            input: {{virtualFileId: "{missing[0]}", query: {{}}}}
          - id: q2
            action: etl.query
            input: {{virtualFileId: "{missing[1]}", query: {{}}}}
    """)))
    run = run_compiled(compiled, resources, instance=dg.DagsterInstance.ephemeral())
    assert not run.result.success
    [message] = outbox(resources)
    steps = [f"q{i}: etl.query failed (500): virtual file '{name}' not found" for i, name in enumerate(missing, 1)]
    assert message["Variables"]["error"] == "\n".join(steps)
    line = "; ".join(steps)
    assert message["Subject"] == f"failing failed: {line}"[:254].rstrip() + "…" and len(message["Subject"]) <= 255
    assert message["To"] == [{"Email": "team@example.com", "Name": f"On call ({line})"}]


def test_run_error_on_one_line_holds_no_control_character() -> None:
    """A step's error may carry ANSI colours, a NUL, a C1 control or U+2028 (a library's words, a value it
    quotes): the one-line form must be one a subject takes, or the failure mail is refused and lost."""
    from connector_ops.pipelines.dsl.notify import ERROR_LINE, run_facts
    from connector_ops.resources.mail.message import check_header_text

    facts = run_facts("failure", "r1", "job", ["s1: \x1b[31mred\x1b[0m\x00 then\u2028more\x85end", "s2: ok\ttab"])
    assert facts[ERROR_LINE] == "s1: [31mred [0m then more end; s2: ok tab"
    assert check_header_text(facts[ERROR_LINE], "subject") == facts[ERROR_LINE]
