"""``check:`` on an asset step (both databases): evaluated in each run, declared for the UI, rows kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops.ops.factory import error_of_failed_step
from connector_ops.pipelines.broken import broken_pipelines_job
from connector_ops.pipelines.dsl import PipelineError, Problem, compile_pipeline, load_pipeline
from connector_ops.pipelines.runner import run_compiled
from tests.pipeline_files import write

CSV = b"city,n\nParis,1\nRome,x\nOslo,3\nLima,four\n"

PIPELINE = """
    name: cities
    steps:
      - id: load
        action: etl.push
        asset: cities/raw
        check:
          schema: {{city: {{type: string, required: true}}, n: {{type: integer}}}}
          max_rejected: {limit}
          severity: WARN
          blocking: {blocking}
        input: {{platformFile: {pf}}}
      - id: export
        action: etl.pull
        input: {{virtualFileId: "${{load.virtualFileId}}", exportType: csv, exportName: cities.csv}}
"""


def compiled(tmp_path: Path, files: Any, limit: Any = 0, blocking: bool = False) -> Any:
    pf = json.dumps(files.add_bytes(CSV, "cities.csv").to_json())
    text = PIPELINE.format(pf=pf, limit=limit, blocking=str(blocking).lower())
    return compile_pipeline(load_pipeline(write(tmp_path, text)))


def evaluations(result: Any) -> list[Any]:
    return [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]


def test_each_run_evaluates_the_check_with_the_rows_validate_rejected(tmp_path: Path, resources: dict, files: Any,
                                                                     store: Any) -> None:
    pipeline = compiled(tmp_path, files, limit=1)
    key = dg.AssetKey(["cities", "raw"])
    defs = dg.Definitions(assets=pipeline.assets, asset_checks=pipeline.checks, jobs=[pipeline.job],
                          resources=resources)
    assert defs.resolve_asset_graph().asset_check_keys == {dg.AssetCheckKey(key, "validate")}
    instance = dg.DagsterInstance.ephemeral()
    result = defs.resolve_job_def("cities").execute_in_process(instance=instance)
    assert result.success  # a failed WARN check is a finding; the export still ran
    assert result.output_for_node("export", "platform_file")
    [found] = evaluations(result)
    assert found.asset_key == key and found.check_name == "validate"
    assert found.passed is False and found.severity == dg.AssetCheckSeverity.WARN
    meta = found.metadata
    rejected = store.rows(meta["rejects_virtual_file_id"].value)
    assert meta["rejected_count"].value == len(rejected) == 2 and meta["dagster/row_count"].value == 4
    assert [r.data for r in meta["rejected_sample"].value.records] == [
        {"error": r["error"], "content": r["content"]} for r in rejected]
    assert all("n" in r["error"] for r in rejected)
    assert found.description == "2 of 4 rows rejected (at most 1 rejected rows)"
    # the declared check executes again from the UI, on the latest materialisation the run recorded
    again = dg.materialize([*pipeline.checks], resources=resources, instance=instance,
                           selection=dg.AssetSelection.checks_for_assets(key))
    [found_again] = evaluations(again)
    assert found_again.passed is False and found_again.metadata["rejected_count"].value == 2


def test_a_share_threshold_passes(tmp_path: Path, resources: dict, files: Any) -> None:
    pipeline = compiled(tmp_path, files, limit=0.5)
    result = pipeline.job.execute_in_process(resources=resources)
    [found] = evaluations(result)
    assert found.passed is True and found.metadata["rejected_share"].value == 0.5


def test_a_blocking_check_stops_what_comes_after(tmp_path: Path, resources: dict, files: Any) -> None:
    pipeline = compiled(tmp_path, files, limit=0, blocking=True)
    result = pipeline.job.execute_in_process(resources=resources, raise_on_error=False)
    assert not result.success
    [found] = evaluations(result)
    assert found.passed is False
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "load__check"
    assert "blocking check validate of cities/raw failed (422): 2 of 4 rows rejected" in \
        failure.step_failure_data.user_failure_data.description
    assert "export" not in {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}


def test_a_failed_blocking_check_is_reported_as_the_check_with_its_own_message(
        tmp_path: Path, resources: dict, files: Any) -> None:
    """Not "step load failed (500): dagster._core.definitions.events.Failure: …": the asset step succeeded."""
    run = run_compiled(compiled(tmp_path, files, limit=0, blocking=True), resources)
    assert not run.success
    assert run.status["load"] == "success" and run.status["load__check"] == "failed"
    assert run.status["export"] in ("skipped", "not run")
    (step, error), = run.errors.items()
    assert step == "load__check" and error.status == 422
    assert error.body == {"message": "2 of 4 rows rejected (at most 0 rejected rows)"}
    assert error.summary() == ("blocking check validate of cities/raw failed (422): 2 of 4 rows rejected "
                               "(at most 0 rejected rows)")
    assert run.failure().status == 422 and "dagster" not in run.failure().summary()


def test_a_failure_without_status_reads_as_its_description() -> None:
    """A ``dg.Failure`` of no action (the broken_pipelines job's) is its description, not its class path."""
    job = broken_pipelines_job([Problem("x.yaml", 3, "unknown action 'etl.nope'", "s")])
    result = job.execute_in_process(raise_on_error=False)
    [failed] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    error = error_of_failed_step(failed)
    assert error.status == 500
    assert error.message == "1 problem(s) in pipeline files:\nx.yaml:3: step s: unknown action 'etl.nope'"


def test_check_problems_are_reported_with_lines(tmp_path: Path) -> None:
    path = write(tmp_path, """
        name: bad
        steps:
          - id: p
            action: etl.pull
            check: {schema: {a: {type: string}}}
            input: {virtualFileId: v, exportType: csv, exportName: a.csv}
          - id: e
            action: etl.pull
            asset: a/export
            check: {schema: {a: {type: string}}}
            input: {virtualFileId: v, exportType: csv, exportName: a.csv}
          - id: l
            action: etl.push
            asset: a/raw
            check:
              schema: {a: {type: text}}
              max_rejected: -1
              severity: fatal
              blocking: maybe
              extra: 1
            input: {platformFile: "${file:x.csv}"}
    """)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    text = str(caught.value)
    assert "p.yaml:5: step p: `check` validates an asset's data: add `asset: <key>` to the step" in text
    assert "step e: `check` runs Validate on a virtual file; this step's asset is its `platformFile`" in text
    assert "step l: unknown key 'extra' in check" in text
    assert 'step l: schema.a.type: unknown type "text"' in text
    assert "step l: max_rejected must be a count" in text
    assert "step l: `severity` must be ERROR or WARN, got 'fatal'" in text
    assert "step l: `blocking` must be true or false" in text


def test_the_cli_prints_the_finding_and_where_the_rejected_rows_are(tmp_path: Path, env: dict, files: Any,
                                                                     capsys: pytest.CaptureFixture) -> None:
    from connector_ops.cli import main

    pf = json.dumps(files.add_bytes(CSV, "cities.csv").to_json())
    path = write(tmp_path, PIPELINE.format(pf=pf, limit=1, blocking="false"))
    assert main(["pipeline", "run", str(path)]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("check ")]
    assert line.startswith("check validate of cities/raw: failed (WARN) — 2 of 4 rows rejected (at most 1 rejected "
                           "rows); rejected rows: ")
    assert Path(line.rsplit(": ", 1)[1]).read_text().startswith("error,content")
