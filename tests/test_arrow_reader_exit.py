"""A process whose Push was refused while Arrow's reading thread waited in Python exits as it should.

Arrow's streaming readers (``pyarrow.csv.open_csv``, ``pyarrow.json.open_json``) read a Python stream in a
thread of Arrow's own. A CSV line over the 16 MiB limit makes Push's columnar path give up half way and the
row reader word the 400; Arrow's thread was left waiting for more bytes inside Python, and as the interpreter
shut down it aborted the process ("Fatal Python error: PyGILState_Release", SIGABRT) in 4 of 6 runs on
PostgreSQL, instead of exiting 2. Run as users run it: the CLI, in a process of its own, several times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connector_ops.kernel.limits import MAX_VALUE
from tests.test_cli import cli

RUNS = 8


def long_line_csv(path: Path) -> Path:
    """A header and one line a few bytes over the limit, written a MiB at a time."""
    with path.open("wb") as out:
        out.write(b"a\n")
        for _ in range(MAX_VALUE >> 20):
            out.write(b"x" * (1 << 20))
        out.write(b"x" * 5 + b"\n")
    return path


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_push_refused_half_way_through_arrow_exits_2_every_time(env: dict[str, str], tmp_path: Path) -> None:
    added = cli("files", "add", str(long_line_csv(tmp_path / "long.csv")), env=env)
    assert added.returncode == 0, added.stderr
    push = json.dumps({"platformFile": json.loads(added.stdout)})
    for _ in range(RUNS):
        run = cli("invoke", "etl.push", push, env=env)
        assert "Fatal Python error" not in run.stderr
        assert run.returncode == 2, run.stderr
        assert "line 2: a line longer than 16,777,216 characters" in run.stderr
