"""Push with ``parameters.onRowError: quarantine`` (issue 12, item 2): good rows load, bad lines are kept.

Both databases, through the fast and the row-by-row CSV paths, NDJSON, the CLI and a Dagster op: the
rejects virtual file holds each refused line's number, reason and text; `fail` (the default) is unchanged.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.cli import main
from connector_ops.etl import actions, ndjson_fast, push_csv
from connector_ops.ops import etl_push
from connector_ops.ops.factory import error_of_failed_step
from connector_ops.pipelines.dsl import compile_pipeline, load_pipeline
from connector_ops.pipelines.runner import run_compiled
from connector_ops.resources.virtual_files import sqlite_loader
from tests.pipeline_files import write

RAGGED = b"id,name\n1,Ann\n2,Bob,extra\n3,Cy\n\n4\n5,\"multi\nline\"\n"
REASON = "expected 2 fields, found {} (a ragged row; check the delimiter and the quoting)"


def rows(vf: str, resources: dict[str, Any]) -> list[dict]:
    return resources["virtual_files"].summary(vf, 100)[2]  # every row (files here are small), no cursor moved


def push(resources: dict[str, Any], data: bytes, name: str, **params: Any) -> dict:
    pf = resources["platform_files"].add_bytes(data, name).to_json()
    return invoke("etl.push", {"platformFile": pf, "parameters": {"onRowError": "quarantine", **params}}, resources)


@pytest.mark.parametrize("fast", [True, False])
def test_ragged_csv_rows_go_to_the_rejects_file(resources, monkeypatch, fast):
    monkeypatch.setattr(push_csv, "FAST", fast)
    out = push(resources, RAGGED, "people.csv")
    assert set(out) == {"virtualFileId", "rejectsFileId"}
    assert rows(out["virtualFileId"], resources) == [
        {"id": "1", "name": "Ann"}, {"id": "3", "name": "Cy"}, {"id": "5", "name": "multi\nline"}]
    assert rows(out["rejectsFileId"], resources) == [
        {"line": "3", "reason": REASON.format(3), "text": "2,Bob,extra"},
        {"line": "6", "reason": REASON.format(1), "text": "4"},
    ]


def test_a_clean_file_has_an_empty_rejects_file(resources):
    out = push(resources, b"id,name\n1,Ann\n", "clean.csv")
    assert rows(out["virtualFileId"], resources) == [{"id": "1", "name": "Ann"}]
    assert rows(out["rejectsFileId"], resources) == []


def test_bad_ndjson_lines_go_to_the_rejects_file(resources):
    data = b'{"a": "1"}\nnot json\n[1, 2]\n\n{"a": "2", "b": null}\n'
    out = push(resources, data, "events.ndjson")
    assert rows(out["virtualFileId"], resources) == [{"a": "1"}, {"a": "2"}]  # null stays missing
    rejected = rows(out["rejectsFileId"], resources)
    assert [(r["line"], r["text"]) for r in rejected] == [("2", "not json"), ("3", "[1, 2]")]
    assert rejected[0]["reason"].startswith("malformed JSON (Expecting value, column 1)")
    assert rejected[1]["reason"] == "expected a JSON object (a row), found list"


@pytest.mark.parametrize("fast", [True, False])
def test_ndjson_with_a_quarantine_takes_the_columnar_path_until_a_line_is_bad(resources, monkeypatch, fast):
    """A file the columnar path reads whole has no line the row reader would refuse: it loads column-wise
    with an empty rejects file. A bad line sends the file to the row reader, which refuses that line; both
    ways give what the row reader alone gives."""
    monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)  # the columnar path for small files too
    monkeypatch.setattr(ndjson_fast, "FAST", fast)
    ran: list[str] = []
    real = actions.read_json
    monkeypatch.setattr(actions, "read_json", lambda *a, **k: ran.append("rows") or real(*a, **k))
    clean = b"".join(b'{"a": "%d", "n": %d}\n' % (i, i) for i in range(50))
    out = push(resources, clean, "events.ndjson")
    assert rows(out["virtualFileId"], resources)[-1] == {"a": "49", "n": "49"}
    assert rows(out["rejectsFileId"], resources) == []
    assert ran == ([] if fast else ["rows"])
    out = push(resources, clean + b"not json\n" + clean, "events.ndjson")
    assert len(rows(out["virtualFileId"], resources)) == 100
    assert [(r["line"], r["text"]) for r in rows(out["rejectsFileId"], resources)] == [("51", "not json")]
    assert ran[-1] == "rows"


def test_what_loses_the_line_structure_still_fails_and_leaves_nothing(resources):
    before = resources["virtual_files"].inventory()
    with pytest.raises(ConnectorError) as err:
        push(resources, b'id,name\n1,"unterminated\n', "bad.csv")
    assert err.value.status == 400 and "malformed CSV" in err.value.message
    with pytest.raises(ConnectorError) as err:
        push(resources, b"id,name\n1,\xff\n", "bad.csv", encoding="utf-8")
    assert err.value.status == 400 and "parameters.encoding" in err.value.message
    assert resources["virtual_files"].inventory() == before  # neither the rows nor a rejects file


def test_fail_stays_the_default_and_keeps_the_specs_output(resources):
    pf = resources["platform_files"].add_bytes(RAGGED, "people.csv").to_json()
    with pytest.raises(ConnectorError) as err:
        invoke("etl.push", {"platformFile": pf}, resources)
    assert err.value.message == "platformFile: line 3: " + REASON.format(3)
    clean = resources["platform_files"].add_bytes(b"id\n1\n", "ok.csv").to_json()
    assert set(invoke("etl.push", {"platformFile": clean}, resources)) == {"virtualFileId"}
    with pytest.raises(ConnectorError) as err:
        invoke("etl.push", {"platformFile": clean, "parameters": {"onRowError": "skip"}}, resources)
    assert err.value.status == 400 and "parameters.onRowError" in err.value.message


def test_the_op_keeps_one_output_and_records_the_rejects_in_its_metadata(resources):
    """A second op output would break every graph passing ``etl_push()`` on as one value."""
    bad = resources["platform_files"].add_bytes(RAGGED, "people.csv").to_json()

    @dg.job
    def load():
        etl_push()

    quarantined = load.execute_in_process(resources=resources, run_config={"ops": {"etl_push": {"config": {
        "platformFile": bad, "parameters": {"onRowError": "quarantine"}}}}})
    (event,) = [e for e in quarantined.all_events if e.event_type == dg.DagsterEventType.STEP_OUTPUT]
    assert event.step_output_data.output_name == "virtual_file_id"
    rejects = event.step_output_data.metadata["rejects_file_id"].value
    assert len(rows(rejects, resources)) == 2
    plain = resources["platform_files"].add_bytes(b"id\n1\n", "ok.csv").to_json()
    default = load.execute_in_process(resources=resources, run_config={"ops": {"etl_push": {"config": {
        "platformFile": plain}}}})
    (event,) = [e for e in default.all_events if e.event_type == dg.DagsterEventType.STEP_OUTPUT]
    assert "rejects_file_id" not in event.step_output_data.metadata


QUARANTINING = """
    name: q
    steps:
      - id: load
        action: etl.push
        input: {{platformFile: "${{file:people.csv}}", parameters: {parameters}}}
      - id: bad
        action: etl.pull
        input: {{virtualFileId: "${{load.rejectsFileId}}", exportType: csv,
                exportName: "rejects-of-${{load.rejectsFileId}}.csv"}}
"""


def quarantining(tmp_path: Path, parameters: str = "{onRowError: quarantine}") -> Path:
    (tmp_path / "people.csv").write_bytes(RAGGED)
    return write(tmp_path, QUARANTINING.format(parameters=parameters), "q.yaml")


def test_a_pipeline_pulls_the_rejects_of_a_quarantining_push(tmp_path, resources):
    """``${load.rejectsFileId}`` wired straight (virtualFileId) and interpolated (exportName, a resolver)."""
    outcome = run_compiled(compile_pipeline(load_pipeline(quarantining(tmp_path))), resources)
    assert outcome.success, outcome.failure()
    rejects = outcome.steps["load"]["rejectsFileId"]
    exported = outcome.steps["bad"]["platformFile"]
    assert exported["name"] == f"rejects-of-{rejects}.csv"
    text = resources["platform_files"].read_bytes(exported).decode()
    assert list(csv.reader(io.StringIO(text))) == [
        ["line", "reason", "text"], ["3", REASON.format(3), "2,Bob,extra"], ["6", REASON.format(1), "4"]]
    assert rows(outcome.steps["load"]["virtualFileId"], resources) == [
        {"id": "1", "name": "Ann"}, {"id": "3", "name": "Cy"}, {"id": "5", "name": "multi\nline"}]


@pytest.mark.parametrize(("parameters", "sets"), [
    ("{csvDelimiter: ','}", "does not set `parameters.onRowError`"),
    ("{onRowError: fail}", 'sets `parameters.onRowError` to "fail"'),
    ('{onRowError: "${env.ON_ROW_ERROR}"}',
     "sets `parameters.onRowError` by a reference (${env.ON_ROW_ERROR}), known only when the run starts"),
])
def test_validate_refuses_the_rejects_of_a_push_that_may_not_quarantine(tmp_path, capsys, parameters, sets):
    path = quarantining(tmp_path, parameters)
    with pytest.raises(SystemExit) as exited:
        main(["pipeline", "validate", str(path)])
    assert exited.value.code == 1
    message = (f"${{load.rejectsFileId}}: etl.push's output has rejectsFileId only with `parameters.onRowError: "
               f"quarantine`, and step 'load' {sets}; write `parameters.onRowError: quarantine` (literally) in its "
               "input to refer to rejectsFileId")
    assert f"step bad: {message}" in capsys.readouterr().out


def test_a_launchpad_edit_that_drops_the_quarantine_fails_before_loading(tmp_path, resources):
    """The run config is editable: without the quarantine the step's rejects would be missing for the later
    steps, so the step is a 400 naming the field before the file is read, and nothing is loaded."""
    job = compile_pipeline(load_pipeline(quarantining(tmp_path))).job
    before = resources["virtual_files"].inventory()
    result = job.execute_in_process(resources=resources, raise_on_error=False, run_config={"ops": {
        "load": {"config": {"parameters": {"onRowError": "fail"}}}}})
    assert not result.success
    (failed,) = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    error = error_of_failed_step(failed)
    assert (failed.step_key, error.status) == ("load", 400)
    assert error.message == ("parameters.onRowError: must be 'quarantine': the pipeline's later steps refer to "
                             "this step's rejectsFileId")
    assert resources["virtual_files"].inventory() == before
