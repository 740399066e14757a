"""The ``pipelines`` Definitions: loading, default configs, extra pipeline folders, schedules, the sensor."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.execution.api import execute_run
from dagster._core.execution.plan.resume_retry import ReexecutionStrategy
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.workspace.load_target import ModuleTarget

from connector_ops.environment import resources_for
from connector_ops.kernel.version import build_version, package_version, source_digest
from connector_ops.ops.factory import PIPELINE_DIGEST_TAG, error_of_failed_step
from connector_ops.pipelines.catalog import load_catalog
from connector_ops.pipelines.cli import pipeline
from connector_ops.pipelines.definitions import build_definitions
from connector_ops.pipelines.dsl import PipelineError, compile_pipeline, load_pipeline
from connector_ops.session import invoke
from tests.mail.conftest import API_KEY, API_SECRET
from tests.mail.test_mail_secrets import forms, stored_bytes
from tests.servers import serving
from tests.servers.fake_mailjet import FakeMailjet

SHIPPED_JOBS = {"first_etl", "sales_report", "retail_customers", "drive_inbox", "sales_batches"}


def test_definitions_load_and_every_default_config_validates() -> None:
    import connector_ops.pipelines

    defs = connector_ops.pipelines.defs
    dg.Definitions.validate_loadable(defs)
    jobs = {job.name: job for job in defs.jobs}
    assert set(jobs) >= SHIPPED_JOBS
    for name in jobs:
        job = defs.resolve_job_def(name)
        dg.validate_run_config(job, {})  # the launchpad's defaults start a run without typing
    assert {s.name for s in defs.schedules} >= {"sales_report_schedule", "retail_customers_schedule"}
    assert {s.name for s in defs.sensors} >= {"drive_inbox_on_new_file"}
    schedule = next(s for s in defs.schedules if s.name == "sales_report_schedule")
    assert schedule.cron_schedule == "0 7 * * 1" and schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    tick = schedule.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=None))
    dg.validate_run_config(defs.resolve_job_def("sales_report"), tick.run_requests[0].run_config)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_secrets_stay_environment_references(env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    """The Definitions bind the Mailjet keys as EnvVars; a run of ``sales_report``, whose last step mails
    the report, reads them inside the run (Mailjet accepts its basic auth) and neither the stored run,
    its events nor any file of the instance hold them."""
    fake = FakeMailjet(API_KEY, API_SECRET, templates={1}, senders={"reports@example.com"})
    with serving(fake.app) as url:
        for name, value in {"CONNECTOR_OPS_MAIL_BACKEND": "mailjet", "MAILJET_API_URL": url,
                            "MAILJET_API_KEY": API_KEY, "MAILJET_API_SECRET": API_SECRET}.items():
            monkeypatch.setenv(name, value)
        defs = build_definitions()
        mail = defs.resources["mail"]
        for field, variable in {"api_key": "MAILJET_API_KEY", "api_secret": "MAILJET_API_SECRET"}.items():
            value = getattr(mail, field)
            assert isinstance(value, dg.EnvVar) and value.env_var_name == variable, field
        job = defs.resolve_job_def("sales_report")
        assert "mail" in job.graph.node_named("send").definition.required_resource_keys
        storage = tmp_path / "dagster"
        storage.mkdir()
        with dg.instance_for_test(temp_dir=str(storage)) as instance:
            result = job.execute_in_process(instance=instance)
            assert result.success
            stored = repr(instance.get_run_by_id(result.run_id)) + repr(instance.all_logs(result.run_id))
    sent = [e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"]
    assert "send" in sent and len(fake.accepted) == 1  # the mail step ran, with the keys from the EnvVars
    assert fake.accepted[0]["To"] == [{"Email": "sales-team@example.com", "Name": "Sales team"}]
    files = stored_bytes(storage)
    assert "sales_report" in stored and any(b"STEP_SUCCESS" in data for _, data in files)  # what was searched
    for secret in (API_KEY, API_SECRET):
        for form in forms(secret):
            assert form.decode() not in stored
            assert not [str(path) for path, data in files if form in data]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_env_value_the_action_refuses_is_named_not_shown_in_the_stored_events(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A step's validation error echoed the value (``recipients[0].to: 'sk_live_…' is not a valid e-mail
    address``) and Dagster stored it in the run's events, which docs/pipelines.md says ``${env.…}`` values never
    enter: the error names the reference instead, and says what is wrong with it."""
    secrets = {"MJ_TO": "sk_live_SECRET2", "MJ_TEMPLATE": "sk_live_SECRET1", "MJ_NAME": "Pw9secret"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "leak.yaml"
    path.write_text(textwrap.dedent("""
        name: leak
        steps:
          - id: mail
            action: mail.send_transactional_message
            input:
              from: "reports.${env.MJ_NAME}"
              recipients: [{to: "${env.MJ_TO}"}]
              templateId: "${env.MJ_TEMPLATE}"
              templateVariables: {}
        """))
    job = compile_pipeline(load_pipeline(path)).job
    storage = tmp_path / "dagster"
    storage.mkdir()
    with dg.instance_for_test(temp_dir=str(storage)) as instance:
        result = job.execute_in_process(instance=instance, resources=resources_for(environ=env),
                                        raise_on_error=False)
        stored = repr(instance.get_run_by_id(result.run_id)) + repr(instance.all_logs(result.run_id))
    (failed,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = error_of_failed_step(failed).message
    assert message.startswith("from: the text made with ${env.MJ_NAME} is not a valid e-mail address"), message
    assert "recipients[0].to: the value of ${env.MJ_TO} is not a valid e-mail address" in message
    assert "templateId: must be an integer, got the value of ${env.MJ_TEMPLATE}" in message
    assert "STEP_FAILURE" in stored and "the value of ${env.MJ_TO}" in stored  # what was searched
    files = stored_bytes(storage)
    for value in ("sk_live_SECRET", "Pw9secret"):
        assert value not in stored and value not in message
        assert not [str(path) for path, data in files if value.encode() in data]


def test_pipelines_dir_adds_jobs_and_broken_files_are_reported_while_the_rest_loads(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "extra.yaml").write_text(textwrap.dedent("""
        name: extra_job
        schedule: "*/10 * * * *"
        steps:
          - id: q
            action: etl.query
            input: {virtualFileId: abc, query: {a: "1"}}
        """))
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    defs = build_definitions()
    assert "extra_job" in {j.name for j in defs.jobs}
    assert "extra_job_schedule" in {s.name for s in defs.schedules}
    assert "broken_pipelines" not in {j.name for j in defs.jobs}

    (folder / "zz_broken.yaml").write_text("name: broken\nsteps:\n  - id: x\n    action: etl.nope\n")
    (folder / "zz_twice.yaml").write_text((folder / "extra.yaml").read_text())
    with caplog.at_level("ERROR", logger="connector_ops.pipelines.definitions"):
        defs = build_definitions()
    jobs = {j.name: j for j in defs.jobs}
    # every other job, schedule and sensor still loads
    assert {"extra_job", "sales_report", "drive_inbox", "first_etl"} <= set(jobs)
    assert "broken" not in jobs
    assert {"extra_job_schedule", "sales_report_schedule"} <= {s.name for s in defs.schedules}
    assert "drive_inbox_on_new_file" in {s.name for s in defs.sensors}
    broken_line = f"{folder / 'zz_broken.yaml'}:4: step x: unknown action 'etl.nope'"
    twice = "job name 'extra_job' is already used by"
    for text in (jobs["broken_pipelines"].description, caplog.text):  # the UI's job list, the code server's log
        assert broken_line in text and twice in text
    with pytest.raises(dg.Failure) as failed:  # a launch fails with the problems
        jobs["broken_pipelines"].execute_in_process()
    assert broken_line in failed.value.description
    with pytest.raises(PipelineError):
        load_catalog()  # the strict form (validate, run) still refuses

    listed = CliRunner().invoke(pipeline, ["list"])
    assert listed.exit_code == 1
    assert "extra_job" in listed.stdout and "sales_report" in listed.stdout
    assert broken_line in listed.stderr and broken_line not in listed.stdout


@pytest.mark.parametrize("typo", ["pipelnes", "team.yaml"])
def test_a_mistyped_pipelines_dir_is_reported_not_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          typo: str) -> None:
    """``CONNECTOR_OPS_PIPELINES_DIR`` naming no folder (a typo, or one of its files) was passed over without a
    word: the deployment ran without the team's pipelines, ``pipeline list`` exited 0."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "team.yaml").write_text("name: team_job\nsteps:\n  - id: a\n    action: etl.iterate\n"
                                      "    input: {content: [], maxBatchSize: 1}\n")
    wrong = folder / typo if typo.endswith(".yaml") else tmp_path / typo
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(wrong))
    said = f"{wrong}: CONNECTOR_OPS_PIPELINES_DIR={str(wrong)!r}: "
    said += "a file, not a folder" if wrong.exists() else "no such folder"
    jobs = {j.name: j for j in build_definitions().jobs}
    assert "sales_report" in jobs and said in (jobs["broken_pipelines"].description or "")  # the UI's job list
    listed = CliRunner().invoke(pipeline, ["list"])
    assert listed.exit_code == 1 and said in listed.stderr and "sales_report" in listed.stdout
    ran = CliRunner().invoke(pipeline, ["run", "team_job"])
    assert ran.exit_code == 2 and said in ran.stderr
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    assert "broken_pipelines" not in {j.name for j in build_definitions().jobs}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_drive_folder_sensor_starts_one_run_per_new_file(env: dict[str, str], tmp_path: Path) -> None:
    resources = resources_for(environ=env)
    defs = build_definitions()
    sensor = defs.resolve_sensor_def("drive_inbox_on_new_file")
    job = defs.resolve_job_def("drive_inbox")

    def upload(name: str, text: str) -> str:
        pf = resources["platform_files"].add_bytes(text.encode(), name, "text/csv").to_json()
        return invoke("drive.upload_file", {"platformFile": pf}, resources)["fileId"]

    def tick(cursor: str | None) -> dg.SensorExecutionData:
        with dg.build_sensor_context(cursor=cursor, resources={"drive": resources["drive"]},
                                     instance=instance) as ctx:
            return sensor.evaluate_tick(ctx)

    (tmp_path / "dagster").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "dagster"))  # where the sensor keeps what it saw
    empty = tick(None)
    assert not empty.run_requests and "no new or modified file" in (empty.skip_message or "")

    first = upload("a.csv", "x,y\n1,2\n3,4\n")
    result = tick(None)
    (request,) = result.run_requests
    assert request.run_key == f"root/{first}@1"  # its revision: the first
    assert request.run_config["ops"]["trigger"]["config"] == {"fileId": first, "name": "a.csv", "folderId": "root"}
    dg.validate_run_config(job, request.run_config)  # the job's defaults are kept next to the trigger
    assert request.run_config["ops"]["to_json"]["config"]["exportType"] == "json"

    again = tick(result.cursor)  # the cursor remembers the file: no duplicate run
    assert not again.run_requests

    second = upload("b.csv", "x,y\n5,6\n")
    newer = tick(result.cursor)
    assert [r.run_key for r in newer.run_requests] == [f"root/{second}@1"]

    run = job.execute_in_process(run_config=request.run_config, resources=resources)
    assert run.success
    stored = run.output_for_node("to_json", "platform_file")
    assert stored["name"] == "a.csv.json"
    assert json.loads(resources["platform_files"].read_bytes(stored)) == [{"x": "1", "y": "2"}, {"x": "3", "y": "4"}]
    listing = invoke("drive.list", {"folderId": run.output_for_node("converted", "folder_id")}, resources)
    assert [item["name"] for item in listing["content"]] == ["a.csv.json"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_sensor_triggered_job_launched_by_hand_without_a_file_id_says_where_to_set_it(env: dict[str, str]) -> None:
    """The launchpad's defaults of ``drive_inbox`` have no file id (its sensor sets one per file): the run fails
    at its trigger with a 400 naming the config path to set, not with the first step's "String should have at
    least 1 character"."""
    job = build_definitions().resolve_job_def("drive_inbox")
    run = job.execute_in_process(resources=resources_for(environ=env), raise_on_error=False)
    (failed,) = [e for e in run.all_events if e.event_type_value == "STEP_FAILURE"]
    error = error_of_failed_step(failed)
    assert failed.step_key == "trigger" and error.status == 400
    assert error.message == ("trigger.fileId is empty: a run of drive_inbox is about one drive file, which its sensor "
                             "drive_inbox_on_new_file sets; to launch it by hand, set ops.trigger.config.fileId (a "
                             "drive file id) in the launchpad")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_drive_sensor_whose_folder_variable_is_unset_skips_the_tick(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "inbox.yaml"
    path.write_text(textwrap.dedent("""
        name: inbox_t
        on_new_file: {folderId: "${env.CONNECTOR_OPS_TEST_INBOX}"}
        steps:
          - id: dl
            action: drive.download_file
            input: {fileId: "${trigger.fileId}"}
        """))
    sensor = compile_pipeline(load_pipeline(path)).sensor
    drive = resources_for(environ=env)["drive"]

    (tmp_path / "dagster").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "dagster"))

    def tick() -> dg.SensorExecutionData:
        with dg.build_sensor_context(resources={"drive": drive}, instance=instance) as ctx:
            return sensor.evaluate_tick(ctx)

    monkeypatch.delenv("CONNECTOR_OPS_TEST_INBOX", raising=False)
    skipped = tick()
    assert not skipped.run_requests
    assert skipped.skip_message == ("on_new_file.folderId: ${env.CONNECTOR_OPS_TEST_INBOX}: environment variable "
                                    "CONNECTOR_OPS_TEST_INBOX is not set")
    monkeypatch.setenv("CONNECTOR_OPS_TEST_INBOX", "root")  # read again at each tick
    assert "no new or modified file in drive folder root" in (tick().skip_message or "")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_drive_sensor_whose_folder_variable_is_empty_uses_its_default_or_skips_the_tick(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``INBOX=`` (set but empty) made the sensor list the drive's root and start a run for every file there: the
    ``:-`` default now stands in (as in the shell), and without one the tick is skipped naming the variable."""
    resources = resources_for(environ=env)
    pf = resources["platform_files"].add_bytes(b"x\n", "payroll.xlsx", "text/plain").to_json()
    invoke("drive.upload_file", {"platformFile": pf}, resources)  # a file in the root, unrelated to the inbox
    inbox = invoke("drive.create_folder", {"name": "inbox"}, resources)["folderId"]
    (tmp_path / "dagster").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "dagster"))

    def tick(folder_id: str) -> dg.SensorExecutionData:
        path = tmp_path / "inbox.yaml"
        path.write_text(textwrap.dedent(f"""
            name: inbox_e
            on_new_file: {{folderId: "{folder_id}"}}
            steps:
              - id: dl
                action: drive.download_file
                input: {{fileId: "${{trigger.fileId}}"}}
            """))
        with dg.build_sensor_context(resources={"drive": resources["drive"]}, instance=instance) as ctx:
            return compile_pipeline(load_pipeline(path)).sensor.evaluate_tick(ctx)

    monkeypatch.setenv("CONNECTOR_OPS_TEST_INBOX", "")
    with_default = tick(f"${{env.CONNECTOR_OPS_TEST_INBOX:-{inbox}}}")
    assert not with_default.run_requests
    assert with_default.skip_message == f"no new or modified file in drive folder {inbox}"
    for folder_id in ("${env.CONNECTOR_OPS_TEST_INBOX}", "${env.CONNECTOR_OPS_TEST_INBOX:-}"):
        skipped = tick(folder_id)
        assert not skipped.run_requests
        assert skipped.skip_message == (
            f"on_new_file.folderId: {folder_id}: is empty (the variable is set but empty): set it to the drive "
            "folder to watch; an empty id would watch the drive's root, a run for every file there")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_step_never_runs_another_version_of_its_pipeline_than_its_run_was_launched_with(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A process that loaded a pipeline file before it was edited (a Celery worker started earlier) and is given
    a step of a run launched with the edited version fails that step at once — a 409 naming the file and saying
    to restart the workers — instead of running the old steps and succeeding with the old results."""
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "two.csv").write_text("id,name\n1,a\n2,b\n")
    (folder / "five.csv").write_text("id,name\n1,a\n2,b\n3,c\n4,d\n5,e\n")
    step = 'steps:\n  - {id: load, action: etl.push, input: {platformFile: "${file:%s}"}}\n'
    path = folder / "ver.yaml"
    path.write_text("name: ver\n" + step % "two.csv")
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    old = build_definitions().resolve_job_def("ver")  # what a worker started now keeps
    path.write_text("# a comment is no new version\nname: ver\n" + step % "two.csv")
    assert build_definitions().resolve_job_def("ver").run_tags == old.run_tags
    path.write_text("name: ver\n" + step % "five.csv")
    new = build_definitions().resolve_job_def("ver")  # the reloaded code location launches runs of this one
    assert new.run_tags != old.run_tags
    with dg.instance_for_test() as instance:
        stale = old.execute_in_process(instance=instance, tags=dict(new.run_tags), raise_on_error=False)
        fresh = new.execute_in_process(instance=instance, raise_on_error=False)
    assert not stale.success
    assert not [e for e in stale.all_events if e.event_type_value == "STEP_SUCCESS"]  # nothing ran, nothing pushed
    failed = [e for e in stale.all_events if e.event_type_value == "STEP_FAILURE"]
    assert [e.step_key for e in failed] == ["load__input"]  # its first step
    error = error_of_failed_step(failed[0])
    assert error.status == 409 and not error.retryable
    assert str(path) in error.message and "Restart" in error.message and "docs/deployment.md" in error.message
    pushed = [e.step_output_data.metadata for e in fresh.all_events if e.event_type_value == "STEP_OUTPUT"
              and e.step_key == "load"]
    assert fresh.success and pushed[0]["dagster/row_count"].value == 5  # the version launched runs
    assert fresh.dagster_run.tags["connector_ops/pipeline_digest"] == new.tags["connector_ops/pipeline_digest"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_step_never_stores_another_version_of_a_file_its_run_was_launched_with(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``${file:two.csv}`` is read when its step runs: a run launched, then the CSV edited, pushed the new rows
    without notice. The pipeline's digest now covers the file's content, and the step storing it checks it:
    the step fails with a 409 naming the file — whether its process loaded the pipeline before the edit (the
    content it recorded differs) or after (its digest differs from the run's) — and nothing is pushed."""
    folder = tmp_path / "more"
    folder.mkdir()
    csv = folder / "two.csv"
    csv.write_text("id,name\n1,a\n2,b\n")
    (folder / "ver.yaml").write_text(
        'name: ver\nsteps:\n  - {id: load, action: etl.push, input: {platformFile: "${file:two.csv}"}}\n')
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    launched = build_definitions().resolve_job_def("ver")  # what the code location launches runs of
    csv.write_text("id,name\n1,a\n2,b\n3,c\n4,d\n5,e\n")  # edited after the launch
    edited = build_definitions().resolve_job_def("ver")  # a process that loads the pipeline now
    assert edited.run_tags[PIPELINE_DIGEST_TAG] != launched.run_tags[PIPELINE_DIGEST_TAG]
    with dg.instance_for_test() as instance:
        loaded_before = launched.execute_in_process(instance=instance, raise_on_error=False)
        loaded_after = edited.execute_in_process(instance=instance, tags=dict(launched.run_tags),
                                                 raise_on_error=False)
        relaunched = edited.execute_in_process(instance=instance, raise_on_error=False)
    for stale in (loaded_before, loaded_after):
        assert not stale.success
        assert not [e for e in stale.all_events if e.event_type_value == "STEP_SUCCESS"]  # nothing pushed
        (failed,) = [e for e in stale.all_events if e.event_type_value == "STEP_FAILURE"]
        error = error_of_failed_step(failed)
        assert failed.step_key == "load__input" and error.status == 409 and not error.retryable
    assert error_of_failed_step(next(e for e in loaded_before.all_events if e.event_type_value == "STEP_FAILURE")
                                ).message.startswith(f"{csv} (a ${{file:…}} of the pipeline) changed since the run")
    pushed = [e.step_output_data.metadata for e in relaunched.all_events if e.event_type_value == "STEP_OUTPUT"
              and e.step_key == "load"]
    assert relaunched.success and pushed[0]["dagster/row_count"].value == 5  # launched anew: the file as it is


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_run_launched_by_a_code_location_not_reloaded_since_the_file_changed_says_to_reload_it(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The ``dagster dev`` loop: the file is edited and a run launched without reloading the code location. The
    run worker (started for the run, in_process executor) loads the edited file; the run carries the location's
    old version. The 409 says the code location is stale and to reload it, not to restart the workers; once the
    file changes yet again, it says both sides are behind."""
    step = 'steps:\n  - {id: load, action: etl.push, input: {platformFile: "${file:%s}"}}\n'
    for name in ("two.csv", "five.csv", "three.csv"):
        (tmp_path / name).write_text("id,name\n1,a\n")
    path = tmp_path / "ver.yaml"
    path.write_text("name: ver\n" + step % "two.csv")
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(tmp_path))
    location = build_definitions().resolve_job_def("ver")  # what the code location loaded and launches runs of
    path.write_text("name: ver\n" + step % "five.csv")
    worker = build_definitions().resolve_job_def("ver")  # the run worker, started after the edit

    def refused() -> str:
        with dg.instance_for_test() as instance:
            run = worker.execute_in_process(instance=instance, tags=dict(location.run_tags), raise_on_error=False)
        (failed,) = [e for e in run.all_events if e.event_type_value == "STEP_FAILURE"]
        error = error_of_failed_step(failed)
        assert error.status == 409 and str(path) in error.message
        return error.message

    message = refused()
    assert "changed since the code location loaded it" in message
    assert "Reload the code location (UI: Deployment → Reload, or restart `dagster dev`" in message
    assert "Restart the processes" not in message and "Celery" not in message
    path.write_text("name: ver\n" + step % "three.csv")
    message = refused()
    assert "changed again" in message and "reload the code location" in message and "Celery workers" in message


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("launched_by", ["99.0.0+0123456789ab", f"{package_version()}+000000000000"],
                         ids=["another release", "another commit of this release"])
def test_a_step_never_runs_under_another_connector_ops_than_its_run_was_launched_by(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, launched_by: str) -> None:
    """A worker not yet upgraded (or not restarted since) is given a step of a run that an upgraded code
    location launched: the job it compiled carries its own version, the run the launcher's, and the step
    fails at once with a 409 saying which versions met and what to do. Deployed from git, every commit is
    the same package version: the sources' digest tells them apart."""
    (tmp_path / "two.csv").write_text("id,name\n1,a\n2,b\n")
    path = tmp_path / "ver.yaml"
    path.write_text('name: ver\nsteps:\n  - {id: load, action: etl.push, input: {platformFile: "${file:two.csv}"}}\n')
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(tmp_path))
    job = build_definitions().resolve_job_def("ver")
    assert job.run_tags["connector_ops/version"] == build_version()
    assert build_version().startswith(f"{package_version()}+")
    with dg.instance_for_test() as instance:
        upgraded = job.execute_in_process(instance=instance, tags={"connector_ops/version": launched_by},
                                          raise_on_error=False)
        same = job.execute_in_process(instance=instance, raise_on_error=False)
    assert not upgraded.success
    assert not [e for e in upgraded.all_events if e.event_type_value == "STEP_SUCCESS"]
    (failed,) = [e for e in upgraded.all_events if e.event_type_value == "STEP_FAILURE"]
    error = error_of_failed_step(failed)
    assert error.status == 409 and not error.retryable
    assert error.message.startswith(f"the run was launched by connector-ops {launched_by}, and the process running "
                                    f"step {failed.step_key} runs connector-ops {build_version()}: every process")
    # a run queued before the upgrade, when every process already runs this version: re-executing it works
    assert (f"If every process already runs {build_version()}, the run was launched (or queued) before the "
            "upgrade: re-execute it") in error.message
    assert "Otherwise upgrade or restart the processes that run steps" in error.message
    assert same.success


def test_the_source_digest_is_the_same_for_a_wheel_and_a_source_tree_and_changes_with_any_source(
        tmp_path: Path) -> None:
    """A wheel installs pipelines/ and resources/ inside connector_ops/, a source tree keeps them beside it:
    one set of sources, one digest. Any edit of a .py file changes it; compiled files do not."""
    tree, wheel = tmp_path / "tree", tmp_path / "wheel"
    for folder, source in (("connector_ops", "a = 1\n"), ("pipelines", "b = 2\n"), ("resources", "c = 3\n")):
        (tree / folder / "sub").mkdir(parents=True)
        (tree / folder / "sub" / "m.py").write_text(source)
        inside = wheel / "connector_ops" / ("" if folder == "connector_ops" else folder) / "sub"
        inside.mkdir(parents=True, exist_ok=True)
        (inside / "m.py").write_text(source)
    (tree / "connector_ops" / "sub" / "__pycache__").mkdir()
    (tree / "connector_ops" / "sub" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")

    def digest(root: Path, nested: bool) -> str:
        return source_digest({"connector_ops": root / "connector_ops",
                              "connector_ops.pipelines": root / ("connector_ops/pipelines" if nested else "pipelines"),
                              "connector_ops.resources": root / ("connector_ops/resources" if nested else "resources")})

    assert digest(tree, nested=False) == digest(wheel, nested=True)
    before = digest(tree, nested=False)
    (tree / "pipelines" / "sub" / "m.py").write_text("b = 2  # edited\n")
    assert digest(tree, nested=False) != before


def test_set_overrides_are_another_version_of_the_pipeline(tmp_path: Path) -> None:
    """A job compiled with ``--set`` differs from the file's own: its digest covers the overrides."""
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nsteps:\n  - {id: q, action: etl.query, input: {virtualFileId: abc, query: {a: x}}}\n")
    plain = compile_pipeline(load_pipeline(path)).job.tags["connector_ops/pipeline_digest"]
    edited = compile_pipeline(load_pipeline(path, overrides=["q.virtualFileId=xyz"])).job.tags
    assert edited["connector_ops/pipeline_digest"] != plain


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_re_execution_runs_the_pipeline_as_fixed_since_its_parent_failed(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The everyday recovery: a step fails, the file is fixed, the location reloaded, the run re-executed from
    failure. Dagster makes the re-execution from the job as the location has it now, but gives it the parent
    run's tags, old digest included (exactly what the UI's Re-execute and the daemon's retries do, through
    ``create_reexecuted_run`` against a real code server). Its steps are checked against the job it was made
    from: a process that loaded the fixed file runs them (a 409 "loaded the file before it changed" before),
    and one still holding the old file is refused (it ran the old steps before)."""
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "two.csv").write_text("id,name\n1,a\n2,b\n")
    path = folder / "ver.yaml"
    steps = ('name: ver\nsteps:\n  - {id: load, action: etl.push, input: {platformFile: "${file:two.csv}"}}\n'
             "  - {id: drop, action: etl.clean, input: {virtualFileId: %s}}\n")
    path.write_text(steps % "nope")  # a virtual file that does not exist: the step fails when it runs
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    broken = build_definitions().resolve_job_def("ver")
    with dg.instance_for_test() as instance:
        parent = broken.execute_in_process(instance=instance, raise_on_error=False).dagster_run
        assert parent.status == dg.DagsterRunStatus.FAILURE
        path.write_text(steps % '"${load.virtualFileId}"')
        fixed = build_definitions().resolve_job_def("ver")
        target = ModuleTarget("connector_ops.pipelines", None, str(tmp_path), "loc")
        with create_test_daemon_workspace_context(target, instance) as workspace:  # a code server, as deployed
            request = workspace.create_request_context()
            location = request.get_code_location("loc")
            job = next(iter(location.get_repositories().values())).get_full_job("ver")
            retries = [instance.create_reexecuted_run(parent_run=parent, request_context=request,
                                                      code_location=location, remote_job=job,
                                                      strategy=ReexecutionStrategy.FROM_FAILURE,
                                                      use_parent_run_tags=True) for _ in range(2)]
        old, new = broken.tags[PIPELINE_DIGEST_TAG], fixed.tags[PIPELINE_DIGEST_TAG]
        assert retries[0].tags[PIPELINE_DIGEST_TAG] == old != new  # the parent's tags, as Dagster gives them
        ran = execute_run(InMemoryJob(fixed), retries[0], instance)
        stale = execute_run(InMemoryJob(broken), retries[1], instance)
    assert ran.success and [e.step_key for e in ran.all_events if e.event_type_value == "STEP_SUCCESS"] == ["drop"]
    (failed,) = [e for e in stale.all_events if e.event_type_value == "STEP_FAILURE"]
    error = error_of_failed_step(failed)
    assert error.status == 409 and str(path) in error.message
    assert f"this process loaded version {old}, the run was launched with {new}" in error.message


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_running_schedule_whose_file_breaks_ticks_skipped_saying_why(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A schedule is turned on; its file is then broken and the code location reloaded. The daemon's next tick
    (its own tick loop, against a real code server) is skipped with the file's located problem, under the same
    schedule name, instead of failing with "Could not find schedule". A drive-folder sensor likewise."""
    import datetime
    import logging

    from dagster._core.scheduler.instigation import TickStatus
    from dagster._scheduler.scheduler import launch_scheduled_runs

    folder = tmp_path / "more"
    folder.mkdir()
    path = folder / "mini.yaml"
    good = ('name: mini\nschedule: "* * * * *"\nsteps:\n'
            "  - {id: q, action: etl.query, input: {virtualFileId: abc, query: {a: x}}}\n")
    path.write_text(good)
    (folder / "inbox.yaml").write_text('name: inbox\non_new_file: {folderId: root}\nsteps:\n  - {id: dl, action: '
                                       'drive.download_fille, input: {fileId: "${trigger.fileId}"}}\n')
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    target = ModuleTarget("connector_ops.pipelines", None, str(tmp_path), "loc")
    with dg.instance_for_test() as instance, create_test_daemon_workspace_context(target, instance) as workspace:
        repo = next(iter(workspace.create_request_context().get_code_location("loc").get_repositories().values()))
        instance.start_schedule(repo.get_schedule("mini_schedule"))
        path.write_text(good.replace("etl.query", "etl.queryy"))
        workspace.reload_code_location("loc")
        repo = next(iter(workspace.create_request_context().get_code_location("loc").get_repositories().values()))
        schedule = repo.get_schedule("mini_schedule")
        assert "broken_pipelines" in {j.name for j in repo.get_all_jobs()} and schedule.job_name == "broken_pipelines"
        end = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=61)
        list(launch_scheduled_runs(workspace, logging.getLogger("scheduler"), end, iteration_times={}))
        (tick,) = instance.get_ticks(schedule.get_remote_origin_id(), schedule.selector_id)
        assert tick.status == TickStatus.SKIPPED, tick
        assert tick.skip_reason.startswith(f"pipeline file {path} did not load: fix it, then reload the code location")
        assert f"{path}:4: step q: unknown action 'etl.queryy'" in tick.skip_reason
        assert not instance.get_runs()  # broken_pipelines is its target, never launched
        sensor = repo.get_sensor("inbox_on_new_file")
        assert sensor.job_name == "broken_pipelines"
    defs = build_definitions()
    with dg.build_sensor_context() as context:
        skipped = defs.get_sensor_def("inbox_on_new_file").evaluate_tick(context)
    assert not skipped.run_requests and "drive.download_fille" in (skipped.skip_message or "")
    assert {s.name for s in defs.schedules} >= {"mini_schedule", "sales_report_schedule"}
