"""Resource settings reach runs as environment references, resolved where the step runs (issue 11, item 3).

A run launched from the UI carries the Definitions' resource config; it used to hold the loading
process's resolved paths (the webserver's home). Here the loader has one home and the "worker" another:
the run's files must land in the worker's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from connector_ops.environment import pin_paths
from connector_ops.ops.resources import LocalDriveResourceAdapter, dagster_resources
from connector_ops.pipelines.definitions import build_definitions


def test_the_resource_config_holds_no_path_of_the_loading_process(env: dict[str, str]) -> None:
    defs = build_definitions()
    loader_home = env["CONNECTOR_OPS_HOME"]
    for key, resource in defs.resources.items():
        stored = json.dumps(resource.model_dump(), default=str)
        assert loader_home not in stored, key
    database = defs.resources["virtual_files"].database_url
    assert isinstance(database, dg.EnvVar) and database.env_var_name == "CONNECTOR_OPS_DATABASE_URL"


def test_a_run_writes_to_the_home_of_the_process_running_it(env: dict[str, str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    defs = build_definitions()  # loaded with the loader's home
    worker_home = tmp_path / "worker-home"
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(worker_home))
    result = defs.resolve_job_def("first_etl").execute_in_process()
    assert result.success
    report = result.output_for_node("etl_pull", "platform_file")
    assert (worker_home / "files" / report["id"]).is_file()
    assert not (Path(env["CONNECTOR_OPS_HOME"]) / "files").exists()


def test_an_explicit_setting_wins_over_the_environment(env: dict[str, str], tmp_path: Path) -> None:
    chosen = tmp_path / "chosen-drive"
    with dg.build_resources({"drive": LocalDriveResourceAdapter(drive_dir=str(chosen))}) as built:
        assert Path(built.drive.drive_dir) == chosen
    with dg.build_resources({"drive": dagster_resources(keys=["drive"])["drive"]}) as built:
        assert Path(built.drive.drive_dir) == Path(env["CONNECTOR_OPS_HOME"]) / "drive"


def test_the_home_is_resolved_once_and_inherited(tmp_path: Path) -> None:
    environ = {"CONNECTOR_OPS_HOME": "relative-home"}
    home = pin_paths(environ)
    assert home.is_absolute() and environ["CONNECTOR_OPS_HOME"] == str(home) == str(Path.cwd() / "relative-home")
    # the code location pins it when it loads: a process it starts resolves the same home from any directory
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_OPS_")}
    script = ("import os, subprocess, sys; import connector_ops.pipelines.definitions;"
              "print(subprocess.run([sys.executable, '-c', 'import os; print(os.environ[\"CONNECTOR_OPS_HOME\"])'],"
              " cwd='/', capture_output=True, text=True).stdout.strip())")
    child = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=clean, capture_output=True,
                           text=True, timeout=120, check=True)
    assert child.stdout.strip().splitlines()[-1] == str(tmp_path / ".connector_ops")


def test_a_distributed_run_on_single_host_storage_fails_at_its_first_step(env: dict[str, str],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs where steps start (a Celery worker sets CONNECTOR_OPS_EXECUTOR=celery for itself)."""
    job = build_definitions().resolve_job_def("first_etl")  # steps run here, in a "worker" of a celery run:
    monkeypatch.setenv("CONNECTOR_OPS_EXECUTOR", "celery")
    result = job.execute_in_process(raise_on_error=False)
    assert not result.success
    [init] = [e for e in result.all_events if e.event_type_value == "RESOURCE_INIT_FAILURE"]
    text = repr(init.event_specific_data.error)
    assert "platform_files: platform files are written to the folder" in text
    assert "CONNECTOR_OPS_EXECUTOR=celery the steps of a run execute on several hosts" in text
    assert "CONNECTOR_OPS_SHARED_STORAGE=true" in text
    started = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
    assert started == set()  # nothing ran: no file half-made on the wrong host

    monkeypatch.setenv("CONNECTOR_OPS_SHARED_STORAGE", "true")  # every worker mounts the same folders
    assert job.execute_in_process().success


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("CONNECTOR_OPS_DRIVE_BACKEND", "local", "drive: the local drive is the folder"),
    ("CONNECTOR_OPS_MAIL_BACKEND", "outbox", "mail: the outbox is the folder"),
])
def test_each_single_host_resource_names_what_to_configure(env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                                           variable: str, value: str, message: str) -> None:
    monkeypatch.setenv("CONNECTOR_OPS_EXECUTOR", "celery")
    monkeypatch.setenv(variable, value)
    key = message.split(":")[0]
    with dg.DagsterInstance.ephemeral() as instance, pytest.raises(Exception) as caught, \
            dg.build_resources({key: dagster_resources(keys=[key])[key]}, instance=instance):
        pass
    assert message in str(caught.value) or message in str(caught.value.__cause__)


def test_platform_files_in_postgresql_are_fit_for_many_hosts(env: dict[str, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECTOR_OPS_FILES_BACKEND", "database")
    adapter = dagster_resources(keys=["platform_files"])["platform_files"]
    monkeypatch.setenv("CONNECTOR_OPS_EXECUTOR", "celery")
    if env["CONNECTOR_OPS_DATABASE_URL"].startswith("sqlite"):
        with dg.DagsterInstance.ephemeral() as instance, pytest.raises(Exception) as caught, \
                dg.build_resources({"platform_files": adapter}, instance=instance):
            pass
        assert "platform files are in a SQLite file of one host" in str(caught.value.__cause__ or caught.value)
    else:
        with dg.build_resources({"platform_files": adapter}) as built:
            assert built.platform_files.files_database_url == env["CONNECTOR_OPS_DATABASE_URL"]
