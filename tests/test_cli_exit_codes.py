"""One misconfiguration, one exit code: a bad setting exits 2 from every command, its line naming the variable.

It exited 1 from ``invoke`` (the action's 500) and 2 from ``files add``, ``gc`` and ``pipeline run`` (400), and
``CONNECTOR_OPS_DRIVE_BACKEND=bogus`` 2 from ``drive check-token`` and 1 from ``invoke drive.list``; a ``--set``
written without ``=`` exited 1 with its problem on stdout, as a problem of the pipeline file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connector_ops.cli import main

sqlite = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@sqlite
@pytest.mark.parametrize("args", [
    ["invoke", "etl.iterate", '{"content": [{"a": "1"}], "maxBatchSize": 1}'],
    ["files", "add", "{file}"],
    ["gc", "--json"],
    ["pipeline", "run", "retail_customers"],
], ids=lambda args: " ".join(args[:2]))
def test_a_bad_setting_exits_2_from_every_command_naming_the_variable(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path,
        args: list[str]) -> None:
    source = tmp_path / "a.csv"
    source.write_text("a\n1\n")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("CONNECTOR_OPS_MIN_FREE_DISK", "lots")
    assert main([a.replace("{file}", str(source)) for a in args]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "configuration error: CONNECTOR_OPS_MIN_FREE_DISK: " in last, last


@sqlite
@pytest.mark.parametrize("args", [["drive", "check-token"], ["invoke", "drive.list"]], ids=" ".join)
def test_a_bad_backend_exits_2_from_the_drive_command_and_from_invoke(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, args: list[str]) -> None:
    monkeypatch.setenv("CONNECTOR_OPS_DRIVE_BACKEND", "bogus")
    assert main(args) == 2
    said = capsys.readouterr().err
    assert "configuration error: CONNECTOR_OPS_DRIVE_BACKEND: must be one of local, google, got 'bogus'" in said


@sqlite
def test_a_set_not_written_step_field_is_a_usage_error(env: dict[str, str], capsys: pytest.CaptureFixture) -> None:
    assert main(["pipeline", "run", "retail_customers", "--set", "oops"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "'oops': write --set step.field=value" in err and "Usage:" in err


@sqlite
def test_a_set_naming_no_step_is_still_the_files_problem(env: dict[str, str], capsys: pytest.CaptureFixture) -> None:
    """Written right, it is checked against the file: a problem of the pipeline (exit 1, located)."""
    with pytest.raises(SystemExit) as exited:
        main(["pipeline", "run", "retail_customers", "--set", "nostep.field=1"])
    assert exited.value.code == 1
    assert "there is no step 'nostep'" in capsys.readouterr().out


@sqlite
def test_a_pipeline_named_after_a_file_that_does_not_load_reports_its_problem(
        env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """``pipeline run broken`` said "no pipeline file or pipeline named 'broken' (shipped files: broken, …)"
    when broken.yaml did not load: the file meant is the one named so, and its problem is what to report."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "broken.yaml").write_text("name: broken\nsteps:\n  - id: a\n    action: etl.nope\n")
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    with pytest.raises(SystemExit) as exited:
        main(["pipeline", "run", "broken"])
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert "broken.yaml:4: step a: unknown action 'etl.nope'" in out and "no pipeline" not in err


@sqlite
def test_invoke_keeps_the_actions_500_body(env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture) -> None:
    """The spec's body for the caller of the action (``invoke()`` and the magics say 500 too); only the exit code
    is the configuration error's."""
    monkeypatch.setenv("CONNECTOR_OPS_MIN_FREE_DISK", "lots")
    assert main(["invoke", "etl.iterate", '{"content": [{"a": "1"}], "maxBatchSize": 1}']) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["message"].startswith("configuration error: CONNECTOR_OPS_MIN_FREE_DISK: ")
    assert "etl.iterate failed (500): configuration error" in err
