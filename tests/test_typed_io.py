"""Typed I/O (issue 12, item 5): what flows between steps has a Dagster type, and a wrong wiring is caught
before the action runs — at load time in YAML, at the input's type check in a Python graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from connector_ops.ops import etl_pull, etl_push, etl_query
from connector_ops.ops.factory import error_of_failed_step
from connector_ops.pipelines.dsl import PipelineError, load_pipeline
from tests.pipeline_files import write


def test_op_outputs_and_inputs_carry_the_types() -> None:
    assert etl_push.outs["virtual_file_id"].dagster_type.display_name == "VirtualFileId"
    assert etl_pull.outs["platform_file"].dagster_type.display_name == "PlatformFile"
    assert etl_pull.ins["virtual_file_id"].dagster_type.display_name == "VirtualFileId"
    assert etl_push.ins["platform_file"].dagster_type.display_name == "PlatformFile"


def test_a_yaml_reference_of_the_wrong_kind_is_a_load_error(tmp_path: Path) -> None:
    path = write(tmp_path, """
        name: crossed
        steps:
          - id: load
            action: etl.push
            input: {platformFile: "${file:x.csv}"}
          - id: export
            action: etl.pull
            input: {virtualFileId: "${load.virtualFileId}", exportType: csv, exportName: a.csv}
          - id: again
            action: etl.push
            input: {platformFile: "${load.virtualFileId}"}
          - id: wrong
            action: etl.query
            input: {virtualFileId: "${export.platformFile}", query: {}}
          - id: fine
            action: etl.query
            input: {virtualFileId: "${export.platformFile.id}", query: {}}
    """)
    (tmp_path / "x.csv").write_text("a\n1\n")
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    text = str(caught.value)
    assert ("p.yaml:11: step again: ${load.virtualFileId} is a virtual file id (etl.push's virtualFileId); "
            "`platformFile` takes a platform file") in text
    assert ("step wrong: ${export.platformFile} is a platform file (etl.pull's platformFile); `virtualFileId` "
            "takes a virtual file id") in text
    assert "step fine" not in text and "step export" not in text  # a part of a value, the right kind: fine
    assert len(caught.value.problems) == 2


def test_a_python_wiring_of_the_wrong_kind_fails_at_the_input(resources: dict[str, Any], files: Any) -> None:
    @dg.job
    def crossed() -> None:
        etl_push(platform_file=etl_push())  # a virtual file id where a platform file goes

    pf = files.add_bytes(b"a\n1\n", "a.csv").to_json()
    result = crossed.execute_in_process(resources=resources, raise_on_error=False, run_config={
        "ops": {"etl_push": {"config": {"platformFile": pf}}}})
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "etl_push_2"
    text = str(failure.event_specific_data.error)
    assert 'Type check failed for step input "platform_file"' in text
    assert "expected a platform file (an object with a link), got a virtual file id" in text
    error = error_of_failed_step(failure)  # what a run reports: the field, a 400, no Dagster class path
    assert (error.status, error.body) == (400, {"message": "platformFile: expected a platform file (an object "
                                                           "with a link), got a virtual file id"})


def test_rows_wired_where_a_virtual_file_id_goes_are_a_load_error(tmp_path: Path) -> None:
    """Query's ``result`` (a list of rows) into ``virtualFileId`` or ``foreach.virtualFileId``: the output field's
    type against the input field's, at file:line (it passed validate, and the run failed with a 500 naming
    DagsterTypeCheckDidNotPass and quoting rows). A list into a field that takes one is fine."""
    path = write(tmp_path, """
        name: rows_as_vf
        steps:
          - id: q
            action: etl.query
            input: {virtualFileId: abc, query: {}}
          - id: out
            action: etl.pull
            input: {virtualFileId: "${q.result}", exportType: csv, exportName: x.csv}
          - id: each
            action: etl.clean
            foreach: {virtualFileId: "${q.result}"}
            input: {virtualFileId: "${batch.virtualFileId}"}
          - id: fine
            action: etl.iterate
            input: {content: "${q.result}", maxBatchSize: 10}
    """)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    assert [str(p).split(": ", 1)[1] for p in caught.value.problems] == [
        "step out: ${q.result} is a list (etl.query's result); `virtualFileId` takes a virtual file id",
        "step each: ${q.result} is a list (etl.query's result); `foreach.virtualFileId` takes a virtual file id"]
    assert [p.line for p in caught.value.problems] == [8, 11]



def test_files_whole_outputs_batch_rows_and_fields_below_an_id_are_load_errors(tmp_path: Path) -> None:
    """Each passed validate and failed when the step ran: a ``${file:…}`` (a platform file) or a whole output
    (an object) where a virtual file id goes, in ``input`` or ``foreach``, ``${batch.rows}`` (a list) there, and a
    field below a text id. Each is now a problem at its line, naming the step and the field."""
    path = write(tmp_path, """
        name: kinds
        steps:
          - id: load
            action: etl.push
            input: {platformFile: "${file:x.csv}"}
          - id: up
            action: drive.upload_file
            input: {platformFile: "${file:x.csv}"}
          - id: file_as_id
            action: etl.clean
            input: {virtualFileId: "${file:x.csv}"}
          - id: file_each
            action: etl.clean
            foreach: {virtualFileId: "${file:x.csv}"}
            input: {virtualFileId: "${batch.virtualFileId}"}
          - id: whole_each
            action: etl.clean
            foreach: {virtualFileId: "${load}"}
            input: {virtualFileId: "${batch.virtualFileId}"}
          - id: whole_as_id
            action: etl.clean
            input: {virtualFileId: "${load}"}
          - id: rows_as_id
            action: etl.clean
            foreach: {virtualFileId: "${load.virtualFileId}"}
            input: {virtualFileId: "${batch.rows}"}
          - id: below_id
            action: etl.clean
            input: {virtualFileId: "${load.virtualFileId.0}"}
          - id: below_file_id
            action: drive.download_file
            input: {fileId: "${up.fileId.name}"}
          - id: fine
            action: etl.query
            input: {virtualFileId: "${load.virtualFileId}", query: {}}
    """)
    (tmp_path / "x.csv").write_text("a\n1\n")
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    local = "(the local file x.csv, stored as a platform file when the step runs)"
    whole = "(the whole output of etl.push: virtualFileId, rejectsFileId)"
    assert [(p.line, p.step, p.message) for p in caught.value.problems] == [
        (11, "file_as_id", f"${{file:x.csv}} is a platform file {local}; `virtualFileId` takes a virtual file id"),
        (14, "file_each",
         f"${{file:x.csv}} is a platform file {local}; `foreach.virtualFileId` takes a virtual file id"),
        (18, "whole_each", f"${{load}} is an object {whole}; `foreach.virtualFileId` takes a virtual file id: "
                           "write ${load.virtualFileId}"),
        (22, "whole_as_id",
         f"${{load}} is an object {whole}; `virtualFileId` takes a virtual file id: write ${{load.virtualFileId}}"),
        (26, "rows_as_id", "${batch.rows} is a list (the batch's rows); `virtualFileId` takes a virtual file id"),
        (29, "below_id", "${load.virtualFileId.0}: virtualFileId is text (etl.push's virtualFileId); it has no "
                         "field '0'"),
        (32, "below_file_id", "${up.fileId.name}: fileId is text (drive.upload_file's fileId); it has no field "
                              "'name'")]


def test_rows_wired_into_a_virtual_file_id_in_python_fail_as_a_400_without_the_rows(
        resources: dict[str, Any], files: Any) -> None:
    @dg.job
    def rows_as_id() -> None:
        etl_pull(virtual_file_id=etl_query(virtual_file_id=etl_push()))

    pf = files.add_bytes(b"name\nsecret-customer\n", "a.csv").to_json()
    result = rows_as_id.execute_in_process(resources=resources, raise_on_error=False, run_config={"ops": {
        "etl_push": {"config": {"platformFile": pf}}, "etl_query": {"config": {"query": {}}},
        "etl_pull": {"config": {"exportType": "csv", "exportName": "x.csv"}}}})
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "secret-customer" not in str(failure.event_specific_data.error)
    error = error_of_failed_step(failure)
    assert (error.status, error.body) == (400, {"message": "virtualFileId: expected a virtual file id (a string), "
                                                           "got list"})


def test_the_launchpad_requires_a_steps_literal_required_fields() -> None:
    """A step's op requires the fields the pipeline gives literally (the job's default config fills them),
    so a launch that drops one is refused before the run, naming the step and the field."""
    import copy

    from dagster._core.errors import DagsterInvalidConfigError

    from connector_ops.pipelines.definitions import build_definitions

    job = build_definitions().get_job_def("sales_report")
    config = copy.deepcopy(job.run_config)
    dg.validate_run_config(job, config)  # the default config is complete
    del config["ops"]["report"]["config"]["exportName"]
    with pytest.raises(DagsterInvalidConfigError) as caught:
        dg.validate_run_config(job, config)
    assert 'Missing required config entry "exportName" at path root:ops:report:config' in str(caught.value)


def test_the_launchpad_offers_a_choice_fields_choices_and_refuses_a_typo() -> None:
    """``exportType``, ``onRowError``… are enums in the launchpad (a dropdown): ``exportType: xml`` is refused
    before the run starts, not by the step after the steps before it ran and materialised their assets. The op
    still receives the string. A field the model normalises first (a join's ``type``, read in any case) takes
    what the model takes; an optional choice may be null; a list of choices is a list of the enum."""
    import copy
    from typing import Literal

    from dagster._core.errors import DagsterInvalidConfigError
    from pydantic import BaseModel

    from connector_ops.ops.factory import config_fields
    from connector_ops.pipelines.definitions import build_definitions

    job = build_definitions().get_job_def("sales_report")
    export = job.graph.node_named("report").definition.config_schema.config_type.fields["exportType"].config_type
    assert isinstance(export, dg.Enum) and export.config_values == ["json", "csv", "parquet"]
    config = copy.deepcopy(job.run_config)
    config["ops"]["report"]["config"]["exportType"] = "xml"
    with pytest.raises(DagsterInvalidConfigError, match="root:ops:report:config:exportType not in enum type"):
        dg.validate_run_config(job, config)
    push = etl_push.config_schema.config_type.fields["parameters"].config_type.fields["onRowError"].config_type
    assert isinstance(push, dg.Enum) and push.config_values == ["fail", "quarantine"]

    class Choices(BaseModel):
        one: Literal["a", "b"] | None = None
        many: list[Literal["a", "b"]] = []

    received = []

    @dg.op(config_schema=config_fields(Choices, required_ok=False))
    def takes(context) -> None:  # Dagster reads the annotation: a string under `from __future__`
        received.append(context.op_config)

    @dg.job
    def chosen() -> None:
        takes()

    chosen_config = {"one": "b", "many": ["a", "b"]}
    assert chosen.execute_in_process(run_config={"ops": {"takes": {"config": chosen_config}}}).success
    assert chosen.execute_in_process(run_config={"ops": {"takes": {"config": {"one": None}}}}).success
    assert received[0] == {"one": "b", "many": ["a", "b"]} and type(received[0]["one"]) is str
    with pytest.raises(DagsterInvalidConfigError, match="not in enum type"):
        chosen.execute_in_process(run_config={"ops": {"takes": {"config": {"many": ["c"]}}}})

    from connector_ops.etl.models import JoinSpec

    sides = {side: {"virtualFileId": side, "customId": side, "key": "x"} for side in ("left", "right")}
    assert JoinSpec.model_validate({**sides, "type": "left"}).type == "LEFT"  # read in any case
    assert not isinstance(config_fields(JoinSpec)["type"].config_type, dg.Enum)  # so the launchpad takes "left" too
