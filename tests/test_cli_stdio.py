"""``connector-ops`` and its standard streams: a console that cannot show a character, closed or failing
stdin/stdout/stderr, a reader that stops early, interrupts. Run as the installed console script in a
subprocess, with the streams a shell would give it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = str(Path(sys.executable).parent / "connector-ops")
EURO_AND_EMOJI = {"content": [{"a": "€ 😀"}], "maxBatchSize": 1}


def run_cli(*args: str, env: dict[str, str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([SCRIPT, *args], capture_output=True, timeout=120, env={**os.environ, **env},
                          **kwargs)  # type: ignore[call-overload]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("encoding", ["ascii", "latin-1", "cp1252"])
def test_an_answer_the_console_cannot_show_is_printed_whole_as_json_escapes(env: dict[str, str],
                                                                             encoding: str) -> None:
    """It was half a JSON document, then a 500 about UnicodeEncodeError and exit 1, after the action had run."""
    run = run_cli("invoke", "etl.iterate", json.dumps(EURO_AND_EMOJI), env={**env, "PYTHONIOENCODING": encoding})
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout.decode("ascii")) == {"content": [{"a": "€ 😀"}], "hasNext": False}
    assert run.stderr == b""


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_console_that_can_show_it_gets_the_characters_themselves(env: dict[str, str]) -> None:
    run = run_cli("invoke", "etl.iterate", json.dumps(EURO_AND_EMOJI), env={**env, "PYTHONIOENCODING": "utf-8"})
    assert run.returncode == 0 and "€ 😀" in run.stdout.decode()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_human_lines_the_console_cannot_show_are_escaped_not_a_failure(env: dict[str, str]) -> None:
    """``pipeline validate``'s "ok — job" on an ASCII console."""
    shipped = Path(__file__).parents[1] / "pipelines" / "retail_customers.yaml"
    run = run_cli("pipeline", "validate", str(shipped), env={**env, "PYTHONIOENCODING": "ascii"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.decode("ascii").startswith(f"{shipped}: ok \\u2014 job retail_customers, ")
