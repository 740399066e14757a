"""A failed step says what failed, whichever op of ours it was: the words an action's own failure has.

A pipeline step's ``${file:…}`` resolver (``<id>__input``) that met the disk guard failed with Dagster's wrapper,
and ``pipeline run`` (and the UI's failure event) showed only ``DagsterExecutionStepExecutionError: Error
occurred while executing op "load__input":`` where ``files add`` named the free space and the setting."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest

from connector_ops.environment import resources_for
from connector_ops.kernel.disk import MIN_FREE_DISK_VARIABLE
from connector_ops.kernel.errors import NotFound
from connector_ops.ops.factory import error_of_failed_step
from connector_ops.pipelines.dsl import compile_pipeline, load_pipeline


def free_bytes(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_file_step_refused_by_the_disk_guard_names_the_guard_in_the_run_and_its_failure_event(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "two.csv").write_text("id,name\n1,a\n2,b\n")
    path = tmp_path / "guarded.yaml"
    path.write_text('name: guarded\nsteps:\n'
                    '  - {id: load, action: etl.push, input: {platformFile: "${file:two.csv}"}}\n')
    job = compile_pipeline(load_pipeline(path)).job
    env = {**env, MIN_FREE_DISK_VARIABLE: str(free_bytes(tmp_path) + (1 << 40))}
    monkeypatch.setenv(MIN_FREE_DISK_VARIABLE, env[MIN_FREE_DISK_VARIABLE])
    with dg.instance_for_test() as instance:
        run = job.execute_in_process(instance=instance, resources=resources_for(environ=env), raise_on_error=False)
    (failed,) = [e for e in run.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failed.step_key == "load__input"
    error = error_of_failed_step(failed)
    assert error.status == 500 and error.message.startswith("not enough free disk space in ")
    assert f"below {MIN_FREE_DISK_VARIABLE}=" in error.message
    shown = failed.step_failure_data.user_failure_data  # what the UI's failure event shows: the same words
    assert shown is not None and "not enough free disk space in " in shown.description
    assert shown.metadata["status"].value == 500 and "Dagster" not in shown.description


def test_an_error_a_python_op_raises_is_told_in_its_own_words_and_status() -> None:
    """Below Dagster's wrapper (an op of a job written in Python, which raises as it likes): a precise error
    keeps its status, anything else is a 500 with its message."""
    @dg.op
    def missing() -> None:
        raise NotFound("virtual file vf_1 does not exist")

    @dg.op
    def broken() -> None:
        raise ValueError("the rows ran out")

    @dg.job
    def both() -> None:
        missing()
        broken()

    run = both.execute_in_process(raise_on_error=False)
    errors = {e.step_key: error_of_failed_step(e) for e in run.all_events if e.event_type_value == "STEP_FAILURE"}
    assert (errors["missing"].status, errors["missing"].message) == (404, "virtual file vf_1 does not exist")
    assert (errors["broken"].status, errors["broken"].message) == (500, "the rows ran out")
