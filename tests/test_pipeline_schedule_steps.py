"""A schedule whose step is too long for its field (``*/90 * * * *``: hourly, not every 90 minutes).

It is valid cron, so it loads, but the loader says what will happen, once, at the file's line, in the project's
warnings (``connector-ops: warning: …`` on stderr). Dagster's own ``UserWarning`` (which named a probe
schedule ``cron_check`` the file never had, and came twice) is not shown, and whether a string is valid does
not depend on the warning filters (``-W error`` made ``*/90 * * * *`` "not a valid cron string")."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from connector_ops.cli import main
from connector_ops.pipelines.dsl import Problem, compile_pipeline, load_pipeline
from connector_ops.pipelines.dsl.cron import step_notices, valid_cron
from connector_ops.pipelines.stand_ins import stand_ins
from tests.pipeline_files import write

SCHEDULED = """
name: {name}
schedule: "{cron}"
steps:
  - id: load
    action: etl.push
    input: {{platformFile: "${{file:customers.csv}}"}}
"""
#: cron -> what the notice says after naming the schedule
STEPS_TOO_LONG = {
    "*/90 * * * *": "`*/90` in the minute field matches 0 only, so cron fires it at minute 0 of each hour the other "
                    "fields allow, not every 90 minutes",
    "0 */30 * * *": "`*/30` in the hour field matches 0 only, so cron fires it in hour 0 of each day the other "
                    "fields allow, not every 30 hours",
    "0 6 */40 * *": "`*/40` in the day-of-month field matches 1 only, so cron fires it on day 1 of each month the "
                    "other fields allow, not every 40 days",
}
ADVICE = "; list the times it should fire, or split it over pipeline files with a schedule each"


def scheduled(folder: Path, cron: str, name: str = "every") -> Path:
    (folder / "customers.csv").write_text("id,name\n1,a\n", encoding="utf-8")
    return write(folder, SCHEDULED.format(name=name, cron=cron), f"{name}.yaml")


def warning_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "warning" in line.lower()]


@pytest.mark.parametrize("cron", STEPS_TOO_LONG)
def test_validate_says_once_at_the_line_what_the_schedule_does(tmp_path: Path, cron: str,
                                                               capsys: pytest.CaptureFixture) -> None:
    path = scheduled(tmp_path, cron)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["pipeline", "validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert f"{path}: ok — job every, 1 steps, schedule {cron!r}" in out
    assert warning_lines(err) == [f"connector-ops: warning: {path}:2: `schedule` {cron!r}: {STEPS_TOO_LONG[cron]}"
                                  + ADVICE]
    assert [str(w.message) for w in caught] == []  # Dagster's own, from the probe and the real schedule: gone


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_run_by_name_says_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                  capsys: pytest.CaptureFixture) -> None:
    """``pipeline run NAME`` looks through every file to find the one named (loading each), then loads it."""
    folder = tmp_path / "more"
    folder.mkdir()
    scheduled(folder, "*/90 * * * *", "every90")
    scheduled(folder, "0 */30 * * *", "other")  # looked through only: not run, nothing said of it
    monkeypatch.setenv("CONNECTOR_OPS_PIPELINES_DIR", str(folder))
    assert main(["pipeline", "run", "every90", "--no-progress"]) == 0
    notices = warning_lines(capsys.readouterr().err)
    assert len(notices) == 1 and notices[0].startswith(f"connector-ops: warning: {folder / 'every90.yaml'}:2: "
                                                       "`schedule` '*/90 * * * *': `*/90` in the minute field")


@pytest.mark.parametrize("cron", ["*/5 * * * *", "*/60 * * * *", "0 */24 * * *", "0 6 * * */7", "@hourly",
                                  "0 6 1-31/2 * *", "0 0 * jan/3 *"])
def test_a_step_that_fits_its_field_says_nothing(cron: str) -> None:
    """``*/60`` minutes does fire every 60 minutes (Dagster warns of it all the same)."""
    assert valid_cron(cron) and step_notices(cron) == []


def test_validity_is_the_same_under_any_warning_filter() -> None:
    for filter_ in ("error", "ignore", "always", "default"):
        with warnings.catch_warnings():
            warnings.simplefilter(filter_)  # type: ignore[arg-type]
            assert [valid_cron(cron) for cron in (*STEPS_TOO_LONG, "0 6 * * *", "61 * * * *", "0 6 30 2 *")] \
                == [True, True, True, True, False, False], filter_


def test_the_command_under_w_error_loads_it_and_shows_only_its_own_notice(tmp_path: Path) -> None:
    """A CI running with ``-W error::UserWarning``: the file is valid, and Dagster prints nothing of its own."""
    path = scheduled(tmp_path, "*/90 * * * *")
    for options in ([], ["-W", "error::UserWarning"]):
        done = subprocess.run([sys.executable, *options, "-m", "connector_ops.cli", "pipeline", "validate", str(path)],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, (options, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"connector-ops: warning: {path}:2: ")
        assert "cron_check" not in done.stderr and "UserWarning" not in done.stderr


def test_the_compiled_schedule_and_a_stand_in_keep_the_cron_without_dagsters_warning(tmp_path: Path) -> None:
    path = scheduled(tmp_path, "*/90 * * * *")
    broken = write(tmp_path, 'name: broken\nschedule: "*/90 * * * *"\nsteps: []\n', "broken.yaml")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = compile_pipeline(load_pipeline(path))
        standing, _ = stand_ins([Problem(str(broken), 3, "no steps")], compiled.job, taken=[])
    schedule = compiled.schedule
    assert schedule is not None and schedule.cron_schedule == "*/90 * * * *"
    assert [s.cron_schedule for s in standing] == ["*/90 * * * *"]
    assert [str(w.message) for w in caught] == []
