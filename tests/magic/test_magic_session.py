"""``%connectors`` (environment, Definitions, session settings, masking) and ``%pipeline run``."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import pytest

from connector_ops import invoke
from connector_ops.magic import NotebookError
from connector_ops.ops import etl_push, etl_query
from connector_ops.ops.resources import VirtualFileStoreAdapter, dagster_resources
from connector_ops.pipelines.runner import PipelineRun
from tests.magic.conftest import SALES, html_of
from tests.virtual_files import StoreForTests

MISSING_LINK = "http://127.0.0.1:8765/files/0123456789abcdef0123456789abcdef"


def text_of(ip: Any, value: Any) -> str:
    return ip.display_formatter.format(value)[0]["text/plain"]


def definitions_module(monkeypatch: pytest.MonkeyPatch, name: str, defs: dg.Definitions) -> str:
    module = types.ModuleType(name)
    module.defs = defs  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, module)
    return f"{name}:defs"


def test_status_shows_the_resources_with_secrets_masked(ip: Any) -> None:
    ip.run_line_magic("connectors", "set CONNECTOR_OPS_MAIL_BACKEND=mailjet MAILJET_API_KEY=pub-key-123 "
                                    "MAILJET_API_SECRET=very-secret-456")
    ip.run_line_magic("connectors", "set database_url=postgresql+psycopg://bob:pa55word@127.0.0.1:1/db")
    status = ip.run_line_magic("connectors", "")
    text, html = text_of(ip, status), html_of(ip, status)
    for shown in (text, html):
        assert "pub-key-123" not in shown and "very-secret-456" not in shown and "pa55word" not in shown
        assert "MailjetResource" in shown and "bob:****@127.0.0.1:1/db" in shown
    assert "session variables: CONNECTOR_OPS_MAIL_BACKEND=mailjet, MAILJET_API_KEY=****" in text
    assert "api_key=****" in text and "api_secret=****" in text


def test_set_database_url_sends_the_next_calls_there(ip: Any, sales: dict[str, Any], tmp_path: Path) -> None:
    other = f"sqlite:///{tmp_path / 'other.db'}"
    ip.run_line_magic("connectors", f"set database_url={other}")
    vf = ip.run_line_magic("etl", 'push {"platformFile": {{sales}}}')["virtualFileId"]
    assert StoreForTests(database_url=other).exists(vf)
    ip.run_line_magic("connectors", "set database_url=")  # an empty value removes the setting
    assert not ip.magics_manager.registry["ConnectorMagics"].session.field_overrides
    with pytest.raises(NotebookError, match=r"\(404\): not found"):
        ip.run_line_magic("etl", f'iterate {{"content": "{vf}", "maxBatchSize": 1}}')


def test_environment_variable_settings_rebuild_the_resources(ip: Any, sales: dict[str, Any], tmp_path: Path) -> None:
    ip.run_line_magic("connectors", f"set CONNECTOR_OPS_FILES_DIR={tmp_path / 'elsewhere'}")
    again = ip.run_line_magic("connectors", f"add-file {SALES}")
    assert (tmp_path / "elsewhere" / again["id"]).is_file()
    ip.run_line_magic("connectors", "reset")
    assert "session" not in text_of(ip, ip.run_line_magic("connectors", ""))


def test_process_environment_changes_are_picked_up(ip: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = ip.run_line_magic("connectors", f"add-file {SALES}")
    monkeypatch.setenv("CONNECTOR_OPS_FILES_DIR", str(tmp_path / "moved"))
    second = ip.run_line_magic("connectors", f"add-file {SALES}")
    assert (tmp_path / "moved" / second["id"]).is_file() and not (tmp_path / "moved" / first["id"]).exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("set frob=1", "frob: no resource has this field; settable: drive.drive_dir"),
        ("set nothing.x=1", "nothing.x: no resource 'nothing'"),
        ("set virtual_files.nope=1", "virtual_files.nope: virtual_files has no field 'nope'"),
        # each names the setting once (it read "cannot set X: configuration error: X: …")
        ("set http_timeout_s=soon", "(400): cannot set http_timeout_s: Input should be a valid number"),
        ("set", "nothing to set"),
        ("set SMTP_PORT=S3CRETport CONNECTOR_OPS_MAIL_BACKEND=smtp",
         "connectors failed (400): cannot set SMTP_PORT: must be a port number (1 to 65535)"),
        ("set CONNECTOR_OPS_FILES_BACKEND=Dropbox",
         "connectors failed (400): cannot set CONNECTOR_OPS_FILES_BACKEND: must be one of local, database, "
         "got 'Dropbox'"),
        ("set database_url=SQLITE:///x.db", "connectors failed (400): cannot set database_url: names the database "
                                            "driver 'SQLITE', which is written in lower case (sqlite); use"),
        ("set justaword", "'justaword': write NAME=value"),
        ("use no_such_module_xyz:defs", "cannot import 'no_such_module_xyz'"),
        ("use connector_ops:invoke", "connector_ops:invoke is a function, not a dagster Definitions"),
        ("frobnicate", "unknown %connectors command 'frobnicate'"),
        ("add-file /no/such/file.csv", "files.add failed (400): path: /no/such/file.csv is not a readable file"),
    ],
)
def test_connectors_errors(ip: Any, line: str, message: str) -> None:
    with pytest.raises(NotebookError) as caught:
        ip.run_line_magic("connectors", line)
    assert message in caught.value.summary()
    assert "S3CRET" not in caught.value.summary() and "(500)" not in caught.value.summary()
    status = text_of(ip, ip.run_line_magic("connectors", ""))
    assert "session settings" not in status  # a refused setting is not kept


def test_use_definitions_resolves_env_vars(ip: Any, sales: dict[str, Any], env: dict[str, str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    defs = dg.Definitions(resources=dagster_resources())
    assert isinstance(defs.resources["virtual_files"].database_url, dg.EnvVar)
    target = definitions_module(monkeypatch, "magic_test_defs", defs)
    status = text_of(ip, ip.run_line_magic("connectors", f"use {target}"))
    assert f"source: Definitions {target}" in status
    live = ip.magics_manager.registry["ConnectorMagics"].session.resources()["virtual_files"]
    assert live.database_url == env["CONNECTOR_OPS_DATABASE_URL"]
    vf = ip.run_line_magic("etl", 'push {"platformFile": {{sales}}}')["virtualFileId"]
    assert invoke("etl.iterate", {"content": vf, "maxBatchSize": 1})["hasNext"]
    ip.run_line_magic("connectors", "use env")
    assert "source: environment" in text_of(ip, ip.run_line_magic("connectors", ""))


def test_use_definitions_with_an_unset_variable_is_one_line(ip: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAGIC_TEST_UNSET_URL", raising=False)
    store = VirtualFileStoreAdapter(database_url=dg.EnvVar("MAGIC_TEST_UNSET_URL"))
    defs = dg.Definitions(resources={"virtual_files": store})
    with pytest.raises(NotebookError, match=r"cannot be built: .*MAGIC_TEST_UNSET_URL"):
        ip.run_line_magic("connectors", f"use {definitions_module(monkeypatch, 'magic_unset_defs', defs)}")


# -- %pipeline ----------------------------------------------------------------------------------------

def test_pipeline_lists_and_runs_a_job_with_the_session_resources(ip: Any) -> None:
    assert "first_etl" in text_of(ip, ip.run_line_magic("pipeline", ""))
    run = ip.run_line_magic("pipeline", "run first_etl -o run")
    assert isinstance(run, PipelineRun) and run.success and ip.user_ns["run"] is run
    assert list(run.status) == ["sample_file", "etl_push", "etl_query", "etl_pull"]
    assert set(run.status.values()) == {"success"}
    vf = run["etl_push"]["virtual_file_id"]
    north = invoke("etl.query", {"virtualFileId": vf, "query": {"region": "North"}})
    assert run["etl_query"]["result"] == north["result"]
    html = html_of(ip, run)
    assert "pipeline first_etl succeeded" in html and "etl_pull" in html and "north_sales.csv" in html
    # the magics see what the pipeline produced: same resources
    rows = ip.run_line_magic("etl", 'query {"virtualFileId": "{{run[\'etl_push\'].virtual_file_id}}", '
                                    '"query": {"region": "West"}}')
    assert rows["result"] and {r["region"] for r in rows["result"]} == {"West"}


def test_pipeline_failure_is_one_line_and_keeps_the_steps(ip: Any, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    @dg.job(config={"ops": {
        "etl_push": {"config": {"platformFile": {"name": "x.csv", "contentType": "text/csv", "link": MISSING_LINK}}},
        "etl_query": {"config": {"query": {}}},
    }})
    def broken():
        etl_query(virtual_file_id=etl_push())

    defs = dg.Definitions(jobs=[broken], resources=dagster_resources())
    target = definitions_module(monkeypatch, "magic_broken_defs", defs)
    ip.run_line_magic("connectors", f"use {target}")
    with pytest.raises(NotebookError) as caught:
        ip.run_line_magic("pipeline", "run broken -o run")
    assert caught.value.summary() == "pipeline broken failed (404): step etl_push: etl.push failed (404): not found"
    run = ip.user_ns["run"]
    assert not run.success and run.status["etl_push"] == "failed" and "etl_query" not in run.steps
    assert run.errors["etl_push"].status == 404
    assert "pipeline broken FAILED" in capsys.readouterr().out  # the step table is shown before the error


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("run no_such_job", "no pipeline or job named 'no_such_job'; jobs: drive_inbox, first_etl"),
        ("run first_etl --set a.b=1", "--set works with YAML pipelines only"),
        ("run missing.yaml", "no pipeline file 'missing.yaml'"),
        ("walk first_etl", "unknown %pipeline command 'walk'"),
    ],
)
def test_pipeline_usage_errors(ip: Any, line: str, message: str) -> None:
    with pytest.raises(NotebookError) as caught:
        ip.run_line_magic("pipeline", line)
    assert message in caught.value.summary()


@pytest.mark.parametrize(
    ("magic", "line", "summary"),
    [
        ("pipeline", "run", "pipeline failed (400): %pipeline run: the following arguments are required: target"),
        ("pipeline", "run --bogus x", "pipeline failed (400): %pipeline run: unrecognized arguments: --bogus"),
        ("pipeline", "export a.yaml b.yaml",
         "pipeline export failed (400): %pipeline export: unrecognized arguments: b.yaml"),
        ("connectors", "add-file",
         "connectors failed (400): %connectors add-file: the following arguments are required: path"),
    ],
)
def test_usage_errors_give_argparse_reason_and_print_nothing(ip: Any, sales: dict[str, Any],
                                                            capsys: pytest.CaptureFixture[str],
                                                            magic: str, line: str, summary: str) -> None:
    ip.run_line_magic("pipeline", "record")
    ip.run_line_magic("etl", 'push {"platformFile": {{sales}}}')  # a recorded step: export reads its words
    capsys.readouterr()
    with pytest.raises(NotebookError) as caught:
        ip.run_line_magic(magic, line)
    assert caught.value.summary() == summary
    assert capsys.readouterr().err == ""


def test_pipeline_without_resources_is_one_line(ip: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    @dg.job
    def needs_store():
        etl_query()

    bare = dg.Definitions(jobs=[needs_store])
    ip.run_line_magic("connectors", f"use {definitions_module(monkeypatch, 'magic_bare', bare)}")
    with pytest.raises(NotebookError, match=r"^pipeline needs_store failed \(400\): resource with key 'virtual_files'"):
        ip.run_line_magic("pipeline", "run needs_store")


def test_yaml_pipeline_by_name_uses_step_ids_and_spec_fields(ip: Any) -> None:
    run = ip.run_line_magic("pipeline", "run retail_customers -o run")
    assert run.success and list(run.status) == ["load", "drop_others", "export"]
    assert set(run.status.values()) == {"success"}
    vf = run["load"]["virtualFileId"]
    assert run["drop_others"]["deletedCount"] > 0
    rows = invoke("etl.iterate", {"content": vf, "maxBatchSize": 1000})["content"]
    assert rows and {r["segment"] for r in rows} == {"retail"}
    assert run["export"]["platformFile"]["name"] == "retail_customers.csv"
    html = html_of(ip, run)
    assert "etl.delete_rows" in html and "pipeline retail_customers succeeded" in html


YAML_FAILING = """
name: debug_me
steps:
  - id: load
    action: etl.push
    input:
      platformFile: "${file:sales.csv}"
  - id: first
    action: etl.iterate
    input: {content: "${load.virtualFileId}", maxBatchSize: 2}
  - id: missing
    action: etl.query
    input: {virtualFileId: does-not-exist, query: {region: North}}
"""


def test_yaml_file_failure_keeps_outputs_for_debugging(ip: Any, tmp_path: Path) -> None:
    (tmp_path / "sales.csv").write_bytes(SALES.read_bytes())
    pipeline = tmp_path / "debug.yaml"
    pipeline.write_text(YAML_FAILING)
    with pytest.raises(NotebookError) as caught:
        ip.run_line_magic("pipeline", f"run {pipeline} -o run")
    assert caught.value.summary().startswith("pipeline debug_me failed (500): step missing: etl.query failed (500)")
    run = ip.user_ns["run"]
    assert run.status["load"] == "success" and run.status["missing"] == "failed"
    assert len(run["first"]["content"]) == 2
    # fix the step with --set, and it runs
    ip.user_ns["vf"] = run["load"]["virtualFileId"]
    fixed = ip.run_line_magic("pipeline", f"run {pipeline} --set missing.virtualFileId={ip.user_ns['vf']}")
    assert fixed.success and fixed["missing"]["result"]


def test_yaml_validation_problems_are_one_line(ip: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nsteps:\n  - id: a\n    action: etl.nope\n    input: {}\n")
    with pytest.raises(NotebookError) as caught:
        ip.run_line_magic("pipeline", f"run {bad}")
    summary = caught.value.summary()
    assert summary.startswith("pipeline bad.yaml failed (400): ") and "etl.nope" in summary and "\n" not in summary


def test_a_bad_setting_of_another_connector_leaves_etl_cells_working(ip: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECTOR_OPS_MAIL_BACKEND", "bogus")
    assert ip.run_line_magic("etl", 'iterate {"content": [1, 2], "maxBatchSize": 5}') == {"content": [1, 2],
                                                                                          "hasNext": False}
    with pytest.raises(NotebookError) as failed:
        ip.run_cell_magic("mail", "send_transactional_message", "{}")
    assert str(failed.value) == ("mail.send_transactional_message failed (500): configuration error: "
                                 "CONNECTOR_OPS_MAIL_BACKEND: must be one of outbox, mailjet, smtp, got 'bogus'")


YAML_NOTIFY = """
name: mailed
notify:
  - when: [success]
    message:
      from: "Reports <reports@example.com>"
      recipients: [{to: team@example.com}]
      subject: "mailed: ${run.status}"
      templateId: 1
      templateVariables: {status: "${run.status}"}
steps:
  - id: load
    action: etl.push
    input:
      platformFile: "${file:sales.csv}"
  - id: trim
    action: etl.delete_rows
    input: {virtualFileId: "${load.virtualFileId}", request: {no_such_column: "x"}}
"""


def test_a_yaml_pipeline_runs_as_the_command_runs_it(ip: Any, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """docs/pipelines.md: ``%pipeline run`` mails what ``notify:`` says right after the run, as the command
    does; it sent nothing. And a step's warning (a filter naming no column) is shown below the cell."""
    (tmp_path / "sales.csv").write_bytes(SALES.read_bytes())
    pipeline = tmp_path / "mailed.yaml"
    pipeline.write_text(YAML_NOTIFY)
    run = ip.run_line_magic("pipeline", f"run {pipeline}")
    assert run.success and run["trim"]["deletedCount"] == 0
    mail = ip.magics_manager.registry["ConnectorMagics"].session.resources()["mail"]
    outbox = Path(mail.outbox_dir)
    assert [p.suffix for p in outbox.glob("*.json")] == [".json"]
    err = capsys.readouterr().err
    assert "warning: trim: " in err and "no_such_column" in err


def test_a_yaml_pipeline_with_a_step_too_long_for_its_field_says_so_below_the_cell(
        ip: Any, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``schedule: "*/90 * * * *"`` fires hourly: the loader's notice shows below the cell, once, at its line."""
    (tmp_path / "sales.csv").write_bytes(SALES.read_bytes())
    pipeline = tmp_path / "every90.yaml"
    pipeline.write_text('name: every90\nschedule: "*/90 * * * *"\nsteps:\n  - id: load\n    action: etl.push\n'
                        '    input: {platformFile: "${file:sales.csv}"}\n')
    assert ip.run_line_magic("pipeline", f"run {pipeline}").success
    notices = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert notices == [f"warning: {pipeline}:2: `schedule` '*/90 * * * *': `*/90` in the minute field matches 0 "
                       "only, so cron fires it at minute 0 of each hour the other fields allow, not every 90 minutes; "
                       "list the times it should fire, or split it over pipeline files with a schedule each"]


def test_cd_does_not_move_the_store(ip: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default home, unset (./.connector_ops), and a relative session variable: ``%cd`` then ``%etl``
    (after a setting rebuilt the resources) found 'virtual file … not found' in a new, empty store."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.delenv("CONNECTOR_OPS_HOME")  # the env fixture set them: restored after the test
    monkeypatch.delenv("CONNECTOR_OPS_DATABASE_URL")
    monkeypatch.chdir(first)
    ip.run_line_magic("connectors", "set CONNECTOR_OPS_OUTBOX_DIR=outbox-here")
    ip.user_ns["frame"] = pd.DataFrame({"city": ["Paris", "Lyon"]})
    ip.run_cell("%etl push --df frame -o pushed")
    ip.run_line_magic("cd", str(second))
    assert Path.cwd() == second
    ip.run_line_magic("connectors", "set CONNECTOR_OPS_MAIL_BACKEND=outbox")  # the resources are rebuilt
    ip.run_cell('back = %etl pull --df {"virtualFileId": "{{pushed.virtualFileId}}"}')
    assert ip.user_ns["back"]["city"].tolist() == ["Paris", "Lyon"]
    ip.run_line_magic("mail", 'send_transactional_message {"from": "a@example.com", "recipients": [{"to": '
                              '"b@example.com"}], "subject": "s", "templateId": 1, "templateVariables": "{}"}')
    assert len(list((first / "outbox-here").glob("*.json"))) == 1
    assert (first / ".connector_ops" / "virtual_files.db").is_file()
    assert list(second.iterdir()) == []
